//! `docs/openapi.json` is the document `evc serve` publishes at `/api/v1/openapi.json`, so the
//! API can be read (and clients generated) without running a server. A change to the handlers
//! that changes the document fails here until the file is written again with `EVC_BLESS=1`.

use std::path::Path;

#[test]
fn the_committed_openapi_document_is_current() -> Result<(), Box<dyn std::error::Error>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
    let current = format!("{}\n", evc_serve::openapi().to_pretty_json()?);
    if std::env::var_os("EVC_BLESS").is_some() {
        std::fs::write(&path, &current)?;
        return Ok(());
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == current,
        "docs/openapi.json is stale: review the change, then run \
         `EVC_BLESS=1 cargo test -p evc-serve --test document`"
    );
    Ok(())
}
