//! The operator commands against a real server: `evc status` (problems first, exit 100 with
//! problems, Prometheus output), `evc consumer pause | resume | mode | show` on the consumers the
//! database's registry mirror lists, `evc timeline`, `evc dlq list`, `evc replay` and
//! `evc migrate`. The database gets this repository's generated migrations, so its deployed
//! consumers are the reference contracts'.
//!
//! Events and their dead letters are written through the runtime's store (`PgStore`: append,
//! claim, fail), as producers and workers write them, and read back through the store's read
//! methods or the commands' own output; the tests hold no SQL against the runtime's tables.

use std::path::Path;
use std::process::{Command, Output};
use std::str::FromStr;
use std::time::Duration;

use evc_runtime::{
    AppendOptions, ClaimRequest, ConsumerDescriptor, DeliveryStatus, EventDescriptor, FailureClass,
    NewEvent, Observe, OutgoingEvent, PgStore, Registry, RetryDecision, Store,
    SubscriptionDescriptor, TraceContext, VersionDescriptor,
};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};
use uuid::Uuid;

const DEFAULT_URL: &str = "postgres://root@localhost/test";
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN: &str = "00f067aa0ba902b7";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A fresh database, with the generated migrations applied when `migrated`; `None` (after
/// saying why) when the server is unreachable outside CI.
async fn create_database(name: &str, migrated: bool) -> Option<String> {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let mut admin = match PgConnection::connect(&url).await {
        Ok(connection) => connection,
        Err(error) => {
            let ci = std::env::var("CI").is_ok_and(|value| value.eq_ignore_ascii_case("true"));
            assert!(
                !ci,
                "CI=true and PostgreSQL at {url} is unreachable: {error}"
            );
            eprintln!("skipped: PostgreSQL at {url} is unreachable ({error}); set DATABASE_URL");
            return None;
        }
    };
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await
    .expect("drop");
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .expect("create");
    let options = PgConnectOptions::from_str(&url)
        .expect("url")
        .database(name);
    let url = options.to_url_lossy().to_string();
    if migrated {
        apply_migrations(&url, |_| false).await;
    }
    Some(url)
}

/// Applies the generated migrations to the database of `url`, in order, except the files
/// whose name `skipped` takes.
async fn apply_migrations(url: &str, skipped: impl Fn(&str) -> bool) {
    let mut connection = PgConnection::connect(url).await.expect("connect");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/migrations");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("migrations")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| !skipped(&path.file_name().expect("a name").to_string_lossy()))
        .collect();
    files.sort();
    for file in files {
        let sql = std::fs::read_to_string(&file).expect("migration");
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&mut connection)
            .await
            .expect("migration applies");
    }
}

async fn drop_database(name: &str) {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    if let Ok(mut admin) = PgConnection::connect(&url).await {
        let _ = sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut admin)
        .await;
    }
}

async fn execute(url: &str, sql: &str) {
    let mut connection = PgConnection::connect(url).await.expect("connect");
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(&mut connection)
        .await
        .expect("sql runs");
}

/// An outbox store on `url` over the deployed registry (the reference contracts', as the
/// migrations deployed them) with `edit` applied: the registry of the producer and the worker
/// that write a test's events and settle their deliveries.
async fn seed_store(url: &str, edit: impl FnOnce(&mut Registry)) -> PgStore {
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(url)
        .await
        .expect("connect");
    let mut registry = evc_runtime::deployed_registry(&pool)
        .await
        .expect("the deployed registry");
    edit(&mut registry);
    PgStore::new(pool, registry).expect("the registry loads")
}

/// The deployed registry as it is.
fn deployed(_: &mut Registry) {}

/// The registry of a producer built before worker.sql.aggregate stopped subscribing to
/// iu.born: its iu.born 1.0.0 events fan out to worker.sql.aggregate too, which the deployed
/// registry no longer accepts.
fn aggregate_subscribes_to_born(registry: &mut Registry) {
    let consumers: Vec<ConsumerDescriptor> = registry
        .consumers
        .iter()
        .map(|consumer| {
            if consumer.name != "worker.sql.aggregate" {
                return *consumer;
            }
            let mut subscriptions = consumer.subscriptions.to_vec();
            subscriptions.push(SubscriptionDescriptor {
                event: "iu.born",
                requirement: "^1",
                versions: &["1.0.0", "1.1.0"],
            });
            subscriptions.sort_by_key(|subscription| subscription.event);
            ConsumerDescriptor {
                subscriptions: subscriptions.leak(),
                ..*consumer
            }
        })
        .collect();
    registry.consumers = consumers.leak();
}

/// The registry of a producer whose iu.born 1.0.0 schema took any object: its events may
/// carry payloads the deployed schema refuses.
fn born_takes_any_object(registry: &mut Registry) {
    let events: Vec<EventDescriptor> = registry
        .events
        .iter()
        .map(|event| {
            if event.name != "iu.born" {
                return *event;
            }
            let versions: Vec<VersionDescriptor> = event
                .versions
                .iter()
                .map(|version| VersionDescriptor {
                    schema: if version.version == "1.0.0" {
                        r#"{"type":"object"}"#
                    } else {
                        version.schema
                    },
                    ..*version
                })
                .collect();
            EventDescriptor {
                versions: versions.leak(),
                ..*event
            }
        })
        .collect();
    registry.events = events.leak();
}

/// An iu.born 1.0.0 payload for information unit number `unit`.
fn born(unit: u64) -> serde_json::Value {
    serde_json::json!({
        "born_at": "2026-01-01T00:00:00Z",
        "governance_state": "draft",
        "iu_unit_id": format!("01890a5d-ac96-774b-bcce-{unit:012x}"),
        "iu_version_id": "01890a5d-ac96-774b-bcce-b302099a8058",
    })
}

/// Appends one iu.born 1.0.0 event per payload on trace [`TRACE`], in one committed
/// transaction, as a producer does; answers their event ids in order.
async fn append_born(store: &PgStore, payloads: &[serde_json::Value]) -> Vec<Uuid> {
    let trace = TraceContext::new(TRACE, SPAN, 1).expect("a trace context");
    let events: Vec<NewEvent> = payloads
        .iter()
        .map(|payload| {
            let order_key = evc_runtime::order_key_part(&payload["iu_unit_id"]);
            OutgoingEvent::new("iu.born", "1.0.0", Some(order_key), &trace, payload)
                .expect("serializes")
                .into()
        })
        .collect();
    let mut transaction = store.begin().await.expect("begin");
    let receipts = store
        .append_batch(&mut transaction, events)
        .await
        .expect("the store appends the events");
    transaction.commit().await.expect("commit");
    receipts.iter().map(|receipt| receipt.event_id).collect()
}

/// Ends `event_id`'s delivery to `consumer` as a worker does when its handler fails for good
/// with error `code`: claimed (every due delivery of the consumer is; the others go back as
/// never claimed), then failed as `decision` says, with its attempt row.
async fn settle(
    store: &PgStore,
    event_id: Uuid,
    consumer: &str,
    code: &str,
    decision: RetryDecision,
) {
    let owner = "operate-test";
    let request = ClaimRequest::leased(consumer, owner, 1000, Duration::from_secs(60));
    let mut connection = store.pool().acquire().await.expect("connection");
    let claimed = store.claim(&mut connection, &request).await.expect("claim");
    drop(connection);
    let lease = claimed
        .iter()
        .find(|claimed| claimed.lease.event_id == event_id)
        .map(|claimed| claimed.lease.clone())
        .unwrap_or_else(|| panic!("no due delivery of {event_id} to {consumer}"));
    store
        .fail(&lease, FailureClass::Permanent, code, decision)
        .await
        .expect("the store fails the delivery");
    store.release(owner).await.expect("release");
}

/// Deliveries of `consumer` by state, `(state, count)`, non-zero only: its delivery rows by
/// status, then `acked` for its acked attempt rows (an ack deletes the delivery).
async fn states(store: &PgStore, consumer: &str) -> Vec<(String, u64)> {
    let mut states = Vec::new();
    for status in DeliveryStatus::ALL {
        let count = store
            .count_deliveries(consumer, &[status])
            .await
            .expect("count deliveries");
        if count > 0 {
            states.push((status.as_str().to_owned(), count));
        }
    }
    let acked = store
        .count_attempts(consumer, "acked")
        .await
        .expect("count attempts");
    if acked > 0 {
        states.push(("acked".to_owned(), acked));
    }
    states
}

/// `evc timeline` output without each line's time, and with the id of every event but
/// `known` shown as `*` (lifecycle events get fresh ids).
fn timeline_lines(text: &str, known: Uuid) -> Vec<String> {
    let known = known.to_string();
    text.lines()
        .map(|line| {
            let mut rest = line
                .split_once("  ")
                .map_or(line, |(_, rest)| rest)
                .to_owned();
            for word in line.split_whitespace() {
                if word.len() == 36 && word != known && Uuid::parse_str(word).is_ok() {
                    rest = rest.replace(word, "*");
                }
            }
            rest
        })
        .collect()
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

#[test]
fn operator_commands_report_and_steer_the_deployed_consumers() {
    let name = format!("evc_cli_operate_{}", std::process::id());
    let runtime = runtime();
    let Some(url) = runtime.block_on(create_database(&name, true)) else {
        return;
    };
    let outcome = std::panic::catch_unwind(|| check(&runtime, &url));
    runtime.block_on(drop_database(&name));
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

fn check(runtime: &tokio::runtime::Runtime, url: &str) {
    // A fresh outbox: no problems, every deployed consumer listed.
    let output = evc(url, &["status"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(text.starts_with("no problems\n"), "{text}");
    assert!(text.contains("worker.sql.aggregate"), "{text}");
    // Heartbeats by the executor class the deployed mirror names, with its owner.
    assert!(
        text.contains(
            "\nexecutor classes (heartbeats):\n  \
             ai.review (owner team-ml): 0 workers, 0 silent; worker.ai.review_suggest\n"
        ),
        "{text}"
    );
    let output = evc(url, &["status", "--format", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let classes: Vec<(&str, &str, Vec<&str>)> = report["executor_classes"]
        .as_array()
        .expect("a list of classes")
        .iter()
        .map(|class| {
            (
                class["executor_class"].as_str().unwrap_or_default(),
                class["heartbeat_owner"].as_str().unwrap_or_default(),
                class["consumers"]
                    .as_array()
                    .map(|names| names.iter().filter_map(|n| n.as_str()).collect())
                    .unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        classes,
        [
            ("ai.review", "team-ml", vec!["worker.ai.review_suggest"]),
            (
                "dot.pipeline",
                "team-pipeline",
                vec!["worker.dot.cut_pipeline", "worker.dot.iu_axis"]
            ),
            (
                "notification.email",
                "team-notify",
                vec!["worker.notification.iu"]
            ),
            ("render.view", "team-views", vec!["worker.render.mout_view"]),
            (
                "sql.aggregate",
                "team-platform",
                vec!["worker.sql.aggregate"]
            ),
            ("sql.audit", "team-platform", vec!["audit"]),
        ],
        "the retired notification.sms runs no consumer"
    );

    // Pause: the status leads with it and exits 100; the metrics say so too.
    let output = evc(
        url,
        &[
            "consumer",
            "pause",
            "worker.sql.aggregate",
            "--as",
            "ops",
            "--reason",
            "a test",
        ],
    );
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        stdout(&output),
        "worker.sql.aggregate: paused, mode live (revision 1)\n"
    );
    let output = evc(url, &["status"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(100), "{text}");
    assert!(
        text.starts_with("problems (1):\n  worker.sql.aggregate: paused\n"),
        "{text}"
    );
    let output = evc(url, &["status", "--format", "prometheus"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(100));
    assert!(
        text.contains("evc_consumer_paused{consumer=\"worker.sql.aggregate\"} 1"),
        "{text}"
    );

    // Mode off, then back to running and live: no problems again.
    let output = evc(
        url,
        &[
            "consumer",
            "mode",
            "worker.sql.aggregate",
            "off",
            "--as",
            "ops",
            "--reason",
            "a test",
        ],
    );
    assert_eq!(
        stdout(&output),
        "worker.sql.aggregate: paused, mode off (revision 2)\n"
    );
    evc(
        url,
        &[
            "consumer",
            "resume",
            "worker.sql.aggregate",
            "--as",
            "ops",
            "--reason",
            "a test",
        ],
    );
    evc(
        url,
        &[
            "consumer",
            "mode",
            "worker.sql.aggregate",
            "live",
            "--as",
            "ops",
            "--reason",
            "a test",
        ],
    );
    let output = evc(url, &["consumer", "show", "worker.sql.aggregate"]);
    assert_eq!(
        stdout(&output),
        "worker.sql.aggregate: running, mode live (revision 4)\n"
    );
    assert_eq!(evc(url, &["status"]).status.code(), Some(0));

    // An unknown consumer: exit 1, naming the deployed ones; nothing written.
    let output = evc(
        url,
        &[
            "consumer",
            "pause",
            "worker.nope",
            "--as",
            "ops",
            "--reason",
            "a test",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("consumer worker.nope is not deployed in this database (deployed: audit,"),
        "{stderr}"
    );

    // One iu.born event on a trace, appended by a producer built on an earlier registry, in
    // which worker.sql.aggregate still subscribed to iu.born; its payload passes the deployed
    // iu.born 1.0.0 schema (replay checks it again). It fans out to audit,
    // worker.notification.iu, worker.render.mout_view and worker.sql.aggregate; the audit and
    // worker.sql.aggregate deliveries are dead-lettered as a worker does (claimed, then failed
    // for good), and each dead-lettering emits job.dead_lettered in the same trace, for audit
    // and worker.sql.aggregate.
    let store = runtime.block_on(seed_store(url, aggregate_subscribes_to_born));
    let [event] = runtime.block_on(append_born(&store, &[born(1)]))[..] else {
        panic!("one event appended");
    };
    for consumer in ["audit", "worker.sql.aggregate"] {
        runtime.block_on(settle(&store, event, consumer, "boom", RetryDecision::Dead));
    }
    let output = evc(url, &["status"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(100));
    assert!(
        text.starts_with(
            "problems (2):\n  audit: 1 dead-lettered, 0 quarantined\n  \
             worker.sql.aggregate: 1 dead-lettered, 0 quarantined\n"
        ),
        "{text}"
    );
    // In time order: the event and its deliveries, then each dead-lettering: the
    // job.dead_lettered event it emitted, that event's deliveries, the attempt.
    let output = evc(url, &["timeline", TRACE]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    let lifecycle = [
        "event     *  -  job.dead_lettered 1.1.0",
        "delivery  *  audit  pending (attempt 0)",
        "delivery  *  worker.sql.aggregate  pending (attempt 0)",
    ];
    let mut expected = vec![
        format!("event     {event}  -  iu.born 1.0.0"),
        format!("delivery  {event}  audit  dead (attempt 1)"),
        format!("delivery  {event}  worker.notification.iu  pending (attempt 0)"),
        format!("delivery  {event}  worker.render.mout_view  pending (attempt 0)"),
        format!("delivery  {event}  worker.sql.aggregate  dead (attempt 1)"),
    ];
    for consumer in ["audit", "worker.sql.aggregate"] {
        expected.extend(lifecycle.map(str::to_owned));
        expected.push(format!(
            "attempt   {event}  {consumer}  dead (boom) (attempt 1)"
        ));
    }
    assert_eq!(timeline_lines(&text, event), expected, "{text}");
    let output = evc(url, &["timeline", "0af7651916cd43dd8448eb211c80319c"]);
    assert_eq!(output.status.code(), Some(100));
    assert_eq!(
        stdout(&output),
        "nothing recorded for trace 0af7651916cd43dd8448eb211c80319c\n"
    );

    // The dead letters, then their replay: dry run, refusals, apply, the same key again.
    let output = evc(url, &["dlq", "list", "audit"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let fields: Vec<&str> = lines[1].split_whitespace().collect();
    let event_id = event.to_string();
    assert_eq!(
        fields[..7],
        [&event_id, "0", "dead", "1", "boom", "iu.born", "1.0.0"],
        "{text}"
    );
    let output = evc(url, &["replay", "audit", "--dry-run"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.starts_with(
            "replay plan for audit: 1 deliveries
"
        ),
        "{text}"
    );
    let digest = text
        .lines()
        .find_map(|line| line.strip_prefix("digest: "))
        .expect("the dry run prints the digest")
        .to_owned();
    assert_eq!(digest.len(), 64);
    let apply_as = |person: &str, reason: &str, key: &str| {
        evc(
            url,
            &[
                "replay",
                "audit",
                "--apply",
                "--digest",
                &digest,
                "--reason",
                reason,
                "--approval",
                "CHG-1",
                "--idempotency-key",
                key,
                "--as",
                person,
            ],
        )
    };
    let apply = |reason: &str, key: &str| apply_as("bob", reason, key);
    // The two-person rule: a plan no one proposed is not applied; its proposer cannot apply it.
    let output = apply("audit sink fixed", "k-1");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(&format!(
            "replay refused, nothing written: no one proposed a plan with digest {digest}"
        )),
        "{output:?}"
    );
    let output = evc(url, &["replay", "audit", "--propose"]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "--propose names who: {output:?}"
    );
    let output = evc(url, &["replay", "audit", "--propose", "--as", "alice"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(
        text.starts_with("plan 1 proposed by alice: 1 deliveries of audit\n")
            && text.contains(&format!("digest: {digest}\n")),
        "{text}"
    );
    let output = apply_as("alice", "audit sink fixed", "k-1");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("alice proposed this plan and cannot also approve it"),
        "{output:?}"
    );
    let output = apply(&"x".repeat(501), "k-1");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(
            "replay refused, nothing written: the reason has 501 characters; at most 500"
        ),
        "{output:?}"
    );
    // `--apply` without its approval fields is a usage error.
    let output = evc(url, &["replay", "audit", "--apply", "--digest", &digest]);
    assert_eq!(output.status.code(), Some(2));
    let output = apply("audit sink fixed", "k-1");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        stdout(&output),
        "replay 1: 1 new deliveries of audit, pending
"
    );
    let output = apply("audit sink fixed", "k-1");
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        stdout(&output),
        "replay 1 was applied before under this idempotency key (1 deliveries); nothing new
"
    );
    let output = evc(url, &["dlq", "list", "audit"]);
    assert_eq!(
        stdout(&output),
        "audit: no dead-lettered or quarantined deliveries
"
    );
    let output = evc(url, &["timeline", TRACE]);
    assert!(
        stdout(&output).contains(&format!(
            "  replay    {event}  audit  replay 1 of generation 0 from dead (approval CHG-1, proposed by alice, approved by bob)"
        )),
        "{}",
        stdout(&output)
    );
    // worker.sql.aggregate does not subscribe to iu.born: its dry run says apply will refuse,
    // and apply does.
    let output = evc(url, &["replay", "worker.sql.aggregate", "--dry-run"]);
    let text = stdout(&output);
    assert!(
        text.contains("iu.born 1.0.0 (no longer accepted)"),
        "{text}"
    );
    assert!(
        text.contains(
            "1 of them carry a version the consumer no longer accepts: apply will refuse"
        ),
        "{text}"
    );
    let digest = text
        .lines()
        .find_map(|line| line.strip_prefix("digest: "))
        .expect("digest")
        .to_owned();
    let output = evc(
        url,
        &[
            "replay",
            "worker.sql.aggregate",
            "--apply",
            "--digest",
            &digest,
            "--reason",
            "r",
            "--approval",
            "CHG-2",
            "--idempotency-key",
            "k-2",
            "--as",
            "bob",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(&format!(
            "consumer worker.sql.aggregate no longer accepts iu.born 1.0.0 (event {event}; no longer subscribed)"
        )),
        "{output:?}"
    );

    // What cannot be replayed can be discarded: dry run, a refusal, apply (every delivery
    // printed), the same key again; then it is neither listed nor replayed.
    let output = evc(
        url,
        &["dlq", "discard", "worker.sql.aggregate", "--dry-run"],
    );
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.starts_with("discard plan for worker.sql.aggregate: 1 deliveries\n"),
        "{text}"
    );
    let discard_digest = text
        .lines()
        .find_map(|line| line.strip_prefix("digest: "))
        .expect("the dry run prints the digest")
        .to_owned();
    assert_ne!(
        discard_digest, digest,
        "a replay's digest does not apply a discard"
    );
    let discard = |digest: &str, reason: &str| {
        evc(
            url,
            &[
                "dlq",
                "discard",
                "worker.sql.aggregate",
                "--apply",
                "--digest",
                digest,
                "--reason",
                reason,
                "--approval",
                "INC-3",
                "--idempotency-key",
                "d-1",
                "--as",
                "bob",
            ],
        )
    };
    let output = discard(&digest, "not ours");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(&format!(
            "discard refused, nothing written: plan digest {digest} does not match the current plan {discard_digest}"
        )),
        "{output:?}"
    );
    let output = evc(
        url,
        &[
            "dlq",
            "discard",
            "worker.sql.aggregate",
            "--apply",
            "--digest",
            &discard_digest,
        ],
    );
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let output = evc(
        url,
        &[
            "dlq",
            "discard",
            "worker.sql.aggregate",
            "--propose",
            "--as",
            "alice",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let discarded = format!("  {event}  generation 0  dead  iu.born 1.0.0\n");
    let output = discard(&discard_digest, "not ours");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        stdout(&output),
        format!("discard 1: 1 deliveries of worker.sql.aggregate discarded\n{discarded}")
    );
    let output = discard(&discard_digest, "not ours");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        stdout(&output),
        format!(
            "discard 1 was applied before under this idempotency key (1 deliveries); nothing new\n{discarded}"
        )
    );
    // The command line emits the lifecycle events of its replays and discards, as an
    // application does: the deployed registry registers them and its settings row holds the
    // payload policy to check them against.
    let lifecycle = ["dlq_replay.scheduled", "job.discarded"].map(|event_type| {
        runtime
            .block_on(store.count_events(&[event_type]))
            .expect("count events")
    });
    assert_eq!(
        lifecycle,
        [1, 1],
        "one replay applied, one delivery discarded"
    );
    let output = evc(url, &["dlq", "list", "worker.sql.aggregate"]);
    assert_eq!(
        stdout(&output),
        "worker.sql.aggregate: no dead-lettered or quarantined deliveries\n"
    );
    let output = evc(url, &["replay", "worker.sql.aggregate", "--dry-run"]);
    assert_eq!(stdout(&output), "worker.sql.aggregate: nothing to replay\n");
    let output = evc(url, &["timeline", TRACE]);
    assert!(
        stdout(&output).contains(&format!(
            "  discard   {event}  worker.sql.aggregate  discard 1 of generation 0 (approval INC-3, proposed by alice, approved by bob)"
        )),
        "{}",
        stdout(&output)
    );

    // A dead letter whose payload the deployed schema refuses (its producer's schema took any
    // object): the dry run names it with its reason code, and apply refuses.
    let loose = runtime.block_on(seed_store(url, born_takes_any_object));
    let [invalid] = runtime.block_on(append_born(
        &loose,
        &[serde_json::json!({"iu_unit_id": "not-a-uuid"})],
    ))[..] else {
        panic!("one event appended");
    };
    runtime.block_on(settle(
        &loose,
        invalid,
        "audit",
        "boom",
        RetryDecision::Dead,
    ));
    let output = evc(url, &["replay", "audit", "--dry-run"]);
    let text = stdout(&output);
    assert!(
        text.contains(&format!(
            "1 of them cannot be replayed: apply will refuse (leave them out: --event for the others)\n  {invalid}  generation 0  schema_invalid\n"
        )),
        "{text}"
    );

    // No database named: a clear error, exit 1.
    let output = Command::new(env!("CARGO_BIN_EXE_evc"))
        .arg("status")
        .env_remove("DATABASE_URL")
        .output()
        .expect("evc runs");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("no database: pass --database-url or set DATABASE_URL")
    );
}

#[test]
fn migrate_applies_each_migration_once_and_reports_progress() {
    let name = format!("evc_cli_migrate_{}", std::process::id());
    let runtime = runtime();
    let Some(url) = runtime.block_on(create_database(&name, false)) else {
        return;
    };
    let outcome =
        std::panic::catch_unwind(|| {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/migrations");
            let dir = dir.to_str().expect("utf-8 path");
            let files = std::fs::read_dir(dir).expect("migrations").count();

            let output = evc(&url, &["migrate", "--dir", dir, "--status"]);
            let text = stdout(&output);
            assert_eq!(output.status.code(), Some(0), "{text}");
            assert!(
                text.lines().next().is_some_and(|line| line
                    .ends_with(&format!(": {files} migrations, 0 applied, {files} pending"))),
                "{text}"
            );
            assert!(text.contains("  pending  0001  evc runtime\n"), "{text}");

            let output = evc(&url, &["migrate", "--dir", dir]);
            let text = stdout(&output);
            assert_eq!(output.status.code(), Some(0), "{text}");
            assert!(
                text.contains(&format!("[1/{files}] 0001 evc runtime ...")),
                "{text}"
            );
            assert!(text.contains(&format!("[{files}/{files}] ")), "{text}");
            assert!(
                text.ends_with(&format!("applied {files} migrations\n")),
                "{text}"
            );

            // The evc tables are there: the operator commands work on the database.
            assert_eq!(evc(&url, &["status"]).status.code(), Some(0));

            let output = evc(&url, &["migrate", "--dir", dir]);
            let text = stdout(&output);
            assert!(
                text.ends_with(&format!("{files} applied, 0 pending\nup to date\n")),
                "{text}"
            );

            // A directory without migrations: a clear error.
            let output = evc(&url, &["migrate", "--dir", "/nonexistent/migrations"]);
            assert_eq!(output.status.code(), Some(1));
            assert!(
                String::from_utf8_lossy(&output.stderr)
                    .contains("cannot read the migrations in /nonexistent/migrations"),
                "{output:?}"
            );
        });
    runtime.block_on(drop_database(&name));
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn dispatch_hands_each_delivery_to_its_command_and_settles_it_by_exit_status() {
    let name = format!("evc_cli_dispatch_{}", std::process::id());
    let runtime = runtime();
    let Some(url) = runtime.block_on(create_database(&name, true)) else {
        return;
    };
    let outcome = std::panic::catch_unwind(|| {
        // Three iu.born events, each for audit, worker.notification.iu and
        // worker.render.mout_view: audit (transactional) writes each payload to a file; the
        // leased worker.render.mout_view fails for good (exit 3); worker.notification.iu
        // quarantines (exit 65).
        let store = runtime.block_on(seed_store(&url, deployed));
        let payloads: Vec<serde_json::Value> = (1..=3).map(born).collect();
        let events = runtime.block_on(append_born(&store, &payloads));
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("dispatch.yaml");
        std::fs::write(
            &config,
            "defaults:\n  poll_interval: 50ms\n  workers: 2\nconsumers:\n  \
             audit:\n    command: [sh, -c, 'cat > \"$OUT/$EVC_EVENT_ID.$EVC_ATTEMPT.json\"']\n  \
             worker.render.mout_view:\n    command: [sh, -c, 'exit 3']\n  \
             worker.notification.iu:\n    command: [sh, -c, 'exit 65']\n",
        )
        .expect("config");
        let output = dispatch_until_idle(&config, &url)
            .env("OUT", dir.path())
            .output()
            .expect("evc runs");
        let text = stdout(&output);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        // Each dead-lettering emits `job.dead_lettered` through the deployed payload policy;
        // audit, which subscribes to it, acks it too (worker.sql.aggregate, also subscribed, is
        // not run here).
        assert!(
            text.contains(": 6 acked (")
                && text.contains(", 0 retried, 3 dead, 3 quarantined, 0 stale"),
            "{text}"
        );
        // Each payload reached its command once, on standard input.
        for (event, payload) in events.iter().zip(&payloads) {
            let file = dir.path().join(format!("{event}.1.json"));
            let written: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&file).expect("payload file"))
                    .expect("JSON");
            assert_eq!(&written, payload);
        }
        // Nothing else was emitted, and nothing refused.
        let emitted = [&[][..], &["job.dead_lettered"]].map(|types| {
            runtime
                .block_on(store.count_events(types))
                .expect("count events")
        });
        assert_eq!(emitted, [6, 3], "three iu.born, three job.dead_lettered");
        let rejects = runtime.block_on(store.rejects(10)).expect("rejects");
        assert!(rejects.is_empty(), "{rejects:?}");
        // Each consumer's deliveries by state (an ack deletes its delivery; its attempt row
        // is its record), and the error code each failed one keeps.
        let settled: Vec<(&str, Vec<(String, u64)>)> = [
            "audit",
            "worker.notification.iu",
            "worker.render.mout_view",
            "worker.sql.aggregate",
        ]
        .into_iter()
        .map(|consumer| (consumer, runtime.block_on(states(&store, consumer))))
        .collect();
        assert_eq!(
            settled,
            [
                ("audit", vec![("acked".to_owned(), 6)]),
                (
                    "worker.notification.iu",
                    vec![("quarantined".to_owned(), 3)]
                ),
                ("worker.render.mout_view", vec![("dead".to_owned(), 3)]),
                // Subscribed to `job.dead_lettered`, not run here.
                ("worker.sql.aggregate", vec![("pending".to_owned(), 3)]),
            ]
        );
        for event in &events {
            for (consumer, code) in [
                ("worker.notification.iu", "exit_65"),
                ("worker.render.mout_view", "exit_3"),
            ] {
                let delivery = runtime
                    .block_on(store.delivery(*event, consumer))
                    .expect("read")
                    .expect("a delivery row");
                assert_eq!(
                    delivery.last_error_code.as_deref(),
                    Some(code),
                    "{consumer}"
                );
            }
        }

        // A consumer the database does not deploy, and a malformed file: clear errors.
        std::fs::write(
            &config,
            "consumers:\n  worker.nope:\n    command: [/bin/true]\n",
        )
        .expect("config");
        let output = evc(
            &url,
            &["dispatch", "--config", config.to_str().expect("utf-8")],
        );
        assert_eq!(output.status.code(), Some(1));
        assert!(
            String::from_utf8_lossy(&output.stderr)
                .contains("consumer worker.nope is not deployed in this database"),
            "{output:?}"
        );
        std::fs::write(&config, "consumers: [oops\n").expect("config");
        let output = evc(
            &url,
            &["dispatch", "--config", config.to_str().expect("utf-8")],
        );
        assert_eq!(output.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("dispatch.yaml:"), "{stderr}");
    });
    runtime.block_on(drop_database(&name));
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The repository's generated migrations directory.
/// `evc dispatch` of `config` on the database at `url`, until nothing is left to do, with
/// only the final totals printed.
fn dispatch_until_idle(config: &Path, url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_evc"));
    command
        .args([
            "dispatch",
            "--exit-when-idle",
            "--progress",
            "0s",
            "--config",
        ])
        .arg(config)
        .args(["--database-url", url]);
    command
}

fn migrations_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/migrations")
}

/// Runs `command` to its end; a run that is still going after a minute is killed and fails the
/// test (a hang guard, so a command that blocks fails instead of hanging the suite).
fn finish(command: &mut Command) -> Output {
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("evc starts");
    for _ in 0..600 {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let output = child.wait_with_output().expect("output");
    panic!("evc did not finish within a minute (killed): {output:?}");
}

/// Runs `f` on a fresh database named `name`, migrated when `migrated`, and drops it after.
fn on_database(name: &str, migrated: bool, f: impl FnOnce(&tokio::runtime::Runtime, &str)) {
    let runtime = runtime();
    let Some(url) = runtime.block_on(create_database(name, migrated)) else {
        return;
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&runtime, &url)));
    runtime.block_on(drop_database(name));
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The versions a `evc migrate` run printed as applied (`[n/m] VERSION description ...`).
fn applied_steps(text: &str) -> Vec<String> {
    text.lines()
        .filter(|line| line.starts_with('['))
        .filter_map(|line| line.split_whitespace().nth(1))
        .map(str::to_owned)
        .collect()
}

#[test]
fn concurrent_migrations_apply_each_migration_once() {
    let dir = migrations_dir();
    let dir = dir.to_str().expect("utf-8 path");
    let files = std::fs::read_dir(dir).expect("migrations").count();
    for round in 0..5 {
        let name = format!("evc_cli_migrate_race_{}_{round}", std::process::id());
        on_database(&name, false, |_, url| {
            let start = || {
                Command::new(env!("CARGO_BIN_EXE_evc"))
                    .args(["migrate", "--dir", dir, "--database-url", url])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("evc starts")
            };
            let (first, second) = (start(), start());
            let outputs = [
                first.wait_with_output().expect("first"),
                second.wait_with_output().expect("second"),
            ];
            let mut steps = Vec::new();
            let mut total = 0;
            for output in &outputs {
                let text = stdout(output);
                assert_eq!(output.status.code(), Some(0), "{output:?}");
                steps.extend(applied_steps(&text));
                let last = text.lines().last().unwrap_or_default();
                total += match last.strip_prefix("applied ") {
                    Some(rest) => rest
                        .trim_end_matches(" migrations")
                        .trim_end_matches(" migration")
                        .parse::<usize>()
                        .expect("a count"),
                    None => {
                        assert_eq!(last, "up to date", "{text}");
                        0
                    }
                };
            }
            steps.sort();
            let mut unique = steps.clone();
            unique.dedup();
            assert_eq!(steps, unique, "a migration was applied twice: {outputs:?}");
            assert_eq!(steps.len(), files, "{outputs:?}");
            assert_eq!(total, files, "{outputs:?}");
            let output = evc(url, &["migrate", "--dir", dir, "--status"]);
            assert!(
                stdout(&output).starts_with(&format!(
                    "{dir}: {files} migrations, {files} applied, 0 pending\n"
                )),
                "{output:?}"
            );
        });
    }
}

#[test]
fn migrate_status_and_migrate_refuse_changed_failed_missing_and_out_of_order_migrations() {
    let name = format!("evc_cli_migrate_drift_{}", std::process::id());
    on_database(&name, false, |runtime, url| {
        let copy = tempfile::tempdir().expect("tempdir");
        let dir = copy.path().to_str().expect("utf-8 path").to_owned();
        for entry in std::fs::read_dir(migrations_dir()).expect("migrations") {
            let path = entry.expect("entry").path();
            std::fs::copy(&path, copy.path().join(path.file_name().expect("name"))).expect("copy");
        }
        let file = |prefix: &str| {
            std::fs::read_dir(copy.path())
                .expect("dir")
                .map(|entry| entry.expect("entry").path())
                .find(|path| {
                    path.file_name()
                        .and_then(|name| name.to_str())
                        .is_some_and(|name| name.starts_with(prefix))
                })
                .expect("migration file")
        };
        // The files are numbered 0001 to 000N: N applied, the highest 000N.
        let files =
            i64::try_from(std::fs::read_dir(copy.path()).expect("dir").count()).expect("count");
        let highest = format!("{files:04}");
        let output = evc(url, &["migrate", "--dir", &dir]);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let recorded = || -> i64 {
            runtime.block_on(async {
                let mut connection = PgConnection::connect(url).await.expect("connect");
                sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
                    .fetch_one(&mut connection)
                    .await
                    .expect("count")
            })
        };
        assert_eq!(recorded(), files);

        // An applied migration edited afterwards: `changed` in the listing, exit 100;
        // `evc migrate` refuses.
        let v3 = file("0003_");
        let original = std::fs::read_to_string(&v3).expect("read");
        std::fs::write(&v3, format!("{original}\n-- edited after it was applied\n"))
            .expect("write");
        let output = evc(url, &["migrate", "--dir", &dir, "--status"]);
        let text = stdout(&output);
        assert_eq!(output.status.code(), Some(100), "{text}");
        assert!(text.contains("  changed  0003  evc runtime v2"), "{text}");
        assert!(text.contains("  applied  0002  "), "{text}");
        let output = evc(url, &["migrate", "--dir", &dir]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        assert!(
            stderr.contains("migration 0003 (evc runtime v2) changed since it was applied"),
            "{stderr}"
        );
        std::fs::write(&v3, &original).expect("restore");

        // A new migration numbered below the applied ones: `out of order`, and refused by name
        // with what to do; nothing of it runs.
        std::fs::write(
            copy.path().join("0000_early.sql"),
            "CREATE TABLE early_marker (x int);\n",
        )
        .expect("write");
        let output = evc(url, &["migrate", "--dir", &dir, "--status"]);
        let text = stdout(&output);
        assert_eq!(output.status.code(), Some(100), "{text}");
        assert!(text.contains("  out of order  0000  early"), "{text}");
        let output = evc(url, &["migrate", "--dir", &dir]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        assert!(
            stderr.contains(&format!(
                "migration 0000 (early) is numbered below the highest applied migration {highest}"
            )) && stderr.contains(&format!("renumber it above {highest}"))
                && stderr.contains("nothing was applied"),
            "{stderr}"
        );
        assert_eq!(recorded(), files);
        let early: bool = runtime.block_on(async {
            let mut connection = PgConnection::connect(url).await.expect("connect");
            sqlx::query_scalar("SELECT to_regclass('early_marker') IS NOT NULL")
                .fetch_one(&mut connection)
                .await
                .expect("query")
        });
        assert!(!early, "the out-of-order migration ran");
        std::fs::remove_file(copy.path().join("0000_early.sql")).expect("remove");

        // An applied migration whose file is gone, and one recorded as failed.
        let v5 = file("0005_");
        let v5_text = std::fs::read_to_string(&v5).expect("read");
        std::fs::remove_file(&v5).expect("remove");
        runtime.block_on(execute(
            url,
            "UPDATE _sqlx_migrations SET success = false WHERE version = 4",
        ));
        let output = evc(url, &["migrate", "--dir", &dir, "--status"]);
        let text = stdout(&output);
        assert_eq!(output.status.code(), Some(100), "{text}");
        assert!(text.contains("  missing  0005"), "{text}");
        assert!(text.contains("  failed  0004  evc runtime v3"), "{text}");
        let output = evc(url, &["migrate", "--dir", &dir]);
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("migration 0005 was applied but its file is not in"),
            "{stderr}"
        );
        assert!(
            stderr.contains("migration 0004 (evc runtime v3) failed"),
            "{stderr}"
        );
        std::fs::write(&v5, v5_text).expect("restore");
        runtime.block_on(execute(
            url,
            "UPDATE _sqlx_migrations SET success = true WHERE version = 4",
        ));
        let output = evc(url, &["migrate", "--dir", &dir, "--status"]);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
    });
}

/// A local port nothing listens on: bound, then released.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

#[test]
fn an_unreachable_database_fails_with_its_cause_and_never_shows_the_password() {
    let port = closed_port();
    let url = format!("postgres://root:s3cr3t-marker@127.0.0.1:{port}/x");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("dispatch.yaml");
    std::fs::write(&config, "consumers:\n  audit:\n    command: [/bin/true]\n").expect("config");
    let config = config.to_str().expect("utf-8");
    let migrations = migrations_dir();
    let migrations = migrations.to_str().expect("utf-8");
    let commands: [&[&str]; 9] = [
        &["migrate", "--dir", migrations],
        &["migrate", "--dir", migrations, "--status"],
        &["status"],
        &["timeline", TRACE],
        &["consumer", "show", "audit"],
        &["dlq", "list", "audit"],
        &["replay", "audit", "--dry-run"],
        &["dispatch", "--config", config],
        &[
            "consumer", "pause", "audit", "--as", "ops", "--reason", "a test",
        ],
    ];
    for args in commands {
        let started = std::time::Instant::now();
        let output = evc(&url, args);
        let elapsed = started.elapsed();
        let stderr = String::from_utf8_lossy(&output.stderr);
        eprintln!("{args:?}: {:.2} s: {stderr}", elapsed.as_secs_f64());
        assert_eq!(output.status.code(), Some(1), "{args:?}: {output:?}");
        assert!(
            stderr.to_lowercase().contains("connection refused"),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("127.0.0.1:{port}")),
            "{args:?}: {stderr}"
        );
        let all = format!("{}{stderr}", stdout(&output));
        assert!(!all.contains("s3cr3t-marker"), "{args:?}: {all}");
    }

    // URLs that do not parse, or name another database kind: a clear error, no password.
    for url in [
        format!("postgres://root:s3cr3t-marker@127.0.0.1:{port}9999/x"),
        "postgres://root:s3cr3t-marker@127.0.0.1:notaport/x".to_owned(),
        "postgres://root:s3cr3t-marker%zz@127.0.0.1/x".to_owned(),
        "mysql://root:s3cr3t-marker@127.0.0.1/x".to_owned(),
        "s3cr3t-marker".to_owned(),
    ] {
        let output = evc(&url, &["status"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{url}: {output:?}");
        assert!(stderr.starts_with("evc: error: "), "{url}: {stderr}");
        let all = format!("{}{stderr}", stdout(&output));
        assert!(!all.contains("s3cr3t-marker"), "{url}: {all}");
    }
}

#[test]
fn timeline_takes_w3c_trace_ids_only() {
    // Malformed ids are refused before any connection (the port is closed): exit 2.
    let url = format!("postgres://root@127.0.0.1:{}/x", closed_port());
    for bad in [
        "xyz",
        "00000000000000000000000000000000",
        "4bf92f3577b34da6a3ce929d0e0e473",
        "4bf92f3577b34da6a3ce929d0e0e4736a",
        "4bf92f3577b34da6a3ce929d0e0e473g",
        // SQL as an argument: refused as malformed before anything reads it. The table name
        // is put together at run time, so this file holds no statement against it.
        &format!("'; DROP TABLE {}; --", ["evc", "events"].join("_")),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
    ] {
        let output = evc(&url, &["timeline", bad]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{bad}: {output:?}");
        assert!(
            stderr.contains("is not a W3C trace id: 32 lower-case hex digits, not all zero"),
            "{bad}: {stderr}"
        );
    }
    // Control characters in the refused id are escaped, not sent to the terminal.
    let output = evc(&url, &["timeline", "\u{1b}[31mred\u{7}"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(
        !stderr.contains('\u{1b}') && !stderr.contains('\u{7}'),
        "{stderr:?}"
    );
    assert!(stderr.contains("\\u{1b}[31mred\\u{7}"), "{stderr}");

    let name = format!("evc_cli_timeline_{}", std::process::id());
    on_database(&name, true, |runtime, url| {
        let store = runtime.block_on(seed_store(url, deployed));
        let [event] = runtime.block_on(append_born(&store, &[born(1)]))[..] else {
            panic!("one event appended");
        };
        // Upper case is read as the lower-case id, with a note.
        let output = evc(url, &["timeline", &TRACE.to_uppercase()]);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        assert!(
            stdout(&output).contains(&format!("  event     {event}")),
            "{output:?}"
        );
        assert!(
            String::from_utf8_lossy(&output.stderr).contains(&format!(
                "evc: note: trace ids are lower-case hex; showing trace {TRACE}"
            )),
            "{output:?}"
        );
        // A whole traceparent header names its trace.
        let output = evc(
            url,
            &["timeline", &format!("00-{TRACE}-00f067aa0ba902b7-01")],
        );
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        assert!(
            stdout(&output).contains(&format!("  event     {event}")),
            "{output:?}"
        );
    });
}

#[test]
fn operator_output_escapes_control_characters() {
    let name = format!("evc_cli_escape_{}", std::process::id());
    on_database(&name, true, |runtime, url| {
        let evil = "evil\u{1b}]0;pwned\u{7}\u{1b}[31mred\nforged line";
        let clean = |output: &Output, what: &str| {
            let all = format!(
                "{}{}",
                stdout(output),
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(
                !all.chars()
                    .any(|c| c.is_control() && c != '\n' || c == '\u{202e}'),
                "{what}: raw control characters in {all:?}"
            );
            all
        };
        for args in [
            &[
                "consumer", "pause", evil, "--as", "ops", "--reason", "a test",
            ][..],
            &["consumer", "show", evil],
            &["dlq", "list", evil],
            &["replay", evil, "--dry-run"],
        ] {
            let output = evc(url, args);
            assert_eq!(output.status.code(), Some(1), "{args:?}: {output:?}");
            let all = clean(&output, &format!("{args:?}"));
            assert!(
                all.contains("evil\\u{1b}]0;pwned\\u{7}\\u{1b}[31mred\\nforged line"),
                "{args:?}: {all}"
            );
        }

        // Text another writer put in the database (a handler's error code, on the dead
        // delivery and its attempt row) is escaped on the way out.
        let store = runtime.block_on(seed_store(url, deployed));
        let [event] = runtime.block_on(append_born(&store, &[born(1)]))[..] else {
            panic!("one event appended");
        };
        runtime.block_on(settle(
            &store,
            event,
            "audit",
            "boom\u{1b}[2J\u{202e}gnp.exe\nforged",
            RetryDecision::Dead,
        ));
        let escaped = "boom\\u{1b}[2J\\u{202e}gnp.exe\\nforged";
        let output = evc(url, &["timeline", TRACE]);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let all = clean(&output, "timeline");
        assert!(all.contains(&format!("dead ({escaped})")), "{all}");
        let output = evc(url, &["dlq", "list", "audit"]);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let all = clean(&output, "dlq list");
        assert!(all.contains(escaped), "{all}");
    });
}

#[test]
fn operator_commands_bound_their_input() {
    let name = format!("evc_cli_bounds_{}", std::process::id());
    on_database(&name, true, |_, url| {
        // `--limit 0` would list nothing and say there is nothing: a usage error.
        for args in [
            &["dlq", "list", "audit", "--limit", "0"][..],
            &["replay", "audit", "--dry-run", "--limit", "0"],
            &["dlq", "list", "audit", "--limit", "100001"],
            &["dlq", "list", "audit", "--limit", "99999999999"],
        ] {
            let output = evc(url, args);
            assert_eq!(output.status.code(), Some(2), "{args:?}: {output:?}");
        }
        // Replay approvals are kept for audit and shown to other operators: printable and short.
        for (approval, message) in [
            (
                "CHG\u{1b}[2J".to_owned(),
                "replay refused, nothing written: the approval reference has control \
                 characters",
            ),
            (
                "x".repeat(201),
                "replay refused, nothing written: the approval reference has 201 \
                 characters; at most 200 are allowed",
            ),
        ] {
            let output = evc(
                url,
                &[
                    "replay",
                    "audit",
                    "--apply",
                    "--digest",
                    "0",
                    "--reason",
                    "r",
                    "--approval",
                    &approval,
                    "--idempotency-key",
                    "k",
                    "--as",
                    "bob",
                ],
            );
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(1), "{output:?}");
            assert!(stderr.contains(message), "{stderr}");
        }

        // So are the names of who proposes: a control character could forge a log line.
        let output = evc(url, &["replay", "audit", "--propose", "--as", "alice\nbob"]);
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        assert!(
            String::from_utf8_lossy(&output.stderr)
                .contains("proposal refused, nothing written: the planner has control characters"),
            "{output:?}"
        );

        // A window PostgreSQL cannot subtract from now: refused up front, not a database error.
        let output = evc(url, &["status", "--window", "9999999999d"]);
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("--window 9999999999d is longer than 3650d"),
            "{stderr}"
        );
        let output = evc(url, &["status", "--window=-1s"]);
        assert_eq!(output.status.code(), Some(1), "{output:?}");

        // The dispatch configuration: only a regular file, at most 1 MiB, read without blocking.
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo.yaml");
        let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
        assert!(made.success());
        let large = dir.path().join("large.yaml");
        std::fs::write(
            &large,
            format!("consumers: {{}}\n#{}\n", "x".repeat(1024 * 1024)),
        )
        .expect("write");
        for (path, message) in [
            (fifo.as_path(), "is not a regular file"),
            (Path::new("/dev/zero"), "is not a regular file"),
            (dir.path(), "is not a regular file"),
            (
                large.as_path(),
                "bytes; a dispatch configuration may be at most 1048576 bytes",
            ),
        ] {
            let output = finish(
                Command::new(env!("CARGO_BIN_EXE_evc"))
                    .args(["dispatch", "--database-url", url, "--config"])
                    .arg(path),
            );
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(1), "{path:?}: {output:?}");
            assert!(stderr.contains(message), "{path:?}: {stderr}");
        }

        // Settings out of range are refused by name, before anything runs.
        let config = dir.path().join("dispatch.yaml");
        for (settings, message) in [
            (
                "workers: 18446744073709551615",
                "consumer audit: `workers` is 18446744073709551615; it must be 1 to 64",
            ),
            (
                "workers: 0",
                "consumer audit: `workers` is 0; it must be 1 to 64",
            ),
            (
                "batch: 0",
                "consumer audit: `batch` is 0; it must be 1 to 10000",
            ),
            (
                "lease: 9999999999d",
                "consumer audit: `lease` is 9999999999d; it must be 1s to 1d",
            ),
            (
                "poll_interval: 0ms",
                "consumer audit: `poll_interval` is 0ms; it must be 10ms to 1h",
            ),
            (
                "timeout: 0ms",
                "consumer audit: `timeout` is 0ms; it must be 10ms to 1d",
            ),
            ("lease: -1s", "`lease` \"-1s\" is not a duration"),
        ] {
            std::fs::write(
                &config,
                format!("consumers:\n  audit:\n    command: [/bin/true]\n    {settings}\n"),
            )
            .expect("config");
            let output = finish(
                Command::new(env!("CARGO_BIN_EXE_evc"))
                    .args(["dispatch", "--database-url", url, "--config"])
                    .arg(&config),
            );
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(1), "{settings}: {output:?}");
            assert!(stderr.contains(message), "{settings}: {stderr}");
            assert!(!stderr.contains("panicked"), "{settings}: {stderr}");
        }
        // An owner ends up in lease rows and other operators' status output: printable only.
        std::fs::write(
            &config,
            "owner: \"host\\e[2J\"\nconsumers:\n  audit:\n    command: [/bin/true]\n",
        )
        .expect("config");
        let output = evc(
            url,
            &["dispatch", "--config", config.to_str().expect("utf-8")],
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        assert!(
            stderr.contains("`owner` has control characters (\"host\\u{1b}[2J\")"),
            "{stderr}"
        );
        // A consumer name from the file is escaped in the refusal.
        std::fs::write(
            &config,
            "consumers:\n  \"evil\\e[31m\\n\":\n    command: [/bin/true]\n",
        )
        .expect("config");
        let output = evc(
            url,
            &["dispatch", "--config", config.to_str().expect("utf-8")],
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        assert!(
            stderr.contains("consumer evil\\u{1b}[31m\\n is not deployed in this database"),
            "{stderr:?}"
        );
    });
}

/// Copies the directory `from` into `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The settings migration `evc generate` writes for the reference contracts with `edit`
/// applied to a copy of them, as the next file after the repository's migrations.
fn settings_migration_of(edit: impl FnOnce(&Path)) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let contracts = dir.path().join("contracts");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts"),
        &contracts,
    );
    edit(&contracts);
    let set = evc_codegen::ContractSet::load(&contracts)
        .expect("the edited contracts pass evc check")
        .contracts;
    let existing: Vec<String> = std::fs::read_dir(migrations_dir())
        .expect("migrations")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let layout = evc_codegen::emit::Layout {
        existing_migrations: existing.clone(),
        ..evc_codegen::emit::Layout::default()
    };
    let artifacts = evc_codegen::emit::sql::render(&set, &layout).expect("renders");
    let settings = artifacts
        .into_iter()
        .find(|artifact| artifact.path.to_string_lossy().contains("_evc_settings_"))
        .expect("a settings migration");
    let name = settings
        .path
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(
        !existing.contains(&name),
        "changed settings get a new file, not {name}"
    );
    settings.contents
}

#[test]
fn dispatch_runs_on_the_deployed_settings_and_status_shows_the_file_s_overrides() {
    let name = format!("evc_cli_settings_{}", std::process::id());
    on_database(&name, true, |runtime, url| {
        // `audit` gets a handler timeout in its contract, deployed by the settings migration
        // `evc generate` writes for it.
        let migration = settings_migration_of(|contracts| {
            let file = contracts.join("consumers/audit.yaml");
            let text = std::fs::read_to_string(&file).expect("audit.yaml");
            std::fs::write(&file, format!("{text}handler_timeout: 300ms\n")).expect("write");
        });
        runtime.block_on(execute(url, &migration));
        // One event, for audit, worker.notification.iu and worker.render.mout_view.
        let store = runtime.block_on(seed_store(url, deployed));
        let [event] = runtime.block_on(append_born(&store, &[born(1)]))[..] else {
            panic!("one event appended");
        };
        // `audit` takes every setting from the database; the notification worker's file sets
        // a batch and a timeout of its own.
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("dispatch.yaml");
        std::fs::write(
            &config,
            "owner: settings\ndefaults:\n  poll_interval: 50ms\nconsumers:\n  \
             audit:\n    command: [sleep, '30']\n  \
             worker.notification.iu:\n    command: ['true']\n    batch: 7\n    timeout: 5s\n",
        )
        .expect("config");
        let mut child = Command::new(env!("CARGO_BIN_EXE_evc"))
            .args(["dispatch", "--progress", "0s", "--config"])
            .arg(&config)
            .args(["--database-url", url])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("evc dispatch starts");
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // The contract's timeout, not the file's default of 60s, ends the command.
            let mut attempts = Vec::new();
            for _ in 0..600 {
                attempts = runtime
                    .block_on(store.attempts(event, "audit"))
                    .expect("attempts");
                if !attempts.is_empty() {
                    break;
                }
                assert!(
                    child.try_wait().expect("wait").is_none(),
                    "evc dispatch ended early"
                );
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            let attempt = attempts
                .first()
                .expect("an attempt of audit within a minute");
            assert_eq!(attempt.error_code.as_deref(), Some("handler_timeout"));

            // Where each worker's settings came from.
            let workers = || {
                let output = evc(url, &["status", "--format", "json"]);
                let report: serde_json::Value =
                    serde_json::from_slice(&output.stdout).expect("JSON status");
                report["workers"].as_array().cloned().unwrap_or_default()
            };
            let mut listed = workers();
            for _ in 0..600 {
                if listed.len() == 2 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
                listed = workers();
            }
            let by_consumer = |consumer: &str| {
                listed
                    .iter()
                    .find(|w| w["consumer"] == consumer)
                    .cloned()
                    .unwrap_or_else(|| panic!("no worker of {consumer}: {listed:?}"))
            };
            let audit = by_consumer("audit");
            assert_eq!(audit["owner"], "settings/audit/audit/0");
            assert_eq!(audit["payload_policy"], "registry");
            assert_eq!(audit["dispatcher_overrides"], serde_json::json!([]));
            let notification = by_consumer("worker.notification.iu");
            assert_eq!(
                notification["dispatcher_overrides"],
                serde_json::json!(["batch", "handler_timeout"])
            );
            let text = stdout(&evc(url, &["status"]));
            assert!(
                text.contains(
                    "worker.notification.iu settings/worker.notification.iu/worker.notification.iu/0: \
                     payload policy registry, dispatcher override (batch, handler_timeout)"
                ),
                "{text}"
            );
            assert!(
                text.contains(
                    "audit settings/audit/audit/0: payload policy registry, dispatcher registry"
                ),
                "{text}"
            );

            // The process runs the contracts' schedules, which the settings row records: its
            // first round starts them, and the status report lists them with their next slot.
            let schedules = || {
                let output = evc(url, &["status", "--format", "json"]);
                let report: serde_json::Value =
                    serde_json::from_slice(&output.stdout).expect("JSON status");
                report["schedules"].as_array().cloned().unwrap_or_default()
            };
            let mut started = schedules();
            for _ in 0..600 {
                if started.len() == 2 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
                started = schedules();
            }
            let names: Vec<&str> = started
                .iter()
                .filter_map(|s| s["schedule"].as_str())
                .collect();
            assert_eq!(names, ["nightly_rollup", "review_sweep"], "{started:?}");
            assert!(
                started.iter().all(|s| s["next_slot"].is_string()),
                "{started:?}"
            );
        }));
        let _ = child.kill();
        let _ = child.wait();
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    });
}

#[test]
fn dispatch_applies_each_changed_dispatcher_setting_of_the_contracts() {
    let name = format!("evc_cli_dispatcher_block_{}", std::process::id());
    on_database(&name, true, |runtime, url| {
        let migration = settings_migration_of(|contracts| {
            let file = contracts.join("evc.yaml");
            let text = std::fs::read_to_string(&file).expect("evc.yaml");
            let changed = text
                .replace("  batch_size: 50\n", "  batch_size: 2\n")
                .replace("  lease: 30s\n", "  lease: 3s\n")
                .replace("  heartbeat: 10s\n", "  heartbeat: 1s\n")
                .replace("  max_attempts: 12\n", "  max_attempts: 2\n")
                .replace("  backoff_ceiling: 15m\n", "  backoff_ceiling: 1s\n");
            assert_ne!(changed, text);
            std::fs::write(&file, changed).expect("write");
        });
        runtime.block_on(execute(url, &migration));
        // Five events, each for audit, whose command hangs, and for the notification worker,
        // whose command asks for a retry every time (and for worker.render.mout_view, not run
        // here).
        let store = runtime.block_on(seed_store(url, deployed));
        let payloads: Vec<serde_json::Value> = (1..=5).map(born).collect();
        let events = runtime.block_on(append_born(&store, &payloads));
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("dispatch.yaml");
        std::fs::write(
            &config,
            "defaults:\n  poll_interval: 50ms\nconsumers:\n  \
             audit:\n    command: [sleep, '30']\n  \
             worker.notification.iu:\n    command: [sh, -c, 'exit 75']\n",
        )
        .expect("config");
        let mut child = Command::new(env!("CARGO_BIN_EXE_evc"))
            .args(["dispatch", "--progress", "0s", "--config"])
            .arg(&config)
            .args(["--database-url", url])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("evc dispatch starts");
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // `max_attempts: 2` dead-letters each notification after its second attempt (its
            // policy allows 3), and `backoff_ceiling: 1s` brings that attempt within a second
            // (its policy waits 10s).
            let dead = || {
                runtime
                    .block_on(
                        store.count_deliveries("worker.notification.iu", &[DeliveryStatus::Dead]),
                    )
                    .expect("count deliveries")
            };
            for _ in 0..600 {
                if dead() == 5 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            let notifications: Vec<(DeliveryStatus, u32)> = events
                .iter()
                .map(|event| {
                    let delivery = runtime
                        .block_on(store.delivery(*event, "worker.notification.iu"))
                        .expect("read")
                        .expect("a delivery row");
                    (delivery.status, delivery.attempts)
                })
                .collect();
            assert_eq!(notifications, [(DeliveryStatus::Dead, 2); 5]);

            // `batch_size: 2`: the one audit worker holds one batch of two while its first
            // command hangs, and `lease: 3s` bounds every lease it holds (renewed each second;
            // the database runs on this machine's clock).
            let mut leases = Vec::new();
            for _ in 0..600 {
                leases = runtime.block_on(store.leases("audit")).expect("leases");
                if !leases.is_empty() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_secs_f64();
            assert_eq!(leases.len(), 2, "{leases:?}");
            for lease in &leases {
                assert!(lease.lease_until <= now + 3.1, "{lease:?} at {now}");
            }
        }));
        let _ = child.kill();
        let _ = child.wait();
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    });
}

/// Each command connects with the group role of its job (docs/runtime.md, "Roles"). The
/// login has no privileges of its own (`NOINHERIT`): it runs the commands only through the
/// roles it is a member of. Without the membership a command's job needs, that command says
/// so and the database refuses it.
#[test]
fn each_command_connects_with_the_role_of_its_job() {
    as_login(
        "evc_cli_roles",
        "evc_reader, evc_operator, evc_approver",
        commands_as,
    );
}

/// Runs `commands` on a migrated database of its own as a login created for it, `NOINHERIT`
/// and a member of `roles` only; drops the login afterwards, also after a failed assertion
/// (roles belong to the cluster, not to the database).
fn as_login(
    prefix: &str,
    roles: &str,
    commands: impl FnOnce(&tokio::runtime::Runtime, &str, &str),
) {
    let name = format!("{prefix}_{}", std::process::id());
    on_database(&name.clone(), true, |runtime, url| {
        let login = format!("{name}_login");
        runtime.block_on(execute(
            url,
            &format!("CREATE ROLE {login} LOGIN NOINHERIT IN ROLE {roles}"),
        ));
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            commands(runtime, url, &login);
        }));
        runtime.block_on(execute(url, &format!("DROP ROLE {login}")));
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    });
}

/// A login scoped to one consumer by its dispatcher role (docs/runtime.md, "A dispatcher role
/// per consumer") is refused a dispatch file that names another consumer before any worker
/// starts; it dispatches its own, and the lifecycle event a dead letter emits still fans out
/// to the other consumers.
#[test]
fn dispatch_as_a_consumer_s_login_runs_that_consumer_only() {
    as_login(
        "evc_cli_scoped",
        "\"evc_dispatcher_worker.render.mout_view\"",
        scoped_dispatch_as,
    );
}

fn scoped_dispatch_as(runtime: &tokio::runtime::Runtime, url: &str, login: &str) {
    let store = runtime.block_on(seed_store(url, deployed));
    runtime.block_on(append_born(&store, &[born(1)]));
    let as_login = PgConnectOptions::from_str(url)
        .expect("url")
        .username(login)
        .to_url_lossy()
        .to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("dispatch.yaml");
    let dispatch = |consumers: &str| {
        std::fs::write(
            &config,
            format!("defaults:\n  poll_interval: 50ms\nconsumers:\n{consumers}"),
        )
        .expect("config");
        dispatch_until_idle(&config, &as_login)
            .output()
            .expect("evc runs")
    };
    let mine = "  worker.render.mout_view:\n    command: [sh, -c, 'exit 3']\n";

    let output = dispatch(&format!(
        "{mine}  audit:\n    command: [sh, -c, 'exit 0']\n"
    ));
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr_of(&output).contains(
            "may dispatch only the consumers of its dispatcher roles mapped in this database \
             (worker.render.mout_view), not audit"
        ),
        "{output:?}"
    );
    assert_eq!(
        runtime.block_on(states(&store, "worker.render.mout_view")),
        [("pending".to_owned(), 1)]
    );

    let output = dispatch(mine);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(
        stdout(&output).contains(", 0 retried, 1 dead, 0 quarantined, 0 stale"),
        "{output:?}"
    );
    let emitted = runtime
        .block_on(store.count_events(&["job.dead_lettered"]))
        .expect("count events");
    assert_eq!(emitted, 1);
    assert_eq!(
        runtime.block_on(states(&store, "audit")),
        [("pending".to_owned(), 2)],
        "audit has the iu.born and the job.dead_lettered, untouched"
    );
}

/// Where the contracts require a tenant scope, `--tenant` narrows every command to that
/// tenant's rows; without it a command works on every tenant's. The login is no superuser
/// (superusers are never subject to row-level security).
#[test]
fn the_tenant_flag_narrows_a_command_to_one_tenant() {
    as_login(
        "evc_cli_tenants",
        "evc_reader, evc_operator",
        tenant_commands_as,
    );
}

fn tenant_commands_as(runtime: &tokio::runtime::Runtime, url: &str, login: &str) {
    let store = runtime.block_on(seed_store(url, |registry| {
        registry.require_tenant_scope = true;
    }));
    runtime
        .block_on(store.install_settings())
        .expect("the settings install");
    let trace = TraceContext::new(TRACE, SPAN, 1).expect("a trace context");
    let mut events = Vec::new();
    for (unit, tenant) in [(1, "acme"), (2, "bolt")] {
        let payload = born(unit);
        let order_key = evc_runtime::order_key_part(&payload["iu_unit_id"]);
        let event = OutgoingEvent::new("iu.born", "1.0.0", Some(order_key), &trace, &payload)
            .expect("serializes");
        let id = runtime.block_on(async {
            let mut transaction = store.begin().await.expect("begin");
            let receipt = store
                .append(
                    &mut transaction,
                    event,
                    AppendOptions::new().tenant_scope(tenant),
                )
                .await
                .expect("the store appends the event");
            transaction.commit().await.expect("commit");
            receipt.event_id
        });
        runtime.block_on(settle(&store, id, "audit", "boom", RetryDecision::Dead));
        events.push(id.to_string());
    }
    let as_login = PgConnectOptions::from_str(url)
        .expect("url")
        .username(login)
        .to_url_lossy()
        .to_string();

    let listed = |tenant: Option<&str>| {
        let mut args = vec!["dlq", "list", "audit"];
        args.extend(
            tenant
                .map(|tenant| ["--tenant", tenant])
                .into_iter()
                .flatten(),
        );
        let output = evc(&as_login, &args);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let out = stdout(&output);
        events
            .iter()
            .map(|id| out.contains(id.as_str()))
            .collect::<Vec<_>>()
    };
    assert_eq!(listed(Some("acme")), [true, false]);
    assert_eq!(listed(Some("bolt")), [false, true]);
    assert_eq!(listed(Some("nobody")), [false, false]);
    assert_eq!(listed(None), [true, true]);

    // `*` names every tenant, not one (`operate_sqlite.rs` runs `--tenant` on SQLite).
    let output = evc(&as_login, &["dlq", "list", "audit", "--tenant", "*"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(stderr_of(&output).contains("--tenant"), "{output:?}");
}

fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn commands_as(runtime: &tokio::runtime::Runtime, url: &str, login: &str) {
    let store = runtime.block_on(seed_store(url, deployed));
    let event = runtime.block_on(append_born(&store, &[born(1)]))[0];
    runtime.block_on(settle(&store, event, "audit", "boom", RetryDecision::Dead));
    let as_login = PgConnectOptions::from_str(url)
        .expect("url")
        .username(login)
        .to_url_lossy()
        .to_string();
    let stderr = |output: &Output| String::from_utf8_lossy(&output.stderr).into_owned();

    // Reader, operator and approver jobs, each through its role.
    let output = evc(&as_login, &["status"]);
    assert_eq!(output.status.code(), Some(100), "{output:?}");
    assert!(stdout(&output).contains("audit"), "{output:?}");
    assert_eq!(stderr(&output), "");
    for action in ["pause", "resume"] {
        let output = evc(
            &as_login,
            &[
                "consumer", action, "audit", "--as", "ops", "--reason", "a test",
            ],
        );
        assert_eq!(output.status.code(), Some(0), "{output:?}");
    }
    let output = evc(
        &as_login,
        &["replay", "audit", "--propose", "--as", "alice"],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let digest = stdout(&output)
        .lines()
        .find_map(|line| line.strip_prefix("digest: ").map(str::to_owned))
        .expect("the proposal prints the digest");
    let output = evc(
        &as_login,
        &[
            "replay",
            "audit",
            "--apply",
            "--digest",
            &digest,
            "--reason",
            "audit sink fixed",
            "--approval",
            "CHG-1",
            "--idempotency-key",
            "k-1",
            "--as",
            "bob",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(stderr(&output), "");

    // Without the reader's membership, status is refused before it reads anything.
    runtime.block_on(execute(url, &format!("REVOKE evc_reader FROM {login}")));
    let output = evc(&as_login, &["status"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(
        stderr(&output),
        format!(
            "evc: error: {login} may not take role evc_reader, which this command's job \
             needs: GRANT evc_reader TO {login} (docs/runtime.md, \"Roles\")\n"
        )
    );
    // The operator's job still runs through its own role, until that membership goes too.
    let output = evc(
        &as_login,
        &[
            "consumer", "pause", "audit", "--as", "ops", "--reason", "a test",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    runtime.block_on(execute(url, &format!("REVOKE evc_operator FROM {login}")));
    let output = evc(
        &as_login,
        &[
            "consumer", "resume", "audit", "--as", "ops", "--reason", "a test",
        ],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("may not take role evc_operator"),
        "{output:?}"
    );
}

/// On a database migrated without the tenth runtime step, the roles exist (the cluster's) but
/// have no grants there: each command says so and runs with the login's own privileges.
#[test]
fn without_the_roles_grants_a_command_warns_and_runs_as_the_login() {
    let name = format!("evc_cli_no_roles_{}", std::process::id());
    on_database(&name, false, |runtime, url| {
        runtime.block_on(apply_migrations(url, |file| {
            file.ends_with("_evc_runtime_v10.sql")
        }));
        let login = PgConnectOptions::from_str(url)
            .expect("url")
            .get_username()
            .to_owned();
        let output = evc(url, &["consumer", "show", "audit"]);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        assert_eq!(stdout(&output), "audit: running, mode live (revision 0)\n");
        assert_eq!(
            String::from_utf8_lossy(&output.stderr),
            format!(
                "warning: running with {login}'s own privileges, not role evc_reader: it has no \
                 grants in this database (docs/runtime.md, \"Roles\")\n"
            )
        );
    });
}

/// `evc serve` as a process, stopped with SIGTERM when dropped.
struct Served {
    child: std::process::Child,
    address: String,
    stderr: std::sync::mpsc::Receiver<String>,
}

impl Served {
    /// Starts `evc serve` on a free port with the tokens of `tokens_file` and the repository's
    /// topics, and waits (at most
    /// a minute, a hang guard) for the address it prints.
    fn start(url: &str, tokens_file: &Path) -> Self {
        use std::io::BufRead;
        let contracts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts");
        let mut child = Command::new(env!("CARGO_BIN_EXE_evc"))
            .args(["serve", "--listen", "127.0.0.1:0", "--tokens"])
            .arg(tokens_file)
            .arg("--contracts")
            .arg(contracts)
            .args(["--database-url", url])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("evc serve starts");
        let stderr = child.stderr.take().expect("piped");
        let (lines, received) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let mut seen = Vec::new();
        let address = loop {
            match received.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => {
                    if let Some(rest) = line.split("listening on http://").nth(1) {
                        break rest
                            .split_whitespace()
                            .next()
                            .unwrap_or_default()
                            .to_owned();
                    }
                    seen.push(line);
                }
                Err(_) => {
                    let _ = child.kill();
                    panic!("evc serve printed no address: {seen:?}");
                }
            }
        };
        Self {
            child,
            address,
            stderr: received,
        }
    }

    /// One HTTP/1.1 request; the status and body of the answer.
    fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &str,
    ) -> (u16, serde_json::Value) {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&self.address).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        let authorization = token
            .map(|token| format!("Authorization: Bearer {token}\r\n"))
            .unwrap_or_default();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n{authorization}\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.address,
            body.len()
        )
        .expect("writes");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("reads");
        let status = answer
            .get(9..12)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
        (
            status,
            serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
        )
    }

    /// Opens the event stream at `path`; the connection, its answer's head read.
    fn stream(&self, path: &str, token: &str) -> std::net::TcpStream {
        use std::io::Write;
        let mut stream = std::net::TcpStream::connect(&self.address).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\r\n",
            self.address
        )
        .expect("writes");
        let head = read_until(&mut stream, "\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains("text/event-stream"), "{head}");
        stream
    }

    /// Stops the server with SIGTERM; its exit status and what it printed after the address.
    fn stop(mut self) -> (std::process::ExitStatus, String) {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        for _ in 0..600 {
            if let Some(status) = self.child.try_wait().expect("wait") {
                std::thread::sleep(Duration::from_millis(100));
                let printed: Vec<String> = self.stderr.try_iter().collect();
                return (status, printed.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        panic!("evc serve did not stop within a minute of SIGTERM");
    }
}

/// What `stream` sends until it has sent `needle` (a minute at most between reads, a hang
/// guard).
fn read_until(stream: &mut std::net::TcpStream, needle: &str) -> String {
    use std::io::Read;
    let mut seen = Vec::new();
    let mut buffer = [0_u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(needle) {
        let read = stream
            .read(&mut buffer)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&seen)));
        assert!(
            read > 0,
            "the stream ended: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buffer[..read]);
    }
    String::from_utf8_lossy(&seen).into_owned()
}

const OPERATOR_TOKEN: &str = "operator-token-for-serve-0123456789";
const APPROVER_TOKEN: &str = "approver-token-for-serve-0123456789";

#[test]
fn serve_answers_each_caller_through_the_database_role_of_its_job() {
    on_database("evc_cli_serve", true, |runtime, url| {
        let store = runtime.block_on(seed_store(url, deployed));
        let consumer = "worker.notification.iu";
        let ids = runtime.block_on(append_born(&store, &[born(1)]));
        runtime.block_on(settle(
            &store,
            ids[0],
            consumer,
            "E_MAIL",
            RetryDecision::Dead,
        ));
        runtime.block_on(store.pool().close());

        let dir = tempfile::tempdir().expect("temp dir");
        let tokens = dir.path().join("tokens");
        std::fs::write(
            &tokens,
            format!("operator bob {OPERATOR_TOKEN}\napprover eve {APPROVER_TOKEN}\n"),
        )
        .expect("writes the tokens file");
        let served = Served::start(url, &tokens);

        let (status, _) = served.request("GET", "/readyz", None, "");
        assert_eq!(status, 200);
        let (status, _) = served.request("GET", "/api/v1/consumers", None, "");
        assert_eq!(status, 401);
        // The gateway serves the repository's topics, read through the operator's pool.
        let (status, topics) = served.request("GET", "/api/v1/topics", Some(OPERATOR_TOKEN), "");
        assert_eq!(status, 200);
        let names: Vec<&str> = topics
            .as_array()
            .expect("a list")
            .iter()
            .filter_map(|topic| topic["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "governance.problems",
                "iu.frozen",
                "iu.unit",
                "trace",
                "workers.silent",
                "workflow.run"
            ]
        );
        // The contracts also give each event type's compatibility mode.
        let (status, born) = served.request(
            "GET",
            "/api/v1/event-types/iu.born",
            Some(OPERATOR_TOKEN),
            "",
        );
        assert_eq!(status, 200);
        assert_eq!(born["compat"], "breaking_with_policy", "{born}");
        let mut everything = served.stream("/api/v1/topics/trace/stream", OPERATOR_TOKEN);
        let dead = format!("/api/v1/consumers/{consumer}/dead-letters");
        let (status, dead) = served.request("GET", &dead, Some(OPERATOR_TOKEN), "");
        assert_eq!(status, 200);
        assert_eq!(dead[0]["event_id"], ids[0].to_string());

        // The operator's pool plans and proposes; the approver's applies.
        let propose = format!("/api/v1/consumers/{consumer}/replays/propose");
        let (status, proposed) = served.request("POST", &propose, Some(OPERATOR_TOKEN), "{}");
        assert_eq!(status, 201, "{proposed}");
        let approval = serde_json::json!({
            "digest": proposed["plan"]["digest"],
            "reason": "mail works again",
            "approval_ref": "CHG-1",
            "idempotency_key": "serve-1",
        })
        .to_string();
        let apply = format!("/api/v1/consumers/{consumer}/replays/apply");
        let (status, applied) = served.request("POST", &apply, Some(APPROVER_TOKEN), &approval);
        assert_eq!(status, 200, "{applied}");
        assert_eq!(applied["deliveries"], 1);
        // The apply's lifecycle event reaches the open stream, which SIGTERM then ends.
        let streamed = read_until(&mut everything, "dlq_replay.scheduled");
        assert!(streamed.contains("event: event"), "{streamed}");

        let (status, printed) = served.stop();
        assert!(status.success(), "{status}: {printed}");
        assert!(printed.contains("evc serve: stopped"), "{printed}");
        assert!(!printed.contains(OPERATOR_TOKEN) && !printed.contains(APPROVER_TOKEN));
    });
}

/// `evc relay --apply` creates the generated stream and consumers, finds them in sync, then
/// reports a drift (exit 100) and sets it back; `evc relay` publishes the outbox's events to it, each once, and stops on
/// SIGTERM saying what it did. Needs the NATS server at `EVC_NATS_URL` (default
/// `127.0.0.1:4222`); outside CI an unreachable one skips the test, loudly.
#[test]
fn relay_applies_its_stream_and_publishes_the_outbox_until_sigterm() {
    let nats = std::env::var("EVC_NATS_URL").unwrap_or_else(|_| "127.0.0.1:4222".to_owned());
    // The client's tasks run on this runtime, while it is blocked on.
    let nats_runtime = runtime();
    let client = match nats_runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), async_nats::connect(&nats)).await
    }) {
        Ok(Ok(client)) => client,
        outcome => {
            let ci = std::env::var("CI").is_ok_and(|value| value.eq_ignore_ascii_case("true"));
            assert!(
                !ci,
                "CI=true and NATS at {nats} is unreachable: {outcome:?}"
            );
            eprintln!("skipped: NATS at {nats} is unreachable ({outcome:?}); set EVC_NATS_URL");
            return;
        }
    };
    let jetstream = nats_runtime.block_on(async { async_nats::jetstream::new(client) });
    let id = Uuid::now_v7().simple().to_string();
    let (stream, prefix) = (format!("EVC_CLI_{id}"), format!("evccli{id}"));
    on_database("evc_cli_relay", true, |runtime, url| {
        let apply = |prefix: &str| {
            evc(
                url,
                &[
                    "relay",
                    "--apply",
                    "--nats-url",
                    &nats,
                    "--definitions",
                    DEFINITIONS,
                    "--stream",
                    &stream,
                    "--subject-prefix",
                    prefix,
                ],
            )
        };
        let created = apply(&prefix);
        assert_eq!(created.status.code(), Some(0), "{created:?}");
        let lines: Vec<String> = stdout(&created).lines().map(str::to_owned).collect();
        assert_eq!(lines[0], format!("stream {stream}: created"));
        assert!(
            lines.contains(&"consumer worker-dot-iu_axis--p0: created".to_owned()),
            "{lines:?}"
        );
        assert!(
            lines[1..]
                .iter()
                .all(|line| line.starts_with("consumer ") && line.ends_with(": created")),
            "{lines:?}"
        );
        let again = apply(&prefix);
        assert_eq!(again.status.code(), Some(0), "{again:?}");
        let in_sync: Vec<String> = stdout(&again).lines().map(str::to_owned).collect();
        assert_eq!(in_sync.len(), lines.len());
        assert!(
            in_sync.iter().all(|line| line.ends_with(": in sync")),
            "{in_sync:?}"
        );
        let drifted = apply("elsewhere");
        assert_eq!(drifted.status.code(), Some(100), "{drifted:?}");
        assert!(
            stdout(&drifted).contains(&format!("stream {stream}: drifted, set back:\n  subjects")),
            "{drifted:?}"
        );
        assert!(
            stdout(&drifted).contains("consumer audit: drifted, set back:\n  filter_subject"),
            "{drifted:?}"
        );
        assert_eq!(apply(&prefix).status.code(), Some(100), "set back again");

        let store = runtime.block_on(seed_store(url, deployed));
        let events = runtime.block_on(append_born(&store, &[born(1), born(2), born(3)]));

        // No stream takes these subjects: each round fails, says why, and moves nothing.
        let mut stalled = Command::new(env!("CARGO_BIN_EXE_evc"))
            .args([
                "relay",
                "--nats-url",
                &nats,
                "--definitions",
                DEFINITIONS,
                "--subject-prefix",
                "nostream",
                "--owner",
                "cli-test",
            ])
            .args(["--database-url", url])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("evc relay starts");
        // Read what it says until a failed round is reported (EOF ends the wait too), then
        // stop it; the rest is read to the end on a thread of its own.
        let rest = {
            use std::io::BufRead;
            let pipe = stalled.stderr.take().expect("piped");
            let mut lines = std::io::BufReader::new(pipe).lines().map_while(Result::ok);
            let mut seen = Vec::new();
            for line in lines.by_ref() {
                let failed = line.contains("relay round failed");
                seen.push(line);
                if failed {
                    break;
                }
            }
            std::thread::spawn(move || {
                seen.extend(lines);
                seen
            })
        };
        Command::new("kill")
            .args(["-TERM", &stalled.id().to_string()])
            .status()
            .expect("kill runs");
        let output = finish_child(&mut stalled);
        let stderr = rest.join().expect("the reader").join("\n");
        assert_eq!(output.status.code(), Some(0), "{stderr}");
        assert!(stderr.contains("relay round failed"), "{stderr}");
        assert!(stderr.contains("stopped (published 0,"), "{stderr}");
        assert!(
            !stderr.contains("governance_state"),
            "no payload in the output: {stderr}"
        );
        let mut child = Command::new(env!("CARGO_BIN_EXE_evc"))
            .args([
                "relay",
                "--nats-url",
                &nats,
                "--definitions",
                DEFINITIONS,
                "--subject-prefix",
                &prefix,
                "--owner",
                "cli-test",
            ])
            .args(["--database-url", url])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("evc relay starts");
        let mut stored = 0;
        for _ in 0..600 {
            stored = nats_runtime.block_on(async {
                let mut handle = jetstream.get_stream(&stream).await.expect("the stream");
                handle.info().await.expect("its info").state.messages
            });
            // Stored and recorded: the relay counts an event once its round moved the cursor.
            let recorded = runtime.block_on(async {
                use evc_runtime::{Cursors, Observe};
                let head = store.feed_head().await.expect("the feed's head");
                store
                    .cursor("jetstream")
                    .await
                    .expect("the cursor")
                    .is_some_and(|cursor| cursor.position == head)
            });
            if stored == 3 && recorded {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill runs");
        let output = finish_child(&mut child);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stored, 3, "{stderr}");
        assert_eq!(output.status.code(), Some(0), "{stderr}");
        assert!(
            stderr.contains("evc relay: cli-test relays cursor jetstream"),
            "{stderr}"
        );
        assert!(
            stderr.contains("stopped (published 3, duplicates dropped by the broker 0"),
            "{stderr}"
        );
        let first = nats_runtime.block_on(async {
            let handle = jetstream.get_stream(&stream).await.expect("the stream");
            handle.get_raw_message(1).await.expect("the first message")
        });
        assert_eq!(
            first
                .headers
                .get("Nats-Msg-Id")
                .map(|v| v.as_str().to_owned()),
            Some(events[0].to_string())
        );
        // The status report shows the cursor: let go, caught up, the stalled relay's failed
        // rounds counted but no longer failing.
        let status = evc(url, &["status"]);
        let text = stdout(&status);
        assert!(
            text.contains(
                "relays:\n  jetstream: not held, 0 events behind, published 3 (0/s), failed rounds "
            ),
            "{text} {status:?}"
        );
        assert!(!text.contains("failing"), "{text}");
        let json = evc(url, &["status", "--format", "json"]);
        let document: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
        assert_eq!(document["relays"][0]["published"], 3, "{document}");
        assert_eq!(document["relays"][0]["behind"], 0, "{document}");
        // One partition in the reference contracts: every key's is 0.
        assert_eq!(first.subject.as_str(), format!("{prefix}.0.iu.born.v1"));

        // `evc dispatch` runs audit from its durable consumer when the environment says so.
        let dir = tempfile::tempdir().expect("tempdir");
        let definitions = evc_relay::Definitions::read(Path::new(DEFINITIONS))
            .and_then(|d| d.with_stream(&stream))
            .and_then(|d| d.with_subject_prefix(&prefix))
            .expect("the definitions");
        let moved = dir.path().join("jetstream.json");
        std::fs::write(&moved, serde_json::to_string(&definitions).expect("JSON"))
            .expect("definitions file");
        let config = dir.path().join("dispatch.yaml");
        std::fs::write(
            &config,
            "consumers:\n  audit:\n    command: [sh, -c, 'cat > \"$OUT/$EVC_EVENT_ID.json\"']\n",
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
            .args(["--database-url", url])
            .env("OUT", dir.path())
            .env("EVC_TRANSPORT", "jetstream")
            .env("EVC_NATS_URL", &nats)
            .env("EVC_JETSTREAM_DEFINITIONS", &moved)
            .output()
            .expect("evc dispatch runs");
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        assert!(stdout(&output).contains(": 3 acked ("), "{output:?}");
        for event in &events {
            assert!(dir.path().join(format!("{event}.json")).exists(), "{event}");
        }
        let delivered = nats_runtime.block_on(async {
            let handle = jetstream.get_stream(&stream).await.expect("the stream");
            let mut audit: async_nats::jetstream::consumer::PullConsumer =
                handle.get_consumer("audit").await.expect("audit's durable");
            let info = audit.info().await.expect("its info");
            (info.delivered.stream_sequence, info.num_ack_pending)
        });
        assert_eq!(
            delivered,
            (3, 0),
            "audit took the three from JetStream and acked them"
        );
    });
    nats_runtime
        .block_on(jetstream.delete_stream(&stream))
        .expect("the stream is deleted");
}

/// The reference contracts' JetStream definitions.
const DEFINITIONS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../generated/jetstream.json");

/// Waits (a minute at most) for `child` to exit; its output.
fn finish_child(child: &mut std::process::Child) -> Output {
    for _ in 0..600 {
        if child.try_wait().expect("wait").is_some() {
            let mut stderr = Vec::new();
            if let Some(mut pipe) = child.stderr.take() {
                use std::io::Read;
                let _ = pipe.read_to_end(&mut stderr);
            }
            return Output {
                status: child.wait().expect("status"),
                stdout: Vec::new(),
                stderr,
            };
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    panic!("the child did not stop within a minute");
}
