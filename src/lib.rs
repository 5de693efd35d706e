//! The repository's own user of evc, as a library: the end-to-end example's flow ([`demo`]),
//! shared by `examples/outbox.rs` and the root tests.

pub mod demo;
