//! The operator commands on a SQLite outbox file (`--database-url sqlite:PATH`): `evc migrate`
//! creates the file and its schema, an application opens it (recording its registry), and
//! `evc status`, `timeline`, `consumer`, `dlq list`, `replay` and `dispatch` run on the
//! registry the file records. What SQLite does not offer is refused with a clear message, and
//! a missing or foreign file is never created or changed.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use evc_runtime::{
    AppendOptions, ClaimRequest, ConsumerDescriptor, ConsumerMode, CutoverGateDescriptor,
    DispatcherDescriptor, EventDescriptor, FailureClass, HandlerKind, Intent, OutgoingEvent,
    PayloadPolicyDescriptor, Registry, RetryDecision, RetryPolicyDescriptor, SqliteStore, Store,
    SubscriptionDescriptor, TraceContext, VersionDescriptor,
};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN: &str = "00f067aa0ba902b7";

const NOTE: &[SubscriptionDescriptor] = &[SubscriptionDescriptor {
    event: "note.made",
    requirement: "^1",
    versions: &["1.0.0"],
}];

const fn consumer(name: &'static str) -> ConsumerDescriptor {
    ConsumerDescriptor {
        name,
        handler: HandlerKind::Leased,
        mode: ConsumerMode::Live,
        per_key_ordering: false,
        retry_policy: "once",
        heartbeat_threshold_ms: 60_000,
        handler_timeout_ms: None,
        executor_class: None,
        subscriptions: NOTE,
    }
}

/// `note.made` 1.0.0 fans out to `audit` and `mailer`; nothing is retried.
static REGISTRY: Registry = Registry {
    project: "cli_sqlite",
    digest: "00000000000000000000000000000000000000000000000000000000000000d1",
    events: &[EventDescriptor {
        name: "note.made",
        description: "A note was made.",
        producer_class: "notes",
        order_key: &["id"],
        deprecated: false,
        max_payload_bytes: 1024,
        versions: &[VersionDescriptor {
            version: "1.0.0",
            major: 1,
            schema: r#"{"properties":{"id":{"type":"string"}},"required":["id"],"type":"object"}"#,
            schema_digest: "00000000000000000000000000000000000000000000000000000000000000d2",
        }],
    }],
    // Sorted by name, as the registry's lookups expect.
    consumers: &[consumer("audit"), consumer("mailer")],
    retry_policies: &[RetryPolicyDescriptor {
        name: "once",
        kind: "no_retry",
        base_delay_ms: 0,
        max_delay_ms: None,
        max_attempts: 1,
        jitter: "none",
        retry_on: &[],
    }],
    executor_classes: &[],
    schedules: &[],
    lag_thresholds: &[],
    cutover_gates: &[],
    inventory_rules: &[],
    evidence_recording: None,
    retention: evc_runtime::RetentionDescriptor::KEEP,
    payload_policy: PayloadPolicyDescriptor {
        denied_keys: &[],
        credential_key_names: &["password"],
        default_max_bytes: 4096,
        hard_max_bytes: 4096,
    },
    require_tenant_scope: false,
    dispatcher: DispatcherDescriptor::FORMAT_DEFAULTS,
};

/// [`REGISTRY`] where `mailer` runs in shadow mode and goes live only through a cut-over gate
/// of one compared delivery without an unexplained difference.
static GATED: Registry = Registry {
    consumers: &[
        consumer("audit"),
        ConsumerDescriptor {
            mode: ConsumerMode::Shadow,
            ..consumer("mailer")
        },
    ],
    cutover_gates: &[CutoverGateDescriptor {
        consumer: "mailer",
        min_reconciled: 1,
        min_span_ms: 0,
        max_unexplained: 0,
    }],
    ..REGISTRY
};

/// [`REGISTRY`] whose notes, attempts and every other table expire after a millisecond.
static RETAINED: Registry = Registry {
    retention: evc_runtime::RetentionDescriptor {
        events: &[evc_runtime::EventRetention {
            event_type: "note.made",
            ms: 1,
        }],
        attempts_ms: Some(1),
        reconciliations_ms: Some(1),
        rejects_ms: Some(1),
        effects_ms: Some(1),
    },
    ..REGISTRY
};

/// [`REGISTRY`] where `mailer` is off (so it gets no delivery) and its inventory rules expire
/// events older than a day.
static INVENTORIED: Registry = Registry {
    consumers: &[
        consumer("audit"),
        ConsumerDescriptor {
            mode: ConsumerMode::Off,
            ..consumer("mailer")
        },
    ],
    inventory_rules: &[evc_runtime::InventoryRulesDescriptor {
        consumer: "mailer",
        max_age_ms: Some(86_400_000),
        repair: evc_runtime::InventoryRepair::None,
    }],
    ..REGISTRY
};

/// Held by each test for its whole body. A child process one test starts holds, from its fork
/// to its exec, a copy of every descriptor of this process: the other test's lock file too, so
/// that test could see its own closed store's lock still held.
static ONE_TEST_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_test_at_a_time() -> MutexGuard<'static, ()> {
    ONE_TEST_AT_A_TIME
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn evc(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_evc"))
        .args(args)
        .args(["--database-url", url])
        .output()
        .expect("evc runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// What the application does: opens the file with its registry (recording it), appends two
/// notes on one trace, and of `audit`'s deliveries acks the first and dead-letters the second.
/// Returns the dead-lettered event's id.
async fn application(path: &Path) -> uuid::Uuid {
    let store = SqliteStore::open(path.to_string_lossy(), REGISTRY)
        .await
        .expect("the application opens its file");
    let trace = TraceContext::new(TRACE, SPAN, 1).expect("trace");
    let mut tx = store.begin().await.expect("begin");
    let mut ids = Vec::new();
    for id in ["n1", "n2"] {
        let payload = serde_json::json!({ "id": id });
        let event = OutgoingEvent::new(
            "note.made",
            "1.0.0",
            Some(evc_runtime::order_key_part(&payload["id"])),
            &trace,
            &payload,
        )
        .expect("event");
        let receipt = store
            .append(&mut tx, event, AppendOptions::default())
            .await
            .expect("append");
        ids.push(receipt.event_id);
    }
    tx.commit().await.expect("commit");
    let mut connection = store.pool().acquire().await.expect("connection");
    let request = ClaimRequest::leased("audit", "app", 10, Duration::from_secs(30));
    let mut claimed = Store::claim(&store, &mut *connection, &request)
        .await
        .expect("claim");
    claimed.sort_by_key(|c| c.event_seq);
    assert_eq!(claimed.len(), 2);
    Store::ack(&store, &mut *connection, &[&claimed[0].lease])
        .await
        .expect("ack");
    drop(connection);
    Store::fail(
        &store,
        &claimed[1].lease,
        FailureClass::Permanent,
        "E_BAD",
        RetryDecision::Dead,
    )
    .await
    .expect("fail");
    store.close().await;
    ids[1]
}

/// The gated application: one note, handled by `mailer` in shadow mode (it meant to send one
/// mail) while the legacy path sent two. Returns the note's id.
async fn gated_application(path: &Path) -> uuid::Uuid {
    let store = SqliteStore::open(path.to_string_lossy(), GATED)
        .await
        .expect("the application opens its file");
    let trace = TraceContext::new(TRACE, SPAN, 1).expect("trace");
    let payload = serde_json::json!({ "id": "n1" });
    let event = OutgoingEvent::new("note.made", "1.0.0", None, &trace, &payload).expect("event");
    let mut tx = store.begin().await.expect("begin");
    let receipt = store
        .append(&mut tx, event, AppendOptions::default())
        .await
        .expect("append");
    // The legacy path, in the producer's transaction.
    let sent = [
        Intent::new("mail:n1", "aa"),
        Intent::new("mail:n1:copy", "bb"),
    ];
    assert!(
        store
            .record_legacy_outcome(&mut tx, "mailer", receipt.event_id, &sent)
            .await
            .expect("legacy outcome")
    );
    tx.commit().await.expect("commit");

    let mut connection = store.pool().acquire().await.expect("connection");
    let request = ClaimRequest::leased("mailer", "app", 10, Duration::from_secs(30));
    let claimed = Store::claim(&store, &mut *connection, &request)
        .await
        .expect("claim");
    drop(connection);
    let lease = &claimed[0].lease;
    assert!(lease.is_shadow());
    let mut tx = store.begin().await.expect("begin");
    store.begin_shadow(&mut tx).await.expect("shadow");
    store
        .record_effect(&mut tx, lease, "mail:n1", "AA")
        .await
        .expect("intent");
    store.end_shadow(&mut tx).await.expect("undo");
    store
        .record_reconciliation(&mut tx, lease)
        .await
        .expect("reconciliation");
    Store::ack(&store, &mut tx, &[lease]).await.expect("ack");
    tx.commit().await.expect("commit");
    store.close().await;
    receipt.event_id
}

#[test]
fn the_cut_over_gate_holds_live_from_the_command_line() {
    let _serial = one_test_at_a_time();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("outbox.db");
    let url = format!("sqlite:{}", path.display());
    assert!(evc(&url, &["migrate"]).status.success());
    let event = runtime().block_on(gated_application(&path));
    let go_live = [
        "consumer", "mode", "mailer", "live", "--as", "ops", "--reason", "cut over",
    ];

    let output = evc(&url, &go_live);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let text = stderr(&output);
    assert!(
        text.contains("mailer may not go live yet; its mode stays shadow"),
        "{text}"
    );
    assert!(text.contains("1 unexplained difference(s)"), "{text}");
    assert!(
        text.contains(&format!(
            "event {event}: only in the legacy outcome: mail:n1:copy"
        )),
        "{text}"
    );
    let output = evc(&url, &["consumer", "show", "mailer"]);
    assert_eq!(
        stdout(&output),
        "mailer: running, mode shadow (revision 0)\n"
    );
    let output = evc(&url, &["status"]);
    assert!(
        stdout(&output)
            .contains("  mailer: 1 of 1 compared deliveries over 0s (1 shadow runs in all)"),
        "{output:?}"
    );

    let output = evc(&url, &["consumer", "gate", "mailer", "--format", "json"]);
    assert_eq!(output.status.code(), Some(100), "{output:?}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["passed"], false);
    assert_eq!(
        (&report["reconciled"], &report["unexplained"]),
        (&serde_json::json!(1), &serde_json::json!(1))
    );
    assert_eq!(report["differences"][0]["event_id"], event.to_string());

    let explain = [
        "consumer",
        "explain",
        "mailer",
        &event.to_string(),
        "--as",
        "ops",
        "--reason",
        "the legacy path mailed a copy we dropped on purpose",
    ];
    let output = evc(&url, &explain);
    assert!(output.status.success(), "{output:?}");
    assert!(
        stdout(&output).contains("the cut-over gate passes"),
        "{output:?}"
    );
    let output = evc(&url, &["consumer", "gate", "mailer"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(stdout(&output).contains("(explained)"), "{output:?}");

    let output = evc(&url, &go_live);
    assert_eq!(
        stdout(&output),
        "mailer: running, mode live (revision 1)\n",
        "{output:?}"
    );
}

/// The application of [`RETAINED`]: two notes; `audit` acks both, `mailer` acks the first
/// and has not yet claimed the second. Returns the notes' ids.
async fn retained_application(path: &Path) -> [uuid::Uuid; 2] {
    let store = SqliteStore::open(path.to_string_lossy(), RETAINED)
        .await
        .expect("the application opens its file");
    let trace = TraceContext::new(TRACE, SPAN, 1).expect("trace");
    let mut tx = store.begin().await.expect("begin");
    let mut ids = Vec::new();
    for id in ["n1", "n2"] {
        let payload = serde_json::json!({ "id": id });
        let event =
            OutgoingEvent::new("note.made", "1.0.0", None, &trace, &payload).expect("event");
        let receipt = store
            .append(&mut tx, event, AppendOptions::default())
            .await
            .expect("append");
        ids.push(receipt.event_id);
    }
    tx.commit().await.expect("commit");
    let mut connection = store.pool().acquire().await.expect("connection");
    for (consumer, batch) in [("audit", 10), ("mailer", 1)] {
        let request = ClaimRequest::leased(consumer, "app", batch, Duration::from_secs(30));
        let claimed = Store::claim(&store, &mut *connection, &request)
            .await
            .expect("claim");
        let leases: Vec<_> = claimed.iter().map(|c| &c.lease).collect();
        Store::ack(&store, &mut *connection, &leases)
            .await
            .expect("ack");
    }
    drop(connection);
    store.close().await;
    [ids[0], ids[1]]
}

#[test]
fn the_purge_counts_then_removes_what_retention_expires() {
    let _serial = one_test_at_a_time();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("outbox.db");
    let url = format!("sqlite:{}", path.display());
    assert!(evc(&url, &["migrate"]).status.success());
    let [settled, open] = runtime().block_on(retained_application(&path));
    let purge = [
        "purge",
        "--as",
        "ops@example.com",
        "--reason",
        "nightly retention",
    ];

    // The dry run counts: the settled note (its two attempts) and the open note's acked
    // attempt; the open note stays for `mailer`.
    let output = evc(&url, &purge);
    assert!(output.status.success(), "{output:?}");
    let text = stdout(&output);
    assert!(text.starts_with("would remove (dry run"), "{text}");
    assert!(
        text.contains("  events                        1\n"),
        "{text}"
    );
    assert!(
        text.contains("  attempts                      3\n"),
        "{text}"
    );
    // Nothing was removed: the same count again, applied.
    let output = evc(
        &url,
        &[&purge[..], &["--apply", "--format", "json"]].concat(),
    );
    assert!(output.status.success(), "{output:?}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["applied"], true);
    assert_eq!(report["purged"]["events"], 1);
    assert_eq!(report["purged"]["attempts"], 3);
    assert!(report["purged"]["purge_id"].is_i64(), "{report}");
    let output = evc(&url, &[&purge[..], &["--apply"]].concat());
    assert!(
        stdout(&output).contains("  events                        0\n"),
        "{output:?}"
    );

    let runtime = runtime();
    let store = runtime
        .block_on(SqliteStore::recorded(path.to_string_lossy()).open())
        .expect("the file opens");
    assert!(
        runtime
            .block_on(store.event(settled))
            .expect("read")
            .is_none()
    );
    assert!(runtime.block_on(store.event(open)).expect("read").is_some());
    runtime.block_on(store.close());

    // `evc status` names the newest purge.
    let output = evc(&url, &["status"]);
    assert!(
        stdout(&output).contains("last purge: 2 (retention), ")
            && stdout(&output).contains("by ops@example.com: 0 rows (nightly retention)"),
        "{output:?}"
    );

    // Retention is every tenant's.
    let output = evc(&url, &[&purge[..], &["--tenant", "acme"]].concat());
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(stderr(&output).contains("one tenant"), "{output:?}");
}

#[test]
fn usage_evidence_reads_the_ledger_of_a_sqlite_outbox() {
    let _serial = one_test_at_a_time();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("outbox.db");
    let url = format!("sqlite:{}", path.display());
    assert!(evc(&url, &["migrate"]).status.success());
    runtime().block_on(application(&path));

    // `audit` dead-lettered one note of the `notes` producer class.
    let output = evc(&url, &["evidence", "--min-count", "1", "--format", "json"]);
    assert!(output.status.success(), "{output:?}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["window_s"], 7.0 * 86_400.0);
    assert_eq!(report["co_triggered"], serde_json::json!([]));
    assert_eq!(
        report["chronic"],
        serde_json::json!([{"producer_class": "notes", "consumer": "audit",
            "dead_letters": 1, "lag_breaches": 0}])
    );
    assert_eq!(report["escalations"][0]["step_kind"], "unclassified");
    assert_eq!(report["escalations"][0]["consumers"]["audit"], 1);

    // Once is under the default threshold of two.
    let output = evc(&url, &["evidence"]);
    let text = stdout(&output);
    assert!(
        text.starts_with("usage evidence over 7d (slots of 1m; signals seen at least 2 times)"),
        "{text}"
    );
    assert!(
        text.contains("chronic (producer class -> consumer):\n  none\n"),
        "{text}"
    );
    let output = evc(&url, &["evidence", "--window", "soon"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("--window \"soon\" is not a duration"),
        "{output:?}"
    );

    // Nothing recorded yet: the snapshots say how to get some.
    let output = evc(&url, &["evidence", "--snapshots"]);
    assert!(output.status.success(), "{output:?}");
    assert!(
        stdout(&output).starts_with("no evidence snapshots recorded"),
        "{output:?}"
    );
    // An application whose contracts record evidence: its dispatcher's round records one.
    let recording = Registry {
        evidence_recording: Some(evc_runtime::EvidenceRecordingDescriptor {
            every_ms: 86_400_000,
            keep_ms: 30 * 86_400_000,
            window_ms: 86_400_000,
            correlation_ms: 60_000,
            min_count: 1,
        }),
        ..REGISTRY
    };
    runtime().block_on(async {
        let store = SqliteStore::open(path.to_string_lossy(), recording)
            .await
            .expect("the application opens its file");
        let round = store.record_evidence().await.expect("a round");
        assert!(round.recorded.is_some(), "{round:?}");
        store.close().await;
    });
    let output = evc(&url, &["evidence", "--snapshots", "--format", "json"]);
    assert!(output.status.success(), "{output:?}");
    let snapshots: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(snapshots.as_array().map(Vec::len), Some(1), "{snapshots}");
    assert_eq!(snapshots[0]["report"]["window_s"], 86_400.0);
    assert_eq!(
        snapshots[0]["report"]["chronic"],
        serde_json::json!([{"producer_class": "notes", "consumer": "audit",
            "dead_letters": 1, "lag_breaches": 0}])
    );
    let output = evc(&url, &["evidence", "--snapshots", "--limit", "1"]);
    let text = stdout(&output);
    assert!(
        text.starts_with("== snapshot of the slot starting ")
            && text.contains("usage evidence over 1d (slots of 1m; signals seen at least 1 times)")
            && text.contains("  notes -> audit: 1 dead letters, 0 lag breaches\n"),
        "{text}"
    );
    // `--limit` lists snapshots; a window is for reading the ledger now.
    for args in [
        &["evidence", "--limit", "2"][..],
        &["evidence", "--snapshots", "--window", "1d"][..],
        &["evidence", "--snapshots", "--limit", "0"][..],
    ] {
        let output = evc(&url, args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {output:?}");
    }
}

#[test]
fn operator_commands_run_on_the_registry_a_sqlite_file_records() {
    let _serial = one_test_at_a_time();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("outbox.db");
    let url = format!("sqlite:{}", path.display());
    let runtime = runtime();

    // migrate: creates the file and the store's schema, once.
    let output = evc(&url, &["migrate"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = stdout(&output);
    assert!(
        text.contains("applied 0001 evc_runtime") && text.contains("applied 19 migrations"),
        "{text}"
    );
    let output = evc(&url, &["migrate"]);
    assert_eq!(stdout(&output), "up to date\n", "{output:?}");
    let output = evc(&url, &["migrate", "--status"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("evc migrate --status is not available on a SQLite outbox"),
        "{output:?}"
    );

    // Before the application opened it, the file records no registry.
    let output = evc(&url, &["status"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("records no registry; open it once with the application"),
        "{output:?}"
    );

    let dead = runtime.block_on(application(&path));

    // status: the dead letter is a problem (exit 100); both consumers listed.
    let output = evc(&url, &["status"]);
    assert_eq!(output.status.code(), Some(100), "{output:?}");
    let text = stdout(&output);
    assert!(
        text.contains("audit: 1 dead-lettered, 0 quarantined"),
        "{text}"
    );
    let output = evc(&url, &["status", "--format", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let consumers: Vec<(&str, i64, i64)> = report["consumers"]
        .as_array()
        .expect("consumers")
        .iter()
        .map(|c| {
            (
                c["consumer"].as_str().expect("name"),
                c["pending"].as_i64().expect("pending"),
                c["dead"].as_i64().expect("dead"),
            )
        })
        .collect();
    assert_eq!(consumers, [("audit", 0, 1), ("mailer", 2, 0)]);
    assert_eq!(report["lag"][0]["latency"]["samples"], 1);

    // timeline: the trace's events, deliveries and attempts.
    let output = evc(&url, &["timeline", TRACE]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = stdout(&output);
    let kinds = |kind: &str| text.lines().filter(|l| l.contains(kind)).count();
    assert_eq!(kinds("  event  "), 2, "{text}");
    assert_eq!(kinds("  attempt  "), 2, "{text}");
    assert!(text.contains("audit  acked (attempt 1)"), "{text}");
    assert!(text.contains("audit  dead (E_BAD) (attempt 1)"), "{text}");

    // consumer: pause, show, resume; an unknown consumer names the known ones.
    let output = evc(
        &url,
        &[
            "consumer", "pause", "mailer", "--as", "ops", "--reason", "a test",
        ],
    );
    assert_eq!(
        stdout(&output),
        "mailer: paused, mode live (revision 1)\n",
        "{output:?}"
    );
    let output = evc(&url, &["consumer", "show", "mailer"]);
    assert_eq!(stdout(&output), "mailer: paused, mode live (revision 1)\n");
    // A change says who makes it and why, or it is not made.
    let output = evc(&url, &["consumer", "resume", "mailer", "--as", "ops"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(stderr(&output).contains("--reason"), "{output:?}");
    let output = evc(
        &url,
        &[
            "consumer", "resume", "mailer", "--as", "ops", "--reason", " ",
        ],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("a reason is required"),
        "{output:?}"
    );
    let output = evc(
        &url,
        &[
            "consumer", "pause", "nope", "--as", "ops", "--reason", "a test",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output)
            .contains("consumer nope is not deployed in this database (deployed: audit, mailer)"),
        "{output:?}"
    );
    let output = evc(
        &url,
        &[
            "consumer", "resume", "mailer", "--as", "ops", "--reason", "a test",
        ],
    );
    assert_eq!(stdout(&output), "mailer: running, mode live (revision 2)\n");

    // dlq list and replay: dry run, proposal, apply under its digest by another person, a
    // repeated key creates nothing.
    let output = evc(&url, &["dlq", "list", "audit"]);
    let text = stdout(&output);
    assert!(
        text.contains(&dead.to_string()) && text.contains("dead") && text.contains("E_BAD"),
        "{output:?}"
    );
    let output = evc(&url, &["replay", "audit", "--dry-run"]);
    let text = stdout(&output);
    assert!(
        text.contains("replay plan for audit: 1 deliveries"),
        "{text}"
    );
    let digest = text
        .lines()
        .find_map(|line| line.strip_prefix("digest: "))
        .expect("digest")
        .to_owned();
    let apply = [
        "replay",
        "audit",
        "--apply",
        "--digest",
        &digest,
        "--reason",
        "fixed",
        "--approval",
        "T-1",
        "--idempotency-key",
        "k1",
        "--as",
        "bob",
    ];
    // The two-person rule: alice proposes, bob applies.
    let output = evc(&url, &apply);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("no one proposed a plan with digest"),
        "{output:?}"
    );
    let output = evc(&url, &["replay", "audit", "--propose", "--as", "alice"]);
    assert!(
        stdout(&output).starts_with("plan 1 proposed by alice: 1 deliveries of audit\n"),
        "{output:?}"
    );
    let output = evc(&url, &apply);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        stdout(&output),
        "replay 1: 1 new deliveries of audit, pending\n"
    );
    let output = evc(&url, &apply);
    assert!(stdout(&output).contains("was applied before"), "{output:?}");

    // dlq discard: not offered by the SQLite store.
    let output = evc(&url, &["dlq", "discard", "audit", "--dry-run"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("evc dlq discard is not available on a SQLite outbox"),
        "{output:?}"
    );

    // dispatch: the replayed delivery and mailer's two, each once, then idle.
    let config = dir.path().join("dispatch.yaml");
    std::fs::write(
        &config,
        "defaults:\n  poll_interval: 50ms\nconsumers:\n  \
         audit:\n    command: [sh, -c, 'cat > \"$OUT/$EVC_CONSUMER.$EVC_EVENT_ID.json\"']\n  \
         mailer:\n    command: [sh, -c, 'cat > \"$OUT/$EVC_CONSUMER.$EVC_EVENT_ID.json\"']\n",
    )
    .expect("config");
    let output = Command::new(env!("CARGO_BIN_EXE_evc"))
        .args([
            "dispatch",
            "--exit-when-idle",
            "--progress",
            "0s",
            "--config",
        ])
        .arg(&config)
        .args(["--database-url", &url])
        .env("OUT", dir.path())
        .output()
        .expect("evc runs");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(
        stdout(&output).contains(": 3 acked (") && stdout(&output).contains("0 dead"),
        "{output:?}"
    );
    let handled = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".json"))
        })
        .count();
    assert_eq!(handled, 3);
    let output = evc(&url, &["status"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(stdout(&output).starts_with("no problems\n"), "{output:?}");
}

/// The application appends a note for each tenant of `tenants` and dead-letters `audit`'s
/// delivery of each. Returns the events' ids, in the order of `tenants`.
async fn tenants_application(path: &Path, tenants: &[&str]) -> Vec<uuid::Uuid> {
    let store = SqliteStore::open(path.to_string_lossy(), REGISTRY)
        .await
        .expect("the application opens its file");
    let trace = TraceContext::new(TRACE, SPAN, 1).expect("trace");
    let mut ids = Vec::new();
    for tenant in tenants {
        let payload = serde_json::json!({ "id": tenant });
        let event =
            OutgoingEvent::new("note.made", "1.0.0", None, &trace, &payload).expect("event");
        let mut tx = store.begin().await.expect("begin");
        let receipt = store
            .append(&mut tx, event, AppendOptions::new().tenant_scope(*tenant))
            .await
            .expect("append");
        tx.commit().await.expect("commit");
        ids.push(receipt.event_id);
    }
    let mut connection = store.pool().acquire().await.expect("connection");
    let request = ClaimRequest::leased("audit", "app", 10, Duration::from_secs(30));
    let claimed = Store::claim(&store, &mut *connection, &request)
        .await
        .expect("claim");
    drop(connection);
    assert_eq!(claimed.len(), tenants.len());
    for claimed in &claimed {
        Store::fail(
            &store,
            &claimed.lease,
            FailureClass::Permanent,
            "E_BAD",
            RetryDecision::Dead,
        )
        .await
        .expect("fail");
    }
    store.close().await;
    ids
}

#[test]
fn tenant_commands_on_a_sqlite_outbox_see_one_tenant() {
    let _serial = one_test_at_a_time();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("outbox.db");
    let url = format!("sqlite:{}", path.display());
    let ids = runtime().block_on(tenants_application(&path, &["acme", "bolt"]));

    let listed = |tenant: Option<&str>| {
        let mut args = vec!["dlq", "list", "audit"];
        args.extend(
            tenant
                .map(|tenant| ["--tenant", tenant])
                .into_iter()
                .flatten(),
        );
        let output = evc(&url, &args);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let out = stdout(&output);
        ids.iter()
            .map(|id| out.contains(&id.to_string()))
            .collect::<Vec<_>>()
    };
    assert_eq!(listed(Some("acme")), [true, false]);
    assert_eq!(listed(Some("bolt")), [false, true]);
    assert_eq!(listed(Some("nobody")), [false, false]);
    assert_eq!(listed(None), [true, true]);

    // A pause for acme is acme's: bolt's status does not show it paused.
    let output = evc(
        &url,
        &[
            "consumer",
            "pause",
            "audit",
            "--tenant",
            "acme",
            "--as",
            "ops",
            "--reason",
            "acme's incident",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let paused = |tenant: &str| {
        let output = evc(&url, &["consumer", "show", "audit", "--tenant", tenant]);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        stdout(&output)
    };
    assert!(paused("acme").contains("paused"), "{}", paused("acme"));
    assert!(!paused("bolt").contains("paused"), "{}", paused("bolt"));

    let output = evc(&url, &["status", "--tenant", "*"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(stderr(&output).contains("--tenant"), "{output:?}");
    // The relay's cursor is every tenant's: a tenant's relay would pass the others' events by.
    let output = evc(&url, &["relay", "--tenant", "acme"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("evc relay publishes every tenant's events: drop --tenant"),
        "{output:?}"
    );
}

#[test]
fn a_sqlite_outbox_is_never_created_shared_or_guessed() {
    let _serial = one_test_at_a_time();
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = runtime();

    // A missing file: an error, and nothing created (not even its lock file).
    let missing = dir.path().join("missing.db");
    let url = format!("sqlite:{}", missing.display());
    for args in [
        &["status"][..],
        &["timeline", TRACE],
        &["consumer", "show", "audit"],
        &["dlq", "list", "audit"],
        &["replay", "audit", "--dry-run"],
    ] {
        let output = evc(&url, args);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {output:?}");
        assert!(
            stderr(&output).contains("no outbox file at"),
            "{args:?}: {output:?}"
        );
    }
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);

    // While the application holds its file, the commands are refused, saying why.
    let path = dir.path().join("outbox.db");
    let url = format!("sqlite:{}", path.display());
    let store = runtime
        .block_on(SqliteStore::open(path.to_string_lossy(), REGISTRY))
        .expect("open");
    let output = evc(&url, &["status"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("a SQLite outbox has one store at a time"),
        "{output:?}"
    );
    runtime.block_on(store.close());
    let output = evc(&url, &["status"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");

    // An in-memory database cannot hold an outbox; an unknown scheme is refused without
    // repeating the URL (it may hold a password).
    let output = evc("sqlite::memory:", &["status"]);
    assert!(stderr(&output).contains("in-memory"), "{output:?}");
    let output = evc("mysql://user:hunter2@localhost/db", &["status"]);
    assert_eq!(output.status.code(), Some(1));
    let error = stderr(&output);
    assert!(
        error.contains("must start with postgres://, postgresql:// or sqlite:")
            && !error.contains("hunter2"),
        "{error}"
    );
}

#[test]
fn the_inventory_lists_what_an_off_consumer_never_received() {
    let _serial = one_test_at_a_time();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("outbox.db");
    let url = format!("sqlite:{}", path.display());
    assert!(evc(&url, &["migrate"]).status.success());
    let ids = runtime().block_on(async {
        let store = SqliteStore::open(path.to_string_lossy(), INVENTORIED)
            .await
            .expect("the application opens its file");
        let trace = TraceContext::new(TRACE, SPAN, 1).expect("trace");
        let mut tx = store.begin().await.expect("begin");
        let mut ids = Vec::new();
        for id in ["n1", "n2"] {
            let payload = serde_json::json!({ "id": id });
            let event =
                OutgoingEvent::new("note.made", "1.0.0", None, &trace, &payload).expect("event");
            let receipt = store
                .append(&mut tx, event, AppendOptions::default())
                .await
                .expect("append");
            ids.push(receipt.event_id);
        }
        tx.commit().await.expect("commit");
        store.close().await;
        ids
    });

    let output = evc(&url, &["inventory", "mailer"]);
    assert!(output.status.success(), "{output:?}");
    let text = stdout(&output);
    assert!(
        text.starts_with(
            "inventory of mailer (max_age 1d, repair none): 2 safe, 0 repair, 0 quarantine, 0 \
             expire\n"
        ),
        "{text}"
    );
    for id in &ids {
        assert!(
            text.contains(&format!("  safe       {id} note.made@1.0.0\n")),
            "{text}"
        );
    }

    let output = evc(
        &url,
        &["inventory", "mailer", "--limit", "1", "--format", "json"],
    );
    assert!(output.status.success(), "{output:?}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["truncated"], true);
    assert_eq!(report["counts"]["safe"], 1);
    assert_eq!(report["items"][0]["event_id"], ids[0].to_string());
    assert_eq!(report["items"][0]["class"], "safe");
    assert_eq!(report["max_age_ms"], 86_400_000);

    // `audit` received both; the inventories wrote nothing.
    let output = evc(&url, &["inventory", "audit", "--format", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["items"], serde_json::json!([]), "{report}");
    let output = evc(&url, &["inventory", "mailer", "--format", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["counts"]["safe"], 2, "{report}");

    // Alice proposes, Bob applies: two pending deliveries; the same key again changes nothing.
    let output = evc(&url, &["inventory", "mailer", "--propose", "--as", "alice"]);
    assert!(output.status.success(), "{output:?}");
    let text = stdout(&output);
    let digest = text
        .lines()
        .find_map(|line| line.strip_prefix("digest "))
        .expect("a digest")
        .to_owned();
    assert!(text.contains("proposed as plan 1 by alice"), "{text}");
    let apply = |person: &str| {
        evc(
            &url,
            &[
                "inventory",
                "mailer",
                "--apply",
                "--digest",
                &digest,
                "--reason",
                "backfill before going live",
                "--approval",
                "CHG-3",
                "--idempotency-key",
                "inv-1",
                "--as",
                person,
            ],
        )
    };
    let output = apply("alice");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("apply refused, nothing written: alice proposed this plan"),
        "{output:?}"
    );
    let output = apply("bob");
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        stdout(&output),
        "inventory 1: 2 new deliveries of mailer, pending (2 safe, 0 repaired); 0 quarantined \
         (evc dlq list mailer), 0 expired\n"
    );
    let output = apply("bob");
    assert!(stdout(&output).contains("was applied before"), "{output:?}");
    let output = evc(&url, &["status"]);
    let text = stdout(&output);
    assert!(
        text.contains(
            "last inventory of mailer: 1 (2 safe, 0 repaired, 0 quarantined, 0 expired), "
        ) && text.contains("approved by bob (backfill before going live)"),
        "{text}"
    );
    let output = evc(&url, &["inventory", "mailer", "--format", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["items"], serde_json::json!([]), "{report}");

    let output = evc(&url, &["inventory", "nobody"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(stderr(&output).contains("nobody"), "{output:?}");
    let output = evc(&url, &["inventory", "mailer", "--limit", "0"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
}
