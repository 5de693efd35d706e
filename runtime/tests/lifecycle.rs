//! Lifecycle events on a real server: a dead-lettered delivery appends one `job.dead_lettered`
//! event in the transaction of the dead-lettering, checked and fanned out like any append,
//! when (and only when) the registry registers the type; a dead-lettered `job.dead_lettered`
//! delivery emits nothing more (the loop guard).

mod support;

use std::time::Duration;

use evc_runtime::{
    AppendOptions, Claimed, DEAD_LETTERED, DispatchError, FailureClass, PgStore, RetryDecision,
};
use sqlx::PgPool;
use support::{LIFECYCLE_REGISTRY, TestResult, with_database};

const LEASE: Duration = Duration::from_secs(60);

/// Appends one `test.note` and returns its event id.
async fn append_note(
    store: &PgStore,
) -> Result<uuid::Uuid, Box<dyn std::error::Error + Send + Sync>> {
    let mut tx = store.pool().begin().await?;
    let receipt = store
        .append(
            &mut tx,
            support::event("test.note", "1.0.0", support::note(&support::note_key(1))),
            AppendOptions::new(),
        )
        .await?;
    tx.commit().await?;
    Ok(receipt.event_id)
}

/// Claims the single due delivery of `consumer`.
async fn claim_one(
    store: &PgStore,
    consumer: &str,
) -> Result<Claimed, Box<dyn std::error::Error + Send + Sync>> {
    let mut claimed = store.claim(consumer, "worker", 10, LEASE, false).await?;
    assert_eq!(claimed.len(), 1, "one due delivery of {consumer}");
    Ok(claimed.remove(0))
}

/// The `job.dead_lettered` events: schema version and payload.
async fn dead_lettered(
    pool: &PgPool,
) -> Result<Vec<(String, serde_json::Value)>, Box<dyn std::error::Error + Send + Sync>> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT schema_version, payload::text FROM evc_events WHERE event_type = $1 ORDER BY seq",
    )
    .bind(DEAD_LETTERED)
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|(version, payload)| Ok((version, serde_json::from_str(&payload)?)))
        .collect()
}

#[tokio::test]
async fn a_permanent_failure_emits_one_event_in_its_transaction_fanned_out() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), LIFECYCLE_REGISTRY)?;
        let event_id = append_note(&store).await?;
        let claimed = claim_one(&store, "d.leased").await?;
        store
            .fail(
                &claimed.lease,
                FailureClass::Permanent,
                "bad_input",
                RetryDecision::Dead,
            )
            .await?;

        let events = dead_lettered(&pool).await?;
        assert_eq!(events.len(), 1, "exactly one job.dead_lettered");
        let (version, payload) = &events[0];
        assert_eq!(version, "1.1.0", "the newest registered version");
        assert_eq!(payload["event_id"], event_id.to_string());
        assert_eq!(payload["event_type"], "test.note");
        assert_eq!(payload["consumer_name"], "d.leased");
        assert_eq!(payload["attempts"], 1);
        assert_eq!(payload["failure_class"], "permanent");
        assert_eq!(payload["last_error_code"], "BAD_INPUT");
        assert!(payload["dead_lettered_at"].is_string());
        assert!(uuid::Uuid::parse_str(payload["job_id"].as_str().unwrap_or("")).is_ok());
        // Never the original payload.
        let keys: Vec<&String> = payload
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        assert!(
            !keys
                .iter()
                .any(|key| ["note_id", "text", "count"].contains(&key.as_str()))
        );

        // Same transaction: the dead delivery, its attempt row and the event share an xmin.
        let xmins: Vec<String> = sqlx::query_scalar(
            "SELECT xmin::text FROM evc_deliveries WHERE consumer = 'd.leased' AND status = 'dead' \
             UNION ALL SELECT xmin::text FROM evc_delivery_attempts WHERE outcome = 'dead' \
             UNION ALL SELECT xmin::text FROM evc_events WHERE event_type = 'job.dead_lettered'",
        )
        .fetch_all(&pool)
        .await?;
        assert_eq!(xmins.len(), 3);
        assert!(
            xmins.iter().all(|xmin| *xmin == xmins[0]),
            "one transaction: {xmins:?}"
        );

        let causation: Option<String> = sqlx::query_scalar(
            "SELECT causation_id FROM evc_events WHERE event_type = 'job.dead_lettered'",
        )
        .fetch_one(&pool)
        .await?;
        assert_eq!(
            causation,
            Some(event_id.to_string()),
            "caused by the dead-lettered event"
        );

        // Fanned out: the subscribing consumer claims it.
        let watched = claim_one(&store, "ops.watch").await?;
        assert_eq!(watched.delivery.event_type, DEAD_LETTERED);
        assert_eq!(&watched.payload, payload);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn retries_exhausted_emit_a_transient_event_with_every_attempt() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), LIFECYCLE_REGISTRY)?;
        append_note(&store).await?;
        let first = claim_one(&store, "d.leased").await?;
        store
            .fail(
                &first.lease,
                FailureClass::Transient,
                "busy",
                RetryDecision::Retry(Duration::ZERO),
            )
            .await?;
        assert!(
            dead_lettered(&pool).await?.is_empty(),
            "a retry emits nothing"
        );
        let second = claim_one(&store, "d.leased").await?;
        store
            .fail(
                &second.lease,
                FailureClass::Transient,
                "busy",
                RetryDecision::Dead,
            )
            .await?;
        let events = dead_lettered(&pool).await?;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].1["attempts"], 2);
        assert_eq!(events[0].1["failure_class"], "transient");
        assert_eq!(events[0].1["last_error_code"], "BUSY");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_rolled_back_dead_lettering_emits_nothing_and_a_stale_fail_neither() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), LIFECYCLE_REGISTRY)?;
        append_note(&store).await?;
        let claimed = claim_one(&store, "d.leased").await?;
        // The lifecycle event's insert fails: the fail statement must roll back with it.
        sqlx::raw_sql(
            "CREATE FUNCTION refuse_dead_lettered() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$; \
             CREATE TRIGGER refuse_dead_lettered BEFORE INSERT ON evc_events FOR EACH ROW \
             WHEN (NEW.event_type = 'job.dead_lettered') EXECUTE FUNCTION refuse_dead_lettered();",
        )
        .execute(&pool)
        .await?;
        let failed = store
            .fail(
                &claimed.lease,
                FailureClass::Permanent,
                "bad_input",
                RetryDecision::Dead,
            )
            .await;
        assert!(
            matches!(failed, Err(DispatchError::Database(_))),
            "{failed:?}"
        );
        let status: String =
            sqlx::query_scalar("SELECT status FROM evc_deliveries WHERE consumer = 'd.leased'")
                .fetch_one(&pool)
                .await?;
        assert_eq!(status, "leased", "the dead-lettering rolled back");
        assert_eq!(support::count(&pool, "evc_delivery_attempts").await?, 0);
        assert!(dead_lettered(&pool).await?.is_empty());

        sqlx::raw_sql("DROP TRIGGER refuse_dead_lettered ON evc_events")
            .execute(&pool)
            .await?;
        store
            .fail(
                &claimed.lease,
                FailureClass::Permanent,
                "bad_input",
                RetryDecision::Dead,
            )
            .await?;
        assert_eq!(dead_lettered(&pool).await?.len(), 1);
        // The same lease again: stale, nothing written.
        let stale = store
            .fail(
                &claimed.lease,
                FailureClass::Permanent,
                "bad_input",
                RetryDecision::Dead,
            )
            .await;
        assert!(
            matches!(stale, Err(DispatchError::StaleToken { .. })),
            "{stale:?}"
        );
        assert_eq!(dead_lettered(&pool).await?.len(), 1);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn an_unregistered_type_emits_nothing() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), support::DISPATCH_REGISTRY)?;
        append_note(&store).await?;
        let claimed = claim_one(&store, "d.leased").await?;
        store
            .fail(
                &claimed.lease,
                FailureClass::Permanent,
                "bad_input",
                RetryDecision::Dead,
            )
            .await?;
        let statuses = support::statuses(&pool, "d.leased").await?;
        assert_eq!(statuses, [("dead".to_owned(), 1)]);
        assert!(dead_lettered(&pool).await?.is_empty());
        assert_eq!(support::count(&pool, "evc_events").await?, 1);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_dead_lettered_lifecycle_event_emits_no_other() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), LIFECYCLE_REGISTRY)?;
        append_note(&store).await?;
        let claimed = claim_one(&store, "d.leased").await?;
        store
            .fail(
                &claimed.lease,
                FailureClass::Poison,
                "poison",
                RetryDecision::Dead,
            )
            .await?;
        let watched = claim_one(&store, "ops.watch").await?;
        store
            .fail(
                &watched.lease,
                FailureClass::Permanent,
                "watch_down",
                RetryDecision::Dead,
            )
            .await?;
        assert_eq!(
            support::statuses(&pool, "ops.watch").await?,
            [("dead".to_owned(), 1)]
        );
        assert_eq!(dead_lettered(&pool).await?.len(), 1, "the loop guard held");
        assert!(
            store
                .claim("ops.watch", "worker", 10, LEASE, false)
                .await?
                .is_empty()
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn lease_expiry_past_max_attempts_emits_one_event() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), LIFECYCLE_REGISTRY)?;
        let event_id = append_note(&store).await?;
        claim_one(&store, "d.leased").await?;
        // The policy's last attempt, its lease over (as if its process died).
        sqlx::query(
            "UPDATE evc_deliveries SET attempt = 4, lease_until = now() - interval '1 second' \
             WHERE consumer = 'd.leased'",
        )
        .execute(&pool)
        .await?;
        assert_eq!(store.recover_expired(10).await?, 1);
        assert_eq!(
            support::statuses(&pool, "d.leased").await?,
            [("dead".to_owned(), 1)]
        );
        let events = dead_lettered(&pool).await?;
        assert_eq!(events.len(), 1);
        let payload = &events[0].1;
        assert_eq!(payload["event_id"], event_id.to_string());
        assert_eq!(payload["consumer_name"], "d.leased");
        assert_eq!(payload["attempts"], 4);
        assert_eq!(payload["failure_class"], "transient");
        assert_eq!(payload["last_error_code"], "LEASE_EXPIRED");
        assert_eq!(claim_one(&store, "ops.watch").await?.payload, *payload);
        Ok(())
    })
    .await
}

/// [`LIFECYCLE_REGISTRY`] whose payload cap fits a note but not a `job.dead_lettered` event.
const TIGHT_CAP_REGISTRY: evc_runtime::Registry = evc_runtime::Registry {
    payload_policy: evc_runtime::PayloadPolicyDescriptor {
        hard_max_bytes: 200,
        ..support::REFERENCE_POLICY
    },
    ..LIFECYCLE_REGISTRY
};

#[tokio::test]
async fn a_refused_lifecycle_event_leaves_the_dead_lettering_standing() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), TIGHT_CAP_REGISTRY)?;
        append_note(&store).await?;
        let claimed = claim_one(&store, "d.leased").await?;
        store
            .fail(
                &claimed.lease,
                FailureClass::Permanent,
                "bad_input",
                RetryDecision::Dead,
            )
            .await?;
        assert_eq!(
            support::statuses(&pool, "d.leased").await?,
            [("dead".to_owned(), 1)]
        );
        assert!(dead_lettered(&pool).await?.is_empty());
        let rejects: Vec<(String, String)> =
            sqlx::query_as("SELECT event_type, reason_code FROM evc_validation_rejects")
                .fetch_all(&pool)
                .await?;
        assert_eq!(rejects, [(DEAD_LETTERED.to_owned(), "oversize".to_owned())]);
        Ok(())
    })
    .await
}
