//! Handler timeouts on a real server: a handler that runs past its consumer's
//! `handler_timeout` (or the dispatcher's override) is dropped unfinished, its attempt fails as
//! transient with code `handler_timeout` and is retried per the retry policy; a transactional
//! handler's writes are rolled back. A handler within its timeout is unaffected.
//!
//! The handlers that time out never finish on their own (pending for ever), so the outcomes
//! cannot depend on how fast the machine is; deadlines only stop a broken run from hanging.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use evc_runtime::{
    AppendReceipt, ConsumerDescriptor, DispatchError, Dispatcher, DispatcherConfig, HandlerError,
    PgStore, Registry,
};
use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use sqlx::postgres::{PgPool, PgPoolOptions};
use support::{DISPATCH_REGISTRY, TestResult, append_notes, statuses, with_database};

/// Sets its flag when dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The first attempt writes a row on the handler's transaction (if it has one), then never
/// finishes, holding a [`DropFlag`]; later attempts write their row and succeed. Rows are
/// `(event_id, 'attempt-<n>')` in `t_effects`.
struct HangsFirst {
    /// Set when the first attempt's future is dropped.
    dropped: Arc<AtomicBool>,
    /// Attempts that ran to completion.
    completed: Arc<AtomicU64>,
}

impl HangsFirst {
    fn new() -> Self {
        Self {
            dropped: Arc::new(AtomicBool::new(false)),
            completed: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl DynHandler for HangsFirst {
    fn handle<'a>(
        &'a self,
        mut context: HandlerContext<'a>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let attempt = context.lease().attempt;
            let event_id = context.lease().event_id;
            if let Some(tx) = context.transaction() {
                sqlx::query("INSERT INTO t_effects VALUES ($1, $2)")
                    .bind(event_id)
                    .bind(format!("attempt-{attempt}"))
                    .execute(&mut *tx)
                    .await
                    .map_err(|_| HandlerError::transient("insert"))?;
            }
            if attempt == 1 {
                let _guard = DropFlag(Arc::clone(&self.dropped));
                std::future::pending::<()>().await;
            }
            self.completed.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }
}

/// [`DISPATCH_REGISTRY`] with `handler_timeout_ms` set on the named consumers.
fn registry_with_timeouts(timeouts: &[(&str, u64)]) -> Registry {
    let consumers: Vec<ConsumerDescriptor> = DISPATCH_REGISTRY
        .consumers
        .iter()
        .map(|consumer| {
            let mut consumer = *consumer;
            if let Some((_, ms)) = timeouts.iter().find(|(name, _)| *name == consumer.name) {
                consumer.handler_timeout_ms = Some(*ms);
            }
            consumer
        })
        .collect();
    Registry {
        consumers: Box::leak(consumers.into_boxed_slice()),
        ..DISPATCH_REGISTRY
    }
}

/// A store of `registry` over its own pool of 8 connections to the test database of `pool`.
async fn store_of(
    pool: &PgPool,
    registry: Registry,
) -> Result<PgStore, Box<dyn std::error::Error + Send + Sync>> {
    let options = (*pool.connect_options()).clone();
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await?;
    Ok(PgStore::new(pool, registry)?)
}

fn config(owner: &str) -> DispatcherConfig {
    DispatcherConfig::default()
        .owner(owner)
        .workers(1)
        .batch(1)
        .lease(Duration::from_secs(10))
        .poll_interval(Duration::from_millis(20))
        .recovery_interval(Duration::from_millis(500))
        .seed(7)
}

async fn create_effects_table(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("CREATE TABLE t_effects (event_id uuid NOT NULL, consumer text NOT NULL)")
        .execute(pool)
        .await
        .map(|_| ())
}

/// Waits until no delivery of `consumer` is pending or leased; the deadline only keeps a
/// broken run from hanging the suite.
async fn settled(store: &PgStore, consumer: &str) -> TestResult {
    let start = Instant::now();
    while support::unsettled(store, consumer).await? > 0 {
        assert!(start.elapsed() < support::HANG, "not settled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// The attempt rows of the deliveries of `receipts`' events to `consumer`, event by event in
/// the order they were written, as `(attempt, outcome, error code)`.
async fn attempts(
    store: &PgStore,
    receipts: &[AppendReceipt],
    consumer: &str,
) -> Result<Vec<(u32, String, Option<String>)>, DispatchError> {
    let mut rows = Vec::new();
    for receipt in receipts {
        for attempt in store.attempts(receipt.event_id, consumer).await? {
            rows.push((attempt.attempt, attempt.outcome, attempt.error_code));
        }
    }
    Ok(rows)
}

fn timed_out_then_acked() -> Vec<(u32, String, Option<String>)> {
    vec![
        (1, "retry".to_owned(), Some("handler_timeout".to_owned())),
        (2, "acked".to_owned(), None),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_handler_past_its_timeout_is_cancelled_rolled_back_and_retried()
-> TestResult {
    with_database(|pool| async move {
        create_effects_table(&pool).await?;
        let store = store_of(&pool, registry_with_timeouts(&[("d.tx", 300)])).await?;
        let receipts = append_notes(&store, 1, 1).await?;
        let handler = HangsFirst::new();
        let (dropped, completed) = (Arc::clone(&handler.dropped), Arc::clone(&handler.completed));
        let handle = Dispatcher::new(store.clone(), config("timeout-tx"))
            .consumer("d.tx", handler)?
            .start();
        settled(&store, "d.tx").await?;
        let stats = handle.shutdown().await;

        assert!(
            dropped.load(Ordering::SeqCst),
            "the hung attempt was dropped"
        );
        assert_eq!(completed.load(Ordering::SeqCst), 1);
        assert_eq!((stats.acked, stats.retried), (1, 1));
        assert_eq!(statuses(&store, "d.tx").await?, [("acked".to_owned(), 1)]);
        assert_eq!(
            attempts(&store, &receipts, "d.tx").await?,
            timed_out_then_acked()
        );
        // The hung attempt's write was rolled back; only the second attempt's committed.
        let rows: Vec<String> = sqlx::query_scalar("SELECT consumer FROM t_effects")
            .fetch_all(&pool)
            .await?;
        assert_eq!(rows, ["attempt-2"]);
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_handler_past_its_timeout_is_cancelled_and_retried() -> TestResult {
    with_database(|pool| async move {
        let store = store_of(&pool, registry_with_timeouts(&[("d.unordered", 300)])).await?;
        let receipts = append_notes(&store, 1, 1).await?;
        let handler = HangsFirst::new();
        let (dropped, completed) = (Arc::clone(&handler.dropped), Arc::clone(&handler.completed));
        let handle = Dispatcher::new(store.clone(), config("timeout-leased"))
            .consumer("d.unordered", handler)?
            .start();
        settled(&store, "d.unordered").await?;
        let stats = handle.shutdown().await;

        assert!(
            dropped.load(Ordering::SeqCst),
            "the hung attempt was dropped"
        );
        assert_eq!(completed.load(Ordering::SeqCst), 1);
        assert_eq!((stats.acked, stats.retried, stats.cancelled), (1, 1, 0));
        assert_eq!(
            attempts(&store, &receipts, "d.unordered").await?,
            timed_out_then_acked()
        );
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatcher_override_times_out_a_held_batch_handler() -> TestResult {
    with_database(|pool| async move {
        create_effects_table(&pool).await?;
        // `d.held` sets no timeout in the registry: the dispatcher's override applies.
        let store = store_of(&pool, DISPATCH_REGISTRY).await?;
        let mut tx = store.pool().begin().await?;
        let receipt = store
            .append(
                &mut tx,
                support::event("test.job", "1.0.0", support::note(&support::note_key(1))),
                evc_runtime::AppendOptions::new(),
            )
            .await?;
        tx.commit().await?;
        let handler = HangsFirst::new();
        let (dropped, completed) = (Arc::clone(&handler.dropped), Arc::clone(&handler.completed));
        let handle = Dispatcher::new(
            store.clone(),
            config("timeout-held")
                .held_batches(true)
                .handler_timeout(Some(Duration::from_millis(300))),
        )
        .consumer("d.held", handler)?
        .start();
        settled(&store, "d.held").await?;
        let stats = handle.shutdown().await;

        assert!(
            dropped.load(Ordering::SeqCst),
            "the hung attempt was dropped"
        );
        assert_eq!(completed.load(Ordering::SeqCst), 1);
        assert_eq!(stats.acked, 1);
        assert_eq!(
            attempts(&store, &[receipt], "d.held").await?,
            timed_out_then_acked()
        );
        let rows: Vec<String> = sqlx::query_scalar("SELECT consumer FROM t_effects")
            .fetch_all(&pool)
            .await?;
        assert_eq!(rows, ["attempt-2"]);
        Ok(())
    })
    .await
}

/// Succeeds on every attempt after letting the runtime run other tasks.
struct Quick(Arc<AtomicU64>);

impl DynHandler for Quick {
    fn handle<'a>(
        &'a self,
        _context: HandlerContext<'a>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_within_its_timeout_is_unaffected() -> TestResult {
    with_database(|pool| async move {
        // A timeout no test run comes near: every handler finishes well within it.
        let registry = registry_with_timeouts(&[("d.leased", 600_000), ("d.tx", 600_000)]);
        let store = store_of(&pool, registry).await?;
        let receipts = append_notes(&store, 6, 3).await?;
        let ran = Arc::new(AtomicU64::new(0));
        let handle = Dispatcher::new(store.clone(), config("timeout-quick"))
            .consumer("d.leased", Quick(Arc::clone(&ran)))?
            .consumer("d.tx", Quick(Arc::clone(&ran)))?
            .start();
        settled(&store, "d.leased").await?;
        settled(&store, "d.tx").await?;
        let stats = handle.shutdown().await;

        assert_eq!(ran.load(Ordering::SeqCst), 12);
        assert_eq!((stats.acked, stats.retried), (12, 0));
        for consumer in ["d.leased", "d.tx"] {
            let outcomes = attempts(&store, &receipts, consumer).await?;
            assert_eq!(outcomes.len(), 6, "{consumer}: {outcomes:?}");
            assert!(
                outcomes.iter().all(|(attempt, outcome, code)| *attempt == 1
                    && outcome == "acked"
                    && code.is_none()),
                "{consumer}: {outcomes:?}"
            );
        }
        Ok(())
    })
    .await
}
