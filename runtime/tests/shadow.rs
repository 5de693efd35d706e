//! Shadow mode on a real server: a consumer switched to shadow runs its handler, but nothing
//! it writes stays (the transactional kind's writes are rolled back, in single and held
//! batches; effect writes become intents) and what it meant to do is kept as one
//! reconciliation row per delivery. Switched back to live, the same handler's effects commit.

mod support;

use std::time::{Duration, Instant};

use evc_runtime::Operate;
use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use evc_runtime::{
    ConsumerMode, DispatchError, Dispatcher, DispatcherConfig, HandlerError, Intent, NewEvent,
    PgStore, Store,
};
use sqlx::PgPool;
use support::{TestResult, dispatch_store, with_database};
use uuid::Uuid;

/// One of each handler path: transactional (per key), held batches, leased.
const CONSUMERS: [&str; 3] = ["d.tx", "d.held", "d.unordered"];

/// Writes its effect (on the handler's transaction; for the leased kind, on its own
/// connection, unless in shadow mode, as a leased handler must) and records the effect row.
struct WritesEffects;

impl DynHandler for WritesEffects {
    fn handle<'a>(
        &'a self,
        mut context: HandlerContext<'a>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let event_id = context.delivery().event_id.clone();
            let consumer = context.delivery().consumer.clone();
            let digest = format!("count-{}", context.payload()["count"]);
            let lease = context.lease().clone();
            let store = context.store;
            let shadow = context.is_shadow();
            let failed = |_| HandlerError::transient("effect_write_failed");
            let write = "INSERT INTO t_effects (consumer, event_id) VALUES ($1, $2)";
            let fresh = if let Some(tx) = context.transaction() {
                sqlx::query(write)
                    .bind(&consumer)
                    .bind(&event_id)
                    .execute(&mut *tx)
                    .await
                    .map_err(failed)?;
                store.record_effect(tx, &lease, &event_id, &digest).await
            } else {
                let mut connection = store.pool().acquire().await.map_err(failed)?;
                if !shadow {
                    sqlx::query(write)
                        .bind(&consumer)
                        .bind(&event_id)
                        .execute(&mut *connection)
                        .await
                        .map_err(failed)?;
                }
                store
                    .record_effect(&mut connection, &lease, &event_id, &digest)
                    .await
            };
            match fresh {
                Ok(true) => Ok(()),
                Ok(false) => Err(HandlerError::permanent("effect_recorded_twice")),
                Err(_) => Err(HandlerError::transient("effect_row_failed")),
            }
        })
    }
}

/// An appended event: its number (payload `count`) and id.
type Numbered = (u64, Uuid);

/// Appends one `event_type` 1.0.0 event per number of `numbers` in one transaction (payload
/// `count` the number); answers each number with its event id.
async fn append(
    store: &PgStore,
    event_type: &'static str,
    numbers: std::ops::Range<u64>,
) -> Result<Vec<Numbered>, Box<dyn std::error::Error + Send + Sync>> {
    let numbers: Vec<u64> = numbers.collect();
    let batch: Vec<NewEvent> = numbers
        .iter()
        .map(|n| {
            let payload =
                serde_json::json!({"note_id": support::note_key(*n), "text": "n", "count": n});
            support::event(event_type, "1.0.0", payload).into()
        })
        .collect();
    let mut tx = store.pool().begin().await?;
    let receipts = store.append_batch(&mut tx, batch).await?;
    tx.commit().await?;
    Ok(numbers
        .into_iter()
        .zip(receipts.iter().map(|receipt| receipt.event_id))
        .collect())
}

/// The events `consumer` of [`CONSUMERS`] gets: the jobs for `d.held`, the notes for the
/// others.
fn events_of<'a>(consumer: &str, notes: &'a [Numbered], jobs: &'a [Numbered]) -> &'a [Numbered] {
    if consumer == "d.held" { jobs } else { notes }
}

/// Effect rows per consumer of [`CONSUMERS`], in that order, over the events each gets (the
/// handler's effect key is the event id).
async fn effects(
    store: &PgStore,
    notes: &[Numbered],
    jobs: &[Numbered],
) -> Result<Vec<usize>, DispatchError> {
    let mut counts = Vec::new();
    for consumer in CONSUMERS {
        let mut count = 0;
        for (_, event_id) in events_of(consumer, notes, jobs) {
            if store
                .effect(consumer, &event_id.to_string(), None)
                .await?
                .is_some()
            {
                count += 1;
            }
        }
        counts.push(count);
    }
    Ok(counts)
}

/// Reconciliation rows per consumer of [`CONSUMERS`], in that order, over the events each
/// gets.
async fn reconciliations(
    store: &PgStore,
    notes: &[Numbered],
    jobs: &[Numbered],
) -> Result<Vec<usize>, DispatchError> {
    let mut counts = Vec::new();
    for consumer in CONSUMERS {
        let mut count = 0;
        for (_, event_id) in events_of(consumer, notes, jobs) {
            count += store.reconciliations(*event_id, consumer).await?.len();
        }
        counts.push(count);
    }
    Ok(counts)
}

/// Runs a dispatcher for [`CONSUMERS`] until none of their deliveries is open.
async fn dispatch(store: &PgStore) -> TestResult {
    let config = DispatcherConfig::default()
        .owner("shadow-test")
        .workers(1)
        .batch(10)
        .poll_interval(Duration::from_millis(20))
        .held_batches(true)
        .seed(3);
    let mut dispatcher = Dispatcher::new(store.clone(), config);
    for consumer in CONSUMERS {
        dispatcher = dispatcher.consumer(consumer, WritesEffects)?;
    }
    let handle = dispatcher.start();
    let start = Instant::now();
    let consumers = CONSUMERS.map(str::to_owned);
    loop {
        let open = store.open_deliveries(&consumers).await?;
        if open == 0 {
            break;
        }
        assert!(start.elapsed() < support::HANG, "{open} deliveries open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stats = handle.shutdown().await;
    assert_eq!((stats.dead, stats.quarantined, stats.retried), (0, 0, 0));
    Ok(())
}

/// The handlers' own writes (`t_effects` rows) per consumer of [`CONSUMERS`], in that order.
async fn handler_writes(pool: &PgPool) -> Result<Vec<i64>, sqlx::Error> {
    let mut counts = Vec::new();
    for consumer in CONSUMERS {
        counts.push(
            sqlx::query_scalar("SELECT count(*) FROM t_effects WHERE consumer = $1")
                .bind(consumer)
                .fetch_one(pool)
                .await?,
        );
    }
    Ok(counts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_causes_no_side_effect_and_records_what_it_meant_to_do() -> TestResult {
    with_database(|pool| async move {
        sqlx::raw_sql(
            "CREATE TABLE t_effects (consumer text, event_id text, PRIMARY KEY (consumer, event_id))",
        )
        .execute(&pool)
        .await?;
        let store = dispatch_store(&pool, 8).await?;
        for consumer in CONSUMERS {
            let state = store.set_mode(consumer, ConsumerMode::Shadow, &support::change()).await?;
            assert_eq!(state.mode, ConsumerMode::Shadow);
        }
        let mut notes = append(&store, "test.note", 0..3).await?;
        let mut jobs = append(&store, "test.job", 0..3).await?;
        dispatch(&store).await?;

        // Nothing written by the handlers stayed; each delivery has its reconciliation row.
        assert_eq!(handler_writes(&pool).await?, [0, 0, 0]);
        assert_eq!(effects(&store, &notes, &jobs).await?, [0, 0, 0]);
        assert_eq!(reconciliations(&store, &notes, &jobs).await?, [3, 3, 3]);
        // Each row holds its handler's intent, and the token of the attempt that acked it.
        for consumer in CONSUMERS {
            for (n, event_id) in events_of(consumer, &notes, &jobs) {
                let rows = store.reconciliations(*event_id, consumer).await?;
                let intent = Intent {
                    effect_key: event_id.to_string(),
                    outcome_digest: format!("count-{n}"),
                };
                assert_eq!(rows.len(), 1, "{consumer} {n}: {rows:?}");
                assert_eq!(rows[0].intents, [intent], "{consumer} {n}");
                let acked: Vec<i64> = store
                    .attempts(*event_id, consumer)
                    .await?
                    .into_iter()
                    .filter(|attempt| attempt.outcome == "acked")
                    .map(|attempt| attempt.token)
                    .collect();
                assert_eq!(acked, [rows[0].token], "{consumer} {n}");
            }
        }

        // Live again: the same handlers' effects commit, and no reconciliation row is added.
        for consumer in CONSUMERS {
            store.set_mode(consumer, ConsumerMode::Live, &support::change()).await?;
        }
        let live_notes = append(&store, "test.note", 10..12).await?;
        let live_jobs = append(&store, "test.job", 10..12).await?;
        dispatch(&store).await?;
        assert_eq!(handler_writes(&pool).await?, [2, 2, 2]);
        assert_eq!(effects(&store, &live_notes, &live_jobs).await?, [2, 2, 2]);
        assert_eq!(
            reconciliations(&store, &live_notes, &live_jobs).await?,
            [0, 0, 0]
        );
        notes.extend(live_notes);
        jobs.extend(live_jobs);
        assert_eq!(effects(&store, &notes, &jobs).await?, [2, 2, 2]);
        assert_eq!(reconciliations(&store, &notes, &jobs).await?, [3, 3, 3]);
        Ok(())
    })
    .await
}
