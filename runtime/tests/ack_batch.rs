//! `PgStore::ack_batch` against a real server: many fenced acks in one statement, each with its
//! attempt row; a stale token (recovered and re-claimed lease), another owner's lease and an
//! already acked delivery are refused, counted and reported while the rest are acked.

mod support;

use std::time::Duration;

use evc_runtime::{DispatchError, Lease, PgStore};
use support::{TestResult, append_notes, dispatch_store, statuses, with_database};

const CONSUMER: &str = "d.unordered";
const LEASE: Duration = Duration::from_secs(30);

/// `lease` as `owner` would present it.
fn presented_by(lease: &Lease, owner: &str) -> Lease {
    let mut presented = lease.clone();
    presented.owner = owner.to_owned();
    presented
}

async fn claim(store: &PgStore, owner: &str, batch: u32) -> Result<Vec<Lease>, DispatchError> {
    let claimed = store.claim(CONSUMER, owner, batch, LEASE, false).await?;
    Ok(claimed.into_iter().map(|c| c.lease).collect())
}

#[tokio::test]
async fn batched_acks_are_fenced_per_row() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 4).await?;
        append_notes(&store, 4, 4).await?;
        let first = claim(&store, "w1", 10).await?;
        assert_eq!(first.len(), 4);

        // The last lease expires, is recovered and claimed again by w2: w1's token is stale.
        let lost = &first[3];
        sqlx::query(
            "UPDATE evc_deliveries SET lease_until = now() - interval '1 second' \
             WHERE event_id = $1 AND consumer = $2",
        )
        .bind(lost.event_id)
        .bind(CONSUMER)
        .execute(&pool)
        .await?;
        assert_eq!(store.recover_expired(10).await?, 1);
        let second = claim(&store, "w2", 10).await?;
        assert_eq!(second.len(), 1);
        let taken = &second[0];
        assert_eq!(taken.event_id, lost.event_id);
        assert!(taken.token > lost.token);

        let before = store.stale_tokens();
        let entries: Vec<&Lease> = first.iter().collect();
        let outcome = store.ack_batch(&entries).await?;
        assert_eq!(outcome.acked, 3);
        assert_eq!(
            outcome.stale,
            vec![(lost.event_id, CONSUMER.to_owned(), lost.token)]
        );
        assert_eq!(store.stale_tokens(), before + 1);

        // w2's current lease presented by another owner: refused; by its owner: acked.
        let outcome = store.ack_batch(&[&presented_by(taken, "w1")]).await?;
        assert_eq!((outcome.acked, outcome.stale.len()), (0, 1));
        // An already acked delivery in the batch is refused too; the rest goes through.
        let outcome = store.ack_batch(&[&first[0], taken]).await?;
        assert_eq!(outcome.acked, 1);
        assert_eq!(
            outcome.stale,
            vec![(first[0].event_id, CONSUMER.to_owned(), first[0].token)]
        );
        assert_eq!(store.stale_tokens(), before + 3);
        assert_eq!(store.ack_batch(&[]).await?.acked, 0);

        assert_eq!(statuses(&pool, CONSUMER).await?, vec![("acked".into(), 4)]);
        // One acked attempt row per acked delivery, with the acking lease's owner and token,
        // plus the recovered attempt's `lease_expired` row.
        let attempts: Vec<(String, String, i64, bool)> = sqlx::query_as(
            "SELECT outcome, owner, fencing_token, finished_at >= started_at \
             FROM evc_delivery_attempts WHERE consumer = $1 ORDER BY outcome, owner",
        )
        .bind(CONSUMER)
        .fetch_all(&pool)
        .await?;
        let acked: Vec<_> = attempts.iter().filter(|a| a.0 == "acked").collect();
        assert_eq!(acked.len(), 4);
        assert_eq!(acked.iter().filter(|a| a.1 == "w1").count(), 3);
        assert!(
            acked
                .iter()
                .any(|a| a.1 == "w2" && a.2 == taken.token && a.3)
        );
        assert!(acked.iter().all(|a| a.3));
        assert_eq!(
            attempts.iter().filter(|a| a.0 == "lease_expired").count(),
            1
        );
        Ok(())
    })
    .await
}
