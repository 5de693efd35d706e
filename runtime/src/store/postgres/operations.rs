//! Operator controls per consumer: pause, resume and the mode override, kept in
//! `evc_consumer_state` with a revision that grows on every change (docs/runtime.md,
//! "Pause, resume and modes"). The claim reads the row: a paused consumer, or one whose mode is
//! `off`, claims nothing, and its deliveries wait, in order, until it is resumed.

use sqlx::Row;
use sqlx::postgres::PgPool;

use uuid::Uuid;

use super::{PgStore, cutover, replay, sql};
use crate::registry::ConsumerMode;
use crate::store::ops::{
    ConsumerState, Operate, Proposed, ReplayApplied, ReplayApproval, ReplayError, ReplayPlan,
    ReplayRecord, ReplaySelection, SettledDelivery, StateChange, StateChangeRecord, Transition,
    check_change,
};
use crate::store::{CutoverReport, CutoverTerms, DispatchError};
use crate::tenant::ALL_TENANTS;

impl PgStore {
    /// The operator state of `consumer` (the contract's mode, unpaused, revision 0, while no
    /// operator changed it).
    ///
    /// # Errors
    /// [`DispatchError::UnknownConsumer`] or [`DispatchError::Database`].
    pub async fn consumer_state(&self, consumer: &str) -> Result<ConsumerState, DispatchError> {
        let declared = self.declared_mode(consumer)?;
        state_of(&self.inner.pool, consumer, declared).await
    }

    fn declared_mode(&self, consumer: &str) -> Result<ConsumerMode, DispatchError> {
        self.registry()
            .consumer(consumer)
            .map(|descriptor| descriptor.mode)
            .ok_or_else(|| DispatchError::UnknownConsumer(consumer.to_owned()))
    }

    async fn change_state(
        &self,
        consumer: &str,
        transition: Transition,
        change: &StateChange,
    ) -> Result<ConsumerState, DispatchError> {
        let declared = self.declared_mode(consumer)?;
        let gate = crate::store::cutover::terms_of(self.registry(), consumer)?;
        change_state_of(
            &self.inner.pool,
            consumer,
            declared,
            gate,
            transition,
            change,
        )
        .await
    }
}

/// The operator state of `consumer`, whose contract declares mode `declared`, as the session
/// sees it: paused for every tenant or for the session's (docs/runtime.md, "Tenants").
pub(crate) async fn state_of(
    pool: &PgPool,
    consumer: &str,
    declared: ConsumerMode,
) -> Result<ConsumerState, DispatchError> {
    let row = sqlx::query(sql::CONSUMER_STATE)
        .bind(consumer)
        .fetch_one(pool)
        .await?;
    state(consumer, &row, declared)
}

/// The one tenant the sessions of `pool` work for, if they work for one (`evc.tenant`; not
/// set, empty or `*`: none).
pub(crate) async fn session_tenant(pool: &PgPool) -> Result<Option<String>, DispatchError> {
    let tenant: Option<String> = sqlx::query_scalar(sql::SESSION_TENANT)
        .fetch_one(pool)
        .await?;
    Ok(tenant.filter(|tenant| !tenant.is_empty() && tenant != ALL_TENANTS))
}

/// Changes the operator state of `consumer` (contract mode `declared`, cut-over gate `gate`),
/// raises its revision and records `change` with it. In a session of one tenant, a pause or
/// resume is that tenant's only and a mode is refused ([`DispatchError::TenantScoped`]): a mode
/// applies to every tenant. A move to `live` of a consumer not live now passes `gate` first
/// ([`DispatchError::CutoverRefused`]), judged under the consumer's mode lock so no other mode
/// change slips between the judgement and the move.
pub(crate) async fn change_state_of(
    pool: &PgPool,
    consumer: &str,
    declared: ConsumerMode,
    gate: Option<CutoverTerms>,
    transition: Transition,
    change: &StateChange,
) -> Result<ConsumerState, DispatchError> {
    check_change(change)?;
    let by = change.by.trim_matches(' ');
    if let Some(tenant) = session_tenant(pool).await? {
        let statement = match transition {
            Transition::Pause => sql::PAUSE_TENANT,
            Transition::Resume => sql::RESUME_TENANT,
            Transition::Mode(_) => {
                return Err(DispatchError::TenantScoped("a consumer's mode", tenant));
            }
        };
        sqlx::query(statement)
            .bind(consumer)
            .bind(by)
            .bind(&change.reason)
            .execute(pool)
            .await?;
        let changed = state_of(pool, consumer, declared).await?;
        tracing::info!(
            consumer,
            paused = changed.paused,
            scope = "tenant",
            "consumer state changed for one tenant"
        );
        return Ok(changed);
    }
    let mut transaction = pool.begin().await?;
    if transition.mode().is_some() {
        sqlx::query(sql::LOCK_CONSUMER_MODE)
            .bind(consumer)
            .execute(&mut *transaction)
            .await?;
    }
    if let (Transition::Mode(ConsumerMode::Live), Some(terms)) = (transition, gate) {
        let row = sqlx::query(sql::CONSUMER_STATE)
            .bind(consumer)
            .fetch_one(&mut *transaction)
            .await?;
        let current = state(consumer, &row, declared)?.mode;
        if cutover::gated_on(&mut transaction, consumer, current, declared).await? {
            let report = cutover::report_on(&mut transaction, consumer, Some(terms), None).await?;
            if !report.passed() {
                tracing::info!(consumer, "move to live refused by the cut-over gate");
                return Err(DispatchError::CutoverRefused(Box::new(report)));
            }
        }
    }
    let row = sqlx::query(sql::CHANGE_CONSUMER_STATE)
        .bind(consumer)
        .bind(transition.paused())
        .bind(transition.mode().map(ConsumerMode::as_str))
        .bind(declared.as_str())
        .bind(transition.as_str())
        .bind(by)
        .bind(&change.reason)
        .fetch_one(&mut *transaction)
        .await?;
    transaction.commit().await?;
    let changed = state(consumer, &row, declared)?;
    tracing::info!(
        consumer,
        paused = changed.paused,
        mode = changed.mode.as_str(),
        revision = changed.revision,
        "consumer state changed"
    );
    Ok(changed)
}

/// The newest `limit` recorded changes of `consumer`'s state the session may see, newest first.
pub(crate) async fn state_changes_of(
    pool: &PgPool,
    consumer: &str,
    limit: u32,
) -> Result<Vec<StateChangeRecord>, DispatchError> {
    let rows = sqlx::query(sql::STATE_CHANGES)
        .bind(consumer)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    rows.iter()
        .map(|row| {
            let mode: Option<String> = row.try_get("mode")?;
            Ok(StateChangeRecord {
                id: row.try_get("id")?,
                consumer: row.try_get("consumer")?,
                change: row.try_get("change")?,
                mode: mode.as_deref().and_then(ConsumerMode::parse),
                tenant_scope: row.try_get("tenant_scope")?,
                by: row.try_get("changed_by")?,
                reason: row.try_get("reason")?,
                at: row.try_get("changed_at")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(DispatchError::from)
}

/// A consumer state row (`paused`, `mode`, `revision`); a NULL mode is the contract's,
/// `declared`.
fn state(
    consumer: &str,
    row: &sqlx::postgres::PgRow,
    declared: ConsumerMode,
) -> Result<ConsumerState, DispatchError> {
    let mode: Option<String> = row.try_get("mode")?;
    Ok(ConsumerState {
        consumer: consumer.to_owned(),
        paused: row.try_get("paused")?,
        // The table's CHECK allows only the three keywords.
        mode: mode.map_or(declared, |mode| {
            ConsumerMode::parse(&mode).unwrap_or(ConsumerMode::Off)
        }),
        revision: row.try_get("revision")?,
    })
}

impl Operate for PgStore {
    /// Checked against the static registry (a [`crate::Console`] checks against the deployed
    /// mirror instead).
    async fn dead_letters(
        &self,
        selection: &ReplaySelection,
    ) -> Result<Vec<SettledDelivery>, DispatchError> {
        self.declared_mode(&selection.consumer)?;
        Ok(replay::settled(&self.inner.pool, selection).await?)
    }

    async fn replay_plan(&self, selection: &ReplaySelection) -> Result<ReplayPlan, ReplayError> {
        self.registered(&selection.consumer)?;
        Ok(replay::plan(&self.inner.pool, selection).await?)
    }

    async fn propose_replay(
        &self,
        selection: &ReplaySelection,
        planned_by: &str,
    ) -> Result<Proposed<ReplayPlan>, ReplayError> {
        self.registered(&selection.consumer)?;
        replay::propose(&self.inner.pool, selection, planned_by).await
    }

    /// Appends `dlq_replay.scheduled` in the replay's transaction when the store's registry
    /// registers it (docs/runtime.md, "Lifecycle events").
    async fn replay(
        &self,
        selection: &ReplaySelection,
        approval: &ReplayApproval,
    ) -> Result<ReplayApplied, ReplayError> {
        self.registered(&selection.consumer)?;
        replay::apply(&self.inner.pool, Some(self), selection, approval).await
    }

    async fn pause(
        &self,
        consumer: &str,
        change: &StateChange,
    ) -> Result<ConsumerState, DispatchError> {
        self.change_state(consumer, Transition::Pause, change).await
    }

    async fn resume(
        &self,
        consumer: &str,
        change: &StateChange,
    ) -> Result<ConsumerState, DispatchError> {
        self.change_state(consumer, Transition::Resume, change)
            .await
    }

    async fn set_mode(
        &self,
        consumer: &str,
        mode: ConsumerMode,
        change: &StateChange,
    ) -> Result<ConsumerState, DispatchError> {
        self.change_state(consumer, Transition::Mode(mode), change)
            .await
    }

    async fn cutover_report(&self, consumer: &str) -> Result<CutoverReport, DispatchError> {
        let terms = crate::store::cutover::terms_of(self.registry(), consumer)?;
        cutover::report_of(&self.inner.pool, consumer, terms).await
    }

    async fn explain_difference(
        &self,
        consumer: &str,
        event_id: Uuid,
        change: &StateChange,
    ) -> Result<CutoverReport, DispatchError> {
        let terms = crate::store::cutover::terms_of(self.registry(), consumer)?;
        cutover::explain(&self.inner.pool, consumer, event_id, change, terms).await
    }

    async fn state_changes(
        &self,
        consumer: &str,
        limit: u32,
    ) -> Result<Vec<StateChangeRecord>, DispatchError> {
        self.declared_mode(consumer)?;
        state_changes_of(&self.inner.pool, consumer, limit).await
    }

    async fn consumer_state(&self, consumer: &str) -> Result<ConsumerState, DispatchError> {
        PgStore::consumer_state(self, consumer).await
    }

    async fn replays(&self, limit: u32) -> Result<Vec<ReplayRecord>, DispatchError> {
        Ok(replay::replays(&self.inner.pool, limit).await?)
    }

    async fn inventory(
        &self,
        consumer: &str,
        as_of: std::time::SystemTime,
        limit: u32,
    ) -> Result<crate::InventoryReport, DispatchError> {
        let mut connection = self.inner.pool.acquire().await?;
        super::inventory::read(&mut connection, self.registry(), consumer, as_of, limit).await
    }

    async fn propose_inventory(
        &self,
        consumer: &str,
        limit: u32,
        planned_by: &str,
    ) -> Result<Proposed<crate::InventoryReport>, ReplayError> {
        super::inventory::propose(
            &self.inner.pool,
            self.registry(),
            consumer,
            limit,
            planned_by,
        )
        .await
    }

    async fn apply_inventory(
        &self,
        consumer: &str,
        limit: u32,
        approval: &ReplayApproval,
    ) -> Result<crate::InventoryApplied, ReplayError> {
        super::inventory::apply(&self.inner.pool, self.registry(), consumer, limit, approval).await
    }

    async fn purge_expired(
        &self,
        as_of: std::time::SystemTime,
        reason: &str,
        actor: &str,
        apply: bool,
    ) -> Result<crate::RetentionPurge, crate::PurgeError> {
        self.purge_expired_rows(as_of, reason, actor, apply).await
    }
}

impl PgStore {
    /// [`ReplayError::UnknownConsumer`] unless the static registry has `consumer`.
    fn registered(&self, consumer: &str) -> Result<(), ReplayError> {
        match self.declared_mode(consumer) {
            Ok(_) => Ok(()),
            Err(_) => Err(ReplayError::UnknownConsumer(consumer.to_owned())),
        }
    }
}
