//! The AsyncAPI document rendered for the reference contracts: valid against the official
//! AsyncAPI 3.0.0 JSON Schema, clean under the cross-object checks, byte-stable, and in parity
//! with the contracts it came from.
//!
//! Conformance data (the official schema) is read from `EVC_CONFORMANCE_DIR` (default
//! `<repo>/../shared/conformance`). When it is absent the schema test fails under `CI=true` and is
//! skipped with a note otherwise.

mod conformance_data;

use std::path::{Path, PathBuf};

use evc_codegen::ContractSet;
use evc_codegen::emit::asyncapi::{self, check_document};
use evc_codegen::emit::{GENERATED_NOTICE, Layout};

fn contracts() -> ContractSet {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts");
    ContractSet::load(dir)
        .expect("the reference contracts load")
        .contracts
}

fn conformance_dir() -> Option<PathBuf> {
    conformance_data::folder("asyncapi", "3.0.0-without-id.json")
}

fn official_validator(dir: &Path) -> jsonschema::Validator {
    let text = std::fs::read_to_string(dir.join("3.0.0-without-id.json")).expect("schema readable");
    let schema: serde_json::Value = serde_json::from_str(&text).expect("schema is JSON");
    jsonschema::draft7::options()
        .should_validate_formats(true)
        .build(&schema)
        .expect("the official schema compiles")
}

/// Parses YAML with the same parser `evc` uses for contracts.
fn yaml_to_json(path: &str, text: &str) -> serde_json::Value {
    let file = evc_codegen::SourceFile::new(path, text);
    evc_codegen::yaml::parse(&file)
        .unwrap_or_else(|error| panic!("{path} parses: {}", error.to_short_string()))
        .expect("not empty")
        .to_json()
}

#[test]
fn the_document_validates_against_the_official_schema() {
    let set = contracts();
    let artifact = asyncapi::render(&set, &Layout::default()).expect("renders");
    let doc = yaml_to_json("asyncapi/asyncapi.yaml", &artifact.contents);
    assert_eq!(doc, asyncapi::render_json(&set).expect("renders as JSON"));
    let problems = check_document(&doc);
    assert!(problems.is_empty(), "cross-object problems: {problems:#?}");
    let Some(dir) = conformance_dir() else {
        return;
    };
    let validator = official_validator(&dir);
    let errors: Vec<String> = validator
        .iter_errors(&doc)
        .map(|error| format!("{}: {error}", error.instance_path()))
        .collect();
    assert!(errors.is_empty(), "schema errors: {errors:#?}");
}

#[test]
fn the_document_is_byte_stable_and_carries_the_notice() {
    let set = contracts();
    let first = asyncapi::render(&set, &Layout::default()).expect("renders");
    let second = asyncapi::render(&contracts(), &Layout::default()).expect("renders");
    assert_eq!(first, second);
    assert_eq!(first.path, Path::new("asyncapi/asyncapi.yaml"));
    assert_eq!(
        first.contents.lines().next(),
        Some(format!("# {GENERATED_NOTICE}").as_str())
    );
}

#[test]
fn the_document_covers_the_registry() {
    let set = contracts();
    let doc = asyncapi::render_json(&set).expect("renders");
    let channels = doc["channels"].as_object().expect("channels");
    assert_eq!(channels.len(), set.events.len());
    let messages = doc["components"]["messages"].as_object().expect("messages");
    assert_eq!(messages.len(), set.version_count());
    let operations = doc["operations"].as_object().expect("operations");
    let receives = set
        .consumers
        .values()
        .map(|consumer| consumer.subscriptions.len())
        .sum::<usize>();
    assert_eq!(operations.len(), set.events.len() + receives);

    // `audit` accepts `step.failed@>=1,<3`: both majors; a consumer on `^1` gets 1.x only.
    let audit = &doc["operations"]["audit-receive-step.failed"];
    assert_eq!(audit["action"], "receive");
    assert_eq!(audit["messages"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        audit["x-evc-retry-policy"]["name"],
        "default.transient.5x.30s.exp"
    );
    assert_eq!(audit["x-evc-retry-policy"]["max_attempts"], 5);
    assert!(
        audit["x-evc-dead-letter"].get("table").is_none(),
        "a store detail"
    );
    assert_eq!(audit["x-evc-dead-letter"]["status"], "dead");
    assert_eq!(audit["x-evc-handler"], "transactional");
    assert_eq!(audit["x-evc-mode"], "live");
    assert_eq!(audit["x-evc-ordering"], "none");

    let message = &doc["components"]["messages"]["step.failed-v2.0.0"];
    assert_eq!(message["x-evc-version"], "2.0.0");
    assert_eq!(
        message["payload"]["schemaFormat"],
        "application/schema+json;version=draft-2020-12"
    );
    assert!(message["x-evc-migration-policy"].is_object());

    // Payload-local references point into the document.
    let merged =
        serde_json::to_string(&doc["components"]["messages"]["iu.merged-v1.0.0"]).expect("json");
    assert!(
        merged.contains("#/components/messages/iu.merged-v1.0.0/payload/schema/$defs/unit_ref"),
        "{merged}"
    );
}

#[test]
fn the_rendered_document_is_in_parity_with_its_contracts() {
    let set = contracts();
    let artifact = asyncapi::render(&set, &Layout::default()).expect("renders");
    let drift = asyncapi::parity(&set, "asyncapi/asyncapi.yaml", &artifact.contents);
    assert!(
        drift.is_empty(),
        "{}",
        drift
            .iter()
            .map(evc_codegen::Diagnostic::to_short_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
}
