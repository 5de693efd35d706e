//! Crash injection with separate processes killed by SIGKILL, and dispatchers as separate
//! processes.
//!
//! Child processes are this test binary itself, re-run with `--exact crash_child`: the
//! `crash_child` test does nothing unless [`ROLE`] is set in its environment. A child connects
//! to the parent's test database, serves one or more consumers and, at the crash point the
//! environment names, tells the parent through a row of `t_signal` and then blocks forever (its
//! lease renewals keep running), so the parent kills it at a known moment. A second child (the
//! restart) then serves the same consumers until nothing is open. After each crash the parent
//! checks that nothing is lost, that no effect is visible twice and that the killed attempt's
//! token — presented late, as the dead process would have — is refused.

mod support;

#[path = "support/crash.rs"]
mod crash;

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::{Duration, Instant};

use crash::{
    ALL_CONSUMERS, BoxError, ChildProcess, Counting, CrashStore, OWNER, PER_KEY, POINT, Point,
    VICTIM_LEASE, claim_and_block, env, restart_config, serve_until_done, victim,
};
use evc_runtime::{
    Connection, DispatchError, DispatcherConfig, FailureClass, HandlerKind, Lease, Observe,
    PgStore, RetryDecision, Store,
};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use support::{DISPATCH_REGISTRY, TestResult, append_notes, dispatch_store, statuses};
use uuid::Uuid;

/// The server URL (the parent's `DATABASE_URL` or the default).
const URL: &str = "EVC_CRASH_URL";
/// The test database on that server.
const DATABASE: &str = "EVC_CRASH_DATABASE";

const DEFAULT_URL: &str = "postgres://root@localhost/test";

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
    let options = PgConnectOptions::from_str(&env(URL)?)?.database(&env(DATABASE)?);
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await?;
    let store = PgStore::new(pool.clone(), DISPATCH_REGISTRY)?;
    let consumers = crash::consumers()?;
    let owner = env(OWNER)?;
    match role {
        // A dispatcher that claimed and dies before its handler runs.
        "claim" => claim_and_block(&store, &consumers, &owner).await,
        "victim" => victim(&store, &consumers, owner, Point::parse(&env(POINT)?)?).await,
        // The restarted dispatcher, or one of several dispatcher processes: serves until
        // nothing is open, then shuts down and reports its counts.
        "restart" | "worker" => {
            let config = if role == "restart" {
                restart_config(owner.clone())
            } else {
                DispatcherConfig::default()
                    .workers(2)
                    .batch(20)
                    .lease(Duration::from_secs(10))
                    .recovery_interval(Duration::from_millis(500))
                    .owner(owner.clone())
                    .poll_interval(Duration::from_millis(20))
                    .heartbeat_interval(Duration::from_millis(200))
                    .seed(2)
            };
            let calls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
            let handler = Counting::new(&calls, role == "restart", None);
            let (calls, acked) = serve_until_done(&store, config, &consumers, handler).await?;
            store
                .report(&format!("{role}_done"), &owner, calls, acked)
                .await?;
            pool.close().await;
            Ok(())
        }
        other => Err(format!("unknown crash role {other}").into()),
    }
}

/// Signals are rows of `t_signal`, committed on their own connection; the side effects are
/// rows of `t_effects` and `t_seen`. Per-key order is checked on the attempt rows, so calls are
/// not recorded.
impl CrashStore for PgStore {
    const RECORDS_CALLS: bool = false;

    async fn signal(&self, point: &str, lease: Option<&Lease>) -> Result<(), BoxError> {
        sqlx::query(
            "INSERT INTO t_signal (point, event_id, consumer, owner, token, attempt) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(point)
        .bind(lease.map(|l| l.event_id))
        .bind(lease.map(|l| l.consumer.clone()))
        .bind(lease.map(|l| l.owner.clone()))
        .bind(lease.map(|l| l.token))
        .bind(lease.map(|l| i32::try_from(l.attempt).unwrap_or(i32::MAX)))
        .execute(self.pool())
        .await?;
        Ok(())
    }

    async fn report(&self, point: &str, owner: &str, calls: u64, acked: u64) -> TestResult {
        sqlx::query("INSERT INTO t_signal (point, owner, calls, acked) VALUES ($1, $2, $3, $4)")
            .bind(point)
            .bind(owner)
            .bind(i64::try_from(calls)?)
            .bind(i64::try_from(acked)?)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    async fn write_side_effect(
        &self,
        connection: &mut Connection<Self>,
        lease: &Lease,
        first: bool,
    ) -> TestResult {
        let attempt = i32::try_from(lease.attempt).unwrap_or(i32::MAX);
        if first {
            sqlx::query("INSERT INTO t_effects (event_id, consumer, attempt) VALUES ($1, $2, $3)")
                .bind(lease.event_id)
                .bind(&lease.consumer)
                .bind(attempt)
                .execute(&mut *connection)
                .await?;
        }
        sqlx::query(
            "INSERT INTO t_seen (event_id, consumer, attempt, first) VALUES ($1, $2, $3, $4)",
        )
        .bind(lease.event_id)
        .bind(&lease.consumer)
        .bind(attempt)
        .bind(first)
        .execute(&mut *connection)
        .await?;
        Ok(())
    }

    async fn record_call(&self, _: &mut Connection<Self>, _: &Lease, _: u64) -> TestResult {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The parent side.
// ---------------------------------------------------------------------------------------------

/// Spawns a child in `role` on the test database of `pool`.
fn spawn(pool: &PgPool, role: &str, point: &str, consumers: &[&str], owner: &str) -> ChildProcess {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let database = pool
        .connect_options()
        .get_database()
        .expect("the test pool names its database")
        .to_owned();
    ChildProcess::spawn(
        role,
        &[
            (POINT, point.to_owned()),
            (URL, url),
            (DATABASE, database),
            (crash::CONSUMERS, consumers.join(",")),
            (OWNER, owner.to_owned()),
        ],
        false,
    )
}

async fn create_tables(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(
        "CREATE TABLE t_signal (id bigint GENERATED ALWAYS AS IDENTITY, point text NOT NULL, \
             event_id uuid, consumer text, owner text, token bigint, attempt int, calls bigint, \
             acked bigint); \
         CREATE TABLE t_effects (event_id uuid NOT NULL, consumer text NOT NULL, \
             attempt int NOT NULL); \
         CREATE TABLE t_seen (event_id uuid NOT NULL, consumer text NOT NULL, \
             attempt int NOT NULL, first boolean NOT NULL);",
    )
    .execute(pool)
    .await
    .map(|_| ())
}

async fn signals(pool: &PgPool, point: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM t_signal WHERE point = $1")
        .bind(point)
        .fetch_one(pool)
        .await
}

async fn wait_for_signal(pool: &PgPool, point: &str, n: i64) -> TestResult {
    let start = Instant::now();
    let bound = 2 * support::HANG;
    while signals(pool, point).await? < n {
        if start.elapsed() > bound {
            return Err(format!("no {point} signal after {bound:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// The leases of `consumer` held right now, in event order, as the killed process held them.
async fn leases(store: &PgStore, consumer: &str) -> Result<Vec<Lease>, DispatchError> {
    Ok(store
        .leases(consumer)
        .await?
        .into_iter()
        .map(|leased| {
            Lease::new(
                leased.event_id,
                leased.consumer,
                leased.owner,
                leased.token,
                leased.attempt,
                0.0,
            )
        })
        .collect())
}

/// The database's clock now, in epoch seconds (the clock lease ends are read on).
async fn database_now(pool: &PgPool) -> Result<f64, sqlx::Error> {
    sqlx::query_scalar("SELECT extract(epoch FROM now())::float8")
        .fetch_one(pool)
        .await
}

/// One crash: `events` notes (one key each) for `consumer`; a child in `role` stopping at
/// `point` is killed once it signalled `ready` `events_ready` times; a restarted child serves
/// the consumer; then nothing is lost, every effect is visible once and the killed leases'
/// tokens are refused.
async fn crash(consumer: &'static str, events: u64, role: &'static str, point: &'static str) {
    let result = support::with_database(move |pool| async move {
        create_tables(&pool).await?;
        let store = dispatch_store(&pool, 4).await?;
        let event_ids: Vec<Uuid> = append_notes(&store, events, events)
            .await?
            .into_iter()
            .map(|receipt| receipt.event_id)
            .collect();
        let kind = DISPATCH_REGISTRY
            .consumer(consumer)
            .map(|c| c.handler)
            .ok_or("unknown consumer")?;

        let mut victim = spawn(&pool, role, point, &[consumer], "victim");
        // At `between_renewals` the handler signals right after a renewal: the kill falls
        // between two of them.
        let (ready, n) = crash::ready_signal(point, events)?;
        wait_for_signal(&pool, ready, i64::try_from(n)?).await?;

        // What the victim left visible before it dies.
        let effects = support::count(&pool, "t_effects").await?;
        match (point, kind) {
            // The transactional kind's effect is in its open transaction: invisible.
            ("after_effect", HandlerKind::Transactional) => assert_eq!(effects, 0),
            // The leased kind committed its effect before the ack.
            ("after_effect", HandlerKind::Leased) => assert_eq!(effects, 1),
            _ => assert_eq!(effects, 0),
        }
        let killed = leases(&store, consumer).await?;
        assert!(!killed.is_empty(), "the victim held no lease");
        if point == "during_shutdown" {
            // The running handler and the rest of its batch: none released yet.
            assert_eq!(killed.len(), usize::try_from(events)?);
        }
        victim.kill()?;
        let killed_at = Instant::now();

        // Nothing settled by the dead process; its leases are still live for a while.
        assert_eq!(
            statuses(&store, consumer).await?,
            [("leased".to_owned(), i64::try_from(killed.len())?)]
                .into_iter()
                .chain((killed.len() < usize::try_from(events)?).then(|| {
                    (
                        "pending".to_owned(),
                        i64::try_from(events).unwrap_or(0) - killed.len() as i64,
                    )
                }))
                .collect::<Vec<_>>()
        );
        if point == "between_renewals" {
            let now = database_now(&pool).await?;
            let live = store.leases(consumer).await?;
            assert!(
                !live.is_empty() && live.iter().all(|lease| lease.lease_until > now),
                "the lease expired before the kill"
            );
        }
        if kind == HandlerKind::Transactional {
            // The killed transaction rolled back: nothing of the attempt is visible.
            assert_eq!(support::count(&pool, "t_effects").await?, 0);
            for event_id in &event_ids {
                assert_eq!(
                    store.effect(consumer, &event_id.to_string(), None).await?,
                    None,
                    "an effect row of the killed transaction"
                );
            }
        }

        let mut restart = spawn(&pool, "restart", "", &[consumer], "restart");
        restart.finish(2 * support::HANG).await?;
        eprintln!(
            "{consumer} killed {point}: {} lease(s) recovered and settled {:?} after the kill",
            killed.len(),
            killed_at.elapsed()
        );

        assert_outcome(&pool, &store, consumer, &event_ids, &killed).await?;
        if (point, kind) == ("after_effect", HandlerKind::Leased) {
            // The redelivered attempt found the effect recorded and skipped the side effect.
            let seen: Vec<(i32, bool)> =
                sqlx::query_as("SELECT attempt, first FROM t_seen ORDER BY attempt")
                    .fetch_all(&pool)
                    .await?;
            assert_eq!(seen, [(1, true), (2, false)]);
        }

        // The killed attempts' tokens, presented late: refused, and nothing changes.
        let before = store.stale_tokens();
        for lease in &killed {
            let late = support::ack(&store, &[lease]).await?;
            let stale = vec![(lease.event_id, lease.consumer.clone(), lease.token)];
            assert_eq!((late.acked, late.stale), (0, stale), "late ack");
            let error = store
                .fail(lease, FailureClass::Transient, "late", RetryDecision::Dead)
                .await
                .expect_err("late fail");
            assert!(error.is_stale_token(), "{error}");
            let mut tx = store.pool().begin().await?;
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
        assert_outcome(&pool, &store, consumer, &event_ids, &killed).await?;
        Ok(())
    })
    .await;
    if let Err(error) = result {
        panic!("{consumer} {point}: {error}");
    }
}

/// Checks that the delivery of every event of `event_ids` to `consumer` has exactly one
/// `acked` attempt row, and that it carries the delivery's final token (the highest of its
/// attempts). An ack deletes the delivery, so its attempt rows are all that is left to check.
/// Answers how many attempt rows ended each way (by outcome).
async fn assert_acked_once(
    store: &PgStore,
    consumer: &str,
    event_ids: &[Uuid],
) -> Result<BTreeMap<String, u64>, BoxError> {
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    for event_id in event_ids {
        let attempts = store.attempts(*event_id, consumer).await?;
        support::assert_one_final_ack(&attempts, &format!("{consumer} {event_id}"));
        for attempt in attempts {
            *outcomes.entry(attempt.outcome).or_default() += 1;
        }
    }
    Ok(outcomes)
}

/// Every delivery acked once, with one `acked` attempt row carrying its final token; each
/// killed lease ended as `lease_expired`; one effect row and one side effect per delivery.
async fn assert_outcome(
    pool: &PgPool,
    store: &PgStore,
    consumer: &str,
    event_ids: &[Uuid],
    killed: &[Lease],
) -> TestResult {
    let events = i64::try_from(event_ids.len())?;
    assert_eq!(
        statuses(store, consumer).await?,
        [("acked".to_owned(), events)]
    );
    assert_acked_once(store, consumer, event_ids).await?;
    for lease in killed {
        let outcome: Vec<String> = store
            .attempts(lease.event_id, &lease.consumer)
            .await?
            .into_iter()
            .filter(|attempt| attempt.token == lease.token)
            .map(|attempt| attempt.outcome)
            .collect();
        assert_eq!(outcome, ["lease_expired"], "the killed attempt's row");
    }
    let effects: (i64, i64) =
        sqlx::query_as("SELECT count(*), count(DISTINCT event_id) FROM t_effects")
            .fetch_one(pool)
            .await?;
    assert_eq!(effects, (events, events), "side effects visible once each");
    // Effect rows once each: every event's row, under its key (the event id), and exactly one
    // attempt per event found its key unrecorded (`first`, committed with the row it wrote).
    for event_id in event_ids {
        let effect = store
            .effect(consumer, &event_id.to_string(), None)
            .await?
            .ok_or_else(|| format!("{consumer} {event_id}: no effect row"))?;
        assert_eq!(effect.event_id, *event_id, "the effect row's delivery");
    }
    let firsts: (i64, i64) =
        sqlx::query_as("SELECT count(*), count(DISTINCT event_id) FROM t_seen WHERE first")
            .fetch_one(pool)
            .await?;
    assert_eq!(firsts, (events, events), "effect rows once each");
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
// Dispatchers as separate processes.
// ---------------------------------------------------------------------------------------------

/// Keys the events spread over (10,000 events: 4 per key).
const KEYS: u64 = 2_500;

/// Events of the dispatcher-process runs, as the issue asks: 10,000 × 3 consumers.
const EVENTS: u64 = 10_000;

/// The dispatcher-process runs take turns (see `runtime/tests/dispatch.rs`).
static ONE_RUN_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn processes(dispatchers: usize, events: u64) -> TestResult {
    support::with_database(move |pool| async move {
        create_tables(&pool).await?;
        let producer = dispatch_store(&pool, 4).await?;
        let event_ids = support::ids(&append_notes(&producer, events, KEYS).await?);
        let started = Instant::now();
        let mut children: Vec<ChildProcess> = (0..dispatchers)
            .map(|n| spawn(&pool, "worker", "", &ALL_CONSUMERS, &format!("p{n}")))
            .collect();
        let (mut samples, mut worst) = (0u64, 0usize);
        while children
            .iter_mut()
            .any(|c| matches!(c.child.try_wait(), Ok(None)))
        {
            worst = worst.max(support::doubly_leased_keys(&producer, &PER_KEY).await?);
            samples += 1;
            assert!(
                started.elapsed() < 2 * support::HANG,
                "dispatcher processes still running"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for child in &mut children {
            child.finish(Duration::from_secs(1)).await?;
        }
        let elapsed = started.elapsed();
        let deliveries = events * 3;
        eprintln!(
            "{dispatchers} dispatcher processes: {deliveries} deliveries in {elapsed:?} \
             ({:.0}/s), {samples} lease samples",
            deliveries as f64 / elapsed.as_secs_f64()
        );

        // A lease may expire under load while its handler runs (a process starved of the CPU
        // misses its renewals): recovery hands the delivery on and the late ack is refused.
        // That is fencing at work; the checks count it and allow it, and never allow a
        // delivery acked twice, left unacked or acked out of key order.
        let mut expired = 0;
        for consumer in ALL_CONSUMERS {
            expired += i64::try_from(producer.count_attempts(consumer, "lease_expired").await?)?;
        }
        if expired > 0 {
            eprintln!("{expired} lease(s) expired under load and were redelivered");
        }
        // Every process reported; together they called each delivery at least once (again
        // only after an expired lease) and acked each once.
        let (reports, calls, acked): (i64, Option<i64>, Option<i64>) = sqlx::query_as(
            "SELECT count(*), sum(calls)::int8, sum(acked)::int8 FROM t_signal \
             WHERE point = 'worker_done'",
        )
        .fetch_one(&pool)
        .await?;
        let deliveries = i64::try_from(deliveries)?;
        assert_eq!(reports, i64::try_from(dispatchers)?);
        let calls = calls.unwrap_or(0);
        assert!(
            (deliveries..=deliveries + expired).contains(&calls),
            "{calls} handler calls for {deliveries} deliveries and {expired} expired leases"
        );
        assert_eq!(acked, Some(deliveries), "acks counted by the dispatchers");
        assert_eq!(worst, 0, "a key of a per-key consumer had two live leases");
        let events = i64::try_from(events)?;
        for consumer in ALL_CONSUMERS {
            assert_eq!(
                statuses(&producer, consumer).await?,
                [("acked".to_owned(), events)]
            );
        }
        // One `acked` attempt row per delivery, with the delivery's final token; no outcome
        // but `acked`, and `lease_expired` where a lease expired under load.
        for consumer in ALL_CONSUMERS {
            let mut outcomes = assert_acked_once(&producer, consumer, &event_ids).await?;
            outcomes.remove("lease_expired");
            assert_eq!(
                outcomes,
                BTreeMap::from([("acked".to_owned(), u64::try_from(events)?)]),
                "{consumer}: attempt outcomes"
            );
        }
        // Per-key order: acks of a key's deliveries (attempt rows, in insertion order) follow
        // the key's append order (its events' seq), for every per-key consumer, across
        // processes.
        let (acks, out_of_order) =
            support::acks_out_of_key_order(&producer, &PER_KEY, &event_ids).await?;
        assert_eq!(
            acks,
            events * i64::try_from(PER_KEY.len())?,
            "acks checked for order"
        );
        assert_eq!(out_of_order, 0, "per-key order broken");
        // The transactional consumer's side effects: one per delivery.
        let effects: (i64, i64) = sqlx::query_as(
            "SELECT count(*), count(DISTINCT event_id) FROM t_effects WHERE consumer = 'd.tx'",
        )
        .fetch_one(&pool)
        .await?;
        assert_eq!(effects, (events, events));
        // Work was spread: every process handled something (only meaningful with enough
        // events per process).
        let idle: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM t_signal WHERE point = 'worker_done' AND calls = 0",
        )
        .fetch_one(&pool)
        .await?;
        eprintln!("{idle} of {dispatchers} dispatcher processes handled nothing");
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_dispatcher_process_acks_every_delivery_exactly_once_in_key_order() -> TestResult {
    let _turn = ONE_RUN_AT_A_TIME.lock().await;
    processes(1, EVENTS).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_dispatcher_processes_ack_every_delivery_exactly_once_in_key_order() -> TestResult {
    let _turn = ONE_RUN_AT_A_TIME.lock().await;
    processes(2, EVENTS).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_dispatcher_processes_ack_every_delivery_exactly_once_in_key_order() -> TestResult {
    let _turn = ONE_RUN_AT_A_TIME.lock().await;
    processes(4, EVENTS).await
}
