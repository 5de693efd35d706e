//! The SARIF 2.1.0 format, for GitHub code scanning and other SARIF viewers.
//!
//! One run, whose driver lists every [`CompatRule`]; one result per finding, located in the new
//! contracts relative to the repository root (`uriBaseId` `SRCROOT`).

use serde_json::{Value, json};

use super::{RenderOptions, display_path};
use crate::compat::report::{CompatRule, Finding, Report, Severity};
use crate::digest::sha256_hex;

/// The published schema of SARIF 2.1.0.
const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";
/// The crate's repository (`repository` in Cargo.toml); SARIF wants absolute URIs.
const REPOSITORY: &str = env!("CARGO_PKG_REPOSITORY");
/// Where the rules are documented (the repository's `docs/compat.md`).
const DOCS: &str = concat!(env!("CARGO_PKG_REPOSITORY"), "/blob/main/docs/compat.md");

pub(super) fn render(report: &Report, options: &RenderOptions) -> String {
    let rules: Vec<Value> = CompatRule::ALL
        .iter()
        .map(|rule| rule_json(*rule))
        .collect();
    let results: Vec<Value> = report
        .findings
        .iter()
        .map(|finding| result_json(finding, options))
        .collect();
    let mut driver = json!({
        "name": "evc compat",
        "semanticVersion": env!("CARGO_PKG_VERSION"),
        "rules": rules,
    });
    if !REPOSITORY.is_empty() {
        driver["informationUri"] = json!(DOCS);
    }
    let document = json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": driver },
            "columnKind": "unicodeCodePoints",
            "results": results,
            "properties": {
                "base": report.base,
                "head": report.head,
                "passed": report.passed(),
            },
        }],
    });
    let mut text = serde_json::to_string_pretty(&document).unwrap_or_default();
    text.push('\n');
    text
}

fn level(severity: Severity) -> &'static str {
    match severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Note => "note",
    }
}

fn rule_json(rule: CompatRule) -> Value {
    let mut json = json!({
        "id": rule.id(),
        "name": rule.id(),
        "shortDescription": { "text": rule.summary() },
        "defaultConfiguration": { "level": level(rule.severity()) },
    });
    if !REPOSITORY.is_empty() {
        json["helpUri"] = json!(format!("{DOCS}#{}", rule.id().to_ascii_lowercase()));
    }
    json
}

fn result_json(finding: &Finding, options: &RenderOptions) -> Value {
    let mut text = finding.message.clone();
    if !finding.fix.is_empty() {
        text.push_str(" Fix: ");
        text.push_str(&finding.fix);
    }
    let path = display_path(finding, options);
    let mut artifact = serde_json::Map::new();
    if path.starts_with('/') {
        artifact.insert(
            "uri".to_owned(),
            json!(format!("file://{}", uri_path(&path))),
        );
    } else {
        artifact.insert("uri".to_owned(), json!(uri_path(&path)));
        artifact.insert("uriBaseId".to_owned(), json!("SRCROOT"));
    }
    let mut physical = serde_json::Map::new();
    physical.insert("artifactLocation".to_owned(), Value::Object(artifact));
    if finding.location.line > 0 {
        physical.insert(
            "region".to_owned(),
            json!({
                "startLine": finding.location.line,
                "startColumn": finding.location.column.max(1),
            }),
        );
    }
    let mut result = json!({
        "ruleId": finding.rule,
        "level": level(finding.severity),
        "message": { "text": text },
        "locations": [{ "physicalLocation": physical }],
        "partialFingerprints": { "evcCompatFinding/v1": fingerprint(finding) },
        "properties": {
            "event": finding.event,
            "baseVersion": finding.base_version,
            "version": finding.version,
            "direction": finding.direction.map(|direction| direction.as_str()),
            "pointer": finding.pointer,
            "consumers": finding.consumers,
            "witness": finding.witness,
        },
    });
    if let Some(index) = CompatRule::ALL
        .iter()
        .position(|rule| rule.id() == finding.rule)
    {
        result["ruleIndex"] = json!(index);
    }
    result
}

/// A hash of what identifies a finding across runs: rule, event, versions and pointer (not the
/// line, which moves when unrelated lines change).
fn fingerprint(finding: &Finding) -> String {
    let key = [
        finding.rule,
        finding.event.as_str(),
        finding.base_version.as_deref().unwrap_or_default(),
        finding.version.as_deref().unwrap_or_default(),
        finding.pointer.as_deref().unwrap_or_default(),
    ]
    .join("\u{0}");
    let mut hash = sha256_hex(&key);
    hash.truncate(32);
    hash
}

/// Percent-encodes what may not stand in a URI path (spaces, `%`, `#`, `?`, non-ASCII).
fn uri_path(path: &str) -> String {
    crate::uri::percent_encode(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_paths_are_percent_encoded() {
        assert_eq!(
            uri_path("contracts/events/a b#.yaml"),
            "contracts/events/a%20b%23.yaml"
        );
        assert_eq!(uri_path("é"), "%C3%A9");
    }
}
