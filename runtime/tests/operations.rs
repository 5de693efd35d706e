//! Operator controls on a real server: a paused consumer (or one whose mode is `off`) receives
//! nothing while the others go on, and after resuming gets everything it missed, in key order;
//! every change raises the consumer's revision.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use evc_runtime::Operate;
use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use evc_runtime::{
    ConsumerMode, DispatchError, Dispatcher, DispatcherConfig, HandlerError, PgStore, Store,
};
use support::{TestResult, append_notes, dispatch_store, statuses, with_database};

const PAUSED: &str = "d.leased";
const RUNNING: &str = "d.unordered";
const EVENTS: u64 = 200;

/// Seqs handled per (consumer, key), in call order.
#[derive(Default)]
struct Calls(Mutex<BTreeMap<(String, String), Vec<i64>>>);

impl DynHandler for Calls {
    fn handle<'a>(
        &'a self,
        context: HandlerContext<'a>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let key = (
                context.lease().consumer.clone(),
                context.claimed.order_key.clone(),
            );
            let mut calls = self.0.lock().expect("lock");
            calls
                .entry(key)
                .or_default()
                .push(context.claimed.event_seq);
            Ok(())
        })
    }
}

/// Deliveries of `consumer` acked so far: their `acked` attempt rows (an ack deletes the
/// delivery).
async fn acked(store: &PgStore, consumer: &str) -> Result<u64, DispatchError> {
    store.count_attempts(consumer, "acked").await
}

async fn wait_for_acks(store: &PgStore, consumer: &str, expected: u64) -> TestResult {
    let started = std::time::Instant::now();
    while acked(store, consumer).await? < expected {
        assert!(
            started.elapsed() < support::HANG,
            "{consumer}: {} of {expected} acked after {:?}",
            acked(store, consumer).await?,
            support::HANG
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_consumer_receives_nothing_and_resumes_in_order() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 8).await?;
        let state = store.consumer_state(PAUSED).await?;
        assert_eq!(
            (state.paused, state.mode, state.revision),
            (false, ConsumerMode::Live, 0),
            "never changed: the contract's mode"
        );
        let paused = store.pause(PAUSED, &support::change()).await?;
        assert_eq!((paused.paused, paused.revision), (true, 1));

        let calls = Arc::new(Calls::default());
        let config = DispatcherConfig::default()
            .owner("ops")
            .workers(2)
            .batch(20)
            .poll_interval(Duration::from_millis(20))
            .seed(3);
        let handle = Dispatcher::new(store.clone(), config)
            .consumer(PAUSED, Arc::clone(&calls))?
            .consumer(RUNNING, Arc::clone(&calls))?
            .start();
        append_notes(&store, EVENTS, 20).await?;

        // The other consumer gets everything; the paused one nothing, however long it waits.
        wait_for_acks(&store, RUNNING, EVENTS).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            statuses(&store, PAUSED).await?,
            [("pending".to_owned(), i64::try_from(EVENTS)?)]
        );

        // Mode `off` holds it back too, after the pause is lifted.
        let off = store
            .set_mode(PAUSED, ConsumerMode::Off, &support::change())
            .await?;
        assert_eq!(
            (off.paused, off.mode, off.revision),
            (true, ConsumerMode::Off, 2)
        );
        let resumed = store.resume(PAUSED, &support::change()).await?;
        assert_eq!((resumed.paused, resumed.revision), (false, 3));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(acked(&store, PAUSED).await?, 0, "mode off claims nothing");

        let live = store
            .set_mode(PAUSED, ConsumerMode::Live, &support::change())
            .await?;
        assert_eq!(
            (live.paused, live.mode, live.revision),
            (false, ConsumerMode::Live, 4)
        );
        assert_eq!(store.consumer_state(PAUSED).await?, live);
        wait_for_acks(&store, PAUSED, EVENTS).await?;
        let stats = handle.shutdown().await;
        assert_eq!(stats.acked, EVENTS * 2);

        // Everything it missed, once each, each key in append order.
        let calls = calls.0.lock().expect("lock");
        let mut handled = 0;
        for ((consumer, key), seqs) in calls.iter() {
            if consumer == PAUSED {
                handled += seqs.len();
                assert!(
                    seqs.windows(2).all(|w| w[0] < w[1]),
                    "{key} out of order: {seqs:?}"
                );
            }
        }
        assert_eq!(handled, usize::try_from(EVENTS)?);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn an_unknown_consumer_cannot_be_paused() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 2).await?;
        // A consumer of another registry: unknown to this store.
        let unknown = "c.live";
        let error = store
            .pause(unknown, &support::change())
            .await
            .expect_err("unknown");
        assert!(
            matches!(&error, DispatchError::UnknownConsumer(name) if name == unknown),
            "{error:?}"
        );
        // No state was written for the unknown name: a store whose registry has it reads the
        // contract's state, never changed (a written row would read paused, revision 1).
        let other = PgStore::new(pool.clone(), support::TEST_REGISTRY)?;
        let state = other.consumer_state(unknown).await?;
        assert_eq!(
            (state.paused, state.mode, state.revision),
            (false, ConsumerMode::Live, 0)
        );
        Ok(())
    })
    .await
}
