//! What the crash suites share, whatever the store: the child processes' roles and crash
//! points, the handlers that write the idempotent effect and stop at a crash point, the child's
//! body (claim and die, serve and die, serve until nothing is open) and the child process
//! handle of the parent. `runtime/tests/crash.rs` runs them on PostgreSQL,
//! `runtime/tests/crash_sqlite.rs` on SQLite; each store says how a child signals the parent
//! and writes the test's own rows ([`CrashStore`]).

#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use evc_runtime::{
    BoxFuture, ClaimRequest, Connection, DeliveryStatus, DispatchError, Dispatcher,
    DispatcherConfig, DynHandler, HandlerContext, HandlerError, Lease, Store,
};
use tokio::sync::Notify;

use crate::support::TestResult;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The child's role: `claim`, `victim`, `restart` or `worker`. Unset: not a child.
pub const ROLE: &str = "EVC_CRASH_ROLE";
/// Where a `victim` stops: `after_effect`, `between_renewals` or `during_shutdown`.
pub const POINT: &str = "EVC_CRASH_POINT";
/// Comma-separated consumers the child serves.
pub const CONSUMERS: &str = "EVC_CRASH_CONSUMERS";
/// The child's lease owner prefix.
pub const OWNER: &str = "EVC_CRASH_OWNER";

/// The crashing children's lease: short, so the restart waits little for expiry.
pub const VICTIM_LEASE: Duration = Duration::from_millis(1_000);
/// The consumers of [`crate::support::DISPATCH_REGISTRY`] that `test.note` fans out to.
pub const ALL_CONSUMERS: [&str; 3] = ["d.leased", "d.tx", "d.unordered"];
/// Those of them that order per key.
pub const PER_KEY: [&str; 2] = ["d.leased", "d.tx"];

/// What opens a signal on a child's stdout (libtest prints there too, and may have begun
/// the line).
pub const SIGNAL_LINE: &str = "evc-crash-signal";

/// An environment variable of the child, or why it is missing.
pub fn env(name: &str) -> Result<String, BoxError> {
    std::env::var(name).map_err(|_| format!("{name} is not set").into())
}

/// The consumers the child serves ([`CONSUMERS`]).
pub fn consumers() -> Result<Vec<String>, BoxError> {
    Ok(env(CONSUMERS)?.split(',').map(str::to_owned).collect())
}

/// Where a victim blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// After the effect row and the side effect are written (committed for the leased kind,
    /// in the still-open transaction for the transactional kind), before the ack.
    AfterEffect,
    /// In a long handler, once the dispatcher renewed its lease.
    BetweenRenewals,
    /// At the start of a long handler; the child then asks for a graceful shutdown.
    DuringShutdown,
}

impl Point {
    /// The point an environment value names.
    pub fn parse(name: &str) -> Result<Self, BoxError> {
        match name {
            "after_effect" => Ok(Self::AfterEffect),
            "between_renewals" => Ok(Self::BetweenRenewals),
            "during_shutdown" => Ok(Self::DuringShutdown),
            other => Err(format!("unknown crash point {other}").into()),
        }
    }
}

/// The signal the parent waits for before it kills a child stopping at `point`
/// (`before_handler`: the claim role's), and how many of them.
pub fn ready_signal(point: &str, events: u64) -> Result<(&'static str, u64), BoxError> {
    match point {
        "before_handler" => Ok(("claimed", events)),
        "after_effect" => Ok(("effect_written", 1)),
        "between_renewals" => Ok(("renewed", 1)),
        "during_shutdown" => Ok(("draining", 1)),
        other => Err(format!("unknown point {other}").into()),
    }
}

/// A store the crash suite runs on: how a child tells the parent it reached a point, and the
/// test's own rows (never the runtime's tables).
pub trait CrashStore: Store {
    /// Whether [`CrashStore::record_call`] writes anything (handlers skip its transaction
    /// otherwise).
    const RECORDS_CALLS: bool;

    /// Tells the parent that `point` was reached, with the lease concerned.
    fn signal(
        &self,
        point: &str,
        lease: Option<&Lease>,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;

    /// A runner's final report: its handler calls and the acks its dispatcher counted.
    fn report(
        &self,
        point: &str,
        owner: &str,
        calls: u64,
        acked: u64,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;

    /// The side effect (`t_effects`, only when `first`) and the attempt's `t_seen` row, on
    /// the effect's transaction.
    fn write_side_effect(
        &self,
        connection: &mut Connection<Self>,
        lease: &Lease,
        first: bool,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;

    /// One handler call of `lease` for event number `n` (`t_calls`, in call order), on the
    /// handler's transaction or one of its own.
    fn record_call(
        &self,
        connection: &mut Connection<Self>,
        lease: &Lease,
        n: u64,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;
}

fn store_error(error: DispatchError) -> HandlerError {
    HandlerError::transient(if error.is_stale_token() {
        "stale_token"
    } else {
        "store"
    })
}

fn test_error(_: BoxError) -> HandlerError {
    HandlerError::transient("test_rows")
}

fn db_error(_: sqlx::Error) -> HandlerError {
    HandlerError::transient("database")
}

/// The idempotent effect: the effect row (fenced) and, the first time only, the side effect;
/// every attempt leaves a `t_seen` row in the same transaction.
pub async fn write_effect<S: CrashStore>(
    store: &S,
    connection: &mut Connection<S>,
    lease: &Lease,
) -> Result<(), HandlerError> {
    let first = store
        .record_effect(connection, lease, &lease.event_id.to_string(), "digest")
        .await
        .map_err(store_error)?;
    store
        .write_side_effect(connection, lease, first)
        .await
        .map_err(test_error)
}

/// Writes the effect on its own transaction (the leased kind).
async fn write_effect_committed<S: CrashStore>(
    store: &S,
    lease: &Lease,
) -> Result<(), HandlerError> {
    let mut tx = store.begin().await.map_err(store_error)?;
    write_effect(store, &mut tx, lease).await?;
    tx.commit().await.map_err(db_error)
}

/// Waits until the store shows `lease` renewed past its first expiry (the dispatcher's renewal
/// committed), for at most 20 s.
async fn renewed<S: CrashStore>(store: &S, lease: &Lease) -> Result<(), HandlerError> {
    let first = lease.claimed_at + VICTIM_LEASE.as_secs_f64();
    let start = Instant::now();
    loop {
        let record = store
            .delivery(lease.event_id, &lease.consumer)
            .await
            .map_err(store_error)?;
        if record
            .and_then(|record| record.lease_until)
            .is_some_and(|until| until > first)
        {
            return Ok(());
        }
        if start.elapsed() > crate::support::HANG {
            return Err(HandlerError::transient("never_renewed"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Writes the effect and blocks forever at `point`, signalling the parent first; `started`
/// fires when a long handler (renewals, shutdown) has begun.
pub struct Effects {
    /// Where it blocks.
    pub point: Point,
    /// Fired once a handler that blocks before its effect has begun.
    pub started: Arc<Notify>,
}

impl<S: CrashStore> DynHandler<S> for Effects {
    fn handle<'a>(
        &'a self,
        mut context: HandlerContext<'a, S>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let lease = context.lease().clone();
            let store = context.store;
            if matches!(self.point, Point::BetweenRenewals | Point::DuringShutdown) {
                store
                    .signal("handler_started", Some(&lease))
                    .await
                    .map_err(test_error)?;
                self.started.notify_one();
                if self.point == Point::BetweenRenewals {
                    renewed(store, &lease).await?;
                    store
                        .signal("renewed", Some(&lease))
                        .await
                        .map_err(test_error)?;
                }
                std::future::pending::<()>().await;
            }
            match context.transaction() {
                // The transaction (effect, side effect, ack) stays open at the point.
                Some(tx) => write_effect(store, tx, &lease).await?,
                None => write_effect_committed(store, &lease).await?,
            }
            if self.point == Point::AfterEffect {
                store
                    .signal("effect_written", Some(&lease))
                    .await
                    .map_err(test_error)?;
                std::future::pending::<()>().await;
            }
            Ok(())
        })
    }
}

/// Handler calls between two `progress` signals of a [`Counting`] handler that will block.
const PROGRESS_EVERY: u64 = 50;

/// Counts its calls and records each ([`CrashStore::record_call`]); the transactional kind
/// writes the idempotent effect on its transaction, the leased kind only `with_effects`. After
/// `stop_after` calls, leased handlers block forever (the run is then killed mid-way); the
/// first to block signals `stuck`, and until then every 50th call signals `progress`.
pub struct Counting {
    /// Handler calls so far.
    pub calls: Arc<AtomicU64>,
    /// Whether the leased kind writes the effect too.
    pub with_effects: bool,
    /// Calls after which leased handlers block (`None`: never).
    pub stop_after: Option<u64>,
    /// Whether `stuck` was signalled.
    pub stuck: Arc<AtomicBool>,
}

impl Counting {
    /// A handler counting into `calls`.
    pub fn new(calls: &Arc<AtomicU64>, with_effects: bool, stop_after: Option<u64>) -> Self {
        Self {
            calls: Arc::clone(calls),
            with_effects,
            stop_after,
            stuck: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl Clone for Counting {
    fn clone(&self) -> Self {
        Self {
            calls: Arc::clone(&self.calls),
            with_effects: self.with_effects,
            stop_after: self.stop_after,
            stuck: Arc::clone(&self.stuck),
        }
    }
}

impl<S: CrashStore> DynHandler<S> for Counting {
    fn handle<'a>(
        &'a self,
        mut context: HandlerContext<'a, S>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let calls = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            // A run that will block says it still moves, so the test waits on progress, not on
            // the clock (a loaded machine may take minutes to get there).
            if self.stop_after.is_some() && calls.is_multiple_of(PROGRESS_EVERY) {
                context
                    .store
                    .signal("progress", None)
                    .await
                    .map_err(test_error)?;
            }
            let lease = context.lease().clone();
            let n = context
                .payload()
                .get("count")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(u64::MAX);
            let store = context.store;
            match context.transaction() {
                Some(tx) => {
                    if S::RECORDS_CALLS {
                        store.record_call(tx, &lease, n).await.map_err(test_error)?;
                    }
                    write_effect(store, tx, &lease).await?;
                }
                None => {
                    if S::RECORDS_CALLS {
                        let mut tx = store.begin().await.map_err(store_error)?;
                        store
                            .record_call(&mut tx, &lease, n)
                            .await
                            .map_err(test_error)?;
                        tx.commit().await.map_err(db_error)?;
                    }
                    // Only the leased kind blocks: a blocked transactional handler would hold
                    // SQLite's write lock and stall every other worker of the process.
                    if self.stop_after.is_some_and(|stop| calls > stop) {
                        if !self.stuck.swap(true, Ordering::SeqCst) {
                            store.signal("stuck", None).await.map_err(test_error)?;
                        }
                        std::future::pending::<()>().await;
                    }
                    if self.with_effects {
                        write_effect_committed(store, &lease).await?;
                    }
                }
            }
            Ok(())
        })
    }
}

/// The victims' dispatcher: one worker, a short lease renewed often.
pub fn victim_config(owner: String) -> DispatcherConfig {
    DispatcherConfig::default()
        .owner(owner)
        .workers(1)
        .batch(10)
        .lease(VICTIM_LEASE)
        .poll_interval(Duration::from_millis(50))
        .recovery_interval(Duration::from_millis(200))
        .heartbeat_interval(Duration::from_millis(500))
        .seed(1)
}

/// The restarted dispatcher: one worker, a lease it keeps, quick recovery of the killed
/// leases.
pub fn restart_config(owner: String) -> DispatcherConfig {
    DispatcherConfig::default()
        .workers(1)
        .lease(Duration::from_secs(5))
        .recovery_interval(Duration::from_millis(100))
        .owner(owner)
        .poll_interval(Duration::from_millis(20))
        .heartbeat_interval(Duration::from_millis(200))
        .seed(2)
}

/// Claims every due delivery of `consumers` (per key, [`VICTIM_LEASE`]), signals each claim
/// and blocks forever: a dispatcher that dies after its claim, before its handler.
pub async fn claim_and_block<S: CrashStore>(
    store: &S,
    consumers: &[String],
    owner: &str,
) -> TestResult {
    let mut connection = store.pool().acquire().await?;
    for consumer in consumers {
        let request = ClaimRequest::leased(consumer, owner, 10, VICTIM_LEASE).per_key(true);
        for claimed in store.claim(&mut connection, &request).await? {
            store.signal("claimed", Some(&claimed.lease)).await?;
        }
    }
    drop(connection);
    std::future::pending::<()>().await;
    Ok(())
}

/// A victim: serves `consumers` with [`Effects`] stopping at `point`; at
/// [`Point::DuringShutdown`] asks for a graceful shutdown once the handler runs (it drains
/// forever, the handler never returns) and signals `draining`. Never returns `Ok`.
pub async fn victim<S: CrashStore>(
    store: &S,
    consumers: &[String],
    owner: String,
    point: Point,
) -> TestResult {
    let started = Arc::new(Notify::new());
    let mut dispatcher = Dispatcher::new(store.clone(), victim_config(owner));
    for consumer in consumers {
        dispatcher = dispatcher.consumer(
            consumer,
            Effects {
                point,
                started: Arc::clone(&started),
            },
        )?;
    }
    let handle = dispatcher.start();
    if point == Point::DuringShutdown {
        started.notified().await;
        let draining = tokio::spawn(handle.shutdown());
        tokio::time::sleep(Duration::from_millis(200)).await;
        store.signal("draining", None).await?;
        let _ = draining.await;
    }
    std::future::pending::<()>().await;
    Ok(())
}

/// Deliveries of `consumers` still pending or leased.
pub async fn open<S: Store>(store: &S, consumers: &[String]) -> Result<u64, DispatchError> {
    let mut open = 0;
    for consumer in consumers {
        open += store
            .count_deliveries(consumer, &[DeliveryStatus::Pending, DeliveryStatus::Leased])
            .await?;
    }
    Ok(open)
}

/// Serves `consumers` with `handler` under `config` until none of their deliveries is open,
/// shuts down and answers `(handler calls, acks counted by the dispatcher)`.
pub async fn serve_until_done<S: CrashStore>(
    store: &S,
    config: DispatcherConfig,
    consumers: &[String],
    handler: Counting,
) -> Result<(u64, u64), BoxError> {
    let calls = Arc::clone(&handler.calls);
    let mut dispatcher = Dispatcher::new(store.clone(), config);
    for consumer in consumers {
        dispatcher = dispatcher.consumer(consumer, handler.clone())?;
    }
    let handle = dispatcher.start();
    let start = Instant::now();
    while open(store, consumers).await? > 0 {
        if start.elapsed() > crate::support::HANG {
            return Err(format!("deliveries still open after {:?}", crate::support::HANG).into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stats = handle.shutdown().await;
    Ok((calls.load(Ordering::SeqCst), stats.acked))
}

// ---------------------------------------------------------------------------------------------
// The parent side.
// ---------------------------------------------------------------------------------------------

/// A child process (this test binary, re-run with `--exact crash_child`), killed (SIGKILL)
/// and reaped when dropped. With `signals`, its stdout's signal lines are read on a thread.
pub struct ChildProcess {
    /// The process.
    pub child: Child,
    role: String,
    signals: Option<mpsc::Receiver<Vec<String>>>,
    seen: Vec<Vec<String>>,
}

impl ChildProcess {
    /// Spawns the child in `role` with `envs`; with `signals`, reads its signal lines
    /// ([`SIGNAL_LINE`]).
    pub fn spawn(role: &str, envs: &[(&str, String)], signals: bool) -> Self {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut command = Command::new(exe);
        command
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .stdin(Stdio::null())
            .stdout(if signals {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::inherit());
        for (name, value) in envs {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("spawn the child process");
        let signals = child.stdout.take().map(|stdout| {
            let (sender, receiver) = mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    // libtest's "test crash_child ... " may open the line.
                    if let Some(at) = line.find(SIGNAL_LINE) {
                        let words: Vec<String> = line[at + SIGNAL_LINE.len()..]
                            .split_whitespace()
                            .map(str::to_owned)
                            .collect();
                        if sender.send(words).is_err() {
                            break;
                        }
                    }
                }
            });
            receiver
        });
        Self {
            child,
            role: role.to_owned(),
            signals,
            seen: Vec::new(),
        }
    }

    /// The signals read so far whose first word is `point` (the words after it).
    pub fn signals(&mut self, point: &str) -> Vec<Vec<String>> {
        if let Some(receiver) = &self.signals {
            self.seen.extend(receiver.try_iter());
        }
        self.seen
            .iter()
            .filter(|words| words.first().is_some_and(|first| first == point))
            .map(|words| words[1..].to_vec())
            .collect()
    }

    /// Waits until `n` signals `point` were read; fails if the child exits first or after twice
    /// [`crate::support::HANG`] (a bound on a hang, beyond the child's own).
    pub async fn wait_for(&mut self, point: &str, n: u64) -> TestResult {
        let start = Instant::now();
        let timeout = 2 * crate::support::HANG;
        while (self.signals(point).len() as u64) < n {
            if let Some(status) = self.child.try_wait()? {
                return Err(format!("{} exited ({status}) before {point}", self.role).into());
            }
            if start.elapsed() > timeout {
                return Err(format!("no {point} signal after {timeout:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// Waits until `n` signals `point` were read, as long as the child keeps signalling: fails
    /// if the child exits first, sends no signal at all for [`crate::support::HANG`] (a hang;
    /// on a loaded machine a SQLite child can go minutes between signals), or never gets there
    /// in fifteen minutes (a loop that keeps signalling).
    pub async fn wait_for_progress(&mut self, point: &str, n: u64) -> TestResult {
        let start = Instant::now();
        let stall = crate::support::HANG;
        let mut seen = self.signals_seen();
        let mut since = Instant::now();
        while (self.signals(point).len() as u64) < n {
            if start.elapsed() > Duration::from_secs(900) {
                return Err(format!("no {point} signal in {:?}", start.elapsed()).into());
            }
            if let Some(status) = self.child.try_wait()? {
                return Err(format!("{} exited ({status}) before {point}", self.role).into());
            }
            let now_seen = self.signals_seen();
            if now_seen > seen {
                (seen, since) = (now_seen, Instant::now());
            } else if since.elapsed() > stall {
                let last = self.seen.last();
                return Err(format!(
                    "no signal for {stall:?} while waiting for {point} ({seen} signals so far, \
                     the last {last:?})"
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// How many signals were read so far.
    fn signals_seen(&mut self) -> usize {
        if let Some(receiver) = &self.signals {
            self.seen.extend(receiver.try_iter());
        }
        self.seen.len()
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) -> std::io::Result<()> {
        self.child.kill()?;
        let status = self.child.wait()?;
        assert!(!status.success(), "{} exited before the kill", self.role);
        Ok(())
    }

    /// Waits for a successful exit.
    pub async fn finish(&mut self, timeout: Duration) -> TestResult {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                assert!(status.success(), "{} failed: {status}", self.role);
                return Ok(());
            }
            assert!(
                start.elapsed() < timeout,
                "{} still running after {timeout:?}",
                self.role
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
