//! Lifecycle events on a real server: a dead-lettered delivery appends one `job.dead_lettered`
//! event in the transaction of the dead-lettering, checked and fanned out like any append,
//! when (and only when) the registry registers the type; a dead-lettered `job.dead_lettered`
//! delivery emits nothing more (the loop guard). An applied replay appends
//! `dlq_replay.scheduled`, the settle of its last delivery `dlq_replay.completed` or
//! `dlq_replay.failed`, and a discard one `job.discarded` per delivery, each in the transaction
//! of its state change (a refused insert rolls the state change back), and none when the
//! registry does not register them.

use crate::support;

use std::time::Duration;

use crate::support::{LIFECYCLE_REGISTRY, TestResult, with_database};
use evc_runtime::{
    AppendOptions, Claimed, Console, DEAD_LETTERED, DISCARDED, DeliveryStatus, DispatchError,
    FailureClass, PgStore, REPLAY_COMPLETED, REPLAY_FAILED, REPLAY_SCHEDULED, REPLAYED_JOB_FAILED,
    ReplayApproval, ReplayError, ReplaySelection, RetryDecision, Store, replay_uuid,
};
use sqlx::PgPool;

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
    let mut claimed = support::claim(store, consumer, "worker", 10, LEASE, false).await?;
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
        let event_id = append_note(&store).await?;
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
        let status = store
            .delivery(event_id, "d.leased")
            .await?
            .map(|d| d.status);
        assert_eq!(
            status,
            Some(DeliveryStatus::Leased),
            "the dead-lettering rolled back"
        );
        assert_eq!(support::attempts_of(&store, &[event_id]).await?, []);
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
        let statuses = support::statuses(&store, "d.leased").await?;
        assert_eq!(statuses, [("dead".to_owned(), 1)]);
        assert!(dead_lettered(&pool).await?.is_empty());
        assert_eq!(store.count_events(&[]).await?, 1);
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
            support::statuses(&store, "ops.watch").await?,
            [("dead".to_owned(), 1)]
        );
        assert_eq!(dead_lettered(&pool).await?.len(), 1, "the loop guard held");
        assert!(
            support::claim(&store, "ops.watch", "worker", 10, LEASE, false)
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
        // Every attempt of the policy (4) claimed on a lease that runs out at once, as if its
        // process died each time: recovery requeues the first three and dead-letters the last.
        for attempt in 1..=4 {
            let claimed = support::claim(
                &store,
                "d.leased",
                "worker",
                10,
                Duration::from_millis(5),
                false,
            )
            .await?;
            assert_eq!(claimed.len(), 1, "attempt {attempt} claimed");
            assert_eq!(claimed[0].lease.attempt, attempt);
            let start = std::time::Instant::now();
            while store.recover_expired(10).await? == 0 {
                assert!(
                    start.elapsed() < crate::support::HANG,
                    "lease not recovered"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        assert_eq!(
            support::statuses(&store, "d.leased").await?,
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
    executor_classes: &[],
    schedules: &[],
    lag_thresholds: &[],
    cutover_gates: &[],
    inventory_rules: &[],
    evidence_recording: None,
    retention: evc_runtime::RetentionDescriptor::KEEP,
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
            support::statuses(&store, "d.leased").await?,
            [("dead".to_owned(), 1)]
        );
        assert!(dead_lettered(&pool).await?.is_empty());
        let rejects: Vec<(String, String)> = store
            .rejects(100)
            .await?
            .into_iter()
            .map(|r| (r.event_type, r.reason_code))
            .collect();
        assert_eq!(rejects, [(DEAD_LETTERED.to_owned(), "oversize".to_owned())]);
        Ok(())
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Replay and discard.
// ---------------------------------------------------------------------------------------------

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The consumer whose deliveries the replay and discard tests settle.
const CONSUMER: &str = "d.leased";

/// The events of `event_type`, in append order: payload and the inserting transaction's id.
async fn events_of(
    pool: &PgPool,
    event_type: &str,
) -> Result<Vec<(serde_json::Value, String)>, BoxError> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT payload::text, xmin::text FROM evc_events WHERE event_type = $1 ORDER BY seq",
    )
    .bind(event_type)
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|(payload, xmin)| Ok((serde_json::from_str(&payload)?, xmin)))
        .collect()
}

/// Refuses inserts of `event_type` into `evc_events` until [`allow`]: the lifecycle event's
/// append fails, so the state change it belongs to must roll back.
async fn refuse(pool: &PgPool, event_type: &str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE FUNCTION refuse_lifecycle() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$; \
         CREATE TRIGGER refuse_lifecycle BEFORE INSERT ON evc_events FOR EACH ROW \
         WHEN (NEW.event_type = '{event_type}') EXECUTE FUNCTION refuse_lifecycle();"
    )))
    .execute(pool)
    .await?;
    Ok(())
}

/// Drops [`refuse`]'s trigger.
async fn allow(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::raw_sql("DROP TRIGGER refuse_lifecycle ON evc_events; DROP FUNCTION refuse_lifecycle();")
        .execute(pool)
        .await?;
    Ok(())
}

/// `notes` notes; every delivery of [`CONSUMER`] fails with `decisions` in turn (code
/// `bad_input`), and the consumer is deployed in the registry mirror (replays check it).
/// Returns the event ids in delivery order.
async fn settle(
    store: &PgStore,
    pool: &PgPool,
    decisions: &[(FailureClass, RetryDecision)],
) -> Result<Vec<uuid::Uuid>, BoxError> {
    let notes = u64::try_from(decisions.len())?;
    support::append_notes(store, notes, notes).await?;
    let claimed = support::claim(store, CONSUMER, "worker", 10, LEASE, false).await?;
    assert_eq!(claimed.len(), decisions.len());
    for (claimed, (class, decision)) in claimed.iter().zip(decisions) {
        store
            .fail(&claimed.lease, *class, "bad_input", *decision)
            .await?;
    }
    support::deploy(pool, CONSUMER, "^1").await?;
    Ok(claimed.iter().map(|c| c.lease.event_id).collect())
}

const DEAD: (FailureClass, RetryDecision) = (FailureClass::Permanent, RetryDecision::Dead);

/// Replays every dead or quarantined delivery of [`CONSUMER`] under idempotency key `key`.
async fn replay_all(
    console: &Console,
    key: &str,
    requested_by: Option<uuid::Uuid>,
) -> Result<evc_runtime::ReplayApplied, ReplayError> {
    let selection = ReplaySelection::consumer(CONSUMER);
    let plan = console.propose_replay(&selection, "alice").await?.plan;
    let mut approval = ReplayApproval::new(plan.digest, "the bug is fixed", "CHG-7", key, "bob");
    if let Some(person) = requested_by {
        approval = approval.requested_by(person);
    }
    console.replay(&selection, &approval).await
}

/// Claims every due delivery of [`CONSUMER`].
async fn claim_all(store: &PgStore) -> Result<Vec<Claimed>, BoxError> {
    Ok(support::claim(store, CONSUMER, "worker", 10, LEASE, false).await?)
}

#[tokio::test]
async fn an_applied_replay_emits_scheduled_in_its_transaction() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), LIFECYCLE_REGISTRY)?;
        settle(&store, &pool, &[DEAD, DEAD]).await?;
        let console = Console::connect(pool.clone())
            .await?
            .with_lifecycle(store.clone());

        // The event's insert fails: the replay rolls back with it.
        refuse(&pool, REPLAY_SCHEDULED).await?;
        let refused = replay_all(&console, "k-1", None).await;
        assert!(
            matches!(refused, Err(ReplayError::Database(_))),
            "{refused:?}"
        );
        assert_eq!(support::count(&pool, "evc_replays").await?, 0);
        assert_eq!(
            support::statuses(&store, CONSUMER).await?,
            [("dead".to_owned(), 2)]
        );
        assert!(events_of(&pool, REPLAY_SCHEDULED).await?.is_empty());
        allow(&pool).await?;

        let person = uuid::Uuid::now_v7();
        let selection = ReplaySelection::consumer(CONSUMER);
        let plan = console.propose_replay(&selection, "alice").await?.plan;
        let approval = ReplayApproval::new(plan.digest, "the bug is fixed", "CHG-7", "k-1", "bob")
            .requested_by(person);
        let applied = console.replay(&selection, &approval).await?;
        let events = events_of(&pool, REPLAY_SCHEDULED).await?;
        assert_eq!(events.len(), 1, "one dlq_replay.scheduled");
        let (payload, xmin) = &events[0];
        assert_eq!(
            payload["replay_id"],
            replay_uuid(applied.replay_id).to_string()
        );
        assert_eq!(payload["consumer_name"], CONSUMER);
        assert_eq!(payload["job_count"], 2);
        assert_eq!(payload["requested_by_id"], person.to_string());
        assert!(payload["scheduled_for"].is_string());
        // Never the reason or the approval: the payload has the contract's five fields.
        assert_eq!(payload.as_object().map(serde_json::Map::len), Some(5));
        let replay_xmin: String =
            sqlx::query_scalar("SELECT xmin::text FROM evc_replays WHERE id = $1")
                .bind(applied.replay_id)
                .fetch_one(&pool)
                .await?;
        assert_eq!(*xmin, replay_xmin, "one transaction");

        // The key again: the first result, no second event.
        let repeated = console.replay(&selection, &approval).await?;
        assert!(repeated.repeated);
        assert_eq!(events_of(&pool, REPLAY_SCHEDULED).await?.len(), 1);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_replay_without_a_person_names_the_database_role() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), LIFECYCLE_REGISTRY)?;
        let events = settle(&store, &pool, &[DEAD, DEAD]).await?;
        let approve = |console: Console, event_id: uuid::Uuid, key: &'static str| async move {
            let selection = ReplaySelection::consumer(CONSUMER).event_ids([event_id]);
            let plan = console.propose_replay(&selection, "alice").await?.plan;
            let approval = ReplayApproval::new(plan.digest, "fixed", "CHG-8", key, "bob");
            console.replay(&selection, &approval).await
        };
        // A console without a lifecycle store emits nothing of its own.
        let bare = Console::connect(pool.clone()).await?;
        approve(bare.clone(), events[0], "k-1b").await?;
        assert!(events_of(&pool, REPLAY_SCHEDULED).await?.is_empty());

        approve(bare.with_lifecycle(store.clone()), events[1], "k-1c").await?;
        let scheduled = events_of(&pool, REPLAY_SCHEDULED).await?;
        assert_eq!(scheduled.len(), 1);
        let requested_by =
            uuid::Uuid::parse_str(scheduled[0].0["requested_by_id"].as_str().unwrap_or(""))?;
        assert_eq!(requested_by.get_version_num(), 8, "derived, not random");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_replay_whose_deliveries_all_ack_emits_completed_once() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), LIFECYCLE_REGISTRY)?;
        settle(&store, &pool, &[DEAD, DEAD, DEAD]).await?;
        let console = Console::connect(pool.clone()).await?;
        let applied = replay_all(&console, "k-2", None).await?;
        let claimed = claim_all(&store).await?;
        assert_eq!(claimed.len(), 3);
        assert!(claimed.iter().all(|c| c.lease.generation() == 1));

        support::ack_current(&store, &claimed[0].lease).await?;
        assert!(
            events_of(&pool, REPLAY_COMPLETED).await?.is_empty(),
            "two deliveries outstanding"
        );

        // The event's insert fails: the acks roll back with it.
        refuse(&pool, REPLAY_COMPLETED).await?;
        let rest = [&claimed[1].lease, &claimed[2].lease];
        let refused = support::ack(&store, &rest).await;
        assert!(
            matches!(refused, Err(DispatchError::Database(_))),
            "{refused:?}"
        );
        assert_eq!(
            support::statuses(&store, CONSUMER).await?,
            [
                ("acked".to_owned(), 1),
                ("leased".to_owned(), 2),
                ("replayed".to_owned(), 3)
            ]
        );
        assert!(events_of(&pool, REPLAY_COMPLETED).await?.is_empty());
        allow(&pool).await?;

        let outcome = support::ack(&store, &rest).await?;
        assert_eq!(outcome.acked, 2);
        let events = events_of(&pool, REPLAY_COMPLETED).await?;
        assert_eq!(events.len(), 1, "one dlq_replay.completed");
        let (payload, xmin) = &events[0];
        assert_eq!(
            payload["replay_id"],
            replay_uuid(applied.replay_id).to_string()
        );
        assert_eq!(payload["replayed_count"], 3);
        assert_eq!(payload["succeeded_count"], 3);
        assert_eq!(payload["failed_count"], 0);
        assert!(payload["completed_at"].is_string());
        let ack_xmins: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT xmin::text FROM evc_acked_batches \
             WHERE 1 = ANY (generations) AND event_ids && $1",
        )
        .bind(vec![claimed[1].lease.event_id, claimed[2].lease.event_id])
        .fetch_all(&pool)
        .await?;
        assert_eq!(
            ack_xmins.as_slice(),
            std::slice::from_ref(xmin),
            "one transaction with the last acks"
        );
        assert!(events_of(&pool, REPLAY_FAILED).await?.is_empty());
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_replayed_delivery_dead_lettered_again_emits_failed() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), LIFECYCLE_REGISTRY)?;
        settle(&store, &pool, &[DEAD, DEAD]).await?;
        let console = Console::connect(pool.clone()).await?;
        let applied = replay_all(&console, "k-3", None).await?;
        let claimed = claim_all(&store).await?;
        assert_eq!(claimed.len(), 2);
        support::ack_current(&store, &claimed[0].lease).await?;

        // The event's insert fails: the dead-lettering rolls back with it.
        refuse(&pool, REPLAY_FAILED).await?;
        let fail = || {
            store.fail(
                &claimed[1].lease,
                FailureClass::Permanent,
                "still_broken",
                RetryDecision::Dead,
            )
        };
        let refused = fail().await;
        assert!(
            matches!(refused, Err(DispatchError::Database(_))),
            "{refused:?}"
        );
        assert_eq!(
            support::statuses(&store, CONSUMER).await?,
            [
                ("acked".to_owned(), 1),
                ("leased".to_owned(), 1),
                ("replayed".to_owned(), 2)
            ]
        );
        assert_eq!(dead_lettered(&pool).await?.len(), 2, "only the first two");
        assert!(events_of(&pool, REPLAY_FAILED).await?.is_empty());
        allow(&pool).await?;

        fail().await?;
        let events = events_of(&pool, REPLAY_FAILED).await?;
        assert_eq!(events.len(), 1, "one dlq_replay.failed");
        let (payload, xmin) = &events[0];
        assert_eq!(
            payload["replay_id"],
            replay_uuid(applied.replay_id).to_string()
        );
        assert_eq!(payload["error"]["code"], REPLAYED_JOB_FAILED);
        assert_eq!(payload["error"]["retryable"], true);
        assert_eq!(payload["replayed_count"], 2);
        assert!(payload["failed_at"].is_string());
        let dead_xmin: String = sqlx::query_scalar(
            "SELECT xmin::text FROM evc_deliveries WHERE consumer = $1 AND generation = 1",
        )
        .bind(CONSUMER)
        .fetch_one(&pool)
        .await?;
        assert_eq!(*xmin, dead_xmin, "one transaction with the dead-lettering");
        assert_eq!(dead_lettered(&pool).await?.len(), 3);
        assert!(events_of(&pool, REPLAY_COMPLETED).await?.is_empty());
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_discard_emits_one_event_per_delivery_in_its_transaction() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), LIFECYCLE_REGISTRY)?;
        let event_ids = settle(
            &store,
            &pool,
            &[DEAD, (FailureClass::Schema, RetryDecision::Quarantine)],
        )
        .await?;
        let console = Console::connect(pool.clone())
            .await?
            .with_lifecycle(store.clone());
        let selection = ReplaySelection::consumer(CONSUMER);
        let plan = console.propose_discard(&selection, "alice").await?.plan;
        let approval =
            ReplayApproval::new(plan.digest, "poison, never again", "INC-4", "d-1", "bob");

        // The event's insert fails: the discard rolls back with it.
        refuse(&pool, DISCARDED).await?;
        let refused = console.discard(&selection, &approval).await;
        assert!(
            matches!(refused, Err(ReplayError::Database(_))),
            "{refused:?}"
        );
        assert_eq!(support::count(&pool, "evc_discards").await?, 0);
        assert_eq!(
            support::statuses(&store, CONSUMER).await?,
            [("dead".to_owned(), 1), ("quarantined".to_owned(), 1)]
        );
        allow(&pool).await?;

        let applied = console.discard(&selection, &approval).await?;
        let events = events_of(&pool, DISCARDED).await?;
        assert_eq!(events.len(), 2, "one job.discarded per delivery");
        let (role, discard_xmin): (String, String) =
            sqlx::query_as("SELECT db_role, xmin::text FROM evc_discards")
                .fetch_one(&pool)
                .await?;
        for ((payload, xmin), (event_id, from)) in events
            .iter()
            .zip(event_ids.iter().zip(["dead", "quarantined"]))
        {
            assert_eq!(payload["discard_id"], applied.discard_id);
            assert_eq!(payload["event_id"], event_id.to_string());
            assert_eq!(payload["event_type"], "test.note");
            assert_eq!(payload["consumer_name"], CONSUMER);
            assert_eq!(payload["generation"], 0);
            assert_eq!(payload["discarded_from"], from);
            assert_eq!(payload["attempts"], 1);
            assert_eq!(payload["last_error_code"], "BAD_INPUT");
            assert_eq!(payload["approval_ref"], "INC-4");
            assert_eq!(payload["discarded_by"], role);
            assert!(payload["discarded_at"].is_string());
            assert!(
                !payload.to_string().contains("poison"),
                "never the reason's text"
            );
            assert_eq!(*xmin, discard_xmin, "one transaction");
        }
        let causes: Vec<Option<String>> = sqlx::query_scalar(
            "SELECT causation_id FROM evc_events WHERE event_type = $1 ORDER BY seq",
        )
        .bind(DISCARDED)
        .fetch_all(&pool)
        .await?;
        assert_eq!(
            causes,
            event_ids
                .iter()
                .map(|id| Some(id.to_string()))
                .collect::<Vec<_>>(),
            "caused by the discarded events"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_registry_without_the_replay_events_appends_none() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), support::DISPATCH_REGISTRY)?;
        settle(&store, &pool, &[DEAD, DEAD, DEAD]).await?;
        let console = Console::connect(pool.clone())
            .await?
            .with_lifecycle(store.clone());
        replay_all(&console, "k-5", None).await?;
        let claimed = claim_all(&store).await?;
        assert_eq!(claimed.len(), 3);
        // One acked, one dead again: the replay ended, as failed.
        support::ack_current(&store, &claimed[0].lease).await?;
        store
            .fail(
                &claimed[1].lease,
                FailureClass::Permanent,
                "still_broken",
                RetryDecision::Dead,
            )
            .await?;
        store
            .fail(
                &claimed[2].lease,
                FailureClass::Permanent,
                "still_broken",
                RetryDecision::Dead,
            )
            .await?;
        let selection = ReplaySelection::consumer(CONSUMER);
        let plan = console.propose_discard(&selection, "alice").await?.plan;
        let approval = ReplayApproval::new(plan.digest, "poison", "INC-5", "d-5", "bob");
        assert_eq!(
            console
                .discard(&selection, &approval)
                .await?
                .discarded
                .len(),
            2
        );
        assert_eq!(store.count_events(&[]).await?, 3, "the notes, nothing else");
        assert_eq!(store.rejects(10).await?, []);
        Ok(())
    })
    .await
}
