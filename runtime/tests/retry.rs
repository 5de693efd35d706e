//! Retry schedules on a real server: transient failures land at the policy's delays and then
//! dead-letter; permanent and poison failures dead-letter at once; scope, schema and integrity
//! failures quarantine at once and are never retried; a delivery whose lease expires at every
//! attempt (its handler takes the process down) dead-letters at the policy's last attempt.

mod support;

use std::time::{Duration, Instant};

use evc_runtime::{
    AppendOptions, DeliveryStatus, Dispatcher, DispatcherConfig, FailureClass, HandlerError, Store,
};
use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use support::{TestResult, append_notes, dispatch_store, with_database};

/// Per delivery: payload text, status, attempt, attempt outcomes, last error code.
type ClassRow = (String, DeliveryStatus, u32, Vec<String>, Option<String>);

/// Fails with the class its payload's `text` names.
struct FailsAsTold;

impl DynHandler for FailsAsTold {
    fn handle<'a>(
        &'a self,
        context: HandlerContext<'a>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let text = context.payload()["text"].as_str().unwrap_or("");
            match FailureClass::parse(text) {
                Some(class) => Err(HandlerError::new(class, format!("{text}_failure"))),
                None => Ok(()),
            }
        })
    }
}

/// Runs `FailsAsTold` as `d.leased` with `workers` until no delivery is open, then `linger`
/// more, and answers the dispatcher's counts.
async fn run_until_settled(
    store: &evc_runtime::PgStore,
    workers: usize,
    linger: Duration,
) -> Result<evc_runtime::DispatchStats, Box<dyn std::error::Error + Send + Sync>> {
    let config = DispatcherConfig::default()
        .owner("retry")
        .workers(workers)
        .poll_interval(Duration::from_millis(20))
        .seed(1);
    let handle = Dispatcher::new(store.clone(), config)
        .consumer("d.leased", FailsAsTold)?
        .start();
    let start = Instant::now();
    while store.open_deliveries(&["d.leased".to_owned()]).await? > 0 {
        assert!(start.elapsed() < support::HANG, "not settled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(linger).await;
    Ok(handle.shutdown().await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_follow_the_policy_then_dead_and_quarantine_is_never_retried() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 8).await?;
        let mut tx = store.pool().begin().await?;
        let mut ids = Vec::new();
        let classes = [
            "transient",
            "permanent",
            "poison",
            "scope",
            "schema",
            "integrity",
        ];
        for (key, text) in classes.iter().enumerate() {
            let payload =
                serde_json::json!({"note_id": support::note_key(key as u64), "text": text});
            let receipt = store
                .append(
                    &mut tx,
                    support::event("test.note", "1.0.0", payload),
                    AppendOptions::new(),
                )
                .await?;
            ids.push((*text, receipt.event_id));
        }
        tx.commit().await?;
        // Long enough for a (wrong) retry of a quarantined delivery to show.
        let stats = run_until_settled(&store, 2, Duration::from_millis(500)).await?;
        assert_eq!(
            (stats.retried, stats.dead, stats.quarantined, stats.acked),
            (3, 3, 3, 0)
        );

        // Per class: final status, attempts, the attempt rows' outcomes.
        ids.sort();
        let mut rows: Vec<ClassRow> = Vec::new();
        let mut transient = Vec::new();
        for (text, event_id) in &ids {
            let delivery = store
                .delivery(*event_id, "d.leased")
                .await?
                .ok_or("no delivery")?;
            let mut attempts = store.attempts(*event_id, "d.leased").await?;
            attempts.sort_by_key(|attempt| attempt.attempt);
            let outcomes = attempts.iter().map(|a| a.outcome.clone()).collect();
            rows.push((
                (*text).to_owned(),
                delivery.status,
                delivery.attempts,
                outcomes,
                delivery.last_error_code,
            ));
            if *text == "transient" {
                transient = attempts;
            }
        }
        let expected = |text: &str, status: DeliveryStatus, outcomes: &[&str]| {
            (
                text.to_owned(),
                status,
                u32::try_from(outcomes.len()).unwrap_or(0),
                outcomes.iter().map(|o| (*o).to_owned()).collect::<Vec<_>>(),
                Some(format!("{text}_failure")),
            )
        };
        assert_eq!(
            rows,
            [
                expected("integrity", DeliveryStatus::Quarantined, &["quarantined"]),
                expected("permanent", DeliveryStatus::Dead, &["dead"]),
                expected("poison", DeliveryStatus::Dead, &["dead"]),
                expected("schema", DeliveryStatus::Quarantined, &["quarantined"]),
                expected("scope", DeliveryStatus::Quarantined, &["quarantined"]),
                expected(
                    "transient",
                    DeliveryStatus::Dead,
                    &["retry", "retry", "retry", "dead"]
                ),
            ]
        );

        assert_retry_gaps_at_least(&transient, 200.0);
        Ok(())
    })
    .await
}

/// From one attempt's end (its row's `finished_at`) to the next one's start, at least the
/// policy's delay (`fixed.200ms` has no jitter). No upper bound: a loaded machine may claim late.
fn assert_retry_gaps_at_least(attempts: &[evc_runtime::AttemptRecord], delay_ms: f64) {
    let gaps: Vec<f64> = attempts
        .windows(2)
        .map(|pair| (pair[1].started_at - pair[0].finished_at) * 1000.0)
        .collect();
    eprintln!("retry gaps (ms): {gaps:?}");
    assert_eq!(gaps.len(), 3);
    for gap in gaps {
        // Timestamps pass through epoch seconds as `f64`: allow a microsecond of rounding.
        assert!(
            gap >= delay_ms - 0.001,
            "retry started {gap} ms after the attempt's end"
        );
    }
}

/// The retry delay runs from the time the failed attempt's row records as its end, even when
/// the statement that writes that row stalls between settling the delivery and inserting the
/// row (here a trigger sleeps 300 ms there; on a loaded server a WAL write or a descheduled
/// backend can).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_waits_its_delay_from_the_recorded_end_when_the_write_stalls() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 4).await?;
        sqlx::raw_sql(
            "CREATE FUNCTION stall() RETURNS trigger LANGUAGE plpgsql AS
                $$ BEGIN PERFORM pg_sleep(0.3); RETURN NEW; END $$;
            CREATE TRIGGER stall BEFORE UPDATE ON evc_deliveries FOR EACH ROW
                WHEN (OLD.status = 'leased' AND NEW.status <> 'leased')
                EXECUTE FUNCTION stall();",
        )
        .execute(store.pool())
        .await?;
        let mut tx = store.pool().begin().await?;
        let payload = serde_json::json!({"note_id": support::note_key(0), "text": "transient"});
        let event_id = store
            .append(
                &mut tx,
                support::event("test.note", "1.0.0", payload),
                AppendOptions::new(),
            )
            .await?
            .event_id;
        tx.commit().await?;
        let stats = run_until_settled(&store, 1, Duration::ZERO).await?;
        assert_eq!((stats.retried, stats.dead), (3, 1));
        let mut attempts = store.attempts(event_id, "d.leased").await?;
        attempts.sort_by_key(|attempt| attempt.attempt);
        assert_retry_gaps_at_least(&attempts, 200.0);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_lease_that_expires_at_every_attempt_goes_dead_at_the_last_one() -> TestResult {
    with_database(|pool| async move {
        // `d.unordered` runs on `fixed.200ms`: at most 4 attempts.
        const CONSUMER: &str = "d.unordered";
        // A short lease, so that it runs out within the test.
        const LEASE: Duration = Duration::from_millis(50);
        let store = dispatch_store(&pool, 4).await?;
        let event_id = append_notes(&store, 1, 1).await?[0].event_id;
        for attempt in 1..=4 {
            let claimed = support::claim(&store, CONSUMER, "w", 1, LEASE, false).await?;
            assert_eq!(claimed.len(), 1, "attempt {attempt} claims the delivery");
            // The process dies: nothing settles the lease, which expires.
            tokio::time::sleep(2 * LEASE).await;
            assert_eq!(store.recover_expired(10).await?, 1);
            let expected = if attempt < 4 {
                DeliveryStatus::Pending
            } else {
                DeliveryStatus::Dead
            };
            let delivery = store
                .delivery(event_id, CONSUMER)
                .await?
                .ok_or("no delivery")?;
            assert_eq!((delivery.status, delivery.attempts), (expected, attempt));
        }
        let none = support::claim(&store, CONSUMER, "w", 1, Duration::from_secs(30), false).await?;
        assert!(none.is_empty(), "a dead delivery is not claimed again");
        let outcomes: Vec<(String, Option<String>)> = store
            .attempts(event_id, CONSUMER)
            .await?
            .into_iter()
            .map(|attempt| (attempt.outcome, attempt.error_code))
            .collect();
        let expired = ("lease_expired".to_owned(), Some("lease_expired".to_owned()));
        assert_eq!(
            outcomes,
            [
                expired.clone(),
                expired.clone(),
                expired,
                ("dead".to_owned(), Some("lease_expired".to_owned()))
            ]
        );
        Ok(())
    })
    .await
}
