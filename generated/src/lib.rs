//! Generated code for `contracts/`. The code generator lands with `evc generate`; until then this
//! crate only re-exports the runtime it will build on.

pub use evc_runtime as runtime;
