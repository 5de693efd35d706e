//! The project's runtime settings (`payload_policy`, `envelope`, `dispatcher` of `evc.yaml`)
//! and the consumers' `handler_timeout` reach the generated registry: `registry.json`'s
//! `settings` and the static `REGISTRY` the runtime starts from (`runtime/tests/settings.rs`
//! and `runtime/tests/handler_timeout.rs` show them taking effect).

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
    match project_file {
        Some(text) => generate_with(&[("evc.yaml", text)]),
        None => generate_with(&[]),
    }
}

/// `registry.json` and `src/contracts.rs` of the base fixture, with `files` (relative path,
/// contents) written over it.
fn generate_with(files: &[(&str, &str)]) -> (serde_json::Value, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    support::copy_fixture(&fixtures.join("base"), dir.path());
    for (path, text) in files {
        fs::write(dir.path().join(path), text).expect("write a contract file");
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

const INDEXER_WITH_TIMEOUT: &str = "\
consumer: worker.indexer
description: Indexes units.
executor_kind: dot
subscribes:
  - unit.created@^1
  - unit.edited@>=1, <3
handler: transactional
handler_timeout: 45s
";

#[test]
fn a_handler_timeout_reaches_the_registry_outside_its_digest() {
    let (base, base_rust) = generate(None);
    let (timed, rust) = generate_with(&[("consumers/worker.indexer.yaml", INDEXER_WITH_TIMEOUT)]);
    assert_eq!(
        timed["settings"]["handler_timeouts"],
        serde_json::json!({"worker.indexer": "45s"})
    );
    // Only consumers that set one are listed; none set: no key at all.
    assert!(base["settings"].get("handler_timeouts").is_none());
    // A runtime setting: the database's registry mirror does not hold it.
    assert_eq!(base["digest"], timed["digest"]);
    let flat: String = rust.split_whitespace().collect::<Vec<_>>().join(" ");
    let indexer = flat
        .split("name: \"worker.indexer\"")
        .nth(1)
        .expect("worker.indexer's descriptor");
    let own = indexer.split("subscriptions:").next().expect("fields");
    assert!(
        own.contains("handler_timeout_ms: ::std::option::Option::Some(45000),"),
        "no timeout in: {own}"
    );
    let base_flat: String = base_rust.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(!base_flat.contains("handler_timeout_ms: ::std::option::Option::Some("));
}
