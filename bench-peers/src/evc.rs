//! evc's side: a static registry like the runtime's own benchmark (`runtime/benches/outbox.rs`),
//! `PgStore::append_batch` (COPY) for the insert, the `Dispatcher` for the drain. Fencing and
//! the attempt audit are always on in evc; every drain checks one acked attempt row per
//! delivery.

use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use evc_runtime::{
    AppendOptions, ConsumerDescriptor, ConsumerMode, DeliveryStatus, Dispatcher, DispatcherConfig,
    EventDescriptor, HandlerError, HandlerKind, NewEvent, OutgoingEvent, PgStore, Registry,
    RetryPolicyDescriptor, Store, SubscriptionDescriptor, TraceContext, VersionDescriptor,
};
use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgPool, PgPoolOptions};

use crate::writes::Meter;
use crate::{BenchResult, Run, System, drain_cap, open_connections, wait_until};

const SCHEMA: &str = r#"{"additionalProperties":false,"properties":{"iu_unit_id":{"format":"uuid","type":"string"}},"required":["iu_unit_id"],"type":"object"}"#;
const DIGEST: &str = "0000000000000000000000000000000000000000000000000000000000000001";
const VERSIONS: &[VersionDescriptor] = &[VersionDescriptor {
    version: "1.0.0",
    major: 1,
    schema: SCHEMA,
    schema_digest: DIGEST,
}];
const POLICY: RetryPolicyDescriptor = RetryPolicyDescriptor {
    name: "bench.retry",
    kind: "fixed_delay",
    base_delay_ms: 1_000,
    max_delay_ms: None,
    max_attempts: 3,
    jitter: "none",
    retry_on: &["transient"],
};

/// The event type of the leased consumer (one delivery per event).
pub(crate) const LEASED_EVENT: &str = "bench.noop_leased";
/// Its consumer: the handler runs outside any transaction, acks go in one fenced statement per
/// batch.
pub(crate) const LEASED_CONSUMER: &str = "bench.leased";
/// The event type of the transactional consumer.
const HELD_EVENT: &str = "bench.noop_held";
/// Its consumer: run in held batches (one transaction claims, runs and acks a batch).
const HELD_CONSUMER: &str = "bench.held";

const fn event_type(name: &'static str) -> EventDescriptor {
    EventDescriptor {
        name,
        description: "A peer benchmark event.",
        producer_class: "bench",
        order_key: &["iu_unit_id"],
        deprecated: false,
        max_payload_bytes: 4096,
        versions: VERSIONS,
    }
}

const fn consumer(
    name: &'static str,
    handler: HandlerKind,
    subscriptions: &'static [SubscriptionDescriptor],
) -> ConsumerDescriptor {
    ConsumerDescriptor {
        name,
        handler,
        mode: ConsumerMode::Live,
        per_key_ordering: false,
        retry_policy: "bench.retry",
        heartbeat_threshold_ms: 60_000,
        handler_timeout_ms: None,
        executor_class: None,
        subscriptions,
    }
}

const LEASED_SUBSCRIPTION: &[SubscriptionDescriptor] = &[SubscriptionDescriptor {
    event: LEASED_EVENT,
    requirement: "^1",
    versions: &["1.0.0"],
}];
const HELD_SUBSCRIPTION: &[SubscriptionDescriptor] = &[SubscriptionDescriptor {
    event: HELD_EVENT,
    requirement: "^1",
    versions: &["1.0.0"],
}];

/// `bench.noop_held` goes to `bench.held` (transactional), `bench.noop_leased` to
/// `bench.leased` (leased). Each list sorted by name: the registry binary-searches them.
pub(crate) static REGISTRY: Registry = Registry {
    project: "evc_bench_peers",
    digest: DIGEST,
    events: &[event_type(HELD_EVENT), event_type(LEASED_EVENT)],
    consumers: &[
        consumer(HELD_CONSUMER, HandlerKind::Transactional, HELD_SUBSCRIPTION),
        consumer(LEASED_CONSUMER, HandlerKind::Leased, LEASED_SUBSCRIPTION),
    ],
    retry_policies: &[POLICY],
    executor_classes: &[],
    schedules: &[],
    lag_thresholds: &[],
    cutover_gates: &[],
    inventory_rules: &[],
    evidence_recording: None,
    retention: evc_runtime::RetentionDescriptor::KEEP,
    payload_policy: evc_runtime::PayloadPolicyDescriptor {
        denied_keys: &["body_text", "instruction_text", "payload_blob", "iu_body"],
        credential_key_names: &["password", "token", "api_key", "secret"],
        default_max_bytes: 4096,
        hard_max_bytes: 65_536,
    },
    require_tenant_scope: false,
    dispatcher: evc_runtime::DispatcherDescriptor::FORMAT_DEFAULTS,
};

/// The trace every benchmark event carries (a producer function always has one).
pub(crate) fn trace() -> TraceContext {
    TraceContext::new("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)
        .expect("valid trace context")
}

/// An event built as a generated producer function builds it; `n` makes the unit id unique
/// (and lets the latency handler find the event's number again).
pub(crate) fn event(event_type: &'static str, trace: &TraceContext, n: u64) -> OutgoingEvent {
    let unit = format!("00000000-0000-4000-8000-{n:012x}");
    let payload = serde_json::json!({ "iu_unit_id": unit });
    OutgoingEvent::new(event_type, "1.0.0", Some(unit), trace, &payload).expect("serializes")
}

/// A fresh database of `url` with `generated/migrations` applied, a pool of `connections` and
/// a store over it.
pub(crate) async fn migrated_store(url: &str, connections: u32) -> BenchResult<PgStore> {
    let pool: PgPool = PgPoolOptions::new()
        .max_connections(connections)
        .connect(url)
        .await?;
    let migrations = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/migrations");
    Migrator::new(migrations.as_path())
        .await?
        .run(&pool)
        .await?;
    Ok(PgStore::new(pool, REGISTRY)?)
}

/// The no-op handler of the drains.
struct NoOp;

impl DynHandler for NoOp {
    fn handle<'a>(&'a self, _: HandlerContext<'a>) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async { Ok(()) })
    }
}

/// How the dispatcher runs the consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Leased consumer: claim (lease) a batch, handlers, one fenced `ack_batch`.
    Leased,
    /// Transactional consumer in held batches: one transaction claims with row locks, runs
    /// the handlers and acks.
    Held,
}

/// A point of evc's sweep.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setting {
    mode: Mode,
    batch: u32,
}

/// The polling interval of every drain (an idle worker's fallback; `LISTEN` is on).
const POLL: Duration = Duration::from_millis(50);

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = match self.mode {
            Mode::Leased => "leased consumer",
            Mode::Held => "transactional consumer, held_batches(true)",
        };
        write!(
            f,
            "{mode}, batch {}, workers = handlers, listen on, poll {} ms",
            self.batch,
            POLL.as_millis()
        )
    }
}

/// evc.
pub(crate) struct Evc;

impl System for Evc {
    type Setting = Setting;
    const NAME: &'static str = "evc";

    fn settings() -> Vec<Setting> {
        let mut settings = Vec::new();
        for mode in [Mode::Held, Mode::Leased] {
            for batch in [50, 100, 200, 500] {
                settings.push(Setting { mode, batch });
            }
        }
        settings
    }

    async fn run(
        url: &str,
        setting: &Setting,
        concurrency: usize,
        jobs: usize,
    ) -> BenchResult<Run> {
        let connections = u32::try_from(concurrency)? + 6;
        let store = migrated_store(url, connections).await?;
        let (event_type, consumer) = match setting.mode {
            Mode::Leased => (LEASED_EVENT, LEASED_CONSUMER),
            Mode::Held => (HELD_EVENT, HELD_CONSUMER),
        };

        // Insert: every event in one `append_batch` call (two COPY commands) and one
        // transaction. Building the events is the caller's work and is not timed.
        let trace = trace();
        let batch: Vec<NewEvent> = (0..jobs as u64)
            .map(|n| NewEvent::new(event(event_type, &trace, n), AppendOptions::default()))
            .collect();
        let mut meter = Meter::start(url).await?;
        let started = Instant::now();
        let mut tx = store.pool().begin().await?;
        let receipts = store.append_batch(&mut tx, batch).await?;
        tx.commit().await?;
        let insert_rate = jobs as f64 / started.elapsed().as_secs_f64();
        meter.inserted().await?;
        if receipts.len() != jobs {
            return Err(format!("append_batch returned {} receipts", receipts.len()).into());
        }
        for statement in ["VACUUM ANALYZE evc_deliveries", "ANALYZE evc_events"] {
            sqlx::raw_sql(statement).execute(store.pool()).await?;
        }

        // Drain: from the dispatcher's start until the last ack is committed (the dispatcher
        // counts acks after their statement or transaction committed).
        let config = DispatcherConfig::default()
            .owner(format!("peers-{}", std::process::id()))
            .workers(concurrency)
            .batch(setting.batch)
            .poll_interval(POLL)
            .held_batches(setting.mode == Mode::Held);
        open_connections(store.pool()).await?;
        meter.draining().await?;
        let started = Instant::now();
        let handle = Dispatcher::new(store.clone(), config)
            .consumer(consumer, NoOp)?
            .start();
        let target = jobs as u64;
        let finished =
            wait_until(started, drain_cap(jobs), || handle.stats().acked >= target).await;
        let elapsed = started.elapsed();
        let acked_seen = handle.stats().acked;
        let stats = handle.shutdown().await;
        if stats.stale > 0 {
            return Err(format!("{} stale acks", stats.stale).into());
        }

        // The audit: one acked attempt row per acked delivery, and every delivery acked:
        // kept with status `acked` (by a store from before acks deleted the delivery) or
        // removed by its ack, whose attempt row is its record. Every event of the run has one
        // delivery, to `consumer`, so its rows are all there is.
        let kept = i64::try_from(
            store
                .count_deliveries(consumer, &[DeliveryStatus::Acked])
                .await?,
        )?;
        let present = i64::try_from(store.count_deliveries(consumer, &[]).await?)?;
        let acked = kept + jobs as i64 - present;
        let attempts = i64::try_from(store.count_attempts(consumer, "acked").await?)?;
        if attempts != acked {
            return Err(format!("{acked} acked deliveries but {attempts} attempt rows").into());
        }
        if finished && acked != jobs as i64 {
            return Err(format!("{acked} of {jobs} deliveries acked").into());
        }
        store.pool().close().await;
        Ok(Run {
            insert_rate,
            drain_rate: acked_seen.min(target) as f64 / elapsed.as_secs_f64(),
            finished,
            writes: meter.finish(jobs).await?,
        })
    }
}
