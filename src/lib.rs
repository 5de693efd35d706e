//! The repository's own user of evc, as a library: the tour of the reference contracts
//! ([`tour`]), run by `cargo run`, `examples/outbox.rs` and the root tests.

pub mod tour;
