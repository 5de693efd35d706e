//! Feeds arbitrary bytes to the contract parser as every kind of contract file.
//! Run: `cargo +nightly fuzz run parse_contract -- -max_total_time=600` (from the repository root).
#![no_main]

use evc_codegen::loader::parse_bytes;
use evc_codegen::structure::FileKind;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for kind in FileKind::ALL {
        let mut diagnostics = Vec::new();
        let _ = parse_bytes("events/fuzz.case.yaml", data.to_vec(), kind, &mut diagnostics);
    }
});
