//! Shared helpers of the PostgreSQL tests: a throw-away database per test with the generated
//! migrations applied, and a small hand-written registry with open schemas (so payload-policy
//! checks can be reached past schema validation).
//!
//! The server comes from `DATABASE_URL` (default `postgres://root@localhost/test`). When it
//! cannot be reached a test is skipped with a message, except under `CI=true`, where that is a
//! failure.

#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::str::FromStr;

use evc_runtime::{
    ConsumerDescriptor, ConsumerMode, EventDescriptor, HandlerKind, OutgoingEvent, Registry,
    SubscriptionDescriptor, TraceContext, VersionDescriptor,
};
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection};

pub type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

const DEFAULT_URL: &str = "postgres://root@localhost/test";

/// Runs `check` against a fresh database with the generated migrations applied, then drops the
/// database (also when `check` fails or panics).
pub async fn with_database<F, Fut>(check: F) -> TestResult
where
    F: FnOnce(PgPool) -> Fut + Send + 'static,
    Fut: Future<Output = TestResult> + Send + 'static,
{
    with_database_before(None, check).await
}

/// [`with_database`], with the generated migrations applied only up to the first whose
/// description starts with `before` (sqlx's description: the file name's words after the
/// number, e.g. `"evc runtime v7"` for `NNNN_evc_runtime_v7.sql`), that one excluded: a database
/// deployed with migrations generated before that step. `None`: all of them.
pub async fn with_database_before<F, Fut>(before: Option<&'static str>, check: F) -> TestResult
where
    F: FnOnce(PgPool) -> Fut + Send + 'static,
    Fut: Future<Output = TestResult> + Send + 'static,
{
    with_empty_database(move |options| async move {
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        let migrations = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/migrations");
        let migrator = Migrator::new(migrations.as_path()).await?;
        match before {
            None => migrator.run(&pool).await?,
            Some(description) => {
                let step = migrator
                    .iter()
                    .filter(|m| m.description.starts_with(description))
                    .map(|m| m.version)
                    .min()
                    .ok_or_else(|| {
                        format!("no migration whose description starts with {description:?}")
                    })?;
                let target = migrator
                    .iter()
                    .map(|m| m.version)
                    .filter(|version| *version < step)
                    .max()
                    .ok_or_else(|| format!("no migration before {description:?}"))?;
                migrator.run_to(target, &pool).await?;
            }
        }
        let result = check(pool.clone()).await;
        pool.close().await;
        result
    })
    .await
}

/// Runs `check` with the options of a database of its own, created empty (no migration) on the
/// server of `DATABASE_URL` and dropped afterwards, also when `check` fails or panics. Skipped
/// with a message when the server is unreachable, except under `CI=true`.
pub async fn with_empty_database<F, Fut>(check: F) -> TestResult
where
    F: FnOnce(PgConnectOptions) -> Fut,
    Fut: Future<Output = TestResult> + Send + 'static,
{
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
            return Ok(());
        }
    };

    let database = format!("evc_rt_{:016x}", random());
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(&mut admin)
        .await?;
    let options = PgConnectOptions::from_str(&url)?.database(&database);

    // Run the checks in their own task so a failed assertion still drops the database.
    let outcome = tokio::spawn(check(options)).await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await?;
    admin.close().await?;
    match outcome {
        Ok(result) => result,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => Err(error.into()),
    }
}

/// Who changes a consumer's state in a test, and why (recorded with the change).
pub fn change() -> evc_runtime::StateChange {
    evc_runtime::StateChange::new("tester", "the test changes it")
}

/// A random number from the standard library's hash seed, mixed with the process and the time.
pub fn random() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    if let Ok(elapsed) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        hasher.write_u128(elapsed.as_nanos());
    }
    hasher.finish()
}

/// Rows in `table`.
pub async fn count(pool: &PgPool, table: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(pool)
        .await
}

/// How long a wait for something that must happen may run before the test calls it a hang.
/// Minutes: a loaded CI host runs these tests many times slower than an idle one, and a wait
/// that passes ends as soon as its condition holds. A parent waiting on a child that has its
/// own bound waits twice this, so the child's error is the one that shows.
pub const HANG: std::time::Duration = std::time::Duration::from_secs(300);

pub const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
pub const SPAN_ID: &str = "00f067aa0ba902b7";

pub fn trace() -> TraceContext {
    TraceContext::new(TRACE_ID, SPAN_ID, 1).expect("valid trace context")
}

/// An event of the test registry, built as a producer function builds it.
pub fn event(
    event_type: &'static str,
    version: &'static str,
    payload: serde_json::Value,
) -> OutgoingEvent {
    let order_key = payload.get("note_id").map(evc_runtime::order_key_part);
    OutgoingEvent::new(event_type, version, order_key, &trace(), &payload).expect("serializes")
}

/// A `test.note` 1.0.0 payload.
pub fn note(note_id: &str) -> serde_json::Value {
    serde_json::json!({"note_id": note_id, "text": "a note", "count": 1})
}

pub const NOTE_SCHEMA: &str = r#"{"properties":{"count":{"minimum":0,"type":"integer"},"meta":{"type":"object"},"note_id":{"format":"uuid","type":"string"},"text":{"type":"string"}},"required":["note_id"],"type":"object"}"#;
const NOTE_V2_SCHEMA: &str = r#"{"properties":{"note_id":{"format":"uuid","type":"string"},"title":{"type":"string"}},"required":["note_id","title"],"type":"object"}"#;
const PING_SCHEMA: &str = r#"{"type":"object"}"#;
const DIGEST: &str = "0000000000000000000000000000000000000000000000000000000000000001";

/// Two event types with open schemas and three consumers (live, off, shadow; `c.shadow` does
/// not order per key, so its deliveries carry no order key):
///
/// - `test.note` 1.0.0 fans out to `c.live` and `c.shadow` (`c.off` is off), 2.0.0 to
///   `c.shadow`; producer class `notes`, order key `note_id`, cap 512 bytes;
/// - `test.ping` 1.0.0 fans out to `c.live`; producer class `pinger`, no order key.
pub static TEST_REGISTRY: Registry = Registry {
    project: "runtime_tests",
    digest: DIGEST,
    events: &[
        EventDescriptor {
            name: "test.note",
            description: "A note.",
            producer_class: "notes",
            order_key: &["note_id"],
            deprecated: false,
            max_payload_bytes: 512,
            versions: &[
                VersionDescriptor {
                    version: "1.0.0",
                    major: 1,
                    schema: NOTE_SCHEMA,
                    schema_digest: DIGEST,
                },
                VersionDescriptor {
                    version: "2.0.0",
                    major: 2,
                    schema: NOTE_V2_SCHEMA,
                    schema_digest: DIGEST,
                },
            ],
        },
        EventDescriptor {
            name: "test.ping",
            description: "A ping.",
            producer_class: "pinger",
            order_key: &[],
            deprecated: false,
            max_payload_bytes: 4096,
            versions: &[VersionDescriptor {
                version: "1.0.0",
                major: 1,
                schema: PING_SCHEMA,
                schema_digest: DIGEST,
            }],
        },
    ],
    consumers: &[
        consumer(
            "c.live",
            ConsumerMode::Live,
            true,
            &[
                SubscriptionDescriptor {
                    event: "test.note",
                    requirement: "^1",
                    versions: &["1.0.0"],
                },
                SubscriptionDescriptor {
                    event: "test.ping",
                    requirement: "^1",
                    versions: &["1.0.0"],
                },
            ],
        ),
        consumer(
            "c.off",
            ConsumerMode::Off,
            true,
            &[SubscriptionDescriptor {
                event: "test.note",
                requirement: "^1",
                versions: &["1.0.0"],
            }],
        ),
        consumer(
            "c.shadow",
            ConsumerMode::Shadow,
            false,
            &[SubscriptionDescriptor {
                event: "test.note",
                requirement: ">=1, <3",
                versions: &["1.0.0", "2.0.0"],
            }],
        ),
    ],
    retry_policies: &[],
    executor_classes: &[],
    schedules: &[],
    lag_thresholds: &[],
    cutover_gates: &[],
    inventory_rules: &[],
    evidence_recording: None,
    retention: evc_runtime::RetentionDescriptor::KEEP,
    payload_policy: REFERENCE_POLICY,
    require_tenant_scope: false,
    dispatcher: evc_runtime::DispatcherDescriptor::FORMAT_DEFAULTS,
};

/// The payload policy of the reference project (`contracts/evc.yaml`).
pub const REFERENCE_POLICY: evc_runtime::PayloadPolicyDescriptor =
    evc_runtime::PayloadPolicyDescriptor {
        denied_keys: &["body_text", "instruction_text", "payload_blob", "iu_body"],
        credential_key_names: &[
            "password",
            "passwd",
            "pwd",
            "token",
            "api_key",
            "secret",
            "credential",
            "authorization",
            "private_key",
        ],
        default_max_bytes: 4096,
        hard_max_bytes: 65_536,
    };

const fn consumer(
    name: &'static str,
    mode: ConsumerMode,
    per_key_ordering: bool,
    subscriptions: &'static [SubscriptionDescriptor],
) -> ConsumerDescriptor {
    ConsumerDescriptor {
        name,
        handler: HandlerKind::Transactional,
        mode,
        per_key_ordering,
        retry_policy: "r",
        heartbeat_threshold_ms: 60_000,
        handler_timeout_ms: None,
        executor_class: None,
        subscriptions,
    }
}

// ---------------------------------------------------------------------------------------------
// Dispatch tests.
// ---------------------------------------------------------------------------------------------

/// A fixed 200 ms retry policy, 4 attempts, no jitter, transient failures retried.
pub const FIXED_200MS: evc_runtime::RetryPolicyDescriptor = evc_runtime::RetryPolicyDescriptor {
    name: "fixed.200ms",
    kind: "fixed_delay",
    base_delay_ms: 200,
    max_delay_ms: None,
    max_attempts: 4,
    jitter: "none",
    retry_on: &["transient"],
};

const NOTE_1: &[SubscriptionDescriptor] = &[SubscriptionDescriptor {
    event: "test.note",
    requirement: "^1",
    versions: &["1.0.0"],
}];

const JOB_1: &[SubscriptionDescriptor] = &[SubscriptionDescriptor {
    event: "test.job",
    requirement: "^1",
    versions: &["1.0.0"],
}];

const fn dispatch_consumer(
    name: &'static str,
    handler: HandlerKind,
    per_key_ordering: bool,
) -> ConsumerDescriptor {
    ConsumerDescriptor {
        name,
        handler,
        mode: ConsumerMode::Live,
        per_key_ordering,
        retry_policy: "fixed.200ms",
        heartbeat_threshold_ms: 60_000,
        handler_timeout_ms: None,
        executor_class: None,
        subscriptions: NOTE_1,
    }
}

/// `test.note` 1.0.0 (order key `note_id`) fanned out to three live consumers, all on
/// [`FIXED_200MS`]: `d.leased` (leased, per key), `d.tx` (transactional, per key) and
/// `d.unordered` (leased, no per-key ordering); and `test.job` 1.0.0 (same schema) for one
/// consumer, `d.held` (transactional, no per-key ordering: it can run held batches).
pub static DISPATCH_REGISTRY: Registry = Registry {
    project: "runtime_dispatch_tests",
    digest: DIGEST,
    events: &[
        EventDescriptor {
            name: "test.job",
            description: "A job.",
            producer_class: "jobs",
            order_key: &["note_id"],
            deprecated: false,
            max_payload_bytes: 512,
            versions: &[VersionDescriptor {
                version: "1.0.0",
                major: 1,
                schema: NOTE_SCHEMA,
                schema_digest: DIGEST,
            }],
        },
        EventDescriptor {
            name: "test.note",
            description: "A note.",
            producer_class: "notes",
            order_key: &["note_id"],
            deprecated: false,
            max_payload_bytes: 512,
            versions: &[VersionDescriptor {
                version: "1.0.0",
                major: 1,
                schema: NOTE_SCHEMA,
                schema_digest: DIGEST,
            }],
        },
    ],
    // Sorted by name, as the registry's lookups expect.
    consumers: &[
        ConsumerDescriptor {
            subscriptions: JOB_1,
            ..dispatch_consumer("d.held", HandlerKind::Transactional, false)
        },
        dispatch_consumer("d.leased", HandlerKind::Leased, true),
        dispatch_consumer("d.tx", HandlerKind::Transactional, true),
        dispatch_consumer("d.unordered", HandlerKind::Leased, false),
    ],
    retry_policies: &[FIXED_200MS],
    executor_classes: &[],
    schedules: &[],
    lag_thresholds: &[],
    cutover_gates: &[],
    inventory_rules: &[],
    evidence_recording: None,
    retention: evc_runtime::RetentionDescriptor::KEEP,
    payload_policy: REFERENCE_POLICY,
    require_tenant_scope: false,
    dispatcher: evc_runtime::DispatcherDescriptor::FORMAT_DEFAULTS,
};

/// The store of [`DISPATCH_REGISTRY`] over a pool of `connections` to the test database of
/// `pool` (the dispatcher needs more than the four of [`with_database`]).
pub async fn dispatch_store(
    pool: &PgPool,
    connections: u32,
) -> Result<evc_runtime::PgStore, Box<dyn std::error::Error + Send + Sync>> {
    let options = (*pool.connect_options()).clone();
    let pool = PgPoolOptions::new()
        .max_connections(connections)
        .connect_with(options)
        .await?;
    Ok(evc_runtime::PgStore::new(pool, DISPATCH_REGISTRY)?)
}

/// A UUID-shaped note id for key number `key`.
pub fn note_key(key: u64) -> String {
    format!("00000000-0000-4000-8000-{key:012x}")
}

/// Appends `events` notes in one transaction on any store, round-robin over `keys` keys;
/// payload `count` is the event's number. Answers the receipts in append order.
pub async fn append_notes<S: evc_runtime::Store>(
    store: &S,
    events: u64,
    keys: u64,
) -> Result<Vec<evc_runtime::AppendReceipt>, Box<dyn std::error::Error + Send + Sync>> {
    let batch: Vec<evc_runtime::NewEvent> = (0..events)
        .map(|n| {
            let payload =
                serde_json::json!({"note_id": note_key(n % keys), "text": "n", "count": n});
            event("test.note", "1.0.0", payload).into()
        })
        .collect();
    let mut tx = store.begin().await?;
    let receipts = store.append_batch(&mut tx, batch).await?;
    tx.commit().await?;
    Ok(receipts)
}

/// Appends one `event_type` 1.0.0 event per number in `numbers`, in one transaction: payload
/// `note_id` is the number's key, `text` is `text_of(n)` and `count` the number.
pub async fn append_numbered(
    store: &evc_runtime::PgStore,
    event_type: &'static str,
    numbers: std::ops::Range<u64>,
    text_of: impl Fn(u64) -> &'static str,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let batch: Vec<evc_runtime::NewEvent> = numbers
        .map(|n| {
            let payload =
                serde_json::json!({"note_id": note_key(n), "text": text_of(n), "count": n});
            event(event_type, "1.0.0", payload).into()
        })
        .collect();
    let mut tx = store.pool().begin().await?;
    store.append_batch(&mut tx, batch).await?;
    tx.commit().await?;
    Ok(())
}

/// Deliveries of `consumer` by state, `(state, count)` sorted, non-zero only: the statuses of
/// its delivery rows, and `acked` for its acked attempt rows (an ack deletes the delivery; its
/// attempt row is its record). A delivery row left `acked` would show as a second `acked` entry.
pub async fn statuses(
    store: &impl evc_runtime::Store,
    consumer: &str,
) -> Result<Vec<(String, i64)>, evc_runtime::DispatchError> {
    let mut counts = Vec::new();
    for status in evc_runtime::DeliveryStatus::ALL {
        let n = store.count_deliveries(consumer, &[status]).await?;
        counts.push((status.as_str().to_owned(), n));
    }
    counts.push((
        "acked".to_owned(),
        store.count_attempts(consumer, "acked").await?,
    ));
    let mut counts: Vec<(String, i64)> = counts
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(status, n)| (status, i64::try_from(n).unwrap_or(i64::MAX)))
        .collect();
    counts.sort();
    Ok(counts)
}

/// Deliveries of `consumer` still pending or leased, counted in one statement: counted one
/// after the other, a retry moving a delivery from `leased` back to `pending` between the two
/// counts would make a busy consumer look settled.
pub async fn unsettled(
    store: &impl evc_runtime::Store,
    consumer: &str,
) -> Result<u64, evc_runtime::DispatchError> {
    use evc_runtime::DeliveryStatus::{Leased, Pending};
    store.count_deliveries(consumer, &[Pending, Leased]).await
}

/// Delivery rows of every consumer of `store`'s registry, in any status (acked deliveries
/// have none).
pub async fn count_all_deliveries<S: evc_runtime::Store>(
    store: &S,
) -> Result<u64, evc_runtime::DispatchError> {
    let mut total = 0;
    for consumer in store.registry().consumers {
        total += store.count_deliveries(consumer.name, &[]).await?;
    }
    Ok(total)
}

/// The event ids of `receipts`, in order.
pub fn ids(receipts: &[evc_runtime::AppendReceipt]) -> Vec<uuid::Uuid> {
    receipts.iter().map(|receipt| receipt.event_id).collect()
}

/// Every attempt row of the events `event_ids` at every consumer of `store`'s registry, as
/// `(event, consumer, attempt)`: events in the order given, consumers in the registry's order,
/// each delivery's rows in the order written.
pub async fn attempts_of<S: evc_runtime::Store>(
    store: &S,
    event_ids: &[uuid::Uuid],
) -> Result<Vec<(uuid::Uuid, String, evc_runtime::AttemptRecord)>, evc_runtime::DispatchError> {
    let chunks = in_parallel(store, event_ids, |store, event_ids| async move {
        let mut rows = Vec::new();
        for event_id in event_ids {
            for consumer in store.registry().consumers {
                for attempt in store.attempts(event_id, consumer.name).await? {
                    rows.push((event_id, consumer.name.to_owned(), attempt));
                }
            }
        }
        Ok::<_, evc_runtime::DispatchError>(rows)
    })
    .await?;
    Ok(chunks.into_iter().flatten().collect())
}

/// Runs `query` over `event_ids` in [`PARALLEL_READS`] chunks at once, each on its own task
/// with a clone of `store`, and returns the chunks' results in `event_ids`' order. The
/// checks after a 10,000-event run read every event's attempts one by one; side by side, the
/// round trips overlap instead of adding up.
async fn in_parallel<S, T, E, F, Fut>(
    store: &S,
    event_ids: &[uuid::Uuid],
    query: F,
) -> Result<Vec<T>, E>
where
    S: evc_runtime::Store,
    T: Send + 'static,
    E: Send + 'static,
    F: Fn(S, Vec<uuid::Uuid>) -> Fut,
    Fut: std::future::Future<Output = Result<T, E>> + Send + 'static,
{
    let size = event_ids.len().div_ceil(PARALLEL_READS).max(1);
    let tasks: Vec<_> = event_ids
        .chunks(size)
        .map(|chunk| tokio::spawn(query(store.clone(), chunk.to_vec())))
        .collect();
    let mut results = Vec::with_capacity(tasks.len());
    let mut tasks = tasks.into_iter();
    while let Some(task) = tasks.next() {
        match task.await.expect("a read task panicked") {
            Ok(result) => results.push(result),
            Err(error) => {
                // None left reading while the caller drops the database.
                tasks.for_each(|task| task.abort());
                return Err(error);
            }
        }
    }
    Ok(results)
}

/// Chunks [`in_parallel`] reads at once (the stores of the long runs keep at least this many
/// connections).
const PARALLEL_READS: usize = 4;

/// `(acks, out of order)` over the `acked` attempt rows of `consumers` for the events
/// `event_ids`: acks of one order key (in the order they ended) that came after an ack of a
/// later event of that key (its events' `seq`). Holds across processes and through
/// redeliveries of expired leases. Two acks of one key ending at the same instant count as out
/// of order: a key's next delivery is only claimed once the previous one's ack committed.
pub async fn acks_out_of_key_order<S: evc_runtime::Store>(
    store: &S,
    consumers: &[&str],
    event_ids: &[uuid::Uuid],
) -> Result<(i64, i64), Box<dyn std::error::Error + Send + Sync>> {
    type BoxError = Box<dyn std::error::Error + Send + Sync>;
    let owned: Vec<String> = consumers.iter().map(|&c| c.to_owned()).collect();
    // (consumer, order key, ack's end, event seq) of every ack.
    let chunks = in_parallel(store, event_ids, |store, event_ids| {
        let consumers = owned.clone();
        async move {
            let mut acks = Vec::new();
            for event_id in event_ids {
                let event = store
                    .event(event_id)
                    .await?
                    .ok_or_else(|| format!("event {event_id} not stored"))?;
                for consumer in &consumers {
                    for attempt in store.attempts(event_id, consumer).await? {
                        if attempt.outcome == "acked" {
                            let key = event.order_key.clone();
                            acks.push((consumer.clone(), key, attempt.finished_at, event.seq));
                        }
                    }
                }
            }
            Ok::<_, BoxError>(acks)
        }
    })
    .await?;
    // (consumer, order key) -> (ack's end, event seq) of every ack.
    let mut acks: std::collections::BTreeMap<(String, String), Vec<(f64, i64)>> =
        std::collections::BTreeMap::new();
    for (consumer, key, finished_at, seq) in chunks.into_iter().flatten() {
        acks.entry((consumer, key))
            .or_default()
            .push((finished_at, seq));
    }
    let (mut total, mut out_of_order) = (0, 0);
    for key_acks in acks.values_mut() {
        // By end time; on a tie the later event first, so the tie counts as out of order.
        key_acks.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
        total += i64::try_from(key_acks.len())?;
        out_of_order += i64::try_from(key_acks.windows(2).filter(|w| w[0].1 > w[1].1).count())?;
    }
    Ok((total, out_of_order))
}

// ---------------------------------------------------------------------------------------------
// Lifecycle tests.
// ---------------------------------------------------------------------------------------------

/// The `job.dead_lettered` 1.1.0 schema of the reference contracts.
pub const DEAD_LETTERED_SCHEMA: &str = r#"{"additionalProperties":false,"properties":{"attempts":{"minimum":1,"type":"integer"},"consumer_name":{"maxLength":128,"pattern":"^[a-z][a-z0-9_]*(\\.[a-z0-9_]+)*$","type":"string"},"dead_lettered_at":{"format":"date-time","type":"string"},"event_id":{"format":"uuid","type":"string"},"event_type":{"maxLength":128,"pattern":"^[a-z][a-z0-9_]*(\\.[a-z0-9_]+)+$","type":"string"},"failure_class":{"enum":["transient","permanent","poison"],"type":"string"},"first_failed_at":{"format":"date-time","type":"string"},"job_id":{"format":"uuid","type":"string"},"last_error_code":{"maxLength":64,"pattern":"^[A-Z][A-Z0-9_]*$","type":"string"},"workflow_run_id":{"format":"uuid","type":"string"}},"required":["job_id","event_id","event_type","consumer_name","attempts","failure_class","last_error_code","dead_lettered_at"],"type":"object"}"#;

/// The `dlq_replay.scheduled` 1.0.0 schema of the reference contracts.
pub const REPLAY_SCHEDULED_SCHEMA: &str = r#"{"additionalProperties":false,"properties":{"consumer_name":{"maxLength":128,"pattern":"^[a-z][a-z0-9_]*(\\.[a-z0-9_]+)*$","type":"string"},"job_count":{"minimum":1,"type":"integer"},"replay_id":{"format":"uuid","type":"string"},"requested_by_id":{"format":"uuid","type":"string"},"scheduled_for":{"format":"date-time","type":"string"}},"required":["replay_id","consumer_name","job_count","requested_by_id","scheduled_for"],"type":"object"}"#;

/// The `dlq_replay.completed` 1.0.0 schema of the reference contracts.
pub const REPLAY_COMPLETED_SCHEMA: &str = r#"{"additionalProperties":false,"properties":{"completed_at":{"format":"date-time","type":"string"},"failed_count":{"minimum":0,"type":"integer"},"replay_id":{"format":"uuid","type":"string"},"replayed_count":{"minimum":0,"type":"integer"},"succeeded_count":{"minimum":0,"type":"integer"}},"required":["replay_id","replayed_count","succeeded_count","failed_count","completed_at"],"type":"object"}"#;

/// The `dlq_replay.failed` 1.0.0 schema of the reference contracts.
pub const REPLAY_FAILED_SCHEMA: &str = r#"{"additionalProperties":false,"properties":{"error":{"additionalProperties":false,"properties":{"code":{"maxLength":64,"pattern":"^[A-Z][A-Z0-9_]*$","type":"string"},"retryable":{"type":"boolean"}},"required":["code","retryable"],"type":"object"},"failed_at":{"format":"date-time","type":"string"},"replay_id":{"format":"uuid","type":"string"},"replayed_count":{"minimum":0,"type":"integer"}},"required":["replay_id","error","replayed_count","failed_at"],"type":"object"}"#;

/// The `job.discarded` 1.0.0 schema of the reference contracts.
pub const DISCARDED_SCHEMA: &str = r#"{"additionalProperties":false,"properties":{"approval_ref":{"maxLength":200,"minLength":1,"type":"string"},"attempts":{"minimum":0,"type":"integer"},"consumer_name":{"maxLength":128,"pattern":"^[a-z][a-z0-9_]*(\\.[a-z0-9_]+)*$","type":"string"},"discard_id":{"minimum":1,"type":"integer"},"discarded_at":{"format":"date-time","type":"string"},"discarded_by":{"maxLength":128,"minLength":1,"type":"string"},"discarded_from":{"enum":["dead","quarantined"],"type":"string"},"event_id":{"format":"uuid","type":"string"},"event_type":{"maxLength":128,"pattern":"^[a-z][a-z0-9_]*(\\.[a-z0-9_]+)+$","type":"string"},"generation":{"minimum":0,"type":"integer"},"last_error_code":{"maxLength":64,"pattern":"^[A-Z][A-Z0-9_]*$","type":"string"}},"required":["discard_id","event_id","event_type","consumer_name","generation","discarded_from","attempts","approval_ref","discarded_by","discarded_at"],"type":"object"}"#;

const DEAD_LETTERED_1: &[SubscriptionDescriptor] = &[SubscriptionDescriptor {
    event: "job.dead_lettered",
    requirement: "^1",
    versions: &["1.0.0", "1.1.0"],
}];

/// A lifecycle event type of the reference contracts: producer class `dispatcher`, one
/// version, 1.0.0.
macro_rules! lifecycle_event {
    ($name:literal, $order_key:expr, $schema:expr $(,)?) => {
        EventDescriptor {
            name: $name,
            description: "A lifecycle event.",
            producer_class: "dispatcher",
            order_key: $order_key,
            deprecated: false,
            max_payload_bytes: 4096,
            versions: &[VersionDescriptor {
                version: "1.0.0",
                major: 1,
                schema: $schema,
                schema_digest: DIGEST,
            }],
        }
    };
}

/// [`DISPATCH_REGISTRY`]'s `test.note` for `d.leased`, plus the lifecycle events:
/// `job.dead_lettered` (1.0.0 and 1.1.0, the reference contract's schema; producer class
/// `dispatcher`, order key `job_id`) for the leased consumer `ops.watch`, and
/// `dlq_replay.scheduled`, `dlq_replay.completed`, `dlq_replay.failed` (order key
/// `replay_id`) and `job.discarded` (order key `event_id`), subscribed by no consumer.
pub const LIFECYCLE_REGISTRY: Registry = Registry {
    project: "runtime_lifecycle_tests",
    digest: DIGEST,
    events: &[
        lifecycle_event!(
            "dlq_replay.completed",
            &["replay_id"],
            REPLAY_COMPLETED_SCHEMA,
        ),
        lifecycle_event!("dlq_replay.failed", &["replay_id"], REPLAY_FAILED_SCHEMA),
        lifecycle_event!(
            "dlq_replay.scheduled",
            &["replay_id"],
            REPLAY_SCHEDULED_SCHEMA,
        ),
        EventDescriptor {
            name: "job.dead_lettered",
            description: "A delivery was dead-lettered.",
            producer_class: "dispatcher",
            order_key: &["job_id"],
            deprecated: false,
            max_payload_bytes: 4096,
            versions: &[
                VersionDescriptor {
                    version: "1.0.0",
                    major: 1,
                    schema: DEAD_LETTERED_SCHEMA,
                    schema_digest: DIGEST,
                },
                VersionDescriptor {
                    version: "1.1.0",
                    major: 1,
                    schema: DEAD_LETTERED_SCHEMA,
                    schema_digest: DIGEST,
                },
            ],
        },
        lifecycle_event!("job.discarded", &["event_id"], DISCARDED_SCHEMA),
        EventDescriptor {
            name: "test.note",
            description: "A note.",
            producer_class: "notes",
            order_key: &["note_id"],
            deprecated: false,
            max_payload_bytes: 512,
            versions: &[VersionDescriptor {
                version: "1.0.0",
                major: 1,
                schema: NOTE_SCHEMA,
                schema_digest: DIGEST,
            }],
        },
    ],
    // Sorted by name, as the registry's lookups expect.
    consumers: &[
        dispatch_consumer("d.leased", HandlerKind::Leased, false),
        ConsumerDescriptor {
            subscriptions: DEAD_LETTERED_1,
            ..dispatch_consumer("ops.watch", HandlerKind::Leased, false)
        },
    ],
    retry_policies: &[FIXED_200MS],
    executor_classes: &[],
    schedules: &[],
    lag_thresholds: &[],
    cutover_gates: &[],
    inventory_rules: &[],
    evidence_recording: None,
    retention: evc_runtime::RetentionDescriptor::KEEP,
    payload_policy: REFERENCE_POLICY,
    require_tenant_scope: false,
    dispatcher: evc_runtime::DispatcherDescriptor::FORMAT_DEFAULTS,
};

/// [`LIFECYCLE_REGISTRY`] requiring a tenant scope on every event, the lifecycle events
/// included, with the leased consumer `ops.replays` subscribed to `dlq_replay.scheduled`.
pub const LIFECYCLE_TENANT_REGISTRY: Registry = Registry {
    consumers: &[
        dispatch_consumer("d.leased", HandlerKind::Leased, false),
        ConsumerDescriptor {
            subscriptions: &[SubscriptionDescriptor {
                event: "dlq_replay.scheduled",
                requirement: "^1",
                versions: &["1.0.0"],
            }],
            ..dispatch_consumer("ops.replays", HandlerKind::Leased, false)
        },
        ConsumerDescriptor {
            subscriptions: DEAD_LETTERED_1,
            ..dispatch_consumer("ops.watch", HandlerKind::Leased, false)
        },
    ],
    require_tenant_scope: true,
    ..LIFECYCLE_REGISTRY
};

// ---------------------------------------------------------------------------------------------
// Replay and discard tests.
// ---------------------------------------------------------------------------------------------

/// Deploys, in the database's registry mirror, a registry of its own digest
/// ([`evc_runtime::PgStore::install_registry`], as its generated migration would): `test.note`
/// (order key `note_id`, producer class `notes`, cap 512 bytes) with version 1.0.0 of `schema`
/// (`None`: no version), and the leased consumer `consumer` on [`FIXED_200MS`], subscribed to
/// it under `requirement` (`None`: not subscribed). Whatever an earlier deployment had and this
/// one lacks is no longer deployed.
pub async fn install(
    pool: &PgPool,
    consumer: &str,
    requirement: Option<&str>,
    schema: Option<&str>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    fn leak<T>(value: Vec<T>) -> &'static [T] {
        Box::leak(value.into_boxed_slice())
    }
    fn text(value: &str) -> &'static str {
        Box::leak(value.to_owned().into_boxed_str())
    }
    let subscriptions = leak(
        requirement
            .map(|requirement| SubscriptionDescriptor {
                event: "test.note",
                requirement: text(requirement),
                versions: &["1.0.0"],
            })
            .into_iter()
            .collect(),
    );
    let versions = leak(
        schema
            .map(|schema| VersionDescriptor {
                version: "1.0.0",
                major: 1,
                schema: text(schema),
                schema_digest: DIGEST,
            })
            .into_iter()
            .collect(),
    );
    let registry = Registry {
        project: "runtime_deployed",
        digest: text(&format!(
            "{:016x}{:016x}{:016x}{:016x}",
            random(),
            random(),
            random(),
            random()
        )),
        events: leak(vec![EventDescriptor {
            name: "test.note",
            description: "A note.",
            producer_class: "notes",
            order_key: &["note_id"],
            deprecated: false,
            max_payload_bytes: 512,
            versions,
        }]),
        consumers: leak(vec![ConsumerDescriptor {
            name: text(consumer),
            subscriptions,
            ..dispatch_consumer("", HandlerKind::Leased, false)
        }]),
        retry_policies: &[FIXED_200MS],
        executor_classes: &[],
        schedules: &[],
        lag_thresholds: &[],
        cutover_gates: &[],
        inventory_rules: &[],
        evidence_recording: None,
        retention: evc_runtime::RetentionDescriptor::KEEP,
        payload_policy: REFERENCE_POLICY,
        require_tenant_scope: false,
        dispatcher: evc_runtime::DispatcherDescriptor::FORMAT_DEFAULTS,
    };
    evc_runtime::PgStore::new(pool.clone(), registry)?
        .install_registry()
        .await?;
    Ok(())
}

/// Deploys `consumer`, subscribed to `test.note` under `requirement`, with `test.note` 1.0.0 of
/// [`NOTE_SCHEMA`] ([`install`]): the test registries have no generated registry migration.
pub async fn deploy(
    pool: &PgPool,
    consumer: &str,
    requirement: &str,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    install(pool, consumer, Some(requirement), Some(NOTE_SCHEMA)).await
}

// ---------------------------------------------------------------------------------------------
// Store calls: the `Store` trait's one claim and one ack, on a connection of the store's pool.
// ---------------------------------------------------------------------------------------------

/// A leased claim of up to `batch` deliveries of `consumer` for `owner`, per key or not
/// ([`evc_runtime::Store::claim`] on a connection of the store's pool).
pub async fn claim<S: evc_runtime::Store>(
    store: &S,
    consumer: &str,
    owner: &str,
    batch: u32,
    lease: std::time::Duration,
    per_key: bool,
) -> Result<Vec<evc_runtime::Claimed>, evc_runtime::DispatchError> {
    let mut connection = store.pool().acquire().await?;
    let request = evc_runtime::ClaimRequest::leased(consumer, owner, batch, lease).per_key(per_key);
    store.claim(&mut connection, &request).await
}

/// Acks `leases` ([`evc_runtime::Store::ack`] on a connection of the store's pool): what was
/// acked, and which were stale.
pub async fn ack<S: evc_runtime::Store>(
    store: &S,
    leases: &[&evc_runtime::Lease],
) -> Result<evc_runtime::AckBatch, evc_runtime::DispatchError> {
    let mut connection = store.pool().acquire().await?;
    store.ack(&mut connection, leases).await
}

/// Acks one lease the test expects to be current: an error unless the ack took it (a stale
/// lease is an error, as a single ack's `StaleToken` was).
pub async fn ack_current<S: evc_runtime::Store>(
    store: &S,
    lease: &evc_runtime::Lease,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let outcome = ack(store, &[lease]).await?;
    if outcome.acked != 1 || !outcome.stale.is_empty() {
        return Err(format!(
            "lease of {} at {} (token {}) not acked: {outcome:?}",
            lease.event_id, lease.consumer, lease.token
        )
        .into());
    }
    Ok(())
}

/// Keys of the `per_key` consumers with more than one live lease right now (each consumer's
/// leases read at once): per-key ordering allows none.
pub async fn doubly_leased_keys<S: evc_runtime::Observe>(
    store: &S,
    per_key: &[&str],
) -> Result<usize, evc_runtime::DispatchError> {
    let mut doubled = 0;
    for consumer in per_key {
        let mut leases_per_key: std::collections::BTreeMap<Option<String>, u32> =
            std::collections::BTreeMap::new();
        for lease in store.leases(consumer).await? {
            *leases_per_key.entry(lease.order_key).or_default() += 1;
        }
        doubled += leases_per_key
            .values()
            .filter(|&&leases| leases > 1)
            .count();
    }
    Ok(doubled)
}

/// Fails unless `attempts` (one delivery's attempt rows, every generation) hold exactly one
/// `acked` row and it carries the delivery's final token, the highest of its attempts. An ack
/// deletes the delivery, so its attempt rows are all that is left to check.
pub fn assert_one_final_ack(attempts: &[evc_runtime::AttemptRecord], delivery: &str) {
    let acked: Vec<i64> = attempts
        .iter()
        .filter(|attempt| attempt.outcome == "acked")
        .map(|attempt| attempt.token)
        .collect();
    let last = attempts.iter().map(|attempt| attempt.token).max();
    assert_eq!(
        (acked.len(), acked.first().copied()),
        (1, last),
        "{delivery}: not acked exactly once with its final token"
    );
}
