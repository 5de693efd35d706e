//! Discards over HTTP, by two people, on PostgreSQL: an operator plans and proposes settling a
//! consumer's dead letters for good (`discarded`: never claimed or replayed again), and an
//! approver who is not that operator applies it. The store records who proposed, who approved,
//! why and under which reference (docs/runtime.md, "Replay"). A SQLite outbox has no discard:
//! every route answers it 409.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use evc_runtime::{Console, DiscardPlan};
use serde::Serialize;
use utoipa::ToSchema;

use crate::AppState;
use crate::api::replay::{Approval, Selection, replay_selection};
use crate::api::{DeadLetter, Segment, dead_letter};
use crate::auth::{Caller, Role};
use crate::error::{ApiError, Problem, Unavailable};

/// A discard's plan: what it would settle, and the digest an approval presents.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DiscardPlanView {
    /// The consumer.
    consumer: String,
    /// SHA-256 of what the plan discards (a discard's own; a replay's digest does not apply
    /// it).
    digest: String,
    /// The deliveries it would discard, oldest event first.
    deliveries: Vec<DeadLetter>,
}

/// A discard plan recorded as proposed.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ProposedDiscard {
    /// The recorded plan's id.
    plan_id: i64,
    /// Who proposed it (the caller).
    planned_by: String,
    /// The plan.
    plan: DiscardPlanView,
}

/// An applied discard.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DiscardedView {
    /// The discard's id.
    discard_id: i64,
    /// The deliveries discarded (by the first apply, when repeated).
    deliveries: usize,
    /// Whether the idempotency key had been applied before: nothing new was discarded.
    repeated: bool,
}

/// The console of `role`, or 409 on a SQLite outbox.
async fn console(state: &AppState, role: Role) -> Result<Console, ApiError> {
    state.outbox.console(role).await?.ok_or_else(|| {
        ApiError::Conflict(
            "a SQLite outbox has no discard; replay the dead letters, or leave them".to_owned(),
        )
    })
}

fn view(plan: &DiscardPlan) -> DiscardPlanView {
    DiscardPlanView {
        consumer: plan.selection.consumer.clone(),
        digest: plan.digest.clone(),
        deliveries: plan.deliveries.iter().map(dead_letter).collect(),
    }
}

/// A discard's dry run, for the operator who plans and the approver who checks: nothing is
/// written.
#[utoipa::path(
    post,
    path = "/api/v1/consumers/{name}/discards/plan",
    tag = "discards",
    params(("name" = String, Path, description = "The consumer's name")),
    request_body = Selection,
    responses(
        (status = 200, description = "The plan", body = DiscardPlanView),
        (status = 400, description = "A body that is not JSON", body = Problem,
            content_type = "application/problem+json"),
        (status = 403, description = "Neither an operator nor an approver", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
            content_type = "application/problem+json"),
        (status = 409, description = "A SQLite outbox, which has no discard", body = Problem,
            content_type = "application/problem+json"),
        (status = 422, description = "A field is not acceptable", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn plan(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Segment(name): Segment,
    crate::api::Body(selection): crate::api::Body<Selection>,
) -> Result<Json<DiscardPlanView>, ApiError> {
    caller.require_either(Role::Approver, Role::Operator)?;
    let selection = replay_selection(&state, name, selection)?;
    let plan = console(&state, caller.role)
        .await?
        .discard_plan(&selection)
        .await?;
    Ok(Json(view(&plan)))
}

/// Records a discard's plan as proposed by the caller: the first of two people.
#[utoipa::path(
    post,
    path = "/api/v1/consumers/{name}/discards/propose",
    tag = "discards",
    params(("name" = String, Path, description = "The consumer's name")),
    request_body = Selection,
    responses(
        (status = 201, description = "The plan, recorded", body = ProposedDiscard),
        (status = 400, description = "A body that is not JSON", body = Problem,
            content_type = "application/problem+json"),
        (status = 403, description = "Not an operator", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
            content_type = "application/problem+json"),
        (status = 409, description = "Nothing to discard, or a SQLite outbox", body = Problem,
            content_type = "application/problem+json"),
        (status = 422, description = "A field is not acceptable", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn propose(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Segment(name): Segment,
    crate::api::Body(selection): crate::api::Body<Selection>,
) -> Result<(StatusCode, Json<ProposedDiscard>), ApiError> {
    caller.require(Role::Operator)?;
    let selection = replay_selection(&state, name, selection)?;
    let proposed = console(&state, Role::Operator)
        .await?
        .propose_discard(&selection, &caller.name)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(ProposedDiscard {
            plan_id: proposed.plan_id,
            planned_by: proposed.planned_by,
            plan: view(&proposed.plan),
        }),
    ))
}

/// Applies a discard another person proposed, as the caller: the second of two people.
#[utoipa::path(
    post,
    path = "/api/v1/consumers/{name}/discards/apply",
    tag = "discards",
    params(("name" = String, Path, description = "The consumer's name")),
    request_body = Approval,
    responses(
        (status = 200, description = "The discard, applied (or applied before under the key)",
            body = DiscardedView),
        (status = 400, description = "A body that is not JSON", body = Problem,
            content_type = "application/problem+json"),
        (status = 403, description = "Not an approver", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
            content_type = "application/problem+json"),
        (status = 409, description = "Refused: the plan changed, was not proposed, was \
            applied, was proposed by the caller, the key was used otherwise, or a SQLite outbox",
            body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field is not acceptable", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn apply(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Segment(name): Segment,
    crate::api::Body(approval): crate::api::Body<Approval>,
) -> Result<Json<DiscardedView>, ApiError> {
    caller.require(Role::Approver)?;
    let (selection, approved) = approval.decision(&state, name, caller.name)?;
    let applied = console(&state, Role::Approver)
        .await?
        .discard(&selection, &approved)
        .await?;
    Ok(Json(DiscardedView {
        discard_id: applied.discard_id,
        deliveries: applied.discarded.len(),
        repeated: applied.repeated,
    }))
}
