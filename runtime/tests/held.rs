//! Held batches on a real server (`DispatcherConfig::held_batches`): one transaction claims a
//! batch with row locks, runs every transactional handler on it and acks them all before it
//! commits.
//!
//! - two dispatchers drain 3,000 jobs: every delivery acked once (removed, its one `acked`
//!   attempt row its record), and every handler write and effect row committed once;
//! - a failing handler rolls its batch back (its siblings' writes too, and they run again), and
//!   its failure is recorded with its attempt: retried per the policy, or dead-lettered;
//! - the store API: a held claim hides its rows from every other claimer, fences effect writes
//!   and acks on the held token, and leaves nothing behind when its connection dies.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use evc_runtime::{
    ClaimRequest, DeliveryStatus, DispatchError, Dispatcher, DispatcherConfig, HandlerError,
    NewEvent, PgStore, Store,
};
use sqlx::PgPool;
use support::{TestResult, dispatch_store, statuses, with_database};
use uuid::Uuid;

const CONSUMER: &str = "d.held";

/// Appends `jobs` `test.job` events in one transaction; payload `text` is `text_of(n)` and
/// `count` is `n`. Answers the event ids, job number `n` at index `n`.
async fn append_jobs(
    store: &PgStore,
    jobs: u64,
    text_of: impl Fn(u64) -> &'static str,
) -> Result<Vec<Uuid>, Box<dyn std::error::Error + Send + Sync>> {
    let batch: Vec<NewEvent> = (0..jobs)
        .map(|n| {
            let payload = serde_json::json!(
                {"note_id": support::note_key(n), "text": text_of(n), "count": n}
            );
            support::event("test.job", "1.0.0", payload).into()
        })
        .collect();
    let mut tx = store.pool().begin().await?;
    let receipts = store.append_batch(&mut tx, batch).await?;
    tx.commit().await?;
    Ok(receipts.iter().map(|receipt| receipt.event_id).collect())
}

async fn create_effects_table(pool: &PgPool) -> TestResult {
    sqlx::raw_sql("CREATE TABLE t_effects (event_id text PRIMARY KEY, count bigint NOT NULL)")
        .execute(pool)
        .await?;
    Ok(())
}

/// Writes the job's effect on the handler's transaction (a second write of one event would
/// violate the primary key), records the effect row, and fails as the payload's `text` says:
/// `fail_once` fails transiently on its first call, `poison` fails permanently every time.
#[derive(Default)]
struct WritesEffects {
    calls: Mutex<HashMap<String, u32>>,
}

impl DynHandler for WritesEffects {
    fn handle<'a>(
        &'a self,
        mut context: HandlerContext<'a>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let event_id = context.delivery().event_id.clone();
            let calls = {
                let mut calls = self.calls.lock().expect("calls");
                let entry = calls.entry(event_id.clone()).or_default();
                *entry += 1;
                *entry
            };
            let count = context.payload()["count"].as_i64().unwrap_or(-1);
            let text = context.payload()["text"].as_str().unwrap_or("").to_owned();
            let lease = context.lease().clone();
            let store = context.store;
            let tx = context
                .transaction()
                .ok_or_else(|| HandlerError::permanent("no_transaction"))?;
            sqlx::query("INSERT INTO t_effects (event_id, count) VALUES ($1, $2)")
                .bind(&event_id)
                .bind(count)
                .execute(&mut *tx)
                .await
                .map_err(|_| HandlerError::transient("effect_write_failed"))?;
            store
                .record_effect(tx, &lease, &event_id, "done")
                .await
                .map_err(|_| HandlerError::transient("effect_row_failed"))?;
            match text.as_str() {
                "fail_once" if calls == 1 => Err(HandlerError::transient("first_call_fails")),
                "poison" => Err(HandlerError::permanent("always_fails")),
                _ => Ok(()),
            }
        })
    }
}

async fn settle(store: &PgStore) -> TestResult {
    let start = Instant::now();
    loop {
        let open = store.open_deliveries(&[CONSUMER.to_owned()]).await?;
        if open == 0 {
            return Ok(());
        }
        assert!(
            start.elapsed() < support::HANG,
            "{open} deliveries still open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn held_config(owner: &str) -> DispatcherConfig {
    DispatcherConfig::default()
        .owner(owner)
        .workers(2)
        .batch(50)
        .poll_interval(Duration::from_millis(20))
        .seed(7)
        .held_batches(true)
}

/// Attempts of one delivery: `(attempt, outcome, fencing_token)` in order.
async fn attempts_of(
    store: &PgStore,
    event_id: Uuid,
) -> Result<Vec<(u32, String, i64)>, DispatchError> {
    Ok(store
        .attempts(event_id, CONSUMER)
        .await?
        .into_iter()
        .map(|attempt| (attempt.attempt, attempt.outcome, attempt.token))
        .collect())
}

/// Attempt rows of the deliveries of `ids`, all told.
async fn attempt_rows(store: &PgStore, ids: &[Uuid]) -> Result<usize, DispatchError> {
    let mut rows = 0;
    for id in ids {
        rows += store.attempts(*id, CONSUMER).await?.len();
    }
    Ok(rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_dispatchers_drain_held_batches_each_delivery_acked_and_written_once() -> TestResult {
    with_database(|pool| async move {
        const JOBS: u64 = 3_000;
        create_effects_table(&pool).await?;
        let store = dispatch_store(&pool, 12).await?;
        let ids = append_jobs(&store, JOBS, |_| "n").await?;
        let handler = Arc::new(WritesEffects::default());
        let first = Dispatcher::new(store.clone(), held_config("held-a"))
            .consumer(CONSUMER, Arc::clone(&handler))?
            .start();
        let second = Dispatcher::new(store.clone(), held_config("held-b"))
            .consumer(CONSUMER, Arc::clone(&handler))?
            .start();
        settle(&store).await?;
        let (a, b) = (first.shutdown().await, second.shutdown().await);
        assert_eq!(a.acked + b.acked, JOBS, "acks counted by the dispatchers");
        assert_eq!((a.stale, b.stale), (0, 0));
        // Acked deliveries are removed; each event's record is one attempt row: attempt 1,
        // acked, with the held token (1) and the worker that ran it.
        assert_eq!(
            statuses(&store, CONSUMER).await?,
            vec![("acked".to_owned(), JOBS as i64)]
        );
        // Each event's attempt rows (so all attempt rows: only test.job's d.held has any).
        let mut wrong = Vec::new();
        let mut owners = std::collections::BTreeSet::new();
        let mut effects = 0;
        for id in &ids {
            let attempts = store.attempts(*id, CONSUMER).await?;
            let prefix = |owner: &str| owner.split('/').next().unwrap_or("").to_owned();
            owners.extend(attempts.iter().map(|attempt| prefix(&attempt.owner)));
            let matching = attempts.len() == 1
                && attempts.iter().all(|a| {
                    (a.outcome.as_str(), a.attempt, a.token) == ("acked", 1, 1)
                        && ["held-a", "held-b"].contains(&prefix(&a.owner).as_str())
                });
            if !matching {
                wrong.push((*id, attempts));
            }
            // The handler's effect key is the event id.
            let effect = store.effect(CONSUMER, &id.to_string(), None).await?;
            if effect.is_some_and(|effect| effect.event_id == *id) {
                effects += 1;
            }
        }
        assert!(
            wrong.is_empty(),
            "events without exactly one matching acked attempt: {wrong:?}"
        );
        // Each handler write and effect row once; both dispatchers took part.
        assert_eq!(support::count(&pool, "t_effects").await?, JOBS as i64);
        assert_eq!(effects, JOBS);
        assert_eq!(owners.into_iter().collect::<Vec<_>>(), ["held-a", "held-b"]);
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_handler_rolls_its_held_batch_back_and_its_failure_is_recorded() -> TestResult {
    with_database(|pool| async move {
        const JOBS: u64 = 120;
        create_effects_table(&pool).await?;
        let store = dispatch_store(&pool, 8).await?;
        // Job 10 fails once (transient: retried after 200 ms), job 70 always fails (permanent:
        // dead at once); the rest succeed.
        let ids = append_jobs(&store, JOBS, |n| match n {
            10 => "fail_once",
            70 => "poison",
            _ => "n",
        })
        .await?;
        let handler = Arc::new(WritesEffects::default());
        let dispatcher = Dispatcher::new(store.clone(), held_config("held-f").workers(1))
            .consumer(CONSUMER, Arc::clone(&handler))?
            .start();
        settle(&store).await?;
        let stats = dispatcher.shutdown().await;

        assert_eq!(
            statuses(&store, CONSUMER).await?,
            vec![
                ("acked".to_owned(), JOBS as i64 - 1),
                ("dead".to_owned(), 1)
            ]
        );
        assert_eq!((stats.retried, stats.dead), (1, 1));
        let (retried, dead) = (ids[10], ids[70]);
        // The failures are counted attempts, with the policy's outcome.
        let retried_attempts = attempts_of(&store, retried).await?;
        assert_eq!(
            retried_attempts
                .iter()
                .map(|a| (a.0, a.1.as_str()))
                .collect::<Vec<_>>(),
            [(1, "retry"), (2, "acked")]
        );
        let dead_attempts = attempts_of(&store, dead).await?;
        assert_eq!(
            dead_attempts
                .iter()
                .map(|a| (a.0, a.1.as_str()))
                .collect::<Vec<_>>(),
            [(1, "dead")]
        );
        // Rolled-back work left nothing: one write per acked job (the primary key would have
        // refused a second), none for the dead one, and every other delivery has one attempt.
        assert_eq!(support::count(&pool, "t_effects").await?, JOBS as i64 - 1);
        let dead_writes: i64 =
            sqlx::query_scalar("SELECT count(*) FROM t_effects WHERE event_id = $1")
                .bind(dead.to_string())
                .fetch_one(&pool)
                .await?;
        assert_eq!(dead_writes, 0);
        assert_eq!(attempt_rows(&store, &ids).await?, JOBS as usize + 1);
        // The rolled-back siblings ran again: more calls than deliveries.
        let calls: u32 = handler.calls.lock().expect("calls").values().sum();
        assert!(
            calls > JOBS as u32 + 1,
            "{calls} calls: no batch was rolled back and rerun"
        );
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_claim_hides_its_rows_fences_on_its_token_and_dies_with_its_connection() -> TestResult
{
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 8).await?;
        append_jobs(&store, 3, |_| "n").await?;

        let mut holder = store.pool().begin().await?;
        let held = store
            .claim(&mut holder, &ClaimRequest::held(CONSUMER, "w1", 10))
            .await?;
        assert_eq!(held.len(), 3);
        assert!(held.iter().all(|c| c.lease.is_held()));
        assert!(
            held.iter()
                .all(|c| (c.lease.token, c.lease.attempt) == (1, 1))
        );
        // Nothing was written: the rows are pending, and hidden from every other claimer.
        assert_eq!(
            statuses(&store, CONSUMER).await?,
            vec![("pending".to_owned(), 3)]
        );
        let mut other = store.pool().begin().await?;
        assert!(
            store
                .claim(&mut other, &ClaimRequest::held(CONSUMER, "w2", 10))
                .await?
                .is_empty()
        );
        other.rollback().await?;
        let leased =
            support::claim(&store, CONSUMER, "w3", 10, Duration::from_secs(30), false).await?;
        assert!(leased.is_empty(), "a leased claim took held rows");

        // Effect writes are fenced on the held token; a forged token is refused.
        let lease = held[0].lease.clone();
        let key = lease.event_id.to_string();
        assert!(store.record_effect(&mut holder, &lease, &key, "d").await?);
        assert!(!store.record_effect(&mut holder, &lease, &key, "d").await?);
        let mut forged = held[1].lease.clone();
        forged.token = 5;
        let before = store.stale_tokens();
        let error = store
            .record_effect(&mut holder, &forged, "forged", "d")
            .await
            .expect_err("a forged token");
        assert!(error.is_stale_token(), "{error}");
        // Acks likewise: the forged lease is refused, the held ones acked.
        let leases = [&held[0].lease, &forged, &held[2].lease];
        let acked = store.ack(&mut holder, &leases).await?;
        assert_eq!(acked.acked, 2);
        assert_eq!(acked.stale, [(forged.event_id, forged.consumer.clone(), 5)]);
        assert_eq!(store.stale_tokens(), before + 2);
        holder.commit().await?;
        assert_eq!(
            statuses(&store, CONSUMER).await?,
            vec![("acked".to_owned(), 2), ("pending".to_owned(), 1)]
        );

        // A held claim whose connection dies (as when its process is killed) leaves nothing:
        // the delivery is due again, no attempt counted, its effect row gone.
        let mut doomed = store.pool().acquire().await?;
        sqlx::raw_sql("BEGIN").execute(&mut *doomed).await?;
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *doomed)
            .await?;
        let last = store
            .claim(&mut doomed, &ClaimRequest::held(CONSUMER, "w4", 10))
            .await?;
        assert_eq!(last.len(), 1);
        let key = last[0].lease.event_id.to_string();
        assert!(
            store
                .record_effect(&mut doomed, &last[0].lease, &key, "d")
                .await?
        );
        let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .fetch_one(&pool)
            .await?;
        assert!(killed);
        doomed.detach();
        // `pg_terminate_backend` only signals: the backend, and its row lock, go a moment
        // later. Wait until it is gone (a bound on a hang, not a timing assertion).
        let start = Instant::now();
        loop {
            let alive: bool =
                sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)")
                    .bind(pid)
                    .fetch_one(&pool)
                    .await?;
            if !alive {
                break;
            }
            assert!(
                start.elapsed() < support::HANG,
                "the terminated backend never went"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let delivery = store
            .delivery(last[0].lease.event_id, CONSUMER)
            .await?
            .ok_or("no delivery")?;
        assert_eq!(
            (delivery.status, delivery.attempts, delivery.token),
            (DeliveryStatus::Pending, 0, 0)
        );
        assert_eq!(store.effect(CONSUMER, &key, None).await?, None);
        let mut again = store.pool().begin().await?;
        let retaken = store
            .claim(&mut again, &ClaimRequest::held(CONSUMER, "w5", 10))
            .await?;
        assert_eq!(retaken.len(), 1);
        let leases: Vec<_> = retaken.iter().map(|c| &c.lease).collect();
        assert_eq!(store.ack(&mut again, &leases).await?.acked, 1);
        again.commit().await?;
        assert_eq!(
            statuses(&store, CONSUMER).await?,
            vec![("acked".to_owned(), 3)]
        );
        Ok(())
    })
    .await
}

/// Records the server process that ran each call (its transaction's connection).
#[derive(Default)]
struct RecordsBackend {
    backends: Mutex<Vec<i32>>,
}

impl DynHandler for RecordsBackend {
    fn handle<'a>(
        &'a self,
        mut context: HandlerContext<'a>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let tx = context
                .transaction()
                .ok_or_else(|| HandlerError::permanent("no_transaction"))?;
            let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&mut *tx)
                .await
                .map_err(|_| HandlerError::transient("pid_query_failed"))?;
            self.backends.lock().expect("backends").push(backend);
            Ok(())
        })
    }
}

/// Waits (at most [`support::HANG`]) until every open connection of `pool` is back and idle;
/// connections go back to an sqlx pool in the background.
async fn all_idle(pool: &PgPool, whose: &str) {
    let start = Instant::now();
    while pool.num_idle() < pool.size() as usize {
        assert!(
            start.elapsed() < support::HANG,
            "{} of {} connections still taken: {whose}",
            pool.size() as usize - pool.num_idle(),
            pool.size()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_held_worker_keeps_its_connection_and_an_idle_one_gives_it_back() -> TestResult {
    with_database(|pool| async move {
        const JOBS: u64 = 600;
        let store = dispatch_store(&pool, 4).await?;
        // Four connections open and idle: a worker that took one from the pool for each batch
        // would run its batches on several of them (the pool hands idle connections out in
        // turn).
        let mut warm = Vec::new();
        for _ in 0..4 {
            warm.push(store.pool().acquire().await?);
        }
        drop(warm);
        all_idle(store.pool(), "the warm-up's").await;
        assert_eq!(store.pool().size(), 4);
        append_jobs(&store, JOBS, |_| "n").await?;
        let handler = Arc::new(RecordsBackend::default());
        let dispatcher = Dispatcher::new(
            store.clone(),
            held_config("held-c").workers(1).listen(false),
        )
        .consumer(CONSUMER, Arc::clone(&handler))?
        .start();
        settle(&store).await?;
        // Idle now (its claims find nothing): the worker holds no connection between polls.
        all_idle(store.pool(), "an idle dispatcher's").await;
        let stats = dispatcher.shutdown().await;
        assert_eq!(stats.acked, JOBS);
        let backends = handler.backends.lock().expect("backends").clone();
        assert_eq!(backends.len(), JOBS as usize);
        let mut distinct = backends.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            1,
            "{} batches of 50 ran on {} connections",
            JOBS / 50,
            distinct.len()
        );
        Ok(())
    })
    .await
}
