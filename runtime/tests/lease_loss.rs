//! A leased handler whose lease is lost while it runs, on a real server: the dispatcher stops
//! polling (drops) the handler future, counts the cancellation, writes no ack for the lost
//! token, and the delivery is recovered and completed exactly once by a later attempt.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use evc_runtime::{Dispatcher, DispatcherConfig, HandlerError};
use sqlx::postgres::PgPool;
use support::{TestResult, append_notes, dispatch_store, statuses, with_database};

const CONSUMER: &str = "d.unordered";

/// Sets its flag when dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The first attempt blocks for ever (holding a [`DropFlag`]); later attempts succeed.
struct BlocksFirst {
    /// Set when the first attempt's future is dropped.
    dropped: Arc<AtomicBool>,
    /// Set when the first attempt started.
    started: Arc<AtomicBool>,
    /// Attempts that ran to completion.
    completed: Arc<AtomicU64>,
}

impl DynHandler for BlocksFirst {
    fn handle<'a>(
        &'a self,
        context: HandlerContext<'a>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        let first = context.lease().attempt == 1;
        Box::pin(async move {
            if first {
                let _guard = DropFlag(Arc::clone(&self.dropped));
                self.started.store(true, Ordering::SeqCst);
                std::future::pending::<()>().await;
            }
            self.completed.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }
}

/// Waits until `done` holds; a deadline only keeps a broken run from hanging the suite.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(30), "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn acked_attempts(pool: &PgPool) -> Result<Vec<(i32, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT attempt, fencing_token FROM evc_delivery_attempts \
         WHERE consumer = $1 AND outcome = 'acked' ORDER BY id",
    )
    .bind(CONSUMER)
    .fetch_all(pool)
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_cancels_the_running_handler() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 8).await?;
        append_notes(&store, 1, 1).await?;
        let dropped = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicBool::new(false));
        let completed = Arc::new(AtomicU64::new(0));
        let handle = Dispatcher::new(
            store.clone(),
            DispatcherConfig::default()
                .owner("lease-loss")
                .workers(1)
                .batch(1)
                .lease(Duration::from_millis(600))
                .poll_interval(Duration::from_millis(20))
                .recovery_interval(Duration::from_millis(50))
                .seed(7),
        )
        .consumer(
            CONSUMER,
            BlocksFirst {
                dropped: Arc::clone(&dropped),
                started: Arc::clone(&started),
                completed: Arc::clone(&completed),
            },
        )?
        .start();
        until("the first attempt started", || {
            started.load(Ordering::SeqCst)
        })
        .await;
        let held_token: i64 = sqlx::query_scalar(
            "SELECT fencing_token FROM evc_deliveries WHERE consumer = $1 AND status = 'leased'",
        )
        .bind(CONSUMER)
        .fetch_one(&pool)
        .await?;

        // Another worker's claim, as far as the running one can tell: the token moves on and
        // the lease ends.
        sqlx::query(
            "UPDATE evc_deliveries SET fencing_token = fencing_token + 1, \
                 lease_until = now() - interval '1 second' \
             WHERE consumer = $1 AND status = 'leased'",
        )
        .bind(CONSUMER)
        .execute(&pool)
        .await?;

        until("the running handler was dropped", || {
            dropped.load(Ordering::SeqCst)
        })
        .await;
        let start = Instant::now();
        while acked_attempts(&pool).await?.is_empty() {
            assert!(start.elapsed() < Duration::from_secs(30), "never acked");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let stats = handle.shutdown().await;

        // The first attempt never finished; the second ran once and acked.
        assert_eq!(completed.load(Ordering::SeqCst), 1);
        assert_eq!(stats.cancelled, 1);
        assert_eq!(stats.acked, 1);
        let acked = acked_attempts(&pool).await?;
        assert_eq!(acked.len(), 1, "acked exactly once: {acked:?}");
        let (attempt, token) = acked[0];
        assert_eq!(attempt, 2);
        assert!(token > held_token + 1, "acked with a later claim's token");
        // No row at all carries the cancelled attempt's token; its attempt is recorded by
        // recovery (`lease_expired`, under the token the lease had when it expired).
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT outcome, fencing_token FROM evc_delivery_attempts WHERE consumer = $1 \
             ORDER BY id",
        )
        .bind(CONSUMER)
        .fetch_all(&pool)
        .await?;
        assert_eq!(
            rows,
            [
                ("lease_expired".to_owned(), held_token + 1),
                ("acked".to_owned(), token)
            ]
        );
        assert_eq!(statuses(&store, CONSUMER).await?, [("acked".to_owned(), 1)]);
        Ok(())
    })
    .await
}
