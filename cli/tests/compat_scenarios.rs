//! `evc compat` scenarios in a temporary git repository: the base is committed on `main`, the
//! change sits in the working tree of a feature branch, and `evc compat --against main` judges
//! it. Each scenario checks the exit code, the rules found and the parts of a finding a reviewer
//! reads (direction, versions, pointer, line, consumers, witness).

use std::fs;
use std::process::{Command, Output};

use serde_json::Value;

const EVC_YAML: &str = "project: shop
payload_policy:
  denied_keys: [body_text]
  credential_key_names: [password, token, secret]
defaults:
  retry_policy: default.transient
";

const RETRY_POLICIES: &str = "policies:
  default.transient:
    kind: fixed_delay
    base_delay: 10s
    max_attempts: 3
    retry_on: [transient]
";

const BILLING: &str = "consumer: worker.billing
description: Bills placed orders.
executor_kind: sql
subscribes: [order.placed@^1]
handler: transactional
";

/// One version: its number, the schema body (indented under `schema:`) and extra lines.
struct V<'a>(&'a str, &'a str, &'a str);

fn event(name: &str, mode: &str, status: &str, versions: &[V<'_>]) -> String {
    let mut text = format!(
        "event: {name}\ndescription: Scenario event.\nproducer_class: shop\ncompat: {mode}\nstatus: {status}\nversions:\n"
    );
    for V(version, schema, extra) in versions {
        text.push_str(&format!(
            "  - version: {version}\n    schema:\n      type: object\n      additionalProperties: false\n"
        ));
        for line in schema.lines() {
            text.push_str(&format!("      {line}\n"));
        }
        for line in extra.lines() {
            text.push_str(&format!("    {line}\n"));
        }
    }
    text
}

const ORDER_V1: &str = "required: [order_id, customer_id, status]
properties:
  order_id: {type: string, format: uuid}
  customer_id: {type: string}
  status: {type: string, enum: [new, paid, shipped]}
  quantity: {type: integer, minimum: 1}";

const POLICY: &str = "migration_policy:
  producer_window: 14d
  consumer_window: 30d
  dual_write: Emit 1.x and 2.0.0 until every consumer accepts ^2.
  rollback: Stop emitting 2.0.0.";

struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    /// A repository whose `main` holds `files` (path under `contracts/`, text), checked out on
    /// a feature branch.
    fn new(files: &[(&str, String)]) -> Self {
        let repo = Self {
            dir: tempfile::tempdir().expect("temp dir"),
        };
        repo.git(&["init", "-q", "-b", "main"]);
        repo.write("evc.yaml", EVC_YAML);
        repo.write("retry-policies.yaml", RETRY_POLICIES);
        repo.write("consumers/worker.billing.yaml", BILLING);
        for (path, text) in files {
            repo.write(path, text);
        }
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-q", "-m", "base contracts"]);
        repo.git(&["checkout", "-q", "-b", "feature"]);
        repo
    }

    fn write(&self, path: &str, text: &str) {
        let path = self.dir.path().join("contracts").join(path);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write contract");
    }

    fn remove(&self, path: &str) {
        fs::remove_file(self.dir.path().join("contracts").join(path)).expect("remove");
    }

    fn git(&self, args: &[&str]) {
        let status = Command::new("git")
            .current_dir(self.dir.path())
            .args([
                "-c",
                "user.name=evc",
                "-c",
                "user.email=evc@example.invalid",
            ])
            .args(args)
            .status()
            .expect("git runs");
        assert!(status.success(), "git {args:?} failed");
    }

    /// Runs `evc compat contracts --against main --format json`; returns the exit code and the
    /// report (`Value::Null` when the output is not JSON).
    fn compat(&self) -> (i32, Value, Output) {
        let output = Command::new(env!("CARGO_BIN_EXE_evc"))
            .current_dir(self.dir.path())
            .args([
                "compat",
                "contracts",
                "--against",
                "main",
                "--format",
                "json",
            ])
            .env("NO_COLOR", "1")
            .output()
            .expect("evc runs");
        let report = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        (output.status.code().unwrap_or(-1), report, output)
    }
}

fn findings<'a>(report: &'a Value, rule: &str) -> Vec<&'a Value> {
    report["findings"]
        .as_array()
        .map(|all| all.iter().filter(|f| f["rule"] == rule).collect())
        .unwrap_or_default()
}

fn errors(report: &Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter(|f| f["severity"] == "error")
                .map(|f| f["rule"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn order(mode: &str, versions: &[V<'_>]) -> (&'static str, String) {
    (
        "events/order.placed.yaml",
        event("order.placed", mode, "active", versions),
    )
}

fn explain(output: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn adding_an_optional_field_passes_and_suggests_a_minor_bump() {
    let repo = Repo::new(&[order("backward", &[V("1.0.0", ORDER_V1, "")])]);
    let with_note = format!("{ORDER_V1}\n  note: {{type: string, maxLength: 200}}");
    let (path, text) = order(
        "full",
        &[V("1.0.0", ORDER_V1, ""), V("1.1.0", &with_note, "")],
    );
    repo.write(path, &text);
    let (code, report, output) = repo.compat();
    assert_eq!(code, 0, "{}", explain(&output));
    assert!(errors(&report).is_empty());
    let summary = report["events"]
        .as_array()
        .and_then(|events| events.iter().find(|e| e["event"] == "order.placed"))
        .expect("summary for order.placed");
    assert_eq!(summary["suggested_bump"], "minor");
    assert_eq!(summary["checked"][0], "1.1.0 against 1.0.0");
}

#[test]
fn a_required_field_without_default_fails_backward_with_a_witness() {
    let repo = Repo::new(&[order("backward", &[V("1.0.0", ORDER_V1, "")])]);
    let v11 = ORDER_V1.replace(
        "[order_id, customer_id, status]",
        "[order_id, customer_id, status, amount]",
    ) + "\n  amount: {type: integer}";
    let (path, text) = order(
        "backward",
        &[V("1.0.0", ORDER_V1, ""), V("1.1.0", &v11, "")],
    );
    repo.write(path, &text);
    let (code, report, output) = repo.compat();
    assert_eq!(code, 100, "{}", explain(&output));
    let found = findings(&report, "REQUIRED_ADDED");
    assert_eq!(found.len(), 1, "{}", explain(&output));
    let finding = found[0];
    assert_eq!(finding["direction"], "backward");
    assert_eq!(finding["base_version"], "1.0.0");
    assert_eq!(finding["version"], "1.1.0");
    assert_eq!(finding["pointer"], "#/required/3");
    assert_eq!(finding["location"]["file"], "events/order.placed.yaml");
    // The `required` line of version 1.1.0, not of 1.0.0.
    let line = finding["location"]["line"].as_u64().expect("line");
    let source = fs::read_to_string(repo.dir.path().join("contracts").join(path)).expect("read");
    let text_line = source.lines().nth(line as usize - 1).expect("line exists");
    assert!(text_line.contains("amount"), "line {line} is {text_line:?}");
    assert_eq!(finding["consumers"], serde_json::json!(["worker.billing"]));
    let witness = &finding["witness"];
    assert!(witness["payload"].is_object(), "{finding}");
    assert!(witness["payload"].get("amount").is_none());
    assert_eq!(witness["valid_for"], "writer 1.0.0");
    assert_eq!(witness["rejected_by"], "reader 1.1.0");
}

#[test]
fn removing_a_field_consumers_read_fails_forward() {
    let repo = Repo::new(&[order("forward", &[V("1.0.0", ORDER_V1, "")])]);
    let v11 = ORDER_V1
        .replace("[order_id, customer_id, status]", "[order_id, status]")
        .replace("  customer_id: {type: string}\n", "");
    let (path, text) = order("forward", &[V("1.0.0", ORDER_V1, ""), V("1.1.0", &v11, "")]);
    repo.write(path, &text);
    let (code, report, output) = repo.compat();
    assert_eq!(code, 100, "{}", explain(&output));
    let found = findings(&report, "REQUIRED_ADDED");
    assert_eq!(found.len(), 1, "{}", explain(&output));
    assert_eq!(found[0]["direction"], "forward");
    assert!(
        found[0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("customer_id")
    );
    assert_eq!(found[0]["consumers"], serde_json::json!(["worker.billing"]));
    assert!(found[0]["witness"]["payload"].get("customer_id").is_none());
}

#[test]
fn narrowing_an_enum_fails_with_the_dropped_value_as_witness() {
    let repo = Repo::new(&[order("backward", &[V("1.0.0", ORDER_V1, "")])]);
    let v11 = ORDER_V1.replace("[new, paid, shipped]", "[new, paid]");
    let (path, text) = order(
        "backward",
        &[V("1.0.0", ORDER_V1, ""), V("1.1.0", &v11, "")],
    );
    repo.write(path, &text);
    let (code, report, output) = repo.compat();
    assert_eq!(code, 100, "{}", explain(&output));
    let found = findings(&report, "ENUM_NARROWED");
    assert_eq!(found.len(), 1, "{}", explain(&output));
    assert_eq!(found[0]["pointer"], "#/properties/status/enum");
    assert_eq!(found[0]["witness"]["payload"]["status"], "shipped");
}

#[test]
fn widening_a_type_passes_backward_and_fails_forward() {
    let v11 = ORDER_V1.replace(
        "quantity: {type: integer, minimum: 1}",
        "quantity: {type: number, minimum: 1}",
    );
    for (mode, expected) in [("backward", 0), ("forward", 100)] {
        let repo = Repo::new(&[order(mode, &[V("1.0.0", ORDER_V1, "")])]);
        let (path, text) = order(mode, &[V("1.0.0", ORDER_V1, ""), V("1.1.0", &v11, "")]);
        repo.write(path, &text);
        let (code, report, output) = repo.compat();
        assert_eq!(code, expected, "{mode}: {}", explain(&output));
        if expected == 100 {
            let found = findings(&report, "TYPE_NARROWED");
            assert_eq!(found.len(), 1, "{}", explain(&output));
            let quantity = &found[0]["witness"]["payload"]["quantity"];
            assert!(
                quantity.as_f64().is_some_and(|q| q.fract() != 0.0),
                "{quantity}"
            );
        }
    }
}

#[test]
fn editing_a_published_version_in_place_fails_unless_only_docs_changed() {
    let repo = Repo::new(&[order("backward", &[V("1.0.0", ORDER_V1, "")])]);
    let documented = ORDER_V1.replace(
        "customer_id: {type: string}",
        "customer_id: {type: string, description: Who ordered.}",
    );
    let (path, text) = order("backward", &[V("1.0.0", &documented, "")]);
    repo.write(path, &text);
    let (code, _, output) = repo.compat();
    assert_eq!(
        code,
        0,
        "documentation edits are allowed: {}",
        explain(&output)
    );

    let edited = ORDER_V1.replace("minimum: 1", "minimum: 2");
    let (path, text) = order("backward", &[V("1.0.0", &edited, "")]);
    repo.write(path, &text);
    let (code, report, output) = repo.compat();
    assert_eq!(code, 100, "{}", explain(&output));
    let found = findings(&report, "VERSION_EDITED_IN_PLACE");
    assert_eq!(found.len(), 1, "{}", explain(&output));
    assert_eq!(found[0]["pointer"], "#/properties/quantity/minimum");
}

#[test]
fn removing_an_event_type_needs_deprecation_first() {
    let refund = |status: &str| {
        (
            "events/order.refunded.yaml",
            event(
                "order.refunded",
                "backward",
                status,
                &[V(
                    "1.0.0",
                    "required: [order_id]\nproperties:\n  order_id: {type: string}",
                    "",
                )],
            ),
        )
    };
    let repo = Repo::new(&[
        order("backward", &[V("1.0.0", ORDER_V1, "")]),
        refund("active"),
    ]);
    repo.remove("events/order.refunded.yaml");
    let (code, report, output) = repo.compat();
    assert_eq!(code, 100, "{}", explain(&output));
    assert_eq!(
        findings(&report, "EVENT_REMOVED_WITHOUT_DEPRECATION").len(),
        1
    );

    let repo = Repo::new(&[
        order("backward", &[V("1.0.0", ORDER_V1, "")]),
        refund("deprecated"),
    ]);
    repo.remove("events/order.refunded.yaml");
    let (code, report, output) = repo.compat();
    assert_eq!(code, 0, "{}", explain(&output));
    assert!(findings(&report, "EVENT_REMOVED_WITHOUT_DEPRECATION").is_empty());
}

#[test]
fn a_major_bump_needs_breaking_with_policy_and_a_migration_policy() {
    let v2 = ORDER_V1.replace(
        "customer_id: {type: string}",
        "customer_id: {type: integer}",
    );
    // With a migration policy under breaking_with_policy: allowed.
    let repo = Repo::new(&[order("breaking_with_policy", &[V("1.0.0", ORDER_V1, "")])]);
    let (path, text) = order(
        "breaking_with_policy",
        &[V("1.0.0", ORDER_V1, ""), V("2.0.0", &v2, POLICY)],
    );
    repo.write(path, &text);
    let (code, report, output) = repo.compat();
    assert_eq!(code, 0, "{}", explain(&output));
    assert!(errors(&report).is_empty());

    // Without one: the proposed contracts do not even load.
    let (path, text) = order(
        "breaking_with_policy",
        &[V("1.0.0", ORDER_V1, ""), V("2.0.0", &v2, "")],
    );
    repo.write(path, &text);
    let (code, _, output) = repo.compat();
    assert_eq!(code, 100, "{}", explain(&output));
    assert!(
        explain(&output).contains("MISSING_MIGRATION_POLICY"),
        "{}",
        explain(&output)
    );

    // Under another mode a major bump is refused, policy or not (by the loader, since the
    // proposed contracts must pass `evc check`).
    let repo = Repo::new(&[order("backward", &[V("1.0.0", ORDER_V1, "")])]);
    let (path, text) = order(
        "backward",
        &[V("1.0.0", ORDER_V1, ""), V("2.0.0", &v2, POLICY)],
    );
    repo.write(path, &text);
    let (code, _, output) = repo.compat();
    assert_eq!(code, 100, "{}", explain(&output));
    assert!(
        explain(&output).contains("MAJOR_BUMP_NOT_ALLOWED"),
        "{}",
        explain(&output)
    );
}

#[test]
fn transitive_modes_catch_a_break_against_a_version_two_steps_back() {
    let v10 = format!("{ORDER_V1}\n  code: {{type: string}}");
    let v11 = ORDER_V1.to_owned();
    let v12 = format!("{ORDER_V1}\n  code: {{type: integer}}");
    for (mode, expected) in [("backward", 0), ("backward_transitive", 100)] {
        let repo = Repo::new(&[order(mode, &[V("1.0.0", &v10, ""), V("1.1.0", &v11, "")])]);
        let (path, text) = order(
            mode,
            &[
                V("1.0.0", &v10, ""),
                V("1.1.0", &v11, ""),
                V("1.2.0", &v12, ""),
            ],
        );
        repo.write(path, &text);
        let (code, report, output) = repo.compat();
        assert_eq!(code, expected, "{mode}: {}", explain(&output));
        if expected == 100 {
            let found = findings(&report, "TYPE_NARROWED");
            assert_eq!(found.len(), 1, "{}", explain(&output));
            assert_eq!(found[0]["base_version"], "1.0.0");
            assert_eq!(found[0]["version"], "1.2.0");
            assert_eq!(found[0]["pointer"], "#/properties/code/type");
            assert!(found[0]["witness"]["payload"]["code"].is_string());
        }
    }
}
