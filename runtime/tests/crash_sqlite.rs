//! The crash suite on the SQLite store: separate processes killed by SIGKILL at the crash
//! points of `runtime/tests/crash.rs`, and a dispatcher process with 1, 2 and 4 workers killed
//! mid-run and restarted.
//!
//! A SQLite outbox file has one store, so one process, at a time (its `<file>.lock`; the kill
//! releases it). The parent therefore never reads while a child runs: a child reports on its
//! stdout (signal lines, [`crash::SIGNAL_LINE`]) — the leases it claimed or is handling, and
//! when it reached its crash point — and the parent kills it, opens the store to check what the
//! dead process left (through the store's own methods, and the test's own tables `t_effects`,
//! `t_seen` and `t_calls`), closes it, spawns the restart and checks the outcome once that
//! exits: nothing lost, each delivery acked once with its final token, each effect visible
//! once, per-key order kept, and the killed attempts' tokens refused when presented late.

mod support;

#[path = "support/crash.rs"]
mod crash;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use crash::{
    ALL_CONSUMERS, BoxError, ChildProcess, Counting, CrashStore, OWNER, PER_KEY, POINT, Point,
    SIGNAL_LINE, VICTIM_LEASE, claim_and_block, env, restart_config, serve_until_done, victim,
};
use evc_runtime::{
    Connection, DeliveryStatus, DispatcherConfig, FailureClass, HandlerKind, Lease, RetryDecision,
    SqliteOpenError, SqliteStore, Store,
};
use support::{DISPATCH_REGISTRY, TestResult, append_notes};
use uuid::Uuid;

/// The outbox file the child opens.
const FILE: &str = "EVC_CRASH_FILE";
/// Dispatcher workers per consumer of a `worker` child.
const WORKERS: &str = "EVC_CRASH_WORKERS";
/// Handler calls after which a `worker` child's leased handlers block (unset: never).
const STOP_AFTER: &str = "EVC_CRASH_STOP_AFTER";

/// Connections of a child's store: every worker may keep one.
const CHILD_CONNECTIONS: u32 = 40;

/// A child's busy timeout: twelve workers take turns at one write lock on a loaded machine.
const CHILD_BUSY_TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// The child side.
// ---------------------------------------------------------------------------------------------

/// Entry point of the child processes; a no-op in a normal test run.
#[test]
fn crash_child() {
    let Ok(role) = std::env::var(crash::ROLE) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(error) = runtime.block_on(child(&role)) {
        panic!("crash child {role} failed: {error}");
    }
}

async fn child(role: &str) -> TestResult {
    let store = open_store(
        Path::new(&env(FILE)?),
        CHILD_CONNECTIONS,
        CHILD_BUSY_TIMEOUT,
    )
    .await?;
    let consumers = crash::consumers()?;
    let owner = env(OWNER)?;
    match role {
        "claim" => claim_and_block(&store, &consumers, &owner).await,
        "victim" => victim(&store, &consumers, owner, Point::parse(&env(POINT)?)?).await,
        // The restarted dispatcher, or a dispatcher of `EVC_CRASH_WORKERS` workers per
        // consumer (whose leased handlers block after `EVC_CRASH_STOP_AFTER` calls): serves
        // until nothing is open, then shuts down and reports its counts.
        "restart" | "worker" => {
            let config = if role == "restart" {
                restart_config(owner.clone())
            } else {
                worker_config(owner.clone(), env(WORKERS)?.parse()?)
            };
            let stop_after = std::env::var(STOP_AFTER)
                .ok()
                .map(|stop| stop.parse())
                .transpose()?;
            let calls = Arc::new(AtomicU64::new(0));
            let handler = Counting::new(&calls, role == "restart", stop_after);
            let (calls, acked) = serve_until_done(&store, config, &consumers, handler).await?;
            store
                .report(&format!("{role}_done"), &owner, calls, acked)
                .await?;
            store.close().await;
            Ok(())
        }
        other => Err(format!("unknown crash role {other}").into()),
    }
}

/// A worker child's dispatcher: `workers` per consumer, a lease renewed often (the killed
/// leases expire soon after the kill), batches of ten: a transactional handler's transaction
/// holds SQLite's write lock, so the rest of its batch is renewed in that transaction. Idle
/// workers poll every 100 ms: every claim takes the one write lock, found work or not.
fn worker_config(owner: String, workers: usize) -> DispatcherConfig {
    DispatcherConfig::default()
        .owner(owner)
        .workers(workers)
        .batch(10)
        .lease(Duration::from_secs(2))
        .poll_interval(Duration::from_millis(100))
        .recovery_interval(Duration::from_millis(200))
        .heartbeat_interval(Duration::from_millis(200))
        .seed(3)
}

/// Opens the file's store, waiting while another process's store still holds it (a killed
/// child's lock is released when the kernel reaps it). Waits at most 20 s.
async fn open_store(
    path: &Path,
    connections: u32,
    busy_timeout: Duration,
) -> Result<SqliteStore, BoxError> {
    let start = Instant::now();
    loop {
        match SqliteStore::builder(path.to_string_lossy(), DISPATCH_REGISTRY)
            .max_connections(connections)
            .busy_timeout(busy_timeout)
            .open()
            .await
        {
            Err(SqliteOpenError::Locked { .. }) if start.elapsed() < support::HANG => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            result => return Ok(result?),
        }
    }
}

fn word(value: impl std::fmt::Display) -> String {
    value.to_string()
}

/// Signals are lines on the child's stdout: the point, then the lease (event, consumer,
/// owner, token, attempt, claim time) or `-`. The side effects and calls are rows of the
/// test's own tables in the outbox file.
impl CrashStore for SqliteStore {
    const RECORDS_CALLS: bool = true;

    async fn signal(&self, point: &str, lease: Option<&Lease>) -> Result<(), BoxError> {
        let lease = lease.map_or_else(
            || "-".to_owned(),
            |l| {
                [
                    word(l.event_id),
                    word(&l.consumer),
                    word(&l.owner),
                    word(l.token),
                    word(l.attempt),
                    word(l.claimed_at),
                ]
                .join(" ")
            },
        );
        println!("{SIGNAL_LINE} {point} {lease}");
        Ok(())
    }

    async fn report(&self, point: &str, owner: &str, calls: u64, acked: u64) -> TestResult {
        println!("{SIGNAL_LINE} {point} {owner} {calls} {acked}");
        Ok(())
    }

    async fn write_side_effect(
        &self,
        connection: &mut Connection<Self>,
        lease: &Lease,
        first: bool,
    ) -> TestResult {
        if first {
            sqlx::query("INSERT INTO t_effects (event_id, consumer, attempt) VALUES ($1, $2, $3)")
                .bind(lease.event_id.to_string())
                .bind(&lease.consumer)
                .bind(lease.attempt)
                .execute(&mut *connection)
                .await?;
        }
        sqlx::query(
            "INSERT INTO t_seen (event_id, consumer, attempt, first) VALUES ($1, $2, $3, $4)",
        )
        .bind(lease.event_id.to_string())
        .bind(&lease.consumer)
        .bind(lease.attempt)
        .bind(first)
        .execute(&mut *connection)
        .await?;
        Ok(())
    }

    async fn record_call(
        &self,
        connection: &mut Connection<Self>,
        lease: &Lease,
        n: u64,
    ) -> TestResult {
        sqlx::query("INSERT INTO t_calls (consumer, n, token) VALUES ($1, $2, $3)")
            .bind(&lease.consumer)
            .bind(i64::try_from(n)?)
            .bind(lease.token)
            .execute(&mut *connection)
            .await?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The parent side.
// ---------------------------------------------------------------------------------------------

/// A fresh outbox file in a temporary directory, with the test's tables and `events` notes
/// round-robin over `keys` keys; answers the directory (removed when dropped), the file and
/// the event ids in append order. The store is closed again.
async fn outbox(
    events: u64,
    keys: u64,
) -> Result<(tempfile::TempDir, PathBuf, Vec<Uuid>), BoxError> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("outbox.db");
    let store = open_store(&path, 4, Duration::from_secs(10)).await?;
    sqlx::raw_sql(
        "CREATE TABLE t_effects (event_id TEXT NOT NULL, consumer TEXT NOT NULL, \
             attempt INTEGER NOT NULL); \
         CREATE TABLE t_seen (event_id TEXT NOT NULL, consumer TEXT NOT NULL, \
             attempt INTEGER NOT NULL, first INTEGER NOT NULL); \
         CREATE TABLE t_calls (id INTEGER PRIMARY KEY AUTOINCREMENT, consumer TEXT NOT NULL, \
             n INTEGER NOT NULL, token INTEGER NOT NULL);",
    )
    .execute(store.pool())
    .await?;
    let receipts = append_notes(&store, events, keys).await?;
    store.close().await;
    Ok((
        dir,
        path,
        receipts.into_iter().map(|r| r.event_id).collect(),
    ))
}

/// Spawns a child in `role` on the outbox at `path`, reading its signals.
fn spawn(path: &Path, role: &str, envs: &[(&str, String)], consumers: &[&str]) -> ChildProcess {
    let mut all = vec![
        (FILE, path.to_string_lossy().into_owned()),
        (crash::CONSUMERS, consumers.join(",")),
        (OWNER, role.to_owned()),
    ];
    all.extend(envs.iter().cloned());
    ChildProcess::spawn(role, &all, true)
}

/// The lease a signal line carries.
fn lease_of(words: &[String]) -> Result<Lease, BoxError> {
    let [event_id, consumer, owner, token, attempt, claimed_at] = words else {
        return Err(format!("not a lease: {words:?}").into());
    };
    Ok(Lease::new(
        event_id.parse()?,
        consumer.clone(),
        owner.clone(),
        token.parse()?,
        attempt.parse()?,
        claimed_at.parse()?,
    ))
}

/// `(count, distinct deliveries)` of a test table's rows.
async fn rows(store: &SqliteStore, table: &str) -> Result<(i64, i64), sqlx::Error> {
    let query = match table {
        "t_effects" => "SELECT count(*), count(DISTINCT event_id || consumer) FROM t_effects",
        _ => "SELECT count(*), count(DISTINCT event_id || consumer) FROM t_seen",
    };
    sqlx::query_as(query).fetch_one(store.pool()).await
}

/// The leases the store shows right now among `events`' deliveries to `consumers`, as the
/// killed process held them.
async fn leases(
    store: &SqliteStore,
    events: &[Uuid],
    consumers: &[&str],
) -> Result<Vec<Lease>, BoxError> {
    let mut leases = Vec::new();
    for consumer in consumers {
        for event_id in events {
            let Some(record) = store.delivery(*event_id, consumer).await? else {
                continue;
            };
            if record.status == DeliveryStatus::Leased {
                let owner = record.owner.ok_or("a lease without an owner")?;
                leases.push(Lease::new(
                    *event_id,
                    *consumer,
                    owner,
                    record.token,
                    record.attempts,
                    0.0,
                ));
            }
        }
    }
    Ok(leases)
}

/// Every delivery of `events` to `consumer` acked exactly once, by its final token (the
/// highest of its attempts), and no outcome but `acked`, `lease_expired` and `retry`; each
/// killed lease ended as `lease_expired`. Answers the `lease_expired` and the `retry` rows.
async fn assert_acked_once(
    store: &SqliteStore,
    consumer: &str,
    events: &[Uuid],
    killed: &[Lease],
) -> Result<(u64, u64), BoxError> {
    assert_eq!(
        store.count_deliveries(consumer, &[]).await?,
        0,
        "{consumer}: a delivery row is left (acks delete theirs)"
    );
    let killed: BTreeMap<(Uuid, &str), i64> = killed
        .iter()
        .map(|l| ((l.event_id, l.consumer.as_str()), l.token))
        .collect();
    let (mut expired, mut retried) = (0, 0);
    for event_id in events {
        let attempts = store.attempts(*event_id, consumer).await?;
        support::assert_one_final_ack(&attempts, &format!("{consumer} {event_id}"));
        for attempt in &attempts {
            match attempt.outcome.as_str() {
                "acked" => {}
                "lease_expired" => expired += 1,
                // A transient failure (the write lock not had in time under load): retried.
                "retry" => retried += 1,
                other => panic!(
                    "{consumer} {event_id}: attempt ended {other} ({:?})",
                    attempt.error_code
                ),
            }
        }
        if let Some(token) = killed.get(&(*event_id, consumer)) {
            let outcome: Vec<&str> = attempts
                .iter()
                .filter(|a| a.token == *token)
                .map(|a| a.outcome.as_str())
                .collect();
            assert_eq!(outcome, ["lease_expired"], "the killed attempt's row");
        }
    }
    Ok((expired, retried))
}

/// The killed attempts' tokens, presented late: refused, counted, and nothing changes.
async fn assert_late_tokens_refused(store: &SqliteStore, killed: &[Lease]) -> TestResult {
    let before = store.stale_tokens();
    for lease in killed {
        let late = support::ack(store, &[lease]).await?;
        let stale = vec![(lease.event_id, lease.consumer.clone(), lease.token)];
        assert_eq!((late.acked, late.stale), (0, stale), "late ack");
        let error = store
            .fail(lease, FailureClass::Transient, "late", RetryDecision::Dead)
            .await
            .expect_err("late fail");
        assert!(error.is_stale_token(), "{error}");
        let mut tx = store.begin().await?;
        let error = store
            .record_effect(&mut tx, lease, &lease.event_id.to_string(), "late")
            .await
            .expect_err("late effect");
        assert!(error.is_stale_token(), "{error}");
        tx.rollback().await?;
        let mut connection = store.pool().acquire().await?;
        assert!(
            store
                .renew(&mut connection, &[lease], VICTIM_LEASE)
                .await?
                .is_empty()
        );
    }
    assert!(store.stale_tokens() >= before + 3 * killed.len() as u64);
    Ok(())
}

/// One crash: `events` notes (one key each) for `consumer`; a child in `role` stopping at
/// `point` is killed once it signalled it got there; the parent checks what it left; a
/// restarted child serves the consumer; then nothing is lost, every effect is visible once and
/// the killed leases' tokens are refused.
async fn crash(consumer: &'static str, events: u64, role: &'static str, point: &'static str) {
    if let Err(error) = crash_run(consumer, events, role, point).await {
        panic!("{consumer} {point}: {error}");
    }
}

async fn crash_run(consumer: &str, events: u64, role: &str, point: &str) -> TestResult {
    let (_dir, path, ids) = outbox(events, events).await?;
    let kind = DISPATCH_REGISTRY
        .consumer(consumer)
        .map(|c| c.handler)
        .ok_or("unknown consumer")?;

    let mut victim = spawn(&path, role, &[(POINT, point.to_owned())], &[consumer]);
    let (ready, n) = crash::ready_signal(point, events)?;
    victim.wait_for(ready, n).await?;
    let signalled: Vec<Lease> = victim
        .signals(if role == "claim" {
            "claimed"
        } else {
            "handler_started"
        })
        .iter()
        .chain(&victim.signals("effect_written"))
        .map(|words| lease_of(words))
        .collect::<Result<_, _>>()?;
    victim.kill()?;

    // What the dead process left: its leases still held, nothing settled.
    let store = open_store(&path, 4, Duration::from_secs(10)).await?;
    let killed = leases(&store, &ids, &[consumer]).await?;
    assert!(!killed.is_empty(), "the victim held no lease");
    for lease in &signalled {
        let held = killed
            .iter()
            .find(|k| k.event_id == lease.event_id)
            .ok_or("a signalled lease is not held")?;
        assert_eq!((&held.owner, held.token), (&lease.owner, lease.token));
    }
    if point == "during_shutdown" {
        // The running handler and the rest of its batch: none released by the drain.
        assert_eq!(killed.len() as u64, events);
    }
    assert_eq!(
        store
            .count_deliveries(consumer, &[DeliveryStatus::Leased])
            .await?,
        killed.len() as u64
    );
    assert_eq!(
        store
            .count_deliveries(consumer, &[DeliveryStatus::Pending])
            .await?,
        events - killed.len() as u64
    );
    for event_id in &ids {
        assert!(
            store.attempts(*event_id, consumer).await?.is_empty(),
            "an attempt row written before the kill"
        );
    }
    if point == "between_renewals" {
        // A renewal committed before the kill: the lease runs past its claim's expiry.
        let lease = signalled.first().ok_or("no handler signal")?;
        let record = store
            .delivery(lease.event_id, consumer)
            .await?
            .ok_or("no delivery")?;
        let until = record.lease_until.ok_or("not leased")?;
        assert!(
            until > lease.claimed_at + VICTIM_LEASE.as_secs_f64(),
            "not renewed"
        );
    }
    let effects = rows(&store, "t_effects").await?.0;
    match (point, kind) {
        // The transactional kind's effect was in its open transaction: rolled back.
        ("after_effect", HandlerKind::Transactional) => assert_eq!(effects, 0),
        // The leased kind committed its effect before the ack.
        ("after_effect", HandlerKind::Leased) => assert_eq!(effects, 1),
        _ => assert_eq!(effects, 0),
    }
    store.close().await;

    let mut restart = spawn(&path, "restart", &[], &[consumer]);
    restart.finish(2 * support::HANG).await?;

    let store = open_store(&path, 4, Duration::from_secs(10)).await?;
    assert_acked_once(&store, consumer, &ids, &killed).await?;
    let events = i64::try_from(events)?;
    assert_eq!(
        rows(&store, "t_effects").await?,
        (events, events),
        "side effects visible once each"
    );
    // Exactly one attempt found the effect unrecorded per delivery: one effect row each.
    let firsts: (i64, i64) =
        sqlx::query_as("SELECT count(*), count(DISTINCT event_id) FROM t_seen WHERE first = 1")
            .fetch_one(store.pool())
            .await?;
    assert_eq!(firsts, (events, events), "effect rows once each");
    if point == "after_effect" {
        let seen: Vec<(i64, bool)> =
            sqlx::query_as("SELECT attempt, first FROM t_seen ORDER BY attempt")
                .fetch_all(store.pool())
                .await?;
        match kind {
            // The redelivered attempt found the effect recorded and skipped the side effect.
            HandlerKind::Leased => assert_eq!(seen, [(1, true), (2, false)]),
            // The killed attempt's effect row rolled back with its transaction.
            _ => assert_eq!(seen, [(2, true)]),
        }
    }

    assert_late_tokens_refused(&store, &killed).await?;
    assert_acked_once(&store, consumer, &ids, &killed).await?;
    store.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_claim_before_the_handler_is_recovered_and_acked_once() {
    crash("d.tx", 2, "claim", "before_handler").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_side_effect_before_the_ack_transactional_rolls_back() {
    crash("d.tx", 1, "victim", "after_effect").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_effect_row_before_the_ack_leased_records_it_once() {
    crash("d.leased", 1, "victim", "after_effect").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_between_renewals_of_a_long_handler_is_recovered_after_expiry() {
    crash("d.leased", 1, "victim", "between_renewals").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_while_draining_at_shutdown_leaves_nothing_leased_forever() {
    crash("d.leased", 3, "victim", "during_shutdown").await;
}

// ---------------------------------------------------------------------------------------------
// A dispatcher process of 1, 2 and 4 workers, killed mid-run and restarted.
// ---------------------------------------------------------------------------------------------

/// Events of the worker runs: 1,000 × 3 consumers (a run stays near a minute on a loaded
/// two-core machine: twelve workers take turns at one write lock).
const EVENTS: u64 = 1_000;

/// Keys the events spread over (4 per key).
const KEYS: u64 = 250;

/// The worker runs take turns: each is a dispatcher process of its own.
static ONE_RUN_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A dispatcher process of `workers` workers per consumer serves the three consumers; its
/// leased handlers block after half the deliveries, and it is killed; a second process of
/// `workers` workers finishes. Every delivery is then acked exactly once, each killed lease
/// expired, the transactional side effects are visible once each and every per-key consumer
/// handled each key's events in append order.
async fn killed_mid_run(workers: usize) -> TestResult {
    let (_dir, path, ids) = outbox(EVENTS, KEYS).await?;
    let deliveries = EVENTS * ALL_CONSUMERS.len() as u64;
    let envs = [
        (WORKERS, workers.to_string()),
        (STOP_AFTER, (deliveries / 2).to_string()),
    ];
    let mut first = spawn(&path, "worker", &envs, &ALL_CONSUMERS);
    first.wait_for_progress("stuck", 1).await?;
    first.kill()?;

    // Killed mid-run: something in flight, something not yet handled.
    let store = open_store(&path, 4, Duration::from_secs(10)).await?;
    let killed = leases(&store, &ids, &ALL_CONSUMERS).await?;
    assert!(!killed.is_empty(), "no lease in flight at the kill");
    let open = crash::open(&store, &ALL_CONSUMERS.map(str::to_owned)).await?;
    assert!(open > 0 && open < deliveries, "{open} of {deliveries} open");
    store.close().await;

    let mut second = spawn(
        &path,
        "worker",
        &[(WORKERS, workers.to_string())],
        &ALL_CONSUMERS,
    );
    second.finish(2 * support::HANG).await?;
    let done = second.signals("worker_done");
    let [report] = done.as_slice() else {
        return Err(format!("worker reports: {done:?}").into());
    };
    let (calls, acked): (u64, u64) = (report[1].parse()?, report[2].parse()?);

    let store = open_store(&path, 4, Duration::from_secs(10)).await?;
    let mut expired = 0;
    let mut retried = 0;
    for consumer in ALL_CONSUMERS {
        let (e, r) = assert_acked_once(&store, consumer, &ids, &killed).await?;
        (expired, retried) = (expired + e, retried + r);
    }
    // Each killed lease expired once; a lease may also expire under load while its handler
    // runs (fencing refuses the late ack), and a handler may fail for want of the write lock
    // and be retried: allowed, counted.
    assert!(expired >= killed.len() as u64);
    assert!(
        acked <= calls && calls <= acked + expired + retried,
        "{calls} calls, {acked} acks"
    );
    eprintln!(
        "{workers} workers: killed with {} lease(s) and {open} open deliveries; the restart \
         acked {acked}; {expired} lease(s) expired, {retried} attempt(s) retried",
        killed.len()
    );

    // Every delivery was handled; per key, each per-key consumer's calls (in the order they
    // committed) follow the events' append order (a redelivery repeats the same event). Only
    // a delivery's last call counts for the order: a leased handler whose lease expired under
    // load may commit its call after the next event's (fencing refuses its ack, and the
    // redelivery, with a higher token, is the call that acked).
    let calls: Vec<(String, i64, i64)> =
        sqlx::query_as("SELECT consumer, n, token FROM t_calls ORDER BY id")
            .fetch_all(store.pool())
            .await?;
    let mut last_token: BTreeMap<(&str, i64), i64> = BTreeMap::new();
    for (consumer, n, token) in &calls {
        let last = last_token.entry((consumer.as_str(), *n)).or_insert(*token);
        *last = (*last).max(*token);
    }
    let mut handled: BTreeSet<(&str, i64)> = BTreeSet::new();
    let mut last: BTreeMap<(&str, i64), i64> = BTreeMap::new();
    let mut out_of_order = 0;
    for (consumer, n, token) in &calls {
        let consumer = consumer.as_str();
        if PER_KEY.contains(&consumer) && last_token[&(consumer, *n)] == *token {
            let previous = last.insert((consumer, n % i64::try_from(KEYS)?), *n);
            if previous.is_some_and(|previous| previous > *n) {
                out_of_order += 1;
            }
        }
        handled.insert((consumer, *n));
    }
    assert_eq!(handled.len() as u64, deliveries, "deliveries handled");
    assert_eq!(out_of_order, 0, "per-key order broken");
    // The transactional consumer's side effects: one per delivery.
    let effects: (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT event_id) FROM t_effects WHERE consumer = 'd.tx'",
    )
    .fetch_one(store.pool())
    .await?;
    let events = i64::try_from(EVENTS)?;
    assert_eq!(effects, (events, events));

    assert_late_tokens_refused(&store, &killed).await?;
    store.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_killed_mid_run_acks_every_delivery_once_in_key_order() -> TestResult {
    let _turn = ONE_RUN_AT_A_TIME.lock().await;
    killed_mid_run(1).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_killed_mid_run_ack_every_delivery_once_in_key_order() -> TestResult {
    let _turn = ONE_RUN_AT_A_TIME.lock().await;
    killed_mid_run(2).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_workers_killed_mid_run_ack_every_delivery_once_in_key_order() -> TestResult {
    let _turn = ONE_RUN_AT_A_TIME.lock().await;
    killed_mid_run(4).await
}
