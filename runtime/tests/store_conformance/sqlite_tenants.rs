//! Tenants on the SQLite store: a handle of one tenant ([`SqliteStore::scoped`]) appends,
//! claims, reads, replays and pauses within that tenant only, through the store's own
//! statements (SQLite has no row-level security). The scenario is PostgreSQL's
//! (`tests/schema/tenants.rs`, where row-level security and role logins keep tenants apart).

use std::collections::BTreeSet;

use evc_runtime::{
    AppendError, AppendOptions, ConsumerMode, Cursors, DeliveryStatus, DispatchError, FailureClass,
    FeedPosition, NewEvent, Observe, Operate, Registry, ReplayApproval, ReplaySelection,
    RetryDecision, SqliteStore, Store, TenantScope, Unclaimed,
};
use uuid::Uuid;

use super::{LEASE, ack, ack_leases, claim, ids, note};
use crate::conformance::{CONFORMANCE_REGISTRY, OFF, ORDERED, PLAIN};
use crate::support::{self, TRACE_ID, TestResult};

/// The conformance registry with tenants required, as contracts with
/// `envelope.require_tenant_scope` compile it.
const TENANT_REGISTRY: Registry = Registry {
    require_tenant_scope: true,
    ..CONFORMANCE_REGISTRY
};

/// Appends a note of `tenant` per key of `keys` in one batch through `store`.
async fn append(
    store: &SqliteStore,
    tenant: &str,
    keys: std::ops::Range<u64>,
) -> Result<BTreeSet<Uuid>, Box<dyn std::error::Error + Send + Sync>> {
    let batch = keys
        .map(|n| NewEvent::new(note(n), AppendOptions::new().tenant_scope(tenant)))
        .collect();
    let mut tx = store.begin().await?;
    let receipts = store.append_batch(&mut tx, batch).await?;
    tx.commit().await?;
    Ok(receipts.into_iter().map(|r| r.event_id).collect())
}

/// `consumer`'s pending and dead deliveries in the status report of `store`.
async fn pending_and_dead(
    store: &SqliteStore,
    consumer: &str,
) -> Result<(i64, i64), Box<dyn std::error::Error + Send + Sync>> {
    let status = store.status(std::time::Duration::from_secs(3600)).await?;
    let row = status
        .consumers
        .iter()
        .find(|c| c.consumer == consumer)
        .ok_or("no status row")?;
    Ok((row.pending, row.dead))
}

fn set(ids: Vec<Uuid>) -> BTreeSet<Uuid> {
    ids.into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenant_sees_and_touches_only_its_own_rows() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("outbox.db");
    let all = SqliteStore::open(path.to_string_lossy(), TENANT_REGISTRY).await?;
    let acme = all.scoped(&TenantScope::only("acme")?);
    let bolt = all.scoped(&TenantScope::only("bolt")?);
    assert_eq!(acme.tenant_scope(), TenantScope::only("acme")?);
    assert_eq!(all.tenant_scope(), TenantScope::all());

    // Each tenant's handle appends its own events; neither writes another tenant's or none.
    // Bolt's first, of keys acme's share: a key orders within its tenant.
    let bolt_events = append(&bolt, "bolt", 0..2).await?;
    let acme_events = append(&acme, "acme", 0..3).await?;
    for options in [
        AppendOptions::new().tenant_scope("bolt"),
        AppendOptions::new(),
    ] {
        let mut tx = acme.begin().await?;
        let foreign = acme.append(&mut tx, note(9), options).await;
        assert!(
            matches!(&foreign, Err(AppendError::OutsideTenantScope { scope }) if scope == "acme"),
            "{foreign:?}"
        );
    }
    let foreign = acme
        .append_batch(
            &mut *acme.pool().acquire().await?,
            vec![
                NewEvent::new(note(10), AppendOptions::new().tenant_scope("acme")),
                NewEvent::new(note(11), AppendOptions::new().tenant_scope("bolt")),
            ],
        )
        .await;
    assert!(
        matches!(foreign, Err(AppendError::OutsideTenantScope { .. })),
        "{foreign:?}"
    );
    assert_eq!(acme.count_events(&[]).await?, 3);
    assert_eq!(bolt.count_events(&[]).await?, 2);
    assert_eq!(all.count_events(&[]).await?, 5);

    // Each tenant's claims take its own deliveries only: acme's two fail dead and one acks;
    // bolt's first fails dead, its second stays pending.
    let claimed = claim(&acme, PLAIN, "w/acme", 10, LEASE, false).await?;
    assert_eq!(set(ids(&claimed)), acme_events);
    for claimed in &claimed[..2] {
        let dead = RetryDecision::Dead;
        Store::fail(&acme, &claimed.lease, FailureClass::Permanent, "boom", dead).await?;
    }
    ack(&acme, &claimed[2].lease).await?;
    let claimed = claim(&bolt, PLAIN, "w/bolt", 1, LEASE, false).await?;
    assert_eq!(claimed.len(), 1);
    let bolt_dead = claimed[0].lease.event_id;
    assert!(bolt_events.contains(&bolt_dead));
    // Bolt's lease is stale to acme's handle: acme can neither ack, renew, fence nor fail it,
    // nor learn how bolt's deliveries stand from a claim by id.
    let bolt_lease = &claimed[0].lease;
    let outcome = ack_leases(&acme, &[bolt_lease]).await?;
    assert_eq!((outcome.acked, outcome.stale.len()), (0, 1), "{outcome:?}");
    let mut connection = acme.pool().acquire().await?;
    assert!(
        acme.renew(&mut connection, &[bolt_lease], LEASE)
            .await?
            .is_empty()
    );
    let mut tx = acme.begin().await?;
    let fenced = Store::lock_lease(&acme, &mut tx, bolt_lease).await;
    assert!(
        matches!(fenced, Err(DispatchError::StaleToken { .. })),
        "{fenced:?}"
    );
    drop(tx);
    let failed = Store::fail(
        &acme,
        bolt_lease,
        FailureClass::Permanent,
        "boom",
        RetryDecision::Dead,
    )
    .await;
    assert!(
        matches!(failed, Err(DispatchError::StaleToken { .. })),
        "{failed:?}"
    );
    let by_id: Vec<Uuid> = bolt_events.iter().copied().collect();
    let answer = acme
        .claim_events(&mut connection, PLAIN, "w/acme", &by_id, LEASE)
        .await?;
    drop(connection);
    assert!(answer.claimed.is_empty());
    assert!(
        answer
            .unclaimed
            .iter()
            .all(|(_, state)| matches!(state, Unclaimed::Settled)),
        "{:?}",
        answer.unclaimed
    );
    assert_eq!(
        bolt.delivery(bolt_dead, PLAIN).await?.map(|d| d.status),
        Some(DeliveryStatus::Leased)
    );
    let dead = RetryDecision::Dead;
    Store::fail(
        &bolt,
        &claimed[0].lease,
        FailureClass::Permanent,
        "boom",
        dead,
    )
    .await?;
    // Per key too, though bolt's deliveries of keys 0 and 1 are older and pending: keys
    // order within their tenant.
    let ordered = claim(&acme, ORDERED, "w/acme", 10, LEASE, true).await?;
    assert_eq!(set(ids(&ordered)), acme_events);

    // Reads: status, dead letters, the timeline of the trace every event shares, envelopes,
    // payloads, deliveries, attempts and the feed hold the handle's tenant only.
    assert_eq!(pending_and_dead(&acme, PLAIN).await?, (0, 2));
    assert_eq!(pending_and_dead(&bolt, PLAIN).await?, (1, 1));
    assert_eq!(pending_and_dead(&all, PLAIN).await?, (1, 3));
    let everything = ReplaySelection::consumer(PLAIN);
    let dead: BTreeSet<Uuid> = acme
        .dead_letters(&everything)
        .await?
        .iter()
        .map(|d| d.event_id)
        .collect();
    assert!(dead.is_subset(&acme_events) && dead.len() == 2, "{dead:?}");
    let seen: BTreeSet<Uuid> = acme
        .timeline(TRACE_ID)
        .await?
        .iter()
        .map(|entry| entry.event_id)
        .collect();
    assert_eq!(seen, acme_events);
    assert!(acme.event(bolt_dead).await?.is_none());
    assert!(acme.payload(bolt_dead).await?.is_none());
    assert!(acme.delivery(bolt_dead, PLAIN).await?.is_none());
    assert!(acme.attempts(bolt_dead, PLAIN).await?.is_empty());
    assert!(bolt.event(bolt_dead).await?.is_some());
    assert_eq!(bolt.attempts(bolt_dead, PLAIN).await?.len(), 1);
    let fed: BTreeSet<Uuid> = acme
        .feed(FeedPosition::default(), 100)
        .await?
        .iter()
        .map(|event| event.event_id)
        .collect();
    assert_eq!(fed, acme_events);
    assert_eq!(acme.count_attempts(PLAIN, "dead").await?, 2);
    assert_eq!(all.count_attempts(PLAIN, "dead").await?, 3);

    // A replay for acme, proposed and applied in acme's scope, replays acme's two dead
    // deliveries and leaves bolt's where it was; the records are acme's.
    let proposed = acme.propose_replay(&everything, "alice").await?;
    let planned: BTreeSet<Uuid> = proposed
        .plan
        .deliveries
        .iter()
        .map(|d| d.event_id)
        .collect();
    assert_eq!(planned, dead);
    // Bolt's approver does not find acme's plan.
    let approval =
        |digest: &str| ReplayApproval::new(digest, "fixed in 1.4.2", "CHG-7", "r-1", "bob");
    assert!(
        bolt.replay(&everything, &approval(&proposed.plan.digest))
            .await
            .is_err()
    );
    let applied = acme
        .replay(&everything, &approval(&proposed.plan.digest))
        .await?;
    assert_eq!(applied.deliveries, 2);
    assert_eq!(bolt.dead_letters(&everything).await?.len(), 1);
    assert_eq!(acme.replays(10).await?.len(), 1);
    assert!(bolt.replays(10).await?.is_empty());
    assert_eq!(all.replays(10).await?.len(), 1);

    // A pause for acme holds acme's replayed deliveries and no other tenant's, also for a
    // handle of every tenant; a mode, which applies to every tenant, is refused.
    let change = support::change();
    assert!(acme.pause(PLAIN, &change).await?.paused);
    assert!(acme.pause(PLAIN, &change).await?.paused);
    assert!(acme.consumer_state(PLAIN).await?.paused);
    assert!(!bolt.consumer_state(PLAIN).await?.paused);
    assert!(!all.consumer_state(PLAIN).await?.paused);
    let refused = acme.set_mode(PLAIN, ConsumerMode::Off, &change).await;
    assert!(
        matches!(&refused, Err(DispatchError::TenantScoped(_, tenant)) if tenant == "acme"),
        "{refused:?}"
    );
    // So is the cut-over gate, which judges every tenant's shadow runs.
    let report = acme.cutover_report(PLAIN).await;
    assert!(
        matches!(&report, Err(DispatchError::TenantScoped(_, tenant)) if tenant == "acme"),
        "{report:?}"
    );
    let explained = acme
        .explain_difference(PLAIN, Uuid::now_v7(), &change)
        .await;
    assert!(
        matches!(&explained, Err(DispatchError::TenantScoped(_, tenant)) if tenant == "acme"),
        "{explained:?}"
    );
    assert!(all.cutover_report(PLAIN).await?.passed());
    // An inventory of `k.off` (no deliveries: it is off) lists the handle's tenant's events
    // only; acme applies its own, and bolt's stay to inventory, under the same key.
    let now = std::time::SystemTime::now();
    let listed = |report: &evc_runtime::InventoryReport| -> BTreeSet<Uuid> {
        report.items.iter().map(|i| i.event_id).collect()
    };
    assert_eq!(listed(&acme.inventory(OFF, now, 100).await?), acme_events);
    assert_eq!(listed(&bolt.inventory(OFF, now, 100).await?), bolt_events);
    assert_eq!(all.inventory(OFF, now, 100).await?.items.len(), 5);
    let proposed = acme.propose_inventory(OFF, 100, "alice").await?;
    let backfill = ReplayApproval::new(&proposed.plan.digest, "backfill", "CHG-1", "inv-1", "bob");
    let inventoried = acme.apply_inventory(OFF, 100, &backfill).await?;
    assert_eq!((inventoried.delivered, inventoried.repeated), (3, false));
    assert_eq!(listed(&all.inventory(OFF, now, 100).await?), bolt_events);
    let proposed = bolt.propose_inventory(OFF, 100, "alice").await?;
    let backfill = ReplayApproval::new(&proposed.plan.digest, "backfill", "CHG-2", "inv-1", "bob");
    let inventoried = bolt.apply_inventory(OFF, 100, &backfill).await?;
    assert_eq!((inventoried.delivered, inventoried.repeated), (2, false));

    // Retention spans every tenant: a handle of one may not purge.
    let purge = acme
        .purge_expired(std::time::SystemTime::now(), "retention", "ops", true)
        .await;
    assert!(
        matches!(purge, Err(evc_runtime::PurgeError::TenantScoped)),
        "{purge:?}"
    );
    let bolt_pending: BTreeSet<Uuid> = bolt_events
        .iter()
        .copied()
        .filter(|id| *id != bolt_dead)
        .collect();
    let claimed = claim(&all, PLAIN, "w/all", 10, LEASE, false).await?;
    assert_eq!(set(ids(&claimed)), bolt_pending);
    assert!(
        claim(&acme, PLAIN, "w/acme", 10, LEASE, false)
            .await?
            .is_empty()
    );
    assert!(!acme.resume(PLAIN, &change).await?.paused);
    let replayed = claim(&acme, PLAIN, "w/acme", 10, LEASE, false).await?;
    assert_eq!(set(ids(&replayed)), dead);
    // Acme's pause and resume are recorded in acme's scope (the repeated pause and the
    // refused mode are not): bolt reads none of them.
    let recorded: Vec<(String, Option<String>)> = acme
        .state_changes(PLAIN, 10)
        .await?
        .into_iter()
        .map(|c| (c.change, c.tenant_scope))
        .collect();
    let acme_scope = Some("acme".to_owned());
    assert_eq!(
        recorded,
        [
            ("resume".to_owned(), acme_scope.clone()),
            ("pause".to_owned(), acme_scope)
        ]
    );
    assert!(bolt.state_changes(PLAIN, 10).await?.is_empty());

    // A replay key acme used is bolt's to use too: bolt's replay of its own dead letter under
    // `r-1` is applied, not answered with acme's.
    let bolt_proposed = bolt.propose_replay(&everything, "carol").await?;
    assert_eq!(bolt_proposed.plan.deliveries.len(), 1);
    let bolt_applied = bolt
        .replay(&everything, &approval(&bolt_proposed.plan.digest))
        .await?;
    assert!(!bolt_applied.repeated);
    assert_ne!(bolt_applied.replay_id, applied.replay_id);
    assert_eq!(bolt_applied.deliveries, 1);

    // A relay cursor passes every tenant's events: a tenant's handle may not take one.
    let taken = acme
        .take_cursor("jetstream", "relay-1", std::time::Duration::from_secs(30))
        .await;
    assert!(
        matches!(&taken, Err(DispatchError::TenantScoped(_, tenant)) if tenant == "acme"),
        "{taken:?}"
    );
    assert!(
        all.take_cursor("jetstream", "relay-1", std::time::Duration::from_secs(30))
            .await?
            .is_some()
    );
    all.close().await;
    Ok(())
}
