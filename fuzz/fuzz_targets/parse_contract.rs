//! Feeds arbitrary bytes to the contract parser as every kind of contract file, and renders
//! the findings as `evc check` does (escaping, long-line windows, miette).
//! Run: `cargo +nightly fuzz run parse_contract -- -max_total_time=600` (from the repository root).
#![no_main]

use evc_codegen::Sources;
use evc_codegen::diagnostic::render_human;
use evc_codegen::loader::parse_bytes;
use evc_codegen::structure::FileKind;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for kind in FileKind::ALL {
        let mut diagnostics = Vec::new();
        let parsed = parse_bytes("events/fuzz.case.yaml", data.to_vec(), kind, &mut diagnostics);
        let mut sources = Sources::default();
        if let Some(source) = parsed.source {
            sources.insert(source);
        }
        let text = render_human(&diagnostics, &sources, false);
        assert!(!text.contains('\u{1b}'), "raw ESC in rendered diagnostics");
    }
});
