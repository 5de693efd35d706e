//! Every malformed-contract fixture, with its diagnostics pinned as a snapshot.
//!
//! A fixture is an overlay: `fixtures/base/` (a small valid contract set) is copied to a
//! temporary directory, then `fixtures/invalid/<case>/` is copied over it. Two control files in a
//! case are not copied: `EXPECT` lists the rule ids that must be reported (one per line) and
//! `REMOVE` lists base files to delete. Inputs that cannot live in git comfortably (a file over
//! the size cap, a symlink loop, non-UTF-8 bytes, hostile YAML) are built by the tests below.

mod support;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use evc_codegen::{ContractSet, Diagnostic, LoadError};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The base set with `overlay` applied, in a fresh temporary directory.
fn compose(overlay: Option<&Path>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    support::copy_fixture(&fixtures().join("base"), dir.path());
    if let Some(overlay) = overlay {
        support::copy_fixture(overlay, dir.path());
        if let Ok(remove) = fs::read_to_string(overlay.join("REMOVE")) {
            for line in remove.lines().map(str::trim).filter(|l| !l.is_empty()) {
                let path = dir.path().join(line);
                if path.is_dir() {
                    fs::remove_dir_all(path).expect("remove folder");
                } else {
                    fs::remove_file(path).expect("remove file");
                }
            }
        }
    }
    dir
}

fn diagnostics_of(dir: &Path) -> Vec<Diagnostic> {
    match ContractSet::load(dir) {
        Ok(loaded) => loaded.warnings,
        Err(LoadError::Invalid { diagnostics, .. }) => diagnostics,
        Err(other) => panic!("the load failed as a whole: {other}"),
    }
}

fn render(diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(Diagnostic::to_short_string)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_base_fixture_is_valid_and_warning_free() {
    let dir = compose(None);
    let loaded = ContractSet::load(dir.path()).unwrap_or_else(|error| match error {
        LoadError::Invalid { diagnostics, .. } => {
            panic!("base is invalid:\n{}", render(&diagnostics))
        }
        other => panic!("{other}"),
    });
    assert!(loaded.warnings.is_empty(), "{}", render(&loaded.warnings));
}

#[test]
fn every_invalid_fixture_reports_its_rules_at_a_position() {
    let mut cases: Vec<PathBuf> = fs::read_dir(fixtures().join("invalid"))
        .expect("invalid fixtures exist")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() >= 40, "only {} fixtures", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let name = case
            .file_name()
            .and_then(|n| n.to_str())
            .expect("utf-8 name")
            .to_owned();
        let dir = compose(Some(case));
        let diagnostics = diagnostics_of(dir.path());
        let expected: BTreeSet<String> = fs::read_to_string(case.join("EXPECT"))
            .unwrap_or_else(|_| panic!("{name} has no EXPECT file"))
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        assert!(!expected.is_empty(), "{name}: EXPECT is empty");
        let reported: BTreeSet<String> =
            diagnostics.iter().map(|d| d.rule.id().to_owned()).collect();
        let missing: Vec<_> = expected.difference(&reported).collect();
        if !missing.is_empty() {
            failures.push(format!(
                "{name}: expected {missing:?}, got:\n{}",
                render(&diagnostics)
            ));
        }
        for diagnostic in &diagnostics {
            assert!(
                diagnostic.location.line >= 1 && diagnostic.location.column >= 1,
                "{name}: {diagnostic:?}"
            );
            assert!(
                !diagnostic.fix.is_empty(),
                "{name}: no fix in {diagnostic:?}"
            );
        }
        insta::with_settings!({ snapshot_suffix => name.clone(), prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!("invalid", render(&diagnostics));
        });
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Builds a case in code, loads it and returns its rendered diagnostics.
fn built_case(build: impl FnOnce(&Path)) -> (Vec<Diagnostic>, String) {
    let dir = compose(None);
    build(dir.path());
    let diagnostics = diagnostics_of(dir.path());
    let text = render(&diagnostics);
    (diagnostics, text)
}

fn rules(diagnostics: &[Diagnostic]) -> Vec<&'static str> {
    diagnostics.iter().map(|d| d.rule.id()).collect()
}

#[test]
fn a_file_over_the_size_cap_is_refused_without_being_parsed() {
    let (diagnostics, text) = built_case(|dir| {
        let mut big = String::from("event: big.event\n# ");
        big.push_str(&"x".repeat(10 * 1024 * 1024 + 1));
        fs::write(dir.join("events/big.event.yaml"), big).expect("write big file");
    });
    assert_eq!(rules(&diagnostics), ["FILE_TOO_LARGE"]);
    insta::assert_snapshot!(text);
}

#[cfg(unix)]
#[test]
fn a_symlink_loop_is_an_unreadable_file() {
    let (diagnostics, text) = built_case(|dir| {
        std::os::unix::fs::symlink("loop.event.yaml", dir.join("events/loop.event.yaml"))
            .expect("create symlink");
        std::os::unix::fs::symlink("..", dir.join("events/up")).expect("create dir symlink");
    });
    assert_eq!(rules(&diagnostics), ["FILE_UNREADABLE", "UNEXPECTED_FILE"]);
    insta::assert_snapshot!(text);
}

#[test]
fn non_utf8_bytes_are_located() {
    let (diagnostics, text) = built_case(|dir| {
        fs::write(
            dir.join("events/bytes.event.yaml"),
            b"event: bytes.event\ndescription: caf\xe9\n",
        )
        .expect("write file");
    });
    assert_eq!(rules(&diagnostics), ["FILE_NOT_UTF8"]);
    assert_eq!(
        (diagnostics[0].location.line, diagnostics[0].location.column),
        (2, 17)
    );
    insta::assert_snapshot!(text);
}

#[test]
fn ten_thousand_levels_of_nesting_are_refused_without_overflow() {
    let (diagnostics, text) = built_case(|dir| {
        let mut deep = String::from("event: deep.event\ndescription: ");
        deep.push_str(&"[".repeat(10_000));
        deep.push_str(&"]".repeat(10_000));
        deep.push('\n');
        fs::write(dir.join("events/deep.event.yaml"), &deep).expect("write file");
        let mapping = "{a: ".repeat(10_000) + "1" + &"}".repeat(10_000);
        fs::write(dir.join("events/deep.mapping.yaml"), mapping).expect("write file");
    });
    assert_eq!(
        rules(&diagnostics),
        ["YAML_LIMIT_EXCEEDED", "YAML_LIMIT_EXCEEDED"]
    );
    insta::assert_snapshot!(text);
}

#[test]
fn an_alias_expansion_bomb_is_refused() {
    let (diagnostics, text) = built_case(|dir| {
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for level in 1..=9 {
            let previous = format!("*a{}", level - 1);
            let items = [previous.as_str(); 10].join(", ");
            bomb.push_str(&format!("a{level}: &a{level} [{items}]\n"));
        }
        fs::write(dir.join("events/bomb.event.yaml"), bomb).expect("write file");
    });
    assert_eq!(rules(&diagnostics), ["YAML_LIMIT_EXCEEDED"]);
    insta::assert_snapshot!(text);
}

#[test]
fn a_missing_directory_is_a_load_failure_not_a_finding() {
    let error = ContractSet::load("/nonexistent/evc/contracts").expect_err("missing dir");
    assert!(matches!(error, LoadError::Io { .. }), "{error:?}");
    let file = tempfile::NamedTempFile::new().expect("temp file");
    let error = ContractSet::load(file.path()).expect_err("a file, not a dir");
    assert!(
        matches!(error, LoadError::NotADirectory { .. }),
        "{error:?}"
    );
}

#[test]
fn crlf_line_endings_are_not_control_characters() {
    let (diagnostics, text) = built_case(|dir| {
        let event = "event: crlf.event\r\ndescription: |\r\n  Two lines,\r\n  written on Windows.\r\nproducer_class: tester\r\nversions:\r\n  - version: 1.0.0\r\n    schema:\r\n      type: object\r\n      additionalProperties: false\r\n      properties:\r\n        note: {type: string, description: \"tab\\tand\\nnew line\"}\r\n";
        fs::write(dir.join("events/crlf.event.yaml"), event).expect("write file");
    });
    assert!(diagnostics.is_empty(), "{text}");
}

#[test]
fn a_bidi_override_is_named_by_code_point_and_not_printed() {
    let (diagnostics, text) = built_case(|dir| {
        let event = "event: bidi.event\ndescription: \"ok \u{202E}kcatta\"\nproducer_class: tester\nversions:\n  - version: 1.0.0\n    schema: {type: object, additionalProperties: false, properties: {\"a\\u202Eb\": {type: string}}}\n";
        fs::write(dir.join("events/bidi.event.yaml"), event).expect("write file");
    });
    assert_eq!(
        rules(&diagnostics),
        ["CONTROL_CHARACTER", "CONTROL_CHARACTER"]
    );
    assert!(text.contains("U+202E (RIGHT-TO-LEFT OVERRIDE)"), "{text}");
    assert!(!text.contains('\u{202E}'), "{text}");
}

/// A property may be named like a keyword. Under the name `$ref`, a property's schema that
/// uses `definitions` (the deprecated spelling a 2020-12 schema may write) is read as `$defs`,
/// as it is under any other name.
#[test]
fn a_property_named_ref_is_read_as_a_schema() {
    let dir = compose(None);
    let path = dir.path().join("events/unit.created.yaml");
    let contract = fs::read_to_string(&path).expect("read the contract");
    let field = "        unit_id: {type: string, format: uuid}\n";
    fs::write(
        &path,
        contract.replace(
            field,
            &format!("{field}        $ref: {{type: string, definitions: {{}}}}\n"),
        ),
    )
    .expect("write the contract");
    let loaded = match ContractSet::load(dir.path()) {
        Ok(loaded) => loaded,
        Err(LoadError::Invalid { diagnostics, .. }) => panic!("{}", render(&diagnostics)),
        Err(other) => panic!("the load failed as a whole: {other}"),
    };
    for version in &loaded.contracts.events["unit.created"].versions {
        let property = &version.schema["properties"]["$ref"];
        assert_eq!(property.get("$defs"), Some(&serde_json::json!({})));
        assert_eq!(property.get("definitions"), None);
    }
}

/// `executor-classes.yaml` of `classes` (reference, retry policy, active), each with the
/// same description, flag, namespace and owner.
fn executor_classes(classes: &[(&str, Option<&str>, bool)]) -> String {
    let mut text = String::from("classes:\n");
    for (name, policy, active) in classes {
        text.push_str(&format!(
            "  {name}:\n    description: Runs work.\n    mutating: true\n    \
             idempotency_namespace: work\n    heartbeat_owner: team-work\n    active: {active}\n"
        ));
        if let Some(policy) = policy {
            text.push_str(&format!("    retry_policy: {policy}\n"));
        }
    }
    text
}

/// The base set with `classes`, and each base consumer naming its class (`human.review` for
/// `audit`, `dot.indexer` for `worker.indexer`).
fn with_executor_classes(classes: &[(&str, Option<&str>, bool)]) -> tempfile::TempDir {
    let dir = compose(None);
    fs::write(
        dir.path().join("executor-classes.yaml"),
        executor_classes(classes),
    )
    .expect("write the classes");
    for (consumer, class) in [("audit", "human.review"), ("worker.indexer", "dot.indexer")] {
        let path = dir.path().join(format!("consumers/{consumer}.yaml"));
        let contract = fs::read_to_string(&path).expect("read the consumer");
        let kind = contract
            .lines()
            .find(|line| line.starts_with("executor_kind:"))
            .expect("an executor kind")
            .to_owned();
        fs::write(
            &path,
            contract.replace(&kind, &format!("{kind}\nexecutor_class: {class}")),
        )
        .expect("write the consumer");
    }
    dir
}

fn load_valid(dir: &Path) -> ContractSet {
    match ContractSet::load(dir) {
        Ok(loaded) => loaded.contracts,
        Err(LoadError::Invalid { diagnostics, .. }) => panic!("{}", render(&diagnostics)),
        Err(other) => panic!("the load failed as a whole: {other}"),
    }
}

/// A consumer that names no retry policy takes its executor class's, before the project's
/// default; one that names its own keeps it.
#[test]
fn an_executor_class_gives_its_consumers_their_retry_policy() {
    let dir = with_executor_classes(&[
        ("human.review", Some("default.transient"), true),
        ("dot.indexer", Some("human.no_retry"), true),
    ]);
    let set = load_valid(dir.path());
    let indexer = &set.consumers["worker.indexer"];
    assert_eq!(indexer.executor_class.as_deref(), Some("dot.indexer"));
    assert_eq!(
        indexer.retry_policy, "human.no_retry",
        "the class's, not the default"
    );
    let audit = &set.consumers["audit"];
    assert_eq!(audit.executor_class.as_deref(), Some("human.review"));
    assert_eq!(audit.retry_policy, "human.no_retry", "its own");
    assert_eq!(set.executor_classes.len(), 2);
}

/// A consumer that sets no heartbeat threshold takes its executor class's, before the
/// project's default; one that sets its own keeps it; a class threshold the dispatcher's
/// heartbeat would pass is reported where the class sets it.
#[test]
fn an_executor_class_gives_its_consumers_their_heartbeat_threshold() {
    let with_thresholds = |indexer: &str| {
        let dir =
            with_executor_classes(&[("human.review", None, true), ("dot.indexer", None, true)]);
        let classes = dir.path().join("executor-classes.yaml");
        let text = fs::read_to_string(&classes).expect("read the classes");
        let text = text
            .replace(
                "  dot.indexer:\n",
                &format!("  dot.indexer:\n    heartbeat_threshold: {indexer}\n"),
            )
            .replace(
                "  human.review:\n",
                "  human.review:\n    heartbeat_threshold: 3m\n",
            );
        fs::write(&classes, text).expect("write the classes");
        let audit = dir.path().join("consumers/audit.yaml");
        let contract = fs::read_to_string(&audit).expect("read the consumer");
        fs::write(&audit, format!("{contract}heartbeat_threshold: 90s\n")).expect("write it");
        dir
    };
    let dir = with_thresholds("2m");
    let set = load_valid(dir.path());
    assert_eq!(
        set.consumers["worker.indexer"].heartbeat_threshold,
        std::time::Duration::from_secs(120),
        "the class's, not the default"
    );
    assert_eq!(
        set.consumers["audit"].heartbeat_threshold,
        std::time::Duration::from_secs(90),
        "its own, not its class's"
    );

    let dir = with_thresholds("5s");
    let diagnostics = diagnostics_of(dir.path());
    let reported: Vec<(&str, &str)> = diagnostics
        .iter()
        .map(|d| (d.rule.id(), d.location.file.as_str()))
        .collect();
    assert_eq!(
        reported,
        [("INVALID_VALUE", "executor-classes.yaml")],
        "{}",
        render(&diagnostics)
    );
    assert!(
        diagnostics[0].message.contains("worker.indexer"),
        "{}",
        diagnostics[0].message
    );
}

/// `evc compat` refuses the removal of an executor class the base still has active, and
/// accepts it once the base retired it.
#[test]
fn an_executor_class_is_retired_before_it_is_removed() {
    let classes = |unused_active: Option<bool>| {
        let mut classes = vec![("human.review", None, true), ("dot.indexer", None, true)];
        if let Some(active) = unused_active {
            classes.push(("external.unused", None, active));
        }
        load_valid(with_executor_classes(&classes).path())
    };
    let removed = classes(None);
    for (active, refused) in [(true, true), (false, false)] {
        let base = classes(Some(active));
        let report = evc_codegen::compat::compare(&base, &removed, "base", "head");
        let rules: Vec<&str> = report.findings.iter().map(|f| f.rule).collect();
        assert_eq!(
            rules.contains(&"EXECUTOR_CLASS_REMOVED_WHILE_ACTIVE"),
            refused,
            "active {active}: {rules:?}"
        );
        assert_eq!(report.passed(), !refused, "active {active}: {rules:?}");
    }
}
