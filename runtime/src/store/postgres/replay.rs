//! Replay from dead-letter or quarantine (docs/runtime.md, "Replay"): a dry run returns the
//! plan and its digest; a person proposes it (the plan is recorded with its planner); another
//! person applies it, presenting that digest with a reason, an approval reference and an
//! idempotency key, which supersedes each planned delivery with a next generation that
//! references the replay. Discards follow the same two steps. Everything is checked against the registry the database deploys (its mirror): a
//! consumer that no longer accepts an event's version, or a payload that no longer validates
//! against its version's deployed schema, refuses the replay.

use sqlx::Row;
use sqlx::postgres::{PgConnection, PgPool, PgRow};
use uuid::Uuid;

use super::{PgStore, sql};
use crate::store::ops::{
    self, NotReplayable, PlanKind, Proposed, ReplayApplied, ReplayApproval, ReplayError,
    ReplayItem, ReplayPlan, ReplayRecord, ReplaySelection, SettledDelivery, SettledStatus,
    check_approval, check_person, plan_digest, plan_of,
};

/// The settled deliveries `selection` takes, read only.
pub(crate) async fn settled(
    pool: &PgPool,
    selection: &ReplaySelection,
) -> Result<Vec<SettledDelivery>, sqlx::Error> {
    let rows = settled_query(sql::SETTLED_DELIVERIES, selection)
        .fetch_all(pool)
        .await?;
    rows.iter().map(settled_from_row).collect()
}

/// Under a transaction-scoped lock on the idempotency key (`lock`), the row an earlier apply
/// under that key recorded (`lookup`), if any. Concurrent applies with one key take turns here.
async fn earlier_apply(
    connection: &mut PgConnection,
    lock: &'static str,
    lookup: &'static str,
    consumer: &str,
    key: &str,
) -> Result<Option<PgRow>, sqlx::Error> {
    sqlx::query(lock)
        .bind(key)
        .execute(&mut *connection)
        .await?;
    sqlx::query(lookup)
        .bind(key)
        .bind(consumer)
        .fetch_optional(&mut *connection)
        .await
}

/// The digest, reason, approval reference and approver an earlier apply's row recorded.
fn earlier_of(row: &PgRow) -> Result<ops::EarlierApply<'_>, sqlx::Error> {
    Ok(ops::EarlierApply {
        digest: row.try_get("plan_digest")?,
        reason: row.try_get("reason")?,
        approval_ref: row.try_get("approval_ref")?,
        approved_by: row.try_get("approved_by")?,
    })
}

/// Records a proposed plan of `kind` by `planned_by` and returns its id.
async fn record_plan(
    pool: &PgPool,
    kind: PlanKind,
    selection: &ReplaySelection,
    digest: &str,
    deliveries: usize,
    planned_by: &str,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(sql::INSERT_PLAN)
        .bind(kind.as_str())
        .bind(&selection.consumer)
        .bind(digest)
        .bind(i32::try_from(deliveries).unwrap_or(i32::MAX))
        .bind(planned_by.trim())
        .fetch_one(pool)
        .await
}

/// The recorded plan of `kind` that `approval` applies: one of its consumer and digest,
/// proposed by someone other than the approver. Read inside the apply's transaction.
async fn approved_plan(
    connection: &mut PgConnection,
    kind: PlanKind,
    selection: &ReplaySelection,
    approval: &ReplayApproval,
) -> Result<i64, ReplayError> {
    let rows = sqlx::query(sql::PLANS_OF)
        .bind(kind.as_str())
        .bind(&selection.consumer)
        .bind(&approval.digest)
        .fetch_all(&mut *connection)
        .await?;
    let proposals = rows
        .iter()
        .map(|row| {
            Ok(ops::Proposal {
                id: row.try_get("id")?,
                planned_by: row.try_get("planned_by")?,
                applied: row.try_get("applied")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    ops::proposal_for(&proposals, approval)
}

/// The selection's settled deliveries, their rows locked until the transaction ends.
async fn locked_deliveries(
    connection: &mut PgConnection,
    selection: &ReplaySelection,
) -> Result<Vec<SettledDelivery>, sqlx::Error> {
    settled_query(sql::SETTLED_DELIVERIES_LOCKED, selection)
        .fetch_all(&mut *connection)
        .await?
        .iter()
        .map(settled_from_row)
        .collect()
}

fn settled_query<'q>(
    statement: &'static str,
    selection: &'q ReplaySelection,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let statuses: Vec<&str> = selection.statuses.iter().map(|s| s.as_str()).collect();
    sqlx::query(statement)
        .bind(&selection.consumer)
        .bind(statuses)
        .bind(selection.event_type.as_deref())
        .bind(&selection.event_ids)
        .bind(i64::from(selection.limit.max(1)))
}

/// The plan of `selection` (a dry run: nothing is written).
pub(crate) async fn plan(
    pool: &PgPool,
    selection: &ReplaySelection,
) -> Result<ReplayPlan, sqlx::Error> {
    let deliveries = settled(pool, selection).await?;
    let mut plan = plan_of(selection, deliveries);
    let mut connection = pool.acquire().await?;
    plan.not_replayable = not_replayable(&mut connection, &plan.deliveries).await?;
    Ok(plan)
}

/// Records the plan of `selection` as proposed by `planned_by` (see
/// [`crate::Operate::propose_replay`]).
pub(crate) async fn propose(
    pool: &PgPool,
    selection: &ReplaySelection,
    planned_by: &str,
) -> Result<Proposed<ReplayPlan>, ReplayError> {
    check_person("planner", planned_by)?;
    let plan = plan(pool, selection).await?;
    ops::check_proposable(&plan)?;
    let plan_id = record_plan(
        pool,
        PlanKind::Replay,
        selection,
        &plan.digest,
        plan.deliveries.len(),
        planned_by,
    )
    .await?;
    let deliveries = plan.deliveries.len();
    Ok(ops::proposed(
        "replay",
        plan_id,
        &selection.consumer,
        deliveries,
        planned_by,
        plan,
    ))
}

/// The deliveries of `deliveries` that cannot be replayed: each event's version must still be
/// accepted by the consumer, and its payload must validate against its version's schema in
/// the deployed registry (formats on, as at append).
async fn not_replayable(
    connection: &mut PgConnection,
    deliveries: &[SettledDelivery],
) -> Result<Vec<NotReplayable>, sqlx::Error> {
    let ids: Vec<Uuid> = deliveries.iter().map(|d| d.event_id).collect();
    let rows = sqlx::query(sql::REPLAY_PAYLOADS)
        .bind(&ids)
        .fetch_all(&mut *connection)
        .await?;
    let mut stored = ops::StoredPayloads::with_capacity(rows.len());
    for row in &rows {
        stored.insert(
            row.try_get("event_id")?,
            (row.try_get("payload")?, row.try_get("schema")?),
        );
    }
    Ok(ops::refusals(deliveries, &stored))
}

/// Applies `selection` under `approval`, in one transaction (see [`crate::Console::replay`]);
/// appends `dlq_replay.scheduled` in it through `lifecycle`, when given and its registry
/// registers the type.
pub(crate) async fn apply(
    pool: &PgPool,
    lifecycle: Option<&PgStore>,
    selection: &ReplaySelection,
    approval: &ReplayApproval,
) -> Result<ReplayApplied, ReplayError> {
    check_approval(approval)?;
    let mut tx = pool.begin().await?;
    if let Some(row) = earlier_apply(
        &mut tx,
        sql::LOCK_REPLAY_KEY,
        sql::REPLAY_BY_KEY,
        &selection.consumer,
        &approval.idempotency_key,
    )
    .await?
    {
        tx.rollback().await?;
        ops::check_repeat(approval, &earlier_of(&row)?)?;
        let deliveries: i32 = row.try_get("deliveries")?;
        return Ok(ReplayApplied {
            replay_id: row.try_get("id")?,
            deliveries: u64::try_from(deliveries).unwrap_or(0),
            repeated: true,
        });
    }

    // The plan again, its rows locked until commit: what is checked is what is replayed.
    let plan = plan_of(selection, locked_deliveries(&mut tx, selection).await?);
    ops::check_plan(&plan, approval)?;
    // Each payload against its version's deployed schema, on the locked rows: a schema
    // deployed since the dry run counts.
    ops::refusal(&plan, &not_replayable(&mut tx, &plan.deliveries).await?)?;
    let plan_id = approved_plan(&mut tx, PlanKind::Replay, selection, approval).await?;

    let count = i32::try_from(plan.deliveries.len()).unwrap_or(i32::MAX);
    let replay_id: i64 = sqlx::query_scalar(sql::INSERT_REPLAY)
        .bind(&plan.digest)
        .bind(&approval.reason)
        .bind(&approval.approval_ref)
        .bind(&approval.idempotency_key)
        .bind(count)
        .bind(&selection.consumer)
        .bind(plan_id)
        .bind(approval.approved_by.trim())
        .fetch_one(&mut *tx)
        .await
        .map_err(|error| plan_taken(error, plan_id))?;
    let ids: Vec<Uuid> = plan.deliveries.iter().map(|d| d.event_id).collect();
    let generations: Vec<i32> = plan.deliveries.iter().map(|d| d.generation).collect();
    sqlx::query(sql::RECORD_REPLAY_ITEMS)
        .bind(replay_id)
        .bind(&selection.consumer)
        .bind(&ids)
        .bind(&generations)
        .execute(&mut *tx)
        .await?;
    let row = sqlx::query(sql::APPLY_REPLAY)
        .bind(replay_id)
        .bind(&selection.consumer)
        .bind(&ids)
        .bind(&generations)
        .fetch_one(&mut *tx)
        .await?;
    let created: i64 = row.try_get("created")?;
    if let Some(store) = lifecycle {
        store
            .emit_replay_scheduled(
                &mut tx,
                replay_id,
                &selection.consumer,
                created,
                approval.requested_by,
            )
            .await?;
    }
    sqlx::query(sql::NOTIFY_CONSUMERS)
        .bind(vec![selection.consumer.as_str()])
        .execute(&mut *tx)
        .await?;
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
        deliveries: u64::try_from(created).unwrap_or(0),
        repeated: false,
    })
}

/// A discard's dry run: the deliveries a discard would settle for good, and the digest apply
/// must present (apart from a replay's: one never applies the other).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DiscardPlan {
    /// The selection planned.
    pub selection: ReplaySelection,
    /// The deliveries, oldest event first.
    pub deliveries: Vec<SettledDelivery>,
    /// SHA-256 (hex) of the plan, as [`ReplayPlan::digest`], under a discard's own tag.
    pub digest: String,
}

/// A delivery a discard settled.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiscardedDelivery {
    /// The event.
    pub event_id: Uuid,
    /// The delivery's generation.
    pub generation: i32,
    /// The status it left: dead or quarantined.
    pub status: SettledStatus,
    /// The event type.
    pub event_type: String,
    /// The event's version.
    pub version: String,
}

/// What a discard's apply did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiscardApplied {
    /// The discard's id (`evc_discards.id`; the deliveries' `discard_id`).
    pub discard_id: i64,
    /// The deliveries discarded (by the first apply, when repeated), in plan order.
    pub discarded: Vec<DiscardedDelivery>,
    /// Whether the idempotency key had been applied before: nothing new was discarded.
    pub repeated: bool,
}

/// Records the discard plan of `selection` as proposed by `planned_by` (see
/// [`crate::Console::propose_discard`]).
pub(crate) async fn propose_discard(
    pool: &PgPool,
    selection: &ReplaySelection,
    planned_by: &str,
) -> Result<Proposed<DiscardPlan>, ReplayError> {
    check_person("planner", planned_by)?;
    let plan = discard_plan(pool, selection).await?;
    if plan.deliveries.is_empty() {
        return Err(ReplayError::NothingToDiscard);
    }
    let plan_id = record_plan(
        pool,
        PlanKind::Discard,
        selection,
        &plan.digest,
        plan.deliveries.len(),
        planned_by,
    )
    .await?;
    let deliveries = plan.deliveries.len();
    Ok(ops::proposed(
        "discard",
        plan_id,
        &selection.consumer,
        deliveries,
        planned_by,
        plan,
    ))
}

/// The discard plan of `selection` (a dry run: nothing is written).
pub(crate) async fn discard_plan(
    pool: &PgPool,
    selection: &ReplaySelection,
) -> Result<DiscardPlan, sqlx::Error> {
    let deliveries = settled(pool, selection).await?;
    Ok(DiscardPlan {
        selection: selection.clone(),
        digest: plan_digest(PlanKind::Discard, selection, &deliveries),
        deliveries,
    })
}

/// Discards `selection` under `approval`, in one transaction (see [`crate::Console::discard`]);
/// appends one `job.discarded` per delivery in it through `lifecycle`, when given and its
/// registry registers the type.
pub(crate) async fn discard(
    pool: &PgPool,
    lifecycle: Option<&PgStore>,
    selection: &ReplaySelection,
    approval: &ReplayApproval,
) -> Result<DiscardApplied, ReplayError> {
    check_approval(approval)?;
    let mut tx = pool.begin().await?;
    if let Some(row) = earlier_apply(
        &mut tx,
        sql::LOCK_DISCARD_KEY,
        sql::DISCARD_BY_KEY,
        &selection.consumer,
        &approval.idempotency_key,
    )
    .await?
    {
        tx.rollback().await?;
        ops::check_repeat(approval, &earlier_of(&row)?)?;
        let items: String = row.try_get("items")?;
        return Ok(DiscardApplied {
            discard_id: row.try_get("id")?,
            discarded: discarded_items(&items),
            repeated: true,
        });
    }

    // The plan again, its rows locked until commit: what was approved is what is discarded.
    let deliveries = locked_deliveries(&mut tx, selection).await?;
    let digest = plan_digest(PlanKind::Discard, selection, &deliveries);
    if digest != approval.digest {
        return Err(ReplayError::DigestMismatch {
            presented: approval.digest.clone(),
            current: digest,
        });
    }
    if deliveries.is_empty() {
        return Err(ReplayError::NothingToDiscard);
    }
    let plan_id = approved_plan(&mut tx, PlanKind::Discard, selection, approval).await?;
    let ids: Vec<Uuid> = deliveries.iter().map(|d| d.event_id).collect();
    let generations: Vec<i32> = deliveries.iter().map(|d| d.generation).collect();
    let row = sqlx::query(sql::APPLY_DISCARD)
        .bind(&selection.consumer)
        .bind(&digest)
        .bind(&approval.reason)
        .bind(&approval.approval_ref)
        .bind(&approval.idempotency_key)
        .bind(&ids)
        .bind(&generations)
        .bind(plan_id)
        .bind(approval.approved_by.trim())
        .fetch_one(&mut *tx)
        .await
        .map_err(|error| plan_taken(error, plan_id))?;
    let discard_id: i64 = row.try_get("id")?;
    let items: String = row.try_get("items")?;
    if let Some(store) = lifecycle {
        let discarded = Discarded {
            discard_id,
            approval_ref: &approval.approval_ref,
            discarded_by: row.try_get("db_role")?,
            discarded_at: row.try_get("discarded_at")?,
        };
        for delivery in &deliveries {
            store.emit_discarded(&mut tx, &discarded, delivery).await?;
        }
    }
    tx.commit().await?;
    let discarded = discarded_items(&items);
    tracing::info!(
        discard_id,
        consumer = %selection.consumer,
        deliveries = discarded.len(),
        approval = %approval.approval_ref,
        "discard applied"
    );
    Ok(DiscardApplied {
        discard_id,
        discarded,
        repeated: false,
    })
}

/// An applied discard as its audit row keeps it ([`crate::Console::discards`]). The row is
/// append-only: the database refuses to update, delete or truncate it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DiscardRecord {
    /// The discard's id ([`DiscardApplied::discard_id`]).
    pub discard_id: i64,
    /// The consumer whose deliveries it discarded.
    pub consumer: String,
    /// The digest of the plan it applied.
    pub plan_digest: String,
    /// The operator's reason.
    pub reason: String,
    /// The approval reference.
    pub approval_ref: String,
    /// The idempotency key it was applied under.
    pub idempotency_key: String,
    /// The database role that applied it.
    pub db_role: String,
    /// The recorded plan it applied (`None`: applied before plans were recorded).
    pub plan_id: Option<i64>,
    /// Who proposed that plan (`None`: applied before plans were recorded).
    pub planned_by: Option<String>,
    /// Who approved and applied it (`None`: applied before approvers were recorded).
    pub approved_by: Option<String>,
    /// When, in epoch seconds of the database's clock.
    pub discarded_at: f64,
    /// Deliveries discarded, as the row counts them.
    pub deliveries: u64,
    /// The deliveries discarded, in plan order, as the row lists them.
    pub discarded: Vec<DiscardedDelivery>,
}

/// The oldest `limit` replays with their items, oldest first ([`crate::Operate::replays`]).
pub(crate) async fn replays(pool: &PgPool, limit: u32) -> Result<Vec<ReplayRecord>, sqlx::Error> {
    let rows = sqlx::query(sql::READ_REPLAYS)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    let mut replays = Vec::with_capacity(rows.len());
    for row in &rows {
        let deliveries: i32 = row.try_get("deliveries")?;
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
    let ids: Vec<i64> = replays.iter().map(|r| r.replay_id).collect();
    let items = sqlx::query(sql::READ_REPLAY_ITEMS)
        .bind(&ids)
        .fetch_all(pool)
        .await?;
    for row in &items {
        let replay_id: i64 = row.try_get("replay_id")?;
        let from: String = row.try_get("replayed_from")?;
        let item = ReplayItem {
            event_id: row.try_get("event_id")?,
            consumer: row.try_get("consumer")?,
            generation: row.try_get("generation")?,
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

/// The oldest `limit` discards, oldest first ([`crate::Console::discards`]).
pub(crate) async fn discards(pool: &PgPool, limit: u32) -> Result<Vec<DiscardRecord>, sqlx::Error> {
    let rows = sqlx::query(sql::READ_DISCARDS)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    let mut discards = Vec::with_capacity(rows.len());
    for row in &rows {
        let deliveries: i32 = row.try_get("deliveries")?;
        let items: String = row.try_get("items")?;
        discards.push(DiscardRecord {
            discard_id: row.try_get("id")?,
            consumer: row.try_get("consumer")?,
            plan_digest: row.try_get("plan_digest")?,
            reason: row.try_get("reason")?,
            approval_ref: row.try_get("approval_ref")?,
            idempotency_key: row.try_get("idempotency_key")?,
            db_role: row.try_get("db_role")?,
            plan_id: row.try_get("plan_id")?,
            planned_by: row.try_get("planned_by")?,
            approved_by: row.try_get("approved_by")?,
            discarded_at: row.try_get("discarded_at")?,
            deliveries: u64::try_from(deliveries).unwrap_or(0),
            discarded: discarded_items(&items),
        });
    }
    Ok(discards)
}

/// A discard as its `job.discarded` events describe it: as `evc_discards` records it.
pub(super) struct Discarded<'a> {
    /// `evc_discards.id`.
    pub(super) discard_id: i64,
    /// The operator's approval reference.
    pub(super) approval_ref: &'a str,
    /// The database role that applied it.
    pub(super) discarded_by: String,
    /// When, RFC 3339 UTC.
    pub(super) discarded_at: String,
}

/// `error`, or [`ReplayError::PlanApplied`] when the database refused the insert because an
/// earlier replay or discard took plan `plan_id` (the thirteenth step's trigger or index:
/// an apply of the same plan that committed after this transaction read the plans).
fn plan_taken(error: sqlx::Error, plan_id: i64) -> ReplayError {
    let constraint = error.as_database_error().and_then(|e| e.constraint());
    if matches!(
        constraint,
        Some("evc_replays_plan_once" | "evc_discards_plan_once")
    ) {
        return ReplayError::PlanApplied { plan_id };
    }
    ReplayError::Database(error)
}

/// The deliveries of an `evc_discards.items` array (written by [`sql::APPLY_DISCARD`]).
fn discarded_items(items: &str) -> Vec<DiscardedDelivery> {
    let items: Vec<serde_json::Value> = serde_json::from_str(items).unwrap_or_default();
    items
        .iter()
        .filter_map(|item| {
            let text = |key: &str| item.get(key)?.as_str().map(str::to_owned);
            Some(DiscardedDelivery {
                event_id: text("event_id")?.parse().ok()?,
                generation: i32::try_from(item.get("generation")?.as_i64()?).ok()?,
                status: SettledStatus::parse(&text("status")?)?,
                event_type: text("event_type")?,
                version: text("version")?,
            })
        })
        .collect()
}

/// A settled delivery as [`sql::SETTLED_DELIVERIES`] reads it.
fn settled_from_row(row: &PgRow) -> Result<SettledDelivery, sqlx::Error> {
    let status: String = row.try_get("status")?;
    Ok(SettledDelivery {
        event_id: row.try_get("event_id")?,
        consumer: row.try_get("consumer")?,
        generation: row.try_get("generation")?,
        status: SettledStatus::parse(&status).unwrap_or(SettledStatus::Dead),
        attempts: row.try_get("attempt")?,
        last_error_code: row.try_get("last_error_code")?,
        settled_at: row.try_get("settled_at")?,
        event_type: row.try_get("event_type")?,
        version: row.try_get("schema_version")?,
        requirement: row.try_get("requirement")?,
    })
}
