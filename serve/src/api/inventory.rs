//! `/api/v1/consumers/{name}/inventory`: the events a consumer would receive on going live,
//! classified by its contract's inventory rules (docs/runtime.md, "Inventory"), as
//! `evc inventory` prints them; an operator proposes it and another person, an approver,
//! applies it (`.../inventory/propose`, `.../inventory/apply`).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use evc_runtime::{InventoryCounts, InventoryReport, MAX_INVENTORY_EVENTS, ReplayApproval};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::Params;
use crate::AppState;
use crate::api::{Body, Segment, registered_consumer};
use crate::auth::{Caller, Role};
use crate::error::{ApiError, Problem, Unavailable};

/// How many events to classify.
#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct InventoryParams {
    /// Classify at most this many events, oldest first (default 1000, at most 10000).
    limit: Option<u32>,
}

/// Events per class.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CountsView {
    /// Deliverable as they are.
    safe: u64,
    /// Deliverable once conformed to an accepted version.
    repair: u64,
    /// Neither: an operator decides.
    quarantine: u64,
    /// Older than the rules' `max_age`.
    expire: u64,
}

/// One event and its class.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ItemView {
    /// The event.
    event_id: String,
    /// Its type.
    event_type: String,
    /// The version it was appended with.
    version: String,
    /// When it was appended (epoch seconds).
    produced_at: f64,
    /// `safe`, `repair`, `quarantine` or `expire`.
    class: &'static str,
    /// Why it is not safe: `too_old`, `scope_missing`, `version_not_accepted`,
    /// `version_not_deployed` or `schema_invalid`; null when safe.
    reason: Option<&'static str>,
    /// The version it would be delivered as; null unless safe or repaired.
    target_version: Option<String>,
    /// SHA-256 (hex) of the stored payload's canonical JSON.
    payload_digest: String,
    /// SHA-256 (hex) of the repaired payload's canonical JSON; null unless repaired.
    repaired_digest: Option<String>,
}

/// A consumer's inventory.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct InventoryView {
    /// The consumer.
    consumer: String,
    /// The instant ages are measured from (epoch seconds).
    as_of: f64,
    /// The rules' `max_age` in milliseconds; null: no event expires.
    max_age_ms: Option<u64>,
    /// The rules' repair: `none` or `conform`.
    repair: &'static str,
    /// Events per class.
    counts: CountsView,
    /// The events, oldest first.
    items: Vec<ItemView>,
    /// Whether more events wait than the limit let in.
    truncated: bool,
    /// SHA-256 (hex) of what the inventory found: it changes when anything found changes.
    digest: String,
}

impl From<InventoryCounts> for CountsView {
    fn from(counts: InventoryCounts) -> Self {
        Self {
            safe: counts.safe,
            repair: counts.repair,
            quarantine: counts.quarantine,
            expire: counts.expire,
        }
    }
}

impl From<InventoryReport> for InventoryView {
    fn from(report: InventoryReport) -> Self {
        Self {
            consumer: report.consumer,
            as_of: report.as_of,
            max_age_ms: report.max_age_ms,
            repair: report.repair,
            counts: report.counts.into(),
            items: report
                .items
                .into_iter()
                .map(|item| ItemView {
                    event_id: item.event_id.to_string(),
                    event_type: item.event_type,
                    version: item.version,
                    produced_at: item.produced_at,
                    class: item.class.as_str(),
                    reason: item.reason.map(|reason| reason.code()),
                    target_version: item.target_version,
                    payload_digest: item.payload_digest,
                    repaired_digest: item.repaired_digest,
                })
                .collect(),
            truncated: report.truncated,
            digest: report.digest,
        }
    }
}

/// The events the consumer would receive on going live, classified.
#[utoipa::path(
    get,
    path = "/api/v1/consumers/{name}/inventory",
    tag = "consumers",
    params(("name" = String, Path, description = "The consumer's name"), InventoryParams),
    responses(
        (status = 200, description = "The inventory", body = InventoryView),
        (status = 400, description = "A limit out of range", body = Problem,
            content_type = "application/problem+json"),
        (status = 403, description = "Not an operator", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn inventory(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Segment(name): Segment,
    Params(params): Params<InventoryParams>,
) -> Result<Json<InventoryView>, ApiError> {
    caller.require(Role::Operator)?;
    let limit = checked_limit(params.limit)?;
    registered_consumer(state.outbox.registry(), &name)?;
    Ok(Json(state.outbox.inventory(&name, limit).await?.into()))
}

/// The limit of a request (default 1000), refused outside 1 to [`MAX_INVENTORY_EVENTS`].
fn checked_limit(limit: Option<u32>) -> Result<u32, ApiError> {
    let limit = limit.unwrap_or(1_000);
    if !(1..=MAX_INVENTORY_EVENTS).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "limit must be 1 to {MAX_INVENTORY_EVENTS}"
        )));
    }
    Ok(limit)
}

/// How many events a proposal or an apply takes.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct InventoryScope {
    /// At most this many events, oldest first (default 1000, at most 10000); an apply must
    /// take the proposal's.
    #[serde(default)]
    limit: Option<u32>,
}

/// An inventory recorded as proposed.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ProposedInventory {
    /// The recorded plan's id.
    plan_id: i64,
    /// Who proposed it (the caller).
    planned_by: String,
    /// The inventory, with the digest an approval presents.
    inventory: InventoryView,
}

/// An approval of a proposed inventory.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct InventoryApproval {
    /// The proposal's limit (default 1000).
    #[serde(default)]
    limit: Option<u32>,
    /// The digest of the proposed inventory.
    digest: String,
    /// Why, 1 to 500 characters.
    reason: String,
    /// Who or what approved it (a ticket, a change request).
    approval_ref: String,
    /// The same key applies once; repeating it answers with the first result.
    idempotency_key: String,
}

/// An applied inventory.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AppliedInventory {
    /// The recorded inventory's id.
    inventory_id: i64,
    /// Events recorded per class (by the first apply, when repeated).
    counts: CountsView,
    /// Pending deliveries created: one per safe and repaired event.
    delivered: u64,
    /// Quarantined deliveries created: one per quarantined event, for an operator's replay or
    /// discard.
    quarantined: u64,
    /// Whether the idempotency key had been applied before: nothing new was written.
    repeated: bool,
}

/// Records the consumer's inventory as proposed by the caller: the first of two people.
#[utoipa::path(
    post,
    path = "/api/v1/consumers/{name}/inventory/propose",
    tag = "consumers",
    params(("name" = String, Path, description = "The consumer's name")),
    request_body = InventoryScope,
    responses(
        (status = 201, description = "The inventory, recorded", body = ProposedInventory),
        (status = 400, description = "A body that is not JSON, or a limit out of range",
            body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an operator", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
            content_type = "application/problem+json"),
        (status = 409, description = "The inventory lists no event", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn propose(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Segment(name): Segment,
    Body(scope): Body<InventoryScope>,
) -> Result<(StatusCode, Json<ProposedInventory>), ApiError> {
    caller.require(Role::Operator)?;
    let limit = checked_limit(scope.limit)?;
    registered_consumer(state.outbox.registry(), &name)?;
    let proposed = state
        .outbox
        .propose_inventory(&name, limit, &caller.name)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(ProposedInventory {
            plan_id: proposed.plan_id,
            planned_by: proposed.planned_by,
            inventory: proposed.plan.into(),
        }),
    ))
}

/// Applies an inventory another person proposed, as the caller: the second of two people.
#[utoipa::path(
    post,
    path = "/api/v1/consumers/{name}/inventory/apply",
    tag = "consumers",
    params(("name" = String, Path, description = "The consumer's name")),
    request_body = InventoryApproval,
    responses(
        (status = 200, description = "The inventory, applied (or applied before under the key)",
            body = AppliedInventory),
        (status = 400, description = "A body that is not JSON, or a limit out of range",
            body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an approver", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
            content_type = "application/problem+json"),
        (status = 409, description = "Refused: the inventory changed, was not proposed, was \
            applied, was proposed by the caller, the consumer is live, or the key was used \
            otherwise", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field is not acceptable", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn apply(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Segment(name): Segment,
    Body(approval): Body<InventoryApproval>,
) -> Result<Json<AppliedInventory>, ApiError> {
    caller.require(Role::Approver)?;
    let limit = checked_limit(approval.limit)?;
    registered_consumer(state.outbox.registry(), &name)?;
    let decision = ReplayApproval::new(
        approval.digest,
        approval.reason,
        approval.approval_ref,
        approval.idempotency_key,
        caller.name,
    );
    let applied = state
        .outbox
        .apply_inventory(&name, limit, &decision)
        .await?;
    Ok(Json(AppliedInventory {
        inventory_id: applied.inventory_id,
        counts: applied.counts.into(),
        delivered: applied.delivered,
        quarantined: applied.quarantined,
        repeated: applied.repeated,
    }))
}
