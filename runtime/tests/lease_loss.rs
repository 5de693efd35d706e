//! A leased handler whose lease is lost while it runs, on a real server: the dispatcher stops
//! polling (drops) the handler future, counts the cancellation, writes no ack for the lost
//! token, and the delivery is recovered and completed exactly once by a later attempt.
//!
//! The lease is lost as it is in production: it runs out before the dispatcher renews it (here
//! because renewal is set to come long after the lease's end), lease-expiry recovery takes the
//! delivery back, and the renewal that follows finds its token no longer current.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use evc_runtime::{DispatchError, Dispatcher, DispatcherConfig, HandlerError, Store};
use support::{TestResult, append_notes, dispatch_store, statuses, with_database};
use uuid::Uuid;

const CONSUMER: &str = "d.unordered";

/// The dispatcher's lease.
const LEASE: Duration = Duration::from_millis(600);

/// How often the dispatcher renews: well after [`LEASE`] runs out and recovery (every 50 ms)
/// takes the delivery back, so the running handler's lease is lost by the time of its first
/// renewal.
const RENEW_EVERY: Duration = Duration::from_secs(2);

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
        assert!(start.elapsed() < support::HANG, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `(attempt, fencing token)` of the `acked` attempt rows of `event_id`'s delivery.
async fn acked_attempts(
    store: &impl Store,
    event_id: Uuid,
) -> Result<Vec<(u32, i64)>, DispatchError> {
    Ok(store
        .attempts(event_id, CONSUMER)
        .await?
        .into_iter()
        .filter(|attempt| attempt.outcome == "acked")
        .map(|attempt| (attempt.attempt, attempt.token))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_cancels_the_running_handler() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 8).await?;
        let event_id = append_notes(&store, 1, 1).await?[0].event_id;
        let dropped = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicBool::new(false));
        let completed = Arc::new(AtomicU64::new(0));
        let mut config = DispatcherConfig::default()
            .owner("lease-loss")
            .workers(1)
            .batch(1)
            .lease(LEASE)
            .poll_interval(Duration::from_millis(20))
            .recovery_interval(Duration::from_millis(50))
            .seed(7);
        config.renew_every = RENEW_EVERY;
        let handle = Dispatcher::new(store.clone(), config)
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
        // The running attempt's token: no claim can raise it before the handler is dropped
        // (the only worker is running it).
        let delivery = store
            .delivery(event_id, CONSUMER)
            .await?
            .ok_or("no delivery")?;
        assert_eq!(delivery.attempts, 1, "{delivery:?}");
        let held_token = delivery.token;

        until("the running handler was dropped", || {
            dropped.load(Ordering::SeqCst)
        })
        .await;
        let start = Instant::now();
        while acked_attempts(&store, event_id).await?.is_empty() {
            assert!(start.elapsed() < support::HANG, "never acked");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let stats = handle.shutdown().await;

        // The first attempt never finished; the second ran once and acked.
        assert_eq!(completed.load(Ordering::SeqCst), 1);
        assert_eq!(stats.cancelled, 1);
        assert_eq!(stats.acked, 1);
        let acked = acked_attempts(&store, event_id).await?;
        assert_eq!(acked.len(), 1, "acked exactly once: {acked:?}");
        let (attempt, token) = acked[0];
        assert_eq!(attempt, 2);
        assert!(token > held_token, "acked with a later claim's token");
        // The cancelled attempt wrote no row of its own: its attempt is recorded by recovery
        // (`lease_expired`, under the token the lease had when it expired).
        let rows: Vec<(u32, String, i64)> = store
            .attempts(event_id, CONSUMER)
            .await?
            .into_iter()
            .map(|attempt| (attempt.attempt, attempt.outcome, attempt.token))
            .collect();
        assert_eq!(
            rows,
            [
                (1, "lease_expired".to_owned(), held_token),
                (2, "acked".to_owned(), token)
            ]
        );
        assert_eq!(statuses(&store, CONSUMER).await?, [("acked".to_owned(), 1)]);
        Ok(())
    })
    .await
}
