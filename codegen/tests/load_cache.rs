//! A [`LoadCache`] shared by two loads (as `evc compat` shares one between the head and the
//! base) changes nothing a load reports: a file reused from the cache is one with the same
//! bytes, and a payload schema check is reused only under the same payload policy.

mod support;

use std::fs;
use std::path::Path;

use evc_codegen::{ContractSet, Diagnostic, LoadCache, LoadError, Rule};

/// The repository's own contracts, copied into a fresh directory.
fn own_contracts() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let contracts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts");
    support::copy_fixture(&contracts, dir.path());
    dir
}

/// What a load reports: the model and its warnings, or its diagnostics.
fn report(loaded: Result<evc_codegen::Loaded, LoadError>) -> Result<String, Vec<Diagnostic>> {
    match loaded {
        Ok(loaded) => Ok(format!("{:?}\n{:?}", loaded.contracts, loaded.warnings)),
        Err(LoadError::Invalid { diagnostics, .. }) => Err(diagnostics),
        Err(error) => panic!("the load failed: {error}"),
    }
}

/// Replaces `from` by `to` in the file at `path` under `dir`, once.
fn edit(dir: &Path, path: &str, from: &str, to: &str) {
    let path = dir.join(path);
    let text = fs::read_to_string(&path).expect("read a contract file");
    assert!(text.contains(from), "`{from}` is in {}", path.display());
    fs::write(&path, text.replacen(from, to, 1)).expect("write a contract file");
}

fn rules(diagnostics: &[Diagnostic]) -> Vec<(Rule, String)> {
    diagnostics
        .iter()
        .map(|d| (d.rule, d.location.to_string()))
        .collect()
}

#[test]
fn a_load_through_a_warm_cache_reports_what_a_load_without_one_does() {
    let dir = own_contracts();
    let cache = LoadCache::new();
    let cold = report(ContractSet::load_with(dir.path(), &cache));
    let warm = report(ContractSet::load_with(dir.path(), &cache));
    let uncached = report(ContractSet::load(dir.path()));
    assert!(uncached.is_ok(), "the repository's contracts load");
    assert_eq!(cold, uncached);
    assert_eq!(warm, uncached);
}

/// Loads the repository's contracts through a cache, then a copy with `from` replaced by `to`
/// in `path` through the same cache: the copy must report what it reports without a cache, a
/// denied key in `events/iu.born.yaml` among it. The unchanged set loads as before after it.
fn a_changed_head_is_judged_afresh(path: &str, from: &str, to: &str) {
    let base = own_contracts();
    let head = own_contracts();
    edit(head.path(), path, from, to);
    let cache = LoadCache::new();
    assert!(report(ContractSet::load_with(base.path(), &cache)).is_ok());

    let cached = report(ContractSet::load_with(head.path(), &cache));
    let uncached = report(ContractSet::load(head.path()));
    let diagnostics = cached.clone().expect_err("the change is seen and refused");
    assert!(
        rules(&diagnostics)
            .iter()
            .any(|(rule, at)| *rule == Rule::DeniedKeyInSchema && at.contains("iu.born.yaml")),
        "{:?}",
        rules(&diagnostics)
    );
    assert_eq!(cached, uncached);
    assert!(report(ContractSet::load_with(base.path(), &cache)).is_ok());
}

#[test]
fn a_file_changed_since_the_cached_load_is_read_again() {
    // `iu.born` gains a denied key in its first version's payload.
    a_changed_head_is_judged_afresh(
        "events/iu.born.yaml",
        "        iu_unit_id:\n",
        "        body_text:\n          type: string\n        iu_unit_id:\n",
    );
}

#[test]
fn a_changed_payload_policy_checks_unchanged_schemas_again() {
    // Only `evc.yaml` changes: `born_at`, a property of the unchanged `iu.born`, is now denied.
    a_changed_head_is_judged_afresh(
        "evc.yaml",
        "denied_keys: [body_text,",
        "denied_keys: [born_at, body_text,",
    );
}

#[test]
fn a_schema_with_its_keys_reordered_keeps_its_own_order() {
    let base = own_contracts();
    let head = own_contracts();
    // The same schema, keyword for keyword, written in another order: equal as JSON values,
    // but the model (and what compat shows from it) keeps the order written.
    edit(
        head.path(),
        "events/iu.born.yaml",
        "      type: object\n      additionalProperties: false\n",
        "      additionalProperties: false\n      type: object\n",
    );
    let cache = LoadCache::new();
    let base_report = report(ContractSet::load_with(base.path(), &cache));
    assert!(base_report.is_ok());

    let cached = report(ContractSet::load_with(head.path(), &cache));
    let uncached = report(ContractSet::load(head.path()));
    assert!(uncached.is_ok());
    assert_ne!(uncached, base_report, "the order shows in the model");
    assert_eq!(cached, uncached);
}

#[test]
fn a_base_is_loaded_for_comparison_without_the_rust_generators_check() {
    let base = own_contracts();
    let clashing = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/invalid/rust_name_collision_event_types");
    support::copy_fixture(&clashing, base.path());

    let refused = report(ContractSet::load(base.path())).expect_err("`a.b_c` and `a_b.c` clash");
    assert!(!refused.is_empty());
    assert!(refused.iter().all(|d| d.rule == Rule::RustNameCollision));
    let compared = ContractSet::load_base_with(base.path(), &LoadCache::new())
        .expect("a base is only compared");
    assert!(compared.contracts.events.contains_key("a.b_c"));
    assert!(compared.contracts.events.contains_key("a_b.c"));
    // Such a set is not generated: the generator still finds the clash itself.
    let error = evc_codegen::emit::rust::items_source(&compared.contracts, "::evc")
        .expect_err("the names clash");
    assert!(error.to_string().contains("a.b_c"), "{error}");
}
