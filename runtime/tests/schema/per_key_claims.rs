//! A per-key claim finds its candidates in one statement and leases them in a second, after
//! taking their keys' locks (docs/runtime.md, "At most one in flight per key"). What the first
//! statement saw may change before the second runs: another dispatcher may claim a candidate,
//! fail it and schedule its retry. The second statement re-checks on its own snapshot, and a
//! delivery whose retry is not due yet must stay pending.

use std::time::{Duration, Instant};

use evc_runtime::{ClaimRequest, DispatchError, PgStore, Store};

use crate::support::{self, DISPATCH_REGISTRY, HANG, TestResult};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_claim_leaves_a_candidate_rescheduled_between_its_two_steps() -> TestResult {
    support::with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), DISPATCH_REGISTRY)?;
        let event_id = support::append_notes(&store, 1, 1).await?[0].event_id;

        // Another session reschedules the delivery an hour ahead, as a failed attempt's retry
        // does, and holds its row until it commits.
        let mut other = pool.begin().await?;
        sqlx::query(
            "UPDATE evc_deliveries SET next_attempt_at = now() + interval '1 hour' \
             WHERE event_id = $1 AND consumer = 'd.leased'",
        )
        .bind(event_id)
        .execute(&mut *other)
        .await?;

        // The claim's first step sees the delivery due (the reschedule is not committed); its
        // second waits for the row.
        let claimer = {
            let store = store.clone();
            tokio::spawn(async move {
                let mut connection = store.pool().acquire().await.map_err(DispatchError::from)?;
                let request = ClaimRequest::leased("d.leased", "w", 10, Duration::from_secs(30))
                    .per_key(true);
                store.claim(&mut connection, &request).await
            })
        };
        let started = Instant::now();
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_one(&pool)
            .await?;
            if waiting > 0 {
                break;
            }
            assert!(
                started.elapsed() < HANG,
                "the claim never waited for the row"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        other.commit().await?;

        let claimed = claimer.await??;
        assert!(
            claimed.is_empty(),
            "a delivery not due was leased: {:?}",
            claimed.iter().map(|c| c.lease.event_id).collect::<Vec<_>>()
        );
        let (status, attempt): (String, i32) = sqlx::query_as(
            "SELECT status, attempt FROM evc_deliveries \
             WHERE event_id = $1 AND consumer = 'd.leased'",
        )
        .bind(event_id)
        .fetch_one(&pool)
        .await?;
        assert_eq!((status.as_str(), attempt), ("pending", 0));
        Ok(())
    })
    .await
}
