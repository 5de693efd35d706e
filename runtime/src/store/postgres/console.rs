//! The operator console: status, timeline and consumer controls over a database, for the
//! consumers its registry mirror lists (the contracts deployed there, as the generated registry
//! migration wrote them). It needs no static registry, so a command-line tool can run it
//! against any evc database; `evc status`, `evc timeline` and `evc consumer` do.

use std::time::Duration;

use sqlx::Row;
use sqlx::postgres::PgPool;

use super::observe::{self, WatchedConsumer};
use super::replay::{self, DiscardApplied, DiscardPlan, DiscardRecord};
use super::{PgStore, sql};
use super::{cutover, operations};
use crate::registry::ConsumerMode;
use crate::store::observe::ClassOwner;
use crate::store::ops::{
    ConsumerState, Proposed, ReplayApplied, ReplayApproval, ReplayError, ReplayPlan,
    ReplaySelection, SettledDelivery, StateChange, StateChangeRecord, Transition,
};
use crate::store::postgres::{AttemptTotals, StatusReport, TimelineEntry};
use crate::store::{CutoverReport, CutoverTerms, DispatchError};

/// Operator commands over one database.
#[derive(Debug, Clone)]
pub struct Console {
    pool: PgPool,
    consumers: Vec<WatchedConsumer>,
    /// The deployed schedules' names (the settings row's).
    schedules: Vec<String>,
    /// The deployed lag thresholds' (consumer, producer class).
    lag_pairs: Vec<(String, String)>,
    /// The deployed cut-over gates, by consumer.
    gates: Vec<(String, CutoverTerms)>,
    /// The store whose registry decides which lifecycle events replays and discards emit.
    lifecycle: Option<PgStore>,
}

impl Console {
    /// A console over `pool`, reading the deployed consumers from the registry mirror.
    ///
    /// # Errors
    /// [`DispatchError::Database`] (also when the database has no evc tables).
    pub async fn connect(pool: PgPool) -> Result<Self, DispatchError> {
        let rows = sqlx::query(sql::DEPLOYED_CONSUMERS)
            .fetch_all(&pool)
            .await?;
        let classes = deployed_class_owners(&pool).await?;
        let mut consumers = Vec::with_capacity(rows.len());
        for row in &rows {
            let mode: String = row.try_get("mode")?;
            let threshold: i64 = row.try_get("heartbeat_threshold_ms")?;
            let name: String = row.try_get("name")?;
            let class = classes
                .iter()
                .find(|(consumer, _)| *consumer == name)
                .map(|(_, class)| class.clone());
            consumers.push(
                WatchedConsumer::new(
                    name,
                    ConsumerMode::parse(&mode).unwrap_or(ConsumerMode::Live),
                    Duration::from_millis(u64::try_from(threshold).unwrap_or(0)),
                )
                .with_class(class),
            );
        }
        let (schedules, lag_pairs) = super::deployed::deployed_watched(&pool).await?;
        let gates = cutover::deployed_gate_list(&pool).await?;
        Ok(Self {
            pool,
            consumers,
            schedules,
            lag_pairs,
            gates,
            lifecycle: None,
        })
    }

    /// This console, with replays and discards appending their lifecycle events
    /// (`dlq_replay.scheduled`, `job.discarded`) through `store`, when its registry registers
    /// them (docs/runtime.md, "Lifecycle events"). Without it they emit none: the registry
    /// mirror a console reads holds no payload policy to check an append against.
    pub fn with_lifecycle(mut self, store: PgStore) -> Self {
        self.lifecycle = Some(store);
        self
    }

    /// The deployed consumers, by name.
    pub fn consumers(&self) -> &[WatchedConsumer] {
        &self.consumers
    }

    /// The deployed cut-over gate of `consumer`, as the console read it when it connected.
    fn gate(&self, consumer: &str) -> Option<CutoverTerms> {
        self.gates
            .iter()
            .find(|(name, _)| name == consumer)
            .map(|(_, gate)| *gate)
    }

    fn declared_mode(&self, consumer: &str) -> Result<ConsumerMode, DispatchError> {
        self.consumers
            .iter()
            .find(|c| c.name == consumer)
            .map(|c| c.declared_mode)
            .ok_or_else(|| DispatchError::UnknownConsumer(consumer.to_owned()))
    }

    /// The status report of every deployed consumer over the last `window` (see
    /// [`crate::PgStore::status`]; the stale-token count is the dispatchers' and reads 0 here).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn status(&self, window: Duration) -> Result<StatusReport, DispatchError> {
        let schedules: Vec<&str> = self.schedules.iter().map(String::as_str).collect();
        let pairs: Vec<(&str, &str)> = self
            .lag_pairs
            .iter()
            .map(|(consumer, class)| (consumer.as_str(), class.as_str()))
            .collect();
        let gates: Vec<(&str, CutoverTerms)> = self
            .gates
            .iter()
            .map(|(consumer, gate)| (consumer.as_str(), *gate))
            .collect();
        let watched = observe::Watched {
            schedules: &schedules,
            lag_pairs: &pairs,
            gates: &gates,
        };
        observe::status(&self.pool, &self.consumers, watched, window).await
    }

    /// Every attempt of the deployed consumers since the store was set up
    /// ([`crate::Observe::attempt_totals`]; reads the whole attempts table).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn attempt_totals(&self) -> Result<Vec<AttemptTotals>, DispatchError> {
        let names: Vec<&str> = self.consumers.iter().map(|c| c.name.as_str()).collect();
        observe::attempt_totals(&self.pool, &names).await
    }

    /// Everything recorded for one W3C trace id, in time order.
    ///
    /// # Errors
    /// [`DispatchError::TraceId`] when `trace_id` is not 32 lower-case hex digits (not all
    /// zero); [`DispatchError::Database`].
    pub async fn timeline(&self, trace_id: &str) -> Result<Vec<TimelineEntry>, DispatchError> {
        observe::timeline(&self.pool, trace_id).await
    }

    /// The operator state of a deployed consumer.
    ///
    /// # Errors
    /// [`DispatchError::UnknownConsumer`] or [`DispatchError::Database`].
    pub async fn consumer_state(&self, consumer: &str) -> Result<ConsumerState, DispatchError> {
        let declared = self.declared_mode(consumer)?;
        operations::state_of(&self.pool, consumer, declared).await
    }

    /// Pauses a deployed consumer, recording who and why (see [`crate::Operate::pause`]).
    ///
    /// # Errors
    /// [`DispatchError::InvalidChange`], [`DispatchError::UnknownConsumer`] or
    /// [`DispatchError::Database`].
    pub async fn pause(
        &self,
        consumer: &str,
        change: &StateChange,
    ) -> Result<ConsumerState, DispatchError> {
        let declared = self.declared_mode(consumer)?;
        operations::change_state_of(
            &self.pool,
            consumer,
            declared,
            None,
            Transition::Pause,
            change,
        )
        .await
    }

    /// Resumes a deployed consumer, recording who and why.
    ///
    /// # Errors
    /// [`DispatchError::InvalidChange`], [`DispatchError::UnknownConsumer`] or
    /// [`DispatchError::Database`].
    pub async fn resume(
        &self,
        consumer: &str,
        change: &StateChange,
    ) -> Result<ConsumerState, DispatchError> {
        let declared = self.declared_mode(consumer)?;
        operations::change_state_of(
            &self.pool,
            consumer,
            declared,
            None,
            Transition::Resume,
            change,
        )
        .await
    }

    /// Overrides the mode of a deployed consumer, recording who and why; a move to `live`
    /// passes the deployed cut-over gate first (see [`crate::Operate::set_mode`]).
    ///
    /// # Errors
    /// [`DispatchError::InvalidChange`], [`DispatchError::UnknownConsumer`],
    /// [`DispatchError::TenantScoped`], [`DispatchError::CutoverRefused`] or
    /// [`DispatchError::Database`].
    pub async fn set_mode(
        &self,
        consumer: &str,
        mode: ConsumerMode,
        change: &StateChange,
    ) -> Result<ConsumerState, DispatchError> {
        let declared = self.declared_mode(consumer)?;
        let gate = self.gate(consumer);
        operations::change_state_of(
            &self.pool,
            consumer,
            declared,
            gate,
            Transition::Mode(mode),
            change,
        )
        .await
    }

    /// A deployed consumer's shadow runs against its deployed cut-over gate (see
    /// [`crate::Operate::cutover_report`]).
    ///
    /// # Errors
    /// [`DispatchError::UnknownConsumer`] or [`DispatchError::Database`].
    pub async fn cutover_report(&self, consumer: &str) -> Result<CutoverReport, DispatchError> {
        self.declared_mode(consumer)?;
        let gate = self.gate(consumer);
        cutover::report_of(&self.pool, consumer, gate).await
    }

    /// Explains the difference of a deployed consumer's shadow run of `event_id` (see
    /// [`crate::Operate::explain_difference`]).
    ///
    /// # Errors
    /// [`DispatchError::InvalidChange`], [`DispatchError::UnknownConsumer`] or
    /// [`DispatchError::Database`].
    pub async fn explain_difference(
        &self,
        consumer: &str,
        event_id: uuid::Uuid,
        change: &StateChange,
    ) -> Result<CutoverReport, DispatchError> {
        self.declared_mode(consumer)?;
        let gate = self.gate(consumer);
        cutover::explain(&self.pool, consumer, event_id, change, gate).await
    }

    /// The newest `limit` recorded changes of a deployed consumer's state, newest first.
    ///
    /// # Errors
    /// [`DispatchError::UnknownConsumer`] or [`DispatchError::Database`].
    pub async fn state_changes(
        &self,
        consumer: &str,
        limit: u32,
    ) -> Result<Vec<StateChangeRecord>, DispatchError> {
        self.declared_mode(consumer)?;
        operations::state_changes_of(&self.pool, consumer, limit).await
    }

    /// The dead and quarantined deliveries `selection` takes, oldest first (`evc dlq list`).
    ///
    /// # Errors
    /// [`DispatchError::UnknownConsumer`] or [`DispatchError::Database`].
    pub async fn dead_letters(
        &self,
        selection: &ReplaySelection,
    ) -> Result<Vec<SettledDelivery>, DispatchError> {
        self.declared_mode(&selection.consumer)?;
        Ok(replay::settled(&self.pool, selection).await?)
    }

    /// A replay's dry run: the deliveries `selection` would replay and the plan's digest.
    /// Nothing is written.
    ///
    /// # Errors
    /// [`ReplayError::UnknownConsumer`] or [`ReplayError::Database`].
    pub async fn replay_plan(
        &self,
        selection: &ReplaySelection,
    ) -> Result<ReplayPlan, ReplayError> {
        self.deployed(&selection.consumer)?;
        Ok(replay::plan(&self.pool, selection).await?)
    }

    /// Records the plan of `selection` as proposed by `planned_by`, as
    /// [`crate::Operate::propose_replay`]: only a recorded plan is applied, by someone else.
    ///
    /// # Errors
    /// Every [`ReplayError`] but [`ReplayError::Database`] names a refusal.
    pub async fn propose_replay(
        &self,
        selection: &ReplaySelection,
        planned_by: &str,
    ) -> Result<Proposed<ReplayPlan>, ReplayError> {
        self.deployed(&selection.consumer)?;
        replay::propose(&self.pool, selection, planned_by).await
    }

    /// Applies a replay in one transaction: the approval's fields are checked, a key applied
    /// before answers with its first result, the plan is taken again with its rows locked and
    /// must have the approval's digest, someone other than the approver must have proposed
    /// it, and every planned event's version must still be accepted by the consumer. Then each planned delivery becomes `replayed`, and a new
    /// delivery (its next generation, due now, referencing the replay) is written; the replay
    /// and its items are recorded for audit. On any refusal nothing is written.
    ///
    /// # Errors
    /// Every [`ReplayError`] but [`ReplayError::Database`] names a refusal.
    pub async fn replay(
        &self,
        selection: &ReplaySelection,
        approval: &ReplayApproval,
    ) -> Result<ReplayApplied, ReplayError> {
        self.deployed(&selection.consumer)?;
        replay::apply(&self.pool, self.lifecycle.as_ref(), selection, approval).await
    }

    /// A discard's dry run: the deliveries `selection` would discard and the plan's digest
    /// (a discard's own: a replay's digest does not apply it). Nothing is written.
    ///
    /// # Errors
    /// [`ReplayError::UnknownConsumer`] or [`ReplayError::Database`].
    pub async fn discard_plan(
        &self,
        selection: &ReplaySelection,
    ) -> Result<DiscardPlan, ReplayError> {
        self.deployed(&selection.consumer)?;
        Ok(replay::discard_plan(&self.pool, selection).await?)
    }

    /// Records the discard plan of `selection` as proposed by `planned_by`: only a recorded
    /// plan is discarded, by someone else ([`Console::discard`]).
    ///
    /// # Errors
    /// Every [`ReplayError`] but [`ReplayError::Database`] names a refusal
    /// ([`ReplayError::NothingToDiscard`] for an empty plan).
    pub async fn propose_discard(
        &self,
        selection: &ReplaySelection,
        planned_by: &str,
    ) -> Result<Proposed<DiscardPlan>, ReplayError> {
        self.deployed(&selection.consumer)?;
        replay::propose_discard(&self.pool, selection, planned_by).await
    }

    /// Discards dead-lettered or quarantined deliveries in one transaction: the approval's
    /// fields are checked as a replay's, a key applied before answers with its first result,
    /// the plan is taken again with its rows locked and must have the approval's digest, and
    /// someone other than the approver must have proposed it.
    /// Then one `evc_discards` row records who approved it, why, when and each delivery, and
    /// every planned delivery becomes `discarded` (its row stays; no listing, claim or replay
    /// takes it again). On any refusal nothing is written.
    ///
    /// # Errors
    /// Every [`ReplayError`] but [`ReplayError::Database`] names a refusal
    /// ([`ReplayError::NothingToDiscard`] for an empty plan).
    pub async fn discard(
        &self,
        selection: &ReplaySelection,
        approval: &ReplayApproval,
    ) -> Result<DiscardApplied, ReplayError> {
        self.deployed(&selection.consumer)?;
        replay::discard(&self.pool, self.lifecycle.as_ref(), selection, approval).await
    }

    /// The oldest `limit` applied discards, oldest first: the audit of who discarded what,
    /// why and when. A refused discard writes none.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn discards(&self, limit: u32) -> Result<Vec<DiscardRecord>, DispatchError> {
        Ok(replay::discards(&self.pool, limit).await?)
    }

    fn deployed(&self, consumer: &str) -> Result<(), ReplayError> {
        match self.declared_mode(consumer) {
            Ok(_) => Ok(()),
            Err(_) => Err(ReplayError::UnknownConsumer(consumer.to_owned())),
        }
    }
}

/// The executor class and heartbeat owner of each deployed consumer that runs on a deployed
/// class; none in a database without the classes' mirror (before the twenty-second step).
async fn deployed_class_owners(pool: &PgPool) -> Result<Vec<(String, ClassOwner)>, DispatchError> {
    let present: bool = sqlx::query_scalar(sql::HAS_EXECUTOR_CLASSES)
        .fetch_one(pool)
        .await?;
    if !present {
        return Ok(Vec::new());
    }
    sqlx::query(sql::DEPLOYED_CLASS_OWNERS)
        .fetch_all(pool)
        .await?
        .iter()
        .map(|row| {
            Ok((
                row.try_get("consumer")?,
                ClassOwner::new(
                    row.try_get::<String, _>("executor_class")?,
                    row.try_get::<String, _>("heartbeat_owner")?,
                ),
            ))
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()
        .map_err(DispatchError::from)
}
