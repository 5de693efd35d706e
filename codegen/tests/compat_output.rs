//! Every output format of `evc compat` on one hand-built report: snapshots, the SARIF schema,
//! well-formed JUnit XML and escaped GitHub commands.
//!
//! The SARIF schema is read from `EVC_CONFORMANCE_DIR` (default `<repo>/../shared/conformance`).
//! When it is absent the schema test fails under `CI=true` and is skipped with a note otherwise.

mod conformance_data;

use std::path::PathBuf;

use evc_codegen::compat::output::{self, Format, RenderOptions};
use evc_codegen::compat::{
    CompatRule, Direction, EventSummary, Finding, Report, Severity, Witness,
};
use evc_codegen::source::Location;

fn location(file: &str, line: u32, column: u32) -> Location {
    Location {
        line,
        column,
        ..Location::file(file)
    }
}

/// Three event types: `iu.born` with an error (and witness) and a note, `iu.edited` with a
/// warning whose message has a line break, a comma, a colon and XML metacharacters, and
/// `iu.linked` without findings.
fn report() -> Report {
    Report {
        base: "git:1a2b3c4d5e6f".to_owned(),
        head: "dir:contracts".to_owned(),
        findings: vec![
            Finding {
                rule: "REQUIRED_ADDED",
                severity: Severity::Error,
                event: "iu.born".to_owned(),
                base_version: Some("1.1.0".to_owned()),
                version: Some("1.2.0".to_owned()),
                direction: Some(Direction::Backward),
                pointer: Some("#/required/4".to_owned()),
                location: location("events/iu.born.yaml", 12, 7),
                message: "reader 1.2.0 requires `axis_count`, which writer 1.1.0 may leave out"
                    .to_owned(),
                fix: "make `axis_count` optional, or publish the change as 2.0.0 with a migration_policy"
                    .to_owned(),
                consumers: vec!["audit".to_owned(), "worker.dot.iu_axis".to_owned()],
                witness: Some(Witness {
                    payload: serde_json::json!({"iu_unit_id": "0b9e5d0e-8f0e-4c1e-9a57-6f3d2d0c1a11"}),
                    valid_for: "writer 1.1.0".to_owned(),
                    rejected_by: "reader 1.2.0".to_owned(),
                }),
            },
            Finding {
                rule: "BUMP_SUGGESTED",
                severity: Severity::Note,
                event: "iu.born".to_owned(),
                base_version: Some("1.1.0".to_owned()),
                version: Some("1.2.0".to_owned()),
                direction: None,
                pointer: None,
                location: location("events/iu.born.yaml", 0, 0),
                message: "the change needs a major bump".to_owned(),
                fix: "publish it as 2.0.0".to_owned(),
                consumers: Vec::new(),
                witness: None,
            },
            Finding {
                rule: "COMPAT_MODE_WEAKENED",
                severity: Severity::Warning,
                event: "iu.edited".to_owned(),
                base_version: None,
                version: None,
                direction: None,
                pointer: Some("#/compat".to_owned()),
                location: location("events/iu.edited.yaml", 5, 9),
                message: "the mode went from `full` to `backward`,\nso <forward> checks & 100% of 'old' readers: gone"
                    .to_owned(),
                fix: "keep `compat: full`".to_owned(),
                consumers: Vec::new(),
                witness: None,
            },
        ],
        events: vec![
            EventSummary {
                event: "iu.born".to_owned(),
                mode: "backward".to_owned(),
                checked: vec!["1.1.0".to_owned(), "1.2.0".to_owned()],
                suggested_bump: Some("major".to_owned()),
            },
            EventSummary {
                event: "iu.edited".to_owned(),
                mode: "backward".to_owned(),
                checked: Vec::new(),
                suggested_bump: None,
            },
            EventSummary {
                event: "iu.linked".to_owned(),
                mode: "forward".to_owned(),
                checked: Vec::new(),
                suggested_bump: None,
            },
        ],
    }
}

fn render(format: Format) -> String {
    output::render(&report(), format, false)
}

#[test]
fn text_lists_errors_then_warnings_then_notes_then_the_table() {
    let text = render(Format::Text);
    let error = text.find("error[REQUIRED_ADDED]").expect("error");
    let warning = text.find("warning[COMPAT_MODE_WEAKENED]").expect("warning");
    let note = text.find("note[BUMP_SUGGESTED]").expect("note");
    assert!(error < warning && warning < note, "{text}");
    assert!(text.contains("--> contracts/events/iu.born.yaml:12:7 (#/required/4)"));
    assert!(!text.contains('\u{1b}'), "no colors: {text}");
    assert!(
        text.contains("(and 1 event type without new versions or findings)"),
        "{text}"
    );
    insta::assert_snapshot!("text", text);
}

#[test]
fn text_colors_only_when_asked() {
    let colored = output::render(&report(), Format::Text, true);
    assert!(colored.contains("\u{1b}[1;31merror"), "{colored}");
}

#[test]
fn text_of_a_clean_report_says_compatible() {
    let clean = Report {
        findings: Vec::new(),
        ..report()
    };
    let text = output::render(&clean, Format::Text, false);
    assert!(
        text.ends_with("compatible: no findings (dir:contracts against git:1a2b3c4d5e6f)\n"),
        "{text}"
    );
    let warnings_only = Report {
        findings: report()
            .findings
            .into_iter()
            .filter(|f| f.severity != Severity::Error)
            .collect(),
        ..report()
    };
    let text = output::render(&warnings_only, Format::Text, false);
    assert!(
        text.contains("compatible: 0 errors, 1 warning, 1 note"),
        "{text}"
    );
}

#[test]
fn json_adds_the_verdict_and_counts() {
    let text = render(Format::Json);
    let document: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(document["passed"], false);
    assert_eq!(document["errors"], 1);
    assert_eq!(document["warnings"], 1);
    assert_eq!(document["notes"], 1);
    assert_eq!(document["findings"][0]["location"]["line"], 12);
    insta::assert_snapshot!("json", text);
}

#[test]
fn github_messages_escape_line_breaks_and_percent_signs() {
    let text = render(Format::Github);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "one line per finding: {text}");
    assert!(lines[0].starts_with(
        "::error file=contracts/events/iu.born.yaml,line=12,col=7,title=REQUIRED_ADDED iu.born 1.1.0 -> 1.2.0::"
    ), "{}", lines[0]);
    let warning = lines[2];
    assert!(warning.starts_with("::warning "), "{warning}");
    assert!(
        // The line feed from the contracts is written as `\n` before GitHub's escaping, so it
        // cannot end the command; `%` is GitHub-escaped.
        warning.contains("`backward`,\\nso <forward> checks & 100%25 of 'old' readers: gone"),
        "{warning}"
    );
    // The note has no line: no line or col property.
    assert!(
        lines[1].starts_with(
            "::notice file=contracts/events/iu.born.yaml,title=BUMP_SUGGESTED iu.born 1.1.0 -> 1.2.0::"
        ),
        "{}",
        lines[1]
    );
    insta::assert_snapshot!("github", text);
}

#[test]
fn github_property_values_escape_commas_and_colons() {
    let mut report = report();
    report.findings[0].location.file = "events/a,b:c.yaml".to_owned();
    let text = output::render(&report, Format::Github, false);
    assert!(
        text.starts_with("::error file=contracts/events/a%2Cb%3Ac.yaml,line=12"),
        "{text}"
    );
}

#[test]
fn junit_is_well_formed_and_has_a_suite_per_event_type() {
    let text = render(Format::Junit);
    check_well_formed(&text);
    assert!(
        text.contains("<testsuites name=\"evc compat\" tests=\"3\" failures=\"1\" errors=\"0\">")
    );
    assert_eq!(text.matches("<testsuite ").count(), 3);
    assert!(text.contains("<testcase name=\"iu.linked\" classname=\"evc.compat\"/>"));
    assert_eq!(text.matches("<failure ").count(), 1);
    assert!(text.contains("type=\"REQUIRED_ADDED\""));
    insta::assert_snapshot!("junit", text);
}

#[test]
fn the_well_formedness_check_rejects_broken_xml() {
    for broken in [
        "<a><b></a>",
        "<a>&</a>",
        "<a x=\"1\" x=\"2\"/>",
        "<a x=\"<\"/>",
        "<a></a><b/>",
        "<a>",
    ] {
        let result = std::panic::catch_unwind(|| check_well_formed(broken));
        assert!(result.is_err(), "accepted {broken}");
    }
}

#[test]
fn sarif_validates_against_the_official_schema() {
    let text = render(Format::Sarif);
    let document: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(document["version"], "2.1.0");
    let run = &document["runs"][0];
    assert_eq!(run["tool"]["driver"]["name"], "evc compat");
    let rules = run["tool"]["driver"]["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), CompatRule::ALL.len());
    let results = run["results"].as_array().expect("results");
    assert_eq!(results.len(), 3);
    let first = &results[0];
    assert_eq!(first["ruleId"], "REQUIRED_ADDED");
    assert_eq!(
        rules[first["ruleIndex"].as_u64().expect("index") as usize]["id"],
        "REQUIRED_ADDED"
    );
    assert_eq!(first["level"], "error");
    let physical = &first["locations"][0]["physicalLocation"];
    assert_eq!(
        physical["artifactLocation"]["uri"],
        "contracts/events/iu.born.yaml"
    );
    assert_eq!(physical["artifactLocation"]["uriBaseId"], "SRCROOT");
    assert_eq!(physical["region"]["startLine"], 12);
    assert_eq!(physical["region"]["startColumn"], 7);
    assert!(
        results[1]["locations"][0]["physicalLocation"]
            .get("region")
            .is_none(),
        "no region without a line"
    );
    assert_eq!(first["properties"]["consumers"][1], "worker.dot.iu_axis");
    // Fingerprints are stable and tell findings apart.
    let fingerprint = |result: &serde_json::Value| result["partialFingerprints"].clone();
    let again: serde_json::Value = serde_json::from_str(&render(Format::Sarif)).expect("JSON");
    assert_eq!(
        fingerprint(first),
        fingerprint(&again["runs"][0]["results"][0])
    );
    assert_ne!(fingerprint(first), fingerprint(&results[1]));

    let Some(dir) = conformance_dir() else {
        return;
    };
    let schema_text =
        std::fs::read_to_string(dir.join("sarif-schema-2.1.0.json")).expect("schema readable");
    let schema: serde_json::Value = serde_json::from_str(&schema_text).expect("schema is JSON");
    // The OASIS schema declares draft-04.
    let validator = jsonschema::draft4::options()
        .should_validate_formats(true)
        .build(&schema)
        .expect("the SARIF schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(&document)
        .map(|error| format!("{}: {error}", error.instance_path()))
        .collect();
    assert!(errors.is_empty(), "schema errors: {errors:#?}");

    // An absolute contract directory gives file:// URIs, which validate too.
    let options = RenderOptions {
        color: false,
        path_prefix: Some("/abs/contracts".to_owned()),
    };
    let absolute: serde_json::Value =
        serde_json::from_str(&output::render_with(&report(), Format::Sarif, &options))
            .expect("JSON");
    assert_eq!(
        absolute["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
        "file:///abs/contracts/events/iu.born.yaml"
    );
    assert!(validator.is_valid(&absolute));
}

#[test]
fn every_format_has_a_name() {
    let names: Vec<&str> = Format::ALL.iter().map(|format| format.name()).collect();
    assert_eq!(names, ["text", "json", "github", "sarif", "junit"]);
}

fn conformance_dir() -> Option<PathBuf> {
    conformance_data::folder("sarif", "sarif-schema-2.1.0.json")
}

/// Panics unless `text` is well-formed XML as far as this format uses it: one root element,
/// properly nested tags, quoted and unique attributes, no `<` in attribute values, and only known
/// entity or character references.
fn check_well_formed(text: &str) {
    let text = text
        .strip_prefix("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
        .unwrap_or(text);
    let mut stack: Vec<&str> = Vec::new();
    let mut roots = 0;
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(tag) = rest.strip_prefix('<') {
            let end = tag.find('>').expect("an unclosed tag");
            let inner = &tag[..end];
            rest = &tag[end + 1..];
            if let Some(name) = inner.strip_prefix('/') {
                let open = stack.pop().expect("a closing tag without an opening one");
                assert_eq!(open, name.trim(), "mismatched closing tag");
                continue;
            }
            let self_closing = inner.ends_with('/');
            let inner = inner.trim_end_matches('/');
            let (name, attributes) = inner.split_once(' ').unwrap_or((inner, ""));
            assert!(
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c)),
                "bad tag name `{name}`"
            );
            check_attributes(attributes);
            if stack.is_empty() {
                roots += 1;
                assert_eq!(roots, 1, "more than one root element");
            }
            if !self_closing {
                stack.push(name);
            }
        } else {
            let end = rest.find('<').unwrap_or(rest.len());
            let content = &rest[..end];
            if stack.is_empty() {
                assert!(content.trim().is_empty(), "text outside the root element");
            }
            check_references(content);
            rest = &rest[end..];
        }
    }
    assert!(stack.is_empty(), "unclosed elements: {stack:?}");
    assert_eq!(roots, 1, "no root element");
}

fn check_attributes(mut attributes: &str) {
    let mut names = Vec::new();
    loop {
        attributes = attributes.trim_start();
        if attributes.is_empty() {
            return;
        }
        let (name, value) = attributes.split_once("=\"").expect("attribute=\"value\"");
        let end = value.find('"').expect("a closing quote");
        let value_text = &value[..end];
        assert!(!value_text.contains('<'), "`<` in an attribute value");
        check_references(value_text);
        assert!(!names.contains(&name), "duplicate attribute `{name}`");
        names.push(name);
        attributes = &value[end + 1..];
    }
}

fn check_references(text: &str) {
    for (index, _) in text.match_indices('&') {
        let reference = &text[index + 1..];
        let end = reference.find(';').expect("an unterminated reference");
        let name = &reference[..end];
        let known = ["amp", "lt", "gt", "quot", "apos"].contains(&name)
            || name.strip_prefix('#').is_some_and(|digits| {
                !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
            });
        assert!(known, "unknown reference `&{name};`");
    }
}
