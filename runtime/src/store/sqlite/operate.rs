//! Operator controls of the SQLite store ([`Operate`]): dead letters, replay, pause and resume,
//! with PostgreSQL's semantics (docs/runtime.md, "SQLite store"). The plan's digest, the
//! approval checks and the replayability checks are the shared ones of [`crate::store::ops`];
//! what differs is where the deployed registry comes from (the static one: the store owns its
//! file) and the locking (a replay's apply is one `BEGIN IMMEDIATE` transaction, which no other
//! writer shares, instead of row locks and an advisory lock on the key).
//!
//! An applied replay appends `dlq_replay.scheduled` when the registry registers it; without
//! [`ReplayApproval::requested_by`] it names the store (there are no database roles).

use sqlx::Row;
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use uuid::Uuid;

use super::{SqliteStore, epoch_now, parse_uuid, sql};
use crate::registry::ConsumerMode;
use crate::store::ops::{
    ConsumerState, EarlierApply, Operate, Proposal, Proposed, ReplayApplied, ReplayApproval,
    ReplayError, ReplayItem, ReplayPlan, ReplayRecord, ReplaySelection, SettledDelivery,
    SettledStatus, StateChange, StateChangeRecord, StoredPayloads, Transition, check_approval,
    check_change, check_person, check_plan, check_proposable, check_repeat, plan_of, proposal_for,
    proposed, refusal, refusals,
};
use crate::store::{CutoverReport, DispatchError};

impl Operate for SqliteStore {
    async fn dead_letters(
        &self,
        selection: &ReplaySelection,
    ) -> Result<Vec<SettledDelivery>, DispatchError> {
        self.declared_mode(&selection.consumer)?;
        let mut connection = self.inner.pool.acquire().await?;
        Ok(self.settled(&mut connection, selection).await?)
    }

    async fn replay_plan(&self, selection: &ReplaySelection) -> Result<ReplayPlan, ReplayError> {
        self.registered(&selection.consumer)?;
        let mut connection = self.inner.pool.acquire().await?;
        // Both reads in one snapshot: the refusals are those of the planned deliveries.
        let mut tx = sqlx::Connection::begin(&mut *connection).await?;
        let mut plan = plan_of(selection, self.settled(&mut tx, selection).await?);
        plan.not_replayable = refusals(&plan.deliveries, &self.payloads(&mut tx, &plan).await?);
        tx.rollback().await?;
        Ok(plan)
    }

    async fn propose_replay(
        &self,
        selection: &ReplaySelection,
        planned_by: &str,
    ) -> Result<Proposed<ReplayPlan>, ReplayError> {
        check_person("planner", planned_by)?;
        let plan = self.replay_plan(selection).await?;
        check_proposable(&plan)?;
        let plan_id: i64 = sqlx::query_scalar(sql::INSERT_PLAN)
            .bind(&selection.consumer)
            .bind(&plan.digest)
            .bind(i64::try_from(plan.deliveries.len()).unwrap_or(i64::MAX))
            .bind(planned_by.trim())
            .bind(epoch_now())
            .bind(self.tenant())
            .fetch_one(&self.inner.pool)
            .await?;
        let deliveries = plan.deliveries.len();
        Ok(proposed(
            "replay",
            plan_id,
            &selection.consumer,
            deliveries,
            planned_by,
            plan,
        ))
    }

    async fn replay(
        &self,
        selection: &ReplaySelection,
        approval: &ReplayApproval,
    ) -> Result<ReplayApplied, ReplayError> {
        check_approval(approval)?;
        let consumer = self.registered(&selection.consumer)?;
        // The write lock from the start: the plan re-taken here is what is replayed, and a
        // concurrent apply with the same key waits and then finds this one's row.
        let mut tx = self.begin().await?;
        let earlier = sqlx::query(sql::REPLAY_BY_KEY)
            .bind(&approval.idempotency_key)
            .bind(&selection.consumer)
            .bind(self.tenant())
            .fetch_optional(&mut *tx)
            .await?;
        if let Some(row) = earlier {
            tx.rollback().await?;
            let earlier = EarlierApply {
                digest: row.try_get("plan_digest")?,
                reason: row.try_get("reason")?,
                approval_ref: row.try_get("approval_ref")?,
                approved_by: row.try_get("approved_by")?,
            };
            check_repeat(approval, &earlier)?;
            let deliveries: i64 = row.try_get("deliveries")?;
            return Ok(ReplayApplied {
                replay_id: row.try_get("id")?,
                deliveries: u64::try_from(deliveries).unwrap_or(0),
                repeated: true,
            });
        }

        // Dropping `tx` on a refusal rolls it back: nothing is written.
        let plan = plan_of(selection, self.settled(&mut tx, selection).await?);
        check_plan(&plan, approval)?;
        refusal(
            &plan,
            &refusals(&plan.deliveries, &self.payloads(&mut tx, &plan).await?),
        )?;
        let proposals = sqlx::query(sql::PLANS_OF)
            .bind(&selection.consumer)
            .bind(&approval.digest)
            .bind(self.tenant())
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|row| {
                Ok(Proposal {
                    id: row.try_get("id")?,
                    planned_by: row.try_get("planned_by")?,
                    applied: row.try_get("applied")?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        let plan_id = proposal_for(&proposals, approval)?;

        let now = epoch_now();
        let count = i64::try_from(plan.deliveries.len()).unwrap_or(i64::MAX);
        let replay_id: i64 = sqlx::query_scalar(sql::INSERT_REPLAY)
            .bind(&selection.consumer)
            .bind(&plan.digest)
            .bind(&approval.reason)
            .bind(&approval.approval_ref)
            .bind(&approval.idempotency_key)
            .bind(count)
            .bind(now)
            .bind(plan_id)
            .bind(approval.approved_by.trim())
            .bind(self.tenant())
            .fetch_one(&mut *tx)
            .await?;
        let planned = serde_json::Value::from(
            plan.deliveries
                .iter()
                .map(|d| serde_json::json!([d.event_id.to_string(), d.generation]))
                .collect::<Vec<_>>(),
        )
        .to_string();
        // Items first (they read the status each delivery leaves), then the next generations
        // (from the originals' rows), then the originals superseded.
        let mut created = 0;
        for statement in [
            sql::INSERT_REPLAY_ITEMS,
            sql::INSERT_NEXT_GENERATIONS,
            sql::SUPERSEDE_PLANNED,
        ] {
            let done = sqlx::query(statement)
                .bind(replay_id)
                .bind(&selection.consumer)
                .bind(&planned)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            if statement == sql::INSERT_NEXT_GENERATIONS {
                created = done.rows_affected();
            }
        }
        self.emit_replay_scheduled(
            &mut tx,
            replay_id,
            consumer,
            created,
            approval.requested_by,
            now,
        )
        .await?;
        // The consumer's workers wake when this commits, as after an append.
        self.inner.wakeups.arm(&mut tx, &[consumer]).await?;
        tx.commit().await?;
        tracing::info!(
            replay_id,
            consumer = %selection.consumer,
            deliveries = created,
            plan_id,
            approval = %approval.approval_ref,
            "replay applied"
        );
        Ok(ReplayApplied {
            replay_id,
            deliveries: created,
            repeated: false,
        })
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
        self.read_cutover(consumer).await
    }

    async fn explain_difference(
        &self,
        consumer: &str,
        event_id: Uuid,
        change: &StateChange,
    ) -> Result<CutoverReport, DispatchError> {
        self.write_explanation(consumer, event_id, change).await
    }

    async fn state_changes(
        &self,
        consumer: &str,
        limit: u32,
    ) -> Result<Vec<StateChangeRecord>, DispatchError> {
        self.declared_mode(consumer)?;
        let rows = sqlx::query(sql::STATE_CHANGES)
            .bind(consumer)
            .bind(i64::from(limit))
            .bind(self.tenant())
            .fetch_all(&self.inner.pool)
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

    async fn consumer_state(&self, consumer: &str) -> Result<ConsumerState, DispatchError> {
        let declared = self.declared_mode(consumer)?;
        let row = sqlx::query(sql::CONSUMER_STATE)
            .bind(consumer)
            .bind(self.tenant())
            .bind(declared.as_str())
            .fetch_one(&self.inner.pool)
            .await?;
        Ok(state(consumer, &row)?)
    }

    async fn replays(&self, limit: u32) -> Result<Vec<ReplayRecord>, DispatchError> {
        let rows = sqlx::query(sql::READ_REPLAYS)
            .bind(i64::from(limit))
            .bind(self.tenant())
            .fetch_all(&self.inner.pool)
            .await?;
        let mut replays = Vec::with_capacity(rows.len());
        for row in &rows {
            let deliveries: i64 = row.try_get("deliveries")?;
            replays.push(ReplayRecord {
                replay_id: row.try_get("id")?,
                plan_digest: row.try_get("plan_digest")?,
                reason: row.try_get("reason")?,
                approval_ref: row.try_get("approval_ref")?,
                idempotency_key: row.try_get("idempotency_key")?,
                deliveries: u64::try_from(deliveries).unwrap_or(0),
                applied_at: row.try_get("applied_at")?,
                plan_id: row.try_get("plan_id")?,
                planned_by: row.try_get("planned_by")?,
                approved_by: row.try_get("approved_by")?,
                items: Vec::new(),
            });
        }
        let ids = serde_json::Value::from(replays.iter().map(|r| r.replay_id).collect::<Vec<_>>())
            .to_string();
        let items = sqlx::query(sql::READ_REPLAY_ITEMS)
            .bind(ids)
            .fetch_all(&self.inner.pool)
            .await?;
        for row in &items {
            let replay_id: i64 = row.try_get("replay_id")?;
            let from: String = row.try_get("replayed_from")?;
            let generation: i64 = row.try_get("generation")?;
            let item = ReplayItem {
                event_id: parse_uuid(&row.try_get::<String, _>("event_id")?)?,
                consumer: row.try_get("consumer")?,
                generation: i32::try_from(generation).unwrap_or(i32::MAX),
                // The table's CHECK allows only the two settled statuses.
                replayed_from: SettledStatus::parse(&from).unwrap_or(SettledStatus::Dead),
                version: row.try_get("schema_version")?,
            };
            if let Some(replay) = replays.iter_mut().find(|r| r.replay_id == replay_id) {
                replay.items.push(item);
            }
        }
        Ok(replays)
    }

    async fn inventory(
        &self,
        consumer: &str,
        as_of: std::time::SystemTime,
        limit: u32,
    ) -> Result<crate::InventoryReport, DispatchError> {
        let mut connection = self.inner.pool.acquire().await?;
        self.read_inventory(&mut connection, consumer, as_of, limit)
            .await
    }

    async fn propose_inventory(
        &self,
        consumer: &str,
        limit: u32,
        planned_by: &str,
    ) -> Result<Proposed<crate::InventoryReport>, ReplayError> {
        self.propose_inventory_plan(consumer, limit, planned_by)
            .await
    }

    async fn apply_inventory(
        &self,
        consumer: &str,
        limit: u32,
        approval: &ReplayApproval,
    ) -> Result<crate::InventoryApplied, ReplayError> {
        self.apply_inventory_plan(consumer, limit, approval).await
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

impl SqliteStore {
    /// The contract's mode of `consumer`, which must be in the static registry.
    fn declared_mode(&self, consumer: &str) -> Result<ConsumerMode, DispatchError> {
        self.registry()
            .consumer(consumer)
            .map(|descriptor| descriptor.mode)
            .ok_or_else(|| DispatchError::UnknownConsumer(consumer.to_owned()))
    }

    /// The registry's name of `consumer` ([`ReplayError::UnknownConsumer`] if it has none).
    fn registered(&self, consumer: &str) -> Result<&'static str, ReplayError> {
        self.registry()
            .consumer(consumer)
            .map(|descriptor| descriptor.name)
            .ok_or_else(|| ReplayError::UnknownConsumer(consumer.to_owned()))
    }

    /// Changes the operator state of `consumer`, raises its revision and records `change`, in
    /// one write transaction. A handle of one tenant pauses and resumes for that tenant only
    /// and is refused a mode ([`DispatchError::TenantScoped`]): a mode applies to every tenant.
    async fn change_state(
        &self,
        consumer: &str,
        transition: Transition,
        change: &StateChange,
    ) -> Result<ConsumerState, DispatchError> {
        check_change(change)?;
        let declared = self.declared_mode(consumer)?;
        if let Some(tenant) = self.tenant() {
            return self
                .change_tenant_state(consumer, tenant, transition, change)
                .await;
        }
        let gate = crate::store::cutover::terms_of(self.registry(), consumer)?;
        let mode = transition.mode().map(ConsumerMode::as_str);
        let now = epoch_now();
        let mut tx = self.begin().await?;
        if let (Transition::Mode(ConsumerMode::Live), Some(terms)) = (transition, gate) {
            let row = sqlx::query(sql::CONSUMER_STATE)
                .bind(consumer)
                .bind(None::<&str>)
                .bind(declared.as_str())
                .fetch_one(&mut *tx)
                .await?;
            let current = state(consumer, &row)?.mode;
            if Self::gated_on(&mut tx, consumer, current, declared).await? {
                let report = self.report_on(&mut tx, consumer, Some(terms), None).await?;
                if !report.passed() {
                    tracing::info!(consumer, "move to live refused by the cut-over gate");
                    return Err(DispatchError::CutoverRefused(Box::new(report)));
                }
            }
        }
        let row = sqlx::query(sql::CHANGE_CONSUMER_STATE)
            .bind(consumer)
            .bind(transition.paused())
            .bind(mode)
            .bind(declared.as_str())
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
        sqlx::query(sql::INSERT_STATE_CHANGE)
            .bind(consumer)
            .bind(transition.as_str())
            .bind(mode)
            .bind(change.by.trim_matches(' '))
            .bind(&change.reason)
            .bind(now)
            .bind(None::<&str>)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        let changed = state(consumer, &row)?;
        tracing::info!(
            consumer,
            paused = changed.paused,
            mode = changed.mode.as_str(),
            revision = changed.revision,
            "consumer state changed"
        );
        Ok(changed)
    }

    /// Pauses or resumes `consumer` for `tenant` only (`evc_tenant_pauses`) and records the
    /// change in the tenant's scope, in one write transaction; a pause already in place, or a
    /// resume without the tenant's pause, changes and records nothing.
    async fn change_tenant_state(
        &self,
        consumer: &str,
        tenant: &str,
        transition: Transition,
        change: &StateChange,
    ) -> Result<ConsumerState, DispatchError> {
        let statement = match transition {
            Transition::Pause => sql::PAUSE_TENANT,
            Transition::Resume => sql::RESUME_TENANT,
            Transition::Mode(_) => {
                return Err(DispatchError::TenantScoped(
                    "a consumer's mode",
                    tenant.to_owned(),
                ));
            }
        };
        let now = epoch_now();
        let mut tx = self.begin().await?;
        let changed = sqlx::query(statement)
            .bind(consumer)
            .bind(tenant)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?
            .is_some();
        if changed {
            sqlx::query(sql::INSERT_STATE_CHANGE)
                .bind(consumer)
                .bind(transition.as_str())
                .bind(None::<&str>)
                .bind(change.by.trim_matches(' '))
                .bind(&change.reason)
                .bind(now)
                .bind(tenant)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        let state = self.consumer_state(consumer).await?;
        tracing::info!(
            consumer,
            paused = state.paused,
            scope = "tenant",
            "consumer state changed for one tenant"
        );
        Ok(state)
    }

    /// The settled deliveries `selection` takes, on `connection`, each with the requirement
    /// under which the static registry subscribes the consumer to its type.
    async fn settled(
        &self,
        connection: &mut SqliteConnection,
        selection: &ReplaySelection,
    ) -> Result<Vec<SettledDelivery>, sqlx::Error> {
        let statuses = serde_json::Value::from(
            selection
                .statuses
                .iter()
                .map(|status| status.as_str())
                .collect::<Vec<_>>(),
        )
        .to_string();
        let ids = serde_json::Value::from(
            selection
                .event_ids
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
        )
        .to_string();
        let rows = sqlx::query(sql::SETTLED_DELIVERIES)
            .bind(&selection.consumer)
            .bind(statuses)
            .bind(selection.event_type.as_deref())
            .bind(ids)
            .bind(i64::from(selection.limit.max(1)))
            .bind(self.tenant())
            .fetch_all(&mut *connection)
            .await?;
        let subscriptions = self
            .registry()
            .consumer(&selection.consumer)
            .map_or(&[][..], |descriptor| descriptor.subscriptions);
        rows.iter()
            .map(|row| {
                let event_type: String = row.try_get("event_type")?;
                let status: String = row.try_get("status")?;
                Ok(SettledDelivery {
                    event_id: parse_uuid(&row.try_get::<String, _>("event_id")?)?,
                    consumer: row.try_get("consumer")?,
                    generation: i32::try_from(row.try_get::<i64, _>("generation")?)
                        .unwrap_or(i32::MAX),
                    status: SettledStatus::parse(&status).unwrap_or(SettledStatus::Dead),
                    attempts: i32::try_from(row.try_get::<i64, _>("attempt")?).unwrap_or(i32::MAX),
                    last_error_code: row.try_get("last_error_code")?,
                    settled_at: row.try_get("settled_at")?,
                    requirement: subscriptions
                        .iter()
                        .find(|subscription| subscription.event == event_type)
                        .map(|subscription| subscription.requirement.to_owned()),
                    event_type,
                    version: row.try_get("schema_version")?,
                })
            })
            .collect()
    }

    /// Each planned event's payload and its version's schema in the static registry.
    async fn payloads(
        &self,
        connection: &mut SqliteConnection,
        plan: &ReplayPlan,
    ) -> Result<StoredPayloads, sqlx::Error> {
        let ids = serde_json::Value::from(
            plan.deliveries
                .iter()
                .map(|d| d.event_id.to_string())
                .collect::<Vec<_>>(),
        )
        .to_string();
        let rows = sqlx::query(sql::REPLAY_PAYLOADS)
            .bind(ids)
            .fetch_all(&mut *connection)
            .await?;
        let mut stored = StoredPayloads::with_capacity(rows.len());
        for row in &rows {
            let event_id = parse_uuid(&row.try_get::<String, _>("event_id")?)?;
            let schema = plan
                .deliveries
                .iter()
                .find(|d| d.event_id == event_id)
                .and_then(|d| {
                    self.registry()
                        .event(&d.event_type)?
                        .versions
                        .iter()
                        .find(|version| version.version == d.version)
                })
                .map(|version| version.schema.to_owned());
            stored.insert(event_id, (row.try_get("payload")?, schema));
        }
        Ok(stored)
    }
}

/// A consumer state row.
fn state(consumer: &str, row: &SqliteRow) -> Result<ConsumerState, sqlx::Error> {
    let mode: String = row.try_get("mode")?;
    Ok(ConsumerState {
        consumer: consumer.to_owned(),
        paused: row.try_get("paused")?,
        // The table's CHECK allows only the three keywords.
        mode: ConsumerMode::parse(&mode).unwrap_or(ConsumerMode::Off),
        revision: row.try_get("revision")?,
    })
}
