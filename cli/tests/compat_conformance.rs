//! Confluent Schema Registry's JSON Schema compatibility cases, judged by the real `evc compat`.
//!
//! Each case becomes two contract directories, written the way a user would: a project with
//! open payload content and `compat: backward`, and one event type whose version 1.0.0 is the
//! case's `original_schema`. The head adds version 1.1.0 with the `update_schema`. Schemas of the
//! draft-07 files that name no dialect get the draft-07 `$schema`, as Confluent reads them.
//! `evc compat --format json head --against-dir base` then gives the verdict, compared with the
//! case's `compatible` (Confluent's BACKWARD verdict).
//!
//! No case may be refused at load, agreement must be at least 95%, and every disagreement must
//! be listed with its reason in the CLI table of `docs/compat.md`; a listed case that agrees
//! again fails the test too. The data is read from `EVC_CONFORMANCE_DIR` (default
//! `<repo>/../shared/conformance`); when it is absent the test says so and passes, except under
//! `CI=true`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

#[path = "../../codegen/tests/conformance_data/mod.rs"]
mod conformance_data;

/// The corpus files and whether their schemas are draft-07 when they name no dialect.
const FILES: &[(&str, bool)] = &[
    ("diff-schema-examples.json", true),
    ("diff-combined-schema-examples.json", true),
    ("diff-schema-examples-2020-12.json", false),
    ("diff-combined-schema-examples-2020-12.json", false),
];

const DRAFT_07: &str = "http://json-schema.org/draft-07/schema#";

/// The heading of the docs section that lists the CLI disagreements.
const DOCS_SECTION: &str = "## Conformance through `evc compat`";

const PROJECT: &str = "project: conformance
payload_policy:
  denied_keys: []
  credential_key_names: []
  content: open
defaults:
  compat: backward
";

const EVENT_NAME: &str = "corpus.case";

/// The repository root.
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn corpus_dir() -> Option<PathBuf> {
    conformance_data::folder("confluent-json-schema-diff", FILES[0].0)
}

/// The schema as the contract holds it: draft-07 files name their dialect.
fn contract_schema(schema: &Value, draft_07: bool) -> Value {
    let mut schema = schema.clone();
    if draft_07
        && let Value::Object(map) = &mut schema
        && !map.contains_key("$schema")
    {
        map.insert("$schema".to_owned(), Value::String(DRAFT_07.to_owned()));
    }
    schema
}

/// The event file with `versions`; each schema is written as JSON, which YAML reads as a flow
/// mapping.
fn event_file(versions: &[(&str, &Value)]) -> String {
    let mut text = format!(
        "event: {EVENT_NAME}\ndescription: One Confluent compatibility case.\nproducer_class: corpus\nversions:\n"
    );
    for (version, schema) in versions {
        text.push_str(&format!("  - version: {version}\n    schema: {schema}\n"));
    }
    text
}

fn write_contracts(dir: &Path, versions: &[(&str, &Value)]) {
    std::fs::create_dir_all(dir.join("events")).expect("mkdir");
    std::fs::write(dir.join("evc.yaml"), PROJECT).expect("write evc.yaml");
    std::fs::write(
        dir.join(format!("events/{EVENT_NAME}.yaml")),
        event_file(versions),
    )
    .expect("write event");
}

/// What `evc compat` said about one case.
enum Outcome {
    /// The report: true when it passed.
    Judged(bool),
    /// The contracts did not load, or the tool failed: the exit code and output.
    Refused(String),
}

fn run_case(case: &Value, draft_07: bool) -> Outcome {
    let dir = tempfile::tempdir().expect("temp dir");
    let original = contract_schema(&case["original_schema"], draft_07);
    let update = contract_schema(&case["update_schema"], draft_07);
    let (base, head) = (dir.path().join("base"), dir.path().join("head"));
    write_contracts(&base, &[("1.0.0", &original)]);
    write_contracts(&head, &[("1.0.0", &original), ("1.1.0", &update)]);
    let output = Command::new(env!("CARGO_BIN_EXE_evc"))
        .arg("compat")
        .arg(&head)
        .arg("--against-dir")
        .arg(&base)
        .args(["--format", "json", "--color", "never"])
        .output()
        .expect("evc runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Option<Value> = serde_json::from_str(&stdout).ok();
    match (output.status.code(), report) {
        (Some(code @ (0 | 100)), Some(report)) => {
            let passed = report["passed"].as_bool().expect("`passed` is a bool");
            assert_eq!(passed, code == 0, "exit code and verdict agree: {stdout}");
            Outcome::Judged(passed)
        }
        (code, _) => Outcome::Refused(format!(
            "exit {code:?}: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        )),
    }
}

/// `(file, index)` pairs the docs list as intended disagreements of `evc compat`.
fn documented() -> BTreeSet<(String, usize)> {
    let docs = repository().join("docs/compat.md");
    let text = std::fs::read_to_string(&docs).expect("docs/compat.md readable");
    text.lines()
        .skip_while(|line| line.trim() != DOCS_SECTION)
        .skip(1)
        .take_while(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            // Rows of the table: | file | case | description | evc | Confluent | reason |
            if cells.len() != 8 {
                return None;
            }
            let file = cells.get(1)?.trim_matches('`');
            let index = cells.get(2)?.parse().ok()?;
            file.ends_with(".json").then(|| (file.to_owned(), index))
        })
        .collect()
}

#[test]
fn confluent_corpus_through_the_cli() {
    let Some(dir) = corpus_dir() else {
        return;
    };
    let mut refused = Vec::new();
    let mut disagreements = BTreeSet::new();
    let (mut total, mut agree) = (0, 0);
    for (file, draft_07) in FILES {
        let cases = conformance_data::read_cases(&dir.join(file));
        // One `evc` process per case, two at a time.
        let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
            let halves: Vec<_> = cases
                .chunks(cases.len().div_ceil(2).max(1))
                .map(|part| {
                    scope.spawn(move || {
                        part.iter()
                            .map(|case| run_case(case, *draft_07))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            halves
                .into_iter()
                .flat_map(|half| half.join().expect("worker"))
                .collect()
        });
        let mut file_agree = 0;
        for (index, (case, outcome)) in cases.iter().zip(outcomes).enumerate() {
            let expected = case["compatible"].as_bool().expect("compatible is a bool");
            let description = case["description"].as_str().unwrap_or_default();
            match outcome {
                Outcome::Refused(output) => {
                    refused.push(format!("{file} #{index} {description:?}: {output}"));
                }
                Outcome::Judged(passed) if passed == expected => file_agree += 1,
                Outcome::Judged(passed) => {
                    println!(
                        "  disagree {file} #{index} {description:?}: evc {passed}, confluent {expected}"
                    );
                    disagreements.insert(((*file).to_owned(), index));
                }
            }
        }
        println!("{file}: {file_agree}/{} agree", cases.len());
        total += cases.len();
        agree += file_agree;
    }
    let percent = 100.0 * agree as f64 / total as f64;
    println!("total: {agree}/{total} ({percent:.1}%) agree through `evc compat`");
    assert!(
        refused.is_empty(),
        "{} cases refused:\n{}",
        refused.len(),
        refused.join("\n")
    );
    let listed = documented();
    let unexplained: Vec<_> = disagreements.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&disagreements).collect();
    assert!(
        unexplained.is_empty(),
        "disagreements not listed in docs/compat.md ({DOCS_SECTION}): {unexplained:?}"
    );
    assert!(
        stale.is_empty(),
        "docs/compat.md ({DOCS_SECTION}) lists cases that now agree: {stale:?}"
    );
    assert!(
        percent >= 95.0,
        "agreement {percent:.1}% is below the 95% goal"
    );
}

#[test]
fn trailing_commas_are_dropped_outside_strings_only() {
    assert_eq!(
        conformance_data::without_trailing_commas(r#"{"a": [1, 2, ], "b": ",}", }"#),
        r#"{"a": [1, 2 ], "b": ",}" }"#
    );
}
