//! The peer benchmark: the same no-op workload on evc, awa and graphile_worker against the same
//! local PostgreSQL, in one invocation (README.md beside this crate).
//!
//! Per system: a short sweep of its own knobs on a smaller job count, at 4 and at 16
//! concurrent handlers (or those of `PEER_BENCH_HANDLERS`); then full runs (100,000 jobs
//! pre-inserted, drained) at the two best settings of each concurrency, the faster of which is
//! the system's figure; then one table with every
//! system's insert rate, drain rates and evc's ratio to the best peer. Last, evc's
//! produce-to-handler latency at a steady 1,000 events/s. Every run gets a fresh database,
//! created here and dropped after it.
//!
//! ```sh
//! cargo run --release                               # everything
//! PEER_BENCH_ONLY=evc cargo run --release           # one part: evc, awa, graphile or latency
//! PEER_BENCH_JOBS=20000 cargo run --release         # a smaller full run
//! PEER_BENCH_HANDLERS=4,16,64 cargo run --release   # the concurrencies swept (default 4,16)
//! PEER_BENCH_FINALISTS=3 cargo run --release        # full runs per concurrency (default 2)
//! ```

mod awa_peer;
mod cluster;
mod evc;
mod graphile;
mod latency;
mod writes;

use std::fmt::Display;
use std::future::Future;
use std::str::FromStr;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};

/// Errors of any part: each part reports its own and the others still run.
pub(crate) type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const DEFAULT_URL: &str = "postgres://root@localhost/test";
/// Jobs of the full runs (`PEER_BENCH_JOBS`).
const DEFAULT_JOBS: usize = 100_000;
/// Jobs of each sweep run: enough for a steady rate, small enough to keep the sweep short.
const SWEEP_JOBS: usize = 20_000;
/// Settings of each sweep given a full run (`PEER_BENCH_FINALISTS`); the fastest full run is
/// the system's figure.
const DEFAULT_FINALISTS: usize = 2;
/// The concurrencies the issue asks for (`PEER_BENCH_HANDLERS` sets others).
const DEFAULT_HANDLERS: [usize; 2] = [4, 16];

/// What one run measured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run {
    /// Jobs inserted per second (the insert call(s) and their commit; building the jobs in
    /// memory is not timed, for any system).
    pub(crate) insert_rate: f64,
    /// Jobs completed per second, from the start of the handlers until the last completion
    /// is in the database.
    pub(crate) drain_rate: f64,
    /// `false` when the drain hit its time cap before all jobs completed (the rate is then
    /// what completed within the cap).
    pub(crate) finished: bool,
    /// What the run wrote, per job.
    pub(crate) writes: writes::Writes,
}

/// How long a drain of `jobs` may take before it is cut off, so that a slow system or a badly
/// tuned setting cannot eat the run's time budget: 0.5 ms per job, at least 10 s (a sweep run
/// of 20,000 jobs) and at most 60 s.
pub(crate) fn drain_cap(jobs: usize) -> Duration {
    Duration::from_millis(jobs as u64 / 2).clamp(Duration::from_secs(10), Duration::from_secs(60))
}

/// Waits until `done()` reports `target` or `cap` passes, polling every millisecond; returns
/// whether the target was reached.
pub(crate) async fn wait_until<F>(started: Instant, cap: Duration, mut done: F) -> bool
where
    F: FnMut() -> bool,
{
    loop {
        if done() {
            return true;
        }
        if started.elapsed() >= cap {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Opens every connection `pool` may hold and gives them back to it idle. A drain measures a
/// running system emptying a backlog, and a running system's connections are open: opening
/// one takes about 10 ms here (`pgbench -C`), so a system that drains on more connections
/// would otherwise pay more start-up inside its timed drain than one that drains on few.
pub(crate) async fn open_connections(pool: &sqlx::PgPool) -> BenchResult<()> {
    let mut open = Vec::new();
    for _ in 0..pool.options().get_max_connections() {
        open.push(pool.acquire().await?);
    }
    Ok(())
}

/// One system under test: its knob settings and one run at a setting.
pub(crate) trait System {
    /// A point of the system's knob sweep.
    type Setting: Display + Clone;

    /// The name printed in the tables.
    const NAME: &'static str;

    /// The settings swept, the system's recommended high-throughput configuration first.
    fn settings() -> Vec<Self::Setting>;

    /// Inserts `jobs` no-op jobs into the fresh database `url`, then drains them with
    /// `concurrency` concurrent handlers.
    fn run(
        url: &str,
        setting: &Self::Setting,
        concurrency: usize,
        jobs: usize,
    ) -> impl Future<Output = BenchResult<Run>>;
}

/// The server, and the databases of this invocation (each dropped after its run, and all of
/// them again at the end in case a run failed half-way).
pub(crate) struct Server {
    url: String,
    admin: PgConnection,
    created: Vec<String>,
}

impl Server {
    /// A fresh, empty database; returns its URL.
    pub(crate) async fn create(&mut self, purpose: &str) -> BenchResult<(String, String)> {
        let name = format!(
            "evc_peers_{}_{}_{purpose}",
            std::process::id(),
            self.created.len()
        );
        self.created.push(name.clone());
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut self.admin)
            .await?;
        let url = PgConnectOptions::from_str(&self.url)?
            .database(&name)
            .to_url_lossy()
            .to_string();
        Ok((name, url))
    }

    /// Drops `name` (its connections are closed by force: a peer may keep some open).
    pub(crate) async fn drop_database(&mut self, name: &str) {
        let statement = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
        if let Err(error) = sqlx::raw_sql(AssertSqlSafe(statement))
            .execute(&mut self.admin)
            .await
        {
            eprintln!("could not drop database {name}: {error}");
        }
    }

    async fn drop_all(&mut self) {
        for name in std::mem::take(&mut self.created) {
            self.drop_database(&name).await;
        }
    }
}

/// Single-row transactions the server commits per second on one connection (an `INSERT` of one
/// row each, for two seconds, in a fresh database): how fast commits are on this day, printed
/// before the figures it explains.
async fn commit_rate(server: &mut Server) -> BenchResult<f64> {
    let (name, url) = server.create("commits").await?;
    let rate = async {
        let mut connection = PgConnection::connect(&url).await?;
        sqlx::raw_sql("CREATE TABLE t (id bigserial PRIMARY KEY, at timestamptz DEFAULT now())")
            .execute(&mut connection)
            .await?;
        let started = Instant::now();
        let mut commits = 0u64;
        while started.elapsed() < Duration::from_secs(2) {
            sqlx::raw_sql("INSERT INTO t DEFAULT VALUES")
                .execute(&mut connection)
                .await?;
            commits += 1;
        }
        let rate = commits as f64 / started.elapsed().as_secs_f64();
        connection.close().await?;
        BenchResult::Ok(rate)
    }
    .await;
    server.drop_database(&name).await;
    rate
}

/// A fresh database, `S::run` on it, the database dropped.
async fn run_once<S: System>(
    server: &mut Server,
    setting: &S::Setting,
    concurrency: usize,
    jobs: usize,
) -> BenchResult<Run> {
    let (name, url) = server.create(S::NAME).await?;
    let result = S::run(&url, setting, concurrency, jobs).await;
    server.drop_database(&name).await;
    result
}

/// The full result of one system: best settings and the full runs at each concurrency.
struct Outcome {
    name: &'static str,
    /// Per concurrency: the setting of the fastest full run (printed) and that run.
    runs: Vec<(usize, String, BenchResult<Run>)>,
}

impl Outcome {
    fn drain(&self, concurrency: usize) -> Option<f64> {
        self.runs
            .iter()
            .find(|(c, _, _)| *c == concurrency)
            .and_then(|(_, _, run)| run.as_ref().ok())
            .map(|run| run.drain_rate)
    }

    /// What the full run at `concurrency` wrote, per job.
    fn writes(&self, concurrency: usize) -> Option<writes::Writes> {
        self.runs
            .iter()
            .find(|(c, _, _)| *c == concurrency)
            .and_then(|(_, _, run)| run.as_ref().ok())
            .map(|run| run.writes)
    }

    fn insert(&self) -> Option<f64> {
        let rates: Vec<f64> = self
            .runs
            .iter()
            .filter_map(|(_, _, run)| run.as_ref().ok().map(|run| run.insert_rate))
            .collect();
        (!rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64)
    }
}

/// Sweeps `S`'s settings at each concurrency on [`SWEEP_JOBS`] jobs, then runs `jobs` at the
/// `finalists` best of each concurrency and keeps the fastest full run: one sweep run per
/// setting ranks settings within a few percent of each other by noise, so the full runs
/// decide between the leaders. Prints every figure as it comes.
async fn measure<S: System>(
    server: &mut Server,
    jobs: usize,
    handlers: &[usize],
    finalists: usize,
) -> Outcome {
    println!("\n== {} ==", S::NAME);
    let sweep_jobs = SWEEP_JOBS.min(jobs);
    let mut runs = Vec::new();
    for &concurrency in handlers {
        println!("sweep, {sweep_jobs} jobs, {concurrency} concurrent handlers:");
        let mut ranked: Vec<(f64, S::Setting)> = Vec::new();
        for setting in S::settings() {
            match run_once::<S>(server, &setting, concurrency, sweep_jobs).await {
                Ok(run) => {
                    println!(
                        "  {setting}: insert {} jobs/s, drain {} jobs/s{}\n    {}",
                        thousands(run.insert_rate),
                        thousands(run.drain_rate),
                        capped(&run),
                        run.writes
                    );
                    ranked.push((run.drain_rate, setting));
                }
                Err(error) => println!("  {setting}: FAILED: {error}"),
            }
        }
        if ranked.is_empty() {
            runs.push((
                concurrency,
                "-".to_owned(),
                Err("every setting of the sweep failed".into()),
            ));
            continue;
        }
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut best: Option<(String, BenchResult<Run>)> = None;
        for (_, setting) in ranked.into_iter().take(finalists) {
            let run = run_once::<S>(server, &setting, concurrency, jobs).await;
            match &run {
                Ok(run) => println!(
                    "full run, {jobs} jobs, {concurrency} concurrent handlers, {setting}: insert {} jobs/s, drain {} jobs/s{}\n  {}",
                    thousands(run.insert_rate),
                    thousands(run.drain_rate),
                    capped(run),
                    run.writes
                ),
                Err(error) => println!(
                    "full run, {jobs} jobs, {concurrency} concurrent handlers, {setting}: FAILED: {error}"
                ),
            }
            let better = match (&best, &run) {
                (None, _) => true,
                (Some((_, Err(_))), Ok(_)) => true,
                (Some((_, Ok(kept))), Ok(new)) => new.drain_rate > kept.drain_rate,
                (Some(_), Err(_)) => false,
            };
            if better {
                best = Some((setting.to_string(), run));
            }
        }
        if let Some((setting, run)) = best {
            runs.push((concurrency, setting, run));
        }
    }
    Outcome {
        name: S::NAME,
        runs,
    }
}

fn capped(run: &Run) -> &'static str {
    if run.finished {
        ""
    } else {
        " (cut off at the time cap: not all completed)"
    }
}

/// `12345.6` as `12,346`.
pub(crate) fn thousands(value: f64) -> String {
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

fn figure(value: Option<f64>) -> String {
    value.map_or_else(|| "failed".to_owned(), thousands)
}

/// The final table: insert and drain rates of every system, best settings, evc's ratios.
fn report(outcomes: &[Outcome], jobs: usize, handlers: &[usize]) {
    println!("\n== Summary: {jobs} no-op jobs, each run in a fresh database ==");
    let mut header = format!("{:<16} {:>14}", "system", "insert jobs/s");
    for concurrency in handlers {
        header.push_str(&format!(" {:>17}", format!("drain @{concurrency} jobs/s")));
    }
    println!("{header}");
    for outcome in outcomes {
        let mut line = format!("{:<16} {:>14}", outcome.name, figure(outcome.insert()));
        for &concurrency in handlers {
            line.push_str(&format!(" {:>17}", figure(outcome.drain(concurrency))));
        }
        println!("{line}");
    }
    println!(
        "what each full run wrote, per job (WAL: the cluster's; rows and commits: the run's database, both phases):"
    );
    println!(
        "{:<16} {:>4} {:>11} {:>10} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7} {:>10}",
        "system",
        "@",
        "WAL insert",
        "WAL drain",
        "commits",
        "ins",
        "upd",
        "HOT",
        "del",
        "idx",
        "partial <="
    );
    for outcome in outcomes {
        for &concurrency in handlers {
            let Some(w) = outcome.writes(concurrency) else {
                continue;
            };
            println!(
                "{:<16} {:>4} {:>11.0} {:>10.0} {:>8.3} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>10.2}",
                outcome.name,
                concurrency,
                w.insert_wal,
                w.drain_wal,
                w.commits,
                w.inserted,
                w.updated,
                w.hot_updated,
                w.deleted,
                w.index_entries,
                w.partial_entries
            );
        }
    }
    println!("settings of the kept full runs:");
    for outcome in outcomes {
        for (concurrency, setting, _) in &outcome.runs {
            println!("  {:<16} @{concurrency:<3} {setting}", outcome.name);
        }
    }
    let Some(evc) = outcomes.iter().find(|o| o.name == evc::Evc::NAME) else {
        return;
    };
    for &concurrency in handlers {
        let best_peer = outcomes
            .iter()
            .filter(|o| o.name != evc::Evc::NAME)
            .filter_map(|o| o.drain(concurrency).map(|rate| (o.name, rate)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        match (evc.drain(concurrency), best_peer) {
            (Some(ours), Some((peer, theirs))) => println!(
                "evc / best peer at {concurrency:>2} handlers: {:.2}x ({} vs {peer} {} jobs/s; goal > 1.0, aim 1.5)",
                ours / theirs,
                thousands(ours),
                thousands(theirs)
            ),
            _ => {
                println!("evc / best peer at {concurrency:>2} handlers: n/a (a figure is missing)")
            }
        }
    }
}

/// The comma-separated parts of environment variable `name`, trimmed, empty ones skipped.
fn env_list(name: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_default()
        .split(',')
        .map(|part| part.trim().to_owned())
        .filter(|part| !part.is_empty())
        .collect()
}

fn main() -> BenchResult<()> {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let jobs = std::env::var("PEER_BENCH_JOBS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_JOBS)
        .max(1);
    let finalists = match std::env::var("PEER_BENCH_FINALISTS") {
        Ok(value) => match value.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(format!(
                    "PEER_BENCH_FINALISTS: `{value}` is not a positive number of settings"
                )
                .into());
            }
        },
        Err(_) => DEFAULT_FINALISTS,
    };
    let only = env_list("PEER_BENCH_ONLY");
    let runs = |part: &str| only.is_empty() || only.iter().any(|p| p == part);
    // A repeated count runs once.
    let mut handlers: Vec<usize> = Vec::new();
    for part in env_list("PEER_BENCH_HANDLERS") {
        match part.parse::<usize>() {
            Ok(n) if n > 0 => {
                if !handlers.contains(&n) {
                    handlers.push(n);
                }
            }
            _ => {
                return Err(format!(
                    "PEER_BENCH_HANDLERS: `{part}` is not a positive number of handlers"
                )
                .into());
            }
        }
    }
    if handlers.is_empty() {
        handlers = DEFAULT_HANDLERS.to_vec();
    }
    // With a commit delay, everything runs on a cluster of the benchmark's own instead.
    let cluster = match std::env::var("PEER_BENCH_SLOW_COMMIT_US") {
        Ok(delay) => {
            let delay: u32 = delay
                .trim()
                .parse()
                .map_err(|_| "PEER_BENCH_SLOW_COMMIT_US is not a number of microseconds")?;
            let cluster = cluster::SlowCluster::start(delay)?;
            println!(
                "slow-commit cluster at {}: commit_delay {delay} us, commit_siblings 0",
                cluster.url()
            );
            Some(cluster)
        }
        Err(_) => None,
    };
    let url = cluster.as_ref().map_or(url, cluster::SlowCluster::url);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let admin = PgConnection::connect(&url)
            .await
            .map_err(|error| format!("PostgreSQL at {url} is unreachable: {error}"))?;
        let mut server = Server {
            url: url.clone(),
            admin,
            created: Vec::new(),
        };
        println!(
            "peer benchmark on {url}: {jobs} jobs per full run, {} per sweep run, {finalists} full runs per concurrency, {} cores",
            SWEEP_JOBS.min(jobs),
            std::thread::available_parallelism().map_or(1, usize::from)
        );
        match commit_rate(&mut server).await {
            Ok(rate) => println!(
                "the server commits {} single-row transactions/s (one connection, 2 s)",
                thousands(rate)
            ),
            Err(error) => println!("commit rate: FAILED: {error}"),
        }
        let started = Instant::now();
        let mut outcomes = Vec::new();
        if runs("evc") {
            outcomes.push(measure::<evc::Evc>(&mut server, jobs, &handlers, finalists).await);
        }
        if runs("awa") {
            outcomes.push(measure::<awa_peer::Awa>(&mut server, jobs, &handlers, finalists).await);
        }
        if runs("graphile") {
            outcomes.push(measure::<graphile::Graphile>(&mut server, jobs, &handlers, finalists).await);
        }
        if !outcomes.is_empty() {
            report(&outcomes, jobs, &handlers);
        }
        if runs("latency") {
            match server.create("latency").await {
                Ok((name, db_url)) => {
                    if let Err(error) = latency::run(&db_url).await {
                        println!("latency: FAILED: {error}");
                    }
                    server.drop_database(&name).await;
                }
                Err(error) => println!("latency: FAILED: {error}"),
            }
        }
        server.drop_all().await;
        println!("\ntotal wall time {:.0} s", started.elapsed().as_secs_f64());
        Ok(())
    })
}
