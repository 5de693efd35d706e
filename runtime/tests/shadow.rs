//! Shadow mode on a real server: a consumer switched to shadow runs its handler, but nothing
//! it writes stays (the transactional kind's writes are rolled back, in single and held
//! batches; effect writes become intents) and what it meant to do is kept as one
//! reconciliation row per delivery. Switched back to live, the same handler's effects commit.

mod support;

use std::time::{Duration, Instant};

use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use evc_runtime::{ConsumerMode, Dispatcher, DispatcherConfig, HandlerError, PgStore};
use sqlx::PgPool;
use support::{TestResult, append_notes, dispatch_store, with_database};

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

async fn append_jobs(store: &PgStore, from: u64, jobs: u64) -> TestResult {
    support::append_numbered(store, "test.job", from..from + jobs, |_| "j").await
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
    loop {
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM evc_deliveries WHERE consumer = ANY($1) \
             AND status IN ('pending', 'leased')",
        )
        .bind(&CONSUMERS[..])
        .fetch_one(store.pool())
        .await?;
        if open == 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{open} deliveries open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stats = handle.shutdown().await;
    assert_eq!((stats.dead, stats.quarantined, stats.retried), (0, 0, 0));
    Ok(())
}

/// Rows of `table` per consumer of [`CONSUMERS`], in that order.
async fn per_consumer(pool: &PgPool, table: &str) -> Result<Vec<i64>, sqlx::Error> {
    let mut counts = Vec::new();
    for consumer in CONSUMERS {
        counts.push(
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT count(*) FROM {table} WHERE consumer = $1"
            )))
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
            let state = store.set_mode(consumer, ConsumerMode::Shadow).await?;
            assert_eq!(state.mode, ConsumerMode::Shadow);
        }
        append_notes(&store, 3, 3).await?;
        append_jobs(&store, 0, 3).await?;
        dispatch(&store).await?;

        // Nothing written by the handlers stayed; each delivery has its reconciliation row.
        assert_eq!(per_consumer(&pool, "t_effects").await?, [0, 0, 0]);
        assert_eq!(per_consumer(&pool, "evc_consumer_effects").await?, [0, 0, 0]);
        assert_eq!(per_consumer(&pool, "evc_reconciliations").await?, [3, 3, 3]);
        // Each row holds its handler's intent, and the token of the attempt that acked it.
        let mismatched: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM evc_reconciliations r JOIN evc_events e \
                ON e.event_id = r.event_id \
             WHERE r.intended <> jsonb_build_array(jsonb_build_object( \
                    'effect_key', r.event_id::text, \
                    'outcome_digest', 'count-' || (e.payload->>'count'))) \
                OR NOT EXISTS (SELECT 1 FROM evc_delivery_attempts a \
                    WHERE a.event_id = r.event_id AND a.consumer = r.consumer \
                    AND a.outcome = 'acked' AND a.fencing_token = r.fencing_token)",
        )
        .fetch_one(&pool)
        .await?;
        assert_eq!(mismatched, 0, "reconciliation rows differ from the handlers' intents");

        // Live again: the same handlers' effects commit, and no reconciliation row is added.
        for consumer in CONSUMERS {
            store.set_mode(consumer, ConsumerMode::Live).await?;
        }
        sqlx::raw_sql("DELETE FROM evc_deliveries WHERE consumer = 'd.leased'")
            .execute(&pool)
            .await?;
        support::append_numbered(&store, "test.note", 10..12, |_| "n").await?;
        append_jobs(&store, 10, 2).await?;
        dispatch(&store).await?;
        assert_eq!(per_consumer(&pool, "t_effects").await?, [2, 2, 2]);
        assert_eq!(per_consumer(&pool, "evc_consumer_effects").await?, [2, 2, 2]);
        assert_eq!(per_consumer(&pool, "evc_reconciliations").await?, [3, 3, 3]);
        Ok(())
    })
    .await
}
