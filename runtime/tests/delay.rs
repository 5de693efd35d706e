//! Delayed deliveries (`AppendOptions::not_before`), on a real server, through the single
//! append, a publisher and the batch append: no claim takes a delivery before its time, one
//! whose time has passed is claimed as usual, and under per-key ordering a delayed head holds
//! back the later events of its key (and only that key) until it is handled.
//!
//! Time is controlled by the appended times (an hour ago, a year ahead), not by sleeping; the
//! passing of a delay is shown by moving a stored due time to the past.

mod support;

use std::time::{Duration, SystemTime};

use evc_runtime::{AppendOptions, NewEvent, PgStore, Publish};
use sqlx::postgres::PgPool;
use support::{TestResult, dispatch_store, event, note_key, with_database};

const LEASE: Duration = Duration::from_secs(30);

fn a_year_ahead() -> SystemTime {
    SystemTime::now() + Duration::from_secs(365 * 86_400)
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
    let claimed = store.claim(consumer, "w/1", 10, LEASE, per_key).await?;
    let mut numbers = Vec::new();
    for c in &claimed {
        numbers.push(c.payload["count"].as_u64().unwrap_or(u64::MAX));
        store.ack(&c.lease).await?;
    }
    Ok(numbers)
}

/// Makes note `n`'s deliveries due now, as the passing of its delay would.
async fn make_due(pool: &PgPool, n: u64) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE evc_deliveries d SET next_attempt_at = now() FROM evc_events e \
         WHERE e.event_id = d.event_id AND (e.payload->>'count')::int8 = $1",
    )
    .bind(i64::try_from(n).unwrap_or(i64::MAX))
    .execute(pool)
    .await?;
    Ok(())
}

/// After notes 1 (key 1, delayed to `ahead`), 2 (key 1, no delay), 3 (key 2, an hour ago) and
/// 4 (key 3, no delay) were appended: the same claims and checks for each append path.
async fn check_delays(pool: &PgPool, store: &PgStore, ahead: SystemTime) -> TestResult {
    // Without per-key ordering: everything but the delayed note, in seq order.
    assert_eq!(claim_numbers(store, "d.unordered", false).await?, [2, 3, 4]);
    assert!(claim_numbers(store, "d.unordered", false).await?.is_empty());
    // Per key: key 1's delayed head holds note 2 back; keys 2 and 3 run.
    assert_eq!(claim_numbers(store, "d.leased", true).await?, [3, 4]);
    assert!(claim_numbers(store, "d.leased", true).await?.is_empty());

    // The delay stored is the one appended.
    let stored: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM max(d.next_attempt_at))::float8 FROM evc_deliveries d",
    )
    .fetch_one(pool)
    .await?;
    let ahead = ahead.duration_since(SystemTime::UNIX_EPOCH)?.as_secs_f64();
    assert!(
        (ahead - stored).abs() < 0.001,
        "stored {stored}, appended {ahead}"
    );

    // Its time passes: the delayed note is claimed, and then key 1's next one, in order.
    make_due(pool, 1).await?;
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
        let ahead = a_year_ahead();
        let mut tx = pool.begin().await?;
        for (n, key, options) in [
            (1, 1, AppendOptions::new().not_before(ahead)),
            (2, 1, AppendOptions::new()),
            (3, 2, AppendOptions::new().not_before(an_hour_ago())),
            (4, 3, AppendOptions::new()),
        ] {
            store.append(&mut tx, numbered(n, key), options).await?;
        }
        tx.commit().await?;
        check_delays(&pool, &store, ahead).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_s_delay_applies_to_its_next_event_only() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 4).await?;
        let ahead = a_year_ahead();
        let mut tx = pool.begin().await?;
        let mut publisher = store.publisher(&mut tx);
        publisher.options_mut().not_before = Some(ahead);
        publisher.publish(numbered(1, 1)).await?;
        publisher.publish(numbered(2, 1)).await?;
        publisher.options_mut().not_before = Some(an_hour_ago());
        publisher.publish(numbered(3, 2)).await?;
        publisher.publish(numbered(4, 3)).await?;
        tx.commit().await?;
        check_delays(&pool, &store, ahead).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_batch_append_is_claimed_only_after_its_time() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 4).await?;
        let ahead = a_year_ahead();
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
        check_delays(&pool, &store, ahead).await
    })
    .await
}
