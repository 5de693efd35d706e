//! Wake-up without a doorbell, on a real server: a worker that cannot take its consumer's
//! doorbell (an append held it off past the wait) must not sleep a whole poll interval, since
//! no append rings for it then. It looks again soon, so an event committed meanwhile is
//! handled long before the poll interval (here twice the test's hang bound).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use evc_runtime::{AppendOptions, Dispatcher, DispatcherConfig, HandlerError};
use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use support::{TestResult, dispatch_store, with_database};

/// Counts its calls.
struct Counting(Arc<AtomicU64>);

impl DynHandler for Counting {
    fn handle<'a>(&'a self, _: HandlerContext<'a>) -> BoxFuture<'a, Result<(), HandlerError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(()) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_denied_the_doorbell_looks_again_before_its_poll_interval() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 8).await?;
        let calls = Arc::new(AtomicU64::new(0));
        let config = DispatcherConfig::default()
            .owner("wakeup")
            .workers(1)
            // Beyond the hang bound below: only the refused worker's prompt second look can
            // end the wait in time, not its poll.
            .poll_interval(2 * support::HANG);
        // An append in flight: it holds the doorbell's shared lock (so it does not ring) until
        // it commits, and keeps the idle worker from taking the doorbell meanwhile.
        let mut tx = pool.begin().await?;
        let payload = serde_json::json!({"note_id": support::note_key(1), "text": "t", "count": 1});
        store
            .append(
                &mut tx,
                support::event("test.note", "1.0.0", payload),
                AppendOptions::default(),
            )
            .await?;
        let handle = Dispatcher::new(store.clone(), config)
            .consumer("d.unordered", Counting(Arc::clone(&calls)))?
            .start();
        // The worker claims nothing, asks for the doorbell and is refused (the wait is 50 ms).
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        let committed = Instant::now();
        tx.commit().await?;
        while calls.load(Ordering::SeqCst) == 0 {
            assert!(
                committed.elapsed() < support::HANG,
                "the event waited for the poll"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        handle.shutdown().await;
        Ok(())
    })
    .await
}
