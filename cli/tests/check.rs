//! `evc check` end to end: exit codes, the summary line and the JSON format.

mod support;

use std::process::{Command, Output};
use support::{copy_dir, repository};

fn evc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_evc"))
        .args(args)
        .current_dir(repository())
        .output()
        .expect("evc runs")
}

#[test]
fn the_reference_contracts_pass_with_a_one_line_summary() {
    let output = evc(&["check"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    let summary = stdout.lines().last().expect("a summary line");
    assert!(
        summary.starts_with("ok: 33 event types, 45 versions, "),
        "{summary}"
    );
    assert!(
        summary
            .contains("7 consumers, 4 retry policies, 7 executor classes, 6 topics, 2 schedules"),
        "{summary}"
    );
}

#[test]
fn findings_exit_100_and_json_names_file_line_column_rule_and_fix() {
    let dir = tempfile::tempdir().expect("temp dir");
    copy_dir(&repository().join("contracts"), dir.path());
    let consumer = dir.path().join("consumers/audit.yaml");
    let text = std::fs::read_to_string(&consumer).expect("audit consumer");
    std::fs::write(&consumer, text.replace("handler:", "handlr:")).expect("write");

    let dir_arg = dir.path().to_str().expect("utf-8 path");
    let output = evc(&["check", dir_arg, "--format", "json"]);
    assert_eq!(output.status.code(), Some(100));
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON output");
    assert_eq!(document["ok"], false);
    let diagnostics = document["diagnostics"].as_array().expect("diagnostics");
    let rules: Vec<&str> = diagnostics
        .iter()
        .filter_map(|d| d["rule"].as_str())
        .collect();
    assert_eq!(rules, ["MISSING_KEY", "UNKNOWN_KEY"], "{document:#}");
    let unknown = &diagnostics[1];
    assert_eq!(unknown["file"], "consumers/audit.yaml");
    assert!(unknown["line"].as_u64().expect("line") > 1);
    assert_eq!(unknown["column"], 1);
    assert_eq!(
        unknown["fix"],
        "did you mean `handler`? Otherwise remove the key"
    );

    let text_output = evc(&["check", dir_arg, "--color", "never"]);
    assert_eq!(text_output.status.code(), Some(100));
    let stdout = String::from_utf8_lossy(&text_output.stdout);
    assert!(stdout.contains("consumers/audit.yaml:"), "{stdout}");
    assert!(stdout.contains("UNKNOWN_KEY"), "{stdout}");
    assert!(
        stdout
            .trim_end()
            .ends_with(&format!("failed: 2 errors, 0 warnings in `{dir_arg}`")),
        "{stdout}"
    );
}

#[test]
fn an_unreadable_directory_exits_1() {
    let output = evc(&["check", "/nonexistent/contracts"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot check `/nonexistent/contracts`"),
        "{stderr}"
    );
}

#[test]
fn schema_prints_the_event_file_schema() {
    let output = evc(&["schema", "event"]);
    assert_eq!(output.status.code(), Some(0));
    let schema: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(schema["title"], "evc event type (events/<event.type>.yaml)");
    assert_eq!(schema["additionalProperties"], false);
}

#[test]
fn asyncapi_drift_is_reported_in_both_files() {
    let root = tempfile::tempdir().expect("temp dir");
    copy_dir(
        &repository().join("contracts"),
        &root.path().join("contracts"),
    );
    copy_dir(
        &repository().join("asyncapi"),
        &root.path().join("asyncapi"),
    );
    let contracts = root.path().join("contracts");
    let dir_arg = contracts.to_str().expect("utf-8 path");
    assert_eq!(evc(&["check", dir_arg]).status.code(), Some(0));

    // A new event type that the document does not describe yet.
    let born = std::fs::read_to_string(contracts.join("events/iu.born.yaml")).expect("event");
    std::fs::write(
        contracts.join("events/iu.reborn.yaml"),
        born.replace("event: iu.born", "event: iu.reborn"),
    )
    .expect("write");
    let output = evc(&["check", dir_arg, "--format", "json"]);
    assert_eq!(output.status.code(), Some(100));
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let drift: Vec<&serde_json::Value> = document["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .filter(|d| d["rule"] == "ASYNCAPI_MISSING_CHANNEL")
        .collect();
    assert_eq!(drift.len(), 1, "{document:#}");
    assert_eq!(drift[0]["file"], "asyncapi/asyncapi.yaml");
    assert_eq!(drift[0]["related"][0]["file"], "events/iu.reborn.yaml");
    assert!(
        drift[0]["fix"]
            .as_str()
            .expect("fix")
            .contains("evc generate")
    );
}

#[test]
fn a_byte_order_mark_does_not_shift_the_columns_of_an_asyncapi_document() {
    let root = tempfile::tempdir().expect("temp dir");
    copy_dir(
        &repository().join("contracts"),
        &root.path().join("contracts"),
    );
    std::fs::create_dir(root.path().join("asyncapi")).expect("mkdir");
    let document = root.path().join("asyncapi/asyncapi.yaml");
    let contracts = root.path().join("contracts");
    let dir_arg = contracts.to_str().expect("utf-8 path");
    // A syntax error on the first line, where a mark would count as a column.
    let broken = "x: a: b\nasyncapi: 3.0.0\n";
    let diagnostics = |text: &str| {
        std::fs::write(&document, text).expect("write");
        let output = evc(&["check", dir_arg, "--format", "json"]);
        assert_eq!(output.status.code(), Some(100));
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
        report["diagnostics"].clone()
    };
    let plain = diagnostics(broken);
    assert_eq!(plain[0]["rule"], "YAML_SYNTAX", "{plain:#}");
    assert_eq!(plain[0]["line"], 1, "{plain:#}");
    assert_eq!(diagnostics(&format!("\u{feff}{broken}")), plain);
}
