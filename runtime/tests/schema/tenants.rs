//! Tenants on PostgreSQL (the eleventh step): while the settings require a tenant scope, every
//! job of tenant `acme` works through the store on acme's rows only. Claims, status, dead
//! letters, timelines, replays, pauses and idempotency keys of one tenant return and touch
//! nothing of the other; a session that names no tenant sees nothing; a write into another
//! tenant is refused; clearing the setting lifts the policies. Each job runs as the login of
//! its role, as `roles.rs` does, because superusers (the test's admin) are never subject to
//! row-level security.

use std::collections::BTreeSet;
use std::time::Duration;

use evc_runtime::{
    AppendError, AppendOptions, ClaimRequest, Console, Cursors, DispatchError, FailureClass,
    NewEvent, Observe, Operate, PgStore, Registry, ReplayApproval, ReplaySelection, RetryDecision,
    Role, Store, TenantScope,
};
use sqlx::postgres::{PgConnection, PgPool};
use uuid::Uuid;

use crate::roles::{Logins, denied, with_logins};
use crate::support::{self, DISPATCH_REGISTRY, TRACE_ID, TestResult};

const CONSUMER: &str = "d.unordered";

/// The dispatch registry with tenants required, as contracts with
/// `envelope.require_tenant_scope` compile it.
pub(crate) const TENANT_REGISTRY: Registry = Registry {
    require_tenant_scope: true,
    ..DISPATCH_REGISTRY
};

/// [`TENANT_REGISTRY`] where `d.unordered` is off: it gets no delivery until an inventory
/// gives it the events it missed.
static INVENTORIED: Registry = Registry {
    consumers: &[
        DISPATCH_REGISTRY.consumers[0],
        DISPATCH_REGISTRY.consumers[1],
        DISPATCH_REGISTRY.consumers[2],
        evc_runtime::ConsumerDescriptor {
            mode: evc_runtime::ConsumerMode::Off,
            ..DISPATCH_REGISTRY.consumers[3]
        },
    ],
    ..TENANT_REGISTRY
};

/// Under row-level security, a tenant's operator inventories its tenant's events only, and
/// its approver applies them; the other tenant's stay to inventory, under the same key, and
/// its approver sees none of the first tenant's decisions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_inventory_lists_and_applies_its_own_events() -> TestResult {
    with_logins(|admin, logins| async move {
        let (acme, bolt) = (TenantScope::only("acme")?, TenantScope::only("bolt")?);
        let pool =
            |role: Role, scope: &TenantScope| logins.pool_for(&admin, role, Some(scope.clone()));
        sqlx::query("UPDATE evc_settings SET require_tenant_scope = true")
            .execute(&admin)
            .await?;
        let acme_events = append(
            &PgStore::new(pool(Role::Producer, &acme).await?, INVENTORIED)?,
            "acme",
            3,
        )
        .await?;
        let bolt_events = append(
            &PgStore::new(pool(Role::Producer, &bolt).await?, INVENTORIED)?,
            "bolt",
            2,
        )
        .await?;
        let listed = |report: evc_runtime::InventoryReport| -> BTreeSet<Uuid> {
            report.items.iter().map(|i| i.event_id).collect()
        };
        let now = std::time::SystemTime::now();
        for (scope, events) in [(&acme, &acme_events), (&bolt, &bolt_events)] {
            let operator = PgStore::new(pool(Role::Operator, scope).await?, INVENTORIED)?;
            assert_eq!(
                &listed(operator.inventory(CONSUMER, now, 100).await?),
                events
            );
            let proposed = operator.propose_inventory(CONSUMER, 100, "alice").await?;
            let approver = PgStore::new(pool(Role::Approver, scope).await?, INVENTORIED)?;
            let approval =
                ReplayApproval::new(&proposed.plan.digest, "backfill", "CHG-1", "inv-1", "bob");
            let applied = approver.apply_inventory(CONSUMER, 100, &approval).await?;
            assert_eq!(
                (applied.delivered, applied.repeated),
                (events.len() as u64, false)
            );
            let seen: i64 = sqlx::query_scalar("SELECT count(*) FROM evc_inventory_items")
                .fetch_one(approver.pool())
                .await?;
            assert_eq!(
                seen,
                events.len() as i64,
                "another tenant's items are hidden"
            );
            assert!(
                operator
                    .inventory(CONSUMER, now, 100)
                    .await?
                    .items
                    .is_empty()
            );
        }
        Ok(())
    })
    .await
}

/// [`TENANT_REGISTRY`] recording usage evidence once a day.
static RECORDING: Registry = Registry {
    evidence_recording: Some(evc_runtime::EvidenceRecordingDescriptor {
        every_ms: 86_400_000,
        keep_ms: 30 * 86_400_000,
        window_ms: 86_400_000,
        correlation_ms: 60_000,
        min_count: 1,
    }),
    ..TENANT_REGISTRY
};

/// Recorded evidence spans every tenant: only a session of every tenant records or reads it;
/// a tenant's session is refused the recording and sees no snapshot, nor does a session that
/// names no tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_evidence_is_for_sessions_of_every_tenant_only() -> TestResult {
    with_logins(|admin, logins| async move {
        let acme = TenantScope::only("acme")?;
        sqlx::query("UPDATE evc_settings SET require_tenant_scope = true")
            .execute(&admin)
            .await?;
        append(
            &PgStore::new(
                logins
                    .pool_for(&admin, Role::Producer, Some(acme.clone()))
                    .await?,
                RECORDING,
            )?,
            "acme",
            2,
        )
        .await?;
        let scoped = PgStore::new(
            logins
                .pool_for(&admin, Role::Dispatcher, Some(acme.clone()))
                .await?,
            RECORDING,
        )?;
        assert!(matches!(
            scoped.record_evidence().await,
            Err(DispatchError::TenantScoped(..))
        ));
        let all = PgStore::new(
            logins
                .pool_for(&admin, Role::Dispatcher, Some(TenantScope::all()))
                .await?,
            RECORDING,
        )?;
        let round = all.record_evidence().await?;
        assert!(round.recorded.is_some(), "{round:?}");

        let reader = |scope: Option<TenantScope>| logins.pool_for(&admin, Role::Reader, scope);
        let everyone = PgStore::new(reader(Some(TenantScope::all())).await?, RECORDING)?;
        assert_eq!(everyone.evidence_snapshots(10).await?.len(), 1);
        for pool in [reader(Some(acme.clone())).await?, reader(None).await?] {
            let seen: i64 = sqlx::query_scalar("SELECT count(*) FROM evc_evidence_snapshots")
                .fetch_one(&pool)
                .await?;
            assert_eq!(seen, 0, "row-level security hides the snapshots");
            assert!(
                PgStore::new(pool, RECORDING)?
                    .evidence_snapshots(10)
                    .await?
                    .is_empty()
            );
        }
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenant_sees_and_touches_only_its_own_rows() -> TestResult {
    with_logins(|admin, logins| async move { two_tenants(&admin, &logins).await }).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_claim_reads_past_no_other_tenants_backlog() -> TestResult {
    with_logins(|admin, logins| async move { scoped_claims(&admin, &logins).await }).await
}

/// Rows of `evc_deliveries` that index scans of `connection`'s transaction fetched so far,
/// counted before any filter (row-level security's included).
async fn deliveries_fetched(connection: &mut PgConnection) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relname = 'evc_deliveries'",
    )
    .fetch_one(connection)
    .await
}

/// Behind a backlog of 400 of bolt's deliveries, acme's dispatcher claims its three through
/// each kind of claim (leased, per key, held) reading a handful of delivery rows, not bolt's
/// 400: its claims scan the tenant's own index range instead of letting row-level security
/// drop the other tenant's rows one by one. Keys order within their tenant. A dispatcher of
/// every tenant still claims both tenants' deliveries.
async fn scoped_claims(admin: &PgPool, logins: &Logins) -> TestResult {
    const BACKLOG: u64 = 400;
    let acme = TenantScope::only("acme")?;
    let pool = |role: Role, scope: Option<TenantScope>| logins.pool_for(admin, role, scope);
    sqlx::query("UPDATE evc_settings SET require_tenant_scope = true")
        .execute(admin)
        .await?;
    let bolt_producer = PgStore::new(
        pool(Role::Producer, Some(TenantScope::only("bolt")?)).await?,
        TENANT_REGISTRY,
    )?;
    append_keys(&bolt_producer, "bolt", 0..BACKLOG).await?;
    let acme_producer = PgStore::new(
        pool(Role::Producer, Some(acme.clone())).await?,
        TENANT_REGISTRY,
    )?;
    let acme_events = append_keys(&acme_producer, "acme", BACKLOG..BACKLOG + 3).await?;

    // As autovacuum does once a table has grown: with no statistics, the planner takes the
    // table for empty and either index for as good.
    sqlx::query("ANALYZE evc_deliveries").execute(admin).await?;
    let dispatcher = PgStore::new(pool(Role::Dispatcher, Some(acme)).await?, TENANT_REGISTRY)?;
    let lease = Duration::from_secs(30);
    for (consumer, request) in [
        (
            "d.unordered",
            ClaimRequest::leased("d.unordered", "w", 10, lease),
        ),
        (
            "d.leased",
            ClaimRequest::leased("d.leased", "w", 10, lease).per_key(true),
        ),
        (
            "d.unordered, held",
            ClaimRequest::held("d.unordered", "w", 10),
        ),
    ] {
        let mut tx = dispatcher.begin().await?;
        let before = deliveries_fetched(&mut tx).await?;
        let claimed = dispatcher.claim(&mut tx, &request).await?;
        let fetched = deliveries_fetched(&mut tx).await? - before;
        tx.rollback().await?;
        let ids: BTreeSet<Uuid> = claimed
            .iter()
            .map(|c| c.delivery.event_id.parse())
            .collect::<Result<_, _>>()?;
        assert_eq!(ids, acme_events, "{consumer}");
        assert!(
            fetched < 50,
            "{consumer}: {fetched} delivery rows read to claim acme's 3 behind bolt's {BACKLOG}"
        );
    }

    // A key orders within its tenant, also where tenants are not required (no row-level
    // security): bolt's pending deliveries of keys 0 to 2 do not hold back acme's of the same
    // keys from acme's dispatcher, which claims acme's only.
    sqlx::query("UPDATE evc_settings SET require_tenant_scope = false")
        .execute(admin)
        .await?;
    let shared = append_keys(&acme_producer, "acme", 0..3).await?;
    let request = ClaimRequest::leased("d.leased", "w", 10, lease).per_key(true);
    let mut tx = dispatcher.begin().await?;
    let claimed = dispatcher.claim(&mut tx, &request).await?;
    tx.rollback().await?;
    let ids: BTreeSet<Uuid> = claimed
        .iter()
        .map(|c| c.delivery.event_id.parse())
        .collect::<Result<_, _>>()?;
    assert_eq!(ids, &acme_events | &shared);

    let everyone = PgStore::new(
        pool(Role::Dispatcher, Some(TenantScope::all())).await?,
        TENANT_REGISTRY,
    )?;
    let claimed = support::claim(&everyone, "d.unordered", "w/all", 500, lease, false).await?;
    assert_eq!(claimed.len(), usize::try_from(BACKLOG)? + 6);
    Ok(())
}

/// Whether row-level security is enabled and forced on `evc_events` and on
/// `evc_delivery_attempts`, and whether the latter has the permissive `evc_untenanted` policy
/// (its row-level security stays enabled for the consumer scope, docs/runtime.md, "A
/// dispatcher role per consumer").
async fn row_security(admin: &PgPool) -> Result<((bool, bool), (bool, bool, bool)), sqlx::Error> {
    let (events_on, events_forced, on, forced, untenanted): (bool, bool, bool, bool, bool) =
        sqlx::query_as(
            "SELECT e.relrowsecurity, e.relforcerowsecurity, \
                 a.relrowsecurity, a.relforcerowsecurity, EXISTS ( \
                     SELECT 1 FROM pg_policy \
                     WHERE polrelid = a.oid AND polname = 'evc_untenanted') \
             FROM pg_class e, pg_class a \
             WHERE e.oid = 'evc_events'::regclass AND a.oid = 'evc_delivery_attempts'::regclass",
        )
        .fetch_one(admin)
        .await?;
    Ok(((events_on, events_forced), (on, forced, untenanted)))
}

/// Appends `count` notes of `tenant` in one batch through `store`.
async fn append(
    store: &PgStore,
    tenant: &str,
    count: u64,
) -> Result<BTreeSet<Uuid>, Box<dyn std::error::Error + Send + Sync>> {
    append_keys(store, tenant, 0..count).await
}

/// Appends a note of `tenant` for each key number of `keys`, in one batch through `store`.
async fn append_keys(
    store: &PgStore,
    tenant: &str,
    keys: std::ops::Range<u64>,
) -> Result<BTreeSet<Uuid>, Box<dyn std::error::Error + Send + Sync>> {
    let batch = keys
        .map(|n| {
            let payload = support::note(&support::note_key(n));
            NewEvent::new(
                support::event("test.note", "1.0.0", payload),
                AppendOptions::new().tenant_scope(tenant),
            )
        })
        .collect();
    let mut tx = store.begin().await?;
    let receipts = store.append_batch(&mut tx, batch).await?;
    tx.commit().await?;
    Ok(receipts.into_iter().map(|r| r.event_id).collect())
}

/// [`CONSUMER`]'s pending and dead deliveries in the status report `reader` reads.
async fn pending_and_dead(
    reader: &Console,
) -> Result<(i64, i64), Box<dyn std::error::Error + Send + Sync>> {
    let status = reader.status(Duration::from_secs(3600)).await?;
    let consumer = status
        .consumers
        .iter()
        .find(|c| c.consumer == CONSUMER)
        .ok_or("no status row")?;
    Ok((consumer.pending, consumer.dead))
}

async fn two_tenants(admin: &PgPool, logins: &Logins) -> TestResult {
    let (acme, bolt) = (TenantScope::only("acme")?, TenantScope::only("bolt")?);
    let all = TenantScope::all();
    let pool =
        |role: Role, scope: Option<&TenantScope>| logins.pool_for(admin, role, scope.cloned());

    // The contracts' setting takes effect when it is written.
    assert_eq!(
        row_security(admin).await?,
        ((false, false), (true, false, true))
    );
    sqlx::query("UPDATE evc_settings SET require_tenant_scope = true")
        .execute(admin)
        .await?;
    assert_eq!(
        row_security(admin).await?,
        ((true, true), (true, true, false))
    );
    support::deploy(admin, CONSUMER, "^1").await?;

    // Each tenant's producer appends its own events; one cannot write into the other.
    let acme_producer = PgStore::new(pool(Role::Producer, Some(&acme)).await?, TENANT_REGISTRY)?;
    let bolt_producer = PgStore::new(pool(Role::Producer, Some(&bolt)).await?, TENANT_REGISTRY)?;
    let acme_events = append(&acme_producer, "acme", 3).await?;
    let bolt_events = append(&bolt_producer, "bolt", 2).await?;
    let mut tx = acme_producer.begin().await?;
    let foreign = acme_producer
        .append(
            &mut tx,
            support::event("test.note", "1.0.0", support::note(&support::note_key(9))),
            AppendOptions::new().tenant_scope("bolt"),
        )
        .await;
    drop(tx);
    assert!(
        matches!(&foreign, Err(AppendError::Database(error)) if denied(error)),
        "{foreign:?}"
    );

    // Each tenant's dispatcher claims only its tenant's deliveries: acme's two fail dead, one
    // acks; bolt's first fails dead, its second stays pending.
    let lease = Duration::from_secs(30);
    let acme_dispatcher =
        PgStore::new(pool(Role::Dispatcher, Some(&acme)).await?, TENANT_REGISTRY)?;
    let claimed = support::claim(&acme_dispatcher, CONSUMER, "w/acme", 10, lease, false).await?;
    let ids = |claimed: &[evc_runtime::Claimed]| -> BTreeSet<Uuid> {
        claimed
            .iter()
            .map(|c| c.delivery.event_id.parse().expect("a uuid"))
            .collect()
    };
    assert_eq!(ids(&claimed), acme_events);
    for claimed in &claimed[..2] {
        acme_dispatcher
            .fail(
                &claimed.lease,
                FailureClass::Permanent,
                "boom",
                RetryDecision::Dead,
            )
            .await?;
    }
    support::ack_current(&acme_dispatcher, &claimed[2].lease).await?;
    let bolt_dispatcher =
        PgStore::new(pool(Role::Dispatcher, Some(&bolt)).await?, TENANT_REGISTRY)?;
    let claimed = support::claim(&bolt_dispatcher, CONSUMER, "w/bolt", 1, lease, false).await?;
    assert_eq!(claimed.len(), 1);
    let bolt_dead: Uuid = claimed[0].delivery.event_id.parse()?;
    assert!(bolt_events.contains(&bolt_dead));
    bolt_dispatcher
        .fail(
            &claimed[0].lease,
            FailureClass::Permanent,
            "boom",
            RetryDecision::Dead,
        )
        .await?;

    // A session that names no tenant sees nothing and claims nothing.
    let unscoped = PgStore::new(pool(Role::Dispatcher, None).await?, TENANT_REGISTRY)?;
    assert!(
        support::claim(&unscoped, CONSUMER, "w/none", 10, lease, false)
            .await?
            .is_empty()
    );
    let reader = pool(Role::Reader, None).await?;
    for table in [
        "evc_events",
        "evc_deliveries",
        "evc_delivery_attempts",
        "evc_acked_batches",
    ] {
        assert_eq!(support::count(&reader, table).await?, 0, "{table}");
    }
    // Acme's ack is in a batch row of acme's: bolt's reader does not see it.
    for (tenant, acks) in [(&acme, 1), (&bolt, 0)] {
        let reader = pool(Role::Reader, Some(tenant)).await?;
        assert_eq!(support::count(&reader, "evc_acked_batches").await?, acks);
    }
    let blind = Console::connect(reader).await?;
    assert!(blind.timeline(TRACE_ID).await?.is_empty());
    let everything = ReplaySelection::consumer(CONSUMER);
    assert!(blind.dead_letters(&everything).await?.is_empty());

    // Each tenant's reader: status, dead letters and the timeline of the trace every event
    // shares hold its own tenant's rows only.
    let acme_reader = Console::connect(pool(Role::Reader, Some(&acme)).await?).await?;
    assert_eq!(pending_and_dead(&acme_reader).await?, (0, 2));
    let dead: BTreeSet<Uuid> = acme_reader
        .dead_letters(&everything)
        .await?
        .iter()
        .map(|d| d.event_id)
        .collect();
    assert!(dead.is_subset(&acme_events) && dead.len() == 2);
    let seen: BTreeSet<Uuid> = acme_reader
        .timeline(TRACE_ID)
        .await?
        .iter()
        .map(|entry| entry.event_id)
        .collect();
    assert_eq!(seen, acme_events);
    let bolt_reader = Console::connect(pool(Role::Reader, Some(&bolt)).await?).await?;
    assert_eq!(pending_and_dead(&bolt_reader).await?, (1, 1));

    // A replay for acme, proposed and applied by acme's operator and approver, replays acme's
    // two dead deliveries and leaves bolt's where it was.
    let operator = Console::connect(pool(Role::Operator, Some(&acme)).await?).await?;
    let proposed = operator.propose_replay(&everything, "alice").await?;
    let planned: BTreeSet<Uuid> = proposed
        .plan
        .deliveries
        .iter()
        .map(|d| d.event_id)
        .collect();
    assert_eq!(planned, dead);
    let approver = Console::connect(pool(Role::Approver, Some(&acme)).await?).await?;
    let approval = ReplayApproval::new(
        &proposed.plan.digest,
        "fixed in 1.4.2",
        "CHG-7",
        "r-1",
        "bob",
    );
    let applied = approver.replay(&everything, &approval).await?;
    assert_eq!(applied.deliveries, 2);
    assert_eq!(bolt_reader.dead_letters(&everything).await?.len(), 1);
    // The replay, its plan and its items are acme's: bolt sees none of them.
    for (scope, rows) in [(&acme, 1), (&bolt, 0)] {
        let reader = pool(Role::Reader, Some(scope)).await?;
        for table in ["evc_replays", "evc_plans"] {
            assert_eq!(
                support::count(&reader, table).await?,
                rows,
                "{scope}: {table}"
            );
        }
        let items = support::count(&reader, "evc_replay_items").await?;
        assert_eq!(items, 2 * rows, "{scope}: evc_replay_items");
    }

    // A pause for acme holds acme's two replayed deliveries and no other tenant's, also for a
    // dispatcher serving every tenant; a mode, which applies to every tenant, is refused.
    assert!(operator.pause(CONSUMER, &support::change()).await?.paused);
    // A second pause changes nothing and records nothing.
    assert!(operator.pause(CONSUMER, &support::change()).await?.paused);
    assert!(!bolt_reader.consumer_state(CONSUMER).await?.paused);
    assert!(
        matches!(
            operator.set_mode(CONSUMER, evc_runtime::ConsumerMode::Off, &support::change()).await,
            Err(DispatchError::TenantScoped(_, tenant)) if tenant == "acme"
        ),
        "a tenant's operator set a mode"
    );
    // So is the cut-over gate: a tenant's session sees neither the mode changes that open its
    // window nor the other tenants' shadow runs.
    assert!(
        matches!(
            operator.cutover_report(CONSUMER).await,
            Err(DispatchError::TenantScoped(_, tenant)) if tenant == "acme"
        ),
        "a tenant's operator read the cut-over gate"
    );
    // Retention spans every tenant: a tenant's session may not purge.
    let purge = acme_dispatcher
        .purge_expired(std::time::SystemTime::now(), "retention", "ops", true)
        .await;
    assert!(
        matches!(purge, Err(evc_runtime::PurgeError::TenantScoped)),
        "a tenant's session purged: {purge:?}"
    );
    // The relay's cursor passes every tenant's events: a tenant's session may not take it.
    assert!(
        matches!(
            acme_dispatcher.take_cursor("relay", "r/acme", lease).await,
            Err(DispatchError::TenantScoped(_, tenant)) if tenant == "acme"
        ),
        "a tenant's session took the relay cursor"
    );
    let all_dispatcher = PgStore::new(pool(Role::Dispatcher, Some(&all)).await?, TENANT_REGISTRY)?;
    let bolt_pending: BTreeSet<Uuid> = bolt_events
        .iter()
        .copied()
        .filter(|id| *id != bolt_dead)
        .collect();
    let claimed = support::claim(&all_dispatcher, CONSUMER, "w/all", 10, lease, false).await?;
    assert_eq!(ids(&claimed), bolt_pending);
    assert!(
        support::claim(&acme_dispatcher, CONSUMER, "w/acme", 10, lease, false)
            .await?
            .is_empty()
    );
    assert!(!operator.resume(CONSUMER, &support::change()).await?.paused);
    let replayed = support::claim(&acme_dispatcher, CONSUMER, "w/acme", 10, lease, false).await?;
    assert_eq!(ids(&replayed), dead);
    // Acme's pause and resume are recorded in acme's scope (the refused mode is not): bolt
    // reads none of them.
    let recorded: Vec<(String, Option<String>)> = operator
        .state_changes(CONSUMER, 10)
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
    assert!(bolt_reader.state_changes(CONSUMER, 10).await?.is_empty());

    // An idempotency key acme used first is bolt's to use too: bolt's producer, which cannot
    // see acme's event, writes its own instead of being refused (and learning of acme's key);
    // a repeat in bolt's scope is bolt's first event.
    let mut keyed = Vec::new();
    for (producer, tenant) in [
        (&acme_producer, "acme"),
        (&bolt_producer, "bolt"),
        (&bolt_producer, "bolt"),
    ] {
        let mut tx = producer.begin().await?;
        let receipt = producer
            .append(
                &mut tx,
                support::event("test.note", "1.0.0", support::note(&support::note_key(7))),
                AppendOptions::new()
                    .tenant_scope(tenant)
                    .idempotency_key("order-1001"),
            )
            .await?;
        tx.commit().await?;
        keyed.push((receipt.created, receipt.event_id));
    }
    assert_eq!(
        keyed.iter().map(|k| k.0).collect::<Vec<_>>(),
        [true, true, false]
    );
    assert_ne!(keyed[0].1, keyed[1].1);
    assert_eq!(keyed[1].1, keyed[2].1);

    // A replay key acme used is bolt's to use too: bolt's replay of its own dead letter under
    // `r-1` is applied, neither refused nor answered with acme's replay; a repeat in bolt's
    // scope is bolt's replay again.
    let bolt_operator = Console::connect(pool(Role::Operator, Some(&bolt)).await?).await?;
    let bolt_proposed = bolt_operator.propose_replay(&everything, "carol").await?;
    assert_eq!(bolt_proposed.plan.deliveries.len(), 1);
    let bolt_approver = Console::connect(pool(Role::Approver, Some(&bolt)).await?).await?;
    let bolt_approval = ReplayApproval::new(
        &bolt_proposed.plan.digest,
        "fixed in 1.4.3",
        "CHG-8",
        "r-1",
        "dave",
    );
    let bolt_applied = bolt_approver.replay(&everything, &bolt_approval).await?;
    assert_eq!(bolt_applied.deliveries, 1);
    assert_ne!(bolt_applied.replay_id, applied.replay_id);
    assert!(!bolt_applied.repeated);
    let again = bolt_approver.replay(&everything, &bolt_approval).await?;
    assert_eq!(
        (again.replay_id, again.repeated),
        (bolt_applied.replay_id, true)
    );
    assert!(bolt_reader.dead_letters(&everything).await?.is_empty());

    // Every tenant's scope sees both tenants.
    let all_reader = pool(Role::Reader, Some(&all)).await?;
    assert_eq!(support::count(&all_reader, "evc_events").await?, 7);

    // Clearing the setting lifts the policies.
    sqlx::query("UPDATE evc_settings SET require_tenant_scope = false")
        .execute(admin)
        .await?;
    assert_eq!(
        row_security(admin).await?,
        ((false, false), (true, false, true))
    );
    let reader = pool(Role::Reader, None).await?;
    assert_eq!(support::count(&reader, "evc_events").await?, 7);
    Ok(())
}
