//! evc-macros: compile-time checks of event and consumer code against the contracts.
//!
//! A thin shell over evc-codegen's loader; the macros arrive with the compile-time guarantees.
