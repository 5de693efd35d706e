//! The inventory of a consumer in the embedded SQLite store ([`crate::store::inventory`]): its
//! candidates read through the store's tenant filter, a proposal recorded as an inventory plan,
//! and an apply that holds the write lock from the start, takes the inventory again, checks it
//! against the approval and the recorded plan, and writes the deliveries and the ledger in one
//! transaction.

use std::time::SystemTime;

use sqlx::Row;
use sqlx::sqlite::SqliteConnection;

use super::{SqliteStore, epoch_now, sql};
use crate::registry::ConsumerMode;
use crate::store::DispatchError;
use crate::store::inventory::{
    self, InventoryApplied, InventoryClass, InventoryReason, InventoryReport,
};
use crate::store::ops::{
    self, EarlierApply, Proposal, Proposed, ReplayApproval, ReplayError, check_approval,
    check_person, proposed,
};

impl SqliteStore {
    /// The inventory of `consumer` as of `as_of`, read on `connection`.
    pub(super) async fn read_inventory(
        &self,
        connection: &mut SqliteConnection,
        consumer: &str,
        as_of: SystemTime,
        limit: u32,
    ) -> Result<InventoryReport, DispatchError> {
        let (descriptor, types) = inventory::subscribed(self.registry(), consumer)?;
        let candidates: Vec<inventory::CandidateRow> = sqlx::query_as(sql::INVENTORY_CANDIDATES)
            .bind(serde_json::to_string(&types).unwrap_or_default())
            .bind(descriptor.name)
            .bind(inventory::read_limit(limit))
            .bind(self.tenant())
            .fetch_all(&mut *connection)
            .await?;
        let purged_through: Option<f64> = sqlx::query_scalar(sql::RETENTION_PURGED_THROUGH)
            .fetch_one(&mut *connection)
            .await?;
        Ok(inventory::classify(
            self.registry(),
            descriptor,
            inventory::Window {
                as_of,
                limit,
                purged_through,
            },
            candidates.into_iter().map(Into::into).collect(),
        ))
    }

    /// The newest applied inventory of each consumer in the handle's tenant.
    pub(super) async fn newest_inventories(
        &self,
    ) -> Result<Vec<inventory::InventoryRecord>, DispatchError> {
        let rows: Vec<inventory::RecordColumns> = sqlx::query_as(sql::NEWEST_INVENTORIES)
            .bind(self.tenant())
            .fetch_all(&self.inner.pool)
            .await?;
        Ok(rows.into_iter().map(inventory::record_of).collect())
    }

    /// See [`crate::Operate::propose_inventory`].
    pub(super) async fn propose_inventory_plan(
        &self,
        consumer: &str,
        limit: u32,
        planned_by: &str,
    ) -> Result<Proposed<InventoryReport>, ReplayError> {
        check_person("planner", planned_by)?;
        let mut connection = self.inner.pool.acquire().await?;
        let report = self
            .read_inventory(&mut connection, consumer, SystemTime::now(), limit)
            .await
            .map_err(inventory::refusal)?;
        inventory::check_proposable(&report)?;
        let plan_id: i64 = sqlx::query_scalar(sql::INSERT_INVENTORY_PLAN)
            .bind(&report.consumer)
            .bind(&report.digest)
            .bind(i64::try_from(report.items.len()).unwrap_or(i64::MAX))
            .bind(planned_by.trim())
            .bind(epoch_now())
            .bind(self.tenant())
            .fetch_one(&mut *connection)
            .await?;
        let events = report.items.len();
        Ok(proposed(
            "inventory",
            plan_id,
            consumer,
            events,
            planned_by,
            report,
        ))
    }

    /// See [`crate::Operate::apply_inventory`].
    pub(super) async fn apply_inventory_plan(
        &self,
        consumer: &str,
        limit: u32,
        approval: &ReplayApproval,
    ) -> Result<InventoryApplied, ReplayError> {
        check_approval(approval)?;
        let descriptor = self
            .registry()
            .consumer(consumer)
            .ok_or_else(|| ReplayError::UnknownConsumer(consumer.to_owned()))?;
        // The write lock from the start: the inventory taken here is what is applied, and a
        // concurrent apply waits, then finds this one's deliveries or key.
        let mut tx = self.begin().await?;
        if let Some(row) = sqlx::query(sql::INVENTORY_BY_KEY)
            .bind(consumer)
            .bind(&approval.idempotency_key)
            .bind(self.tenant())
            .fetch_optional(&mut *tx)
            .await?
        {
            tx.rollback().await?;
            ops::check_repeat(
                approval,
                &EarlierApply {
                    digest: row.try_get("plan_digest")?,
                    reason: row.try_get("reason")?,
                    approval_ref: row.try_get("approval_ref")?,
                    approved_by: row.try_get("approved_by")?,
                },
            )?;
            let counts = inventory::counts_of(row.try_get("counts")?);
            return Ok(inventory::repeated(row.try_get("id")?, counts));
        }

        // Dropping `tx` on a refusal rolls it back: nothing is written.
        let report = self
            .read_inventory(&mut tx, consumer, SystemTime::now(), limit)
            .await
            .map_err(inventory::refusal)?;
        inventory::check_applicable(&report, approval)?;
        let proposals = sqlx::query(sql::INVENTORY_PLANS_OF)
            .bind(consumer)
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
        let plan_id = ops::proposal_for(&proposals, approval)?;
        let mode: String = sqlx::query(sql::CONSUMER_STATE)
            .bind(consumer)
            .bind(self.tenant())
            .bind(descriptor.mode.as_str())
            .fetch_one(&mut *tx)
            .await?
            .try_get("mode")?;
        if ConsumerMode::parse(&mode) == Some(ConsumerMode::Live) {
            return Err(ReplayError::ConsumerLive(consumer.to_owned()));
        }

        let now = epoch_now();
        let inventory_id: i64 = sqlx::query_scalar(sql::INSERT_INVENTORY)
            .bind(consumer)
            .bind(plan_id)
            .bind(&report.digest)
            .bind(&approval.reason)
            .bind(&approval.approval_ref)
            .bind(&approval.idempotency_key)
            .bind(approval.approved_by.trim())
            .bind(inventory::counts_json(&report.counts))
            .bind(self.tenant())
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
        let rows: Vec<serde_json::Value> = report
            .items
            .iter()
            .map(|item| {
                serde_json::json!([
                    item.event_id.to_string(),
                    item.class.as_str(),
                    item.reason.map(InventoryReason::code),
                    item.target_version,
                    item.payload_digest,
                    item.repaired_digest,
                ])
            })
            .collect();
        let recorded = sqlx::query(sql::INSERT_INVENTORY_ITEMS)
            .bind(inventory_id)
            .bind(consumer)
            .bind(serde_json::Value::from(rows).to_string())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let ids = |classes: &[InventoryClass]| {
            let ids: Vec<String> = inventory::events_of(&report, classes)
                .iter()
                .map(ToString::to_string)
                .collect();
            serde_json::Value::from(ids).to_string()
        };
        let written = sqlx::query(sql::DELIVER_INVENTORY)
            .bind(descriptor.name)
            .bind(ids(&inventory::DELIVERED))
            .bind(descriptor.per_key_ordering)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let quarantined = sqlx::query(sql::QUARANTINE_INVENTORY)
            .bind(descriptor.name)
            .bind(ids(&[InventoryClass::Quarantine]))
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        // Every listed event is still there and every delivery was written as decided.
        let count = |classes: &[InventoryClass]| {
            let n = inventory::events_of(&report, classes).len();
            u64::try_from(n).unwrap_or(u64::MAX)
        };
        if recorded != u64::try_from(report.items.len()).unwrap_or(u64::MAX)
            || written != count(&inventory::DELIVERED)
            || quarantined != count(&[InventoryClass::Quarantine])
        {
            return Err(ReplayError::InventoryChanged(consumer.to_owned()));
        }
        let written = written - quarantined;
        if written > 0 {
            // The consumer's workers wake when this commits, as after an append.
            self.inner.wakeups.arm(&mut tx, &[descriptor.name]).await?;
        }
        tx.commit().await?;
        tracing::info!(
            inventory_id,
            consumer,
            delivered = written,
            plan_id,
            approval = %approval.approval_ref,
            "inventory applied"
        );
        Ok(InventoryApplied {
            inventory_id,
            counts: report.counts,
            delivered: written,
            quarantined,
            repeated: false,
        })
    }
}
