//! The outbox benchmark (docs/runtime.md, "Benchmark"): in one invocation on the local
//! PostgreSQL, the pure-SQL ceiling of `../shared/bench/pg_ceiling.sh` (same statements, run by
//! `pgbench` exactly as the script runs them, or by 4 Rust connections when `pgbench` is not on
//! PATH), then evc's own paths — single-event produce, claim+ack with a no-op handler (4
//! workers, batch 50 and 100, fencing and the attempt audit on) through the `Dispatcher` and
//! through `Store::claim` + `Store::ack` (one connection per task), and one batch append of
//! 100,000 events beside a raw `COPY` of the same rows — each printed with its ratio to the
//! ceiling (the append: to the raw `COPY`) and its goal.
//!
//! ```sh
//! cargo bench -p evc-runtime --bench outbox
//! EVC_BENCH_SECONDS=3 cargo bench -p evc-runtime --bench outbox   # a quick run
//! ```
//!
//! Environment: `DATABASE_URL` (default `postgres://root@localhost/test`; the benchmark creates
//! its own databases there and drops them at the end), `EVC_BENCH_SECONDS` (seconds per timed
//! run, default 10), `EVC_BENCH_CLAIM_EVENTS` (deliveries pre-inserted per claim run, default
//! 300,000), `EVC_CEILING_SCRIPT` (the script whose statements are checked against the copies
//! here; default `../shared/bench/pg_ceiling.sh` beside the workspace), `EVC_BENCH_ONLY` (a
//! comma-separated subset of `produce`, `claim`, `held` (only the held-batch claim+ack runs),
//! `leased` (only the leased Dispatcher's claim+ack runs), `append`, `vacuum`, and `cursor` and
//! `endurance` (run only when named); the ceiling runs whenever `produce`, `claim`, `held` or
//! `leased` does; default all but `cursor` and `endurance`), `EVC_BENCH_ENDURANCE_SECONDS`
//! (each steady run of `endurance`, default 600).

#![allow(missing_docs)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evc_runtime::{
    AppendOptions, ConsumerDescriptor, ConsumerMode, CopyRows, DeliveryStatus, Dispatcher,
    DispatcherConfig, EventDescriptor, HandlerError, HandlerKind, NewEvent, OutgoingEvent, PgStore,
    Publish, Registry, RetryPolicyDescriptor, Store, SubscriptionDescriptor, TraceContext,
    VersionDescriptor,
};
use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection};

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const DEFAULT_URL: &str = "postgres://root@localhost/test";
/// Concurrent clients / workers, as in the script (`pgbench -c 4`).
const CLIENTS: usize = 4;
/// Events of the batch-append figure.
const BATCH_EVENTS: usize = 100_000;
/// Goals of issue 6.
const PRODUCE_GOAL: f64 = 0.8;
const CLAIM_GOAL: f64 = 1.0;
/// Goal of issue 25: the batch append, to a raw `COPY` of the same rows in the same run.
const BATCH_GOAL: f64 = 0.8;
/// Goal of issue 21: the steady claim+ack with vacuum held back, to the same run without.
const ENDURANCE_GOAL: f64 = 0.8;

/// Batch append runs; the figure is their median.
const BATCH_RUNS: usize = 5;

// ---------------------------------------------------------------------------------------------
// The ceiling: the statements of pg_ceiling.sh, verbatim.
// ---------------------------------------------------------------------------------------------

const CEILING_SCHEMA: &str = "\
create table ev(id bigserial primary key, event_type text not null, payload jsonb not null, created_at timestamptz not null default now());
create table dl(id bigserial primary key, event_id bigint not null, consumer text not null, status text not null default 'pending', attempt int not null default 0, lease_until timestamptz, lease_owner text, fencing bigint not null default 0, next_at timestamptz not null default now());
create index dl_claim on dl(consumer, next_at, id) where status='pending';
create index dl_owner on dl(lease_owner) where status='leased';
";

const CEILING_INSERT1: &str = "insert into ev(event_type,payload) values ('x','{}');\n";

const CEILING_PRODUCE: &str = "\
with e as (insert into ev(event_type,payload) values ('iu.born','{\"iu_unit_id\":\"abc\"}') returning id)
insert into dl(event_id,consumer) select id, c from e, (values ('a'),('b')) v(c);
";

const CEILING_CLAIMACK: &str = "\
\\set owner random(1,1000000000)
begin;
with c as (select id from dl where consumer='a' and status='pending' and next_at<=now() order by next_at, id limit 100 for update skip locked)
update dl set status='leased', lease_until=now()+interval '30 s', lease_owner=:owner::text, fencing=fencing+1, attempt=attempt+1 from c where dl.id=c.id;
commit;
update dl set status='acked' where lease_owner=:owner::text and status='leased';
";

/// The script's reload before the claim+ack run (its `psql -c` arguments, unescaped).
const CEILING_RELOAD: [&str; 4] = [
    "truncate ev, dl",
    "insert into ev(event_type,payload) select 'iu.born','{\"iu_unit_id\":\"abc\"}' from generate_series(1,1000000)",
    "insert into dl(event_id,consumer) select id,'a' from ev",
    "vacuum analyze dl",
];

/// Deliveries per claim+ack transaction of the script.
const CEILING_BATCH: f64 = 100.0;

/// The script's claim+ack at `limit 50`: not the script's figure, a reference for evc's
/// batch-50 runs (the same statements claiming half as many rows per transaction).
fn ceiling_claim_ack_50() -> String {
    CEILING_CLAIMACK.replace("limit 100", "limit 50")
}

// ---------------------------------------------------------------------------------------------
// evc's side: a small static registry.
// ---------------------------------------------------------------------------------------------

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
/// The produce figure's type: two deliveries per event, like the script's produce.
const PRODUCED: &str = "bench.produced";
/// The claim and batch-append figures' type: one delivery per event.
const CLAIMED: &str = "bench.claimed";
const CLAIM_CONSUMER: &str = "bench.claim";
/// The held-batch claim figure's type and its transactional consumer.
const CLAIMED_HELD: &str = "bench.claimed_held";
const HELD_CONSUMER: &str = "bench.held";

const fn event_type(name: &'static str) -> EventDescriptor {
    EventDescriptor {
        name,
        description: "A benchmark event.",
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

const PRODUCED_SUBSCRIPTION: &[SubscriptionDescriptor] = &[SubscriptionDescriptor {
    event: PRODUCED,
    requirement: "^1",
    versions: &["1.0.0"],
}];
const CLAIMED_SUBSCRIPTION: &[SubscriptionDescriptor] = &[SubscriptionDescriptor {
    event: CLAIMED,
    requirement: "^1",
    versions: &["1.0.0"],
}];
const CLAIMED_HELD_SUBSCRIPTION: &[SubscriptionDescriptor] = &[SubscriptionDescriptor {
    event: CLAIMED_HELD,
    requirement: "^1",
    versions: &["1.0.0"],
}];

/// `bench.produced` fans out to `bench.a` and `bench.b` (leased); `bench.claimed` to
/// `bench.claim` (leased); `bench.claimed_held` to `bench.held` (transactional). Each list
/// sorted by name, as the registry's lookups expect.
static REGISTRY: Registry = Registry {
    project: "evc_bench",
    digest: DIGEST,
    events: &[
        event_type(CLAIMED),
        event_type(CLAIMED_HELD),
        event_type(PRODUCED),
    ],
    consumers: &[
        consumer("bench.a", HandlerKind::Leased, PRODUCED_SUBSCRIPTION),
        consumer("bench.b", HandlerKind::Leased, PRODUCED_SUBSCRIPTION),
        consumer(CLAIM_CONSUMER, HandlerKind::Leased, CLAIMED_SUBSCRIPTION),
        consumer(
            HELD_CONSUMER,
            HandlerKind::Transactional,
            CLAIMED_HELD_SUBSCRIPTION,
        ),
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

fn trace() -> TraceContext {
    TraceContext::new("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)
        .expect("valid trace context")
}

/// An event built as a generated producer function builds it; `n` makes the unit id unique.
fn event(event_type: &'static str, trace: &TraceContext, n: u64) -> OutgoingEvent {
    let unit = format!("00000000-0000-4000-8000-{n:012x}");
    let payload = serde_json::json!({ "iu_unit_id": unit });
    OutgoingEvent::new(event_type, "1.0.0", Some(unit), trace, &payload).expect("serializes")
}

/// The no-op handler of the claim+ack figures.
struct NoOp;

impl DynHandler for NoOp {
    fn handle<'a>(&'a self, _: HandlerContext<'a>) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async { Ok(()) })
    }
}

// ---------------------------------------------------------------------------------------------
// Databases.
// ---------------------------------------------------------------------------------------------

/// The server and the databases this run created (dropped at the end, also after a panic).
struct Server {
    url: String,
    admin: PgConnection,
    created: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// A fresh, empty database.
    async fn create(&mut self, purpose: &str) -> BenchResult<String> {
        let name = {
            let mut created = self.created.lock().expect("not poisoned");
            let name = format!(
                "evc_bench_{}_{}_{purpose}",
                std::process::id(),
                created.len()
            );
            created.push(name.clone());
            name
        };
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut self.admin)
            .await?;
        Ok(name)
    }

    /// A fresh database with `generated/migrations` applied, and a pool of `connections`.
    async fn migrated(&mut self, purpose: &str, connections: u32) -> BenchResult<PgPool> {
        let name = self.create(purpose).await?;
        let options = PgConnectOptions::from_str(&self.url)?.database(&name);
        let pool = PgPoolOptions::new()
            .max_connections(connections)
            .connect_with(options)
            .await?;
        let migrations = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/migrations");
        Migrator::new(migrations.as_path())
            .await?
            .run(&pool)
            .await?;
        Ok(pool)
    }
}

/// Drops every database in `created`.
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

/// `url` with its database replaced by `database` (for pgbench's connection string).
fn url_for(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority..].find('/') {
        Some(slash) => &base[..authority + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{base}/{database}?{query}"),
        None => format!("{base}/{database}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Figures.
// ---------------------------------------------------------------------------------------------

struct Settings {
    seconds: u64,
    claim_events: usize,
    /// The figures to measure (`EVC_BENCH_ONLY`); empty: all.
    only: Vec<String>,
}

impl Settings {
    fn runs(&self, part: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|p| p == part)
    }

    /// Whether any claim+ack run is asked for.
    fn runs_claims(&self) -> bool {
        ClaimPath::ALL.iter().any(|path| self.runs_path(*path))
    }

    /// Whether `path`'s claim+ack runs are asked for: all paths run with `claim`, one alone
    /// with its [`ClaimPath::part`].
    fn runs_path(&self, path: ClaimPath) -> bool {
        self.runs("claim") || path.part().is_some_and(|part| self.runs(part))
    }

    /// Parts a full run leaves out: run only when named.
    fn names(&self, part: &str) -> bool {
        self.only.iter().any(|p| p == part)
    }
}

#[derive(Default)]
struct Ceiling {
    commits: f64,
    produce: f64,
    claim_ack: f64,
    /// [`ceiling_claim_ack_50`]'s deliveries/s; run only when a claim+ack part runs.
    claim_ack_50: Option<f64>,
    driver: &'static str,
}

struct Figure {
    name: String,
    value: f64,
    /// The figure it compares with: the ceiling, or (the vacuum figure) the same run without
    /// the long transaction.
    ceiling: Option<f64>,
    goal: Goal,
}

enum Goal {
    None,
    /// At least this ratio of the ceiling.
    Ratio(f64),
}

impl Figure {
    fn ratio(&self) -> Option<f64> {
        self.ceiling
            .filter(|c| *c > 0.0)
            .map(|ceiling| self.value / ceiling)
    }

    fn goal(&self) -> (String, String) {
        match self.goal {
            Goal::None => ("-".into(), "-".into()),
            Goal::Ratio(goal) => {
                let met = self.ratio().is_some_and(|r| r >= goal);
                (format!(">= {goal:.2}x"), yes_no(met))
            }
        }
    }
}

fn yes_no(met: bool) -> String {
    if met { "yes" } else { "no" }.into()
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

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn main() -> BenchResult<()> {
    let settings = Settings {
        seconds: env_number("EVC_BENCH_SECONDS", 10).max(1),
        claim_events: usize::try_from(env_number("EVC_BENCH_CLAIM_EVENTS", 300_000))?,
        only: std::env::var("EVC_BENCH_ONLY")
            .unwrap_or_default()
            .split(',')
            .map(|part| part.trim().to_owned())
            .filter(|part| !part.is_empty())
            .collect(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
        let admin = match PgConnection::connect(&url).await {
            Ok(admin) => admin,
            Err(error) => {
                let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
                if ci {
                    return Err(format!("PostgreSQL at {url} is unreachable: {error}").into());
                }
                eprintln!(
                    "skipped: PostgreSQL at {url} is unreachable ({error}); set DATABASE_URL"
                );
                return Ok(());
            }
        };
        let mut admin = admin;
        let created = Arc::new(Mutex::new(Vec::new()));
        // The run in its own task, so a failure or a panic still drops the databases.
        let run = tokio::spawn({
            let created = Arc::clone(&created);
            async move {
                let mut server = Server {
                    admin: PgConnection::connect(&url).await?,
                    url,
                    created,
                };
                run(&mut server, &settings).await
            }
        })
        .await;
        drop_all(&mut admin, &created).await;
        match run {
            Ok(result) => result,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(error) => Err(error.into()),
        }
    })
}

async fn run(server: &mut Server, settings: &Settings) -> BenchResult<()> {
    println!(
        "outbox benchmark: {} s per timed run, {CLIENTS} clients/workers, {} deliveries pre-inserted per claim run",
        settings.seconds, settings.claim_events
    );
    check_script();
    let mut figures = Vec::new();
    if settings.runs("produce") || settings.runs_claims() {
        measure_against_ceiling(server, settings, &mut figures).await?;
    }
    if settings.runs("vacuum") {
        figures.push(vacuum_horizon(server, settings).await?);
    }
    if settings.names("cursor") {
        figures.extend(cursor_comparison(server, settings).await?);
    }
    if settings.names("endurance") {
        figures.push(endurance(server).await?);
    }
    if settings.runs("append") {
        let batch = batch_append(server).await?;
        println!(
            "evc batch append: {BATCH_EVENTS} events in one call, median of {BATCH_RUNS} runs {:.0} events/s ({:.0} without the payload-cap trigger; with/without {:.2}x, median of pairs); raw COPY of the same rows {:.0} events/s (append/raw {:.2}x, median of pairs)",
            batch.rate, batch.without_cap, batch.cap_ratio, batch.raw, batch.raw_ratio
        );
        figures.push(Figure {
            name: format!("raw COPY of the append's rows, events/s ({BATCH_EVENTS}, median)"),
            value: batch.raw,
            ceiling: None,
            goal: Goal::None,
        });
        figures.push(Figure {
            name: format!("evc batch append events/s ({BATCH_EVENTS}, 1 call, median)"),
            value: batch.rate,
            ceiling: Some(batch.raw),
            goal: Goal::Ratio(BATCH_GOAL),
        });
    }
    print_table(&figures);
    Ok(())
}

/// The ceiling, then evc's produce and claim+ack figures with their ratios to it.
async fn measure_against_ceiling(
    server: &mut Server,
    settings: &Settings,
    figures: &mut Vec<Figure>,
) -> BenchResult<()> {
    let ceiling = ceiling(server, settings.seconds, settings.runs_claims()).await?;
    println!(
        "ceiling ({}): single-row commits/s {:.0}, produce tx/s {:.0}, claim+ack deliveries/s {:.0}",
        ceiling.driver, ceiling.commits, ceiling.produce, ceiling.claim_ack
    );
    figures.extend([
        Figure {
            name: "ceiling: single-row commits/s".into(),
            value: ceiling.commits,
            ceiling: None,
            goal: Goal::None,
        },
        Figure {
            name: "ceiling: produce tx/s (1 event + 2 deliveries)".into(),
            value: ceiling.produce,
            ceiling: None,
            goal: Goal::None,
        },
        Figure {
            name: "ceiling: claim+ack deliveries/s (batch 100)".into(),
            value: ceiling.claim_ack,
            ceiling: None,
            goal: Goal::None,
        },
    ]);
    if let Some(rate) = ceiling.claim_ack_50 {
        println!("ceiling's statements at limit 50: claim+ack deliveries/s {rate:.0}");
        figures.push(Figure {
            name: "reference: the script's claim+ack at limit 50".into(),
            value: rate,
            ceiling: None,
            goal: Goal::None,
        });
    }

    if settings.runs("produce") {
        for (own_transaction, asleep) in [(false, false), (true, false), (false, true)] {
            let rate = produce(server, settings.seconds, own_transaction, asleep).await?;
            let how = match (own_transaction, asleep) {
                (true, _) => "own transaction: BEGIN, append, COMMIT",
                (false, false) => "one autocommit statement, as the script",
                (false, true) => {
                    "autocommit, both consumers' doorbells held: every append notifies"
                }
            };
            println!("evc produce ({how}): {rate:.0} events/s (2 deliveries each)");
            figures.push(Figure {
                name: format!("evc produce events/s ({how})"),
                value: rate,
                ceiling: Some(ceiling.produce),
                goal: if own_transaction || asleep {
                    Goal::None
                } else {
                    Goal::Ratio(PRODUCE_GOAL)
                },
            });
        }
    }
    for batch in [50, 100] {
        for path in ClaimPath::ALL {
            if !settings.runs_path(path) {
                continue;
            }
            let run = claim_ack(server, settings, batch, path, false, true).await?;
            let how = path.describe();
            println!(
                "evc claim+ack ({how}, batch {batch}): {:.0} deliveries/s, {} attempt rows, {} pending left; pre-insert {:.0} events/s",
                run.rate, run.attempts, run.pending, run.insert_rate
            );
            if run.pending == 0 {
                println!(
                    "  note: every delivery was acked before the deadline; the rate is over the time that took (raise EVC_BENCH_CLAIM_EVENTS for a longer run)"
                );
            }
            figures.push(Figure {
                name: format!("evc claim+ack deliveries/s ({how}, batch {batch})"),
                value: run.rate,
                ceiling: Some(ceiling.claim_ack),
                goal: Goal::Ratio(CLAIM_GOAL),
            });
            if batch == 50 {
                figures.push(Figure {
                    name: "  the same, ratio to the script's claim+ack at limit 50".into(),
                    value: run.rate,
                    ceiling: ceiling.claim_ack_50,
                    goal: Goal::None,
                });
            }
            if batch == 50 && path == ClaimPath::Dispatcher {
                figures.push(Figure {
                    name: format!(
                        "evc pre-insert append_batch events/s ({} events, 1 call)",
                        settings.claim_events
                    ),
                    value: run.insert_rate,
                    ceiling: None,
                    goal: Goal::None,
                });
            }
        }
    }
    Ok(())
}

fn print_table(figures: &[Figure]) {
    let width = figures
        .iter()
        .map(|f| f.name.len())
        .max()
        .unwrap_or(6)
        .max(6);
    println!();
    println!(
        "{:<width$}  {:>10}  {:>8}  {:>18}  {:>4}",
        "figure", "value", "ratio", "goal", "met"
    );
    println!("{}", "-".repeat(width + 48));
    for figure in figures {
        let ratio = figure
            .ratio()
            .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}x"));
        let (goal, met) = figure.goal();
        println!(
            "{:<width$}  {:>10}  {:>8}  {:>18}  {:>4}",
            figure.name,
            thousands(figure.value),
            ratio,
            goal,
            met
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The ceiling.
// ---------------------------------------------------------------------------------------------

/// Warns when the script's statements differ from the copies here.
fn check_script() {
    let path = std::env::var_os("EVC_CEILING_SCRIPT").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/bench/pg_ceiling.sh"),
        PathBuf::from,
    );
    let Ok(script) = std::fs::read_to_string(&path) else {
        println!(
            "note: {} not found; using the statements copied here",
            path.display()
        );
        return;
    };
    let squash = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let script = squash(&script);
    let differ: Vec<&str> = [
        ("schema", CEILING_SCHEMA),
        ("insert1.sql", CEILING_INSERT1),
        ("produce.sql", CEILING_PRODUCE),
        ("claimack.sql", CEILING_CLAIMACK),
    ]
    .into_iter()
    .filter(|(_, statements)| !script.contains(&squash(statements)))
    .map(|(name, _)| name)
    .collect();
    if differ.is_empty() {
        println!("ceiling statements match {}", path.display());
    } else {
        println!(
            "warning: {} differ from {}; the ceiling runs the copies here",
            differ.join(", "),
            path.display()
        );
    }
}

/// The script's figures; with `claims`, also its claim+ack at limit 50 (after a second reload).
async fn ceiling(server: &mut Server, seconds: u64, claims: bool) -> BenchResult<Ceiling> {
    let database = server.create("ceiling").await?;
    let url = url_for(&server.url, &database);
    let mut connection = PgConnection::connect(&url).await?;
    sqlx::raw_sql(CEILING_SCHEMA)
        .execute(&mut connection)
        .await?;
    let pgbench = which("pgbench");
    let mut ceiling = Ceiling {
        driver: if pgbench.is_some() {
            "pgbench -n -c 4 -j 2, as pg_ceiling.sh runs it"
        } else {
            "4 Rust connections (pgbench not on PATH)"
        },
        ..Ceiling::default()
    };
    let dir = std::env::temp_dir().join(format!("evc_bench_{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = async {
        ceiling.commits = ceiling_run(&pgbench, &dir, &url, Script::Insert1, seconds).await?;
        ceiling.produce = ceiling_run(&pgbench, &dir, &url, Script::Produce, seconds).await?;
        for statement in CEILING_RELOAD {
            sqlx::raw_sql(statement).execute(&mut connection).await?;
        }
        let tps = ceiling_run(&pgbench, &dir, &url, Script::ClaimAck, seconds).await?;
        ceiling.claim_ack = (tps * CEILING_BATCH).round();
        let left: i64 = sqlx::query_scalar("select count(*) from dl where status='pending'")
            .fetch_one(&mut connection)
            .await?;
        println!("ceiling claim+ack: pending left {left}");
        if claims {
            for statement in CEILING_RELOAD {
                sqlx::raw_sql(statement).execute(&mut connection).await?;
            }
            let tps = ceiling_run(&pgbench, &dir, &url, Script::ClaimAck50, seconds).await?;
            ceiling.claim_ack_50 = Some((tps * CEILING_BATCH / 2.0).round());
        }
        BenchResult::Ok(())
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    connection.close().await?;
    result.map(|()| ceiling)
}

#[derive(Clone, Copy)]
enum Script {
    Insert1,
    Produce,
    ClaimAck,
    /// [`ceiling_claim_ack_50`].
    ClaimAck50,
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|path| path.is_file())
    })
}

/// Transactions per second of one script: pgbench's `tps`, or the Rust driver's count.
async fn ceiling_run(
    pgbench: &Option<PathBuf>,
    dir: &Path,
    url: &str,
    script: Script,
    seconds: u64,
) -> BenchResult<f64> {
    let (file, text) = match script {
        Script::Insert1 => ("insert1.sql", CEILING_INSERT1.to_owned()),
        Script::Produce => ("produce.sql", CEILING_PRODUCE.to_owned()),
        Script::ClaimAck => ("claimack.sql", CEILING_CLAIMACK.to_owned()),
        Script::ClaimAck50 => ("claimack50.sql", ceiling_claim_ack_50()),
    };
    let Some(pgbench) = pgbench else {
        return rust_ceiling(url, script, seconds).await;
    };
    let path = dir.join(file);
    std::fs::write(&path, text)?;
    let mut command = std::process::Command::new(pgbench);
    command
        .args(["-n", "-c", "4", "-j", "2", "-T", &seconds.to_string(), "-f"])
        .arg(&path)
        .arg(url);
    let output = tokio::task::spawn_blocking(move || command.output()).await??;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    text.lines()
        .find_map(|line| line.strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|tps| tps.parse().ok())
        .ok_or_else(|| format!("pgbench {file} printed no tps:\n{text}").into())
}

/// The script's transactions from 4 Rust connections (when pgbench is missing).
async fn rust_ceiling(url: &str, script: Script, seconds: u64) -> BenchResult<f64> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let url = url.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut connection = PgConnection::connect(&url).await?;
            let mut owner = (std::process::id() as u64) << 20 | (client as u64) << 40;
            let mut done = 0u64;
            while Instant::now() < deadline {
                match script {
                    Script::Insert1 => {
                        sqlx::raw_sql(CEILING_INSERT1)
                            .execute(&mut connection)
                            .await?;
                    }
                    Script::Produce => {
                        sqlx::raw_sql(CEILING_PRODUCE)
                            .execute(&mut connection)
                            .await?;
                    }
                    Script::ClaimAck | Script::ClaimAck50 => {
                        owner += 1;
                        let statements = match script {
                            Script::ClaimAck50 => ceiling_claim_ack_50(),
                            _ => CEILING_CLAIMACK.to_owned(),
                        };
                        let claim = statements
                            .lines()
                            .filter(|line| !line.starts_with('\\'))
                            .collect::<Vec<_>>()
                            .join("\n")
                            .replace(":owner", &owner.to_string());
                        sqlx::raw_sql(AssertSqlSafe(claim))
                            .execute(&mut connection)
                            .await?;
                    }
                }
                done += 1;
            }
            BenchResult::Ok(done)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

// ---------------------------------------------------------------------------------------------
// evc.
// ---------------------------------------------------------------------------------------------

fn store(pool: PgPool) -> BenchResult<PgStore> {
    Ok(PgStore::new(pool, REGISTRY)?)
}

/// Runs `work(task)` in `CLIENTS` tasks until `seconds` pass; returns the total per second.
async fn timed<F, Fut>(seconds: u64, work: F) -> BenchResult<f64>
where
    F: Fn(usize, Instant) -> Fut,
    Fut: Future<Output = BenchResult<u64>> + Send + 'static,
{
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|task| tokio::spawn(work(task, deadline)))
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// Single-event produce, 4 tasks for `seconds`: each event its own transaction, either the
/// caller's own (`BEGIN`, append, `COMMIT`: three round trips) or, as the script's `produce.sql`
/// runs, one statement in autocommit mode on the task's connection.
///
/// With `asleep`, the doorbells of both consumers are held for the run, as workers sleeping
/// for them hold them: every append then notifies (the dispatcher-idle case).
async fn produce(
    server: &mut Server,
    seconds: u64,
    own_transaction: bool,
    asleep: bool,
) -> BenchResult<f64> {
    let purpose = match (own_transaction, asleep) {
        (true, _) => "produce_tx",
        (false, false) => "produce",
        (false, true) => "produce_rung",
    };
    let pool = server.migrated(purpose, 10).await?;
    let store = store(pool.clone())?;
    let mut doorbells = Vec::new();
    if asleep {
        for consumer in ["bench.a", "bench.b"] {
            let doorbell = store
                .hold_doorbell(consumer, Duration::from_secs(5))
                .await?
                .ok_or("a doorbell was taken")?;
            doorbells.push(doorbell);
        }
    }
    let rate = timed(seconds, |task, deadline| {
        let store = store.clone();
        async move {
            let trace = trace();
            let mut n = (task as u64) << 36;
            let mut done = 0u64;
            let mut connection = store.pool().acquire().await?;
            while Instant::now() < deadline {
                n += 1;
                let receipt = if own_transaction {
                    let mut tx = connection.begin().await?;
                    let receipt = store
                        .publisher(&mut tx)
                        .publish(event(PRODUCED, &trace, n))
                        .await?;
                    tx.commit().await?;
                    receipt
                } else {
                    store
                        .publisher(&mut connection)
                        .publish(event(PRODUCED, &trace, n))
                        .await?
                };
                debug_assert_eq!(receipt.deliveries, 2);
                done += 1;
            }
            Ok(done)
        }
    })
    .await?;
    // Every delivery is to a consumer of the registry: their rows are all there is.
    let mut deliveries = 0;
    for consumer in store.registry().consumers {
        deliveries += store.count_deliveries(consumer.name, &[]).await?;
    }
    let events = store.count_events(&[]).await?;
    if deliveries != 2 * events {
        return Err(format!("produce: {events} events but {deliveries} deliveries").into());
    }
    for doorbell in doorbells {
        doorbell.release().await?;
    }
    pool.close().await;
    Ok(rate)
}

/// How the claim+ack figures drain their deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClaimPath {
    /// The `Dispatcher`, leased handlers: claim (lease), handlers, one fenced batched `Store::ack`.
    Dispatcher,
    /// `Store::claim` + `Store::ack` called directly on one connection per task, one fenced
    /// statement per claimed batch.
    StoreCalls,
    /// The `Dispatcher`, transactional handlers in held batches: one transaction claims with
    /// row locks, runs the handlers and acks.
    HeldBatches,
}

impl ClaimPath {
    /// The paths, in the order the benchmark runs them.
    const ALL: [Self; 3] = [Self::Dispatcher, Self::StoreCalls, Self::HeldBatches];

    /// The `EVC_BENCH_ONLY` part that runs only this path's claim+ack (`claim` runs them all).
    fn part(self) -> Option<&'static str> {
        match self {
            Self::Dispatcher => Some("leased"),
            Self::HeldBatches => Some("held"),
            Self::StoreCalls => None,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::Dispatcher => "Dispatcher, leased",
            Self::StoreCalls => "Store::claim + Store::ack",
            Self::HeldBatches => "Dispatcher, held batches",
        }
    }

    fn event_and_consumer(self) -> (&'static str, &'static str) {
        match self {
            Self::HeldBatches => (CLAIMED_HELD, HELD_CONSUMER),
            Self::Dispatcher | Self::StoreCalls => (CLAIMED, CLAIM_CONSUMER),
        }
    }
}

struct ClaimRun {
    rate: f64,
    insert_rate: f64,
    attempts: i64,
    pending: i64,
}

/// Appends `events` events of `event_type` (one delivery each) in one `append_batch` call
/// and one transaction; returns events per second of the call and its commit.
async fn append_claimed(
    store: &PgStore,
    event_type: &'static str,
    events: usize,
) -> BenchResult<f64> {
    let trace = trace();
    let built = Instant::now();
    let batch: Vec<NewEvent> = (0..events as u64)
        .map(|n| NewEvent::new(event(event_type, &trace, n), AppendOptions::default()))
        .collect();
    let built = built.elapsed();
    // Timed: the call (checks, statements) and the commit; building the events is the caller's.
    let started = Instant::now();
    let mut tx = store.pool().begin().await?;
    let receipts = store.append_batch(&mut tx, batch).await?;
    let called = started.elapsed();
    tx.commit().await?;
    let elapsed = started.elapsed();
    println!(
        "  append_batch of {events}: events built in {:.3} s (not timed), call {:.3} s, commit {:.3} s",
        built.as_secs_f64(),
        called.as_secs_f64(),
        (elapsed - called).as_secs_f64()
    );
    if receipts.len() != events {
        return Err(format!("append_batch returned {} receipts", receipts.len()).into());
    }
    Ok(events as f64 / elapsed.as_secs_f64())
}

/// The Dispatcher's claim+ack (leased, batch 100) twice: without, then with a transaction
/// that holds back vacuum (a repeatable-read snapshot taken before the run, open until its
/// end). The figure is the second rate, its ratio the one to the first.
async fn vacuum_horizon(server: &mut Server, settings: &Settings) -> BenchResult<Figure> {
    let free = claim_ack(server, settings, 100, ClaimPath::Dispatcher, false, true).await?;
    let held = claim_ack(server, settings, 100, ClaimPath::Dispatcher, true, true).await?;
    println!(
        "evc claim+ack (Dispatcher, leased, batch 100): {:.0} deliveries/s without, {:.0} with a transaction holding back vacuum ({:.2}x)",
        free.rate,
        held.rate,
        held.rate / free.rate
    );
    Ok(Figure {
        name: "evc claim+ack with vacuum held back (Dispatcher, leased, batch 100; ratio: to the same run without)".into(),
        value: held.rate,
        ceiling: Some(free.rate),
        goal: Goal::None,
    })
}

/// With `on`, a connection of its own to `pool`'s database (not one of the pool's, which the
/// run uses) in a repeatable-read transaction: it keeps the snapshot of its first statement
/// until it ends, whatever the statement reads, so the xmin horizon stays where it is and
/// vacuum removes nothing written after it.
async fn hold(pool: &PgPool, on: bool) -> BenchResult<Option<PgConnection>> {
    if !on {
        return Ok(None);
    }
    let mut holder = PgConnection::connect_with(&pool.connect_options()).await?;
    sqlx::raw_sql("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1")
        .execute(&mut holder)
        .await?;
    Ok(Some(holder))
}

/// Ends the transaction [`hold`] opened, if any.
async fn release(horizon: Option<PgConnection>) -> BenchResult<()> {
    if let Some(mut holder) = horizon {
        sqlx::raw_sql("ROLLBACK").execute(&mut holder).await?;
        holder.close().await?;
    }
    Ok(())
}

/// The backlog the endurance run's producer keeps `bench.claim` above, and its append batch.
const ENDURANCE_LOW: u64 = 200_000;
const ENDURANCE_BATCH: usize = 50_000;

/// One steady run ([`endurance`]).
struct SteadyRun {
    /// Acked deliveries per second over the whole run.
    rate: f64,
    /// Appended events per second over the whole run (the backlog's top-ups).
    appended: f64,
    /// Samples (one per 100 ms) that found no backlog: the producer, not the claim, set the pace.
    dry: u64,
    /// Acked per second in each minute.
    minutes: Vec<f64>,
    /// The churned tables' space at the end.
    space: Vec<evc_runtime::TableSpace>,
    /// Deliveries acked in all, the backlog filled before the start included.
    acked: u64,
}

/// The leased Dispatcher's claim+ack in a steady state for `EVC_BENCH_ENDURANCE_SECONDS`
/// (default 600; `EVC_BENCH_ONLY=endurance`, run only when named): it drains `bench.claim`
/// (batch 100, claim cursor on) while a producer tops the backlog up by batches of
/// [`ENDURANCE_BATCH`] whenever it falls under [`ENDURANCE_LOW`]. Once without, then once with
/// a repeatable-read transaction holding back vacuum from the first to the last second. The
/// figure is the held run's rate, its ratio the one to the free run. Printed: the server's
/// `autovacuum` setting (with a warning when it is off, as neither run is vacuumed then), each
/// minute's rate and the tables' dead rows, sizes and autovacuum passes at the end.
async fn endurance(server: &mut Server) -> BenchResult<Figure> {
    let seconds = env_number("EVC_BENCH_ENDURANCE_SECONDS", 600).max(10);
    let (autovacuum,): (String,) = sqlx::query_as("SHOW autovacuum")
        .fetch_one(&mut server.admin)
        .await?;
    println!("  the server's autovacuum: {autovacuum}");
    if autovacuum != "on" {
        // Then nothing removes dead rows in either run: the free run is not what a deployment
        // with autovacuum sees.
        println!(
            "  warning: autovacuum is off on this server, so the run without a held horizon \
             is not vacuumed either; point DATABASE_URL at a server with it on"
        );
    }
    let free = steady(server, seconds, false).await?;
    let held = steady(server, seconds, true).await?;
    for (label, run) in [("without", &free), ("held", &held)] {
        println!(
            "  {label}: acked {:.0}/s, appended {:.0}/s, {} dry samples; per minute: {}",
            run.rate,
            run.appended,
            run.dry,
            list(&run.minutes)
        );
        for table in &run.space {
            // Per acked delivery: what bounds the table's growth while vacuum cannot run.
            println!(
                "    {}: {} live, {} dead rows ({:.2} per acked delivery); table {} MiB, indexes {} MiB; {} autovacuum passes",
                table.table,
                table.live_rows,
                table.dead_rows,
                table.dead_rows as f64 / run.acked.max(1) as f64,
                table.table_bytes / (1 << 20),
                table.index_bytes / (1 << 20),
                table.autovacuums
            );
        }
    }
    println!(
        "evc claim+ack steady for {seconds} s (Dispatcher, leased, batch 100): {:.0} deliveries/s without, {:.0} with vacuum held back ({:.2}x)",
        free.rate,
        held.rate,
        held.rate / free.rate
    );
    Ok(Figure {
        name: format!(
            "evc claim+ack steady {seconds} s, vacuum held back (autovacuum {autovacuum}; ratio: to the same run without)"
        ),
        value: held.rate,
        ceiling: Some(free.rate),
        goal: Goal::Ratio(ENDURANCE_GOAL),
    })
}

async fn steady(server: &mut Server, seconds: u64, hold_horizon: bool) -> BenchResult<SteadyRun> {
    let purpose = if hold_horizon {
        "steady_held"
    } else {
        "steady"
    };
    let pool = server.migrated(purpose, 10).await?;
    let store = store(pool.clone())?;
    append_claimed(&store, CLAIMED, ENDURANCE_LOW as usize).await?;
    store.analyze().await?;
    let horizon = hold(&pool, hold_horizon).await?;
    let config = DispatcherConfig::default()
        .owner(format!("bench-{}", std::process::id()))
        .workers(CLIENTS)
        .batch(100)
        .lease(Duration::from_secs(30))
        .poll_interval(Duration::from_millis(20))
        .recovery_interval(Duration::from_secs(60))
        .heartbeat_interval(Duration::from_secs(60))
        .listen(false)
        .claim_cursor(true);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let handle = Dispatcher::new(store.clone(), config)
        .consumer(CLAIM_CONSUMER, NoOp)?
        .start();
    let trace = trace();
    let mut appended = ENDURANCE_LOW;
    let mut produced = 0u64;
    let mut dry = 0u64;
    let mut minutes = Vec::new();
    let mut minute = (started, 0u64);
    let mut next = 0u64;
    while Instant::now() < deadline {
        let acked = handle.stats().acked;
        if appended.saturating_sub(acked) == 0 {
            dry += 1;
        }
        if minute.0.elapsed() >= Duration::from_secs(60) {
            minutes.push((acked - minute.1) as f64 / minute.0.elapsed().as_secs_f64());
            minute = (Instant::now(), acked);
        }
        if appended.saturating_sub(acked) < ENDURANCE_LOW {
            let batch: Vec<NewEvent> = (next..next + ENDURANCE_BATCH as u64)
                .map(|n| NewEvent::new(event(CLAIMED, &trace, n), AppendOptions::default()))
                .collect();
            next += ENDURANCE_BATCH as u64;
            let mut tx = store.pool().begin().await?;
            store.append_batch(&mut tx, batch).await?;
            tx.commit().await?;
            appended += ENDURANCE_BATCH as u64;
            produced += ENDURANCE_BATCH as u64;
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let acked = handle.stats().acked;
    let elapsed = started.elapsed();
    let stats = handle.shutdown().await;
    if stats.stale > 0 {
        return Err(format!("{} stale acks", stats.stale).into());
    }
    // Read before the horizon moves on: what the run left behind.
    let space = store.table_space().await?;
    release(horizon).await?;
    let attempts = store.count_attempts(CLAIM_CONSUMER, "acked").await?;
    if attempts != stats.acked {
        return Err(format!("{} acked but {attempts} attempt rows", stats.acked).into());
    }
    pool.close().await;
    Ok(SteadyRun {
        rate: acked as f64 / elapsed.as_secs_f64(),
        appended: produced as f64 / elapsed.as_secs_f64(),
        dry,
        minutes,
        space,
        acked: stats.acked,
    })
}

/// The Dispatcher's claim+ack at batch 50, held and leased, each with the claim cursor off
/// and then on (`EVC_BENCH_ONLY=cursor`). Each figure is the rate with it on, its ratio the
/// one to the same path with it off, in the same invocation.
async fn cursor_comparison(server: &mut Server, settings: &Settings) -> BenchResult<Vec<Figure>> {
    let mut figures = Vec::new();
    for path in [ClaimPath::HeldBatches, ClaimPath::Dispatcher] {
        let off = claim_ack(server, settings, 50, path, false, false).await?;
        let on = claim_ack(server, settings, 50, path, false, true).await?;
        let how = path.describe();
        println!(
            "evc claim+ack ({how}, batch 50): {:.0} deliveries/s with the claim cursor off, {:.0} with it on ({:.2}x)",
            off.rate,
            on.rate,
            on.rate / off.rate
        );
        figures.push(Figure {
            name: format!(
                "evc claim+ack ({how}, batch 50), claim cursor on (ratio: to the same run with it off)"
            ),
            value: on.rate,
            ceiling: Some(off.rate),
            goal: Goal::None,
        });
    }
    Ok(figures)
}

/// Claim+ack of pre-inserted deliveries with a no-op handler, 4 workers, along `path`; with
/// `hold_horizon`, a repeatable-read transaction stays open on another connection for the
/// whole run, so vacuum (and index entry clean-up) cannot remove what the run leaves dead;
/// `cursor` turns the Dispatcher's claim cursor on or off.
async fn claim_ack(
    server: &mut Server,
    settings: &Settings,
    batch: u32,
    path: ClaimPath,
    hold_horizon: bool,
    cursor: bool,
) -> BenchResult<ClaimRun> {
    let purpose = match (path, hold_horizon) {
        (_, true) => "horizon",
        (ClaimPath::Dispatcher, false) => "dispatch",
        (ClaimPath::StoreCalls, false) => "ackbatch",
        (ClaimPath::HeldBatches, false) => "held",
    };
    let (event_type, consumer) = path.event_and_consumer();
    let pool = server
        .migrated(&format!("claim{batch}_{purpose}"), 10)
        .await?;
    let store = store(pool.clone())?;
    let insert_rate = append_claimed(&store, event_type, settings.claim_events).await?;
    store.analyze().await?;
    let horizon = hold(&pool, hold_horizon).await?;

    let rate = if path == ClaimPath::StoreCalls {
        timed(settings.seconds, |task, deadline| {
            let store = store.clone();
            async move {
                let owner = format!("bench/{CLAIM_CONSUMER}/{task}");
                let lease = Duration::from_secs(30);
                let mut done = 0u64;
                // One connection per task, as a dispatcher's busy worker keeps one.
                let mut connection = store.pool().acquire().await?;
                while Instant::now() < deadline {
                    let request =
                        evc_runtime::ClaimRequest::leased(CLAIM_CONSUMER, &owner, batch, lease);
                    let mut claimed =
                        evc_runtime::Store::claim(&store, &mut connection, &request).await?;
                    if claimed.is_empty() {
                        break;
                    }
                    for claimed in &mut claimed {
                        claimed.lease.mark_started();
                        let context = HandlerContext::new(claimed, &store, None);
                        NoOp.handle(context).await?;
                    }
                    let leases: Vec<_> = claimed.iter().map(|c| &c.lease).collect();
                    let outcome = evc_runtime::Store::ack(&store, &mut connection, &leases).await?;
                    if !outcome.stale.is_empty() {
                        return Err(format!("{} stale acks", outcome.stale.len()).into());
                    }
                    done += outcome.acked as u64;
                }
                Ok(done)
            }
        })
        .await?
    } else {
        let config = DispatcherConfig::default()
            .owner(format!("bench-{}", std::process::id()))
            .workers(CLIENTS)
            .batch(batch)
            .lease(Duration::from_secs(30))
            .poll_interval(Duration::from_millis(20))
            .recovery_interval(Duration::from_secs(60))
            .heartbeat_interval(Duration::from_secs(60))
            .listen(false)
            .held_batches(path == ClaimPath::HeldBatches)
            .claim_cursor(cursor);
        let started = Instant::now();
        let handle = Dispatcher::new(store.clone(), config)
            .consumer(consumer, NoOp)?
            .start();
        // Until the deadline, or until every delivery is acked: a fast machine drains them
        // all before the deadline, and the rate is then over the time it took.
        let deadline = started + Duration::from_secs(settings.seconds);
        let total = u64::try_from(settings.claim_events)?;
        let mut acked = handle.stats().acked;
        while acked < total && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
            acked = handle.stats().acked;
        }
        let elapsed = started.elapsed();
        let stats = handle.shutdown().await;
        if stats.stale > 0 {
            return Err(format!("{} stale acks", stats.stale).into());
        }
        acked as f64 / elapsed.as_secs_f64()
    };

    release(horizon).await?;
    // Every claimed event has one delivery, to `consumer`, so its rows are all there is.
    let attempts = i64::try_from(store.count_attempts(consumer, "acked").await?)?;
    // Acked deliveries: removed by their ack (the attempt row is the record).
    let present = i64::try_from(store.count_deliveries(consumer, &[]).await?)?;
    let acked = i64::try_from(settings.claim_events)? - present;
    if attempts != acked {
        return Err(format!("{acked} acked deliveries but {attempts} attempt rows").into());
    }
    let pending = i64::try_from(
        store
            .count_deliveries(consumer, &[DeliveryStatus::Pending])
            .await?,
    )?;
    pool.close().await;
    Ok(ClaimRun {
        rate,
        insert_rate,
        attempts,
        pending,
    })
}

/// One `append_batch` call of 100,000 events (one delivery each) in one transaction.
/// The median of [`BATCH_RUNS`] runs, each in a fresh database after a checkpoint (a bulk load
/// on this machine swings by a third from run to run; the median of several is the figure).
///
/// Each run also measures its baseline: the rows that run's append wrote, read back as `COPY`
/// text and written with two raw `COPY` commands into another fresh database (same schema,
/// indexes and triggers) in one transaction. What the append adds to that (reserving seqs,
/// checking and encoding the events, the notification) is the gap between the two.
async fn batch_append(server: &mut Server) -> BenchResult<BatchAppend> {
    let mut runs = BatchRuns::default();
    for run in 0..BATCH_RUNS {
        // With the payload-cap trigger (the figure), the raw COPY of its rows,
        // and without the trigger: what the database-side cap costs a batch append.
        let pool = server.migrated(&format!("batch{run}"), 4).await?;
        let appended = store(pool.clone())?;
        let capped = timed_append(&appended, true).await?;
        let rows = appended.copy_rows_out().await?;
        pool.close().await;
        let pool = server.migrated(&format!("batch{run}raw"), 4).await?;
        let raw = raw_copy(&pool, &rows).await?;
        pool.close().await;
        let pool = server.migrated(&format!("batch{run}nocap"), 4).await?;
        let uncapped = timed_append(&store(pool.clone())?, false).await?;
        pool.close().await;
        runs.push(capped, raw, uncapped);
    }
    println!(
        "  batch append runs (events/s), with the payload-cap trigger: {}; raw COPY: {}; without the trigger: {}",
        list(&runs.capped),
        list(&runs.raw),
        list(&runs.uncapped)
    );
    Ok(runs.medians())
}

/// One `append_batch` of [`BATCH_EVENTS`] in the fresh database of `store`, after a
/// checkpoint (so no run pays for the writes another left dirty), with or without the
/// payload-cap trigger.
async fn timed_append(store: &PgStore, with_cap: bool) -> BenchResult<f64> {
    if !with_cap {
        store.set_payload_cap(false).await?;
    }
    sqlx::raw_sql("CHECKPOINT").execute(store.pool()).await?;
    append_claimed(store, CLAIMED, BATCH_EVENTS).await
}

/// Writes `rows` ([`PgStore::copy_rows_out`] of an append's database) with the append's two
/// `COPY` commands alone, in one transaction, into the fresh database of `pool` after a
/// checkpoint; events per second of the copies and the commit.
async fn raw_copy(pool: &PgPool, rows: &CopyRows) -> BenchResult<f64> {
    sqlx::raw_sql("CHECKPOINT").execute(pool).await?;
    let started = Instant::now();
    let mut tx = pool.begin().await?;
    PgStore::copy_rows_in(&mut tx, rows).await?;
    tx.commit().await?;
    Ok(BATCH_EVENTS as f64 / started.elapsed().as_secs_f64())
}

/// Rates with thousands separators, comma-separated.
fn list(rates: &[f64]) -> String {
    rates
        .iter()
        .map(|rate| thousands(*rate))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The middle of `values` (the upper one of an even count).
fn median(values: &[f64]) -> f64 {
    let mut values = values.to_vec();
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Every batch append run's rates.
#[derive(Default)]
struct BatchRuns {
    capped: Vec<f64>,
    raw: Vec<f64>,
    uncapped: Vec<f64>,
}

impl BatchRuns {
    fn push(&mut self, capped: f64, raw: f64, uncapped: f64) {
        self.capped.push(capped);
        self.raw.push(raw);
        self.uncapped.push(uncapped);
    }

    fn medians(&self) -> BatchAppend {
        let pairs = |other: &[f64]| {
            let ratios: Vec<f64> = self.capped.iter().zip(other).map(|(a, b)| a / b).collect();
            median(&ratios)
        };
        BatchAppend {
            rate: median(&self.capped),
            without_cap: median(&self.uncapped),
            cap_ratio: pairs(&self.uncapped),
            raw: median(&self.raw),
            raw_ratio: pairs(&self.raw),
        }
    }
}

/// Batch append medians: with the payload-cap trigger (the figure), without it, the raw
/// `COPY` of the same rows, and the medians of the pairwise ratios to both.
struct BatchAppend {
    rate: f64,
    without_cap: f64,
    cap_ratio: f64,
    raw: f64,
    raw_ratio: f64,
}
