//! Retry schedules on a real server: transient failures land at the policy's delays and then
//! dead-letter; permanent and poison failures dead-letter at once; scope, schema and integrity
//! failures quarantine at once and are never retried; a delivery whose lease expires at every
//! attempt (its handler takes the process down) dead-letters at the policy's last attempt.

mod support;

use std::time::{Duration, Instant};

use evc_runtime::{AppendOptions, Dispatcher, DispatcherConfig, FailureClass, HandlerError};
use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use support::{TestResult, append_notes, dispatch_store, with_database};

/// Per delivery: payload text, status, attempt, attempt outcomes, last error code.
type ClassRow = (String, String, i32, Vec<String>, Option<String>);

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_follow_the_policy_then_dead_and_quarantine_is_never_retried() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 8).await?;
        let mut tx = store.pool().begin().await?;
        let classes = [
            "transient",
            "permanent",
            "poison",
            "scope",
            "schema",
            "integrity",
        ];
        for (key, text) in classes.iter().enumerate() {
            let payload = serde_json::json!({"note_id": support::note_key(key as u64), "text": text});
            store
                .append(
                    &mut tx,
                    support::event("test.note", "1.0.0", payload),
                    AppendOptions::new(),
                )
                .await?;
        }
        tx.commit().await?;
        let config = DispatcherConfig::default()
            .owner("retry")
            .workers(2)
            .poll_interval(Duration::from_millis(20))
            .seed(1);
        let handle = Dispatcher::new(store.clone(), config)
            .consumer("d.leased", FailsAsTold)?
            .start();
        let start = Instant::now();
        loop {
            let open: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM evc_deliveries WHERE consumer = 'd.leased' \
                 AND status IN ('pending', 'leased')",
            )
            .fetch_one(&pool)
            .await?;
            if open == 0 {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "not settled");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Long enough for a (wrong) retry of a quarantined delivery to show.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let stats = handle.shutdown().await;
        assert_eq!(
            (stats.retried, stats.dead, stats.quarantined, stats.acked),
            (3, 3, 3, 0)
        );

        // Per class: final status, attempts, the attempt rows' outcomes.
        let rows: Vec<ClassRow> = sqlx::query_as(
            "SELECT e.payload->>'text', d.status, d.attempt, \
                 array_agg(a.outcome ORDER BY a.attempt), d.last_error_code \
             FROM evc_deliveries d JOIN evc_events e USING (event_id) \
             JOIN evc_delivery_attempts a ON a.event_id = d.event_id AND a.consumer = d.consumer \
             GROUP BY 1, 2, 3, 5 ORDER BY 1",
        )
        .fetch_all(&pool)
        .await?;
        let expected = |text: &str, status: &str, outcomes: &[&str]| {
            (
                text.to_owned(),
                status.to_owned(),
                i32::try_from(outcomes.len()).unwrap_or(0),
                outcomes.iter().map(|o| (*o).to_owned()).collect::<Vec<_>>(),
                Some(format!("{text}_failure")),
            )
        };
        assert_eq!(
            rows,
            [
                expected("integrity", "quarantined", &["quarantined"]),
                expected("permanent", "dead", &["dead"]),
                expected("poison", "dead", &["dead"]),
                expected("schema", "quarantined", &["quarantined"]),
                expected("scope", "quarantined", &["quarantined"]),
                expected("transient", "dead", &["retry", "retry", "retry", "dead"]),
            ]
        );

        // The transient delivery's gaps: from one attempt's end to the next one's start, the
        // policy's 200 ms (no jitter), plus at most the polling interval and scheduling slack.
        let gaps: Vec<f64> = sqlx::query_scalar(
            "SELECT (extract(epoch FROM a.started_at - lag(a.finished_at) OVER (ORDER BY a.attempt)) \
                 * 1000)::float8 \
             FROM evc_delivery_attempts a JOIN evc_events e USING (event_id) \
             WHERE e.payload->>'text' = 'transient' ORDER BY a.attempt",
        )
        .fetch_all(&pool)
        .await
        .map(|gaps: Vec<Option<f64>>| gaps.into_iter().flatten().collect())?;
        eprintln!("transient retry gaps (ms): {gaps:?}");
        assert_eq!(gaps.len(), 3);
        for gap in gaps {
            assert!((195.0..=450.0).contains(&gap), "gap {gap} ms outside 200 ms + slack");
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_lease_that_expires_at_every_attempt_goes_dead_at_the_last_one() -> TestResult {
    with_database(|pool| async move {
        // `d.unordered` runs on `fixed.200ms`: at most 4 attempts.
        const CONSUMER: &str = "d.unordered";
        let store = dispatch_store(&pool, 4).await?;
        append_notes(&store, 1, 1).await?;
        let status = || async {
            sqlx::query_as::<_, (String, i32)>(
                "SELECT status, attempt FROM evc_deliveries WHERE consumer = $1",
            )
            .bind(CONSUMER)
            .fetch_one(&pool)
            .await
        };
        for attempt in 1..=4 {
            let claimed = store
                .claim(CONSUMER, "w", 1, Duration::from_secs(30), false)
                .await?;
            assert_eq!(claimed.len(), 1, "attempt {attempt} claims the delivery");
            // The process dies: nothing settles the lease, which expires.
            sqlx::query(
                "UPDATE evc_deliveries SET lease_until = now() - interval '1 second' \
                 WHERE consumer = $1",
            )
            .bind(CONSUMER)
            .execute(&pool)
            .await?;
            assert_eq!(store.recover_expired(10).await?, 1);
            let expected = if attempt < 4 { "pending" } else { "dead" };
            assert_eq!(status().await?, (expected.to_owned(), attempt));
        }
        let none = store
            .claim(CONSUMER, "w", 1, Duration::from_secs(30), false)
            .await?;
        assert!(none.is_empty(), "a dead delivery is not claimed again");
        let outcomes: Vec<(String, Option<String>)> = sqlx::query_as(
            "SELECT outcome, error_code FROM evc_delivery_attempts WHERE consumer = $1 \
             ORDER BY attempt",
        )
        .bind(CONSUMER)
        .fetch_all(&pool)
        .await?;
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
