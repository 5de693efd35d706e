//! evc for applications: one dependency for the runtime and the compile-time checks.
//!
//! ```ignore
//! #[derive(evc::Event, serde::Serialize)]
//! #[evc(event = "iu.born", version = "1.0.0")]
//! struct Born { /* fields checked against the contract at compile time */ }
//!
//! #[evc::consumer("worker.notification.iu")]
//! impl Notifier { /* on_<event> methods checked against the subscriptions */ }
//! ```
//!
//! The macros read the contracts in `<crate>/contracts` (or `$EVC_CONTRACTS_DIR`, or
//! `#[evc(contracts = "path")]`); see docs/macros.md.

pub use evc_macros::{Event, consumer};
pub use evc_runtime::*;

// The crates generated code and the runtime's API name, at the versions evc was built with:
// an application depends on `evc` alone and reaches them as `evc::uuid`, `evc::chrono`, ...
pub use chrono;
pub use schemars;
pub use serde;
pub use serde_json;
pub use sqlx;
pub use uuid;
