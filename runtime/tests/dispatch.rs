//! The dispatcher against a real server: every delivery acked exactly once by 1, 2 and 4
//! dispatchers with per-key order kept and never two live leases on a key; stale tokens
//! refused and counted; idempotent effects; transactional rollback; per-key head-of-line;
//! lease renewal; graceful shutdown.

mod support;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use evc_runtime::{
    DeliveryStatus, DispatchError, Dispatcher, DispatcherConfig, FailureClass, HandlerError,
    PgStore, RetryDecision, Store,
};
use sqlx::postgres::PgPool;
use support::{
    TestResult, append_notes, attempts_of, dispatch_store, ids, statuses, with_database,
};

/// Keys the events spread over (10,000 events: 4 per key).
const KEYS: u64 = 2_500;

/// Events of the ack-exactly-once runs, as the issue asks: 10,000 × 3 consumers.
const EVENTS: u64 = 10_000;

/// The ack-exactly-once runs take turns: run side by side on two cores they starve each other
/// (and the other tests) past their time limits, while each alone settles in seconds.
static ONE_RUN_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const PER_KEY: [&str; 2] = ["d.leased", "d.tx"];
const CONSUMERS: [&str; 3] = ["d.leased", "d.tx", "d.unordered"];

fn config(owner: &str) -> DispatcherConfig {
    DispatcherConfig::default()
        .owner(owner)
        .workers(2)
        .batch(20)
        .lease(Duration::from_secs(10))
        .poll_interval(Duration::from_millis(20))
        .recovery_interval(Duration::from_millis(500))
        .heartbeat_interval(Duration::from_millis(200))
        .seed(7)
}

fn store_error(error: DispatchError) -> HandlerError {
    HandlerError::transient(if error.is_stale_token() {
        "stale_token"
    } else {
        "store"
    })
}

/// Records every call per (consumer, key) and any overlap of two calls on one key.
#[derive(Default)]
struct Recorder {
    calls: Mutex<BTreeMap<(String, String), Vec<i64>>>,
    in_flight: Mutex<HashSet<(String, String)>>,
    overlaps: AtomicU64,
    total: AtomicU64,
}

struct Recording {
    recorder: Arc<Recorder>,
    per_key: bool,
}

impl DynHandler for Recording {
    fn handle<'a>(
        &'a self,
        mut context: HandlerContext<'a>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let key = (
                context.lease().consumer.clone(),
                context.claimed.order_key.clone(),
            );
            if self.per_key
                && !self
                    .recorder
                    .in_flight
                    .lock()
                    .expect("lock")
                    .insert(key.clone())
            {
                self.recorder.overlaps.fetch_add(1, Ordering::SeqCst);
            }
            self.recorder
                .calls
                .lock()
                .expect("lock")
                .entry(key.clone())
                .or_default()
                .push(context.claimed.event_seq);
            self.recorder.total.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            let lease = context.lease().clone();
            let store = context.store;
            if let Some(tx) = context.transaction() {
                let first = store
                    .record_effect(tx, &lease, &lease.event_id.to_string(), "digest")
                    .await
                    .map_err(store_error)?;
                if first {
                    sqlx::query("INSERT INTO t_effects (event_id, consumer) VALUES ($1, $2)")
                        .bind(lease.event_id)
                        .bind(&lease.consumer)
                        .execute(&mut *tx)
                        .await
                        .map_err(|_| HandlerError::transient("effect_insert"))?;
                }
            }
            if self.per_key {
                self.recorder.in_flight.lock().expect("lock").remove(&key);
            }
            Ok(())
        })
    }
}

async fn create_effects_table(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("CREATE TABLE t_effects (event_id uuid NOT NULL, consumer text NOT NULL)")
        .execute(pool)
        .await
        .map(|_| ())
}

/// The names of the consumers of `store`'s registry.
fn consumers(store: &PgStore) -> Vec<String> {
    store
        .registry()
        .consumers
        .iter()
        .map(|consumer| consumer.name.to_owned())
        .collect()
}

async fn wait_until_settled(store: &PgStore) -> Result<(), DispatchError> {
    let start = Instant::now();
    let consumers = consumers(store);
    loop {
        let open = store.open_deliveries(&consumers).await?;
        if open == 0 {
            return Ok(());
        }
        assert!(
            start.elapsed() < support::HANG,
            "{open} deliveries still open after {:?}",
            support::HANG
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn exactly_once(dispatchers: usize, events: u64) -> TestResult {
    with_database(move |pool| async move {
        create_effects_table(&pool).await?;
        let producer = dispatch_store(&pool, 4).await?;
        let event_ids = ids(&append_notes(&producer, events, KEYS).await?);
        let recorder = Arc::new(Recorder::default());
        let started = Instant::now();
        let mut handles = Vec::new();
        let mut stores = Vec::new();
        for n in 0..dispatchers {
            let store = dispatch_store(&pool, 12).await?;
            let mut dispatcher =
                Dispatcher::new(store.clone(), config(&format!("d{n}")).workers(4));
            for consumer in CONSUMERS {
                dispatcher = dispatcher.consumer(
                    consumer,
                    Recording {
                        recorder: Arc::clone(&recorder),
                        per_key: PER_KEY.contains(&consumer),
                    },
                )?;
            }
            stores.push(store);
            handles.push(dispatcher.start());
        }
        // Sample live leases while the dispatchers run.
        let done = Arc::new(AtomicBool::new(false));
        let sampler = {
            let (observer, done) = (producer.clone(), Arc::clone(&done));
            tokio::spawn(async move {
                let (mut samples, mut worst) = (0u64, 0usize);
                while !done.load(Ordering::SeqCst) {
                    worst = worst.max(support::doubly_leased_keys(&observer, &PER_KEY).await?);
                    samples += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Ok::<_, DispatchError>((samples, worst))
            })
        };
        wait_until_settled(&producer).await?;
        let elapsed = started.elapsed();
        done.store(true, Ordering::SeqCst);
        let (samples, worst) = sampler.await??;
        let mut acked = 0;
        for handle in handles {
            acked += handle.shutdown().await.acked;
        }
        let deliveries = events * 3;
        eprintln!(
            "{dispatchers} dispatcher(s): {deliveries} deliveries settled in {elapsed:?} \
             ({:.0}/s), {samples} lease samples",
            deliveries as f64 / elapsed.as_secs_f64()
        );

        // On a loaded machine a lease may expire while its handler runs: recovery hands the
        // delivery to another worker and the first one's late ack is refused as stale. That is
        // the fencing working, so the invariants below allow it and count it; what they never
        // allow is a delivery acked twice or not at all, or a key acked out of order.
        let mut expired_u64 = 0;
        for consumer in consumers(&producer) {
            expired_u64 += producer.count_attempts(&consumer, "lease_expired").await?;
        }
        let expired = i64::try_from(expired_u64)?;
        if expired > 0 {
            eprintln!("{expired} lease(s) expired under load and were redelivered");
        }
        assert_eq!(acked, deliveries, "acks counted by the dispatchers");
        assert_eq!(worst, 0, "a key of a per-key consumer had two live leases");
        // A second handler call on a key overlaps only with a call whose lease expired.
        assert!(recorder.overlaps.load(Ordering::SeqCst) <= expired_u64);
        let calls = recorder.total.load(Ordering::SeqCst);
        assert!(
            (deliveries..=deliveries + expired_u64).contains(&calls),
            "{calls} handler calls for {deliveries} deliveries and {expired} expired leases"
        );
        for consumer in CONSUMERS {
            assert_eq!(
                statuses(&producer, consumer).await?,
                [("acked".to_owned(), i64::try_from(events)?)]
            );
        }
        // No delivery row left (acks delete them), and one `acked` attempt row for every event
        // and consumer: none acked twice, none missed.
        assert_eq!(support::count_all_deliveries(&producer).await?, 0);
        let attempts = attempts_of(&producer, &event_ids).await?;
        for consumer in CONSUMERS {
            let acked: Vec<_> = attempts
                .iter()
                .filter(|(_, c, attempt)| c == consumer && attempt.outcome == "acked")
                .map(|(event_id, _, _)| event_id)
                .collect();
            let distinct: HashSet<_> = acked.iter().collect();
            assert_eq!(
                (acked.len(), distinct.len()),
                (event_ids.len(), event_ids.len())
            );
        }
        // No attempt ended otherwise than acked, or expired under load.
        let mut other: BTreeMap<(&str, &str, Option<&str>), u64> = BTreeMap::new();
        for (_, consumer, attempt) in &attempts {
            if !["acked", "lease_expired"].contains(&attempt.outcome.as_str()) {
                let outcome = (
                    consumer.as_str(),
                    attempt.outcome.as_str(),
                    attempt.error_code.as_deref(),
                );
                *other.entry(outcome).or_default() += 1;
            }
        }
        assert_eq!(other, BTreeMap::new());
        // The transactional consumer's effects: one per delivery.
        let effects: (i64, i64) = sqlx::query_as(
            "SELECT count(*), count(DISTINCT event_id) FROM t_effects WHERE consumer = 'd.tx'",
        )
        .fetch_one(&pool)
        .await?;
        assert_eq!(effects, (i64::try_from(events)?, i64::try_from(events)?));
        // Per-key order: acks of a key's deliveries (attempt rows, in insertion order) follow
        // the key's append order (its events' seq); handler calls never go back to an earlier
        // event of a key (a redelivery repeats the same one).
        let (acks, out_of_order) =
            support::acks_out_of_key_order(&producer, &PER_KEY, &event_ids).await?;
        assert_eq!(
            acks,
            i64::try_from(events)? * i64::try_from(PER_KEY.len())?,
            "acks checked for order"
        );
        assert_eq!(out_of_order, 0, "per-key order broken");
        for ((consumer, key), seqs) in recorder.calls.lock().expect("lock").iter() {
            if PER_KEY.contains(&consumer.as_str()) {
                assert!(
                    seqs.windows(2).all(|w| w[0] <= w[1]),
                    "{consumer} {key} called out of order: {seqs:?}"
                );
            }
        }
        // Stale refusals come only from leases that expired.
        let stale: u64 = stores.iter().map(PgStore::stale_tokens).sum();
        if expired == 0 {
            assert_eq!(stale, 0);
        }
        // The dispatchers shut down: their workers are not silent, so no heartbeat is left.
        let workers = producer.status(Duration::from_secs(60)).await?.workers;
        assert_eq!(workers, []);
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_dispatcher_acks_every_delivery_exactly_once_in_key_order() -> TestResult {
    let _turn = ONE_RUN_AT_A_TIME.lock().await;
    exactly_once(1, EVENTS).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_dispatchers_ack_every_delivery_exactly_once_in_key_order() -> TestResult {
    let _turn = ONE_RUN_AT_A_TIME.lock().await;
    exactly_once(2, EVENTS).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_dispatchers_ack_every_delivery_exactly_once_in_key_order() -> TestResult {
    let _turn = ONE_RUN_AT_A_TIME.lock().await;
    exactly_once(4, EVENTS).await
}

/// The checks of the exactly-once runs catch what they look for: two live leases on one key,
/// and a key's acks out of its append order (here forced by claiming without per-key ordering).
#[tokio::test]
async fn the_order_checks_see_two_leases_on_a_key_and_acks_out_of_order() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 4).await?;
        let event_ids = ids(&append_notes(&store, 2, 1).await?);
        assert_eq!(support::doubly_leased_keys(&store, &PER_KEY).await?, 0);
        let claimed = support::claim(
            &store,
            "d.leased",
            "owner",
            10,
            Duration::from_secs(30),
            false,
        )
        .await?;
        assert_eq!(claimed.len(), 2);
        assert_eq!(support::doubly_leased_keys(&store, &PER_KEY).await?, 1);
        support::ack_current(&store, &claimed[1].lease).await?;
        support::ack_current(&store, &claimed[0].lease).await?;
        assert_eq!(support::doubly_leased_keys(&store, &PER_KEY).await?, 0);
        let order = support::acks_out_of_key_order(&store, &PER_KEY, &event_ids).await?;
        assert_eq!(order, (2, 1));
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_stale_token_is_refused_and_counted_after_expiry_and_reclaim() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 4).await?;
        append_notes(&store, 1, 1).await?;
        let short = Duration::from_millis(100);
        let first = support::claim(&store, "d.leased", "owner-a", 10, short, true).await?;
        assert_eq!(first.len(), 1);
        let old = first[0].lease.clone();
        assert_eq!((old.attempt, old.token), (1, 1));
        // Still leased: nothing to claim, nothing to recover.
        assert!(
            support::claim(&store, "d.leased", "owner-b", 10, short, true)
                .await?
                .is_empty()
        );
        assert_eq!(store.recover_expired(100).await?, 0);
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(store.recover_expired(100).await?, 1);
        let second = support::claim(
            &store,
            "d.leased",
            "owner-b",
            10,
            Duration::from_secs(10),
            true,
        )
        .await?;
        assert_eq!(second.len(), 1);
        let new = second[0].lease.clone();
        assert_eq!((new.attempt, new.token), (2, 2));

        assert_eq!(store.stale_tokens(), 0);
        let late = support::ack(&store, &[&old]).await?;
        assert_eq!(late.acked, 0, "old token");
        assert_eq!(
            late.stale,
            [(old.event_id, old.consumer.clone(), old.token)]
        );
        assert_eq!(store.stale_tokens(), 1);
        let error = store
            .fail(&old, FailureClass::Transient, "late", RetryDecision::Dead)
            .await
            .expect_err("old token");
        assert!(error.is_stale_token());
        let mut connection = store.pool().acquire().await?;
        assert!(
            store
                .renew(&mut connection, &[&old], short)
                .await?
                .is_empty()
        );
        let mut tx = store.pool().begin().await?;
        let error = store
            .record_effect(&mut tx, &old, "effect", "d")
            .await
            .expect_err("old token");
        assert!(error.is_stale_token());
        tx.rollback().await?;
        assert_eq!(store.stale_tokens(), 4);

        let renewed = store
            .renew(&mut connection, &[&new], Duration::from_secs(10))
            .await?;
        assert_eq!(renewed, [new.event_id]);
        drop(connection);
        support::ack_current(&store, &new).await?;
        assert_eq!(
            statuses(&store, "d.leased").await?,
            [("acked".to_owned(), 1)]
        );
        let attempts: Vec<(u32, String, i64, String)> = store
            .attempts(new.event_id, "d.leased")
            .await?
            .into_iter()
            .map(|a| (a.attempt, a.owner, a.token, a.outcome))
            .collect();
        assert_eq!(
            attempts,
            [
                (1, "owner-a".to_owned(), 1, "lease_expired".to_owned()),
                (2, "owner-b".to_owned(), 2, "acked".to_owned()),
            ]
        );
        // A second ack of the same (now acked) lease is stale too.
        let again = support::ack(&store, &[&new]).await?;
        assert_eq!(again.acked, 0, "acked");
        assert_eq!(
            again.stale,
            [(new.event_id, new.consumer.clone(), new.token)]
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_redelivered_event_records_its_effect_once() -> TestResult {
    with_database(|pool| async move {
        create_effects_table(&pool).await?;
        let store = dispatch_store(&pool, 4).await?;
        append_notes(&store, 1, 1).await?;
        let short = Duration::from_millis(100);
        // Attempt 1: effect and side effect commit, then the worker "dies" before its ack.
        let claimed = support::claim(&store, "d.leased", "owner-a", 1, short, true).await?;
        let lease = &claimed[0].lease;
        let first_token = lease.token;
        let mut tx = store.pool().begin().await?;
        assert!(store.record_effect(&mut tx, lease, "note", "d1").await?);
        sqlx::query("INSERT INTO t_effects VALUES ($1, 'd.leased')")
            .bind(lease.event_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(store.recover_expired(10).await?, 1);
        // Attempt 2: the effect is known; the handler skips its side effect and acks.
        let claimed = support::claim(
            &store,
            "d.leased",
            "owner-b",
            1,
            Duration::from_secs(5),
            true,
        )
        .await?;
        let lease = &claimed[0].lease;
        let mut tx = store.pool().begin().await?;
        assert!(!store.record_effect(&mut tx, lease, "note", "d1").await?);
        tx.commit().await?;
        support::ack_current(&store, lease).await?;
        assert_eq!(support::count(&pool, "t_effects").await?, 1);
        // The effect row is the first attempt's: the redelivery wrote none.
        let effect = store
            .effect("d.leased", "note", None)
            .await?
            .map(|e| (e.event_id, e.outcome_digest, e.token));
        assert_eq!(
            effect,
            Some((lease.event_id, "d1".to_owned(), Some(first_token)))
        );
        Ok(())
    })
    .await
}

/// Writes a row on the handler's transaction, then fails as the payload's `text` says.
struct WritesThenFails;

impl DynHandler for WritesThenFails {
    fn handle<'a>(
        &'a self,
        mut context: HandlerContext<'a>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let mode = context.payload()["text"].as_str().unwrap_or("").to_owned();
            let event_id = context.lease().event_id;
            let tx = context
                .transaction()
                .ok_or_else(|| HandlerError::permanent("not_transactional"))?;
            sqlx::query("INSERT INTO t_effects VALUES ($1, 'd.tx')")
                .bind(event_id)
                .execute(&mut *tx)
                .await
                .map_err(|_| HandlerError::transient("insert"))?;
            match mode.as_str() {
                "error" => Err(HandlerError::permanent("refused")),
                "panic" => panic!("handler panics after its write"),
                _ => Ok(()),
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_transactional_handler_leaves_no_write() -> TestResult {
    with_database(|pool| async move {
        create_effects_table(&pool).await?;
        let store = dispatch_store(&pool, 8).await?;
        let mut tx = store.pool().begin().await?;
        let mut event_ids = Vec::new();
        for (key, mode) in [(1, "ok"), (2, "error"), (3, "panic")] {
            let payload = serde_json::json!({"note_id": support::note_key(key), "text": mode});
            let receipt = store
                .append(
                    &mut tx,
                    support::event("test.note", "1.0.0", payload),
                    evc_runtime::AppendOptions::new(),
                )
                .await?;
            event_ids.push(receipt.event_id);
        }
        tx.commit().await?;
        let handle = Dispatcher::new(store.clone(), config("rollback"))
            .consumer("d.tx", WritesThenFails)?
            .start();
        let start = Instant::now();
        while support::unsettled(&store, "d.tx").await? > 0 {
            assert!(start.elapsed() < support::HANG, "not settled");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let stats = handle.shutdown().await;
        assert_eq!((stats.acked, stats.dead), (1, 2));
        assert_eq!(
            statuses(&store, "d.tx").await?,
            [("acked".to_owned(), 1), ("dead".to_owned(), 2)]
        );
        // Only the successful handler's write committed.
        assert_eq!(support::count(&pool, "t_effects").await?, 1);
        let mut codes: Vec<(String, Option<String>)> = attempts_of(&store, &event_ids)
            .await?
            .into_iter()
            .map(|(_, _, attempt)| (attempt.outcome, attempt.error_code))
            .collect();
        codes.sort();
        assert_eq!(
            codes,
            [
                ("acked".to_owned(), None),
                ("dead".to_owned(), Some("handler_panicked".to_owned())),
                ("dead".to_owned(), Some("refused".to_owned())),
            ]
        );
        Ok(())
    })
    .await
}

/// Fails transiently for events whose `text` is `fail`; records when each event was handled.
/// The first `fail` call waits for `release` before it fails, so a test can look at the other
/// keys while that head is in flight.
#[derive(Default)]
struct FailsSome {
    handled: Mutex<Vec<(i64, String, Instant)>>,
    release: tokio::sync::Notify,
    held_once: AtomicBool,
}

impl DynHandler for FailsSome {
    fn handle<'a>(
        &'a self,
        context: HandlerContext<'a>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let text = context.payload()["text"].as_str().unwrap_or("").to_owned();
            self.handled.lock().expect("lock").push((
                context.claimed.event_seq,
                text.clone(),
                Instant::now(),
            ));
            if text == "fail" {
                if !self.held_once.swap(true, Ordering::SeqCst) {
                    self.release.notified().await;
                }
                Err(HandlerError::transient("unavailable"))
            } else {
                Ok(())
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_head_blocks_its_key_while_other_keys_proceed() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 8).await?;
        let mut tx = store.pool().begin().await?;
        // Key 1: a failing head, then a follower; key 2: two events.
        let mut event_ids = BTreeMap::new();
        for (key, text) in [(1, "fail"), (1, "after"), (2, "b1"), (2, "b2")] {
            let payload = serde_json::json!({"note_id": support::note_key(key), "text": text});
            let receipt = store
                .append(
                    &mut tx,
                    support::event("test.note", "1.0.0", payload),
                    evc_runtime::AppendOptions::new(),
                )
                .await?;
            event_ids.insert(text, receipt.event_id);
        }
        tx.commit().await?;
        let handler = Arc::new(FailsSome::default());
        // Batches of one: the worker holding the head holds nothing else, and the other worker
        // is free for key 2.
        let handle = Dispatcher::new(store.clone(), config("hol").batch(1))
            .consumer("d.leased", Arc::clone(&handler))?
            .start();

        // The head's first attempt is held in flight: key 2 is done meanwhile, and the follower
        // waits, untouched. Judged by what happened, not by how long it took.
        let start = Instant::now();
        loop {
            let head_running = handler
                .handled
                .lock()
                .expect("lock")
                .iter()
                .any(|h| h.1 == "fail");
            // Acked: each has its `acked` attempt row, and its delivery row is gone.
            let (mut acked, mut rows) = (0, 0);
            for text in ["b1", "b2"] {
                let attempts = store.attempts(event_ids[text], "d.leased").await?;
                acked += attempts.iter().filter(|a| a.outcome == "acked").count();
                rows += usize::from(store.delivery(event_ids[text], "d.leased").await?.is_some());
            }
            if head_running && (acked, rows) == (2, 0) {
                break;
            }
            assert!(start.elapsed() < support::HANG, "key 2 not done");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let follower = store
            .delivery(event_ids["after"], "d.leased")
            .await?
            .map(|d| (d.status, d.attempts));
        assert_eq!(follower, Some((DeliveryStatus::Pending, 0)));
        handler.release.notify_one();

        let start = Instant::now();
        while statuses(&store, "d.leased").await?
            != [("acked".to_owned(), 3), ("dead".to_owned(), 1)]
        {
            assert!(start.elapsed() < support::HANG, "not settled");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        handle.shutdown().await;
        let handled = handler.handled.lock().expect("lock").clone();
        let fails: Vec<&Instant> = handled
            .iter()
            .filter(|h| h.1 == "fail")
            .map(|h| &h.2)
            .collect();
        assert_eq!(fails.len(), 4, "max_attempts of the policy");
        let after = handled
            .iter()
            .find(|h| h.1 == "after")
            .map(|h| h.2)
            .expect("handled");
        assert!(
            fails.iter().all(|&&fail| fail < after),
            "the follower ran before the head ended"
        );
        Ok(())
    })
    .await
}

/// Sleeps `delay` and signals when it started and finished.
struct Slow {
    delay: Duration,
    started: Arc<tokio::sync::Notify>,
    finished: Arc<AtomicU64>,
}

impl DynHandler for Slow {
    fn handle<'a>(
        &'a self,
        _context: HandlerContext<'a>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            self.started.notify_one();
            tokio::time::sleep(self.delay).await;
            self.finished.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_the_running_handler_and_releases_the_rest() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 8).await?;
        let event_ids = ids(&append_notes(&store, 5, 5).await?);
        let started = Arc::new(tokio::sync::Notify::new());
        let finished = Arc::new(AtomicU64::new(0));
        let handle = Dispatcher::new(store.clone(), config("shutdown").workers(1).batch(5))
            .consumer(
                "d.unordered",
                Slow {
                    delay: Duration::from_millis(500),
                    started: Arc::clone(&started),
                    finished: Arc::clone(&finished),
                },
            )?
            .start();
        tokio::time::timeout(support::HANG, started.notified()).await?;
        let leased = statuses(&store, "d.unordered").await?;
        assert_eq!(leased, [("leased".to_owned(), 5)]);
        let stats = handle.shutdown().await;
        assert_eq!(
            finished.load(Ordering::SeqCst),
            1,
            "the running handler finished"
        );
        assert_eq!((stats.acked, stats.released), (1, 4));
        assert_eq!(
            statuses(&store, "d.unordered").await?,
            [("acked".to_owned(), 1), ("pending".to_owned(), 4)]
        );
        // Released as if never claimed: attempt 0 again, no attempt rows.
        let mut attempts = Vec::new();
        for &event_id in &event_ids {
            if let Some(delivery) = store.delivery(event_id, "d.unordered").await?
                && delivery.status == DeliveryStatus::Pending
            {
                attempts.push(delivery.attempts);
            }
        }
        assert_eq!(attempts, [0, 0, 0, 0]);
        assert_eq!(attempts_of(&store, &event_ids).await?.len(), 1);
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_a_long_handler_s_lease() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 8).await?;
        let event_ids = ids(&append_notes(&store, 2, 2).await?);
        let handle = Dispatcher::new(
            store.clone(),
            config("renew")
                .workers(1)
                .batch(2)
                .lease(Duration::from_millis(300))
                .recovery_interval(Duration::from_millis(50)),
        )
        .consumer(
            "d.leased",
            Slow {
                delay: Duration::from_millis(800),
                started: Arc::new(tokio::sync::Notify::new()),
                finished: Arc::new(AtomicU64::new(0)),
            },
        )?
        .start();
        let start = Instant::now();
        while statuses(&store, "d.leased").await? != [("acked".to_owned(), 2)] {
            assert!(start.elapsed() < support::HANG, "not settled");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let stats = handle.shutdown().await;
        assert_eq!((stats.acked, stats.recovered, stats.stale), (2, 0, 0));
        assert_eq!(store.stale_tokens(), 0);
        let outcomes: Vec<String> = attempts_of(&store, &event_ids)
            .await?
            .into_iter()
            .map(|(_, _, attempt)| attempt.outcome)
            .collect();
        assert_eq!(outcomes, ["acked", "acked"]);
        Ok(())
    })
    .await
}
