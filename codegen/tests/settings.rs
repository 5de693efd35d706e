//! The project's runtime settings (`payload_policy`, `envelope`, `dispatcher` of `evc.yaml`)
//! reach the generated registry: `registry.json`'s `settings` and the static `REGISTRY` the
//! runtime starts from (`runtime/tests/settings.rs` shows each taking effect).

mod support;

use std::fs;
use std::path::Path;

use evc_codegen::ContractSet;
use evc_codegen::emit::{self, Layout};

const CHANGED: &str = "\
project: evc_fixture
payload_policy:
  denied_keys: [internal_memo]
  credential_key_names: [session_key]
  default_max_bytes: 1000
  hard_max_bytes: 2000
envelope:
  require_tenant_scope: true
defaults:
  retry_policy: default.transient
dispatcher:
  batch_size: 7
  lease: 3s
  heartbeat: 2s
  max_attempts: 2
  backoff_ceiling: 100ms
";

/// `registry.json` and `src/contracts.rs` of the base fixture, with `evc.yaml` replaced.
fn generate(project_file: Option<&str>) -> (serde_json::Value, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    support::copy_fixture(&fixtures.join("base"), dir.path());
    if let Some(text) = project_file {
        fs::write(dir.path().join("evc.yaml"), text).expect("write evc.yaml");
    }
    let loaded = ContractSet::load(dir.path()).expect("loads");
    let artifacts = emit::render_all(&loaded.contracts, &Layout::default()).expect("renders");
    let text_of = |suffix: &str| {
        artifacts
            .iter()
            .find(|a| a.path.to_string_lossy().ends_with(suffix))
            .map(|a| a.contents.clone())
            .expect("artifact")
    };
    let manifest = serde_json::from_str(&text_of("registry.json")).expect("JSON");
    (manifest, text_of("src/contracts.rs"))
}

#[test]
fn changed_settings_reach_the_manifest_and_the_static_registry() {
    let (manifest, rust) = generate(Some(CHANGED));
    assert_eq!(
        manifest["settings"],
        serde_json::json!({
            "payload_policy": {
                "denied_keys": ["internal_memo"],
                "credential_key_names": ["session_key"],
                "default_max_bytes": 1000,
                "hard_max_bytes": 2000,
            },
            "envelope": {"require_tenant_scope": true, "require_trace_context": true},
            "dispatcher": {
                "batch_size": 7,
                "lease": "3s",
                "heartbeat": "2s",
                "max_attempts": 2,
                "backoff_ceiling": "100ms",
            },
        })
    );
    let flat: String = rust.split_whitespace().collect::<Vec<_>>().join(" ");
    for expected in [
        "denied_keys: &[\"internal_memo\"]",
        "credential_key_names: &[\"session_key\"]",
        "default_max_bytes: 1000,",
        "hard_max_bytes: 2000,",
        "require_tenant_scope: true,",
        "batch_size: 7,",
        "lease_ms: 3000,",
        "heartbeat_ms: 2000,",
        "max_attempts: 2,",
        "backoff_ceiling_ms: 100,",
    ] {
        assert!(flat.contains(expected), "no `{expected}` in the registry");
    }
}

#[test]
fn settings_stay_outside_the_registry_digest() {
    // The database's mirror holds no settings: a settings change needs no registry migration.
    let (base, base_rust) = generate(None);
    // (`default_max_bytes` is every event type's cap that sets none, in the digest.)
    let same_caps = CHANGED
        .replace("default_max_bytes: 1000", "default_max_bytes: 4096")
        .replace("hard_max_bytes: 2000", "hard_max_bytes: 8192");
    let (changed, _) = generate(Some(&same_caps));
    assert_eq!(base["digest"], changed["digest"]);
    assert_ne!(base["settings"], changed["settings"]);
    // Without a dispatcher block or envelope section: the contract format's defaults.
    assert_eq!(base["settings"]["dispatcher"]["batch_size"], 50);
    assert_eq!(base["settings"]["envelope"]["require_tenant_scope"], false);
    assert!(base_rust.contains("require_tenant_scope: false"));
}
