//! Where the external conformance data lives, for the tests that read it.

use std::path::{Path, PathBuf};

/// The folder `name` of the conformance data (`EVC_CONFORMANCE_DIR`, default
/// `<repo>/../shared/conformance`), when it holds `marker`. When it does not, the test is
/// skipped with a message, except under `CI=true`, where that is a failure.
pub(crate) fn folder(name: &str, marker: &str) -> Option<PathBuf> {
    let root = std::env::var_os("EVC_CONFORMANCE_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/conformance"),
        PathBuf::from,
    );
    let dir = root.join(name);
    if dir.join(marker).is_file() {
        return Some(dir);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "conformance data missing at {} (set EVC_CONFORMANCE_DIR)",
        dir.display()
    );
    eprintln!(
        "skipping: no conformance data at {} (set EVC_CONFORMANCE_DIR)",
        dir.display()
    );
    None
}
