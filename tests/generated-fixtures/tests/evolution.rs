//! The producer of `codegen/tests/source_compat.rs`, compiled against the contracts in the
//! crate's `evolution` module: built only by that test (the `evolution` feature, with
//! `EVC_EVOLUTION_PRODUCER` naming the producer file).

use evc_generated_fixtures::evolution::payloads::*;

include!(env!("EVC_EVOLUTION_PRODUCER"));
