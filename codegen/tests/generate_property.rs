//! Whatever `evc check` accepts generates Rust that compiles.
//!
//! The property: for a contract directory with random names (event types, consumers, properties,
//! enum values; drawn from pools of case variants, Rust keywords, digits, punctuation and
//! non-ASCII letters, so names often collide after case conversion), either `evc check` refuses
//! it, or `evc generate` renders every artifact and the generated Rust compiles under
//! `#![deny(warnings, missing_docs)]` against the real runtime. Compiling one crate per case
//! would take minutes, so the test renders every case first and then compiles all accepted ones
//! at once as modules of `tests/generated-fixtures` (its `property` feature includes the file
//! named by `EVC_PROPERTY_CASES`), in the workspace's own target directory so dependencies are
//! already built (`support/fixture_crate.rs`). The cases come from proptest's deterministic runner (a fixed seed), so every
//! run checks the same contracts; there is no shrinking, and a failure prints the case.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use evc_codegen::emit::{self, Layout};
use evc_codegen::{ContractSet, LoadError};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

#[path = "support/fixture_crate.rs"]
mod fixture_crate;

/// Contract sets drawn; the test compiles at most [`MAX_COMPILED`] of those accepted.
const CASES: usize = 160;
const MAX_COMPILED: usize = 40;

/// First segments of event types and consumers (mostly valid, some refused by the format).
const HEADS: &[&str] = &[
    "a", "b", "h", "ab", "a_b", "self", "type", "event", "handlers", "crate", "x1", "Self", "é",
];
/// Later segments.
const TAILS: &[&str] = &[
    "a", "b", "c", "b_c", "a_b", "bc", "_", "__", "1", "1b", "a1b", "v1", "self", "type", "gen",
    "super", "x_item", "item",
];
/// Property names.
const PROPERTIES: &[&str] = &[
    "id", "self", "Self", "type", "crate", "super", "gen", "fooBar", "foo_bar", "FooBar", "a", "A",
    "_", "__", "1st", "é", "ß", "naïve", "foo-bar", "foo.bar", "", "Event", "event", "handlers",
    "kind", "item", "x_item", "v", "V1",
];
/// Enum values.
const VALUES: &[&str] = &[
    "a", "A", "Self", "self", "crate", "_", "", "!", "1", "é", "x y", "type", "v", "V", "1a", "on",
];

#[derive(Debug, Clone)]
enum Shape {
    String,
    Integer,
    Enum(Vec<&'static str>),
    Object(&'static str),
    List,
    Ref,
}

#[derive(Debug, Clone)]
struct Event {
    name: String,
    properties: Vec<(&'static str, Shape, bool)>,
}

#[derive(Debug, Clone)]
struct Case {
    events: Vec<Event>,
    consumers: Vec<(String, Vec<usize>)>,
}

fn name(min_tails: usize) -> impl Strategy<Value = String> {
    (
        prop::sample::select(HEADS),
        prop::collection::vec(prop::sample::select(TAILS), min_tails..=2),
    )
        .prop_map(|(head, tails)| {
            let mut name = head.to_owned();
            for tail in tails {
                name.push('.');
                name.push_str(tail);
            }
            name
        })
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        Just(Shape::String),
        Just(Shape::Integer),
        prop::collection::vec(prop::sample::select(VALUES), 1..4).prop_map(Shape::Enum),
        prop::sample::select(PROPERTIES).prop_map(Shape::Object),
        Just(Shape::List),
        Just(Shape::Ref),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let event = (
        name(1),
        prop::collection::vec(
            (prop::sample::select(PROPERTIES), shape(), any::<bool>()),
            1..5,
        ),
    )
        .prop_map(|(name, properties)| Event { name, properties });
    (
        prop::collection::vec(event, 1..4),
        prop::collection::vec((name(0), prop::collection::vec(0usize..3, 1..3)), 0..3),
    )
        .prop_map(|(events, consumers)| Case { events, consumers })
}

/// A YAML double-quoted string.
fn quoted(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

fn schema_of(shape: &Shape) -> String {
    match shape {
        Shape::String => "{type: string}".to_owned(),
        Shape::Integer => "{type: integer, minimum: 0}".to_owned(),
        Shape::Enum(values) => {
            let values: Vec<String> = values.iter().map(|v| quoted(v)).collect();
            format!("{{type: string, enum: [{}]}}", values.join(", "))
        }
        Shape::Object(inner) => format!(
            "{{type: object, additionalProperties: false, properties: {{{}: {{type: string}}}}}}",
            quoted(inner)
        ),
        Shape::List => "{type: array, items: {type: string}}".to_owned(),
        Shape::Ref => "{$ref: '#/$defs/shared'}".to_owned(),
    }
}

/// Writes the case as a contract directory on top of the base fixture's settings.
fn write_case(case: &Case, dir: &Path) {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/base");
    for file in ["evc.yaml", "retry-policies.yaml"] {
        fs::copy(base.join(file), dir.join(file)).expect("copy settings");
    }
    fs::create_dir_all(dir.join("events")).expect("events dir");
    fs::create_dir_all(dir.join("consumers")).expect("consumers dir");
    for event in &case.events {
        let mut yaml = format!(
            "event: {}\ndescription: Generated.\nproducer_class: tester\nversions:\n  - version: 1.0.0\n    schema:\n      type: object\n      additionalProperties: false\n      $defs:\n        shared: {{type: object, additionalProperties: false, properties: {{n: {{type: integer}}}}}}\n      properties:\n",
            quoted(&event.name)
        );
        let mut required = Vec::new();
        for (property, shape, is_required) in &event.properties {
            let _ = writeln!(yaml, "        {}: {}", quoted(property), schema_of(shape));
            if *is_required {
                required.push(quoted(property));
            }
        }
        let _ = writeln!(yaml, "      required: [{}]", required.join(", "));
        // A file name the loader expects; names it cannot hold are refused by `check` anyway.
        let file = event.name.replace('/', "_");
        fs::write(dir.join(format!("events/{file}.yaml")), yaml).expect("write event");
    }
    for (consumer, subscriptions) in &case.consumers {
        let mut yaml = format!(
            "consumer: {}\ndescription: Generated.\nexecutor_kind: human\nhandler: leased\nordering: none\nsubscribes:\n",
            quoted(consumer)
        );
        let mut seen = Vec::new();
        for index in subscriptions {
            let event = &case.events[index % case.events.len()].name;
            if !seen.contains(event) {
                let _ = writeln!(yaml, "  - {}", quoted(&format!("{event}@^1")));
                seen.push(event.clone());
            }
        }
        let file = consumer.replace('/', "_");
        fs::write(dir.join(format!("consumers/{file}.yaml")), yaml).expect("write consumer");
    }
}

#[test]
fn whatever_check_accepts_generates_and_compiles() {
    let mut runner = TestRunner::deterministic();
    let strategy = case();
    let mut modules = String::new();
    let mut accepted = Vec::new();
    let mut refused = 0;
    for index in 0..CASES {
        let case = strategy.new_tree(&mut runner).expect("a case").current();
        let dir = tempfile::tempdir().expect("temp dir");
        write_case(&case, dir.path());
        let loaded = match ContractSet::load(dir.path()) {
            Ok(loaded) => loaded,
            Err(LoadError::Invalid { .. }) => {
                refused += 1;
                continue;
            }
            Err(other) => panic!("case {index}: the load failed as a whole: {other}\n{case:#?}"),
        };
        let artifacts =
            emit::render_all(&loaded.contracts, &Layout::default()).unwrap_or_else(|error| {
                panic!("case {index}: check accepted, generate failed: {error}\n{case:#?}")
            });
        if accepted.len() == MAX_COMPILED {
            continue;
        }
        let rust = artifacts
            .iter()
            .find(|artifact| artifact.path.ends_with("src/contracts.rs"))
            .expect("the Rust items");
        let _ = writeln!(
            modules,
            "/// Case {index}.\npub mod case_{index} {{\n{}\n}}\n",
            rust.contents
        );
        accepted.push((index, case));
    }
    // Both sides of the property must be exercised for it to mean anything.
    assert!(
        accepted.len() >= 10,
        "only {} cases accepted",
        accepted.len()
    );
    assert!(refused >= 10, "only {refused} cases refused");

    let file = fixture_crate::workspace_root().join("target/evc-property/cases.rs");
    fs::create_dir_all(file.parent().expect("a parent")).expect("create target/evc-property");
    fs::write(&file, &modules).expect("write the cases");
    let output =
        fixture_crate::cargo_test("property", &["--no-run"], &[("EVC_PROPERTY_CASES", &file)]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the generated Rust of accepted cases does not compile ({} cases in {}):\n{stderr}\n\ncases: {:#?}",
        accepted.len(),
        file.display(),
        accepted
    );
}
