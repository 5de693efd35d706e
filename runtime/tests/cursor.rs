//! The claim cursor on a real server (docs/runtime.md, "Claim cursor"): while a backlog lasts,
//! a consumer's claims start after the highest `event_seq` a full batch claimed, so a delivery
//! that becomes due behind the cursor must still be claimed, within about the head-scan
//! interval and long before the backlog is gone.
//!
//! The delivery behind the cursor is the most natural one: an event whose transaction took its
//! `event_seq` first and committed after the dispatcher had claimed far past it. Run for a held
//! consumer (`d.held`) and a leased one (`d.unordered`).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use evc_runtime::{AppendOptions, Dispatcher, DispatcherConfig, HandlerError};
use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use support::{TestResult, dispatch_store, event, note_key, with_database};

/// Events committed up front: the backlog.
const BACKLOG: u64 = 2_000;
/// The late event's `count`.
const LATE: i64 = 1_000_000;

/// Records the `count` of every delivery it handles, in order, and takes a millisecond for
/// each, so the backlog lasts a few seconds. Shared with the test through an `Arc`.
#[derive(Default)]
struct Records {
    handled: Mutex<Vec<i64>>,
}

impl Records {
    fn handled(&self) -> Vec<i64> {
        self.handled.lock().expect("not poisoned").clone()
    }
}

impl DynHandler for Records {
    fn handle<'a>(
        &'a self,
        context: HandlerContext<'a>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        let count = context.payload()["count"].as_i64().unwrap_or(i64::MIN);
        self.handled.lock().expect("not poisoned").push(count);
        Box::pin(async {
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok(())
        })
    }
}

/// Commits a late event behind the cursor of `consumer` (of `event_type`, with or without held
/// batches) while a backlog drains, and checks that it is handled long before the backlog
/// ends, every delivery acked once and the backlog in order.
async fn late_event_run(
    pool: sqlx::PgPool,
    event_type: &'static str,
    consumer: &'static str,
    held: bool,
) -> TestResult {
    let store = dispatch_store(&pool, 8).await?;
    // The late event takes its event_seq first and stays uncommitted.
    let mut late = store.pool().begin().await?;
    let payload = serde_json::json!({"note_id": note_key(999_999), "text": "late", "count": LATE});
    store
        .append(
            &mut late,
            event(event_type, "1.0.0", payload),
            AppendOptions::default(),
        )
        .await?;
    support::append_numbered(&store, event_type, 0..BACKLOG, |_| "backlog").await?;

    let records = Arc::new(Records::default());
    let config = DispatcherConfig::default()
        .owner(format!("cursor-{consumer}"))
        .workers(1)
        .batch(10)
        .poll_interval(Duration::from_millis(20))
        .held_batches(held);
    let dispatcher = Dispatcher::new(store.clone(), config)
        .consumer(consumer, Arc::clone(&records))?
        .start();
    // Let the cursor run well past the late event's seq, then commit it.
    let waited = tokio::time::Instant::now();
    while records.handled().len() < 200 {
        assert!(
            waited.elapsed() < support::HANG,
            "the backlog did not start draining"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    late.commit().await?;
    let committed_at = records.handled().len();
    while records.handled().len() < BACKLOG as usize + 1 {
        assert!(
            waited.elapsed() < 2 * support::HANG,
            "only {} of {} deliveries handled",
            records.handled().len(),
            BACKLOG + 1
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stats = dispatcher.shutdown().await;
    let handled = records.handled();
    assert_eq!(stats.acked, BACKLOG + 1, "every delivery acked once");
    assert_eq!(
        handled.len(),
        BACKLOG as usize + 1,
        "no delivery handled twice"
    );
    let position = handled
        .iter()
        .position(|&count| count == LATE)
        .expect("the late event was handled");
    let after = handled.len() - 1 - position;
    // A head scan is due every 100 ms; at about a millisecond per delivery that is some 100
    // deliveries after the commit. Without it the late event would wait for the first short
    // claim: the end of the backlog.
    assert!(
        after >= 1_000,
        "{consumer}: the late event (committed after {committed_at} deliveries) was handled \
         at position {position}, only {after} before the backlog ran out"
    );
    // The backlog itself went out oldest first.
    let backlog: Vec<i64> = handled.into_iter().filter(|&count| count != LATE).collect();
    assert!(
        backlog.windows(2).all(|pair| pair[0] < pair[1]),
        "{consumer}: one worker claims the backlog in event_seq order"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_consumer_claims_an_event_committed_behind_its_cursor_while_the_backlog_lasts()
-> TestResult {
    with_database(|pool| late_event_run(pool, "test.job", "d.held", true)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_consumer_claims_an_event_committed_behind_its_cursor_while_the_backlog_lasts()
-> TestResult {
    with_database(|pool| late_event_run(pool, "test.note", "d.unordered", false)).await
}
