//! The store comparison benchmark: the same figures, measured by one generic function body over
//! the [`Store`] trait, for the SQLite store (a fresh file in a temporary directory per figure)
//! and the PostgreSQL store (a fresh database per figure, dropped at the end), printed side by
//! side with the SQLite/PG ratio and the goals of the SQLite store beside them:
//!
//! - single append: one event per transaction (`BEGIN`, `Store::append`, `COMMIT`), 2,000 events;
//! - batch append: `Store::append_batch` of 1,000 events per transaction, 50,000 events in all;
//! - claim+ack: 20,000 deliveries appended beforehand, then one worker loop on one connection
//!   claiming leased batches of 100 (`Store::claim`) and acking them (`Store::ack`, fenced,
//!   each ack writing its attempt row);
//! - produce-to-handler latency: a `Dispatcher` with one leased consumer whose handler records
//!   when it saw each event, while four producer tasks append 1,000 events/s between them for
//!   3 s on a fixed schedule (one event per transaction, its timestamp taken just before the
//!   commit): p50, p99 and max in ms.
//!
//! ```sh
//! cargo bench -p evc-runtime --bench stores
//! EVC_BENCH_SCALE=0.1 cargo bench -p evc-runtime --bench stores   # a quick run
//! ```
//!
//! Environment: `DATABASE_URL` (default `postgres://root@localhost/test`; PostgreSQL is skipped
//! with a message when unreachable), `EVC_BENCH_SCALE` (multiplies every event count and the
//! latency run's length; default 1), `EVC_BENCH_STORES` (comma-separated subset of `sqlite`,
//! `postgres`; default both).

#![allow(missing_docs)]

use std::future::Future;
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evc_runtime::{
    AppendOptions, ClaimRequest, ConsumerDescriptor, ConsumerMode, DeliveryStatus, Dispatcher,
    DispatcherConfig, EventDescriptor, HandlerError, HandlerKind, Lease, NewEvent, OutgoingEvent,
    PgStore, Registry, RetryPolicyDescriptor, SqliteStore, Store, SubscriptionDescriptor,
    TraceContext, VersionDescriptor,
};
use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection};

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const DEFAULT_URL: &str = "postgres://root@localhost/test";

/// Events of the single-append figure.
const SINGLE_EVENTS: f64 = 2_000.0;
/// Events of the batch-append figure, and events per batch (not scaled).
const BATCH_EVENTS: f64 = 50_000.0;
const BATCH_SIZE: usize = 1_000;
/// Deliveries drained by the claim+ack figure, and deliveries per claim.
const CLAIM_EVENTS: f64 = 20_000.0;
const CLAIM_BATCH: u32 = 100;
/// The latency run: events per second and seconds, and the producer tasks sharing the rate.
const LATENCY_RATE: u64 = 1_000;
const PRODUCERS: usize = 4;
const LATENCY_SECONDS: f64 = 3.0;

/// Goals of the SQLite store.
const CLAIM_GOAL: f64 = 10_000.0;
const BATCH_GOAL: f64 = 100_000.0;
const P99_GOAL_MS: f64 = 10.0;

// ---------------------------------------------------------------------------------------------
// The registry: one event type fanned out to one leased consumer.
// ---------------------------------------------------------------------------------------------

const SCHEMA: &str = r#"{"additionalProperties":false,"properties":{"iu_unit_id":{"format":"uuid","type":"string"}},"required":["iu_unit_id"],"type":"object"}"#;
const DIGEST: &str = "00000000000000000000000000000000000000000000000000000000000000b1";
const EVENT: &str = "bench.event";
const CONSUMER: &str = "bench.consumer";

static REGISTRY: Registry = Registry {
    project: "evc_store_bench",
    digest: DIGEST,
    events: &[EventDescriptor {
        name: EVENT,
        description: "A benchmark event.",
        producer_class: "bench",
        order_key: &["iu_unit_id"],
        deprecated: false,
        max_payload_bytes: 4096,
        versions: &[VersionDescriptor {
            version: "1.0.0",
            major: 1,
            schema: SCHEMA,
            schema_digest: DIGEST,
        }],
    }],
    consumers: &[ConsumerDescriptor {
        name: CONSUMER,
        handler: HandlerKind::Leased,
        mode: ConsumerMode::Live,
        per_key_ordering: false,
        retry_policy: "bench.retry",
        heartbeat_threshold_ms: 60_000,
        handler_timeout_ms: None,
        executor_class: None,
        subscriptions: &[SubscriptionDescriptor {
            event: EVENT,
            requirement: "^1",
            versions: &["1.0.0"],
        }],
    }],
    retry_policies: &[RetryPolicyDescriptor {
        name: "bench.retry",
        kind: "fixed_delay",
        base_delay_ms: 1_000,
        max_delay_ms: None,
        max_attempts: 3,
        jitter: "none",
        retry_on: &["transient"],
    }],
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

fn trace() -> TraceContext {
    TraceContext::new("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)
        .expect("valid trace context")
}

/// Event number `n`: its unit id carries `n` (the latency handler reads it back).
fn event(trace: &TraceContext, n: u64) -> OutgoingEvent {
    let unit = format!("00000000-0000-4000-8000-{n:012x}");
    let payload = serde_json::json!({ "iu_unit_id": unit });
    OutgoingEvent::new(EVENT, "1.0.0", Some(unit), trace, &payload).expect("serializes")
}

/// The number [`event`] put into a payload.
fn event_number(payload: &serde_json::Value) -> Option<usize> {
    let unit = payload.get("iu_unit_id")?.as_str()?;
    usize::from_str_radix(unit.get(24..)?, 16).ok()
}

const OPEN: &[DeliveryStatus] = &[DeliveryStatus::Pending, DeliveryStatus::Leased];

/// Opens a fresh, empty store per figure.
trait Fresh: Send {
    type S: Store;
    fn fresh(&mut self, purpose: &str) -> impl Future<Output = BenchResult<Self::S>> + Send;
}

/// SQLite: a new file in a temporary directory (removed with it).
struct SqliteFiles {
    dir: tempfile::TempDir,
    opened: usize,
}

impl Fresh for SqliteFiles {
    type S = SqliteStore;

    async fn fresh(&mut self, purpose: &str) -> BenchResult<SqliteStore> {
        self.opened += 1;
        let path = self
            .dir
            .path()
            .join(format!("{}_{purpose}.db", self.opened));
        Ok(SqliteStore::open(path.to_string_lossy(), REGISTRY).await?)
    }
}

/// PostgreSQL: a new database with the generated migrations applied; every database created is
/// dropped at the end of the run (also after a failure or a panic).
struct PgServer {
    url: String,
    admin: PgConnection,
    created: Arc<Mutex<Vec<String>>>,
}

impl Fresh for PgServer {
    type S = PgStore;

    async fn fresh(&mut self, purpose: &str) -> BenchResult<PgStore> {
        let name = {
            let mut created = self.created.lock().expect("not poisoned");
            let name = format!(
                "evc_stores_{}_{}_{purpose}",
                std::process::id(),
                created.len()
            );
            created.push(name.clone());
            name
        };
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut self.admin)
            .await?;
        let options = PgConnectOptions::from_str(&self.url)?.database(&name);
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .connect_with(options)
            .await?;
        let migrations = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/migrations");
        Migrator::new(migrations.as_path())
            .await?
            .run(&pool)
            .await?;
        Ok(PgStore::new(pool, REGISTRY)?)
    }
}

async fn drop_all(admin: &mut PgConnection, created: &Mutex<Vec<String>>) {
    let names = std::mem::take(&mut *created.lock().expect("not poisoned"));
    for name in names {
        let statement = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
        if let Err(error) = sqlx::raw_sql(AssertSqlSafe(statement))
            .execute(&mut *admin)
            .await
        {
            eprintln!("could not drop database {name}: {error}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The figures, one body for both stores.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct Sizes {
    single: usize,
    batch: usize,
    claim: usize,
    latency: Duration,
}

impl Sizes {
    fn scaled(scale: f64) -> Self {
        let count = |base: f64| ((base * scale).round() as usize).max(1);
        Self {
            single: count(SINGLE_EVENTS),
            // Whole batches of BATCH_SIZE, at least one.
            batch: count(BATCH_EVENTS / BATCH_SIZE as f64) * BATCH_SIZE,
            claim: count(CLAIM_EVENTS),
            latency: Duration::from_secs_f64((LATENCY_SECONDS * scale).max(0.5)),
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    single: f64,
    batch: f64,
    claim_ack: f64,
    /// The latency run's producer: events appended per second (the target is
    /// [`LATENCY_RATE`]; a store that cannot commit that fast falls behind).
    produced: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

async fn measure<F: Fresh>(stores: &mut F, name: &str, sizes: Sizes) -> BenchResult<Figures> {
    let single = single_append(stores.fresh("single").await?, sizes.single).await?;
    println!("  {name}: single append {single:.0} events/s");
    let batch = batch_append(stores.fresh("batch").await?, sizes.batch).await?;
    println!("  {name}: batch append {batch:.0} events/s");
    let claim_ack = claim_ack(stores.fresh("claim").await?, sizes.claim).await?;
    println!("  {name}: claim+ack {claim_ack:.0} deliveries/s");
    let (produced, p50_ms, p99_ms, max_ms) =
        latency(stores.fresh("latency").await?, sizes.latency).await?;
    println!(
        "  {name}: produce-to-handler p50 {p50_ms:.2} ms, p99 {p99_ms:.2} ms, max {max_ms:.2} ms"
    );
    Ok(Figures {
        single,
        batch,
        claim_ack,
        produced,
        p50_ms,
        p99_ms,
        max_ms,
    })
}

/// One event per transaction: `BEGIN`, `append`, `COMMIT`, `events` times on one task.
async fn single_append<S: Store>(store: S, events: usize) -> BenchResult<f64> {
    let trace = trace();
    let started = Instant::now();
    for n in 0..events as u64 {
        let mut tx = store.begin().await?;
        store
            .append(&mut tx, event(&trace, n), AppendOptions::default())
            .await?;
        tx.commit().await?;
    }
    let rate = events as f64 / started.elapsed().as_secs_f64();
    let stored = store.count_events(&[]).await?;
    if stored != events as u64 {
        return Err(format!("single append: {stored} events stored of {events}").into());
    }
    Ok(rate)
}

/// `append_batch` of [`BATCH_SIZE`] events per transaction; building the events is not timed.
async fn batch_append<S: Store>(store: S, events: usize) -> BenchResult<f64> {
    let trace = trace();
    let batches: Vec<Vec<NewEvent>> = (0..events as u64)
        .collect::<Vec<_>>()
        .chunks(BATCH_SIZE)
        .map(|chunk| {
            chunk
                .iter()
                .map(|n| NewEvent::new(event(&trace, *n), AppendOptions::default()))
                .collect()
        })
        .collect();
    let started = Instant::now();
    for batch in batches {
        let mut tx = store.begin().await?;
        store.append_batch(&mut tx, batch).await?;
        tx.commit().await?;
    }
    let rate = events as f64 / started.elapsed().as_secs_f64();
    let stored = store.count_events(&[]).await?;
    if stored != events as u64 {
        return Err(format!("batch append: {stored} events stored of {events}").into());
    }
    Ok(rate)
}

/// `deliveries` appended beforehand (untimed), then one worker loop on one connection: claim a
/// leased batch, mark each started, ack the batch (fenced, with attempt rows) until none is left.
async fn claim_ack<S: Store>(store: S, deliveries: usize) -> BenchResult<f64> {
    let trace = trace();
    let all: Vec<NewEvent> = (0..deliveries as u64)
        .map(|n| NewEvent::new(event(&trace, n), AppendOptions::default()))
        .collect();
    let mut tx = store.begin().await?;
    store.append_batch(&mut tx, all).await?;
    tx.commit().await?;

    let owner = format!("bench-{}/{CONSUMER}/0", std::process::id());
    let request = ClaimRequest::leased(CONSUMER, &owner, CLAIM_BATCH, Duration::from_secs(30));
    let mut connection = store.pool().acquire().await?;
    let mut acked = 0usize;
    let started = Instant::now();
    loop {
        let mut claimed = store.claim(&mut connection, &request).await?;
        if claimed.is_empty() {
            break;
        }
        for claimed in &mut claimed {
            claimed.lease.mark_started();
        }
        let leases: Vec<&Lease> = claimed.iter().map(|c| &c.lease).collect();
        let outcome = store.ack(&mut connection, &leases).await?;
        if !outcome.stale.is_empty() {
            return Err(format!("claim+ack: {} stale acks", outcome.stale.len()).into());
        }
        acked += outcome.acked;
    }
    let rate = acked as f64 / started.elapsed().as_secs_f64();
    drop(connection);
    let attempts = store.count_attempts(CONSUMER, "acked").await?;
    let open = store.count_deliveries(CONSUMER, OPEN).await?;
    if acked != deliveries || attempts != deliveries as u64 || open != 0 {
        return Err(format!(
            "claim+ack: {acked} acked, {attempts} acked attempt rows, {open} open, of {deliveries}"
        )
        .into());
    }
    Ok(rate)
}

/// When the latency run's producer committed each event and when the handler first saw it.
#[derive(Default)]
struct Times {
    sent: Vec<Option<Instant>>,
    seen: Vec<Option<Instant>>,
}

/// The latency run's handler: records when it first saw each event.
struct Recorder(Arc<Mutex<Times>>);

impl<S: Store> DynHandler<S> for Recorder {
    fn handle<'a>(
        &'a self,
        context: HandlerContext<'a, S>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        let now = Instant::now();
        let number = event_number(context.payload());
        Box::pin(async move {
            let number = number.ok_or_else(|| HandlerError::permanent("no_event_number"))?;
            let mut times = self.0.lock().expect("not poisoned");
            if let Some(slot) = times.seen.get_mut(number) {
                slot.get_or_insert(now);
            }
            Ok(())
        })
    }
}

/// A dispatcher (the defaults: 4 workers, listening for appends) serves [`CONSUMER`] while one
/// producer appends [`LATENCY_RATE`] events/s for `length` ([`PRODUCERS`] tasks), one per
/// transaction; the latency of
/// an event is from just before its commit to its handler call. Returns the producer's rate
/// (events/s) and p50, p99, max in ms.
async fn latency<S: Store>(store: S, length: Duration) -> BenchResult<(f64, f64, f64, f64)> {
    let events = (LATENCY_RATE as f64 * length.as_secs_f64()).round() as usize;
    let times = Arc::new(Mutex::new(Times {
        sent: vec![None; events],
        seen: vec![None; events],
    }));
    let config = DispatcherConfig::default().owner(format!("bench-{}", std::process::id()));
    let handle = Dispatcher::new(store.clone(), config)
        .consumer(CONSUMER, Recorder(Arc::clone(&times)))?
        .start();
    // Let the workers start and go idle, as a running service's would be.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let started = tokio::time::Instant::now();
    let interval = Duration::from_secs(1) / LATENCY_RATE as u32;
    // Event n is due at n intervals: a fixed schedule, so a late append is not followed by a
    // pause. The events are split over producer tasks (n modulo PRODUCERS), as a service's
    // requests are, so one slow commit does not hold up the events due after it.
    let mut producers = tokio::task::JoinSet::new();
    for producer in 0..PRODUCERS {
        let (store, times) = (store.clone(), Arc::clone(&times));
        producers.spawn(async move {
            let trace = trace();
            for n in (producer..events).step_by(PRODUCERS) {
                tokio::time::sleep_until(started + interval * n as u32).await;
                let mut tx = store.begin().await?;
                store
                    .append(&mut tx, event(&trace, n as u64), AppendOptions::default())
                    .await?;
                times.lock().expect("not poisoned").sent[n] = Some(Instant::now());
                tx.commit().await?;
            }
            BenchResult::Ok(())
        });
    }
    while let Some(done) = producers.join_next().await {
        done??;
    }
    let produced_in = started.elapsed();

    // Waits (bounded) for the handler to see every event.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let missing = times
            .lock()
            .expect("not poisoned")
            .seen
            .iter()
            .filter(|seen| seen.is_none())
            .count();
        if missing == 0 {
            break;
        }
        if Instant::now() >= deadline {
            return Err(format!("latency: {missing} events never reached the handler").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stats = handle.shutdown().await;
    if stats.stale > 0 {
        return Err(format!("latency: {} stale acks", stats.stale).into());
    }
    let times = times.lock().expect("not poisoned");
    let mut latencies: Vec<f64> = times
        .sent
        .iter()
        .zip(&times.seen)
        .filter_map(|(sent, seen)| Some(seen.as_ref()?.saturating_duration_since(*sent.as_ref()?)))
        .map(|latency| latency.as_secs_f64() * 1_000.0)
        .collect();
    latencies.sort_by(f64::total_cmp);
    println!(
        "    {events} events produced in {:.2} s ({:.0}/s)",
        produced_in.as_secs_f64(),
        events as f64 / produced_in.as_secs_f64()
    );
    let at = |q: f64| {
        latencies[((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1]
    };
    Ok((
        events as f64 / produced_in.as_secs_f64(),
        at(0.50),
        at(0.99),
        at(1.0),
    ))
}

// ---------------------------------------------------------------------------------------------
// The table.
// ---------------------------------------------------------------------------------------------

enum Goal {
    None,
    AtLeast(f64),
    /// At most this, with the latency run's producer at (nearly) [`LATENCY_RATE`]: a p99 taken
    /// at a lower rate does not meet a goal set at that rate.
    AtMostAtRate(f64),
}

/// The share of [`LATENCY_RATE`] the producer must reach for the latency goal to count.
const RATE_REACHED: f64 = 0.95;

/// A table row: the figure, its unit, how to read it, its goal.
type Row = (String, &'static str, fn(&Figures) -> f64, Goal);

fn print_table(sizes: Sizes, sqlite: Option<Figures>, pg: Option<Figures>) {
    let rows: [Row; 7] = [
        (
            format!(
                "single append ({} events, 1 per tx)",
                thousands(sizes.single as f64)
            ),
            "events/s",
            |f| f.single,
            Goal::None,
        ),
        (
            format!(
                "batch append ({} events, {} per tx)",
                thousands(sizes.batch as f64),
                thousands(BATCH_SIZE as f64)
            ),
            "events/s",
            |f| f.batch,
            Goal::AtLeast(BATCH_GOAL),
        ),
        (
            format!(
                "claim+ack ({} deliveries, batch {CLAIM_BATCH}, 1 worker)",
                thousands(sizes.claim as f64)
            ),
            "deliveries/s",
            |f| f.claim_ack,
            Goal::AtLeast(CLAIM_GOAL),
        ),
        (
            format!("latency run: producer rate (target {LATENCY_RATE}/s)"),
            "events/s",
            |f| f.produced,
            Goal::None,
        ),
        (
            format!("produce-to-handler p50 ({LATENCY_RATE}/s)"),
            "ms",
            |f| f.p50_ms,
            Goal::None,
        ),
        (
            format!("produce-to-handler p99 ({LATENCY_RATE}/s)"),
            "ms",
            |f| f.p99_ms,
            Goal::AtMostAtRate(P99_GOAL_MS),
        ),
        (
            format!("produce-to-handler max ({LATENCY_RATE}/s)"),
            "ms",
            |f| f.max_ms,
            Goal::None,
        ),
    ];
    println!();
    println!(
        "| figure | unit | SQLite | PostgreSQL | SQLite/PG | goal (SQLite) | SQLite meets it |"
    );
    println!("| --- | --- | ---: | ---: | ---: | --- | --- |");
    for (name, unit, value, goal) in rows {
        let show = |figures: &Option<Figures>| {
            figures.as_ref().map_or_else(
                || "skipped".to_owned(),
                |f| {
                    if unit == "ms" {
                        format!("{:.2}", value(f))
                    } else {
                        thousands(value(f))
                    }
                },
            )
        };
        let ratio = match (&sqlite, &pg) {
            (Some(s), Some(p)) if value(p) > 0.0 => format!("{:.2}", value(s) / value(p)),
            _ => "-".to_owned(),
        };
        let (goal_text, met) = match goal {
            Goal::None => ("-".to_owned(), "-".to_owned()),
            Goal::AtLeast(goal) => (
                format!(">= {} {unit}", thousands(goal)),
                sqlite
                    .as_ref()
                    .map_or("-", |f| yes_no(value(f) >= goal))
                    .to_owned(),
            ),
            Goal::AtMostAtRate(goal) => (
                format!("<= {goal} {unit} at {LATENCY_RATE}/s"),
                sqlite
                    .as_ref()
                    .map_or("-", |f| {
                        if f.produced < LATENCY_RATE as f64 * RATE_REACHED {
                            "no (producer below the rate)"
                        } else {
                            yes_no(value(f) <= goal)
                        }
                    })
                    .to_owned(),
            ),
        };
        println!(
            "| {name} | {unit} | {} | {} | {ratio} | {goal_text} | {met} |",
            show(&sqlite),
            show(&pg)
        );
    }
}

fn yes_no(met: bool) -> &'static str {
    if met { "yes" } else { "no" }
}

fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Main.
// ---------------------------------------------------------------------------------------------

fn main() -> BenchResult<()> {
    let scale = std::env::var("EVC_BENCH_SCALE")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|scale| *scale > 0.0)
        .unwrap_or(1.0);
    let only = std::env::var("EVC_BENCH_STORES").unwrap_or_default();
    let wants =
        |store: &str| only.trim().is_empty() || only.split(',').any(|part| part.trim() == store);
    let (run_sqlite, run_pg) = (wants("sqlite"), wants("postgres"));
    let sizes = Sizes::scaled(scale);
    println!(
        "store benchmark (scale {scale}): single append {} events, batch append {} events, claim+ack {} deliveries, latency {:.1} s at {LATENCY_RATE}/s",
        sizes.single,
        sizes.batch,
        sizes.claim,
        sizes.latency.as_secs_f64()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let sqlite = if run_sqlite {
            let mut files = SqliteFiles {
                dir: tempfile::tempdir()?,
                opened: 0,
            };
            println!("SQLite (files in {}):", files.dir.path().display());
            Some(measure(&mut files, "SQLite", sizes).await?)
        } else {
            None
        };
        let pg = if run_pg { postgres(sizes).await? } else { None };
        print_table(sizes, sqlite, pg);
        Ok(())
    })
}

/// The PostgreSQL figures; `None` (with a message) when the server is unreachable.
async fn postgres(sizes: Sizes) -> BenchResult<Option<Figures>> {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let mut admin = match PgConnection::connect(&url).await {
        Ok(admin) => admin,
        Err(error) => {
            eprintln!("PostgreSQL skipped: {url} is unreachable ({error}); set DATABASE_URL");
            return Ok(None);
        }
    };
    println!("PostgreSQL ({url}):");
    let created = Arc::new(Mutex::new(Vec::new()));
    // In its own task, so a failure or a panic still drops the databases.
    let run = tokio::spawn({
        let created = Arc::clone(&created);
        async move {
            let mut server = PgServer {
                admin: PgConnection::connect(&url).await?,
                url,
                created,
            };
            measure(&mut server, "PostgreSQL", sizes).await
        }
    })
    .await;
    drop_all(&mut admin, &created).await;
    match run {
        Ok(result) => result.map(Some),
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => Err(error.into()),
    }
}
