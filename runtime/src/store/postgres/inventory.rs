//! The inventory of a consumer on PostgreSQL ([`crate::store::inventory`]): its candidates
//! read under the session's row-level security, a proposal recorded as an `inventory` plan,
//! and an apply that takes the inventory again under a per-consumer lock, checks it against
//! the approval and the recorded plan, and writes the deliveries and the ledger in one
//! transaction.

use std::time::SystemTime;

use sqlx::Row;
use sqlx::postgres::{PgConnection, PgPool};
use uuid::Uuid;

use super::sql;
use crate::registry::{ConsumerMode, Registry};
use crate::store::DispatchError;
use crate::store::inventory::{
    self, InventoryApplied, InventoryClass, InventoryReport, ItemColumns,
};
use crate::store::ops::{
    self, EarlierApply, PlanKind, Proposal, Proposed, ReplayApproval, ReplayError, check_approval,
    check_person, proposed,
};

/// The inventory of `consumer` as of `as_of`, read on `connection`.
pub(crate) async fn read(
    connection: &mut PgConnection,
    registry: &Registry,
    consumer: &str,
    as_of: SystemTime,
    limit: u32,
) -> Result<InventoryReport, DispatchError> {
    let (descriptor, types) = inventory::subscribed(registry, consumer)?;
    let candidates: Vec<inventory::CandidateRow> = sqlx::query_as(sql::INVENTORY_CANDIDATES)
        .bind(&types)
        .bind(descriptor.name)
        .bind(inventory::read_limit(limit))
        .fetch_all(&mut *connection)
        .await?;
    let purged_through: Option<f64> = sqlx::query_scalar(sql::RETENTION_PURGED_THROUGH)
        .fetch_one(&mut *connection)
        .await?;
    Ok(inventory::classify(
        registry,
        descriptor,
        inventory::Window {
            as_of,
            limit,
            purged_through,
        },
        candidates.into_iter().map(Into::into).collect(),
    ))
}

/// Records the inventory of `consumer` as proposed by `planned_by` (see
/// [`crate::Operate::propose_inventory`]).
pub(crate) async fn propose(
    pool: &PgPool,
    registry: &Registry,
    consumer: &str,
    limit: u32,
    planned_by: &str,
) -> Result<Proposed<InventoryReport>, ReplayError> {
    check_person("planner", planned_by)?;
    let mut connection = pool.acquire().await?;
    let report = read(
        &mut connection,
        registry,
        consumer,
        SystemTime::now(),
        limit,
    )
    .await
    .map_err(inventory::refusal)?;
    inventory::check_proposable(&report)?;
    let plan_id: i64 = sqlx::query_scalar(sql::INSERT_PLAN)
        .bind(PlanKind::Inventory.as_str())
        .bind(&report.consumer)
        .bind(&report.digest)
        .bind(i32::try_from(report.items.len()).unwrap_or(i32::MAX))
        .bind(planned_by.trim())
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

/// Applies the inventory of `consumer` under `approval` (see
/// [`crate::Operate::apply_inventory`]).
pub(crate) async fn apply(
    pool: &PgPool,
    registry: &Registry,
    consumer: &str,
    limit: u32,
    approval: &ReplayApproval,
) -> Result<InventoryApplied, ReplayError> {
    check_approval(approval)?;
    let descriptor = registry
        .consumer(consumer)
        .ok_or_else(|| ReplayError::UnknownConsumer(consumer.to_owned()))?;
    let mut tx = pool.begin().await?;
    // The consumer's applies take turns, and no mode change commits meanwhile: the mode read
    // below holds until this commits.
    for lock in [sql::LOCK_INVENTORY, sql::LOCK_CONSUMER_MODE] {
        sqlx::query(lock).bind(consumer).execute(&mut *tx).await?;
    }
    if let Some(row) = sqlx::query(sql::INVENTORY_BY_KEY)
        .bind(consumer)
        .bind(&approval.idempotency_key)
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

    // The inventory again, after any earlier apply of the consumer committed: what is checked
    // is what is applied.
    let report = read(&mut tx, registry, consumer, SystemTime::now(), limit)
        .await
        .map_err(inventory::refusal)?;
    inventory::check_applicable(&report, approval)?;
    let proposals = sqlx::query(sql::INVENTORY_PLANS_OF)
        .bind(consumer)
        .bind(&approval.digest)
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
    let mode: Option<String> = sqlx::query_scalar(sql::MODE_OVERRIDE)
        .bind(consumer)
        .fetch_optional(&mut *tx)
        .await?;
    let mode = mode.map_or(descriptor.mode, |mode| {
        ConsumerMode::parse(&mode).unwrap_or(ConsumerMode::Off)
    });
    if mode == ConsumerMode::Live {
        return Err(ReplayError::ConsumerLive(consumer.to_owned()));
    }

    let inventory_id: i64 = sqlx::query_scalar(sql::INSERT_INVENTORY)
        .bind(consumer)
        .bind(plan_id)
        .bind(&report.digest)
        .bind(&approval.reason)
        .bind(&approval.approval_ref)
        .bind(&approval.idempotency_key)
        .bind(approval.approved_by.trim())
        .bind(inventory::counts_json(&report.counts))
        .fetch_one(&mut *tx)
        .await
        .map_err(|error| plan_taken(error, plan_id))?;
    let items = ItemColumns::of(&report);
    let recorded = sqlx::query(sql::INSERT_INVENTORY_ITEMS)
        .bind(inventory_id)
        .bind(consumer)
        .bind(&items.event_ids)
        .bind(&items.classes)
        .bind(&items.reasons)
        .bind(&items.targets)
        .bind(&items.payload_digests)
        .bind(&items.repaired_digests)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    let delivered: Vec<Uuid> = inventory::events_of(&report, &inventory::DELIVERED);
    let written = sqlx::query(sql::DELIVER_INVENTORY)
        .bind(consumer)
        .bind(&delivered)
        .bind(descriptor.per_key_ordering)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    let quarantine: Vec<Uuid> = inventory::events_of(&report, &[InventoryClass::Quarantine]);
    let quarantined = sqlx::query(sql::QUARANTINE_INVENTORY)
        .bind(consumer)
        .bind(&quarantine)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    // Every listed event is still there and every delivery was written as decided (a purge
    // meanwhile, or a login whose row policies hide a delivery, falls short): else roll back.
    let listed = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    if recorded != listed(report.items.len())
        || written != listed(delivered.len())
        || quarantined != listed(quarantine.len())
    {
        return Err(ReplayError::InventoryChanged(consumer.to_owned()));
    }
    let written = written - quarantined;
    if written > 0 {
        sqlx::query(sql::NOTIFY_CONSUMERS)
            .bind(vec![consumer])
            .execute(&mut *tx)
            .await?;
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

/// The plan-once index's refusal (a concurrent apply took the plan) as [`ReplayError`].
fn plan_taken(error: sqlx::Error, plan_id: i64) -> ReplayError {
    let constraint = error.as_database_error().and_then(|e| e.constraint());
    if constraint == Some("evc_inventories_plan_once") {
        return ReplayError::PlanApplied { plan_id };
    }
    ReplayError::Database(error)
}

/// The newest applied inventory of each consumer the session sees; none before the
/// twenty-eighth step.
pub(crate) async fn newest(
    pool: &PgPool,
) -> Result<Vec<inventory::InventoryRecord>, DispatchError> {
    let present: bool = sqlx::query_scalar(sql::HAS_INVENTORIES)
        .fetch_one(pool)
        .await?;
    if !present {
        return Ok(Vec::new());
    }
    let rows: Vec<inventory::RecordColumns> = sqlx::query_as(sql::NEWEST_INVENTORIES)
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(inventory::record_of).collect())
}
