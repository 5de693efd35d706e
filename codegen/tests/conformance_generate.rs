//! Whatever `evc check` accepts generates and compiles, on schemas nobody wrote for evc: every
//! schema of Confluent Schema Registry's JSON Schema compatibility cases (both sides of each
//! case) becomes one event type of one contract set, with open payload content; the set must
//! load without a finding, generate, and its Rust must compile (as a module of
//! `tests/generated-fixtures`, the `property` feature).
//!
//! The data is read from `EVC_CONFORMANCE_DIR` (default `<repo>/../shared/conformance`); when it
//! is absent the test says so and passes, except under `CI=true`.

mod conformance_data;
#[path = "support/fixture_crate.rs"]
mod fixture_crate;

use std::fs;
use std::path::Path;

use evc_codegen::ContractSet;
use evc_codegen::emit::{self, Layout};
use serde_json::{Value, json};

/// The corpus files, and whether a schema that names no dialect is draft-07 there (Confluent
/// reads the older files as draft-07).
const FILES: &[(&str, bool)] = &[
    ("diff-schema-examples.json", true),
    ("diff-combined-schema-examples.json", true),
    ("diff-schema-examples-2020-12.json", false),
    ("diff-combined-schema-examples-2020-12.json", false),
];

const PROJECT: &str = "project: conformance
payload_policy:
  denied_keys: []
  credential_key_names: []
  content: open
";

/// Writes every schema of the corpus as an event type of one contract set; returns how many.
fn write_contract_set(corpus: &Path, dir: &Path) -> usize {
    fs::create_dir_all(dir.join("events")).expect("events dir");
    fs::write(dir.join("evc.yaml"), PROJECT).expect("evc.yaml");
    let mut count = 0;
    for (file, draft_07) in FILES {
        for (index, case) in conformance_data::read_cases(&corpus.join(file))
            .iter()
            .enumerate()
        {
            for side in ["original_schema", "update_schema"] {
                let mut schema = case[side].clone();
                if *draft_07 && let Value::Object(map) = &mut schema {
                    map.entry("$schema")
                        .or_insert_with(|| json!("http://json-schema.org/draft-07/schema#"));
                }
                let name = format!("corpus.c{count:04}");
                let event = json!({
                    "event": name,
                    "description": format!("{file} case {index}, {side}"),
                    "producer_class": "corpus",
                    "versions": [{"version": "1.0.0", "schema": schema}],
                });
                // JSON is YAML: the contract files are written as JSON.
                fs::write(
                    dir.join(format!("events/{name}.yaml")),
                    serde_json::to_string_pretty(&event).expect("json"),
                )
                .expect("write event");
                count += 1;
            }
        }
    }
    count
}

#[test]
fn every_corpus_schema_loads_generates_and_compiles() {
    let Some(corpus) = conformance_data::folder("confluent-json-schema-diff", FILES[0].0) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let count = write_contract_set(&corpus, dir.path());
    assert!(count >= 500, "only {count} schemas in the corpus");
    let loaded = ContractSet::load(dir.path()).unwrap_or_else(|error| {
        panic!("the corpus was refused at load: {error}");
    });
    assert!(
        loaded.warnings.is_empty(),
        "warnings on the corpus: {:#?}",
        loaded.warnings
    );
    assert_eq!(loaded.contracts.events.len(), count);
    let artifacts = emit::render_all(&loaded.contracts, &Layout::default())
        .unwrap_or_else(|error| panic!("check accepted the corpus, generate failed: {error}"));
    let rust = artifacts
        .iter()
        .find(|artifact| artifact.path.ends_with("src/contracts.rs"))
        .expect("the Rust items");

    let file = fixture_crate::workspace_root().join("target/evc-conformance/contracts.rs");
    fs::create_dir_all(file.parent().expect("a parent")).expect("create the directory");
    fs::write(&file, &rust.contents).expect("write the Rust items");
    let output =
        fixture_crate::cargo_test("property", &["--no-run"], &[("EVC_PROPERTY_CASES", &file)]);
    assert!(
        output.status.success(),
        "the generated Rust of the corpus does not compile ({}):\n{}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}
