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
//! impl Notifier { /* one `async fn on_<event>(&self, cx, payload)` per subscription */ }
//! // `Dispatcher::from_registry(store).serve(Notifier)` runs it.
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

/// What the macros' expansions call; not an API.
#[doc(hidden)]
pub mod __private {
    use evc_runtime::{FailureClass, HandlerError};

    /// Whether two strings are equal, in a constant (the payload-type assertions of
    /// `#[evc::consumer]`).
    pub const fn same_str(a: &str, b: &str) -> bool {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        let mut i = 0;
        while i < a.len() {
            if a[i] != b[i] {
                return false;
            }
            i += 1;
        }
        true
    }

    /// The major of a `MAJOR.MINOR.PATCH` version, in a constant; `None` when the text does not
    /// start with digits followed by a dot or its end.
    pub const fn major(version: &str) -> Option<u64> {
        let bytes = version.as_bytes();
        let mut major: u64 = 0;
        let mut i = 0;
        while i < bytes.len() && bytes[i] != b'.' {
            if !bytes[i].is_ascii_digit() {
                return None;
            }
            major = match major.checked_mul(10) {
                Some(shifted) => match shifted.checked_add((bytes[i] - b'0') as u64) {
                    Some(next) => next,
                    None => return None,
                },
                None => return None,
            };
            i += 1;
        }
        if i == 0 { None } else { Some(major) }
    }

    /// Whether `version`'s major is one of `majors`, in a constant.
    pub const fn major_in(version: &str, majors: &[u64]) -> bool {
        let Some(major) = major(version) else {
            return false;
        };
        let mut i = 0;
        while i < majors.len() {
            if majors[i] == major {
                return true;
            }
            i += 1;
        }
        false
    }

    /// Whether a handler whose payload type is of version `handled` takes a delivery of
    /// version `delivered`: the subscription admits it and it has the handled major (one
    /// payload type reads one major).
    pub fn accepts(delivered: &str, subscribed: &[&str], handled: &str) -> bool {
        subscribed.contains(&delivered)
            && major(delivered).is_some()
            && major(delivered) == major(handled)
    }

    /// A handler's answer, typed: `#[evc::consumer]` passes each handler's result through it so
    /// a handler returning another type is a type mismatch at its return type.
    pub fn handled(outcome: Result<(), HandlerError>) -> Result<(), HandlerError> {
        outcome
    }

    /// Decodes a delivery's payload into the handler's payload type; a payload that does not
    /// fit is a [`FailureClass::Schema`] failure (`payload_does_not_match_type`).
    ///
    /// # Errors
    /// When the payload does not deserialize into `T`.
    pub fn decode<T: serde::de::DeserializeOwned>(
        payload: &serde_json::Value,
    ) -> Result<T, HandlerError> {
        T::deserialize(payload)
            .map_err(|_| HandlerError::new(FailureClass::Schema, "payload_does_not_match_type"))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn constants_compare_strings_and_read_majors() {
            assert!(same_str("iu.born", "iu.born"));
            assert!(!same_str("iu.born", "iu.bor"));
            assert!(!same_str("iu.born", "iu.bron"));
            assert_eq!(major("1.0.0"), Some(1));
            assert_eq!(major("12.3.4"), Some(12));
            assert_eq!(major("7"), Some(7));
            assert_eq!(major(""), None);
            assert_eq!(major(".1"), None);
            assert_eq!(major("x.1"), None);
            assert_eq!(major("99999999999999999999.0.0"), None);
            assert!(major_in("2.1.0", &[1, 2]));
            assert!(!major_in("3.0.0", &[1, 2]));
            assert!(!major_in("v1", &[1]));
        }

        #[test]
        fn a_handler_takes_subscribed_versions_of_its_own_major() {
            let subscribed = ["1.0.0", "1.1.0", "2.0.0"];
            assert!(accepts("1.1.0", &subscribed, "1.0.0"));
            assert!(!accepts("2.0.0", &subscribed, "1.0.0"));
            assert!(!accepts("1.2.0", &subscribed, "1.0.0"));
        }

        #[test]
        fn payloads_that_do_not_fit_are_schema_failures() {
            let value: Result<Vec<u32>, _> = decode(&serde_json::json!([1, 2]));
            assert_eq!(value, Ok(vec![1, 2]));
            let error = decode::<Vec<u32>>(&serde_json::json!({"a": 1})).expect_err("no fit");
            assert_eq!(error.class, FailureClass::Schema);
            assert_eq!(error.code, "payload_does_not_match_type");
        }
    }
}
