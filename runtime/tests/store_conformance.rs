//! One body, two stores: every behaviour of the store boundary is one generic test over
//! [`Conformance`] (the [`evc_runtime::Store`] trait, which begins a caller's transaction and
//! answers the read methods, plus the store's name), instantiated for PostgreSQL (a fresh database per test) and
//! SQLite (a fresh file per test) by [`conformance!`]. The tests assert states and attempt
//! rows; where a lease must run out they use a lease of a few milliseconds and wait until
//! recovery finds it ended, never a fixed sleep. The SQLite store's own behaviour (one store
//! per file, registry changes, wake-ups on commit) is tested at the end.

mod support;

#[path = "support/conformance.rs"]
mod conformance;

#[path = "store_conformance/sqlite_tenants.rs"]
mod sqlite_tenants;

use std::time::Duration;

use conformance::{BoxError, Conformance, OFF, ORDERED, PLAIN, SHADOW, eventually};
use evc_runtime::{
    AckBatch, AppendOptions, AppendReceipt, ClaimRequest, Claimed, Connection, CursorProgress,
    DeliveryStatus, DispatchError, FailureClass, FeedEvent, FeedPosition, Lease, NewEvent,
    OutgoingEvent, Problem, ReplayApproval, ReplayError, ReplaySelection, RetryDecision,
    RetryPolicy, SettledDelivery, SettledStatus, Store,
};
use evc_runtime::{ConsumerMode, CutoverReport, Intent, StateChange};
use support::TestResult;

/// The lease of every claim that is not meant to run out.
const LEASE: Duration = Duration::from_secs(30);

/// A lease that runs out at once (recovery then finds it).
const SHORT: Duration = Duration::from_millis(5);

/// Instantiates each generic test for both stores: `postgres::<name>` and `sqlite::<name>`, on
/// stores of `registry =>` (default [`conformance::CONFORMANCE_REGISTRY`]).
macro_rules! conformance {
    ($registry:path => $($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() -> crate::support::TestResult {
                    crate::conformance::with_postgres($registry, super::$name::<evc_runtime::PgStore>)
                        .await
                }
            )*
        }

        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() -> crate::support::TestResult {
                    crate::conformance::with_sqlite($registry, super::$name::<evc_runtime::SqliteStore>)
                        .await
                }
            )*
        }
    };
    ($($name:ident),* $(,)?) => {
        conformance!(crate::conformance::CONFORMANCE_REGISTRY => $($name),*);
    };
}

conformance!(
    append_commits_with_the_caller,
    append_rolls_back_with_the_caller,
    append_fans_out_to_every_subscribed_consumer,
    count_events_counts_the_types_asked_for,
    idempotency_key_returns_the_first_receipt,
    an_idempotency_key_is_scoped_per_tenant,
    event_reads_the_stored_envelope_without_the_payload,
    rejected_append_writes_a_reject_row_and_nothing_else,
    batch_append_keeps_order_and_receipts,
    a_large_batch_keeps_order_and_idempotency_across_statements,
    a_refusal_in_a_later_statement_leaves_nothing_of_the_batch,
    claim_leases_with_new_tokens_and_counts_attempts,
    a_claim_takes_only_its_stretch_of_event_seq,
    stale_token_is_refused_after_a_reclaim,
    per_key_claims_only_the_head_of_each_key,
    fail_retries_later_dead_letters_or_quarantines,
    fail_dead_letters_at_the_policys_last_attempt,
    release_returns_leases_as_never_claimed,
    recover_expired_requeues_then_dead_letters,
    record_effect_is_recorded_once,
    an_effect_key_is_scoped_per_tenant,
    ack_batch_reports_stale_entries,
    ack_batch_acks_leases_renewed_since_their_claim,
    held_batch_commits_with_its_transaction_or_leaves_nothing,
    concurrent_per_key_workers_keep_one_in_flight_per_key,
    shadow_savepoint_undoes_the_handlers_writes,
    the_dispatcher_delivers_every_event_once,
    a_slow_transactional_handler_keeps_the_rest_of_its_batch,
    dead_letters_list_dead_and_quarantined_deliveries,
    replay_plan_digest_changes_with_the_dead_set,
    replay_with_a_wrong_digest_is_refused_and_writes_nothing,
    applied_replay_writes_a_claimable_next_generation,
    repeated_idempotency_key_answers_the_first_result,
    an_idempotency_key_is_scoped_per_consumer,
    only_another_person_applies_a_proposed_replay,
    replays_and_superseded_generations_are_read_back,
    pause_stops_claims_and_resume_restores_them,
    each_state_change_is_recorded_with_who_and_why,
    status_counts_each_consumers_deliveries_lag_and_state,
    timeline_lists_the_traces_event_deliveries_and_attempts,
    leases_list_the_deliveries_leased_now,
    the_feed_yields_each_event_once_and_never_passes_an_open_transaction,
    a_relay_cursor_moves_only_under_its_newest_token,
    a_relay_cursor_reports_its_lag_progress_and_failures,
);

/// Lifecycle events, on both stores, with [`support::LIFECYCLE_REGISTRY`] (which registers
/// `job.dead_lettered` for the consumer `ops.watch`, and the replay events).
mod lifecycle {
    use super::*;

    conformance!(
        crate::support::LIFECYCLE_REGISTRY =>
        dead_lettering_appends_job_dead_lettered,
        a_replay_appends_scheduled_then_its_end,
    );

    /// Where every event needs a tenant, with [`support::LIFECYCLE_TENANT_REGISTRY`].
    mod tenants {
        use super::*;

        conformance!(
            crate::support::LIFECYCLE_TENANT_REGISTRY =>
            a_replay_of_one_tenant_appends_its_events_in_that_tenant,
        );
    }
}

/// Heartbeats by executor class, on both stores, with [`conformance::CLASSED_REGISTRY`].
mod classes {
    use super::*;

    conformance!(
        crate::conformance::CLASSED_REGISTRY =>
        silent_workers_are_reported_by_executor_class_and_owner,
    );

    /// Effect keys per idempotency namespace, with [`conformance::NAMESPACED_REGISTRY`].
    mod namespaces {
        use super::*;

        conformance!(
            crate::conformance::NAMESPACED_REGISTRY =>
            an_effect_key_is_recorded_once_per_idempotency_namespace,
        );
    }
}

/// Scheduler rounds, on both stores, with [`conformance::SCHEDULED_REGISTRY`].
mod schedules {
    use super::*;

    conformance!(
        crate::conformance::SCHEDULED_REGISTRY =>
        a_schedule_ticks_each_slot_once_and_handles_missed_slots_as_declared,
        rounds_at_the_same_time_append_each_due_slot_once,
        a_schedule_without_rounds_is_reported_overdue_until_one_ticks_it,
    );
}

/// A refused tick, on both stores, with [`conformance::REFUSED_TICK_REGISTRY`].
mod refused_ticks {
    use super::*;

    conformance!(
        crate::conformance::REFUSED_TICK_REGISTRY =>
        a_refused_tick_leaves_its_schedule_due_and_the_others_move_on,
    );
}

/// Lag breaches, on both stores, with [`conformance::LAGGING_REGISTRY`].
mod lag {
    use super::*;

    conformance!(
        crate::conformance::LAGGING_REGISTRY =>
        a_lag_breach_appends_one_event_while_it_lasts,
    );
}

/// The cut-over gate, on both stores, with [`conformance::GATED_REGISTRY`].
mod cutover {
    use super::*;

    conformance!(
        crate::conformance::GATED_REGISTRY =>
        the_cutover_gate_holds_live_until_shadow_runs_match_the_legacy_path,
        legacy_outcomes_are_checked_and_kept_once,
    );
}

mod retention {
    use super::*;

    conformance!(
        crate::conformance::RETAINED_REGISTRY =>
        a_purge_removes_what_retention_expires_and_keeps_open_deliveries,
        a_purge_needs_a_reason_and_an_actor,
        an_inventory_cannot_vouch_for_what_a_purge_may_have_removed,
    );
}

mod evidence {
    use super::*;

    conformance!(usage_evidence_reads_the_ledger_alone);

    mod recorded {
        use super::*;

        conformance!(
            crate::conformance::RECORDING_REGISTRY =>
            recorded_evidence_keeps_one_snapshot_per_slot_for_its_period,
        );
    }
}

mod inventory {
    use super::*;

    conformance!(
        crate::conformance::INVENTORY_REGISTRY =>
        an_inventory_classifies_the_events_a_consumer_never_received,
        an_applied_inventory_delivers_the_safe_and_the_repaired_once,
        an_expired_event_is_decided_for_good,
    );
}

/// The value of `series` (its name and labels) in the OpenMetrics text `metrics`.
fn metric(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series))
        .and_then(|rest| rest.trim().parse::<f64>().ok())
}

/// A `test.note` whose key is number `key`.
fn note(key: u64) -> OutgoingEvent {
    support::event("test.note", "1.0.0", support::note(&support::note_key(key)))
}

/// A `test.note` with a deny-listed key inside its free-form `meta` object.
fn forbidden_note(key: u64) -> OutgoingEvent {
    let payload = serde_json::json!({
        "note_id": support::note_key(key),
        "meta": {"body_text": "not allowed"},
    });
    support::event("test.note", "1.0.0", payload)
}

/// A `test.ping` (fans out to `k.plain` only).
fn ping() -> OutgoingEvent {
    support::event("test.ping", "1.0.0", serde_json::json!({"n": 1}))
}

/// Appends `events` in one transaction of the caller's and commits.
async fn committed<S: Conformance>(
    store: &S,
    events: Vec<OutgoingEvent>,
) -> Result<Vec<AppendReceipt>, BoxError> {
    let mut tx = store.begin().await?;
    let mut receipts = Vec::with_capacity(events.len());
    for event in events {
        receipts.push(
            store
                .append(&mut *tx, event, AppendOptions::default())
                .await?,
        );
    }
    tx.commit().await?;
    Ok(receipts)
}

/// A leased claim on a connection of the store's pool.
async fn claim<S: Conformance>(
    store: &S,
    consumer: &str,
    owner: &str,
    batch: u32,
    lease: Duration,
    per_key: bool,
) -> Result<Vec<Claimed>, DispatchError> {
    let mut connection = store.pool().acquire().await?;
    let request = ClaimRequest::leased(consumer, owner, batch, lease).per_key(per_key);
    Store::claim(store, &mut *connection, &request).await
}

/// A claim of `k.plain`'s deliveries held by the caller's transaction.
async fn held_claim<S: Conformance>(
    store: &S,
    transaction: &mut Connection<S>,
    owner: &str,
) -> Result<Vec<Claimed>, DispatchError> {
    Store::claim(store, transaction, &ClaimRequest::held(PLAIN, owner, 10)).await
}

/// Acks leases on a connection of the store's pool.
async fn ack_leases<S: Conformance>(
    store: &S,
    leases: &[&Lease],
) -> Result<AckBatch, DispatchError> {
    let mut connection = store.pool().acquire().await?;
    Store::ack(store, &mut *connection, leases).await
}

/// Acks one lease on a connection of the store's pool: a stale one is
/// [`DispatchError::StaleToken`].
async fn ack<S: Conformance>(store: &S, lease: &Lease) -> Result<(), DispatchError> {
    let outcome = ack_leases(store, &[lease]).await?;
    match outcome.stale.into_iter().next() {
        None => Ok(()),
        Some((event_id, consumer, token)) => Err(DispatchError::StaleToken {
            event_id,
            consumer,
            token,
        }),
    }
}

/// The event ids of claimed deliveries, in claim order.
/// The lease of `event_id` among `claimed`.
fn claimed_lease(claimed: &[Claimed], event_id: uuid::Uuid) -> Result<Lease, BoxError> {
    claimed
        .iter()
        .find(|claimed| claimed.lease.event_id == event_id)
        .map(|claimed| claimed.lease.clone())
        .ok_or_else(|| format!("{event_id} was not claimed").into())
}

fn ids(claimed: &[Claimed]) -> Vec<uuid::Uuid> {
    claimed
        .iter()
        .map(|claimed| claimed.lease.event_id)
        .collect()
}

/// `(attempt, outcome, error code, token, owner)` of each attempt row.
async fn attempt_rows<S: Conformance>(
    store: &S,
    event_id: uuid::Uuid,
    consumer: &str,
) -> Result<Vec<(u32, String, Option<String>, i64, String)>, BoxError> {
    Ok(store
        .attempts(event_id, consumer)
        .await?
        .into_iter()
        .map(|row| {
            (
                row.attempt,
                row.outcome,
                row.error_code,
                row.token,
                row.owner,
            )
        })
        .collect())
}

fn row(
    attempt: u32,
    outcome: &str,
    code: Option<&str>,
    token: i64,
    owner: &str,
) -> (u32, String, Option<String>, i64, String) {
    (
        attempt,
        outcome.to_owned(),
        code.map(str::to_owned),
        token,
        owner.to_owned(),
    )
}

/// Runs lease-expiry recovery until it recovers `expected` leases (the lease must run out
/// first); fails the test if it never does.
async fn recover<S: Conformance>(store: &S, expected: u64) -> TestResult {
    let recovered = eventually(|| async move {
        let recovered = store.recover_expired(10).await?;
        assert!(recovered <= expected, "{} recovered {recovered}", S::NAME);
        Ok((recovered == expected).then_some(()))
    })
    .await?;
    assert!(
        recovered.is_some(),
        "{}: the short lease never expired",
        S::NAME
    );
    Ok(())
}

async fn append_commits_with_the_caller<S: Conformance>(store: S) -> TestResult {
    let mut tx = store.begin().await?;
    let receipt = store
        .append(&mut *tx, note(1), AppendOptions::default())
        .await?;
    assert!(receipt.created);
    assert_eq!(receipt.deliveries, 3);
    // Nothing is visible outside the caller's transaction before it commits.
    assert_eq!(store.count_events(&[]).await?, 0);
    assert_eq!(store.delivery(receipt.event_id, PLAIN).await?, None);
    tx.commit().await?;

    assert_eq!(store.count_events(&[]).await?, 1);
    for consumer in [ORDERED, PLAIN, SHADOW] {
        let delivery = store
            .delivery(receipt.event_id, consumer)
            .await?
            .ok_or("delivery missing")?;
        assert_eq!(delivery.status, DeliveryStatus::Pending, "{consumer}");
        assert_eq!(
            (delivery.attempts, delivery.token, delivery.generation),
            (0, 0, 0)
        );
        assert_eq!((delivery.owner, delivery.lease_until), (None, None));
        assert!(store.attempts(receipt.event_id, consumer).await?.is_empty());
    }
    Ok(())
}

async fn append_rolls_back_with_the_caller<S: Conformance>(store: S) -> TestResult {
    let mut tx = store.begin().await?;
    let receipt = store
        .append(&mut *tx, note(1), AppendOptions::default())
        .await?;
    let batch = store
        .append_batch(&mut *tx, vec![ping().into(), note(2).into()])
        .await?;
    assert_eq!(batch.len(), 2);
    tx.rollback().await?;

    assert_eq!(store.count_events(&[]).await?, 0);
    for consumer in [ORDERED, PLAIN, SHADOW] {
        assert_eq!(
            store.count_deliveries(consumer, &[]).await?,
            0,
            "{consumer}"
        );
    }
    assert_eq!(store.delivery(receipt.event_id, PLAIN).await?, None);
    Ok(())
}

async fn append_fans_out_to_every_subscribed_consumer<S: Conformance>(store: S) -> TestResult {
    let receipts = committed(&store, vec![note(1), ping()]).await?;
    let (note_id, ping_id) = (receipts[0].event_id, receipts[1].event_id);
    assert_eq!((receipts[0].deliveries, receipts[1].deliveries), (3, 1));

    for consumer in [ORDERED, PLAIN, SHADOW] {
        let delivery = store.delivery(note_id, consumer).await?;
        assert_eq!(
            delivery.map(|d| d.status),
            Some(DeliveryStatus::Pending),
            "{consumer}"
        );
    }
    // An `off` consumer gets nothing; a ping goes to its one subscriber.
    assert_eq!(store.delivery(note_id, conformance::OFF).await?, None);
    assert!(store.delivery(ping_id, PLAIN).await?.is_some());
    assert_eq!(store.delivery(ping_id, ORDERED).await?, None);
    assert_eq!(store.delivery(ping_id, SHADOW).await?, None);

    let counts = [
        store.count_deliveries(ORDERED, &[]).await?,
        store.count_deliveries(PLAIN, &[]).await?,
        store.count_deliveries(SHADOW, &[]).await?,
        store.count_deliveries(conformance::OFF, &[]).await?,
        store
            .count_deliveries(PLAIN, &[DeliveryStatus::Pending])
            .await?,
        store
            .count_deliveries(PLAIN, &[DeliveryStatus::Leased])
            .await?,
    ];
    assert_eq!(counts, [1, 2, 1, 0, 2, 0]);
    Ok(())
}

async fn count_events_counts_the_types_asked_for<S: Conformance>(store: S) -> TestResult {
    committed(&store, vec![note(1), ping(), note(2)]).await?;
    let counts = [
        store.count_events(&[]).await?,
        store.count_events(&["test.note"]).await?,
        store.count_events(&["test.ping"]).await?,
        store.count_events(&["test.ping", "test.note"]).await?,
        store.count_events(&["test.other"]).await?,
        // A type is a whole name, not a pattern.
        store.count_events(&["test.%"]).await?,
    ];
    assert_eq!(counts, [3, 2, 1, 3, 0, 0]);
    Ok(())
}

async fn idempotency_key_returns_the_first_receipt<S: Conformance>(store: S) -> TestResult {
    let keyed = || AppendOptions::new().idempotency_key("order-42");
    let mut tx = store.begin().await?;
    let first = store.append(&mut *tx, note(1), keyed()).await?;
    tx.commit().await?;
    assert!(first.created);

    let mut tx = store.begin().await?;
    // Another payload with the same key in the same producer class: the first event.
    let again = store.append(&mut *tx, note(2), keyed()).await?;
    assert_eq!(
        again,
        AppendReceipt {
            created: false,
            deliveries: 0,
            ..first
        }
    );
    // The same key in another producer class is another event.
    let other = store.append(&mut *tx, ping(), keyed()).await?;
    assert!(other.created);
    assert_ne!(other.event_id, first.event_id);
    tx.commit().await?;

    assert_eq!(store.count_events(&[]).await?, 2);
    assert_eq!(store.count_deliveries(ORDERED, &[]).await?, 1);
    assert_eq!(store.count_deliveries(PLAIN, &[]).await?, 2);
    Ok(())
}

/// One producer serving every tenant: the same key in two tenants is two events, never the
/// first tenant's event answered to the second (which would drop the second tenant's event);
/// within a tenant, and among events without one, a repeated key is still the first event.
async fn an_idempotency_key_is_scoped_per_tenant<S: Conformance>(store: S) -> TestResult {
    let keyed = |tenant: Option<&str>| {
        let options = AppendOptions::new().idempotency_key("order-1001");
        match tenant {
            Some(tenant) => options.tenant_scope(tenant),
            None => options,
        }
    };
    let mut tx = store.begin().await?;
    let acme = store.append(&mut *tx, note(1), keyed(Some("acme"))).await?;
    let bolt = store.append(&mut *tx, note(2), keyed(Some("bolt"))).await?;
    let untenanted = store.append(&mut *tx, note(3), keyed(None)).await?;
    tx.commit().await?;
    assert!(
        acme.created && bolt.created && untenanted.created,
        "{}",
        S::NAME
    );
    assert_ne!(acme.event_id, bolt.event_id);
    assert_ne!(untenanted.event_id, acme.event_id);

    let mut tx = store.begin().await?;
    let again = [
        store.append(&mut *tx, note(4), keyed(Some("bolt"))).await?,
        store.append(&mut *tx, note(5), keyed(None)).await?,
    ];
    let batch = store
        .append_batch(
            &mut *tx,
            vec![
                NewEvent::new(note(6), keyed(Some("cargo"))),
                NewEvent::new(note(7), keyed(Some("acme"))),
                NewEvent::new(note(8), keyed(Some("cargo"))),
                NewEvent::new(note(9), keyed(None)),
            ],
        )
        .await?;
    tx.commit().await?;
    let answered = |receipt: &AppendReceipt| (receipt.created, receipt.event_id);
    assert_eq!(
        again.each_ref().map(answered),
        [(false, bolt.event_id), (false, untenanted.event_id)],
        "{}",
        S::NAME
    );
    assert!(batch[0].created, "{}", S::NAME);
    assert_eq!(
        batch[1..].iter().map(answered).collect::<Vec<_>>(),
        [
            (false, acme.event_id),
            (false, batch[0].event_id),
            (false, untenanted.event_id)
        ],
        "{}",
        S::NAME
    );
    assert_eq!(store.count_events(&[]).await?, 4);
    for (receipt, tenant) in [(&acme, "acme"), (&bolt, "bolt"), (&batch[0], "cargo")] {
        let stored = store
            .event(receipt.event_id)
            .await?
            .ok_or("event missing")?;
        assert_eq!(stored.tenant_scope.as_deref(), Some(tenant));
    }
    Ok(())
}

async fn event_reads_the_stored_envelope_without_the_payload<S: Conformance>(
    store: S,
) -> TestResult {
    let options = AppendOptions::new()
        .idempotency_key("note-7")
        .tenant_scope("tenant-a")
        .correlation_id("corr-1")
        .causation_id("cause-1");
    let mut tx = store.begin().await?;
    let first = store.append(&mut *tx, note(7), options).await?;
    let second = store
        .append(&mut *tx, ping(), AppendOptions::default())
        .await?;
    tx.commit().await?;

    let stored = store.event(first.event_id).await?.ok_or("event missing")?;
    let payload = serde_json::to_vec(&support::note(&support::note_key(7)))?;
    assert_eq!(
        (
            stored.event_type.as_str(),
            stored.schema_version.as_str(),
            stored.producer_class.as_str(),
        ),
        ("test.note", "1.0.0", "notes")
    );
    assert_eq!(stored.order_key, support::note_key(7));
    assert_eq!(stored.idempotency_key.as_deref(), Some("note-7"));
    assert_eq!(stored.tenant_scope.as_deref(), Some("tenant-a"));
    assert_eq!(stored.correlation_id.as_deref(), Some("corr-1"));
    assert_eq!(stored.causation_id.as_deref(), Some("cause-1"));
    assert_eq!(stored.trace_id.as_deref(), Some(support::TRACE_ID));
    // Canonical JSON of this payload is serde_json's compact form: its keys are sorted.
    assert_eq!(stored.payload_bytes, u64::try_from(payload.len())?);

    let ping = store.event(second.event_id).await?.ok_or("event missing")?;
    assert_eq!(ping.event_type, "test.ping");
    assert_eq!(ping.idempotency_key, None);
    assert!(ping.seq > stored.seq, "append order");
    assert_eq!(store.event(uuid::Uuid::now_v7()).await?, None);
    Ok(())
}

async fn rejected_append_writes_a_reject_row_and_nothing_else<S: Conformance>(
    store: S,
) -> TestResult {
    let mut tx = store.begin().await?;
    let error = store
        .append(&mut *tx, forbidden_note(1), AppendOptions::default())
        .await
        .expect_err("a deny-listed key is refused");
    let rejection = error.rejection().ok_or("not a rejection")?;
    assert_eq!(rejection.reason_code(), "forbidden_key");
    // The usual reaction to an error: the audit must survive it.
    tx.rollback().await?;

    let store = &store;
    let rejects = eventually(|| async move {
        let rejects = store.rejects(10).await?;
        Ok((!rejects.is_empty()).then_some(rejects))
    })
    .await?
    .ok_or("no reject row was recorded")?;
    assert_eq!(rejects.len(), 1);
    let reject = &rejects[0];
    assert_eq!(
        (
            reject.event_type.as_str(),
            reject.version.as_deref(),
            reject.reason_code.as_str()
        ),
        ("test.note", Some("1.0.0"), "forbidden_key")
    );
    // No digest key configured: no digest (never the payload).
    assert_eq!(reject.payload_digest, "");
    assert_eq!(store.count_events(&[]).await?, 0);
    for consumer in [ORDERED, PLAIN, SHADOW] {
        assert_eq!(store.count_deliveries(consumer, &[]).await?, 0);
    }

    // The status report counts it among the window's problems; no window, no problem.
    let report = store.status(Duration::from_secs(3_600)).await?;
    let recent: Vec<(&str, &str, i64)> = report
        .rejects
        .iter()
        .map(|r| (r.event_type.as_str(), r.reason_code.as_str(), r.rejects))
        .collect();
    assert_eq!(recent, [("test.note", "forbidden_key", 1)], "{}", S::NAME);
    assert!((report.rejects[0].newest - reject.rejected_at).abs() < 0.001);
    let problems: Vec<String> = report
        .problems(Duration::from_secs(3_600))
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        problems.contains(&"test.note: 1 append refused (forbidden_key)".to_owned()),
        "{}: {problems:?}",
        S::NAME
    );
    assert!(
        report
            .prometheus()
            .contains("evc_rejected_appends{event_type=\"test.note\",reason=\"forbidden_key\"} 1"),
        "{}",
        S::NAME
    );
    let later = store.status(Duration::ZERO).await?;
    assert!(later.rejects.is_empty(), "{}: {:?}", S::NAME, later.rejects);
    Ok(())
}

/// A batch larger than one statement writes (the SQLite store writes 256 rows per statement,
/// then powers of two): every event once, seqs in batch order, a key taken in an earlier
/// statement answered with the first receipt, and each event's deliveries.
async fn a_large_batch_keeps_order_and_idempotency_across_statements<S: Conformance>(
    store: S,
) -> TestResult {
    const EVENTS: u64 = 700;
    let keyed = |key: &str| AppendOptions::new().idempotency_key(key);
    let events: Vec<NewEvent> = (0..EVENTS)
        .map(|n| match n {
            // "early" is taken in the first statement, then repeated in the third and last.
            10 | 600 | 699 => NewEvent::new(note(n), keyed("early")),
            300 => NewEvent::new(note(n), keyed("middle")),
            n if n % 3 == 0 => NewEvent::new(ping(), AppendOptions::default()),
            n => NewEvent::new(note(n), AppendOptions::default()),
        })
        .collect();
    let mut tx = store.begin().await?;
    let receipts = store.append_batch(&mut *tx, events).await?;
    tx.commit().await?;

    assert_eq!(receipts.len(), EVENTS as usize);
    let repeated = [600, 699];
    for (index, receipt) in receipts.iter().enumerate() {
        assert_eq!(receipt.created, !repeated.contains(&index), "event {index}");
    }
    for index in repeated {
        assert_eq!(
            (receipts[index].event_id, receipts[index].seq),
            (receipts[10].event_id, receipts[10].seq)
        );
    }
    let created: Vec<&AppendReceipt> = receipts.iter().filter(|r| r.created).collect();
    assert!(created.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(store.count_events(&[]).await?, EVENTS - 2);
    // Notes (indexes not a multiple of three, and 300) fan out to three consumers, pings to
    // k.plain alone.
    let notes = (0..EVENTS)
        .filter(|n| (n % 3 != 0 || *n == 300) && !matches!(n, 600 | 699))
        .count() as u64;
    let pings = EVENTS - 2 - notes;
    assert_eq!(store.count_deliveries(ORDERED, &[]).await?, notes);
    assert_eq!(store.count_deliveries(PLAIN, &[]).await?, notes + pings);
    for receipt in &created {
        let stored = store
            .event(receipt.event_id)
            .await?
            .ok_or("event missing")?;
        assert_eq!(stored.seq, receipt.seq);
    }
    Ok(())
}

/// A batch refused by an event past its first statement (the SQLite store checks each
/// statement's rows while it inserts the statement before): the error names the first refused
/// event and counts all, each refused event gets a reject row, and nothing of the batch stays,
/// while the caller's transaction keeps what it wrote before and can go on.
async fn a_refusal_in_a_later_statement_leaves_nothing_of_the_batch<S: Conformance>(
    store: S,
) -> TestResult {
    const EVENTS: u64 = 700;
    committed(&store, vec![note(1_000)]).await?;
    let mut tx = store.begin().await?;
    store
        .append(&mut *tx, note(1_001), AppendOptions::default())
        .await?;
    let events: Vec<NewEvent> = (0..EVENTS)
        .map(|n| match n {
            100 => NewEvent::new(note(n), AppendOptions::new().idempotency_key("late")),
            400 | 650 => NewEvent::new(forbidden_note(n), AppendOptions::default()),
            n if n % 3 == 0 => NewEvent::new(ping(), AppendOptions::default()),
            n => NewEvent::new(note(n), AppendOptions::default()),
        })
        .collect();
    match store.append_batch(&mut *tx, events).await {
        Err(evc_runtime::AppendError::BatchRejected {
            index, rejected, ..
        }) => assert_eq!((index, rejected), (400, 2)),
        Err(other) => return Err(format!("expected BatchRejected, got {other}").into()),
        Ok(receipts) => return Err(format!("appended {} events", receipts.len()).into()),
    }
    // The key the refused batch used in its first statement is free again.
    let again = store
        .append_batch(
            &mut *tx,
            vec![NewEvent::new(
                note(2_000),
                AppendOptions::new().idempotency_key("late"),
            )],
        )
        .await?;
    assert!(again[0].created);
    tx.commit().await?;

    assert_eq!(store.count_events(&[]).await?, 3);
    assert_eq!(store.count_deliveries(PLAIN, &[]).await?, 3);
    let store = &store;
    let rejects = eventually(|| async move {
        let rejects = store.rejects(10).await?;
        Ok((rejects.len() >= 2).then_some(rejects))
    })
    .await?
    .ok_or("reject rows missing")?;
    assert_eq!(rejects.len(), 2);
    Ok(())
}

/// A delivery dead-lettered by a failure, and one dead-lettered by recovery when its last
/// lease expired, each append one `job.dead_lettered` that names it, fanned out to its
/// subscriber; a dead-lettered `job.dead_lettered` delivery appends nothing more.
async fn dead_lettering_appends_job_dead_lettered<S: Conformance>(store: S) -> TestResult {
    const LEASED: &str = "d.leased";
    const WATCH: &str = "ops.watch";
    let failed = committed(&store, vec![note(1)]).await?[0].event_id;
    let claimed = claim(&store, LEASED, "w1", 1, LEASE, false).await?;
    store
        .fail(
            &claimed[0].lease,
            FailureClass::Permanent,
            "bad-note",
            RetryDecision::Dead,
        )
        .await?;
    assert_eq!(store.count_events(&[evc_runtime::DEAD_LETTERED]).await?, 1);

    let watched = claim(&store, WATCH, "w1", 10, LEASE, false).await?;
    assert_eq!(watched.len(), 1);
    let event = &watched[0];
    assert_eq!(event.delivery.event_type, evc_runtime::DEAD_LETTERED);
    let payload = &event.payload;
    assert_eq!(payload["event_id"], failed.to_string());
    assert_eq!(payload["event_type"], "test.note");
    assert_eq!(payload["consumer_name"], LEASED);
    assert_eq!(payload["attempts"], 1);
    assert_eq!(payload["failure_class"], "permanent");
    assert_eq!(payload["last_error_code"], "BAD_NOTE");
    let at = payload["dead_lettered_at"].as_str().ok_or("no time")?;
    assert!(at.starts_with("20") && at.ends_with('Z'), "{at}");
    // In the dead-lettered event's trace, caused by it.
    assert_eq!(
        event.trace.as_ref().map(|t| t.trace_id().to_owned()),
        claimed[0].trace.as_ref().map(|t| t.trace_id().to_owned())
    );

    // The loop guard.
    store
        .fail(
            &event.lease,
            FailureClass::Permanent,
            "watch-failed",
            RetryDecision::Dead,
        )
        .await?;
    assert_eq!(store.count_events(&[evc_runtime::DEAD_LETTERED]).await?, 1);

    // Recovery spends the retry policy's four attempts.
    let expired = committed(&store, vec![note(2)]).await?[0].event_id;
    for _ in 1..=4 {
        assert_eq!(claim(&store, LEASED, "w1", 1, SHORT, false).await?.len(), 1);
        recover(&store, 1).await?;
    }
    assert_eq!(store.count_events(&[evc_runtime::DEAD_LETTERED]).await?, 2);
    let watched = claim(&store, WATCH, "w1", 10, LEASE, false).await?;
    assert_eq!(watched.len(), 1);
    let payload = &watched[0].payload;
    assert_eq!(payload["event_id"], expired.to_string());
    assert_eq!(payload["attempts"], 4);
    assert_eq!(payload["failure_class"], "transient");
    assert_eq!(payload["last_error_code"], "LEASE_EXPIRED");
    Ok(())
}

/// An applied replay appends `dlq_replay.scheduled`; the settle of its last delivery appends
/// `dlq_replay.failed` when one failed again, `dlq_replay.completed` when all were acked, and
/// a settle before the last appends neither.
async fn a_replay_appends_scheduled_then_its_end<S: Conformance>(store: S) -> TestResult {
    use evc_runtime::{REPLAY_COMPLETED, REPLAY_FAILED, REPLAY_SCHEDULED};
    const LEASED: &str = "d.leased";
    store.deploy_replayable(LEASED).await?;
    let count = |kind: &'static str| {
        let store = &store;
        async move { store.count_events(&[kind]).await }
    };
    let fail = |claimed: &Claimed| {
        let (store, lease) = (&store, claimed.lease.clone());
        async move {
            store
                .fail(&lease, FailureClass::Permanent, "bad", RetryDecision::Dead)
                .await
        }
    };
    let replay = |key: &'static str| replay_dead(&store, LEASED, key);

    committed(&store, vec![note(1), note(2)]).await?;
    for claimed in claim(&store, LEASED, "w1", 10, LEASE, false).await? {
        fail(&claimed).await?;
    }
    assert_eq!(replay("replay-1").await?, 2);
    assert_eq!(count(REPLAY_SCHEDULED).await?, 1);

    let claimed = claim(&store, LEASED, "w2", 10, LEASE, false).await?;
    assert_eq!(claimed.len(), 2);
    ack(&store, &claimed[0].lease).await?;
    assert_eq!(
        count(REPLAY_COMPLETED).await? + count(REPLAY_FAILED).await?,
        0
    );
    fail(&claimed[1]).await?;
    assert_eq!(
        (count(REPLAY_FAILED).await?, count(REPLAY_COMPLETED).await?),
        (1, 0)
    );

    assert_eq!(replay("replay-2").await?, 1);
    let claimed = claim(&store, LEASED, "w3", 10, LEASE, false).await?;
    ack(&store, &claimed[0].lease).await?;
    assert_eq!(
        (
            count(REPLAY_SCHEDULED).await?,
            count(REPLAY_FAILED).await?,
            count(REPLAY_COMPLETED).await?
        ),
        (2, 1, 1)
    );
    Ok(())
}

/// Proposes (alice) and applies (bob) a replay of `consumer`'s dead deliveries under
/// idempotency key `key`; the deliveries it made.
async fn replay_dead<S: Conformance>(
    store: &S,
    consumer: &str,
    key: &str,
) -> Result<u64, BoxError> {
    let selection = ReplaySelection::consumer(consumer).statuses([SettledStatus::Dead]);
    let plan = store.propose_replay(&selection, "alice").await?.plan;
    let approval = ReplayApproval::new(plan.digest, "fixed the bug", "CHG-1", key, "bob");
    Ok(store.replay(&selection, &approval).await?.deliveries)
}

/// Where the registry requires a tenant scope, a replay of one tenant's events appends
/// `dlq_replay.scheduled` and its end in that tenant; a replay of several tenants' events has
/// no tenant to give them, so the registry refuses them (logged) and the replay stands.
async fn a_replay_of_one_tenant_appends_its_events_in_that_tenant<S: Conformance>(
    store: S,
) -> TestResult {
    use evc_runtime::{REPLAY_COMPLETED, REPLAY_SCHEDULED};
    const LEASED: &str = "d.leased";
    store.deploy_replayable(LEASED).await?;
    let count = |kind: &'static str| {
        let store = &store;
        async move { store.count_events(&[kind]).await }
    };
    let dead_in = |tenants: &'static [&'static str]| {
        let store = &store;
        async move {
            let mut tx = store.begin().await?;
            for (key, tenant) in (1..).zip(tenants) {
                let options = AppendOptions::new().tenant_scope(*tenant);
                store.append(&mut *tx, note(key), options).await?;
            }
            tx.commit().await?;
            for claimed in claim(store, LEASED, "w1", 10, LEASE, false).await? {
                store
                    .fail(
                        &claimed.lease,
                        FailureClass::Permanent,
                        "bad",
                        RetryDecision::Dead,
                    )
                    .await?;
            }
            Ok::<_, BoxError>(())
        }
    };
    let replay = |key: &'static str| replay_dead(&store, LEASED, key);

    dead_in(&["acme", "acme"]).await?;
    assert_eq!(replay("replay-1").await?, 2);
    assert_eq!(count(REPLAY_SCHEDULED).await?, 1, "{}", S::NAME);
    let scheduled = claim(&store, "ops.replays", "w9", 10, LEASE, false).await?;
    assert_eq!(scheduled.len(), 1, "{}", S::NAME);
    let event = store
        .event(scheduled[0].lease.event_id)
        .await?
        .ok_or("the scheduled event")?;
    assert_eq!(event.tenant_scope.as_deref(), Some("acme"), "{}", S::NAME);
    for claimed in claim(&store, LEASED, "w2", 10, LEASE, false).await? {
        ack(&store, &claimed.lease).await?;
    }
    assert_eq!(count(REPLAY_COMPLETED).await?, 1, "{}", S::NAME);

    // Two tenants in one replay: the replay is applied, its events are not.
    dead_in(&["acme", "bolt"]).await?;
    assert_eq!(replay("replay-2").await?, 2);
    for claimed in claim(&store, LEASED, "w3", 10, LEASE, false).await? {
        ack(&store, &claimed.lease).await?;
    }
    assert_eq!(
        (
            count(REPLAY_SCHEDULED).await?,
            count(REPLAY_COMPLETED).await?
        ),
        (1, 1),
        "{}",
        S::NAME
    );
    assert_eq!(store.replays(10).await?.len(), 2, "{}", S::NAME);
    Ok(())
}

async fn batch_append_keeps_order_and_receipts<S: Conformance>(store: S) -> TestResult {
    let keyed = || AppendOptions::new().idempotency_key("dup");
    let events = vec![
        NewEvent::new(note(1), AppendOptions::default()),
        NewEvent::new(note(2), keyed()),
        NewEvent::new(ping(), AppendOptions::default()),
        // Taken by an earlier event of the same batch.
        NewEvent::new(note(3), keyed()),
        NewEvent::new(note(4), AppendOptions::default()),
    ];
    let mut tx = store.begin().await?;
    let receipts = store.append_batch(&mut *tx, events).await?;
    tx.commit().await?;

    let created: Vec<bool> = receipts.iter().map(|r| r.created).collect();
    assert_eq!(created, [true, true, true, false, true]);
    let deliveries: Vec<u32> = receipts.iter().map(|r| r.deliveries).collect();
    assert_eq!(deliveries, [3, 3, 1, 0, 3]);
    assert_eq!(
        (receipts[3].event_id, receipts[3].seq),
        (receipts[1].event_id, receipts[1].seq)
    );
    let seqs: Vec<i64> = [0, 1, 2, 4].iter().map(|&i| receipts[i].seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(store.count_events(&[]).await?, 4);

    // Without keys or delays (PostgreSQL writes these with COPY): the same order.
    let mut tx = store.begin().await?;
    let plain = store
        .append_batch(
            &mut *tx,
            vec![note(5).into(), ping().into(), note(6).into()],
        )
        .await?;
    tx.commit().await?;
    assert!(plain.iter().all(|r| r.created));
    let seqs: Vec<i64> = std::iter::once(receipts[4].seq)
        .chain(plain.iter().map(|r| r.seq))
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");

    // One refused event refuses the batch: a reject row per refused event, nothing else.
    let mut tx = store.begin().await?;
    let error = store
        .append_batch(
            &mut *tx,
            vec![
                note(7).into(),
                forbidden_note(8).into(),
                note(9).into(),
                forbidden_note(10).into(),
            ],
        )
        .await
        .expect_err("refused");
    tx.rollback().await?;
    match error {
        evc_runtime::AppendError::BatchRejected {
            index, rejected, ..
        } => assert_eq!((index, rejected), (1, 2)),
        other => return Err(format!("expected BatchRejected, got {other}").into()),
    }
    let store = &store;
    let rejects = eventually(|| async move {
        let rejects = store.rejects(10).await?;
        Ok((rejects.len() >= 2).then_some(rejects))
    })
    .await?
    .ok_or("reject rows missing")?;
    assert_eq!(rejects.len(), 2);
    assert_eq!(store.count_events(&[]).await?, 7);
    Ok(())
}

async fn claim_leases_with_new_tokens_and_counts_attempts<S: Conformance>(store: S) -> TestResult {
    let receipts = committed(&store, vec![note(1), note(2), note(3)]).await?;
    let claimed = claim(&store, PLAIN, "w1", 10, LEASE, false).await?;
    assert_eq!(
        ids(&claimed),
        receipts.iter().map(|r| r.event_id).collect::<Vec<_>>()
    );
    for (claimed, receipt) in claimed.iter().zip(&receipts) {
        let lease = &claimed.lease;
        assert_eq!(
            (lease.token, lease.attempt, claimed.delivery.attempt),
            (1, 1, 1)
        );
        assert_eq!(
            (lease.owner.as_str(), lease.consumer.as_str()),
            ("w1", PLAIN)
        );
        assert_eq!(claimed.event_seq, receipt.seq);
        assert!(!lease.is_shadow());
        let delivery = store
            .delivery(lease.event_id, PLAIN)
            .await?
            .ok_or("delivery missing")?;
        assert_eq!(delivery.status, DeliveryStatus::Leased);
        assert_eq!((delivery.attempts, delivery.token), (1, 1));
        assert_eq!(delivery.owner.as_deref(), Some("w1"));
        let until = delivery.lease_until.ok_or("no lease end")?;
        assert!((until - lease.claimed_at - 30.0).abs() < 1.0, "{until}");
    }
    assert_eq!(
        claimed[0].payload,
        support::note(&support::note_key(1)),
        "the payload as appended"
    );
    // Everything is leased: nothing more to claim.
    assert!(
        claim(&store, PLAIN, "w2", 10, LEASE, false)
            .await?
            .is_empty()
    );

    // Renewal extends the lease.
    let mut connection = store.pool().acquire().await?;
    let renewed = store
        .renew(
            &mut connection,
            &[&claimed[1].lease],
            Duration::from_secs(120),
        )
        .await?;
    drop(connection);
    assert_eq!(renewed, vec![claimed[1].lease.event_id]);
    let delivery = store.delivery(claimed[1].lease.event_id, PLAIN).await?;
    let until = delivery.and_then(|d| d.lease_until).ok_or("no lease end")?;
    assert!(until > claimed[1].lease.claimed_at + 100.0, "{until}");

    // A retry due at once is claimed again with the next token and attempt.
    let first = &claimed[0].lease;
    store
        .fail(
            first,
            FailureClass::Transient,
            "E_BUSY",
            RetryDecision::Retry(Duration::ZERO),
        )
        .await?;
    let again = claim(&store, PLAIN, "w2", 10, LEASE, false).await?;
    assert_eq!(ids(&again), vec![first.event_id]);
    assert_eq!((again[0].lease.token, again[0].lease.attempt), (2, 2));
    assert_eq!(
        attempt_rows(&store, first.event_id, PLAIN).await?,
        vec![row(1, "retry", Some("E_BUSY"), 1, "w1")]
    );
    Ok(())
}

/// The claim cursor hands each claim a stretch of `event_seq` (`after_seq` to `until_seq`):
/// leased or held, a claim takes nothing outside it, however many its batch would allow.
async fn a_claim_takes_only_its_stretch_of_event_seq<S: Conformance>(store: S) -> TestResult {
    let receipts = committed(&store, (1..=6).map(note).collect()).await?;
    let id = |n: usize| receipts[n - 1].event_id;
    let seq = |n: usize| receipts[n - 1].seq;

    let mut connection = store.pool().acquire().await?;
    let request = ClaimRequest::leased(PLAIN, "w1", 10, LEASE)
        .after_seq(seq(1))
        .until_seq(seq(4));
    let leased = Store::claim(&store, &mut *connection, &request).await?;
    drop(connection);
    assert_eq!(ids(&leased), vec![id(2), id(3), id(4)]);

    let mut tx = store.begin().await?;
    let request = ClaimRequest::held(PLAIN, "w2", 10)
        .after_seq(seq(4))
        .until_seq(seq(5));
    let held = Store::claim(&store, &mut *tx, &request).await?;
    assert_eq!(ids(&held), vec![id(5)]);
    tx.rollback().await?;

    let rest = claim(&store, PLAIN, "w3", 10, LEASE, false).await?;
    assert_eq!(
        ids(&rest),
        vec![id(1), id(5), id(6)],
        "without a stretch, everything still due"
    );
    Ok(())
}

async fn stale_token_is_refused_after_a_reclaim<S: Conformance>(store: S) -> TestResult {
    let receipts = committed(&store, vec![note(1)]).await?;
    let event_id = receipts[0].event_id;
    let first = claim(&store, PLAIN, "w1", 1, SHORT, false).await?;
    assert_eq!(ids(&first), vec![event_id]);
    recover(&store, 1).await?;
    let second = claim(&store, PLAIN, "w2", 1, LEASE, false).await?;
    assert_eq!(ids(&second), vec![event_id]);
    let (old, new) = (&first[0].lease, &second[0].lease);
    assert_eq!((new.token, new.attempt), (2, 2));

    let before = store.stale_tokens();
    assert!(ack(&store, old).await.is_err_and(|e| e.is_stale_token()));
    let failed = store
        .fail(old, FailureClass::Transient, "E_LATE", RetryDecision::Dead)
        .await;
    assert!(failed.is_err_and(|e| e.is_stale_token()));
    let mut connection = store.pool().acquire().await?;
    assert!(
        store
            .renew(&mut connection, &[old], LEASE)
            .await?
            .is_empty()
    );
    drop(connection);
    let mut tx = store.begin().await?;
    let effect = store.record_effect(&mut *tx, old, "effect", "digest").await;
    assert!(effect.is_err_and(|e| e.is_stale_token()));
    let fenced = store.lock_lease(&mut *tx, old).await;
    assert!(fenced.is_err_and(|e| e.is_stale_token()));
    tx.rollback().await?;
    assert_eq!(store.stale_tokens(), before + 5);

    // The stale writes changed nothing: the current lease settles as usual.
    let delivery = store.delivery(event_id, PLAIN).await?.ok_or("missing")?;
    assert_eq!(delivery.status, DeliveryStatus::Leased);
    assert_eq!((delivery.token, delivery.owner.as_deref()), (2, Some("w2")));
    let mut tx = store.begin().await?;
    store.lock_lease(&mut *tx, new).await?;
    assert!(
        store
            .record_effect(&mut *tx, new, "effect", "digest")
            .await?
    );
    assert_eq!(Store::ack(&store, &mut *tx, &[new]).await?.acked, 1);
    tx.commit().await?;

    assert_eq!(store.delivery(event_id, PLAIN).await?, None);
    assert_eq!(
        attempt_rows(&store, event_id, PLAIN).await?,
        vec![
            row(1, "lease_expired", Some("lease_expired"), 1, "w1"),
            row(2, "acked", None, 2, "w2"),
        ]
    );
    assert_eq!(store.count_attempts(PLAIN, "lease_expired").await?, 1);
    assert_eq!(store.count_attempts(PLAIN, "acked").await?, 1);
    assert_eq!(store.count_attempts(ORDERED, "acked").await?, 0);
    Ok(())
}

async fn per_key_claims_only_the_head_of_each_key<S: Conformance>(store: S) -> TestResult {
    // Key 1 twice, key 2 once.
    let receipts = committed(&store, vec![note(1), note(1), note(2)]).await?;
    let (a1, a2, b1) = (
        receipts[0].event_id,
        receipts[1].event_id,
        receipts[2].event_id,
    );
    let heads = claim(&store, ORDERED, "w1", 10, LEASE, true).await?;
    assert_eq!(ids(&heads), vec![a1, b1]);
    // The second delivery of key 1 waits while the first is leased.
    assert!(
        claim(&store, ORDERED, "w2", 10, LEASE, true)
            .await?
            .is_empty()
    );
    // A consumer without per-key ordering is not held back.
    assert_eq!(claim(&store, PLAIN, "w3", 10, LEASE, false).await?.len(), 3);

    // A head backing off still holds its key: key 2's next event waits behind it.
    store
        .fail(
            &heads[1].lease,
            FailureClass::Transient,
            "E_LATER",
            RetryDecision::Retry(Duration::from_secs(3600)),
        )
        .await?;
    let b2 = committed(&store, vec![note(2)]).await?[0].event_id;
    assert!(
        claim(&store, ORDERED, "w2", 10, LEASE, true)
            .await?
            .is_empty()
    );

    // Acked, key 1's head is the next delivery.
    ack(&store, &heads[0].lease).await?;
    let next = claim(&store, ORDERED, "w2", 10, LEASE, true).await?;
    assert_eq!(ids(&next), vec![a2]);
    assert_eq!(
        store.delivery(b2, ORDERED).await?.map(|d| d.status),
        Some(DeliveryStatus::Pending)
    );
    Ok(())
}

async fn leases_list_the_deliveries_leased_now<S: Conformance>(store: S) -> TestResult {
    // Key 1 twice, key 2 once: a per-key claim leases the heads of keys 1 and 2.
    let receipts = committed(&store, vec![note(1), note(1), note(2)]).await?;
    assert_eq!(store.leases(ORDERED).await?, []);
    let heads = claim(&store, ORDERED, "w1", 10, LEASE, true).await?;
    let leases = store.leases(ORDERED).await?;
    let listed: Vec<_> = leases
        .iter()
        .map(|l| {
            let key = l.order_key.clone();
            (
                l.event_id,
                l.event_seq,
                key,
                l.owner.as_str(),
                l.token,
                l.attempt,
            )
        })
        .collect();
    let expected: Vec<_> = heads
        .iter()
        .map(|c| {
            let key = Some(c.order_key.clone());
            (c.lease.event_id, c.event_seq, key, "w1", c.lease.token, 1)
        })
        .collect();
    assert_eq!(listed, expected);
    assert_eq!(
        (leases[0].event_id, leases[1].event_id),
        (receipts[0].event_id, receipts[2].event_id)
    );
    for lease in &leases {
        let delivery = store.delivery(lease.event_id, ORDERED).await?;
        assert_eq!(
            delivery.and_then(|d| d.lease_until),
            Some(lease.lease_until)
        );
        assert_eq!((lease.consumer.as_str(), lease.generation), (ORDERED, 0));
    }
    // Another consumer's leases are its own; an unordered consumer's carry no order key.
    assert_eq!(store.leases(PLAIN).await?, []);
    claim(&store, PLAIN, "w2", 1, LEASE, false).await?;
    let plain = store.leases(PLAIN).await?;
    assert_eq!(plain.len(), 1);
    assert_eq!(
        (plain[0].owner.as_str(), plain[0].order_key.as_deref()),
        ("w2", None)
    );
    // Acked or failed, a delivery is no longer leased.
    ack(&store, &heads[0].lease).await?;
    store
        .fail(
            &heads[1].lease,
            FailureClass::Transient,
            "E_LATER",
            RetryDecision::Retry(Duration::from_secs(3600)),
        )
        .await?;
    assert_eq!(store.leases(ORDERED).await?, []);
    Ok(())
}

async fn fail_retries_later_dead_letters_or_quarantines<S: Conformance>(store: S) -> TestResult {
    committed(&store, vec![note(1), note(2), note(3)]).await?;
    let claimed = claim(&store, PLAIN, "w1", 10, LEASE, false).await?;
    let [retry, dead, quarantine] = [&claimed[0], &claimed[1], &claimed[2]].map(|c| &c.lease);
    store
        .fail(
            retry,
            FailureClass::Transient,
            "E_TIMEOUT",
            RetryDecision::Retry(Duration::from_secs(3600)),
        )
        .await?;
    store
        .fail(dead, FailureClass::Permanent, "E_BAD", RetryDecision::Dead)
        .await?;
    store
        .fail(
            quarantine,
            FailureClass::Schema,
            "E_SHAPE",
            RetryDecision::Quarantine,
        )
        .await?;

    let delivery = store
        .delivery(retry.event_id, PLAIN)
        .await?
        .ok_or("missing")?;
    assert_eq!(delivery.status, DeliveryStatus::Pending);
    assert_eq!(delivery.attempts, 1);
    assert_eq!(delivery.last_error_code.as_deref(), Some("E_TIMEOUT"));
    assert!(delivery.available_at > retry.claimed_at + 3000.0);
    // Not due yet: not claimable.
    assert!(
        claim(&store, PLAIN, "w2", 10, LEASE, false)
            .await?
            .is_empty()
    );

    for (lease, status, outcome, code) in [
        (retry, DeliveryStatus::Pending, "retry", "E_TIMEOUT"),
        (dead, DeliveryStatus::Dead, "dead", "E_BAD"),
        (
            quarantine,
            DeliveryStatus::Quarantined,
            "quarantined",
            "E_SHAPE",
        ),
    ] {
        let delivery = store
            .delivery(lease.event_id, PLAIN)
            .await?
            .ok_or("missing")?;
        assert_eq!(delivery.status, status);
        assert_eq!(delivery.last_error_code.as_deref(), Some(code));
        assert_eq!(
            attempt_rows(&store, lease.event_id, PLAIN).await?,
            vec![row(1, outcome, Some(code), 1, "w1")]
        );
    }
    let counts = [
        store
            .count_deliveries(PLAIN, &[DeliveryStatus::Pending])
            .await?,
        store
            .count_deliveries(PLAIN, &[DeliveryStatus::Dead])
            .await?,
        store
            .count_deliveries(PLAIN, &[DeliveryStatus::Quarantined])
            .await?,
        store
            .count_deliveries(PLAIN, &[DeliveryStatus::Dead, DeliveryStatus::Quarantined])
            .await?,
    ];
    assert_eq!(counts, [1, 1, 1, 2]);
    Ok(())
}

async fn fail_dead_letters_at_the_policys_last_attempt<S: Conformance>(store: S) -> TestResult {
    let policy = RetryPolicy::from_descriptor(&support::FIXED_200MS)?;
    let mut rng = fastrand::Rng::with_seed(7);
    let event_id = committed(&store, vec![note(1)]).await?[0].event_id;
    let store = &store;
    for attempt in 1..=4 {
        // Each retry falls due 200 ms after its failure.
        let claimed = eventually(|| async move {
            let claimed = claim(store, PLAIN, "w1", 1, LEASE, false).await?;
            Ok(claimed.into_iter().next())
        })
        .await?
        .ok_or("the retry never fell due")?;
        assert_eq!(claimed.lease.attempt, attempt);
        let decision = policy.decide(FailureClass::Transient, attempt, &mut rng);
        assert_eq!(matches!(decision, RetryDecision::Dead), attempt == 4);
        store
            .fail(&claimed.lease, FailureClass::Transient, "E_FLAKY", decision)
            .await?;
    }
    let delivery = store.delivery(event_id, PLAIN).await?.ok_or("missing")?;
    assert_eq!(
        (delivery.status, delivery.attempts),
        (DeliveryStatus::Dead, 4)
    );
    let outcomes: Vec<String> = store
        .attempts(event_id, PLAIN)
        .await?
        .into_iter()
        .map(|row| format!("{} {}", row.attempt, row.outcome))
        .collect();
    assert_eq!(outcomes, ["1 retry", "2 retry", "3 retry", "4 dead"]);
    Ok(())
}

async fn release_returns_leases_as_never_claimed<S: Conformance>(store: S) -> TestResult {
    committed(&store, vec![note(1), note(2)]).await?;
    let claimed = claim(&store, PLAIN, "w1", 10, LEASE, false).await?;
    let others = claim(&store, ORDERED, "w2", 10, LEASE, true).await?;
    assert_eq!((claimed.len(), others.len()), (2, 2));

    assert_eq!(store.release("w1").await?, 2);
    for claimed in &claimed {
        let event_id = claimed.lease.event_id;
        let delivery = store.delivery(event_id, PLAIN).await?.ok_or("missing")?;
        assert_eq!(delivery.status, DeliveryStatus::Pending);
        // The attempt is taken back, the token stays raised, no attempt row.
        assert_eq!((delivery.attempts, delivery.token), (0, 1));
        assert_eq!(delivery.lease_until, None);
        assert!(store.attempts(event_id, PLAIN).await?.is_empty());
    }
    // Another owner's leases stay.
    assert_eq!(
        store
            .count_deliveries(ORDERED, &[DeliveryStatus::Leased])
            .await?,
        2
    );
    assert!(
        ack(&store, &claimed[0].lease)
            .await
            .is_err_and(|e| e.is_stale_token())
    );
    let again = claim(&store, PLAIN, "w3", 10, LEASE, false).await?;
    let leases: Vec<(i64, u32)> = again
        .iter()
        .map(|c| (c.lease.token, c.lease.attempt))
        .collect();
    assert_eq!(leases, [(2, 1), (2, 1)]);
    assert_eq!(store.release("nobody").await?, 0);
    Ok(())
}

async fn recover_expired_requeues_then_dead_letters<S: Conformance>(store: S) -> TestResult {
    let event_id = committed(&store, vec![note(1)]).await?[0].event_id;
    for attempt in 1..=4_u32 {
        let claimed = claim(&store, PLAIN, "w1", 1, SHORT, false).await?;
        assert_eq!(ids(&claimed), vec![event_id]);
        assert_eq!(claimed[0].lease.attempt, attempt);
        recover(&store, 1).await?;
        let delivery = store.delivery(event_id, PLAIN).await?.ok_or("missing")?;
        let status = if attempt < 4 {
            DeliveryStatus::Pending
        } else {
            // The retry policy's 4 attempts are spent.
            DeliveryStatus::Dead
        };
        assert_eq!((delivery.status, delivery.attempts), (status, attempt));
        assert_eq!(delivery.last_error_code.as_deref(), Some("lease_expired"));
        assert_eq!(delivery.lease_until, None);
    }
    assert!(
        claim(&store, PLAIN, "w1", 1, LEASE, false)
            .await?
            .is_empty()
    );
    assert_eq!(
        attempt_rows(&store, event_id, PLAIN).await?,
        vec![
            row(1, "lease_expired", Some("lease_expired"), 1, "w1"),
            row(2, "lease_expired", Some("lease_expired"), 2, "w1"),
            row(3, "lease_expired", Some("lease_expired"), 3, "w1"),
            row(4, "dead", Some("lease_expired"), 4, "w1"),
        ]
    );
    Ok(())
}

/// One consumer serving every tenant: an effect key a handler chooses (an invoice number, say)
/// recorded for one tenant's event never answers "done before" to another tenant's event,
/// which would skip that tenant's effect and tell it the other tenant used the key.
async fn an_effect_key_is_scoped_per_tenant<S: Conformance>(store: S) -> TestResult {
    let mut tx = store.begin().await?;
    for (key, tenant) in [
        (1, Some("acme")),
        (2, Some("bolt")),
        (3, None),
        (4, Some("acme")),
    ] {
        let options = match tenant {
            Some(tenant) => AppendOptions::new().tenant_scope(tenant),
            None => AppendOptions::new(),
        };
        store.append(&mut *tx, note(key), options).await?;
    }
    tx.commit().await?;
    let claimed = claim(&store, PLAIN, "w1", 10, LEASE, false).await?;
    let leases: Vec<&Lease> = claimed.iter().map(|c| &c.lease).collect();
    assert_eq!(leases.len(), 4, "{}", S::NAME);

    let mut tx = store.begin().await?;
    let mut first = Vec::new();
    for lease in &leases {
        first.push(
            store
                .record_effect(&mut *tx, lease, "invoice-7", "d")
                .await?,
        );
    }
    tx.commit().await?;
    // acme, bolt and no tenant each record the key once; acme's second event finds acme's row.
    assert_eq!(first, [true, true, true, false], "{}", S::NAME);
    // Each tenant reads back its own row: the event that recorded it.
    for (tenant, lease) in [
        (Some("acme"), leases[0]),
        (Some("bolt"), leases[1]),
        (None, leases[2]),
    ] {
        let effect = store.effect(PLAIN, "invoice-7", tenant).await?;
        assert_eq!(
            effect.map(|e| e.event_id),
            Some(lease.event_id),
            "{} {tenant:?}",
            S::NAME
        );
    }
    assert_eq!(store.effect(PLAIN, "invoice-7", Some("cargo")).await?, None);
    Ok(())
}

async fn record_effect_is_recorded_once<S: Conformance>(store: S) -> TestResult {
    committed(&store, vec![note(1)]).await?;
    let claimed = claim(&store, PLAIN, "w1", 1, LEASE, false).await?;
    let lease = &claimed[0].lease;

    let mut tx = store.begin().await?;
    assert!(
        store
            .record_effect(&mut *tx, lease, "effect-1", "d1")
            .await?
    );
    tx.commit().await?;
    let mut tx = store.begin().await?;
    assert!(
        !store
            .record_effect(&mut *tx, lease, "effect-1", "d2")
            .await?
    );
    assert!(
        store
            .record_effect(&mut *tx, lease, "effect-2", "d1")
            .await?
    );
    tx.commit().await?;
    // Rolled back with the caller's transaction: not recorded.
    let mut tx = store.begin().await?;
    assert!(
        store
            .record_effect(&mut *tx, lease, "effect-3", "d1")
            .await?
    );
    tx.rollback().await?;

    // A redelivery (the next lease) finds what the first attempt recorded.
    store
        .fail(
            lease,
            FailureClass::Transient,
            "E_AGAIN",
            RetryDecision::Retry(Duration::ZERO),
        )
        .await?;
    let again = claim(&store, PLAIN, "w2", 1, LEASE, false).await?;
    let mut tx = store.begin().await?;
    let next = &again[0].lease;
    assert!(
        !store
            .record_effect(&mut *tx, next, "effect-1", "d1")
            .await?
    );
    assert!(
        store
            .record_effect(&mut *tx, next, "effect-3", "d1")
            .await?
    );
    tx.commit().await?;

    // A shadow-mode lease writes no effect row: it keeps intents.
    let shadowed = claim(&store, SHADOW, "w3", 1, LEASE, false).await?;
    let shadow = &shadowed[0].lease;
    assert!(shadow.is_shadow());
    for _ in 0..2 {
        let mut tx = store.begin().await?;
        assert!(
            store
                .record_effect(&mut *tx, shadow, "effect-1", "d1")
                .await?
        );
        tx.commit().await?;
    }
    let intents = shadow.shadow_log().map(|log| log.intents().len());
    assert_eq!(intents, Some(2));

    // The effect rows read back: who recorded each, with which digest and token; the rolled
    // back one was recorded by the redelivery, the shadow one not at all.
    let effect = |key: &'static str| {
        let store = store.clone();
        async move { store.effect(PLAIN, key, None).await }
    };
    let first = effect("effect-1").await?.ok_or("effect-1 not recorded")?;
    assert_eq!(
        (first.event_id, first.outcome_digest.as_str(), first.token),
        (lease.event_id, "d1", Some(lease.token))
    );
    let third = effect("effect-3").await?.ok_or("effect-3 not recorded")?;
    assert_eq!(third.token, Some(next.token));
    assert!(effect("effect-2").await?.is_some());
    assert_eq!(effect("effect-4").await?, None);
    assert_eq!(store.effect(SHADOW, "effect-1", None).await?, None);
    Ok(())
}

/// A renewal writes a new version of the leased row: the batched ack still acks the renewed
/// leases beside the untouched ones, each with its attempt, and refuses a copy of a current
/// lease presented by another owner, which carries the claim's own row address.
async fn ack_batch_acks_leases_renewed_since_their_claim<S: Conformance>(store: S) -> TestResult {
    committed(&store, vec![note(1), note(2), note(3), note(4)]).await?;
    let claimed = claim(&store, PLAIN, "w1", 10, LEASE, false).await?;
    let leases: Vec<&Lease> = claimed.iter().map(|c| &c.lease).collect();
    assert_eq!(leases.len(), 4);
    let mut connection = store.pool().acquire().await?;
    let renewed = store
        .renew(&mut connection, &[leases[1], leases[3]], LEASE)
        .await?;
    drop(connection);
    assert_eq!(renewed.len(), 2);

    let mut intruder = leases[0].clone();
    intruder.owner = "intruder".to_owned();
    let before = store.stale_tokens();
    let outcome = ack_leases(&store, &[&intruder, leases[1]]).await?;
    assert_eq!(outcome.acked, 1);
    assert_eq!(
        outcome.stale,
        vec![(intruder.event_id, PLAIN.to_owned(), intruder.token)]
    );
    assert_eq!(store.stale_tokens(), before + 1);
    let delivery = store
        .delivery(leases[0].event_id, PLAIN)
        .await?
        .ok_or("missing")?;
    assert_eq!(delivery.status, DeliveryStatus::Leased);

    let outcome = ack_leases(&store, &[leases[0], leases[2], leases[3]]).await?;
    assert_eq!((outcome.acked, outcome.stale), (3, Vec::new()));
    for lease in leases {
        assert_eq!(store.delivery(lease.event_id, PLAIN).await?, None);
        assert_eq!(
            attempt_rows(&store, lease.event_id, PLAIN).await?,
            vec![row(1, "acked", None, 1, "w1")]
        );
    }
    Ok(())
}

async fn ack_batch_reports_stale_entries<S: Conformance>(store: S) -> TestResult {
    committed(&store, vec![note(1), note(2), note(3)]).await?;
    let claimed = claim(&store, PLAIN, "w1", 10, LEASE, false).await?;
    let [first, second, third] = [&claimed[0], &claimed[1], &claimed[2]].map(|c| &c.lease);
    ack(&store, second).await?;
    // The third's lease presented by another owner.
    let intruder = Lease::new(
        third.event_id,
        PLAIN,
        "intruder",
        third.token,
        third.attempt,
        third.claimed_at,
    );
    let before = store.stale_tokens();
    let outcome = ack_leases(&store, &[first, second, &intruder]).await?;
    assert_eq!(outcome.acked, 1);
    assert_eq!(
        outcome.stale,
        vec![
            (second.event_id, PLAIN.to_owned(), second.token),
            (third.event_id, PLAIN.to_owned(), third.token),
        ]
    );
    assert_eq!(store.stale_tokens(), before + 2);

    for lease in [first, second] {
        assert_eq!(store.delivery(lease.event_id, PLAIN).await?, None);
        assert_eq!(
            attempt_rows(&store, lease.event_id, PLAIN).await?,
            vec![row(1, "acked", None, 1, "w1")]
        );
    }
    let delivery = store
        .delivery(third.event_id, PLAIN)
        .await?
        .ok_or("missing")?;
    assert_eq!(delivery.status, DeliveryStatus::Leased);
    assert!(store.attempts(third.event_id, PLAIN).await?.is_empty());
    assert_eq!(ack_leases(&store, &[third]).await?.acked, 1);
    assert_eq!(ack_leases(&store, &[]).await?, AckBatch::default());

    // A lease recovered and claimed again: the first owner's token is refused in a batch
    // beside a current one, which is acked.
    let fourth = committed(&store, vec![note(4), note(5)]).await?;
    let lost = claim(&store, PLAIN, "w1", 1, SHORT, false).await?;
    recover(&store, 1).await?;
    let taken = claim(&store, PLAIN, "w2", 10, LEASE, false).await?;
    let mut taken_ids = ids(&taken);
    taken_ids.sort();
    let mut appended = vec![fourth[0].event_id, fourth[1].event_id];
    appended.sort();
    assert_eq!(taken_ids, appended);
    let lost = &lost[0].lease;
    let claimed = taken;
    let taken = &claimed_lease(&claimed, lost.event_id)?;
    let other = &taken_ids
        .iter()
        .find(|id| **id != lost.event_id)
        .copied()
        .ok_or("one delivery")?;
    let other = &claimed_lease(&claimed, *other)?;
    let outcome = ack_leases(&store, &[lost, other]).await?;
    assert_eq!(outcome.acked, 1);
    assert_eq!(
        outcome.stale,
        vec![(lost.event_id, PLAIN.to_owned(), lost.token)]
    );
    assert_eq!(ack_leases(&store, &[taken]).await?.acked, 1);
    let rows = store.attempts(taken.event_id, PLAIN).await?;
    assert_eq!(
        rows.iter()
            .map(|row| (row.outcome.as_str(), row.owner.as_str(), row.token))
            .collect::<Vec<_>>(),
        vec![
            ("lease_expired", "w1", lost.token),
            ("acked", "w2", taken.token)
        ]
    );
    assert!(rows.iter().all(|row| row.finished_at >= row.started_at));
    Ok(())
}

async fn held_batch_commits_with_its_transaction_or_leaves_nothing<S: Conformance>(
    store: S,
) -> TestResult {
    let receipts = committed(&store, vec![note(1), note(2), note(3)]).await?;
    let untouched = |event_id| {
        let store = &store;
        async move {
            let delivery = store.delivery(event_id, PLAIN).await?.ok_or("missing")?;
            let state = (delivery.status, delivery.attempts, delivery.token);
            Ok::<_, BoxError>(state == (DeliveryStatus::Pending, 0, 0))
        }
    };

    // Held, the deliveries are not written; rolled back, they are as never claimed.
    let mut tx = store.begin().await?;
    let held = held_claim(&store, &mut *tx, "w1").await?;
    assert_eq!(
        ids(&held),
        receipts.iter().map(|r| r.event_id).collect::<Vec<_>>()
    );
    for claimed in &held {
        assert!(claimed.lease.is_held());
        assert_eq!((claimed.lease.token, claimed.lease.attempt), (1, 1));
        assert!(untouched(claimed.lease.event_id).await?);
    }
    tx.rollback().await?;
    for receipt in &receipts {
        assert!(untouched(receipt.event_id).await?);
        assert!(store.attempts(receipt.event_id, PLAIN).await?.is_empty());
    }

    // Acked in the claiming transaction: acks, effects and attempt rows commit together.
    let mut tx = store.begin().await?;
    let held = held_claim(&store, &mut *tx, "w1").await?;
    let [first, second, third] = [&held[0], &held[1], &held[2]].map(|c| &c.lease);
    assert!(store.record_effect(&mut *tx, first, "effect", "d").await?);
    assert_eq!(
        Store::ack(&store, &mut *tx, &[first, second]).await?.acked,
        2
    );
    tx.commit().await?;
    for lease in [first, second] {
        assert_eq!(store.delivery(lease.event_id, PLAIN).await?, None);
        assert_eq!(
            attempt_rows(&store, lease.event_id, PLAIN).await?,
            vec![row(1, "acked", None, 1, "w1")]
        );
    }
    assert!(untouched(third.event_id).await?);

    // A held lease failed after its batch rolled back: the attempt is counted then.
    let mut tx = store.begin().await?;
    let held = held_claim(&store, &mut *tx, "w2").await?;
    assert_eq!(ids(&held), vec![third.event_id]);
    tx.rollback().await?;
    let lease = &held[0].lease;
    store
        .fail(
            lease,
            FailureClass::Transient,
            "E_ROLLED_BACK",
            RetryDecision::Retry(Duration::from_secs(3600)),
        )
        .await?;
    let delivery = store
        .delivery(lease.event_id, PLAIN)
        .await?
        .ok_or("missing")?;
    assert_eq!(
        (delivery.status, delivery.attempts, delivery.token),
        (DeliveryStatus::Pending, 1, 1)
    );
    assert_eq!(
        attempt_rows(&store, lease.event_id, PLAIN).await?,
        vec![row(1, "retry", Some("E_ROLLED_BACK"), 1, "w2")]
    );
    // Its token moved on: failing it again is stale.
    let again = store
        .fail(
            lease,
            FailureClass::Transient,
            "E_AGAIN",
            RetryDecision::Dead,
        )
        .await;
    assert!(again.is_err_and(|e| e.is_stale_token()));
    Ok(())
}

async fn concurrent_per_key_workers_keep_one_in_flight_per_key<S: Conformance>(
    store: S,
) -> TestResult {
    use std::collections::{HashMap, HashSet};
    use std::sync::{Arc, Mutex};

    const EVENTS: u64 = 120;
    const KEYS: u64 = 8;
    let events = (0..EVENTS).map(|n| note(n % KEYS).into()).collect();
    let mut tx = store.begin().await?;
    store.append_batch(&mut *tx, events).await?;
    tx.commit().await?;

    // Keys in flight, and the last seq acked per key.
    let in_flight: Arc<Mutex<HashSet<String>>> = Arc::default();
    let last: Arc<Mutex<HashMap<String, i64>>> = Arc::default();
    let acked = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut workers = Vec::new();
    for worker in 0..4 {
        let (store, in_flight, last, acked) = (
            store.clone(),
            in_flight.clone(),
            last.clone(),
            acked.clone(),
        );
        workers.push(tokio::spawn(async move {
            let owner = format!("w{worker}");
            let deadline = tokio::time::Instant::now() + support::HANG;
            while acked.load(std::sync::atomic::Ordering::SeqCst) < EVENTS {
                assert!(tokio::time::Instant::now() < deadline, "workers stalled");
                let claimed = claim(&store, ORDERED, &owner, 5, LEASE, true).await?;
                if claimed.is_empty() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                for claimed in &claimed {
                    let key = claimed.order_key.clone();
                    assert!(
                        in_flight
                            .lock()
                            .map_err(|_| "poisoned")?
                            .insert(key.clone()),
                        "{}: key {key} claimed twice",
                        S::NAME
                    );
                    let mut last = last.lock().map_err(|_| "poisoned")?;
                    let previous = last.insert(key.clone(), claimed.event_seq);
                    assert!(previous < Some(claimed.event_seq), "{key} out of order");
                }
                for claimed in &claimed {
                    // Out of the set before the ack: until the ack commits nobody can claim
                    // the key, and after it anyone may.
                    in_flight
                        .lock()
                        .map_err(|_| "poisoned")?
                        .remove(&claimed.order_key);
                    ack(&store, &claimed.lease).await?;
                    acked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
            Ok::<_, BoxError>(())
        }));
    }
    for worker in workers {
        worker.await??;
    }
    assert_eq!(acked.load(std::sync::atomic::Ordering::SeqCst), EVENTS);
    assert_eq!(store.count_deliveries(ORDERED, &[]).await?, 0);
    Ok(())
}

async fn shadow_savepoint_undoes_the_handlers_writes<S: Conformance>(store: S) -> TestResult {
    committed(&store, vec![note(1)]).await?;
    let claimed = claim(&store, SHADOW, "w1", 1, LEASE, false).await?;
    let lease = &claimed[0].lease;
    assert!(lease.is_shadow());

    // The transactional kind's shadow run: fence, savepoint, the handler's writes, undo,
    // reconciliation row, ack; all in one transaction.
    let mut tx = store.begin().await?;
    store.lock_lease(&mut *tx, lease).await?;
    store.begin_shadow(&mut *tx).await?;
    store
        .append(&mut *tx, note(2), AppendOptions::default())
        .await?;
    assert!(store.record_effect(&mut *tx, lease, "effect", "d").await?);
    store.end_shadow(&mut *tx).await?;
    store.record_reconciliation(&mut *tx, lease).await?;
    assert_eq!(Store::ack(&store, &mut *tx, &[lease]).await?.acked, 1);
    tx.commit().await?;

    assert_eq!(
        store.count_events(&[]).await?,
        1,
        "the handler's append was undone"
    );
    assert_eq!(store.delivery(lease.event_id, SHADOW).await?, None);
    assert_eq!(
        attempt_rows(&store, lease.event_id, SHADOW).await?,
        vec![row(1, "acked", None, 1, "w1")]
    );
    // What the handler meant to do is its reconciliation row; no effect row was written.
    let reconciliations = store.reconciliations(lease.event_id, SHADOW).await?;
    let summary: Vec<_> = reconciliations
        .iter()
        .map(|r| (r.generation, r.token, r.intents.clone()))
        .collect();
    let intent = evc_runtime::Intent {
        effect_key: "effect".to_owned(),
        outcome_digest: "d".to_owned(),
    };
    assert_eq!(summary, [(0, lease.token, vec![intent])]);
    assert_eq!(store.effect(SHADOW, "effect", None).await?, None);
    assert!(
        store
            .reconciliations(lease.event_id, PLAIN)
            .await?
            .is_empty()
    );

    // Heartbeats are written and forgotten without error.
    let beats = [
        evc_runtime::Heartbeat::new("w1", SHADOW, ""),
        evc_runtime::Heartbeat::new("w2", PLAIN, "batch,lease"),
    ];
    store.heartbeat(&beats).await?;
    store.heartbeat(&beats[..1]).await?;
    store
        .forget_heartbeats(&["w1".to_owned(), "w2".to_owned()])
        .await?;
    Ok(())
}

/// Counts calls per consumer and checks that no key of a per-key consumer runs twice at once;
/// a transactional delivery records its effect in its transaction.
#[derive(Default)]
struct Counting {
    calls: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
    in_flight: std::sync::Mutex<std::collections::HashSet<String>>,
    overlaps: std::sync::atomic::AtomicU64,
    effects_recorded: std::sync::atomic::AtomicU64,
}

impl<S: Store> evc_runtime::DynHandler<S> for Counting {
    fn handle<'a>(
        &'a self,
        mut context: evc_runtime::HandlerContext<'a, S>,
    ) -> evc_runtime::BoxFuture<'a, Result<(), evc_runtime::HandlerError>> {
        Box::pin(async move {
            let consumer = context.lease().consumer.clone();
            let key = format!("{consumer}/{}", context.claimed.order_key);
            let ordered = consumer == ORDERED;
            if ordered && !self.in_flight.lock().expect("lock").insert(key.clone()) {
                self.overlaps
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            *self
                .calls
                .lock()
                .expect("lock")
                .entry(consumer)
                .or_default() += 1;
            tokio::task::yield_now().await;
            let (store, lease) = (context.store, context.claimed.lease.clone());
            if let Some(transaction) = context.transaction() {
                let effect_key = lease.event_id.to_string();
                let first = store
                    .record_effect(transaction, &lease, &effect_key, "done")
                    .await
                    .map_err(|_| {
                        evc_runtime::HandlerError::new(FailureClass::Transient, "E_EFFECT")
                    })?;
                if first {
                    self.effects_recorded
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
            if ordered {
                self.in_flight.lock().expect("lock").remove(&key);
            }
            Ok(())
        })
    }
}

async fn the_dispatcher_delivers_every_event_once<S: Conformance>(store: S) -> TestResult {
    let mut events: Vec<NewEvent> = (0..30).map(|n| note(n % 5).into()).collect();
    events.extend((0..5).map(|_| ping().into()));
    let mut tx = store.begin().await?;
    store.append_batch(&mut *tx, events).await?;
    tx.commit().await?;

    let handler = std::sync::Arc::new(Counting::default());
    let config = evc_runtime::DispatcherConfig::default()
        .owner(format!("conformance-{}", S::NAME))
        .workers(2)
        .batch(10)
        .lease(LEASE)
        .poll_interval(Duration::from_millis(20))
        .recovery_interval(Duration::from_millis(200))
        .heartbeat_interval(Duration::from_millis(100))
        // `k.shadow` (transactional, no per-key ordering) runs held batches.
        .held_batches(true)
        .seed(7);
    let mut dispatcher = evc_runtime::Dispatcher::new(store.clone(), config);
    for consumer in [PLAIN, ORDERED, SHADOW] {
        dispatcher = dispatcher.consumer(consumer, handler.clone())?;
    }
    let handle = dispatcher.start();

    // More appends while it runs (woken or polled).
    committed(&store, vec![note(9), ping()]).await?;
    let store_ref = &store;
    let settled = eventually(|| async move {
        let mut open = 0;
        for consumer in [PLAIN, ORDERED, SHADOW] {
            open += store_ref.count_deliveries(consumer, &[]).await?;
        }
        Ok((open == 0).then_some(()))
    })
    .await?;
    let stats = handle.shutdown().await;
    assert!(settled.is_some(), "{}: deliveries still open", S::NAME);

    let calls = handler.calls.lock().map_err(|_| "poisoned")?.clone();
    let expected: std::collections::BTreeMap<String, u64> = [
        (PLAIN.to_owned(), 37),
        (ORDERED.to_owned(), 31),
        (SHADOW.to_owned(), 31),
    ]
    .into();
    assert_eq!(calls, expected);
    assert_eq!(stats.acked, 99);
    assert_eq!((stats.retried, stats.dead, stats.stale), (0, 0, 0));
    assert_eq!(
        handler.overlaps.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    // Every transactional delivery's first effect: `k.ordered`'s rows, and `k.shadow`'s
    // intents (a shadow run records none, so each is a first).
    assert_eq!(
        handler
            .effects_recorded
            .load(std::sync::atomic::Ordering::SeqCst),
        62
    );
    Ok(())
}

/// Sleeps through its first call, longer than a lease; the other calls return at once.
#[derive(Default)]
struct SlowFirst {
    calls: std::sync::atomic::AtomicU64,
}

impl<S: Store> evc_runtime::DynHandler<S> for SlowFirst {
    fn handle<'a>(
        &'a self,
        _context: evc_runtime::HandlerContext<'a, S>,
    ) -> evc_runtime::BoxFuture<'a, Result<(), evc_runtime::HandlerError>> {
        Box::pin(async move {
            if self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                tokio::time::sleep(SLOW_LEASE + Duration::from_secs(1)).await;
            }
            Ok(())
        })
    }
}

/// The lease of [`a_slow_transactional_handler_keeps_the_rest_of_its_batch`], renewed every
/// third of it.
const SLOW_LEASE: Duration = Duration::from_secs(3);

/// A transactional handler that outlives its lease does not cost the rest of its batch: the
/// batch's other leases are renewed meanwhile (on PostgreSQL beside the handler's transaction,
/// on SQLite in it, since a renewal beside it would wait for its write lock), so none expires
/// and every delivery is acked on its first attempt.
async fn a_slow_transactional_handler_keeps_the_rest_of_its_batch<S: Conformance>(
    store: S,
) -> TestResult {
    // Three keys: one per-key claim leases the three heads.
    let receipts = committed(&store, (0..3).map(note).collect()).await?;
    let handler = std::sync::Arc::new(SlowFirst::default());
    let config = evc_runtime::DispatcherConfig::default()
        .owner(format!("slow-{}", S::NAME))
        .workers(1)
        .batch(3)
        .lease(SLOW_LEASE)
        .poll_interval(Duration::from_millis(20))
        .recovery_interval(Duration::from_millis(100))
        .heartbeat_interval(Duration::from_millis(100))
        .seed(7);
    let handle = evc_runtime::Dispatcher::new(store.clone(), config)
        .consumer(ORDERED, handler.clone())?
        .start();
    let store_ref = &store;
    let settled = eventually(|| async move {
        Ok((store_ref.count_deliveries(ORDERED, &[]).await? == 0).then_some(()))
    })
    .await?;
    let stats = handle.shutdown().await;
    assert!(settled.is_some(), "{}: deliveries still open", S::NAME);
    assert_eq!((stats.acked, stats.stale), (3, 0), "{}", S::NAME);
    for receipt in &receipts {
        let outcomes: Vec<String> = attempt_rows(&store, receipt.event_id, ORDERED)
            .await?
            .into_iter()
            .map(|(attempt, outcome, ..)| format!("{attempt} {outcome}"))
            .collect();
        assert_eq!(outcomes, ["1 acked"], "{}", S::NAME);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Operator controls (`Operate`): dead letters, replay, pause and resume.
// ---------------------------------------------------------------------------------------------

/// Appends `events`, claims every `k.plain` delivery and fails each with the decision beside
/// it (in append order); returns the leases.
async fn settle<S: Conformance>(
    store: &S,
    events: Vec<(OutgoingEvent, RetryDecision)>,
) -> Result<Vec<Lease>, BoxError> {
    let (events, decisions): (Vec<_>, Vec<_>) = events.into_iter().unzip();
    let receipts = committed(store, events).await?;
    let mut claimed = claim(store, PLAIN, "w1", 100, LEASE, false).await?;
    claimed.retain(|c| receipts.iter().any(|r| r.event_id == c.lease.event_id));
    claimed.sort_by_key(|c| c.event_seq);
    let mut leases = Vec::with_capacity(claimed.len());
    for (claimed, decision) in claimed.into_iter().zip(decisions) {
        let (class, code) = match decision {
            RetryDecision::Quarantine => (FailureClass::Schema, "E_SHAPE"),
            _ => (FailureClass::Permanent, "E_BAD"),
        };
        store.fail(&claimed.lease, class, code, decision).await?;
        leases.push(claimed.lease);
    }
    Ok(leases)
}

/// Plans `selection` and applies the plan under idempotency key `key` (reason "fixed the
/// bug", approval "CHG-1").
async fn plan_and_apply<S: Conformance>(
    store: &S,
    selection: &ReplaySelection,
    key: &str,
) -> Result<evc_runtime::ReplayApplied, BoxError> {
    let plan = store.propose_replay(selection, "alice").await?.plan;
    let approval = ReplayApproval::new(plan.digest, "fixed the bug", "CHG-1", key, "bob");
    Ok(store.replay(selection, &approval).await?)
}

/// The digest of a replay plan of `consumer` over `deliveries`, as docs/runtime.md ("Replay")
/// defines it: both stores must give this one.
fn expected_digest(consumer: &str, deliveries: &[SettledDelivery]) -> String {
    use sha2::Digest as _;
    let mut canonical = format!("evc-replay-plan/1\n{consumer}\n");
    for d in deliveries {
        canonical.push_str(&format!(
            "{} {} {} {} {}\n",
            d.event_id,
            d.generation,
            d.status.as_str(),
            d.event_type,
            d.version
        ));
    }
    sha2::Sha256::digest(canonical.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

async fn dead_letters_list_dead_and_quarantined_deliveries<S: Conformance>(store: S) -> TestResult {
    store.deploy_replayable(PLAIN).await?;
    let leases = settle(
        &store,
        vec![
            (note(1), RetryDecision::Dead),
            (note(2), RetryDecision::Quarantine),
            (note(3), RetryDecision::Retry(Duration::from_secs(3600))),
        ],
    )
    .await?;
    let all = store
        .dead_letters(&ReplaySelection::consumer(PLAIN))
        .await?;
    assert_eq!(
        all.iter()
            .map(|d| (d.event_id, d.status, d.generation, d.attempts))
            .collect::<Vec<_>>(),
        vec![
            (leases[0].event_id, SettledStatus::Dead, 0, 1),
            (leases[1].event_id, SettledStatus::Quarantined, 0, 1),
        ],
        "{}",
        S::NAME
    );
    let dead = &all[0];
    assert_eq!(dead.consumer, PLAIN);
    assert_eq!(dead.last_error_code.as_deref(), Some("E_BAD"));
    assert_eq!(
        (dead.event_type.as_str(), dead.version.as_str()),
        ("test.note", "1.0.0")
    );
    assert_eq!(dead.requirement.as_deref(), Some("^1"));
    assert!(dead.version_supported());
    assert!(dead.settled_at >= leases[0].claimed_at);

    // The selection's filters.
    let only_dead = ReplaySelection::consumer(PLAIN).statuses([SettledStatus::Dead]);
    assert_eq!(
        ids_of(&store.dead_letters(&only_dead).await?),
        [leases[0].event_id]
    );
    let pings = ReplaySelection::consumer(PLAIN).event_type("test.ping");
    assert!(store.dead_letters(&pings).await?.is_empty());
    let one = ReplaySelection::consumer(PLAIN).event_ids([leases[1].event_id]);
    assert_eq!(
        ids_of(&store.dead_letters(&one).await?),
        [leases[1].event_id]
    );
    let first = ReplaySelection::consumer(PLAIN).limit(1);
    assert_eq!(
        ids_of(&store.dead_letters(&first).await?),
        [leases[0].event_id]
    );
    // Another consumer's deliveries of the same events are not its dead letters.
    assert!(
        store
            .dead_letters(&ReplaySelection::consumer(ORDERED))
            .await?
            .is_empty()
    );
    assert!(matches!(
        store
            .dead_letters(&ReplaySelection::consumer("k.nobody"))
            .await,
        Err(DispatchError::UnknownConsumer(_))
    ));
    Ok(())
}

fn ids_of(deliveries: &[SettledDelivery]) -> Vec<uuid::Uuid> {
    deliveries.iter().map(|d| d.event_id).collect()
}

async fn replay_plan_digest_changes_with_the_dead_set<S: Conformance>(store: S) -> TestResult {
    store.deploy_replayable(PLAIN).await?;
    let selection = ReplaySelection::consumer(PLAIN);
    let empty = store.replay_plan(&selection).await?;
    assert!(empty.deliveries.is_empty());
    assert_eq!(empty.digest, expected_digest(PLAIN, &[]), "{}", S::NAME);

    settle(&store, vec![(note(1), RetryDecision::Dead)]).await?;
    let one = store.replay_plan(&selection).await?;
    assert_eq!(one.deliveries.len(), 1);
    assert!(one.not_replayable.is_empty(), "{:?}", one.not_replayable);
    assert_eq!(
        one.digest,
        expected_digest(PLAIN, &one.deliveries),
        "{}",
        S::NAME
    );
    assert_ne!(one.digest, empty.digest);
    // A dry run writes nothing: the same plan again.
    assert_eq!(store.replay_plan(&selection).await?, one);

    settle(&store, vec![(note(2), RetryDecision::Quarantine)]).await?;
    let two = store.replay_plan(&selection).await?;
    assert_eq!(two.deliveries.len(), 2);
    assert_eq!(two.digest, expected_digest(PLAIN, &two.deliveries));
    assert_ne!(two.digest, one.digest);
    assert!(matches!(
        store
            .replay_plan(&ReplaySelection::consumer("k.nobody"))
            .await,
        Err(ReplayError::UnknownConsumer(_))
    ));
    Ok(())
}

async fn replay_with_a_wrong_digest_is_refused_and_writes_nothing<S: Conformance>(
    store: S,
) -> TestResult {
    store.deploy_replayable(PLAIN).await?;
    let leases = settle(&store, vec![(note(1), RetryDecision::Dead)]).await?;
    let selection = ReplaySelection::consumer(PLAIN);
    let plan = store.propose_replay(&selection, "alice").await?.plan;
    let wrong = ReplayApproval::new("0".repeat(64), "fixed the bug", "CHG-1", "replay-1", "bob");
    match store.replay(&selection, &wrong).await {
        Err(ReplayError::DigestMismatch { presented, current }) => {
            assert_eq!(presented, "0".repeat(64));
            assert_eq!(current, plan.digest);
        }
        other => panic!("{}: expected a digest mismatch, got {other:?}", S::NAME),
    }
    // The approval's fields are checked first.
    let no_reason = ReplayApproval::new(plan.digest.clone(), " ", "CHG-1", "replay-1", "bob");
    assert!(matches!(
        store.replay(&selection, &no_reason).await,
        Err(ReplayError::ReasonMissing)
    ));
    let no_key = ReplayApproval::new(plan.digest.clone(), "fixed", "CHG-1", "", "bob");
    assert!(matches!(
        store.replay(&selection, &no_key).await,
        Err(ReplayError::IdempotencyKeyMissing)
    ));

    // Nothing written: the delivery is still dead, no new generation, and the key is unused.
    let delivery = store
        .delivery(leases[0].event_id, PLAIN)
        .await?
        .ok_or("missing")?;
    assert_eq!(
        (delivery.generation, delivery.status),
        (0, DeliveryStatus::Dead)
    );
    assert_eq!(store.count_deliveries(PLAIN, &[]).await?, 1);
    assert_eq!(store.replay_plan(&selection).await?, plan);
    let right = ReplayApproval::new(plan.digest, "fixed the bug", "CHG-1", "replay-1", "bob");
    let applied = store.replay(&selection, &right).await?;
    assert!(!applied.repeated);
    assert_eq!(applied.deliveries, 1);
    Ok(())
}

async fn applied_replay_writes_a_claimable_next_generation<S: Conformance>(store: S) -> TestResult {
    store.deploy_replayable(PLAIN).await?;
    let leases = settle(
        &store,
        vec![
            (note(1), RetryDecision::Dead),
            (note(2), RetryDecision::Quarantine),
        ],
    )
    .await?;
    let selection = ReplaySelection::consumer(PLAIN).statuses([SettledStatus::Dead]);
    let applied = plan_and_apply(&store, &selection, "replay-1").await?;
    assert_eq!(
        (applied.deliveries, applied.repeated),
        (1, false),
        "{}",
        S::NAME
    );

    let replayed = leases[0].event_id;
    let next = store.delivery(replayed, PLAIN).await?.ok_or("missing")?;
    assert_eq!(
        (
            next.generation,
            next.status,
            next.attempts,
            next.last_error_code
        ),
        (1, DeliveryStatus::Pending, 0, None),
        "{}",
        S::NAME
    );
    assert_eq!(
        next.token, leases[0].token,
        "the original's token, not reused"
    );
    assert_eq!(
        store
            .count_deliveries(PLAIN, &[DeliveryStatus::Replayed])
            .await?,
        1
    );
    // The quarantined delivery was not selected: untouched.
    let untouched = store
        .delivery(leases[1].event_id, PLAIN)
        .await?
        .ok_or("missing")?;
    assert_eq!(untouched.status, DeliveryStatus::Quarantined);
    assert!(store.dead_letters(&selection).await?.is_empty());

    // Claimable now, as generation 1 with a new token, and acked.
    let claimed = claim(&store, PLAIN, "w2", 10, LEASE, false).await?;
    assert_eq!(ids(&claimed), [replayed]);
    let lease = &claimed[0].lease;
    assert_eq!((lease.generation(), lease.attempt), (1, 1));
    assert!(lease.token > leases[0].token);
    // The original's lease stays stale.
    assert!(ack(&store, &leases[0]).await.is_err());
    ack(&store, lease).await?;
    let rows = store.attempts(replayed, PLAIN).await?;
    assert_eq!(
        rows.iter()
            .map(|r| (r.generation, r.attempt, r.outcome.as_str()))
            .collect::<Vec<_>>(),
        [(0, 1, "dead"), (1, 1, "acked")]
    );
    // Acked: only the superseded generation is left.
    let left = store.delivery(replayed, PLAIN).await?.ok_or("missing")?;
    assert_eq!(
        (left.generation, left.status),
        (0, DeliveryStatus::Replayed)
    );
    Ok(())
}

async fn replays_and_superseded_generations_are_read_back<S: Conformance>(store: S) -> TestResult {
    store.deploy_replayable(PLAIN).await?;
    let leases = settle(
        &store,
        vec![
            (note(1), RetryDecision::Dead),
            (note(2), RetryDecision::Quarantine),
        ],
    )
    .await?;
    let first = store.deliveries(leases[0].event_id, PLAIN).await?;
    assert_eq!(
        first
            .iter()
            .map(|d| (d.generation, d.status, d.replay_id, d.discard_id))
            .collect::<Vec<_>>(),
        [(0, DeliveryStatus::Dead, None, None)],
        "{}",
        S::NAME
    );
    assert!(store.deliveries(uuid::Uuid::nil(), PLAIN).await?.is_empty());

    // A refused replay records nothing.
    let selection = ReplaySelection::consumer(PLAIN);
    let plan = store.propose_replay(&selection, "alice").await?.plan;
    let wrong = ReplayApproval::new("0".repeat(64), "fixed", "CHG-1", "k-1", "bob");
    assert!(store.replay(&selection, &wrong).await.is_err());
    assert!(store.replays(10).await?.is_empty(), "{}", S::NAME);

    let approval = ReplayApproval::new(plan.digest.clone(), "fixed the bug", "CHG-1", "k-1", "bob");
    let applied = store.replay(&selection, &approval).await?;
    let replays = store.replays(10).await?;
    assert_eq!(replays.len(), 1, "{}", S::NAME);
    let replay = &replays[0];
    assert_eq!(
        (
            replay.replay_id,
            replay.plan_digest.as_str(),
            replay.reason.as_str(),
            replay.approval_ref.as_str(),
            replay.idempotency_key.as_str(),
            replay.deliveries
        ),
        (
            applied.replay_id,
            plan.digest.as_str(),
            "fixed the bug",
            "CHG-1",
            "k-1",
            2
        ),
        "{}",
        S::NAME
    );
    assert!(replay.applied_at > 0.0);
    assert_eq!(
        (
            replay.planned_by.as_deref(),
            replay.approved_by.as_deref(),
            replay.plan_id.is_some()
        ),
        (Some("alice"), Some("bob"), true),
        "{}",
        S::NAME
    );
    let mut items: Vec<_> = replay
        .items
        .iter()
        .map(|i| {
            (
                i.event_id,
                i.consumer.as_str(),
                i.generation,
                i.replayed_from,
                i.version.as_str(),
            )
        })
        .collect();
    items.sort();
    let mut expected = vec![
        (leases[0].event_id, PLAIN, 0, SettledStatus::Dead, "1.0.0"),
        (
            leases[1].event_id,
            PLAIN,
            0,
            SettledStatus::Quarantined,
            "1.0.0",
        ),
    ];
    expected.sort();
    assert_eq!(items, expected, "{}", S::NAME);
    assert!(store.replays(0).await?.is_empty());

    // Every generation, oldest first: the superseded one stays, the next names the replay.
    for lease in &leases {
        let rows = store.deliveries(lease.event_id, PLAIN).await?;
        assert_eq!(
            rows.iter()
                .map(|d| (d.generation, d.status, d.replay_id, d.token))
                .collect::<Vec<_>>(),
            [
                (0, DeliveryStatus::Replayed, None, lease.token),
                (
                    1,
                    DeliveryStatus::Pending,
                    Some(applied.replay_id),
                    lease.token
                )
            ],
            "{}",
            S::NAME
        );
        assert_eq!(
            rows.last(),
            store.delivery(lease.event_id, PLAIN).await?.as_ref()
        );
    }
    Ok(())
}

async fn repeated_idempotency_key_answers_the_first_result<S: Conformance>(store: S) -> TestResult {
    store.deploy_replayable(PLAIN).await?;
    settle(&store, vec![(note(1), RetryDecision::Dead)]).await?;
    let selection = ReplaySelection::consumer(PLAIN);
    let plan = store.propose_replay(&selection, "alice").await?.plan;
    let approval = ReplayApproval::new(plan.digest.clone(), "fixed the bug", "CHG-1", "k-1", "bob");
    let first = store.replay(&selection, &approval).await?;
    let deliveries = store.count_deliveries(PLAIN, &[]).await?;

    let again = store.replay(&selection, &approval).await?;
    assert_eq!(
        (again.replay_id, again.deliveries, again.repeated),
        (first.replay_id, first.deliveries, true),
        "{}",
        S::NAME
    );
    assert_eq!(store.count_deliveries(PLAIN, &[]).await?, deliveries);
    // The same key and plan with another reason or approval is another decision: refused, not
    // answered with the first result as if it had been approved.
    for (reason, approval_ref, changed_field) in [
        ("another reason", "CHG-1", "reason"),
        ("fixed the bug", "CHG-9", "approval reference"),
    ] {
        let changed = ReplayApproval::new(plan.digest.clone(), reason, approval_ref, "k-1", "bob");
        let answer = store.replay(&selection, &changed).await;
        assert!(
            matches!(
                &answer,
                Err(ReplayError::IdempotencyKeyConflict { key, field })
                    if key == "k-1" && *field == changed_field
            ),
            "{}: {answer:?}",
            S::NAME
        );
    }
    assert_eq!(store.replays(10).await?.len(), 1, "{}", S::NAME);
    // The same key under another plan is refused.
    let other = ReplayApproval::new("f".repeat(64), "fixed the bug", "CHG-1", "k-1", "bob");
    assert!(matches!(
        store.replay(&selection, &other).await,
        Err(ReplayError::IdempotencyKeyReused { .. })
    ));
    // Nothing is left to replay under a new key.
    let now = store.replay_plan(&selection).await?;
    let fresh = ReplayApproval::new(now.digest, "again", "CHG-2", "k-2", "bob");
    assert!(matches!(
        store.replay(&selection, &fresh).await,
        Err(ReplayError::NothingToReplay)
    ));
    assert_eq!(store.count_deliveries(PLAIN, &[]).await?, deliveries);
    Ok(())
}

async fn an_idempotency_key_is_scoped_per_consumer<S: Conformance>(store: S) -> TestResult {
    committed(&store, vec![note(1)]).await?;
    for (consumer, ordered) in [(PLAIN, false), (ORDERED, true)] {
        let claimed = claim(&store, consumer, "w1", 10, LEASE, ordered).await?;
        assert_eq!(claimed.len(), 1, "{}", S::NAME);
        store
            .fail(
                &claimed[0].lease,
                FailureClass::Permanent,
                "E_BAD",
                RetryDecision::Dead,
            )
            .await?;
    }
    // One key, one decision per consumer: the second consumer's replay is its own, not a
    // repeat of (or a conflict with) the first's.
    for consumer in [PLAIN, ORDERED] {
        // PostgreSQL's deployed registry subscribes one of them at a time.
        store.deploy_replayable(consumer).await?;
        let applied = plan_and_apply(&store, &ReplaySelection::consumer(consumer), "k-1").await?;
        assert_eq!(
            (applied.deliveries, applied.repeated),
            (1, false),
            "{}",
            S::NAME
        );
    }
    assert_eq!(store.replays(10).await?.len(), 2, "{}", S::NAME);
    Ok(())
}

async fn only_another_person_applies_a_proposed_replay<S: Conformance>(store: S) -> TestResult {
    store.deploy_replayable(PLAIN).await?;
    let leases = settle(&store, vec![(note(1), RetryDecision::Dead)]).await?;
    let selection = ReplaySelection::consumer(PLAIN);
    let dry_run = store.replay_plan(&selection).await?;
    let approve =
        |by: &str| ReplayApproval::new(&dry_run.digest, "fixed the bug", "CHG-1", "k-1", by);

    // A plan no one proposed is not applied, even with the right digest.
    assert!(
        matches!(
            store.replay(&selection, &approve("bob")).await,
            Err(ReplayError::PlanNotProposed { digest }) if digest == dry_run.digest
        ),
        "{}",
        S::NAME
    );
    // Proposing names a person and takes a plan that can be applied.
    assert!(matches!(
        store.propose_replay(&selection, " ").await,
        Err(ReplayError::PersonMissing { role: "planner" })
    ));
    assert!(matches!(
        store
            .propose_replay(
                &ReplaySelection::consumer(PLAIN).event_type("k.none"),
                "alice"
            )
            .await,
        Err(ReplayError::NothingToReplay)
    ));
    let proposed = store.propose_replay(&selection, "alice").await?;
    assert_eq!(
        (proposed.plan.digest.as_str(), proposed.planned_by.as_str()),
        (dry_run.digest.as_str(), "alice"),
        "{}",
        S::NAME
    );
    // The proposer cannot approve her own plan, under any spelling of her name.
    for same in ["alice", " Alice ", "ALICE"] {
        let answer = store.replay(&selection, &approve(same)).await;
        assert!(
            matches!(&answer, Err(ReplayError::SamePerson { person }) if person == same.trim()),
            "{}: {answer:?}",
            S::NAME
        );
    }
    // Nothing was written by the refusals.
    assert!(store.replays(10).await?.is_empty(), "{}", S::NAME);
    let delivery = store
        .delivery(leases[0].event_id, PLAIN)
        .await?
        .ok_or("missing")?;
    assert_eq!(delivery.status, DeliveryStatus::Dead, "{}", S::NAME);

    // A second person applies it; both are recorded.
    let applied = store.replay(&selection, &approve("bob")).await?;
    assert_eq!((applied.deliveries, applied.repeated), (1, false));
    let replays = store.replays(10).await?;
    assert_eq!(
        (
            replays[0].plan_id,
            replays[0].planned_by.as_deref(),
            replays[0].approved_by.as_deref()
        ),
        (Some(proposed.plan_id), Some("alice"), Some("bob")),
        "{}",
        S::NAME
    );
    // The same key presented by a third person is another decision.
    assert!(matches!(
        store.replay(&selection, &approve("carol")).await,
        Err(ReplayError::IdempotencyKeyConflict {
            field: "approver",
            ..
        })
    ));
    // Bob repeating his own apply is answered with the first result.
    let again = store.replay(&selection, &approve("bob")).await?;
    assert_eq!((again.replay_id, again.repeated), (applied.replay_id, true));
    Ok(())
}

async fn pause_stops_claims_and_resume_restores_them<S: Conformance>(store: S) -> TestResult {
    let initial = store.consumer_state(PLAIN).await?;
    assert_eq!(
        (initial.paused, initial.mode, initial.revision),
        (false, evc_runtime::ConsumerMode::Live, 0)
    );
    committed(&store, vec![note(1)]).await?;
    let paused = store.pause(PLAIN, &support::change()).await?;
    assert_eq!((paused.paused, paused.revision), (true, 1), "{}", S::NAME);
    assert_eq!(store.consumer_state(PLAIN).await?, paused);
    assert!(
        claim(&store, PLAIN, "w1", 10, LEASE, false)
            .await?
            .is_empty()
    );
    let mut tx = store.begin().await?;
    assert!(held_claim(&store, &mut tx, "w1").await?.is_empty());
    tx.rollback().await?;
    // Other consumers are not paused.
    assert_eq!(
        claim(&store, ORDERED, "w1", 10, LEASE, true).await?.len(),
        1
    );

    let resumed = store.resume(PLAIN, &support::change()).await?;
    assert_eq!((resumed.paused, resumed.revision), (false, 2));
    assert_eq!(claim(&store, PLAIN, "w1", 10, LEASE, false).await?.len(), 1);
    assert!(matches!(
        store.pause("k.nobody", &support::change()).await,
        Err(DispatchError::UnknownConsumer(_))
    ));
    Ok(())
}

async fn each_state_change_is_recorded_with_who_and_why<S: Conformance>(store: S) -> TestResult {
    use evc_runtime::{ConsumerMode, StateChange};
    assert!(store.state_changes(PLAIN, 10).await?.is_empty());
    // A change that does not say who or why is refused, and neither changes nor records.
    for refused in [
        StateChange::new("", "relay down"),
        StateChange::new("two  spaces", "relay down"),
        StateChange::new("alice", " "),
        StateChange::new("alice", "x".repeat(501)),
        StateChange::new("alice", "a\u{1b}[2Jb"),
    ] {
        assert!(
            matches!(
                store.pause(PLAIN, &refused).await,
                Err(DispatchError::InvalidChange(_))
            ),
            "{}: {refused:?}",
            S::NAME
        );
    }
    assert!(!store.consumer_state(PLAIN).await?.paused);
    assert!(store.state_changes(PLAIN, 10).await?.is_empty());

    store
        .pause(PLAIN, &StateChange::new("alice", "relay down"))
        .await?;
    store
        .set_mode(
            PLAIN,
            ConsumerMode::Shadow,
            &StateChange::new("bob", "new template"),
        )
        .await?;
    store
        .resume(PLAIN, &StateChange::new(" alice ", "relay back\nfor good"))
        .await?;
    let changes = store.state_changes(PLAIN, 10).await?;
    let seen: Vec<(&str, Option<ConsumerMode>, &str, &str)> = changes
        .iter()
        .map(|c| (c.change.as_str(), c.mode, c.by.as_str(), c.reason.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("resume", None, "alice", "relay back\nfor good"),
            ("mode", Some(ConsumerMode::Shadow), "bob", "new template"),
            ("pause", None, "alice", "relay down"),
        ],
        "{}",
        S::NAME
    );
    assert!(
        changes
            .windows(2)
            .all(|w| w[0].id > w[1].id && w[0].at >= w[1].at)
    );
    assert!(
        changes
            .iter()
            .all(|c| c.consumer == PLAIN && c.tenant_scope.is_none())
    );
    assert_eq!(store.state_changes(PLAIN, 1).await?.len(), 1);
    assert!(store.state_changes(ORDERED, 10).await?.is_empty());
    assert!(matches!(
        store.state_changes("k.nobody", 10).await,
        Err(DispatchError::UnknownConsumer(_))
    ));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Observation (`Observe`): the status report and a trace's timeline.
// ---------------------------------------------------------------------------------------------

async fn status_counts_each_consumers_deliveries_lag_and_state<S: Conformance>(
    store: S,
) -> TestResult {
    use evc_runtime::{ConsumerMode, Problem};

    let window = Duration::from_secs(3_600);
    let receipts = committed(&store, vec![note(1), note(2), note(3)]).await?;
    let mut claimed = claim(&store, PLAIN, "w1", 10, LEASE, false).await?;
    claimed.sort_by_key(|c| c.event_seq);
    let appended: Vec<uuid::Uuid> = receipts.iter().map(|r| r.event_id).collect();
    assert_eq!(ids(&claimed), appended, "{}", S::NAME);
    let dead = RetryDecision::Dead;
    store
        .fail(&claimed[0].lease, FailureClass::Permanent, "E_BAD", dead)
        .await?;
    let quarantine = RetryDecision::Quarantine;
    store
        .fail(
            &claimed[1].lease,
            FailureClass::Schema,
            "E_SHAPE",
            quarantine,
        )
        .await?;

    let report = store.status(window).await?;
    let names: Vec<&str> = report
        .consumers
        .iter()
        .map(|c| c.consumer.as_str())
        .collect();
    let registered: Vec<&str> = store.registry().consumers.iter().map(|c| c.name).collect();
    assert_eq!(names, registered, "{}: every registered consumer", S::NAME);
    let of = |name: &str| {
        report
            .consumers
            .iter()
            .find(|c| c.consumer == name)
            .cloned()
            .expect("listed")
    };
    let plain = of(PLAIN);
    let counts = (plain.pending, plain.leased, plain.dead, plain.quarantined);
    assert_eq!(counts, (0, 1, 1, 1), "{}", S::NAME);
    assert_eq!(plain.oldest_pending, None, "{}", S::NAME);
    assert!(!plain.paused);
    assert_eq!(plain.mode, ConsumerMode::Live);
    let ordered = of(ORDERED);
    assert_eq!((ordered.pending, ordered.leased), (3, 0), "{}", S::NAME);
    assert!(ordered.oldest_pending.is_some(), "{}", S::NAME);
    assert_eq!(of(SHADOW).mode, ConsumerMode::Shadow);
    let off = of(OFF);
    assert_eq!((off.pending, off.mode), (0, ConsumerMode::Off));
    assert!(report.lag.is_empty(), "{}: nothing acked yet", S::NAME);
    let attempts: Vec<(&str, i64)> = report
        .attempts
        .iter()
        .map(|a| (a.consumer.as_str(), a.latency.samples))
        .collect();
    assert_eq!(attempts, [(PLAIN, 2)], "{}", S::NAME);
    assert!(report.silent_workers.is_empty() && report.workers.is_empty());
    assert_eq!(report.stale_tokens, 0);
    let first = Problem::DeadLetters {
        consumer: PLAIN.to_owned(),
        dead: 1,
        quarantined: 1,
    };
    assert_eq!(report.problems(window).first(), Some(&first), "{}", S::NAME);

    // An attempt that takes at least 30 ms: past the 25 ms bucket of the duration histogram.
    tokio::time::sleep(Duration::from_millis(30)).await;
    ack(&store, &claimed[2].lease).await?;
    store.pause(PLAIN, &support::change()).await?;
    let report = store.status(window).await?;
    let lag: Vec<(&str, &str, i64)> = report
        .lag
        .iter()
        .map(|l| {
            (
                l.producer_class.as_str(),
                l.consumer.as_str(),
                l.latency.samples,
            )
        })
        .collect();
    assert_eq!(lag, [("notes", PLAIN, 1)], "{}", S::NAME);
    let latency = &report.lag[0].latency;
    assert!(latency.p50 <= latency.p95 && latency.p95 <= latency.p99);
    assert_eq!(report.attempts[0].latency.samples, 3, "{}", S::NAME);
    let plain = report
        .consumers
        .iter()
        .find(|c| c.consumer == PLAIN)
        .expect("listed");
    assert_eq!((plain.leased, plain.paused), (0, true), "{}", S::NAME);
    let stopped = Problem::Stopped {
        consumer: PLAIN.to_owned(),
        paused: true,
    };
    assert!(report.problems(window).contains(&stopped), "{}", S::NAME);
    assert!(report.prometheus().contains("evc_consumer_paused"));

    // The totals count every attempt whatever the window: Prometheus counters and a histogram.
    let report = store.status(Duration::ZERO).await?;
    assert!(
        report.attempts.is_empty(),
        "{}: nothing in no window",
        S::NAME
    );
    assert!(
        report.totals.is_empty(),
        "{}: the status leaves them out",
        S::NAME
    );
    let report = report.with_totals(store.attempt_totals().await?);
    let totals: Vec<_> = report.totals.iter().map(|t| t.consumer.as_str()).collect();
    assert_eq!(totals, [PLAIN], "{}", S::NAME);
    let plain = &report.totals[0];
    let outcomes = plain.outcomes;
    assert_eq!(
        (
            outcomes.acked,
            outcomes.dead,
            outcomes.quarantined,
            outcomes.retry
        ),
        (1, 1, 1, 0),
        "{}",
        S::NAME
    );
    assert_eq!(plain.attempts(), 3, "{}", S::NAME);
    assert!(plain.durations[..3].iter().sum::<i64>() <= 2, "{plain:?}");
    assert!(plain.duration_sum >= Duration::from_millis(30), "{plain:?}");
    let text = report.prometheus();
    for line in [
        format!("evc_attempts_total{{consumer=\"{PLAIN}\",outcome=\"acked\"}} 1"),
        format!("evc_attempts_total{{consumer=\"{PLAIN}\",outcome=\"dead\"}} 1"),
        "# TYPE evc_attempt_duration_seconds histogram".to_owned(),
        format!("evc_attempt_duration_seconds_count{{consumer=\"{PLAIN}\"}} 3"),
        format!("evc_attempt_duration_seconds_bucket{{le=\"+Inf\",consumer=\"{PLAIN}\"}} 3"),
    ] {
        assert!(text.contains(&line), "{}: {line} in\n{text}", S::NAME);
    }
    // Cumulative buckets never fall.
    let buckets: Vec<u64> = text
        .lines()
        .filter(|l| l.starts_with("evc_attempt_duration_seconds_bucket"))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(buckets.len(), evc_runtime::DURATION_BUCKETS_MS.len() + 1);
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    Ok(())
}

async fn timeline_lists_the_traces_event_deliveries_and_attempts<S: Conformance>(
    store: S,
) -> TestResult {
    let receipts = committed(&store, vec![note(1)]).await?;
    let event_id = receipts[0].event_id;
    let claimed = claim(&store, PLAIN, "w1", 10, LEASE, false).await?;
    ack(&store, &claimed[0].lease).await?;

    let timeline = store.timeline(support::TRACE_ID).await?;
    assert!(timeline.iter().all(|entry| entry.event_id == event_id));
    let in_order = timeline.windows(2).all(|pair| pair[0].at <= pair[1].at);
    assert!(in_order, "{}: in time order", S::NAME);
    let first = &timeline[0];
    let shown = (
        first.kind.as_str(),
        first.consumer.as_deref(),
        first.detail.as_str(),
    );
    assert_eq!(shown, ("event", None, "test.note 1.0.0"), "{}", S::NAME);
    let mut deliveries: Vec<(&str, &str)> = timeline
        .iter()
        .filter(|entry| entry.kind == "delivery")
        .map(|entry| {
            (
                entry.consumer.as_deref().unwrap_or("-"),
                entry.detail.as_str(),
            )
        })
        .collect();
    deliveries.sort_unstable();
    // The acked delivery is gone; its attempt row is its record.
    let pending = [(ORDERED, "pending"), (SHADOW, "pending")];
    assert_eq!(deliveries, pending, "{}", S::NAME);
    let attempts: Vec<(Option<&str>, &str, Option<i32>)> = timeline
        .iter()
        .filter(|entry| entry.kind == "attempt")
        .map(|entry| {
            (
                entry.consumer.as_deref(),
                entry.detail.as_str(),
                entry.attempt,
            )
        })
        .collect();
    assert_eq!(attempts, [(Some(PLAIN), "acked", Some(1))], "{}", S::NAME);

    let unknown = store.timeline("0af7651916cd43dd8448eb211c80319c").await?;
    assert!(unknown.is_empty(), "{}", S::NAME);
    for bad in [
        "4BF92F3577B34DA6A3CE929D0E0E4736",
        "00000000000000000000000000000000",
        "x",
    ] {
        let refused = store.timeline(bad).await;
        assert!(
            matches!(refused, Err(DispatchError::TraceId(_))),
            "{}: {bad}",
            S::NAME
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The SQLite store's own behaviour.
// ---------------------------------------------------------------------------------------------

mod sqlite_only {
    use std::time::Duration;

    use evc_runtime::{AppendOptions, SqliteOpenError, SqliteStore, StoreError};

    use super::{LEASE, note};
    use crate::conformance::{CONFORMANCE_REGISTRY, PLAIN};
    use crate::support::{TEST_REGISTRY, TestResult};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_open_of_the_same_file_fails() -> TestResult {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("outbox.db");
        let location = path.to_string_lossy().into_owned();
        let store = SqliteStore::open(&location, CONFORMANCE_REGISTRY).await?;
        super::committed(&store, vec![note(1)]).await?;

        // In this process as in another: the lock file is taken.
        let second = SqliteStore::open(&location, CONFORMANCE_REGISTRY).await;
        let Err(SqliteOpenError::Locked {
            database,
            lock_file,
        }) = second
        else {
            return Err(format!("expected Locked, got {second:?}").into());
        };
        assert_eq!(database, path);
        assert_eq!(lock_file, dir.path().join("outbox.db.lock"));
        let url = format!("sqlite://{location}");
        let by_url = SqliteStore::open(&url, CONFORMANCE_REGISTRY).await;
        assert!(
            matches!(by_url, Err(SqliteOpenError::Locked { .. })),
            "{by_url:?}"
        );
        let message = SqliteStore::open(&location, CONFORMANCE_REGISTRY)
            .await
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(message.contains("outbox.db.lock"), "{message}");

        // Closed, the file opens again with what it held.
        store.close().await;
        let reopened = SqliteStore::open(&url, CONFORMANCE_REGISTRY).await?;
        assert_eq!(reopened.count_events(&[]).await?, 1);
        reopened.close().await;
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn another_registry_is_refused_unless_accepted() -> TestResult {
        let dir = tempfile::tempdir()?;
        let location = dir.path().join("outbox.db").to_string_lossy().into_owned();
        let store = SqliteStore::open(&location, CONFORMANCE_REGISTRY).await?;
        evc_runtime::Store::verify_registry(&store).await?;
        store.close().await;

        let other = SqliteStore::open(&location, TEST_REGISTRY).await;
        assert!(
            matches!(other, Err(SqliteOpenError::Store(StoreError::Drift(_)))),
            "{other:?}"
        );
        let accepted = SqliteStore::builder(&location, TEST_REGISTRY)
            .accept_registry_change()
            .open()
            .await?;
        accepted.verify_registry().await?;
        accepted.close().await;
        // The first registry is now the changed one.
        let back = SqliteStore::open(&location, CONFORMANCE_REGISTRY).await;
        assert!(matches!(
            back,
            Err(SqliteOpenError::Store(StoreError::Drift(_)))
        ));
        assert!(matches!(
            SqliteStore::open("sqlite::memory:", CONFORMANCE_REGISTRY).await,
            Err(SqliteOpenError::InMemory)
        ));
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_recorded_open_reads_back_the_whole_registry() -> TestResult {
        let dir = tempfile::tempdir()?;
        let location = dir.path().join("outbox.db").to_string_lossy().into_owned();
        let store = SqliteStore::open(&location, CONFORMANCE_REGISTRY).await?;
        super::committed(&store, vec![note(1)]).await?;

        // While the application holds the file, a recorded open is refused as any second one.
        let held = SqliteStore::recorded(&location).open().await;
        assert!(
            matches!(held, Err(SqliteOpenError::Locked { .. })),
            "{held:?}"
        );
        store.close().await;

        let recorded = SqliteStore::recorded(format!("sqlite://{location}"))
            .open()
            .await?;
        assert_eq!(*recorded.registry(), CONFORMANCE_REGISTRY);
        assert_eq!(recorded.count_events(&[]).await?, 1);
        recorded.verify_registry().await?;
        recorded.close().await;

        // An accepted change replaces the recorded registry as a whole.
        let changed = SqliteStore::builder(&location, TEST_REGISTRY)
            .accept_registry_change()
            .open()
            .await?;
        changed.close().await;
        let recorded = SqliteStore::recorded(&location).open().await?;
        assert_eq!(*recorded.registry(), TEST_REGISTRY);
        recorded.close().await;
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_recorded_open_creates_nothing_and_writes_to_no_foreign_file() -> TestResult {
        let dir = tempfile::tempdir()?;
        let missing = dir.path().join("missing.db");
        let opened = SqliteStore::recorded(missing.to_string_lossy())
            .open()
            .await;
        assert!(
            matches!(&opened, Err(SqliteOpenError::Missing { path }) if *path == missing),
            "{opened:?}"
        );
        assert_eq!(std::fs::read_dir(dir.path())?.count(), 0, "nothing created");

        // A SQLite file of something else: refused before any migration runs.
        let foreign = dir.path().join("foreign.db");
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&foreign)
            .create_if_missing(true);
        let mut connection = sqlx::ConnectOptions::connect(&options).await?;
        sqlx::query("CREATE TABLE notes (id INTEGER PRIMARY KEY)")
            .execute(&mut connection)
            .await?;
        sqlx::Connection::close(connection).await?;
        let opened = SqliteStore::recorded(foreign.to_string_lossy())
            .open()
            .await;
        assert!(
            matches!(opened, Err(SqliteOpenError::NotAnOutbox { .. })),
            "{opened:?}"
        );
        let mut connection = sqlx::ConnectOptions::connect(&options).await?;
        let tables: i64 =
            sqlx::query_scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table'")
                .fetch_one(&mut connection)
                .await?;
        assert_eq!(tables, 1, "only the file's own table");
        sqlx::Connection::close(connection).await?;
        Ok(())
    }

    /// Polled once: whether a permit or a wake-up is there now. The commit hook runs inside
    /// the commit, so by the time `commit`/`rollback` returned it has fired or never will.
    async fn woken(notify: &tokio::sync::Notify) -> bool {
        tokio::time::timeout(Duration::ZERO, notify.notified())
            .await
            .is_ok()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn listen_wakes_the_dispatchers_wakers_until_shutdown() -> TestResult {
        use std::collections::HashMap;
        use std::sync::Arc;

        use evc_runtime::Store;
        use tokio::sync::{Notify, watch};

        let dir = tempfile::tempdir()?;
        let location = dir.path().join("outbox.db").to_string_lossy().into_owned();
        let store = SqliteStore::open(&location, CONFORMANCE_REGISTRY).await?;
        // The bell is had at once (commits wake listeners anyway) and given back for nothing.
        let bell = store.hold_doorbell(PLAIN, LEASE).await?.ok_or("no bell")?;
        store.release_doorbell(bell).await?;
        let waker = Arc::new(Notify::new());
        let wakers = HashMap::from([(PLAIN.to_owned(), Arc::clone(&waker))]);
        let (stop, shutdown) = watch::channel(false);
        let listener = {
            let store = store.clone();
            tokio::spawn(async move { store.listen(wakers, LEASE, shutdown).await })
        };

        // An append's commit wakes a registered waiter (once the listener is subscribed).
        let woke = crate::conformance::eventually(|| async {
            let notified = waker.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            super::committed(&store, vec![super::ping()]).await?;
            Ok(tokio::time::timeout(Duration::ZERO, notified).await.ok())
        })
        .await?;
        assert!(woke.is_some(), "the listener never woke its waker");

        // After shutdown, commits wake nobody.
        stop.send(true)?;
        tokio::time::timeout(crate::support::HANG, listener).await??;
        let notified = waker.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        super::committed(&store, vec![super::ping()]).await?;
        assert!(
            tokio::time::timeout(Duration::ZERO, notified)
                .await
                .is_err()
        );
        store.close().await;
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wakeups_fire_when_an_append_commits() -> TestResult {
        let dir = tempfile::tempdir()?;
        let location = dir.path().join("outbox.db").to_string_lossy().into_owned();
        let store = SqliteStore::open(&location, CONFORMANCE_REGISTRY).await?;
        let wake = store.wakeups(PLAIN).ok_or("no wake-up")?;
        let ordered = store.wakeups(super::ORDERED).ok_or("no wake-up")?;
        assert!(store.wakeups("k.unknown").is_none());

        // Rolled back: nobody is woken.
        let mut tx = store.begin().await?;
        store
            .append(&mut tx, note(1), AppendOptions::default())
            .await?;
        tx.rollback().await?;
        assert!(!woken(&wake).await);

        // A waiting worker wakes at the commit, and its claim sees the delivery.
        let waiter = {
            let (store, wake) = (store.clone(), wake.clone());
            tokio::spawn(async move {
                wake.notified().await;
                crate::support::claim(&store, PLAIN, "w1", 10, LEASE, false).await
            })
        };
        // Let the waiter register (a permit would wake it anyway).
        tokio::task::yield_now().await;
        let mut tx = store.begin().await?;
        let receipt = store
            .append(&mut tx, note(2), AppendOptions::default())
            .await?;
        assert!(!woken(&ordered).await, "woken before the commit");
        tx.commit().await?;
        let claimed = tokio::time::timeout(crate::support::HANG, waiter).await???;
        assert!(claimed.iter().any(|c| c.lease.event_id == receipt.event_id));
        // The commit woke every consumer it wrote for.
        assert!(woken(&ordered).await);
        assert!(!woken(&ordered).await, "one permit per commit");

        // An append outside a transaction wakes when its own transaction commits; a ping
        // wakes only its consumer.
        while woken(&wake).await {}
        let mut connection = store.pool().acquire().await?;
        store
            .append(&mut connection, super::ping(), AppendOptions::default())
            .await?;
        assert!(woken(&wake).await);
        assert!(!woken(&ordered).await);
        drop(connection);
        store.close().await;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The PostgreSQL store's own behaviour.
// ---------------------------------------------------------------------------------------------

mod postgres_only {
    use evc_runtime::{PgStore, Store, StoreError};

    /// A lag watch that finds its lock taken (another process's round) does nothing and says
    /// so; once the lock is free the next round opens the breach. The lock is the watch's
    /// transaction-level advisory lock, taken here by another session.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lag_watch_that_finds_its_lock_taken_does_nothing() -> TestResult {
        crate::conformance::with_postgres(
            crate::conformance::LAGGING_REGISTRY,
            |store: PgStore| async move {
                super::committed(&store, vec![super::note(1)]).await?;
                // Over the threshold of a millisecond.
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                let mut holder = store.pool().begin().await?;
                sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('evc.lag', 7268))")
                    .execute(&mut *holder)
                    .await?;
                let blocked = store.watch_lag().await?;
                assert!(!blocked.leader);
                assert_eq!(blocked.opened, 0);
                assert!(store.lag_breaches(10).await?.is_empty());
                holder.rollback().await?;
                let led = store.watch_lag().await?;
                assert!(led.leader);
                assert_eq!(led.opened, 1);
                Ok(())
            },
        )
        .await
    }

    use crate::conformance::CONFORMANCE_REGISTRY;
    use crate::support::{DISPATCH_REGISTRY, TestResult, with_database};

    /// The consumers of the registry the database deploys, by name.
    async fn deployed_consumers(
        pool: &sqlx::PgPool,
    ) -> Result<Vec<String>, evc_runtime::DispatchError> {
        let deployed = evc_runtime::deployed_registry(pool).await?;
        let mut names: Vec<String> = deployed
            .consumers
            .iter()
            .map(|c| c.name.to_owned())
            .collect();
        names.sort();
        Ok(names)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_installed_registry_is_the_deployed_one() -> TestResult {
        with_database(|pool| async move {
            let store = PgStore::new(pool.clone(), CONFORMANCE_REGISTRY)?;
            // The database deploys the reference contracts' registry.
            assert!(matches!(
                store.verify_registry().await,
                Err(StoreError::Drift(_))
            ));
            store.install_registry().await?;
            store.verify_registry().await?;
            let mut expected: Vec<String> = CONFORMANCE_REGISTRY
                .consumers
                .iter()
                .map(|c| c.name.to_owned())
                .collect();
            expected.sort();
            assert_eq!(deployed_consumers(&pool).await?, expected);
            // Again: nothing changes.
            store.install_registry().await?;
            store.verify_registry().await?;

            // Another registry installed after it is deployed in its place: objects only the
            // first one has stay as rows, no longer deployed.
            let other = PgStore::new(pool.clone(), DISPATCH_REGISTRY)?;
            other.install_registry().await?;
            other.verify_registry().await?;
            assert!(matches!(
                store.verify_registry().await,
                Err(StoreError::Drift(_))
            ));
            let names: Vec<String> = DISPATCH_REGISTRY
                .consumers
                .iter()
                .map(|c| c.name.to_owned())
                .collect();
            assert_eq!(deployed_consumers(&pool).await?, names);
            Ok(())
        })
        .await
    }

    /// `VACUUM` refuses to run inside a transaction block, a multi-statement string's too.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn analyze_refreshes_the_statistics_after_a_bulk_append() -> TestResult {
        with_database(|pool| async move {
            let store = crate::support::dispatch_store(&pool, 2).await?;
            crate::support::append_notes(&store, 50, 5).await?;
            store.analyze().await?;
            assert_eq!(evc_runtime::Store::count_events(&store, &[]).await?, 50);
            Ok(())
        })
        .await
    }
}

/// The feed after `after` once it holds at least `count` events (at most
/// [`support::HANG`]: on PostgreSQL any write transaction still open in the cluster, another
/// test's too, holds the feed back).
async fn feed_of<S: Conformance>(
    store: &S,
    after: FeedPosition,
    count: usize,
) -> Result<Vec<FeedEvent>, BoxError> {
    let deadline = tokio::time::Instant::now() + support::HANG;
    loop {
        let feed = store.feed(after, 100).await?;
        if feed.len() >= count || tokio::time::Instant::now() >= deadline {
            return Ok(feed);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn the_feed_yields_each_event_once_and_never_passes_an_open_transaction<S: Conformance>(
    store: S,
) -> TestResult {
    let start = FeedPosition::default();
    assert_eq!(store.feed_head().await?, start);
    assert!(store.feed(start, 10).await?.is_empty());
    let mut receipts = committed(&store, vec![note(1), note(2)]).await?;
    receipts.extend(committed(&store, vec![note(3)]).await?);
    let feed = feed_of(&store, start, 3).await?;
    let ids = |events: &[FeedEvent]| events.iter().map(|e| e.event_id).collect::<Vec<_>>();
    let appended: Vec<_> = receipts.iter().map(|r| r.event_id).collect();
    assert_eq!(ids(&feed), appended, "{}", S::NAME);
    assert_eq!(
        feed.iter().map(|e| e.position.seq).collect::<Vec<_>>(),
        receipts.iter().map(|r| r.seq).collect::<Vec<_>>()
    );
    assert_eq!(feed[1].payload, support::note(&support::note_key(2)));
    assert_eq!(
        store.payload(receipts[1].event_id).await?,
        Some(support::note(&support::note_key(2)))
    );
    assert_eq!(
        store.payload(evc_runtime::replay_uuid(424_242)).await?,
        None,
        "no such event"
    );
    assert_eq!(
        (feed[0].event_type.as_str(), feed[0].schema_version.as_str()),
        ("test.note", "1.0.0")
    );
    assert!(!format!("{:?}", feed[1]).contains(&support::note_key(2)));
    // Paging by position reads the same events, each once.
    let first = store.feed(start, 2).await?;
    let rest = store.feed(first[1].position, 10).await?;
    assert_eq!([ids(&first), ids(&rest)].concat(), appended);
    let head = store.feed_head().await?;
    assert_eq!(head, feed[2].position);
    assert!(store.feed(head, 10).await?.is_empty());

    // SQLite commits one writer at a time in `seq` order. On PostgreSQL a transaction that
    // drew an earlier seq can commit after a later one: the feed holds the later event back
    // until the earlier one commits, then yields both in order.
    if S::NAME == "postgres" {
        let mut open = store.begin().await?;
        let early = store
            .append(&mut *open, note(4), AppendOptions::default())
            .await?;
        let late = committed(&store, vec![note(5)]).await?;
        assert!(early.seq < late[0].seq);
        assert!(
            store.feed(head, 10).await?.is_empty(),
            "passed an open transaction"
        );
        assert_eq!(store.feed_head().await?, head);
        open.commit().await?;
        let both = feed_of(&store, head, 2).await?;
        assert_eq!(ids(&both), [early.event_id, late[0].event_id]);
    }
    Ok(())
}

/// A relay cursor: one holder at a time, taken back at once by its owner, by another only
/// after the lease ran out; a position written only under the newest token.
async fn a_relay_cursor_moves_only_under_its_newest_token<S: Conformance>(store: S) -> TestResult {
    assert!(matches!(
        store.take_cursor("Not A Name", "r1", LEASE).await,
        Err(DispatchError::CursorName(_))
    ));
    assert_eq!(store.cursor("jetstream").await?, None);
    let first = store
        .take_cursor("jetstream", "r1", LEASE)
        .await?
        .ok_or("a new cursor is free")?;
    assert_eq!((first.token, first.position), (1, FeedPosition::default()));
    assert_eq!(
        store.take_cursor("jetstream", "r2", LEASE).await?,
        None,
        "{}: held by r1",
        S::NAME
    );
    let moved = FeedPosition { writer: 0, seq: 7 };
    store
        .advance_cursor(&first, moved, CursorProgress::default(), LEASE)
        .await?;
    let state = store.cursor("jetstream").await?.ok_or("stored")?;
    assert_eq!(
        (state.position, state.owner.as_str(), state.token),
        (moved, "r1", 1)
    );
    assert!(state.lease_until > state.advanced_at, "{state:?}");

    // The owner restarted: it takes the cursor back at once, where it was, fencing its
    // earlier self.
    let again = store
        .take_cursor("jetstream", "r1", LEASE)
        .await?
        .ok_or("its owner takes it back")?;
    assert_eq!((again.token, again.position), (2, moved));
    let stale = store
        .advance_cursor(
            &first,
            FeedPosition { writer: 0, seq: 9 },
            CursorProgress::default(),
            LEASE,
        )
        .await;
    assert!(
        matches!(stale, Err(DispatchError::StaleCursor { token: 1, .. })),
        "{}: {stale:?}",
        S::NAME
    );
    assert_eq!(
        store.cursor("jetstream").await?.map(|c| c.position),
        Some(moved)
    );

    // A holder whose lease ran out loses the cursor to the next relay.
    store
        .advance_cursor(&again, moved, CursorProgress::default(), SHORT)
        .await?;
    tokio::time::sleep(SHORT * 4).await;
    let taken = store
        .take_cursor("jetstream", "r2", LEASE)
        .await?
        .ok_or("a lapsed lease is free")?;
    assert_eq!(
        (taken.token, taken.position, taken.owner.as_str()),
        (3, moved, "r2")
    );
    assert!(matches!(
        store
            .advance_cursor(&again, moved, CursorProgress::default(), LEASE)
            .await,
        Err(DispatchError::StaleCursor { .. })
    ));
    // A holder that stops lets its cursor go: the next relay takes it at once; a stale token
    // releases nothing.
    assert!(matches!(
        store.release_cursor(&again).await,
        Err(DispatchError::StaleCursor { .. })
    ));
    store.release_cursor(&taken).await?;
    let next = store
        .take_cursor("jetstream", "r3", LEASE)
        .await?
        .ok_or("a released cursor is free")?;
    assert_eq!((next.token, next.position), (4, moved));
    for owner in ["", &"o".repeat(201)] {
        assert!(matches!(
            store.take_cursor("jetstream", owner, LEASE).await,
            Err(DispatchError::CursorOwner { .. })
        ));
    }
    // Cursors are independent of one another.
    let other = store
        .take_cursor("kafka", "r1", LEASE)
        .await?
        .ok_or("another cursor is free")?;
    assert_eq!(other.token, 1);
    Ok(())
}

/// What the status report says of a relay cursor: events after it (its lag), events passed
/// and the holder's rate, failed rounds and the failing error until the next progress; a
/// problem only when it is behind and no relay holds it or its rounds fail.
async fn a_relay_cursor_reports_its_lag_progress_and_failures<S: Conformance>(
    store: S,
) -> TestResult {
    support::append_notes(&store, 5, 5).await?;
    let head = feed_of(&store, FeedPosition::default(), 5)
        .await?
        .last()
        .map(|event| event.position)
        .ok_or("five events")?;
    let held = store
        .take_cursor("jetstream", "r1", LEASE)
        .await?
        .ok_or("a new cursor is free")?;
    let relay = |report: &evc_runtime::StatusReport| report.relays.first().cloned();
    let report = store.status(Duration::from_secs(60)).await?;
    let status = relay(&report).ok_or("the cursor is reported")?;
    assert_eq!(
        (status.cursor.name.as_str(), status.held, status.behind),
        ("jetstream", true, 5),
        "{}",
        S::NAME
    );
    assert_eq!((status.cursor.published, status.cursor.failing), (0, None));
    let relay_problems = |report: &evc_runtime::StatusReport| {
        report
            .problems(Duration::from_secs(60))
            .into_iter()
            .filter(|p| matches!(p, Problem::RelayBehind(_)))
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
    };
    assert!(relay_problems(&report).is_empty(), "held and not failing");

    // A failed round: counted, and failing until the cursor passes an event; the error is
    // kept to 500 characters.
    let long = format!("publishing to JetStream: {}", "x".repeat(600));
    store.note_cursor_failure(&held, &long).await?;
    let report = store.status(Duration::from_secs(60)).await?;
    let status = relay(&report).ok_or("reported")?;
    assert_eq!(status.cursor.failed_rounds, 1);
    let failing = status.cursor.failing.clone().ok_or("failing")?;
    assert_eq!(failing.chars().count(), evc_runtime::MAX_CURSOR_ERROR_CHARS);
    assert!(failing.starts_with("publishing to JetStream: x"));
    assert_eq!(
        relay_problems(&report),
        [format!(
            "relay jetstream: 5 events behind, failing: {failing}"
        )]
    );
    // A renewal passes no event: still failing.
    store
        .advance_cursor(
            &held,
            FeedPosition::default(),
            CursorProgress::default(),
            LEASE,
        )
        .await?;
    let status = relay(&store.status(Duration::from_secs(60)).await?).ok_or("reported")?;
    assert!(status.cursor.failing.is_some(), "{}", S::NAME);

    let progress = CursorProgress {
        published: 5,
        rate_per_s: 250.0,
    };
    store.advance_cursor(&held, head, progress, LEASE).await?;
    let report = store.status(Duration::from_secs(60)).await?;
    let status = relay(&report).ok_or("reported")?;
    assert_eq!(
        (
            status.behind,
            status.cursor.published,
            status.cursor.failed_rounds,
            status.cursor.failing.clone()
        ),
        (0, 5, 1, None),
        "{}",
        S::NAME
    );
    assert!((status.cursor.rate_per_s - 250.0).abs() < f64::EPSILON);
    let metrics = report.prometheus();
    for line in [
        "evc_relay_behind_events{cursor=\"jetstream\"} 0",
        "evc_relay_held{cursor=\"jetstream\"} 1",
        "evc_relay_published_events_total{cursor=\"jetstream\"} 5",
        "evc_relay_failed_rounds_total{cursor=\"jetstream\"} 1",
        "evc_relay_publish_rate{cursor=\"jetstream\"} 250",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }

    // Let go, with a new event after it: behind and held by no one.
    store.release_cursor(&held).await?;
    support::append_notes(&store, 1, 1).await?;
    feed_of(&store, head, 1).await?;
    let report = store.status(Duration::from_secs(60)).await?;
    assert_eq!(
        relay_problems(&report),
        ["relay jetstream: 1 event behind, no relay holds it".to_owned()]
    );
    Ok(())
}

/// A worker silent past its consumer's threshold is reported with its consumer's executor
/// class and the owner the class names; the report sums heartbeats per class (every class a
/// consumer runs on, none for a consumer without one), as text and as metrics.
async fn silent_workers_are_reported_by_executor_class_and_owner<S: Conformance>(
    store: S,
) -> TestResult {
    use evc_runtime::{ClassOwner, Heartbeat};
    store
        .heartbeat(&[Heartbeat::new("old/plain", PLAIN, "")])
        .await?;
    // Past `k.plain`'s threshold; `k.shadow` and `k.ordered` allow a minute, so their
    // workers stay in time however slow the machine is.
    tokio::time::sleep(conformance::CLASSED_PLAIN_THRESHOLD + Duration::from_millis(500)).await;
    store
        .heartbeat(&[
            Heartbeat::new("fresh/shadow", SHADOW, ""),
            Heartbeat::new("fresh/ordered", ORDERED, ""),
            Heartbeat::new("fresh/off", OFF, ""),
        ])
        .await?;

    let report = store.status(Duration::from_secs(60)).await?;
    let email = ClassOwner::new("notification.email", "team-notify");
    let silent: Vec<(&str, Option<&ClassOwner>)> = report
        .silent_workers
        .iter()
        .map(|w| (w.owner.as_str(), w.class.as_ref()))
        .collect();
    assert_eq!(silent, [("old/plain", Some(&email))], "{}", S::NAME);
    let classes: Vec<(&str, &str, Vec<&str>, usize, usize)> = report
        .classes
        .iter()
        .map(|c| {
            (
                c.class.executor_class.as_str(),
                c.class.heartbeat_owner.as_str(),
                c.consumers.iter().map(String::as_str).collect(),
                c.workers,
                c.silent,
            )
        })
        .collect();
    assert_eq!(
        classes,
        [
            (
                "notification.email",
                "team-notify",
                vec![PLAIN, SHADOW],
                2,
                1
            ),
            ("sql.audit", "team-platform", vec![ORDERED], 1, 0),
        ],
        "{}: the retired class runs no consumer; k.off runs on none",
        S::NAME
    );
    let problems: Vec<String> = report
        .problems(Duration::from_secs(3_600))
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("k.plain: worker old/plain silent for")
                && p.ends_with("; class notification.email, owner team-notify)")),
        "{}: {problems:?}",
        S::NAME
    );
    let metrics = report.prometheus();
    for (series, value) in [
        (
            r#"evc_class_silent_workers{executor_class="notification.email",heartbeat_owner="team-notify"} 1"#,
            true,
        ),
        (
            r#"evc_class_workers{executor_class="notification.email",heartbeat_owner="team-notify"} 2"#,
            true,
        ),
        (
            r#"evc_class_silent_workers{executor_class="sql.audit",heartbeat_owner="team-platform"} 0"#,
            true,
        ),
        (r#"executor_class="notification.sms""#, false),
    ] {
        assert_eq!(
            metrics.lines().any(|line| line.contains(series)),
            value,
            "{}: {series}\n{metrics}",
            S::NAME
        );
    }
    Ok(())
}

/// Consumers whose executor classes share an idempotency namespace share their effect keys:
/// the first to record a key performs the effect, the others read it as recorded before
/// (within the event's tenant), whether their lease is leased, held by a transaction or in
/// shadow mode. A consumer of another namespace records the same key as its own, and each row
/// stays the recording consumer's.
async fn an_effect_key_is_recorded_once_per_idempotency_namespace<S: Conformance>(
    store: S,
) -> TestResult {
    use conformance::{AUDIT, PUSH};
    let mut tx = store.begin().await?;
    store
        .append(&mut *tx, note(1), AppendOptions::new())
        .await?;
    store
        .append(&mut *tx, note(2), AppendOptions::new().tenant_scope("acme"))
        .await?;
    tx.commit().await?;
    let plain = claim(&store, PLAIN, "w-plain", 10, LEASE, false).await?;
    let push = claim(&store, PUSH, "w-push", 10, LEASE, false).await?;
    let shadow = claim(&store, SHADOW, "w-shadow", 10, LEASE, false).await?;
    let audit = claim(&store, AUDIT, "w-audit", 10, LEASE, false).await?;
    assert_eq!(
        [plain.len(), push.len(), shadow.len(), audit.len()],
        [2, 2, 2, 2],
        "{}",
        S::NAME
    );
    assert!(shadow[0].lease.is_shadow(), "{}", S::NAME);

    let mut tx = store.begin().await?;
    let mut recorded = Vec::new();
    for (what, lease) in [
        ("plain, no tenant", &plain[0].lease),
        ("push, same namespace", &push[0].lease),
        ("shadow, same namespace", &shadow[0].lease),
        ("audit, another namespace", &audit[0].lease),
        ("push, acme", &push[1].lease),
        ("plain, acme", &plain[1].lease),
    ] {
        let first = store.record_effect(&mut *tx, lease, "mail-1", "d").await?;
        recorded.push((what, first));
    }
    tx.commit().await?;
    assert_eq!(
        recorded,
        [
            ("plain, no tenant", true),
            ("push, same namespace", false),
            ("shadow, same namespace", false),
            ("audit, another namespace", true),
            ("push, acme", true),
            ("plain, acme", false),
        ],
        "{}",
        S::NAME
    );
    // Each row is the consumer's that recorded it.
    let recorder = |effect: Option<evc_runtime::EffectRecord>| effect.map(|e| e.event_id);
    for (consumer, tenant, event) in [
        (PLAIN, None, Some(plain[0].lease.event_id)),
        (PUSH, None, None),
        (AUDIT, None, Some(audit[0].lease.event_id)),
        (PUSH, Some("acme"), Some(push[1].lease.event_id)),
        (PLAIN, Some("acme"), None),
    ] {
        assert_eq!(
            recorder(store.effect(consumer, "mail-1", tenant).await?),
            event,
            "{} {consumer} {tenant:?}",
            S::NAME
        );
    }

    // A delivery held by its claim's transaction records in the namespace too.
    committed(&store, vec![note(3)]).await?;
    let mut tx = store.begin().await?;
    let held = Store::claim(&store, &mut *tx, &ClaimRequest::held(PUSH, "w-held", 10)).await?;
    assert_eq!(held.len(), 1, "{}", S::NAME);
    assert!(
        store
            .record_effect(&mut *tx, &held[0].lease, "mail-3", "d")
            .await?,
        "{}",
        S::NAME
    );
    tx.commit().await?;
    let third = claim(&store, PLAIN, "w-plain", 10, LEASE, false).await?;
    let mut tx = store.begin().await?;
    let again = store
        .record_effect(&mut *tx, &third[0].lease, "mail-3", "d")
        .await?;
    tx.commit().await?;
    assert!(
        !again,
        "{}: recorded by the held delivery of k.push",
        S::NAME
    );
    Ok(())
}

/// `text` (RFC 3339) as a clock reading.
fn clock(text: &str) -> Result<std::time::SystemTime, BoxError> {
    let time = chrono::DateTime::parse_from_rfc3339(text)?;
    let seconds = u64::try_from(time.timestamp())?;
    Ok(std::time::UNIX_EPOCH + Duration::from_secs(seconds))
}

/// The ticks in the feed, in feed order, as `schedule@slot`, once the feed shows every tick
/// appended (on PostgreSQL it holds back events behind any transaction still running on the
/// server, another test's too).
async fn ticks_in_feed<S: Conformance>(store: &S) -> Result<Vec<String>, BoxError> {
    let appended = store
        .count_events(&["cron.tick.daily", "cron.tick.hourly"])
        .await?;
    let ticks = eventually(|| async {
        let feed = store.feed(FeedPosition::default(), 1_000).await?;
        let ticks: Vec<String> = feed
            .iter()
            .filter(|event| event.event_type.starts_with("cron.tick."))
            .map(|event| {
                let field = |name: &str| {
                    event.payload[name]
                        .as_str()
                        .unwrap_or("<missing>")
                        .to_owned()
                };
                format!("{}@{}", field("schedule"), field("slot"))
            })
            .collect();
        Ok((ticks.len() as u64 == appended).then_some(ticks))
    })
    .await?;
    Ok(ticks.ok_or("the feed never showed every tick")?)
}

/// A schedule starts where a round first sees it, ticks each slot once, catches up or skips
/// missed slots as its contract says, and a clock that goes back ticks nothing again.
async fn a_schedule_ticks_each_slot_once_and_handles_missed_slots_as_declared<S: Conformance>(
    store: S,
) -> TestResult {
    use evc_runtime::DeliveryStatus;
    // Seen first at 01:30: both schedules start, no slot before is due.
    let first = store
        .tick_schedules(Some(clock("2026-12-06T01:30:00Z")?))
        .await?;
    assert!(first.leader, "{}: one process, so it leads", S::NAME);
    assert_eq!((first.ticks, first.skipped), (0, 0));
    // The 02:00 slot, at 02:00 sharp and again a moment later: one tick.
    for now in [
        "2026-12-06T02:00:00Z",
        "2026-12-06T02:00:00Z",
        "2026-12-06T02:59:59Z",
    ] {
        store.tick_schedules(Some(clock(now)?)).await?;
    }
    assert_eq!(
        ticks_in_feed(&store).await?,
        ["hourly@2026-12-06T02:00:00Z"]
    );
    // Five hours without a round (every dispatcher stopped, or the clock jumped ahead):
    // `hourly` catches up its three newest slots and skips two, `daily` ticks 03:00 once.
    let jump = store
        .tick_schedules(Some(clock("2026-12-06T07:10:00Z")?))
        .await?;
    assert_eq!((jump.ticks, jump.skipped), (4, 2), "{}", S::NAME);
    // The clock goes back two hours, then on to 08:00: only the 08:00 slot is new.
    let back = store
        .tick_schedules(Some(clock("2026-12-06T05:00:00Z")?))
        .await?;
    assert_eq!((back.ticks, back.skipped), (0, 0), "{}", S::NAME);
    store
        .tick_schedules(Some(clock("2026-12-06T08:00:00Z")?))
        .await?;
    assert_eq!(
        ticks_in_feed(&store).await?,
        [
            "hourly@2026-12-06T02:00:00Z",
            "daily@2026-12-06T03:00:00Z",
            "hourly@2026-12-06T05:00:00Z",
            "hourly@2026-12-06T06:00:00Z",
            "hourly@2026-12-06T07:00:00Z",
            "hourly@2026-12-06T08:00:00Z",
        ],
        "{}",
        S::NAME
    );
    // The ticks are events like any other: the hourly ones are delivered to their consumer.
    assert_eq!(
        store
            .count_deliveries(conformance::TICKS, &[DeliveryStatus::Pending])
            .await?,
        5
    );
    let states = store.schedule_states().await?;
    let summary: Vec<(String, i64, i64, Option<f64>)> = states
        .iter()
        .map(|s| (s.name.clone(), s.ticks, s.skipped, s.last_slot))
        .collect();
    let epoch = |text: &str| -> Result<Option<f64>, BoxError> {
        Ok(Some(
            chrono::DateTime::parse_from_rfc3339(text)?.timestamp() as f64,
        ))
    };
    assert_eq!(
        summary,
        [
            ("daily".to_owned(), 1, 0, epoch("2026-12-06T03:00:00Z")?),
            ("hourly".to_owned(), 5, 2, epoch("2026-12-06T08:00:00Z")?),
        ],
        "{}",
        S::NAME
    );
    assert_eq!(states[1].cron, "0 * * * *");
    assert_eq!(states[1].event, "cron.tick.hourly");
    Ok(())
}

/// Rounds that run at the same time append each due slot once between them: one takes the
/// store's scheduler lock, the others find it taken (PostgreSQL) or wait for the one writer and
/// then find the slots handled (SQLite).
async fn rounds_at_the_same_time_append_each_due_slot_once<S: Conformance>(store: S) -> TestResult {
    store
        .tick_schedules(Some(clock("2026-12-06T00:30:00Z")?))
        .await?;
    for hour in 1..=6 {
        let now = clock(&format!("2026-12-06T{hour:02}:00:00Z"))?;
        let rounds: Vec<_> = (0..4)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { store.tick_schedules(Some(now)).await })
            })
            .collect();
        let mut ticks = 0;
        for round in rounds {
            ticks += round.await??.ticks;
        }
        // `daily` has its 03:00 slot among these hours.
        let due = if hour == 3 { 2 } else { 1 };
        assert_eq!(ticks, due, "{}: hour {hour}", S::NAME);
    }
    assert_eq!(
        store
            .count_events(&["cron.tick.hourly", "cron.tick.daily"])
            .await?,
        7
    );
    Ok(())
}

/// The status report lists each started schedule with its next slot; one whose next slot is
/// long due (no dispatcher ran its scheduler) is a problem until a round ticks it.
async fn a_schedule_without_rounds_is_reported_overdue_until_one_ticks_it<S: Conformance>(
    store: S,
) -> TestResult {
    use evc_runtime::{Problem, SCHEDULE_GRACE};
    let report = store.status(Duration::from_secs(60)).await?;
    assert!(report.schedules.is_empty(), "{}: none started", S::NAME);
    // Started a year ago, and no round since.
    store
        .tick_schedules(Some(clock("2025-12-06T00:30:00Z")?))
        .await?;
    let report = store.status(Duration::from_secs(60)).await?;
    let next: Vec<(String, Option<String>)> = report
        .schedules
        .iter()
        .map(|s| (s.state.name.clone(), s.next_slot_text()))
        .collect();
    assert_eq!(
        next,
        [
            ("daily".to_owned(), Some("2025-12-06T03:00:00Z".to_owned())),
            ("hourly".to_owned(), Some("2025-12-06T01:00:00Z".to_owned())),
        ],
        "{}",
        S::NAME
    );
    let overdue: Vec<String> = report
        .problems(Duration::from_secs(30))
        .iter()
        .filter_map(|problem| match problem {
            Problem::ScheduleOverdue(schedule) => {
                assert!(schedule.overdue > SCHEDULE_GRACE, "{schedule:?}");
                Some(schedule.state.name.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(overdue, ["daily", "hourly"], "{}", S::NAME);
    // A round now ticks what the contract keeps of the year and leaves nothing overdue.
    let round = store.tick_schedules(None).await?;
    assert_eq!(round.ticks, 4, "{}: one daily, three hourly", S::NAME);
    let report = store.status(Duration::from_secs(60)).await?;
    assert!(
        report
            .problems(Duration::from_secs(30))
            .iter()
            .all(|problem| !matches!(problem, Problem::ScheduleOverdue(_))),
        "{}",
        S::NAME
    );
    assert!(report.schedules.iter().all(|s| s.overdue < SCHEDULE_GRACE));
    let metrics = report.prometheus();
    let value = |series: &str| metric(&metrics, series);
    assert_eq!(
        value("evc_schedule_ticks_total{schedule=\"hourly\"}"),
        Some(3.0),
        "{metrics}"
    );
    assert_eq!(
        value("evc_schedule_overdue_seconds{schedule=\"daily\"}"),
        Some(0.0),
        "{metrics}"
    );
    Ok(())
}

/// A pair's lag over its threshold opens one breach and appends one `event_lag.breach`, however
/// many rounds see it; the breach closes once nothing of the pair waits, and a later lag opens
/// a new one. A producer class without a threshold breaches nothing.
async fn a_lag_breach_appends_one_event_while_it_lasts<S: Conformance>(store: S) -> TestResult {
    use evc_runtime::{DeliveryStatus, LAG_BREACH};
    let quiet = store.watch_lag().await?;
    assert!(quiet.leader);
    assert_eq!(
        (quiet.opened, quiet.closed),
        (0, 0),
        "{}: nothing waits",
        S::NAME
    );
    committed(&store, vec![ping()]).await?;
    let receipts = committed(&store, vec![note(1)]).await?;
    // The threshold is a millisecond: let the note's delivery wait longer than that.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let rounds: Vec<_> = (0..3)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.watch_lag().await })
        })
        .collect();
    let mut opened = 0;
    for round in rounds {
        opened += round.await??.opened;
    }
    assert_eq!(opened, 1, "{}: one breach, however many rounds", S::NAME);
    assert_eq!(store.watch_lag().await?.opened, 0, "{}", S::NAME);
    assert_eq!(store.count_events(&[LAG_BREACH]).await?, 1);
    let breaches = store.lag_breaches(10).await?;
    assert_eq!(breaches.len(), 1);
    let breach = &breaches[0];
    assert_eq!(
        (
            breach.consumer.as_str(),
            breach.producer_class.as_str(),
            breach.threshold_ms
        ),
        (PLAIN, "notes", 1)
    );
    assert!(
        breach.lag_ms > 1 && breach.closed_at.is_none(),
        "{breach:?}"
    );
    assert_eq!(breach.oldest_event_id, Some(receipts[0].event_id));
    let report = store.status(Duration::from_secs(60)).await?;
    assert_eq!(report.lag_breaches, breaches);
    assert!(
        report.problems(Duration::from_secs(3600)).iter().any(
            |p| matches!(p, evc_runtime::Problem::LagThresholdBreached(b) if b.id == breach.id)
        ),
        "{}",
        S::NAME
    );
    // The breach is an event like any other, delivered to its consumer; never its payload's
    // source: the note is named by id only.
    assert_eq!(
        store
            .count_deliveries(conformance::ALERTS, &[DeliveryStatus::Pending])
            .await?,
        1
    );
    // The feed holds back events behind transactions still open on the server (PostgreSQL).
    let event = eventually(|| async {
        let feed = store.feed(FeedPosition::default(), 100).await?;
        Ok(feed.into_iter().find(|e| e.event_type == LAG_BREACH))
    })
    .await?
    .ok_or("the breach never reached the feed")?;
    assert_eq!(event.payload["breach_id"], breach.id);
    assert_eq!(event.payload["consumer_name"], PLAIN);
    assert_eq!(
        event.payload["oldest_event_id"],
        receipts[0].event_id.to_string()
    );
    assert_eq!(event.causation_id, Some(receipts[0].event_id.to_string()));

    // The note is handled: the breach closes, and no event says so.
    let claimed = claim(
        &store,
        PLAIN,
        "lag-owner",
        10,
        Duration::from_secs(30),
        false,
    )
    .await?;
    let leases: Vec<&evc_runtime::Lease> = claimed
        .iter()
        .map(|c| &c.lease)
        .filter(|lease| lease.event_id == receipts[0].event_id)
        .collect();
    assert_eq!(leases.len(), 1);
    let mut connection = store.pool().acquire().await?;
    store.ack(&mut connection, &leases).await?;
    drop(connection);
    let closing = store.watch_lag().await?;
    assert_eq!((closing.opened, closing.closed), (0, 1), "{}", S::NAME);
    assert!(store.lag_breaches(10).await?[0].closed_at.is_some());
    assert!(
        store
            .status(Duration::from_secs(60))
            .await?
            .lag_breaches
            .is_empty()
    );

    // A later lag is a new breach.
    committed(&store, vec![note(2)]).await?;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(store.watch_lag().await?.opened, 1, "{}", S::NAME);
    assert_eq!(store.count_events(&[LAG_BREACH]).await?, 2);
    let breaches = store.lag_breaches(10).await?;
    assert!(breaches[0].closed_at.is_none() && breaches[1].closed_at.is_some());
    Ok(())
}

/// A tick the checked append refuses does not move its schedule past the slot (it stays due,
/// and overdue once its grace passes), and the other schedules tick on in the same round.
async fn a_refused_tick_leaves_its_schedule_due_and_the_others_move_on<S: Conformance>(
    store: S,
) -> TestResult {
    store
        .tick_schedules(Some(clock("2026-12-05T23:30:00Z")?))
        .await?;
    let round = store
        .tick_schedules(Some(clock("2026-12-06T04:00:00Z")?))
        .await?;
    // `hourly` catches up its three newest slots; `daily`'s 03:00 tick is refused.
    assert_eq!(round.ticks, 3, "{}", S::NAME);
    assert_eq!(store.count_events(&["cron.tick.daily"]).await?, 0);
    assert_eq!(store.count_events(&["cron.tick.hourly"]).await?, 3);
    let states = store.schedule_states().await?;
    let daily = states
        .iter()
        .find(|s| s.name == "daily")
        .ok_or("daily started")?;
    assert_eq!((daily.last_slot, daily.ticks), (None, 0), "{}", S::NAME);
    // The refusal is audited like any other, without the payload (SQLite writes the audit
    // row once the round's transaction lets go of the one writer).
    let audited = &store;
    let rejects = eventually(|| async move {
        let rejects = audited.rejects(10).await?;
        Ok(rejects
            .iter()
            .any(|r| r.event_type == "cron.tick.daily")
            .then_some(rejects))
    })
    .await?;
    assert!(rejects.is_some(), "{}: no reject row", S::NAME);
    // Still due at the next round, and refused again: never skipped past.
    store
        .tick_schedules(Some(clock("2026-12-06T05:00:00Z")?))
        .await?;
    let states = store.schedule_states().await?;
    assert!(
        states
            .iter()
            .any(|s| s.name == "daily" && s.last_slot.is_none())
    );
    Ok(())
}

/// Appends note `key` and runs `k.shadow`'s handler on it in shadow mode (the transactional
/// kind's path), intending `intents`; returns the event's id.
async fn shadow_run<S: Conformance>(
    store: &S,
    key: u64,
    intents: &[(&str, &str)],
) -> Result<uuid::Uuid, BoxError> {
    let receipts = committed(store, vec![note(key)]).await?;
    let claimed = claim(store, SHADOW, "shadow-worker", 1, LEASE, false).await?;
    let lease = &claimed.first().ok_or("no shadow delivery claimed")?.lease;
    assert_eq!(lease.event_id, receipts[0].event_id);
    assert!(lease.is_shadow());
    let mut tx = store.begin().await?;
    store.lock_lease(&mut *tx, lease).await?;
    store.begin_shadow(&mut *tx).await?;
    for (key, digest) in intents {
        store.record_effect(&mut *tx, lease, key, digest).await?;
    }
    store.end_shadow(&mut *tx).await?;
    store.record_reconciliation(&mut *tx, lease).await?;
    Store::ack(store, &mut *tx, &[lease]).await?;
    tx.commit().await?;
    Ok(lease.event_id)
}

/// Records, in a transaction of its own, what the legacy path did for `event_id`.
async fn legacy<S: Conformance>(
    store: &S,
    event_id: uuid::Uuid,
    effects: &[(&str, &str)],
) -> Result<bool, BoxError> {
    let outcome: Vec<Intent> = effects.iter().map(|(k, d)| Intent::new(*k, *d)).collect();
    let mut tx = store.begin().await?;
    let recorded = store
        .record_legacy_outcome(&mut *tx, SHADOW, event_id, &outcome)
        .await?;
    tx.commit().await?;
    Ok(recorded)
}

/// Whether `result` is the gate's refusal; its report.
fn refused(result: Result<evc_runtime::ConsumerState, DispatchError>) -> Option<CutoverReport> {
    match result {
        Err(DispatchError::CutoverRefused(report)) => Some(*report),
        _ => None,
    }
}

/// `k.shadow` may go live only once two deliveries, compared with the legacy path's outcome
/// and spanning a second, show no unexplained difference; a refused move writes nothing. A
/// rollback to shadow starts a new window: going live again needs new evidence.
async fn the_cutover_gate_holds_live_until_shadow_runs_match_the_legacy_path<S: Conformance>(
    store: S,
) -> TestResult {
    let operator = |reason: &str| StateChange::new("ops@example.com", reason);
    let live = |store: &S| {
        let store = store.clone();
        async move {
            store
                .set_mode(SHADOW, ConsumerMode::Live, &operator("cut over"))
                .await
        }
    };

    // No evidence: refused, and the consumer's state is untouched.
    let report = refused(live(&store).await).ok_or("went live without evidence")?;
    assert_eq!((report.shadow_runs, report.reconciled), (0, 0));
    assert_eq!(report.shortfalls.len(), 2, "{:?}", report.shortfalls);
    assert_eq!(store.consumer_state(SHADOW).await?.revision, 0);
    assert!(store.state_changes(SHADOW, 10).await?.is_empty());

    // One matching run (the normaliser ignores the digest's case), one without a legacy
    // outcome yet.
    let first = shadow_run(&store, 1, &[("send:1", "AA")]).await?;
    assert!(legacy(&store, first, &[("send:1", "aa")]).await?);
    let waiting = shadow_run(&store, 2, &[("send:2", "bb")]).await?;
    let report = store.cutover_report(SHADOW).await?;
    assert_eq!(
        (report.shadow_runs, report.reconciled, report.matched),
        (3 - 1, 1, 1),
        "{}",
        S::NAME
    );
    assert!(
        report.shortfalls[0].contains("wait for the legacy path"),
        "{:?}",
        report.shortfalls
    );
    // The status report shows the progress, in counts every reading role may see.
    let status = store.status(Duration::from_secs(60)).await?;
    let progress: Vec<_> = status
        .cutover_gates
        .iter()
        .map(|g| {
            (
                g.consumer.as_str(),
                g.shadow_runs,
                g.compared,
                g.gate.min_reconciled,
            )
        })
        .collect();
    assert_eq!(progress, [(SHADOW, 2, 1, 2)], "{}", S::NAME);
    let metrics = status.prometheus();
    let value = |series: &str| metric(&metrics, series);
    assert_eq!(
        value("evc_cutover_compared_deliveries{consumer=\"k.shadow\"}"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        value("evc_cutover_required_deliveries{consumer=\"k.shadow\"}"),
        Some(2.0),
        "{metrics}"
    );
    assert!(refused(live(&store).await).is_some());

    // A second compared run, a second later, that differs: the count and span are met, the
    // difference is not explained.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let differing = shadow_run(&store, 3, &[("send:3", "cc"), ("audit:3", "dd")]).await?;
    assert!(legacy(&store, differing, &[("send:3", "c0")]).await?);
    let report = refused(live(&store).await).ok_or("went live with a difference")?;
    assert_eq!(
        (report.reconciled, report.matched, report.unexplained),
        (2, 1, 1)
    );
    assert!(report.span_seconds >= 1.0, "{}", report.span_seconds);
    assert_eq!(report.shortfalls.len(), 1, "{:?}", report.shortfalls);
    let difference = &report.differences[0];
    assert_eq!(difference.event_id, differing);
    assert_eq!(difference.differing, ["send:3"]);
    assert_eq!(difference.missing_in_legacy, ["audit:3"]);
    assert_eq!(store.consumer_state(SHADOW).await?.revision, 0);

    // Only a difference can be explained.
    for nothing in [first, waiting] {
        let result = store
            .explain_difference(SHADOW, nothing, &operator("nothing to explain"))
            .await;
        assert!(
            matches!(result, Err(DispatchError::InvalidChange(_))),
            "{result:?}"
        );
    }
    let report = store
        .explain_difference(
            SHADOW,
            differing,
            &operator("the audit write is new, by design"),
        )
        .await?;
    assert_eq!((report.explained, report.unexplained), (1, 0));
    assert!(report.passed(), "{:?}", report.shortfalls);
    let again = store
        .explain_difference(SHADOW, differing, &operator("once more"))
        .await;
    assert!(
        matches!(again, Err(DispatchError::InvalidChange(_))),
        "{again:?}"
    );

    let state = live(&store).await?;
    assert_eq!((state.mode, state.revision), (ConsumerMode::Live, 1));

    // The rollback drill: back to shadow is never gated; live again needs new evidence.
    let state = store
        .set_mode(SHADOW, ConsumerMode::Shadow, &operator("roll back"))
        .await?;
    assert_eq!((state.mode, state.revision), (ConsumerMode::Shadow, 2));
    let report = refused(live(&store).await).ok_or("the old window still counted")?;
    assert!(report.since.is_some());
    assert_eq!(report.shadow_runs, 0, "{}", S::NAME);
    // A detour through `off` does not skip the gate.
    store
        .set_mode(SHADOW, ConsumerMode::Off, &operator("stop it"))
        .await?;
    assert!(
        refused(live(&store).await).is_some(),
        "off skipped the gate"
    );
    store
        .set_mode(SHADOW, ConsumerMode::Shadow, &operator("shadow again"))
        .await?;
    for key in [4, 5] {
        let intents = [("send", "ee")];
        let event = shadow_run(&store, key, &intents).await?;
        assert!(legacy(&store, event, &intents).await?);
        if key == 4 {
            tokio::time::sleep(Duration::from_millis(1_100)).await;
        }
    }
    let state = live(&store).await?;
    assert_eq!((state.mode, state.revision), (ConsumerMode::Live, 5));
    let changes = store.state_changes(SHADOW, 10).await?;
    let modes: Vec<_> = changes.iter().filter_map(|c| c.mode).collect();
    use ConsumerMode::{Live, Off, Shadow};
    assert_eq!(modes, [Live, Shadow, Off, Shadow, Live]);
    // Live already: setting it again is not gated; nor is a live consumer's way back from
    // `off`.
    assert_eq!(live(&store).await?.revision, 6);
    store
        .set_mode(SHADOW, ConsumerMode::Off, &operator("pause the mails"))
        .await?;
    assert_eq!(live(&store).await?.revision, 8);
    Ok(())
}

/// A legacy outcome is kept once per consumer and event, only for an event the consumer
/// receives, and only when it can be recorded as it is; a refusal writes nothing.
async fn legacy_outcomes_are_checked_and_kept_once<S: Conformance>(store: S) -> TestResult {
    let receipts = committed(&store, vec![note(1)]).await?;
    let event = receipts[0].event_id;
    assert!(legacy(&store, event, &[("k", "01")]).await?);
    assert!(!legacy(&store, event, &[("k", "02")]).await?, "{}", S::NAME);

    let mut tx = store.begin().await?;
    let ping = store
        .append(
            &mut *tx,
            support::event("test.ping", "1.0.0", serde_json::json!({})),
            AppendOptions::default(),
        )
        .await?;
    tx.commit().await?;
    let outcome = [Intent::new("k", "01")];
    for (consumer, event_id) in [(SHADOW, ping.event_id), (SHADOW, uuid::Uuid::now_v7())] {
        let mut tx = store.begin().await?;
        let result = store
            .record_legacy_outcome(&mut *tx, consumer, event_id, &outcome)
            .await;
        assert!(
            matches!(result, Err(DispatchError::NotDelivered { .. })),
            "{result:?}"
        );
    }
    let mut tx = store.begin().await?;
    let result = store
        .record_legacy_outcome(&mut *tx, "k.nobody", event, &outcome)
        .await;
    assert!(matches!(result, Err(DispatchError::UnknownConsumer(_))));
    let result = store
        .record_legacy_outcome(&mut *tx, SHADOW, event, &[Intent::new(" ", "01")])
        .await;
    assert!(matches!(result, Err(DispatchError::InvalidOutcome(_))));
    drop(tx);

    // The outcome kept is the first: a shadow run intending it matches.
    let report = store.cutover_report(SHADOW).await?;
    assert_eq!(report.shadow_runs, 0);
    let claimed = claim(&store, SHADOW, "w", 1, LEASE, false).await?;
    let lease = &claimed[0].lease;
    let mut tx = store.begin().await?;
    store.lock_lease(&mut *tx, lease).await?;
    store.begin_shadow(&mut *tx).await?;
    store.record_effect(&mut *tx, lease, "k", "01").await?;
    store.end_shadow(&mut *tx).await?;
    store.record_reconciliation(&mut *tx, lease).await?;
    Store::ack(&store, &mut *tx, &[lease]).await?;
    tx.commit().await?;
    let report = store.cutover_report(SHADOW).await?;
    assert_eq!((report.reconciled, report.matched), (1, 1), "{}", S::NAME);
    Ok(())
}

/// Claims `consumer`'s next delivery, records effect `key` for it and acks it, in one
/// transaction.
async fn settle_with_effect<S: Conformance>(
    store: &S,
    consumer: &str,
    key: &str,
) -> Result<uuid::Uuid, BoxError> {
    let claimed = claim(store, consumer, "retention-worker", 1, LEASE, false).await?;
    let lease = &claimed.first().ok_or("nothing to claim")?.lease;
    let mut tx = store.begin().await?;
    store.lock_lease(&mut *tx, lease).await?;
    if lease.is_shadow() {
        store.begin_shadow(&mut *tx).await?;
        store.record_effect(&mut *tx, lease, key, "d").await?;
        store.end_shadow(&mut *tx).await?;
        store.record_reconciliation(&mut *tx, lease).await?;
    } else {
        store.record_effect(&mut *tx, lease, key, "d").await?;
    }
    Store::ack(store, &mut *tx, &[lease]).await?;
    tx.commit().await?;
    Ok(lease.event_id)
}

/// What a purge as of `ahead` from now removes (`apply`) or would remove.
async fn purge_ahead<S: Conformance>(
    store: &S,
    ahead: Duration,
    apply: bool,
) -> Result<evc_runtime::RetentionPurge, BoxError> {
    let as_of = std::time::SystemTime::now() + ahead;
    Ok(store
        .purge_expired(as_of, "retention test", "ops@example.com", apply)
        .await?)
}

/// Every row of `k.plain`, `k.ordered` and `k.shadow` counted by outcome, and every event.
async fn ledger_rows<S: Conformance>(store: &S) -> Result<(u64, u64), BoxError> {
    let mut attempts = 0;
    for consumer in [PLAIN, ORDERED, SHADOW] {
        for outcome in ["acked", "retry"] {
            attempts += store.count_attempts(consumer, outcome).await?;
        }
    }
    Ok((attempts, store.count_events(&[]).await?))
}

/// Retention per table, on both stores: attempts, shadow runs and rejects past their hour go
/// while their events stay; a settled `test.note` past its day goes with what hangs on it,
/// while one with a delivery still open stays with its attempts, and `test.ping` (no period)
/// stays; idempotency records go only once their event is gone and their horizon passed. A
/// dry run counts exactly what the purge then removes, and removes nothing.
async fn a_purge_removes_what_retention_expires_and_keeps_open_deliveries<S: Conformance>(
    store: S,
) -> TestResult {
    // `settled`: every delivery acked, with an effect per consumer (and a shadow run).
    let settled = committed(&store, vec![note(1)]).await?[0].event_id;
    for (consumer, key) in [(ORDERED, "o:1"), (PLAIN, "p:1"), (SHADOW, "s:1")] {
        assert_eq!(settle_with_effect(&store, consumer, key).await?, settled);
    }
    // `open`: acked by two consumers, failed once by `k.plain` and waiting for its retry.
    let open = committed(&store, vec![note(2)]).await?[0].event_id;
    assert_eq!(settle_with_effect(&store, ORDERED, "o:2").await?, open);
    assert_eq!(settle_with_effect(&store, SHADOW, "s:2").await?, open);
    let claimed = claim(&store, PLAIN, "retention-worker", 1, LEASE, false).await?;
    let retrying = &claimed.first().ok_or("no k.plain delivery")?.lease;
    assert_eq!(retrying.event_id, open);
    store
        .fail(
            retrying,
            FailureClass::Transient,
            "E_LATER",
            RetryDecision::Retry(Duration::from_secs(3_600)),
        )
        .await?;
    // A ping, acked: its type keeps its events.
    let pinged = committed(&store, vec![ping()]).await?[0].event_id;
    assert_eq!(settle_with_effect(&store, PLAIN, "p:ping").await?, pinged);
    // A reject.
    let mut tx = store.begin().await?;
    let refused = store
        .append(&mut *tx, forbidden_note(3), AppendOptions::default())
        .await;
    assert!(refused.is_err());
    tx.rollback().await?;
    let reject =
        eventually(|| async { Ok((store.rejects(10).await?.len() == 1).then_some(())) }).await?;
    assert!(reject.is_some(), "{}: no reject row", S::NAME);
    let (attempts, events) = ledger_rows(&store).await?;
    assert_eq!((attempts, events), (7, 3), "{}", S::NAME);

    // Now: nothing is an hour old.
    let nothing = purge_ahead(&store, Duration::ZERO, true).await?;
    assert_eq!(nothing.total(), 0, "{}: {nothing:?}", S::NAME);

    // Two hours on: the attempts of settled deliveries, the shadow runs and the reject are
    // past their hour; the failed attempt of the open delivery stays, and so does every event.
    let two_hours = Duration::from_secs(2 * 3_600);
    let dry = purge_ahead(&store, two_hours, false).await?;
    assert_eq!(dry.purge_id, None);
    assert_eq!(
        (
            dry.events,
            dry.attempts,
            dry.reconciliations,
            dry.rejects,
            dry.effects
        ),
        (0, 6, 2, 1, 0),
        "{}: {dry:?}",
        S::NAME
    );
    assert_eq!(
        ledger_rows(&store).await?,
        (7, 3),
        "{}: the dry run removed rows",
        S::NAME
    );
    let applied = purge_ahead(&store, two_hours, true).await?;
    assert!(applied.purge_id.is_some());
    let mut counted = applied;
    counted.purge_id = None;
    assert_eq!(counted, dry, "{}: the dry run counted other rows", S::NAME);
    assert_eq!(ledger_rows(&store).await?, (1, 3), "{}", S::NAME);
    assert_eq!(store.attempts(open, PLAIN).await?.len(), 1, "{}", S::NAME);
    assert!(store.rejects(10).await?.is_empty());
    assert!(store.reconciliations(settled, SHADOW).await?.is_empty());

    // Three days on: the settled note is past its day and goes with `k.ordered`'s
    // idempotency record (two days past, its event gone), but not `k.plain`'s, whose consumer
    // also receives pings, kept forever. (A shadow run records intents, not effects.) The
    // open note stays with its attempt and every record, though past their horizon; the ping
    // stays.
    let three_days = Duration::from_secs(3 * 86_400);
    let applied = purge_ahead(&store, three_days, true).await?;
    assert_eq!(
        (applied.events, applied.attempts, applied.effects),
        (1, 0, 1),
        "{}: {applied:?}",
        S::NAME
    );
    assert!(store.event(settled).await?.is_none(), "{}", S::NAME);
    assert!(store.event(open).await?.is_some(), "{}", S::NAME);
    assert!(store.event(pinged).await?.is_some(), "{}", S::NAME);
    assert_eq!(store.attempts(open, PLAIN).await?.len(), 1, "{}", S::NAME);
    let pending = store
        .delivery(open, PLAIN)
        .await?
        .ok_or("the open delivery went")?;
    assert_eq!(pending.status, DeliveryStatus::Pending);
    for (consumer, key, kept) in [
        (ORDERED, "o:1", false),
        (PLAIN, "p:1", true),
        (ORDERED, "o:2", true),
        (PLAIN, "p:ping", true),
    ] {
        assert_eq!(
            store.effect(consumer, key, None).await?.is_some(),
            kept,
            "{}: the effect {key} of {consumer}",
            S::NAME
        );
    }
    // The status report and the audit list name the newest purge.
    let status = store.status(Duration::from_secs(60)).await?;
    assert_eq!(status.last_purges.len(), 1, "{}", S::NAME);
    let last = &status.last_purges[0];
    assert_eq!(Some(last.purge_id), applied.purge_id, "{}", S::NAME);
    assert_eq!(
        (last.ledger.as_str(), last.actor.as_str(), last.total()),
        ("retention", "ops@example.com", applied.total())
    );
    let metrics = status.prometheus();
    assert_eq!(
        metric(
            &metrics,
            "evc_retention_last_purge_rows{ledger=\"retention\"}"
        ),
        Some(applied.total() as f64),
        "{metrics}"
    );
    let purges = store.purges(10).await?;
    assert_eq!(purges.len(), 3, "{}", S::NAME);
    assert_eq!(purges[0].purge_id, last.purge_id);
    assert!(purges[0].purge_id > purges[1].purge_id);

    // Purged once: a second purge finds nothing.
    assert_eq!(purge_ahead(&store, three_days, true).await?.total(), 0);
    Ok(())
}

/// A purge names why and who, before anything is read (a tenant's refusal: `schema/tenants.rs`,
/// `store_conformance/sqlite_tenants.rs`).
async fn a_purge_needs_a_reason_and_an_actor<S: Conformance>(store: S) -> TestResult {
    committed(&store, vec![note(1)]).await?;
    let now = std::time::SystemTime::now() + Duration::from_secs(86_400 * 30);
    let blank = store.purge_expired(now, " ", "ops", true).await;
    assert!(matches!(blank, Err(evc_runtime::PurgeError::ReasonMissing)));
    let nobody = store.purge_expired(now, "retention", "", true).await;
    assert!(matches!(nobody, Err(evc_runtime::PurgeError::ActorMissing)));
    assert_eq!(store.count_events(&[]).await?, 1, "{}", S::NAME);
    Ok(())
}

/// A `test.note` of key `key` (`Some`) or a `test.ping` (`None`), in trace `trace`.
fn in_trace(trace: &str, key: Option<u64>) -> Result<OutgoingEvent, BoxError> {
    let context = evc_runtime::TraceContext::new(trace, "00f067aa0ba902b7", 1)?;
    Ok(match key {
        Some(key) => {
            let payload = support::note(&support::note_key(key));
            let order_key = Some(evc_runtime::order_key_part(&payload["note_id"]));
            OutgoingEvent::new("test.note", "1.0.0", order_key, &context, &payload)?
        }
        None => OutgoingEvent::new("test.ping", "1.0.0", None, &context, &serde_json::json!({}))?,
    })
}

/// The four signals of usage evidence, on both stores: a note and a ping appended in each of
/// two traces (a third holds a note alone), `k.plain` dead-lettering two notes and
/// `k.ordered` one, in one slot.
async fn usage_evidence_reads_the_ledger_alone<S: Conformance>(store: S) -> TestResult {
    let [t1, t2, t3] = [
        "0af7651916cd43dd8448eb211c80319c",
        "1af7651916cd43dd8448eb211c80319c",
        "2af7651916cd43dd8448eb211c80319c",
    ];
    committed(
        &store,
        vec![
            in_trace(t1, Some(1))?,
            in_trace(t1, None)?,
            in_trace(t2, Some(2))?,
            in_trace(t2, None)?,
            in_trace(t3, Some(3))?,
        ],
    )
    .await?;
    let dead = |lease: Lease| {
        let store = store.clone();
        async move {
            store
                .fail(
                    &lease,
                    FailureClass::Permanent,
                    "E_BAD",
                    RetryDecision::Dead,
                )
                .await
        }
    };
    let plain = claim(&store, PLAIN, "evidence", 10, LEASE, false).await?;
    assert_eq!(plain.len(), 5, "{}", S::NAME);
    let mut notes_failed = 0;
    for claimed in plain {
        if claimed.delivery.event_type == "test.note" && notes_failed < 2 {
            notes_failed += 1;
            dead(claimed.lease).await?;
        } else {
            ack(&store, &claimed.lease).await?;
        }
    }
    let ordered = claim(&store, ORDERED, "evidence", 1, LEASE, true).await?;
    dead(ordered[0].lease.clone()).await?;

    // One slot of ten years holds every failure; at least twice.
    let year = Duration::from_secs(365 * 86_400);
    let query =
        evc_runtime::EvidenceQuery::over(Duration::from_secs(86_400)).correlation(10 * year);
    let report = store.evidence(&query).await?;
    let co: Vec<_> = report
        .co_triggered
        .iter()
        .map(|c| (c.first.as_str(), c.second.as_str(), c.traces))
        .collect();
    assert_eq!(co, [("test.note", "test.ping", 2)], "{}", S::NAME);
    assert!(
        report.failing_together.is_empty(),
        "{}: {report:?}",
        S::NAME
    );
    let chronic: Vec<_> = report
        .chronic
        .iter()
        .map(|c| {
            (
                c.producer_class.as_str(),
                c.consumer.as_str(),
                c.dead_letters,
                c.lag_breaches,
            )
        })
        .collect();
    assert_eq!(chronic, [("notes", PLAIN, 2, 0)], "{}", S::NAME);
    let kinds: Vec<_> = report
        .escalations
        .iter()
        .map(|e| (e.step_kind.as_str(), e.escalations))
        .collect();
    assert_eq!(kinds, [("unclassified", 3)], "{}", S::NAME);

    // Once is enough: the two consumers failed together in one slot, and `k.ordered`'s one
    // dead letter is listed too.
    let report = store.evidence(&query.min_count(1)).await?;
    let together: Vec<_> = report
        .failing_together
        .iter()
        .map(|f| (f.first.as_str(), f.second.as_str(), f.slots))
        .collect();
    assert_eq!(together, [(ORDERED, PLAIN, 1)], "{}", S::NAME);
    assert_eq!(report.chronic.len(), 2, "{}: {report:?}", S::NAME);

    // A window that ends before all of it reads nothing.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let report = store
        .evidence(&evc_runtime::EvidenceQuery::over(Duration::from_millis(10)).min_count(1))
        .await?;
    assert!(
        report.co_triggered.is_empty()
            && report.failing_together.is_empty()
            && report.chronic.is_empty()
            && report.escalations.is_empty(),
        "{}: {report:?}",
        S::NAME
    );

    // A registry without `evidence` records none.
    let round = store.record_evidence().await?;
    assert!(!round.leader && round.recorded.is_none(), "{}", S::NAME);
    assert!(
        store.evidence_snapshots(10).await?.is_empty(),
        "{}",
        S::NAME
    );
    Ok(())
}

/// Recorded evidence, on both stores: concurrent rounds record each slot (a second) once,
/// with the report the ledger gives; rounds go on recording later slots and remove those older than the three seconds kept.
async fn recorded_evidence_keeps_one_snapshot_per_slot_for_its_period<S: Conformance>(
    store: S,
) -> TestResult {
    let name = S::NAME;
    let trace = "3af7651916cd43dd8448eb211c80319c";
    committed(
        &store,
        vec![in_trace(trace, Some(1))?, in_trace(trace, None)?],
    )
    .await?;
    assert!(store.evidence_snapshots(10).await?.is_empty(), "{name}");

    let rounds = futures_util::future::try_join_all((0..4).map(|_| {
        let store = store.clone();
        async move { store.record_evidence().await }
    }))
    .await?;
    let recorded: Vec<f64> = rounds.iter().filter_map(|round| round.recorded).collect();
    assert!(
        !recorded.is_empty(),
        "{name}: no round recorded: {rounds:?}"
    );
    let snapshots = store.evidence_snapshots(10).await?;
    // However the rounds fell across slots, each recorded slot is listed once.
    let mut slots: Vec<f64> = snapshots.iter().map(|s| s.slot).collect();
    slots.sort_by(f64::total_cmp);
    let mut expected = recorded.clone();
    expected.sort_by(f64::total_cmp);
    assert_eq!(slots, expected, "{name}: {rounds:?}");
    slots.dedup();
    assert_eq!(
        slots.len(),
        snapshots.len(),
        "{name}: a slot recorded twice"
    );
    for snapshot in &snapshots {
        assert_eq!(
            snapshot.slot.fract() * 1000.0,
            0.0,
            "{name}: a second's slot"
        );
        assert!(
            snapshot.recorded_at >= snapshot.slot,
            "{name}: {snapshot:?}"
        );
        let report = &snapshot.report;
        assert_eq!(report.window_s, 86_400.0, "{name}");
        assert_eq!(report.correlation_s, 60.0, "{name}");
        assert_eq!(report.min_count, 1, "{name}");
        let co: Vec<_> = report
            .co_triggered
            .iter()
            .map(|c| (c.first.as_str(), c.second.as_str(), c.traces))
            .collect();
        assert_eq!(co, [("test.note", "test.ping", 1)], "{name}: {report:?}");
    }

    // Later rounds record later slots and remove what is older than three seconds: wait
    // until a round removed the first one.
    let first = slots[0];
    let removed = eventually(|| {
        let store = store.clone();
        async move {
            let round = store.record_evidence().await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok((round.removed > 0).then_some(round))
        }
    })
    .await?
    .ok_or("no round removed an old snapshot")?;
    assert!(removed.leader, "{name}");
    let kept = store.evidence_snapshots(1_000).await?;
    let newest = kept.first().ok_or("no snapshot left")?.slot;
    assert!(kept.iter().all(|s| s.slot > first), "{name}: {kept:?}");
    assert!(
        kept.iter().all(|s| s.slot >= newest - 3.0),
        "{name}: a snapshot older than kept: {kept:?}"
    );
    assert!(
        kept.windows(2).all(|pair| pair[0].slot > pair[1].slot),
        "{name}: newest first"
    );
    assert_eq!(store.evidence_snapshots(1).await?.len(), 1, "{name}");

    // A running dispatcher records the slots that come, with no round placed by hand.
    let running = evc_runtime::Dispatcher::new(
        store.clone(),
        evc_runtime::DispatcherConfig::default()
            .owner("recorder")
            .schedule_interval(None)
            .lag_watch_interval(None)
            .evidence_interval(Some(Duration::from_millis(50))),
    )
    .start();
    let later = eventually(|| {
        let store = store.clone();
        async move {
            let snapshots = store.evidence_snapshots(1).await?;
            Ok(snapshots.into_iter().find(|s| s.slot > newest))
        }
    })
    .await?;
    running.shutdown().await;
    assert!(
        later.is_some(),
        "{name}: the dispatcher recorded no later slot"
    );
    Ok(())
}

/// The SHA-256 of `payload`'s canonical JSON, as an inventory reports it.
fn payload_digest(payload: &serde_json::Value) -> String {
    evc_runtime::sha256_hex(evc_runtime::canonical_json(payload).as_bytes())
}

/// The inventory of `k.off` (off, subscribed to `test.note@^2` alone, rules: an hour,
/// conform): a 1.0.0 note conformed to 2.0.0 (its undeclared `count` and `meta` dropped, the
/// `channel` default filled) is a repair, one whose text 2.0.0 refuses is quarantined, a
/// 2.0.0 note is safe, a ping it does not receive is not listed; an hour later everything
/// expires. Nothing is written, the digest follows what is found, and the limit truncates.
async fn an_inventory_classifies_the_events_a_consumer_never_received<S: Conformance>(
    store: S,
) -> TestResult {
    use evc_runtime::{InventoryClass, InventoryReason};
    let name = S::NAME;
    let [a, b, c, d] = [1, 2, 3, 4].map(support::note_key);
    let with_meta = serde_json::json!({"note_id": b, "count": 2, "meta": {"k": "v"}});
    let too_long = serde_json::json!({"note_id": c, "text": "a note far too long for 2.0.0"});
    let v2 = serde_json::json!({"note_id": d, "channel": "sms"});
    let receipts = committed(
        &store,
        vec![
            note(1),
            support::event("test.note", "1.0.0", with_meta.clone()),
            ping(),
            support::event("test.note", "1.0.0", too_long.clone()),
            support::event("test.note", "2.0.0", v2.clone()),
        ],
    )
    .await?;
    let now = std::time::SystemTime::now();
    let report = store.inventory(OFF, now, 100).await?;
    assert_eq!(report.consumer, OFF);
    assert_eq!(
        (report.max_age_ms, report.repair),
        (Some(3_600_000), "conform")
    );
    assert!(!report.truncated, "{name}");
    let found: Vec<_> = report
        .items
        .iter()
        .map(|i| (i.event_id, i.class, i.reason, i.target_version.as_deref()))
        .collect();
    let not_accepted = Some(InventoryReason::VersionNotAccepted);
    assert_eq!(
        found,
        [
            (
                receipts[0].event_id,
                InventoryClass::Repair,
                not_accepted,
                Some("2.0.0")
            ),
            (
                receipts[1].event_id,
                InventoryClass::Repair,
                not_accepted,
                Some("2.0.0")
            ),
            (
                receipts[3].event_id,
                InventoryClass::Quarantine,
                not_accepted,
                None
            ),
            (
                receipts[4].event_id,
                InventoryClass::Safe,
                None,
                Some("2.0.0")
            ),
        ],
        "{name}"
    );
    let counts = report.counts;
    assert_eq!(
        (counts.safe, counts.repair, counts.quarantine, counts.expire),
        (1, 2, 1, 0),
        "{name}"
    );
    // The stored payloads' digests, and the repairs' conformed payloads'.
    let first = support::note(&a);
    assert_eq!(
        report.items[0].payload_digest,
        payload_digest(&first),
        "{name}"
    );
    assert_eq!(
        report.items[0].repaired_digest,
        Some(payload_digest(
            &serde_json::json!({"note_id": a, "text": "a note", "channel": "email"})
        )),
        "{name}"
    );
    assert_eq!(
        report.items[1].repaired_digest,
        Some(payload_digest(
            &serde_json::json!({"note_id": b, "channel": "email"})
        )),
        "{name}"
    );
    assert_eq!(report.items[2].payload_digest, payload_digest(&too_long));
    assert_eq!(report.items[2].repaired_digest, None);
    assert_eq!(report.items[3].payload_digest, payload_digest(&v2));
    assert_eq!(report.items[3].repaired_digest, None);

    // A dry run: the same inventory again, the same digest; no delivery was written.
    assert_eq!(store.inventory(OFF, now, 100).await?.digest, report.digest);
    for receipt in &receipts {
        assert!(
            store.delivery(receipt.event_id, OFF).await?.is_none(),
            "{name}"
        );
    }

    // Past the rules' hour, every event expires.
    let later = now + Duration::from_secs(2 * 3_600);
    let expired = store.inventory(OFF, later, 100).await?;
    assert!(
        expired
            .items
            .iter()
            .all(|i| i.class == InventoryClass::Expire
                && i.reason == Some(InventoryReason::TooOld)
                && i.target_version.is_none()),
        "{name}: {expired:?}"
    );
    assert_eq!(expired.counts.expire, 4);
    assert_ne!(expired.digest, report.digest);

    // The limit keeps the oldest and says more wait.
    let first_two = store.inventory(OFF, now, 2).await?;
    assert!(first_two.truncated, "{name}");
    assert_eq!(first_two.items, report.items[..2], "{name}");

    // A new event changes what the inventory finds, and so its digest.
    committed(&store, vec![note(5)]).await?;
    let grown = store.inventory(OFF, now, 100).await?;
    assert_eq!(grown.items.len(), 5, "{name}");
    assert_ne!(grown.digest, report.digest, "{name}");

    // A live consumer received every event of a version it accepts, whether its delivery
    // still waits or was acked (the ack deletes the delivery and keeps its attempt); the 2.0.0
    // note, which its `^1` refuses and its rules (the defaults) do not repair, is quarantined.
    // An unknown consumer is refused.
    let claimed = claim(&store, PLAIN, "w1", 10, LEASE, false).await?;
    assert!(!claimed.is_empty(), "{name}");
    for claimed in &claimed {
        ack(&store, &claimed.lease).await?;
    }
    let plain = store.inventory(PLAIN, now, 100).await?;
    let listed: Vec<_> = plain.items.iter().map(|i| (i.event_id, i.class)).collect();
    assert_eq!(
        listed,
        [(receipts[4].event_id, InventoryClass::Quarantine)],
        "{name}"
    );
    assert_eq!((plain.max_age_ms, plain.repair), (None, "none"));
    let unknown = store.inventory("k.nobody", now, 100).await;
    assert!(
        matches!(unknown, Err(DispatchError::UnknownConsumer(_))),
        "{name}: {unknown:?}"
    );
    Ok(())
}

/// Once a retention purge may have removed acked deliveries' attempts (attempts are kept an
/// hour in [`conformance::RETAINED_REGISTRY`]), the ledger no longer tells whether `k.off`
/// received an event older than that: the inventory quarantines it as `receipt_unknown`
/// rather than offering it as safe.
async fn an_inventory_cannot_vouch_for_what_a_purge_may_have_removed<S: Conformance>(
    store: S,
) -> TestResult {
    use evc_runtime::{InventoryClass, InventoryReason};
    let name = S::NAME;
    committed(&store, vec![note(1), note(2)]).await?;
    let now = std::time::SystemTime::now();
    let before = store.inventory(OFF, now, 10).await?;
    assert_eq!(before.counts.safe, 2, "{name}: {before:?}");
    // The purge counts back from three hours ahead: attempts finished before two hours ahead
    // may be gone, and both events are older than that.
    let ahead = now + Duration::from_secs(3 * 3_600);
    store
        .purge_expired(ahead, "inventory test", "ops", true)
        .await?;
    let after = store.inventory(OFF, now, 10).await?;
    assert!(
        after
            .items
            .iter()
            .all(|i| i.class == InventoryClass::Quarantine
                && i.reason == Some(InventoryReason::ReceiptUnknown)),
        "{name}: {after:?}"
    );
    assert_eq!(after.items.len(), 2, "{name}");
    Ok(())
}

/// The two-person apply of `k.off`'s inventory: refused to its planner, for another digest
/// and (later) while the consumer is live; applied, it gives the safe and the two repaired
/// notes a pending delivery and the quarantined one a quarantined delivery (listed with the
/// dead letters), records every decision, answers a repeated key with its first result, and a
/// claim hands the repaired notes over conformed to 2.0.0. Nothing is left to inventory.
async fn an_applied_inventory_delivers_the_safe_and_the_repaired_once<S: Conformance>(
    store: S,
) -> TestResult {
    let name = S::NAME;
    let [a, b, c, d] = [1, 2, 3, 4].map(support::note_key);
    let receipts = committed(
        &store,
        vec![
            note(1),
            support::event(
                "test.note",
                "1.0.0",
                serde_json::json!({"note_id": b, "count": 2, "meta": {"k": "v"}}),
            ),
            support::event(
                "test.note",
                "1.0.0",
                serde_json::json!({"note_id": c, "text": "a note far too long for 2.0.0"}),
            ),
            support::event(
                "test.note",
                "2.0.0",
                serde_json::json!({"note_id": d, "channel": "sms"}),
            ),
        ],
    )
    .await?;
    let proposed = store.propose_inventory(OFF, 100, "alice").await?;
    let digest = proposed.plan.digest.clone();
    let approval = |by: &str, key: &str| {
        ReplayApproval::new(&digest, "backfill before going live", "CHG-7", key, by)
    };

    // The planner may not approve; another digest is not the plan.
    let own = store
        .apply_inventory(OFF, 100, &approval("alice", "k1"))
        .await;
    assert!(
        matches!(own, Err(ReplayError::SamePerson { .. })),
        "{name}: {own:?}"
    );
    let other = ReplayApproval::new("0".repeat(64), "why", "CHG-7", "k1", "bob");
    let wrong = store.apply_inventory(OFF, 100, &other).await;
    assert!(
        matches!(wrong, Err(ReplayError::DigestMismatch { .. })),
        "{name}: {wrong:?}"
    );
    assert!(store.delivery(receipts[0].event_id, OFF).await?.is_none());

    let applied = store
        .apply_inventory(OFF, 100, &approval("bob", "k1"))
        .await?;
    assert!(!applied.repeated);
    assert_eq!((applied.delivered, applied.quarantined), (3, 1), "{name}");
    let counts = applied.counts;
    assert_eq!(
        (counts.safe, counts.repair, counts.quarantine, counts.expire),
        (1, 2, 1, 0),
        "{name}"
    );
    for (receipt, status) in receipts.iter().zip([
        DeliveryStatus::Pending,
        DeliveryStatus::Pending,
        DeliveryStatus::Quarantined,
        DeliveryStatus::Pending,
    ]) {
        let delivery = store.delivery(receipt.event_id, OFF).await?;
        assert_eq!(
            delivery.map(|d| d.status),
            Some(status),
            "{name}: {receipt:?}"
        );
    }
    let held = store.dead_letters(&ReplaySelection::consumer(OFF)).await?;
    let held: Vec<_> = held.iter().map(|d| (d.event_id, d.status)).collect();
    assert_eq!(
        held,
        [(receipts[2].event_id, SettledStatus::Quarantined)],
        "{name}"
    );

    // The status shows the consumer's newest inventory.
    let status = store.status(Duration::from_secs(3600)).await?;
    let last: Vec<_> = status
        .last_inventories
        .iter()
        .map(|i| {
            (
                i.inventory_id,
                i.consumer.as_str(),
                i.counts,
                i.approved_by.as_str(),
            )
        })
        .collect();
    assert_eq!(last, [(applied.inventory_id, OFF, counts, "bob")], "{name}");

    // The same key again: the first result, nothing new. Another reason under it: refused.
    let again = store
        .apply_inventory(OFF, 100, &approval("bob", "k1"))
        .await?;
    assert!(again.repeated, "{name}");
    assert_eq!(
        (again.inventory_id, again.delivered),
        (applied.inventory_id, 3)
    );
    let conflict = ReplayApproval::new(&digest, "another reason", "CHG-7", "k1", "bob");
    let conflict = store.apply_inventory(OFF, 100, &conflict).await;
    assert!(
        matches!(conflict, Err(ReplayError::IdempotencyKeyConflict { .. })),
        "{name}: {conflict:?}"
    );

    // Every note has a delivery now: nothing is left to inventory.
    let left = store
        .inventory(OFF, std::time::SystemTime::now(), 100)
        .await?;
    assert!(left.items.is_empty(), "{name}: {left:?}");

    // In shadow mode its workers claim the three, the repaired ones conformed to 2.0.0.
    store
        .set_mode(
            OFF,
            ConsumerMode::Shadow,
            &StateChange::new("ops", "shadow first"),
        )
        .await?;
    let claimed = claim(&store, OFF, "w1", 10, LEASE, false).await?;
    let seen: Vec<_> = claimed
        .iter()
        .map(|c| {
            (
                c.lease.event_id,
                c.delivery.version.as_str(),
                c.payload.clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                receipts[0].event_id,
                "2.0.0",
                serde_json::json!({"note_id": a, "text": "a note", "channel": "email"})
            ),
            (
                receipts[1].event_id,
                "2.0.0",
                serde_json::json!({"note_id": b, "channel": "email"})
            ),
            (
                receipts[3].event_id,
                "2.0.0",
                serde_json::json!({"note_id": d, "channel": "sms"})
            ),
        ],
        "{name}"
    );

    // Live, a new inventory is proposed but not applied.
    committed(
        &store,
        vec![support::event(
            "test.note",
            "2.0.0",
            serde_json::json!({"note_id": support::note_key(5), "channel": "sms"}),
        )],
    )
    .await?;
    let next = store.propose_inventory(OFF, 100, "alice").await?;
    store
        .set_mode(
            OFF,
            ConsumerMode::Live,
            &StateChange::new("ops", "gone live"),
        )
        .await?;
    let live = ReplayApproval::new(&next.plan.digest, "late", "CHG-8", "k2", "bob");
    let live = store.apply_inventory(OFF, 100, &live).await;
    assert!(
        matches!(live, Err(ReplayError::ConsumerLive(_))),
        "{name}: {live:?}"
    );
    Ok(())
}

/// An applied inventory's expired events are decided: later inventories leave them out.
async fn an_expired_event_is_decided_for_good<S: Conformance>(store: S) -> TestResult {
    use conformance::EXPIRING;
    let name = S::NAME;
    committed(&store, vec![note(1), note(2)]).await?;
    // The rules expire events older than a millisecond; let two pass.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let proposed = store.propose_inventory(EXPIRING, 100, "alice").await?;
    assert_eq!(
        proposed.plan.counts.expire, 2,
        "{name}: {:?}",
        proposed.plan
    );
    let approval = ReplayApproval::new(
        &proposed.plan.digest,
        "too old to matter",
        "CHG-9",
        "k1",
        "bob",
    );
    let applied = store.apply_inventory(EXPIRING, 100, &approval).await?;
    assert_eq!((applied.delivered, applied.counts.expire), (0, 2), "{name}");
    let after = store
        .inventory(EXPIRING, std::time::SystemTime::now(), 100)
        .await?;
    assert!(after.items.is_empty(), "{name}: {after:?}");
    let nothing = store.propose_inventory(EXPIRING, 100, "alice").await;
    assert!(
        matches!(nothing, Err(ReplayError::NothingToInventory(_))),
        "{name}: {nothing:?}"
    );
    Ok(())
}
