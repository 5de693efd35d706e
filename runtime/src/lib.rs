//! evc-runtime: what running code needs from the contracts.
//!
//! This crate holds the `'static` registry descriptors that generated code fills in; the
//! envelope, payload policy, stores and dispatcher build on them. It depends on neither
//! evc-codegen nor any code-generation crate.

pub mod registry;

pub use registry::{EventDescriptor, Registry, VersionDescriptor};
