//! The outbox the service works on: either store, behind the operator traits both implement.
//! On PostgreSQL each API role works through its own store, connected with the database role
//! of that job, so the database refuses what the caller's role may not do as well.

use std::time::Duration;

use evc_runtime::{
    AttemptRecord, AttemptTotals, Console, ConsumerMode, ConsumerState, CutoverReport,
    DeliveryRecord, DispatchError, EventRecord, EvidenceQuery, EvidenceReport, EvidenceSnapshot,
    FeedEvent, FeedPosition, Intent, LagBreach, Observe, Operate, PgStore, Proposed, PurgeRecord,
    Registry, ReplayApplied, ReplayApproval, ReplayError, ReplayPlan, ReplaySelection,
    ScheduleState, SettledDelivery, SqliteStore, StateChange, StateChangeRecord, StatusReport,
    Store, StoreError, TimelineEntry,
};

use uuid::Uuid;

use crate::auth::Role;

/// The store `evc serve` works on, with the registry it was opened on (a PostgreSQL
/// database's deployed registry; the registry a SQLite file records).
#[derive(Clone)]
pub enum Outbox {
    /// A PostgreSQL database, one store per API role.
    Postgres(Box<PgStores>),
    /// A SQLite outbox file (no database roles: the API's roles are all it has).
    Sqlite(SqliteStore),
}

/// One [`PgStore`] per API role, each on a pool connected with that job's database role
/// (docs/runtime.md, "Roles"), all on the same database and registry.
#[derive(Clone)]
pub struct PgStores {
    /// Connected as `evc_reader`.
    pub reader: PgStore,
    /// Connected as `evc_operator`.
    pub operator: PgStore,
    /// Connected as `evc_approver`.
    pub approver: PgStore,
}

impl PgStores {
    /// One store for every role: a login's own privileges for all of them.
    pub fn single(store: PgStore) -> Self {
        Self {
            reader: store.clone(),
            operator: store.clone(),
            approver: store,
        }
    }

    fn of(&self, role: Role) -> &PgStore {
        match role {
            Role::Reader => &self.reader,
            Role::Operator => &self.operator,
            Role::Approver => &self.approver,
        }
    }
}

/// Runs `$body` with `$store` bound to the store of `$role` in `$outbox`.
macro_rules! on_store {
    ($outbox:expr, $role:expr, $store:ident => $body:expr) => {
        match $outbox {
            Outbox::Postgres(stores) => {
                let $store = stores.of($role);
                $body
            }
            Outbox::Sqlite($store) => $body,
        }
    };
}

impl Outbox {
    /// The registry the store was opened on.
    pub fn registry(&self) -> &Registry {
        on_store!(self, Role::Reader, store => store.registry())
    }

    /// `Ok` when the store answers, is migrated and holds the registry it was opened on.
    pub(crate) async fn ready(&self) -> Result<(), StoreError> {
        on_store!(self, Role::Reader, store => store.verify_registry().await)
    }

    pub(crate) async fn status(&self, window: Duration) -> Result<StatusReport, DispatchError> {
        on_store!(self, Role::Reader, store => store.status(window).await)
    }

    /// The lag breaches, open first, then the newest closed, at most `limit`.
    pub(crate) async fn lag_breaches(&self, limit: u32) -> Result<Vec<LagBreach>, DispatchError> {
        on_store!(self, Role::Reader, store => store.lag_breaches(limit).await)
    }

    /// Usage evidence over `query`'s window.
    pub(crate) async fn evidence(
        &self,
        query: &EvidenceQuery,
    ) -> Result<EvidenceReport, DispatchError> {
        on_store!(self, Role::Reader, store => store.evidence(query).await)
    }

    /// The newest `limit` evidence snapshots, newest slot first.
    pub(crate) async fn evidence_snapshots(
        &self,
        limit: u32,
    ) -> Result<Vec<EvidenceSnapshot>, DispatchError> {
        on_store!(self, Role::Reader, store => store.evidence_snapshots(limit).await)
    }

    /// The newest `limit` purges, newest first.
    pub(crate) async fn purges(&self, limit: u32) -> Result<Vec<PurgeRecord>, DispatchError> {
        on_store!(self, Role::Reader, store => store.purges(limit).await)
    }

    /// Every schedule a scheduler round has seen.
    pub(crate) async fn schedule_states(&self) -> Result<Vec<ScheduleState>, DispatchError> {
        on_store!(self, Role::Reader, store => store.schedule_states().await)
    }

    /// Every attempt since the store was set up, for `/metrics` (reads the whole attempts
    /// table).
    pub(crate) async fn attempt_totals(&self) -> Result<Vec<AttemptTotals>, DispatchError> {
        on_store!(self, Role::Reader, store => store.attempt_totals().await)
    }

    pub(crate) async fn timeline(
        &self,
        trace_id: &str,
    ) -> Result<Vec<TimelineEntry>, DispatchError> {
        on_store!(self, Role::Reader, store => store.timeline(trace_id).await)
    }

    pub(crate) async fn dead_letters(
        &self,
        selection: &ReplaySelection,
    ) -> Result<Vec<SettledDelivery>, DispatchError> {
        on_store!(self, Role::Reader, store => store.dead_letters(selection).await)
    }

    /// A dry run through the store of `role` (an operator's or an approver's).
    pub(crate) async fn replay_plan(
        &self,
        selection: &ReplaySelection,
        role: Role,
    ) -> Result<ReplayPlan, ReplayError> {
        on_store!(self, role, store => store.replay_plan(selection).await)
    }

    pub(crate) async fn propose_replay(
        &self,
        selection: &ReplaySelection,
        planned_by: &str,
    ) -> Result<Proposed<ReplayPlan>, ReplayError> {
        on_store!(self, Role::Operator, store => store.propose_replay(selection, planned_by).await)
    }

    pub(crate) async fn replay(
        &self,
        selection: &ReplaySelection,
        approval: &ReplayApproval,
    ) -> Result<ReplayApplied, ReplayError> {
        on_store!(self, Role::Approver, store => store.replay(selection, approval).await)
    }

    pub(crate) async fn pause(
        &self,
        consumer: &str,
        change: &StateChange,
    ) -> Result<ConsumerState, DispatchError> {
        on_store!(self, Role::Operator, store => store.pause(consumer, change).await)
    }

    pub(crate) async fn resume(
        &self,
        consumer: &str,
        change: &StateChange,
    ) -> Result<ConsumerState, DispatchError> {
        on_store!(self, Role::Operator, store => store.resume(consumer, change).await)
    }

    pub(crate) async fn set_mode(
        &self,
        consumer: &str,
        mode: ConsumerMode,
        change: &StateChange,
    ) -> Result<ConsumerState, DispatchError> {
        on_store!(self, Role::Operator, store => store.set_mode(consumer, mode, change).await)
    }

    /// The inventory of `consumer` as of now, at most `limit` events.
    pub(crate) async fn inventory(
        &self,
        consumer: &str,
        limit: u32,
    ) -> Result<evc_runtime::InventoryReport, DispatchError> {
        let now = std::time::SystemTime::now();
        on_store!(self, Role::Operator, store => store.inventory(consumer, now, limit).await)
    }

    /// Records the inventory of `consumer` as proposed by `planned_by`.
    pub(crate) async fn propose_inventory(
        &self,
        consumer: &str,
        limit: u32,
        planned_by: &str,
    ) -> Result<Proposed<evc_runtime::InventoryReport>, ReplayError> {
        on_store!(self, Role::Operator, store => {
            store.propose_inventory(consumer, limit, planned_by).await
        })
    }

    /// Applies the inventory of `consumer` under `approval`.
    pub(crate) async fn apply_inventory(
        &self,
        consumer: &str,
        limit: u32,
        approval: &ReplayApproval,
    ) -> Result<evc_runtime::InventoryApplied, ReplayError> {
        on_store!(self, Role::Approver, store => {
            store.apply_inventory(consumer, limit, approval).await
        })
    }

    pub(crate) async fn cutover_report(
        &self,
        consumer: &str,
    ) -> Result<CutoverReport, DispatchError> {
        on_store!(self, Role::Operator, store => store.cutover_report(consumer).await)
    }

    pub(crate) async fn explain_difference(
        &self,
        consumer: &str,
        event_id: Uuid,
        change: &StateChange,
    ) -> Result<CutoverReport, DispatchError> {
        on_store!(self, Role::Operator, store => {
            store.explain_difference(consumer, event_id, change).await
        })
    }

    /// Records a legacy outcome in a transaction of its own.
    pub(crate) async fn record_legacy_outcome(
        &self,
        consumer: &str,
        event_id: Uuid,
        outcome: &[Intent],
    ) -> Result<bool, DispatchError> {
        on_store!(self, Role::Operator, store => {
            let mut transaction = Store::begin(store).await?;
            let recorded = store
                .record_legacy_outcome(&mut transaction, consumer, event_id, outcome)
                .await?;
            transaction.commit().await?;
            Ok(recorded)
        })
    }

    pub(crate) async fn state_changes(
        &self,
        consumer: &str,
        limit: u32,
    ) -> Result<Vec<StateChangeRecord>, DispatchError> {
        on_store!(self, Role::Reader, store => store.state_changes(consumer, limit).await)
    }

    /// Whether the outbox can discard dead letters (PostgreSQL's can, SQLite's cannot).
    pub(crate) fn discards(&self) -> bool {
        matches!(self, Outbox::Postgres(_))
    }

    /// The operator console of the database, connected as `role`, with lifecycle events
    /// appended through that role's store (`None`: a SQLite outbox, which has no discard).
    pub(crate) async fn console(&self, role: Role) -> Result<Option<Console>, DispatchError> {
        match self {
            Outbox::Postgres(stores) => {
                let store = stores.of(role);
                let console = Console::connect(store.pool().clone()).await?;
                Ok(Some(console.with_lifecycle(store.clone())))
            }
            Outbox::Sqlite(_) => Ok(None),
        }
    }

    /// The event feed, through the operator's store: the gateway routes on payload fields,
    /// which the reader's database role may not read. No payload leaves the gateway.
    pub(crate) async fn feed(
        &self,
        after: FeedPosition,
        limit: u32,
    ) -> Result<Vec<FeedEvent>, DispatchError> {
        on_store!(self, Role::Operator, store => store.feed(after, limit).await)
    }

    /// Event `event_id`'s stored payload, through the store of `role` (an operator's or an
    /// approver's: the reader's database role may not read payloads).
    pub(crate) async fn payload(
        &self,
        event_id: Uuid,
        role: Role,
    ) -> Result<Option<serde_json::Value>, DispatchError> {
        on_store!(self, role, store => store.payload(event_id).await)
    }

    pub(crate) async fn feed_head(&self) -> Result<FeedPosition, DispatchError> {
        on_store!(self, Role::Operator, store => store.feed_head().await)
    }

    pub(crate) async fn event(&self, event_id: Uuid) -> Result<Option<EventRecord>, DispatchError> {
        on_store!(self, Role::Reader, store => store.event(event_id).await)
    }

    /// Every generation with a row of `event_id`'s delivery to `consumer`, and its attempts.
    pub(crate) async fn delivery_history(
        &self,
        event_id: Uuid,
        consumer: &str,
    ) -> Result<(Vec<DeliveryRecord>, Vec<AttemptRecord>), DispatchError> {
        on_store!(self, Role::Reader, store => {
            let generations = store.deliveries(event_id, consumer).await?;
            let attempts = store.attempts(event_id, consumer).await?;
            Ok((generations, attempts))
        })
    }
}
