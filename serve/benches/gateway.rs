//! The realtime gateway under load: 1,000 concurrent Server-Sent Events clients on loopback,
//! subscribed to one topic, while events are appended at a fixed rate.
//!
//! Prints, per store: publish-to-client latency p50, p99 and max (from just before the append's
//! commit to the moment a client has read the event's message, over every client and event),
//! messages lost and messages a client received twice (both must be 0), the ratio of p50 and p99 to a baseline of one client measured in
//! the same run (the same server, store and rate: what the fan-out costs), and the server's
//! memory per client: the growth of the server
//! process's resident set while the clients connect and receive a first event, divided by the
//! clients. The server runs in a process of its own (this program started again as
//! `EVC_GATEWAY_BENCH_SERVE=STORE`, with two threads, appending the events itself); the clients
//! run here, so their memory is not counted. Both processes read the same wall clock.
//!
//! ```sh
//! cargo bench -p evc-serve --bench gateway
//! EVC_BENCH_CLIENTS=100 EVC_BENCH_STORES=sqlite cargo bench -p evc-serve --bench gateway
//! ```
//!
//! Environment: `DATABASE_URL` (default `postgres://root@localhost/test`; PostgreSQL is skipped
//! with a message when unreachable), `EVC_BENCH_CLIENTS` (default 1,000), `EVC_BENCH_EVENTS`
//! (default 100, appended at 20 per second), `EVC_BENCH_STORES` (`sqlite`, `postgres`; default
//! both).

#![allow(missing_docs)]

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use evc::uuid::Uuid;
use evc::{AppendOptions, PgStore, SqliteStore, Store, TraceContext};
use evc_generated::payloads::{IuBornV1, IuBornV1GovernanceState};
use evc_generated::producers::emit_iu_born_v1;
use evc_serve::{Catalog, GatewayConfig, Outbox, PgStores, Tokens, Topic};
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type BenchError = Box<dyn std::error::Error + Send + Sync>;
type BenchResult<T> = Result<T, BenchError>;

const TOKEN: &str = "bench-reader-token-0123456789abcdef";
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const RATE_PER_S: u64 = 20;
/// The variable that makes this program the server: `sqlite:PATH` or a PostgreSQL URL.
const SERVE: &str = "EVC_GATEWAY_BENCH_SERVE";

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// Nanoseconds since the epoch: both processes read the same clock.
fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos())
}

fn main() -> BenchResult<()> {
    if let Ok(store) = std::env::var(SERVE) {
        return serve(&store);
    }
    let clients = setting("EVC_BENCH_CLIENTS", 1_000);
    let events = setting("EVC_BENCH_EVENTS", 100);
    let stores = std::env::var("EVC_BENCH_STORES").unwrap_or_else(|_| "sqlite,postgres".into());
    println!(
        "gateway: {clients} SSE clients on loopback, {events} events at {RATE_PER_S}/s, one topic"
    );
    println!(
        "| store | clients | events | p50 ms | p99 ms | max ms | lost | twice | p50, p99 / 1 client | \
         server RSS/client |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let driver = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    for store in stores.split(',').map(str::trim) {
        match store {
            "sqlite" => {
                let dir = tempfile::tempdir()?;
                let target = format!("sqlite:{}", dir.path().join("outbox.db").display());
                let baseline = measure(&driver, &target, 1, events)?;
                let figures = measure(&driver, &target, clients, events)?;
                report(store, &baseline, &baseline);
                report(store, &figures, &baseline);
            }
            "postgres" => {
                let url = std::env::var("DATABASE_URL")
                    .unwrap_or_else(|_| "postgres://root@localhost/test".into());
                let mut admin = match driver.block_on(PgConnection::connect(&url)) {
                    Ok(admin) => admin,
                    Err(error) => {
                        println!("| postgres | skipped: {url} is unreachable ({error}) |");
                        continue;
                    }
                };
                let database = format!("evc_gateway_bench_{}", Uuid::now_v7().simple());
                driver.block_on(
                    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {database}")))
                        .execute(&mut admin),
                )?;
                let options = PgConnectOptions::from_str(&url)?.database(&database);
                let target = options.to_url_lossy().to_string();
                let figures = measure(&driver, &target, 1, events).and_then(|baseline| {
                    Ok((baseline, measure(&driver, &target, clients, events)?))
                });
                driver.block_on(
                    sqlx::raw_sql(AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
                    )))
                    .execute(&mut admin),
                )?;
                let (baseline, figures) = figures?;
                report(store, &baseline, &baseline);
                report(store, &figures, &baseline);
            }
            other => return Err(format!("unknown store {other}").into()),
        }
    }
    Ok(())
}

struct Figures {
    clients: usize,
    events: usize,
    latencies_ms: Vec<f64>,
    lost: usize,
    duplicates: usize,
    rss_per_client: f64,
}

impl Figures {
    /// The `q` quantile of the latencies, in ms.
    fn quantile(&self, q: f64) -> f64 {
        let sorted = &self.latencies_ms;
        sorted
            .get(((sorted.len().max(1) - 1) as f64 * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    }
}

fn report(store: &str, figures: &Figures, baseline: &Figures) {
    let memory = if figures.clients > 1 {
        format!("{:.1} KiB", figures.rss_per_client / 1024.0)
    } else {
        "–".to_owned()
    };
    println!(
        "| {store} | {} | {} | {:.1} | {:.1} | {:.1} | {} | {} | {:.2}x, {:.2}x | {memory} |",
        figures.clients,
        figures.events,
        figures.quantile(0.5),
        figures.quantile(0.99),
        figures.latencies_ms.last().copied().unwrap_or(f64::NAN),
        figures.lost,
        figures.duplicates,
        figures.quantile(0.5) / baseline.quantile(0.5),
        figures.quantile(0.99) / baseline.quantile(0.99),
    );
}

// ---------------------------------------------------------------------------------------------
// The driver: starts the server process, connects the clients, asks for events.
// ---------------------------------------------------------------------------------------------

/// The server process and its command line.
struct ServerProcess {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl ServerProcess {
    fn start(target: &str) -> BenchResult<(Self, String)> {
        let mut child = Command::new(std::env::current_exe()?)
            .env(SERVE, target)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let input = child.stdin.take().ok_or("no stdin")?;
        let output = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut server = Self {
            child,
            input,
            output,
        };
        let address = server
            .line()?
            .strip_prefix("address ")
            .ok_or("the server printed no address")?
            .to_owned();
        Ok((server, address))
    }

    fn line(&mut self) -> BenchResult<String> {
        let mut line = String::new();
        if self.output.read_line(&mut line)? == 0 {
            return Err("the server process ended".into());
        }
        Ok(line.trim_end().to_owned())
    }

    /// Asks for `count` events at the bench's rate; when each was committed, by event id.
    fn publish(&mut self, count: usize) -> BenchResult<HashMap<String, u128>> {
        writeln!(self.input, "publish {count}")?;
        let mut published = HashMap::new();
        loop {
            let line = self.line()?;
            if line == "done" {
                return Ok(published);
            }
            let mut words = line.split_whitespace().skip(1);
            let (Some(id), Some(at)) = (words.next(), words.next()) else {
                return Err(format!("unexpected line {line:?}").into());
            };
            published.insert(id.to_owned(), at.parse()?);
        }
    }

    /// The server process's resident set, in bytes.
    fn resident(&self) -> BenchResult<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let kib: f64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .ok_or("no VmRSS")?;
        Ok(kib * 1024.0)
    }

    fn stop(mut self) -> BenchResult<()> {
        writeln!(self.input, "quit")?;
        self.child.wait()?;
        Ok(())
    }
}

/// What one client saw: when it read each event's message, by event id.
type Seen = Vec<(String, u128)>;

fn measure(
    driver: &tokio::runtime::Runtime,
    target: &str,
    clients: usize,
    events: usize,
) -> BenchResult<Figures> {
    let (mut server, address) = ServerProcess::start(target)?;
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::new(Mutex::new(Vec::new()));
    let received = Arc::new(AtomicUsize::new(0));
    let opened = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    let mut open = |count: usize| {
        for _ in 0..count {
            handles.push(driver.spawn(client(
                address.clone(),
                Arc::clone(&opened),
                Arc::clone(&received),
                Arc::clone(&seen),
            )));
        }
    };

    // One client and one event first: the gateway's reader runs before the baseline.
    open(1);
    wait_until(|| opened.load(Ordering::Relaxed) >= 1)?;
    // The two warm-up events are not in `published`: only the timed ones are counted.
    server.publish(1)?;
    wait_until(|| received.load(Ordering::Relaxed) >= 1)?;
    let before = server.resident()?;
    open(clients - 1);
    wait_until(|| opened.load(Ordering::Relaxed) >= clients)?;
    server.publish(1)?;
    wait_until(|| received.load(Ordering::Relaxed) > clients)?;
    let after = server.resident()?;

    let published = server.publish(events)?;
    let expected = 1 + clients + clients * events;
    // A bound on a hang: whatever has not arrived by then counts as lost.
    let deadline = Instant::now() + Duration::from_secs(120);
    while received.load(Ordering::Relaxed) < expected && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    server.stop()?;
    for handle in handles {
        driver.block_on(handle)??;
    }
    // Each client's first copy of each event counts; a second copy is a duplicate.
    let mut latencies_ms = Vec::new();
    let mut duplicates = 0;
    for client in seen.lock().map_err(|_| "poisoned")?.iter() {
        let mut got = std::collections::HashSet::new();
        for (id, at) in client {
            let Some(sent) = published.get(id) else {
                continue;
            };
            if !got.insert(id) {
                duplicates += 1;
            } else if let Some(latency) = at.checked_sub(*sent) {
                latencies_ms.push(latency as f64 / 1e6);
            }
        }
    }
    latencies_ms.sort_by(f64::total_cmp);
    Ok(Figures {
        clients,
        events,
        lost: (clients * events).saturating_sub(latencies_ms.len()),
        duplicates,
        latencies_ms,
        rss_per_client: (after - before) / (clients - 1).max(1) as f64,
    })
}

/// One SSE client: subscribes, counts itself open once the answer's head arrived, then records
/// when it read each event's message until the server ends the stream.
async fn client(
    address: String,
    opened: Arc<AtomicUsize>,
    received: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Seen>>>,
) -> BenchResult<()> {
    const KEY: &[u8] = b"\"event_id\":\"";
    let mut stream = tokio::net::TcpStream::connect(&address).await?;
    stream
        .write_all(
            format!(
                "GET /api/v1/topics/units/stream HTTP/1.1\r\nHost: {address}\r\n\
                 Authorization: Bearer {TOKEN}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await?;
    let mut buffer = Vec::with_capacity(4096);
    let mut chunk = [0_u8; 4096];
    let mut head_read = false;
    let mut mine: Seen = Vec::new();
    loop {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            break;
        }
        let now = now_ns();
        buffer.extend_from_slice(&chunk[..read]);
        if !head_read {
            let Some(end) = find(&buffer, b"\r\n\r\n") else {
                continue;
            };
            if !buffer.starts_with(b"HTTP/1.1 200") {
                return Err(String::from_utf8_lossy(&buffer[..end]).into_owned().into());
            }
            buffer.drain(..end + 4);
            head_read = true;
            opened.fetch_add(1, Ordering::Relaxed);
        }
        while let Some(start) = find(&buffer, KEY) {
            let from = start + KEY.len();
            let Some(length) = buffer[from..].iter().position(|&b| b == b'"') else {
                break;
            };
            mine.push((
                String::from_utf8_lossy(&buffer[from..from + length]).into_owned(),
                now,
            ));
            received.fetch_add(1, Ordering::Relaxed);
            buffer.drain(..from + length);
        }
        // What is left holds no whole key; keep a tail that may start one.
        let keep = buffer.len().min(KEY.len() + 64);
        buffer.drain(..buffer.len() - keep);
    }
    seen.lock().map_err(|_| "poisoned")?.push(mine);
    Ok(())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Waits until `done` (at most two minutes, a bound on a hang).
fn wait_until(done: impl Fn() -> bool) -> BenchResult<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done() {
        if Instant::now() > deadline {
            return Err("not within two minutes".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The server process: `evc serve`'s library on the store, appending when asked.
// ---------------------------------------------------------------------------------------------

fn serve(target: &str) -> BenchResult<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        if let Some(path) = target.strip_prefix("sqlite:") {
            let store = SqliteStore::open(path, evc_generated::REGISTRY).await?;
            let served = serve_on(Outbox::Sqlite(store.clone()), &store).await;
            store.close().await;
            served
        } else {
            let pool = PgPoolOptions::new()
                .max_connections(8)
                .connect_with(PgConnectOptions::from_str(target)?)
                .await?;
            let migrations = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/migrations");
            Migrator::new(migrations.as_path())
                .await?
                .run(&pool)
                .await?;
            let store = PgStore::start(pool.clone(), evc_generated::REGISTRY).await?;
            let outbox = Outbox::Postgres(Box::new(PgStores::single(store.clone())));
            let served = serve_on(outbox, &store).await;
            pool.close().await;
            served
        }
    })
}

async fn serve_on<S: Store>(outbox: Outbox, store: &S) -> BenchResult<()> {
    let topic = Topic {
        name: "units".to_owned(),
        description: "Every unit's birth.".to_owned(),
        event_types: BTreeSet::from(["iu.born".to_owned()]),
        key: None,
        filter: Default::default(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("address {}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(evc_serve::run(
        listener,
        outbox,
        Tokens::parse(&format!("reader bench {TOKEN}"))?,
        GatewayConfig::new(vec![topic]),
        Catalog::default(),
        async move {
            let _ = stopped.await;
        },
    ));
    let (lines, mut commands) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let trace = TraceContext::new(TRACE, "00f067aa0ba902b7", 1)?;
    let mut ticker = tokio::time::interval(Duration::from_micros(1_000_000 / RATE_PER_S));
    while let Some(command) = commands.recv().await {
        let Some(count) = command.strip_prefix("publish ") else {
            break;
        };
        for _ in 0..count.parse::<usize>()? {
            ticker.tick().await;
            let mut tx = store.begin().await?;
            let id = {
                let mut publisher = store.publisher(&mut tx, AppendOptions::new());
                let payload = IuBornV1::new(
                    Uuid::now_v7(),
                    Uuid::now_v7(),
                    IuBornV1GovernanceState::Draft,
                    evc::chrono::Utc::now(),
                );
                emit_iu_born_v1(&mut publisher, &trace, &payload)
                    .await?
                    .event_id
            };
            let at = now_ns();
            tx.commit().await?;
            println!("event {id} {at}");
        }
        println!("done");
    }
    let _ = stop.send(());
    serving.await??;
    Ok(())
}
