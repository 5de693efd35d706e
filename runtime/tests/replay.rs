//! Replay from dead-letter and quarantine, on a real server: the dry run's plan and digest,
//! every refusal (wrong digest, missing or over-long reason, missing approval, a key reused for
//! another plan, a version the consumer no longer accepts, an unknown consumer) leaving nothing
//! written, and an apply that supersedes the originals with new deliveries referencing them,
//! once per idempotency key, audited and visible in the trace's timeline. A payload that no
//! longer validates against its version's deployed schema is reported by the dry run and
//! refuses the apply.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use evc_runtime::{
    Console, DeliveryStatus, DispatchError, FailureClass, NotReplayableReason, Operate, PgStore,
    ReplayApproval, ReplayError, ReplaySelection, RetryDecision, SettledStatus, Store,
};
use support::{
    NOTE_SCHEMA, TRACE_ID, TestResult, append_notes, deploy, dispatch_store, install, with_database,
};
use uuid::Uuid;

const CONSUMER: &str = "d.unordered";

/// Four notes for the dispatch consumers; `d.unordered`'s first two dead, the third
/// quarantined, the fourth acked. Returns the leases of those attempts.
async fn settle_some(
    store: &evc_runtime::PgStore,
) -> Result<Vec<evc_runtime::Lease>, Box<dyn std::error::Error + Send + Sync>> {
    append_notes(store, 4, 4).await?;
    let claimed = support::claim(store, CONSUMER, "w/1", 4, Duration::from_secs(30), false).await?;
    assert_eq!(claimed.len(), 4);
    for (claimed, (class, code, decision)) in claimed.iter().zip([
        (FailureClass::Permanent, "boom", RetryDecision::Dead),
        (FailureClass::Poison, "crash", RetryDecision::Dead),
        (FailureClass::Schema, "bad_shape", RetryDecision::Quarantine),
    ]) {
        store.fail(&claimed.lease, class, code, decision).await?;
    }
    support::ack_current(store, &claimed[3].lease).await?;
    Ok(claimed.into_iter().map(|c| c.lease).collect())
}

/// `(status, generation, count)` of `d.unordered`'s delivery rows, every generation of the
/// `events`, by generation and status (an acked delivery has none: its ack deleted it, and its
/// `acked` attempt row is its record). Fails if the consumer has rows of other events.
async fn generations(
    store: &PgStore,
    events: &[Uuid],
) -> Result<Vec<(String, i32, i64)>, Box<dyn std::error::Error + Send + Sync>> {
    let mut counts: BTreeMap<(u32, &str), i64> = BTreeMap::new();
    for &event in events {
        for delivery in store.deliveries(event, CONSUMER).await? {
            *counts
                .entry((delivery.generation, delivery.status.as_str()))
                .or_default() += 1;
        }
    }
    let rows: i64 = counts.values().sum();
    assert_eq!(
        store.count_deliveries(CONSUMER, &[]).await?,
        u64::try_from(rows)?,
        "delivery rows of other events"
    );
    Ok(counts
        .into_iter()
        .map(|((generation, status), n)| (status.to_owned(), generation as i32, n))
        .collect())
}

/// `(replays, their items)` recorded so far.
async fn replays(store: &PgStore) -> Result<(usize, usize), DispatchError> {
    let replays = store.replays(100).await?;
    Ok((
        replays.len(),
        replays.iter().map(|replay| replay.items.len()).sum(),
    ))
}

/// The event ids of `leases`, in order.
fn events(leases: &[evc_runtime::Lease]) -> Vec<Uuid> {
    leases.iter().map(|lease| lease.event_id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_is_planned_checked_applied_once_and_audited() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 4).await?;
        let original_leases = settle_some(&store).await?;
        let events = events(&original_leases);
        deploy(&pool, CONSUMER, "^1").await?;
        let console = Console::connect(pool.clone()).await?;
        let before = generations(&store, &events).await?;
        assert_eq!(
            before,
            [("dead".to_owned(), 0, 2), ("quarantined".to_owned(), 0, 1)]
        );

        // The dead-letter listing and the dry run.
        let all = ReplaySelection::consumer(CONSUMER);
        let listed = console.dead_letters(&all).await?;
        assert_eq!(listed.len(), 3);
        assert_eq!(
            listed
                .iter()
                .map(|d| (d.status, d.last_error_code.as_deref(), d.attempts))
                .collect::<Vec<_>>(),
            [
                (SettledStatus::Dead, Some("boom"), 1),
                (SettledStatus::Dead, Some("crash"), 1),
                (SettledStatus::Quarantined, Some("bad_shape"), 1)
            ]
        );
        let dead_only = console
            .replay_plan(&all.clone().statuses([SettledStatus::Dead]))
            .await?;
        assert_eq!(dead_only.deliveries.len(), 2);
        let plan = console.propose_replay(&all, "alice").await?.plan;
        assert_eq!(plan.deliveries, listed);
        assert_ne!(plan.digest, dead_only.digest);
        assert_eq!(plan.unsupported().count(), 0);
        // A dry run writes nothing.
        assert_eq!(console.replay_plan(&all).await?.digest, plan.digest);
        assert_eq!(generations(&store, &events).await?, before);

        // Refusals, each leaving nothing behind.
        let good = ReplayApproval::new(
            &plan.digest,
            "handler fixed in 1.4.2",
            "CHG-7",
            "r-1",
            "bob",
        );
        let wrong_digest = ReplayApproval::new(
            &dead_only.digest,
            "handler fixed in 1.4.2",
            "CHG-7",
            "r-1",
            "bob",
        );
        match console.replay(&all, &wrong_digest).await {
            Err(ReplayError::DigestMismatch { presented, current }) => {
                assert_eq!(presented, dead_only.digest);
                assert_eq!(current, plan.digest);
            }
            other => panic!("expected a digest mismatch, got {other:?}"),
        }
        let no_reason = ReplayApproval::new(&plan.digest, "", "CHG-7", "r-1", "bob");
        assert!(matches!(
            console.replay(&all, &no_reason).await,
            Err(ReplayError::ReasonMissing)
        ));
        let long_reason = ReplayApproval::new(&plan.digest, "x".repeat(501), "CHG-7", "r-1", "bob");
        assert!(matches!(
            console.replay(&all, &long_reason).await,
            Err(ReplayError::ReasonTooLong { chars: 501 })
        ));
        let no_approval = ReplayApproval::new(&plan.digest, "fixed", " ", "r-1", "bob");
        assert!(matches!(
            console.replay(&all, &no_approval).await,
            Err(ReplayError::ApprovalMissing)
        ));
        // Approval and key are kept for audit and shown to other operators: short, printable.
        for (approval, field) in [
            (
                ReplayApproval::new(&plan.digest, "fixed", "CHG\u{1b}[2J", "r-1", "bob"),
                "approval reference",
            ),
            (
                ReplayApproval::new(&plan.digest, "fixed", "CHG-7", "r-1\nforged", "bob"),
                "idempotency key",
            ),
            (
                ReplayApproval::new(&plan.digest, "fixed\u{1b}[31m", "CHG-7", "r-1", "bob"),
                "reason",
            ),
        ] {
            assert!(matches!(
                console.replay(&all, &approval).await,
                Err(ReplayError::ControlCharacters { field: f }) if f == field
            ));
        }
        let long_approval =
            ReplayApproval::new(&plan.digest, "fixed", "x".repeat(201), "r-1", "bob");
        assert!(matches!(
            console.replay(&all, &long_approval).await,
            Err(ReplayError::RefTooLong {
                field: "approval reference",
                chars: 201
            })
        ));
        assert!(matches!(
            console
                .replay(&ReplaySelection::consumer("nobody"), &good)
                .await,
            Err(ReplayError::UnknownConsumer(name)) if name == "nobody"
        ));
        assert_eq!(generations(&store, &events).await?, before);
        assert_eq!(replays(&store).await?, (0, 0));

        // Apply: three new deliveries, generation 1, pending, referencing the replay.
        let applied = console.replay(&all, &good).await?;
        assert_eq!(applied.deliveries, 3);
        assert!(!applied.repeated);
        assert_eq!(
            generations(&store, &events).await?,
            [("replayed".to_owned(), 0, 3), ("pending".to_owned(), 1, 3)]
        );
        // Each new generation names the replay, whose item is the generation it superseded.
        let replay = store
            .replays(100)
            .await?
            .into_iter()
            .find(|replay| replay.replay_id == applied.replay_id)
            .ok_or("the replay is not recorded")?;
        let mut referencing = 0;
        for item in &replay.items {
            let next = store.delivery(item.event_id, &item.consumer).await?;
            if item.consumer == CONSUMER
                && next.is_some_and(|next| {
                    i64::from(next.generation) == i64::from(item.generation) + 1
                        && next.replay_id == Some(applied.replay_id)
                })
            {
                referencing += 1;
            }
        }
        assert_eq!(referencing, 3);
        assert_eq!(
            (
                replay.reason.as_str(),
                replay.approval_ref.as_str(),
                replay.deliveries
            ),
            ("handler fixed in 1.4.2", "CHG-7", 3)
        );

        // The same key again: the first result, nothing new. Another plan under it: refused.
        let again = console.replay(&all, &good).await?;
        assert_eq!(again.replay_id, applied.replay_id);
        assert_eq!(again.deliveries, 3);
        assert!(again.repeated);
        assert!(matches!(
            console.replay(&all, &wrong_digest).await,
            Err(ReplayError::IdempotencyKeyReused { key, .. }) if key == "r-1"
        ));
        assert_eq!(replays(&store).await?, (1, 3));
        // The 3 replayed originals and their 3 next generations (the acked delivery is gone).
        assert_eq!(store.count_deliveries(CONSUMER, &[]).await?, 6);

        // Nothing is left to replay under a new key.
        let empty = console.replay_plan(&all).await?;
        assert!(empty.deliveries.is_empty());
        let new_key = ReplayApproval::new(&empty.digest, "again", "CHG-8", "r-2", "bob");
        assert!(matches!(
            console.replay(&all, &new_key).await,
            Err(ReplayError::NothingToReplay)
        ));

        // The new deliveries run with a fresh attempt budget; the originals' tokens stay stale.
        let mut old_token = 0;
        for &event in &events {
            for delivery in store.deliveries(event, CONSUMER).await? {
                if delivery.status == DeliveryStatus::Replayed {
                    old_token = old_token.max(delivery.token);
                }
            }
        }
        let claimed =
            support::claim(&store, CONSUMER, "w/2", 10, Duration::from_secs(30), false).await?;
        assert_eq!(claimed.len(), 3);
        assert!(claimed.iter().all(|c| c.lease.attempt == 1));
        assert!(claimed.iter().all(|c| c.lease.token > old_token));
        // A late ack from an original attempt's token touches neither generation, and is
        // counted where every process's status report sees it.
        let late = support::ack(&store, &[&original_leases[0]]).await?;
        assert_eq!(late.acked, 0);
        assert_eq!(late.stale.len(), 1, "{late:?}");
        assert_eq!(late.stale[0].0, original_leases[0].event_id);
        let leases: Vec<_> = claimed.iter().map(|c| &c.lease).collect();
        assert_eq!(support::ack(&store, &leases).await?.acked, 3);
        let start = std::time::Instant::now();
        let stale = loop {
            let status = console.status(Duration::from_secs(60)).await?;
            let stale = status
                .consumers
                .iter()
                .find(|c| c.consumer == CONSUMER)
                .map_or(0, |c| c.stale_rejections);
            if stale > 0 || start.elapsed() > support::HANG {
                break stale;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(stale, 1);
        // Every attempt of the four events (in append order, each one's rows in the order
        // written), by generation.
        let mut attempts = Vec::new();
        for lease in &original_leases {
            for attempt in store.attempts(lease.event_id, CONSUMER).await? {
                attempts.push((attempt.generation, attempt.outcome));
            }
        }
        attempts.sort_by_key(|(generation, _)| *generation);
        let outcomes: Vec<(u32, &str)> = attempts.iter().map(|(g, o)| (*g, o.as_str())).collect();
        assert_eq!(
            outcomes,
            [
                (0, "dead"),
                (0, "dead"),
                (0, "quarantined"),
                (0, "acked"),
                (1, "acked"),
                (1, "acked"),
                (1, "acked")
            ]
        );

        // The timeline shows the replays, after the failures they replayed.
        let timeline = console.timeline(TRACE_ID).await?;
        let replay_entries: Vec<_> = timeline
            .iter()
            .filter(|entry| entry.kind == "replay")
            .collect();
        assert_eq!(replay_entries.len(), 3);
        assert!(replay_entries[0].detail.contains("approval CHG-7"));
        let first_replay = timeline.iter().position(|e| e.kind == "replay");
        let last_dead = timeline
            .iter()
            .rposition(|e| e.kind == "attempt" && e.detail.starts_with("dead"));
        assert!(first_replay > last_dead);
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_is_refused_when_the_consumer_no_longer_accepts_the_version() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 4).await?;
        let events = events(&settle_some(&store).await?);
        // The deployed registry moved the consumer to test.note ^2.
        deploy(&pool, CONSUMER, "^2").await?;
        let console = Console::connect(pool.clone()).await?;
        let all = ReplaySelection::consumer(CONSUMER);
        let plan = console.replay_plan(&all).await?;
        assert_eq!(plan.unsupported().count(), 3);
        let before = generations(&store, &events).await?;
        let approval = ReplayApproval::new(&plan.digest, "retry after fix", "CHG-9", "r-9", "bob");
        match console.replay(&all, &approval).await {
            Err(ReplayError::UnsupportedVersion {
                consumer,
                event_type,
                version,
                requirement,
                ..
            }) => {
                assert_eq!(consumer, CONSUMER);
                assert_eq!(event_type, "test.note");
                assert_eq!(version, "1.0.0");
                assert_eq!(requirement.as_deref(), Some("^2"));
            }
            other => panic!("expected an unsupported version, got {other:?}"),
        }
        assert_eq!(generations(&store, &events).await?, before);
        assert_eq!(replays(&store).await?, (0, 0));

        // Not subscribed at all any more: refused the same way.
        install(&pool, CONSUMER, None, Some(NOTE_SCHEMA)).await?;
        let plan = console.replay_plan(&all).await?;
        let approval = ReplayApproval::new(&plan.digest, "retry after fix", "CHG-9", "r-9", "bob");
        assert!(matches!(
            console.replay(&all, &approval).await,
            Err(ReplayError::UnsupportedVersion {
                requirement: None,
                ..
            })
        ));
        assert_eq!(replays(&store).await?, (0, 0));
        Ok(())
    })
    .await
}

/// `test.note` 1.0.0 as deployed later: `count` must be at least 1 (note 0 has 0).
const COUNT_FROM_ONE: &str = r#"{"properties":{"count":{"minimum":1,"type":"integer"},"note_id":{"format":"uuid","type":"string"}},"required":["note_id"],"type":"object"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_the_deployed_schema_refuses_is_never_requeued() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 4).await?;
        let leases = settle_some(&store).await?;
        let events = events(&leases);
        deploy(&pool, CONSUMER, "^1").await?;
        // The schema deployed since: note 0 (dead, `count` 0) no longer validates.
        install(&pool, CONSUMER, Some("^1"), Some(COUNT_FROM_ONE)).await?;
        let console = Console::connect(pool.clone()).await?;
        let all = ReplaySelection::consumer(CONSUMER);
        let plan = console.replay_plan(&all).await?;
        assert_eq!(plan.deliveries.len(), 3);
        assert_eq!(
            plan.unsupported().count(),
            0,
            "the version is still accepted"
        );
        assert_eq!(
            plan.not_replayable
                .iter()
                .map(|n| (n.event_id, n.reason.code()))
                .collect::<Vec<_>>(),
            [(leases[0].event_id, "schema_invalid")]
        );
        assert_eq!(
            plan.not_replayable_reason(leases[0].event_id, 0),
            Some(NotReplayableReason::SchemaInvalid)
        );
        // Such a plan is not proposed: no one is asked to approve what apply refuses.
        assert!(matches!(
            console.propose_replay(&all, "alice").await,
            Err(ReplayError::NotReplayable { .. })
        ));

        // Apply refuses the whole plan; nothing is written.
        let before = generations(&store, &events).await?;
        let approval = ReplayApproval::new(&plan.digest, "handler fixed", "CHG-3", "r-3", "bob");
        match console.replay(&all, &approval).await {
            Err(ReplayError::NotReplayable {
                event_id, reason, ..
            }) => {
                assert_eq!(event_id, leases[0].event_id);
                assert_eq!(reason, NotReplayableReason::SchemaInvalid);
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(generations(&store, &events).await?, before);
        assert_eq!(replays(&store).await?, (0, 0));

        // The version not deployed at all: reported, refused.
        install(&pool, CONSUMER, Some("^1"), None).await?;
        let missing = console.replay_plan(&all).await?;
        assert_eq!(missing.not_replayable.len(), 3);
        assert!(
            missing
                .not_replayable
                .iter()
                .all(|n| n.reason == NotReplayableReason::VersionNotDeployed)
        );
        let approval = ReplayApproval::new(&missing.digest, "handler fixed", "CHG-3", "r-3", "bob");
        assert!(matches!(
            console.replay(&all, &approval).await,
            Err(ReplayError::NotReplayable {
                reason: NotReplayableReason::VersionNotDeployed,
                ..
            })
        ));
        assert_eq!(replays(&store).await?, (0, 0));

        // The operator leaves note 0 out: the rest replays.
        install(&pool, CONSUMER, Some("^1"), Some(COUNT_FROM_ONE)).await?;
        let rest = all
            .clone()
            .event_ids([leases[1].event_id, leases[2].event_id]);
        let plan = console.propose_replay(&rest, "alice").await?.plan;
        assert!(plan.not_replayable.is_empty());
        let approval = ReplayApproval::new(&plan.digest, "handler fixed", "CHG-3", "r-4", "bob");
        let applied = console.replay(&rest, &approval).await?;
        assert_eq!(applied.deliveries, 2);
        let note_0 = store
            .delivery(leases[0].event_id, CONSUMER)
            .await?
            .map(|d| (d.status, d.generation));
        assert_eq!(
            note_0,
            Some((DeliveryStatus::Dead, 0)),
            "note 0 stays dead-lettered"
        );
        Ok(())
    })
    .await
}

/// Discards recorded so far.
async fn discards(console: &Console) -> Result<usize, DispatchError> {
    Ok(console.discards(100).await?.len())
}

/// A discard: its dry run and digest (apart from a replay's), its refusals leaving nothing
/// written, then an apply that settles the planned deliveries for good, audited, keeps their
/// rows, and takes them out of the listing, later plans and replays; once per idempotency key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discard_is_planned_checked_applied_once_and_audited() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 4).await?;
        let events = events(&settle_some(&store).await?);
        deploy(&pool, CONSUMER, "^1").await?;
        let console = Console::connect(pool.clone()).await?;
        let before = generations(&store, &events).await?;

        // The dry run: the listing's deliveries, a digest of its own, nothing written.
        let all = ReplaySelection::consumer(CONSUMER);
        let dead = all.clone().statuses([SettledStatus::Dead]);
        let listed = console.dead_letters(&dead).await?;
        assert_eq!(listed.len(), 2);
        let plan = console.propose_discard(&dead, "alice").await?.plan;
        assert_eq!(plan.deliveries, listed);
        assert_eq!(console.discard_plan(&dead).await?.digest, plan.digest);
        let replay_plan = console.replay_plan(&dead).await?;
        assert_ne!(
            replay_plan.digest, plan.digest,
            "a replay's approval must not apply a discard"
        );
        assert_eq!(generations(&store, &events).await?, before);

        // Refusals, each leaving nothing behind.
        let replay_digest = ReplayApproval::new(&replay_plan.digest, "poison", "INC-3", "d-1", "bob");
        assert!(matches!(
            console.discard(&dead, &replay_digest).await,
            Err(ReplayError::DigestMismatch { current, .. }) if current == plan.digest
        ));
        let wrong_selection = ReplayApproval::new(&plan.digest, "poison", "INC-3", "d-1", "bob");
        assert!(matches!(
            console.discard(&all, &wrong_selection).await,
            Err(ReplayError::DigestMismatch { .. })
        ));
        for (approval, expected) in [
            (
                ReplayApproval::new(&plan.digest, " ", "INC-3", "d-1", "bob"),
                "reason",
            ),
            (
                ReplayApproval::new(&plan.digest, "poison", "", "d-1", "bob"),
                "approval",
            ),
            (
                ReplayApproval::new(&plan.digest, "poison", "INC-3", "", "bob"),
                "key",
            ),
            (
                ReplayApproval::new(&plan.digest, "poison", "INC\u{1b}[2J", "d-1", "bob"),
                "control",
            ),
        ] {
            let refused = console.discard(&dead, &approval).await;
            assert!(
                matches!(
                    (&refused, expected),
                    (Err(ReplayError::ReasonMissing), "reason")
                        | (Err(ReplayError::ApprovalMissing), "approval")
                        | (Err(ReplayError::IdempotencyKeyMissing), "key")
                        | (Err(ReplayError::ControlCharacters { .. }), "control")
                ),
                "{expected}: {refused:?}"
            );
        }
        assert!(matches!(
            console
                .discard(&ReplaySelection::consumer("nobody"), &wrong_selection)
                .await,
            Err(ReplayError::UnknownConsumer(name)) if name == "nobody"
        ));
        assert_eq!(generations(&store, &events).await?, before);
        assert_eq!(discards(&console).await?, 0);

        // The two-person rule: the proposer cannot discard her own plan.
        let hers = ReplayApproval::new(&plan.digest, "poison", "INC-3", "d-1", "Alice");
        assert!(matches!(
            console.discard(&dead, &hers).await,
            Err(ReplayError::SamePerson { person }) if person == "Alice"
        ));
        assert_eq!(discards(&console).await?, 0);

        // Apply: the two dead deliveries are discarded, named in the answer, in plan order.
        let good = ReplayApproval::new(&plan.digest, "poison message, INC-3", "INC-3", "d-1", "bob");
        let applied = console.discard(&dead, &good).await?;
        assert!(!applied.repeated);
        assert_eq!(
            applied
                .discarded
                .iter()
                .map(|d| (d.event_id, d.generation, d.status, d.event_type.as_str()))
                .collect::<Vec<_>>(),
            listed
                .iter()
                .map(|d| (d.event_id, 0, SettledStatus::Dead, "test.note"))
                .collect::<Vec<_>>()
        );
        // The rows stay, marked with the discard; attempts and error codes are kept.
        assert_eq!(
            generations(&store, &events).await?,
            [
                ("discarded".to_owned(), 0, 2),
                ("quarantined".to_owned(), 0, 1)
            ]
        );
        let mut kept = Vec::new();
        for &event in &events {
            for delivery in store.deliveries(event, CONSUMER).await? {
                if delivery.status == DeliveryStatus::Discarded {
                    kept.push((
                        delivery.last_error_code,
                        delivery.attempts,
                        delivery.discard_id,
                    ));
                }
            }
        }
        assert_eq!(
            kept,
            [
                (Some("boom".to_owned()), 1, Some(applied.discard_id)),
                (Some("crash".to_owned()), 1, Some(applied.discard_id))
            ]
        );
        // The audit row: who (approval and database role), what, why, when. (That it is
        // append-only is tested with the other ledgers, in append_only.rs.)
        let audit = console
            .discards(100)
            .await?
            .into_iter()
            .find(|discard| discard.discard_id == applied.discard_id)
            .ok_or("the discard is not recorded")?;
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)?
            .as_secs_f64();
        assert!(audit.discarded_at <= now, "discarded in the future");
        assert_eq!(
            (
                audit.consumer.as_str(),
                audit.reason.as_str(),
                audit.approval_ref.as_str(),
                audit.db_role.as_str(),
                audit.deliveries,
                audit.discarded.len(),
                audit.plan_digest.as_str()
            ),
            (
                CONSUMER,
                "poison message, INC-3",
                "INC-3",
                pool.connect_options().get_username(),
                2,
                2,
                plan.digest.as_str()
            )
        );
        assert_eq!(audit.discarded, applied.discarded);
        assert_eq!(
            (audit.planned_by.as_deref(), audit.approved_by.as_deref()),
            (Some("alice"), Some("bob"))
        );

        // The same key again: the first result, nothing new; another plan under it: refused.
        let again = console.discard(&dead, &good).await?;
        assert!(again.repeated);
        assert_eq!(again.discard_id, applied.discard_id);
        assert_eq!(again.discarded, applied.discarded);
        // The same key and plan with another reason: another decision, refused.
        let changed = ReplayApproval::new(&good.digest, "another reason", &good.approval_ref, "d-1", "bob");
        assert!(matches!(
            console.discard(&dead, &changed).await,
            Err(ReplayError::IdempotencyKeyConflict { key, field }) if key == "d-1" && field == "reason"
        ));
        let other = console.discard_plan(&all).await?;
        assert!(matches!(
            console
                .discard(&all, &ReplayApproval::new(&other.digest, "r", "INC-4", "d-1", "bob"))
                .await,
            Err(ReplayError::IdempotencyKeyReused { key, .. }) if key == "d-1"
        ));
        assert_eq!(discards(&console).await?, 1);

        // Discarded deliveries are no longer listed, planned or replayed.
        let remaining = console.dead_letters(&all).await?;
        assert_eq!(
            remaining.iter().map(|d| d.status).collect::<Vec<_>>(),
            [SettledStatus::Quarantined]
        );
        let by_id = all.clone().event_ids(listed.iter().map(|d| d.event_id));
        assert!(console.dead_letters(&by_id).await?.is_empty());
        let replay = console.replay_plan(&by_id).await?;
        assert!(replay.deliveries.is_empty());
        assert!(matches!(
            console
                .replay(
                    &by_id,
                    &ReplayApproval::new(&replay.digest, "r", "CHG-9", "r-9", "bob")
                )
                .await,
            Err(ReplayError::NothingToReplay)
        ));
        let empty = console.discard_plan(&by_id).await?;
        assert!(matches!(
            console
                .discard(
                    &by_id,
                    &ReplayApproval::new(&empty.digest, "r", "INC-5", "d-2", "bob")
                )
                .await,
            Err(ReplayError::NothingToDiscard)
        ));
        assert!(
            support::claim(&store, CONSUMER, "w/2", 10, Duration::from_secs(30), false)
                .await?
                .is_empty()
        );
        // Dead-letter counts no longer include them.
        let status = console.status(Duration::from_secs(60)).await?;
        let counts = status
            .consumers
            .iter()
            .find(|c| c.consumer == CONSUMER)
            .map(|c| (c.dead, c.quarantined));
        assert_eq!(counts, Some((0, 1)));

        // The timeline shows the discard of each delivery.
        let timeline = console.timeline(TRACE_ID).await?;
        let discard_entries: Vec<_> = timeline
            .iter()
            .filter(|entry| entry.kind == "discard")
            .collect();
        assert_eq!(discard_entries.len(), 2);
        assert!(
            discard_entries[0]
                .detail
                .starts_with(&format!("discard {} of generation 0", applied.discard_id))
                && discard_entries[0].detail.ends_with("(approval INC-3, proposed by alice, approved by bob)"),
            "{}",
            discard_entries[0].detail
        );
        Ok(())
    })
    .await
}
