//! Delayed deliveries (`AppendOptions::not_before`), on a real server, through the single
//! append, a publisher and the batch append: no claim takes a delivery before its time, one
//! whose time has passed is claimed as usual, and under per-key ordering a delayed head holds
//! back the later events of its key (and only that key) until it is handled.
//!
//! Time is controlled by the appended times: an hour ago, and [`DELAY`] ahead, long enough for
//! the claims made before it to take a small part of it; the test then waits for the delay to
//! pass, as a delayed delivery does.

mod support;

use std::time::{Duration, SystemTime};

use evc_runtime::{AppendOptions, NewEvent, PgStore, Publish};
use support::{TestResult, dispatch_store, event, note_key, with_database};
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(30);

/// How far ahead the delayed note is due: the checks before its time take milliseconds, so
/// a slow run still makes them well before it.
const DELAY: Duration = Duration::from_secs(5);

/// The consumers `test.note` fans out to.
const CONSUMERS: [&str; 3] = ["d.leased", "d.tx", "d.unordered"];

fn ahead() -> SystemTime {
    SystemTime::now() + DELAY
}

fn an_hour_ago() -> SystemTime {
    SystemTime::now() - Duration::from_secs(3_600)
}

/// Note number `n` on key `key`.
fn numbered(n: u64, key: u64) -> evc_runtime::OutgoingEvent {
    event(
        "test.note",
        "1.0.0",
        serde_json::json!({"note_id": note_key(key), "text": "n", "count": n}),
    )
}

/// The note numbers `consumer` claims now (per key or not), in claim order.
async fn claim_numbers(
    store: &PgStore,
    consumer: &str,
    per_key: bool,
) -> Result<Vec<u64>, Box<dyn std::error::Error + Send + Sync>> {
    let claimed = support::claim(store, consumer, "w/1", 10, LEASE, per_key).await?;
    let mut numbers = Vec::new();
    for c in &claimed {
        numbers.push(c.payload["count"].as_u64().unwrap_or(u64::MAX));
        support::ack_current(store, &c.lease).await?;
    }
    Ok(numbers)
}

/// Epoch seconds of `time`.
fn epoch(time: SystemTime) -> Result<f64, std::time::SystemTimeError> {
    Ok(time.duration_since(SystemTime::UNIX_EPOCH)?.as_secs_f64())
}

/// After notes 1 (key 1, delayed to `ahead`), 2 (key 1, no delay), 3 (key 2, an hour ago) and
/// 4 (key 3, no delay) were appended, with event ids `ids` in that order: the same claims and
/// checks for each append path.
async fn check_delays(store: &PgStore, ids: &[Uuid], ahead: SystemTime) -> TestResult {
    // Without per-key ordering: everything but the delayed note, in seq order.
    assert_eq!(claim_numbers(store, "d.unordered", false).await?, [2, 3, 4]);
    assert!(claim_numbers(store, "d.unordered", false).await?.is_empty());
    // Per key: key 1's delayed head holds note 2 back; keys 2 and 3 run.
    assert_eq!(claim_numbers(store, "d.leased", true).await?, [3, 4]);
    assert!(claim_numbers(store, "d.leased", true).await?.is_empty());
    assert!(
        SystemTime::now() < ahead,
        "the checks above ran past the delay"
    );

    // The delay stored is the one appended, on each of the delayed note's deliveries; the
    // notes appended without one were due at once (d.tx claimed nothing yet).
    let appended = epoch(ahead)?;
    for consumer in CONSUMERS {
        let delivery = store
            .delivery(ids[0], consumer)
            .await?
            .ok_or("no delivery")?;
        assert!(
            (appended - delivery.available_at).abs() < 0.001,
            "{consumer}: stored {}, appended {appended}",
            delivery.available_at
        );
    }
    let now = epoch(SystemTime::now())?;
    for id in [ids[1], ids[3]] {
        let delivery = store.delivery(id, "d.tx").await?.ok_or("no delivery")?;
        assert!(delivery.available_at <= now, "{id}: {delivery:?}");
    }

    // Its time passes: the delayed note is claimed, and then key 1's next one, in order.
    let wait = ahead.duration_since(SystemTime::now()).unwrap_or_default();
    tokio::time::sleep(wait + Duration::from_millis(10)).await;
    assert_eq!(claim_numbers(store, "d.unordered", false).await?, [1]);
    assert_eq!(claim_numbers(store, "d.leased", true).await?, [1]);
    assert_eq!(claim_numbers(store, "d.leased", true).await?, [2]);
    assert!(claim_numbers(store, "d.leased", true).await?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_single_append_is_claimed_only_after_its_time() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 4).await?;
        let ahead = ahead();
        let mut tx = pool.begin().await?;
        let mut ids = Vec::new();
        for (n, key, options) in [
            (1, 1, AppendOptions::new().not_before(ahead)),
            (2, 1, AppendOptions::new()),
            (3, 2, AppendOptions::new().not_before(an_hour_ago())),
            (4, 3, AppendOptions::new()),
        ] {
            ids.push(
                store
                    .append(&mut tx, numbered(n, key), options)
                    .await?
                    .event_id,
            );
        }
        tx.commit().await?;
        check_delays(&store, &ids, ahead).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_s_delay_applies_to_its_next_event_only() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 4).await?;
        let ahead = ahead();
        let mut tx = pool.begin().await?;
        let mut publisher = store.publisher(&mut tx);
        let mut ids = Vec::new();
        publisher.options_mut().not_before = Some(ahead);
        ids.push(publisher.publish(numbered(1, 1)).await?.event_id);
        ids.push(publisher.publish(numbered(2, 1)).await?.event_id);
        publisher.options_mut().not_before = Some(an_hour_ago());
        ids.push(publisher.publish(numbered(3, 2)).await?.event_id);
        ids.push(publisher.publish(numbered(4, 3)).await?.event_id);
        tx.commit().await?;
        check_delays(&store, &ids, ahead).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_batch_append_is_claimed_only_after_its_time() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 4).await?;
        let ahead = ahead();
        let mut tx = pool.begin().await?;
        let batch = vec![
            NewEvent::new(numbered(1, 1), AppendOptions::new().not_before(ahead)),
            numbered(2, 1).into(),
            NewEvent::new(
                numbered(3, 2),
                AppendOptions::new().not_before(an_hour_ago()),
            ),
            numbered(4, 3).into(),
        ];
        let receipts = store.append_batch(&mut tx, batch).await?;
        tx.commit().await?;
        assert_eq!(receipts.len(), 4);
        let ids: Vec<Uuid> = receipts.iter().map(|receipt| receipt.event_id).collect();
        check_delays(&store, &ids, ahead).await
    })
    .await
}
