//! evc for applications: the one dependency for the runtime, the compile-time checks and the
//! crates generated code names.
//!
//! An application depends on `evc` and on the crate `evc generate` writes for its contracts
//! (docs/guide.md). The generated crate names everything through `::evc`: the runtime items
//! re-exported here (`PgStore`, `Dispatcher`, `HandlerContext`, ...) and the crates re-exported
//! beside them (`evc::serde`, `evc::serde_json`, `evc::schemars`, `evc::uuid`, `evc::chrono`,
//! `evc::sqlx`).
//!
//! Code that does not use the generated crate can still be checked against the contracts:
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
