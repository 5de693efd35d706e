//! The editor schemas in `docs/schema/` are the ones the loader derives, every reference
//! contract validates against its schema, and every contract file names its schema in a
//! `yaml-language-server` modeline.

use std::fs;
use std::path::{Path, PathBuf};

use evc_codegen::SourceFile;
use evc_codegen::structure::FileKind;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn kind_of(relative: &str) -> FileKind {
    match relative {
        "evc.yaml" => FileKind::Project,
        "retry-policies.yaml" => FileKind::RetryPolicies,
        "topics.yaml" => FileKind::Topics,
        "executor-classes.yaml" => FileKind::ExecutorClasses,
        "schedules.yaml" => FileKind::Schedules,
        path if path.starts_with("events/") => FileKind::Event,
        path if path.starts_with("consumers/") => FileKind::Consumer,
        other => panic!("unexpected contract file {other}"),
    }
}

fn contract_files() -> Vec<String> {
    let contracts = root().join("contracts");
    let mut files = Vec::new();
    for entry in fs::read_dir(&contracts).expect("contracts/") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.path().is_dir() {
            for inner in fs::read_dir(entry.path()).expect("folder") {
                let inner = inner.expect("entry");
                files.push(format!("{name}/{}", inner.file_name().to_string_lossy()));
            }
        } else {
            files.push(name);
        }
    }
    files.sort();
    files
}

#[test]
fn checked_in_schemas_match_the_format_types() {
    for kind in FileKind::ALL {
        let path = root().join(format!("docs/schema/{}.schema.json", kind.name()));
        let on_disk =
            fs::read_to_string(&path).unwrap_or_else(|_| panic!("{} is missing", path.display()));
        let derived = serde_json::to_string_pretty(&kind.schema()).expect("serializes") + "\n";
        assert_eq!(
            on_disk,
            derived,
            "{} is stale: run `cargo evc schema --out docs/schema`",
            path.display()
        );
    }
}

#[test]
fn every_reference_contract_validates_against_its_editor_schema_and_names_it() {
    let files = contract_files();
    assert!(files.len() >= 35, "only {} contract files", files.len());
    for relative in files {
        let kind = kind_of(&relative);
        let text = fs::read_to_string(root().join("contracts").join(&relative)).expect("readable");
        let depth = relative.matches('/').count();
        let modeline = format!(
            "# yaml-language-server: $schema={}docs/schema/{}.schema.json",
            "../".repeat(depth + 1),
            kind.name()
        );
        assert_eq!(
            text.lines().next(),
            Some(modeline.as_str()),
            "{relative}: first line must be the modeline"
        );

        let schema_text =
            fs::read_to_string(root().join(format!("docs/schema/{}.schema.json", kind.name())))
                .expect("schema file");
        let schema: serde_json::Value = serde_json::from_str(&schema_text).expect("schema is JSON");
        let validator = jsonschema::draft202012::new(&schema).expect("schema compiles");
        let tree = evc_codegen::yaml::parse(&SourceFile::new(relative.clone(), text))
            .expect("parses")
            .expect("not empty");
        let errors: Vec<String> = validator
            .iter_errors(&tree.to_json())
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{relative}: {errors:?}");
    }
}

#[test]
fn the_editor_schema_rejects_an_unknown_key() {
    let schema = FileKind::Event.schema();
    let validator = jsonschema::draft202012::new(&schema).expect("compiles");
    let instance = serde_json::json!({"event": "a.b", "description": "x", "producer_class": "p", "versions": [], "owner": "me"});
    assert!(!validator.is_valid(&instance));
}
