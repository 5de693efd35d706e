//! Replays over HTTP, by two people: an operator plans (a dry run) and proposes a replay of a
//! consumer's dead letters, and an approver who is not that operator applies it. The store
//! records who proposed (the caller's name), who approved, why and under which reference, and
//! refuses an apply by the proposer (docs/runtime.md, "Replay").

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use evc_runtime::{
    DEFAULT_REPLAY_LIMIT, ReplayApproval, ReplayPlan, ReplaySelection, SettledStatus,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::AppState;
use crate::api::{Body, DeadLetter, Segment, dead_letter, registered_consumer};
use crate::auth::{Caller, Role};
use crate::error::{ApiError, Problem, Unavailable};

/// Which of a consumer's dead letters a replay takes. Every field is optional: `{}` takes
/// all of them, up to 1,000.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Selection {
    /// Only events of this type.
    event_type: Option<String>,
    /// Only these events (absent or empty: any).
    #[serde(default)]
    event_ids: Vec<String>,
    /// Only deliveries in these statuses (absent: both).
    statuses: Option<Vec<Settled>>,
    /// At most this many deliveries, oldest first (1 to 1,000; default 1,000).
    limit: Option<u32>,
}

/// A settled status a replay takes.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Settled {
    /// Dead-lettered.
    Dead,
    /// Quarantined.
    Quarantined,
}

/// An approval: the plan's digest, why, under which reference, and the key that applies it
/// once.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Approval {
    /// The deliveries the plan took (absent: the default selection).
    #[serde(default)]
    selection: Selection,
    /// The digest of the proposed plan.
    digest: String,
    /// Why, 1 to 500 characters.
    reason: String,
    /// Who or what approved it (a ticket, a change request).
    approval_ref: String,
    /// The same key applies once; repeating it answers with the first result.
    idempotency_key: String,
}

/// A replay's plan: what it would replay, what it cannot, and the digest an approval presents.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Plan {
    /// The consumer.
    consumer: String,
    /// SHA-256 of what the plan replays: an approval must present it.
    digest: String,
    /// The deliveries the replay would supersede, oldest event first.
    deliveries: Vec<DeadLetter>,
    /// The planned deliveries that cannot be replayed (apply refuses the plan while any is
    /// listed).
    not_replayable: Vec<Unreplayable>,
}

/// A planned delivery that cannot be replayed, and why.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Unreplayable {
    /// The event.
    event_id: String,
    /// The delivery's generation.
    generation: i32,
    /// `not_subscribed`, `version_not_accepted`, `version_not_deployed`, `schema_unusable` or
    /// `schema_invalid`.
    reason: String,
}

/// A plan recorded as proposed.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ProposedPlan {
    /// The recorded plan's id.
    plan_id: i64,
    /// Who proposed it (the caller).
    planned_by: String,
    /// The plan.
    plan: Plan,
}

/// An applied replay.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Applied {
    /// The replay's id.
    replay_id: i64,
    /// New deliveries created (by the first apply, when repeated).
    deliveries: u64,
    /// Whether the idempotency key had been applied before: nothing new was created.
    repeated: bool,
}

/// A replay's dry run, for the operator who plans and the approver who checks: nothing is
/// written.
#[utoipa::path(
    post,
    path = "/api/v1/consumers/{name}/replays/plan",
    tag = "replays",
    params(("name" = String, Path, description = "The consumer's name")),
    request_body = Selection,
    responses(
        (status = 200, description = "The plan", body = Plan),
        (status = 400, description = "A body that is not JSON", body = Problem,
            content_type = "application/problem+json"),
        (status = 403, description = "Neither an operator nor an approver", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
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
    Body(selection): Body<Selection>,
) -> Result<Json<Plan>, ApiError> {
    // The approver reads the plan too: what an apply would take, before approving it.
    caller.require_either(Role::Approver, Role::Operator)?;
    let selection = replay_selection(&state, name, selection)?;
    let plan = state.outbox.replay_plan(&selection, caller.role).await?;
    Ok(Json(plan_view(&plan)))
}

/// Records a replay's plan as proposed by the caller: the first of two people.
#[utoipa::path(
    post,
    path = "/api/v1/consumers/{name}/replays/propose",
    tag = "replays",
    params(("name" = String, Path, description = "The consumer's name")),
    request_body = Selection,
    responses(
        (status = 201, description = "The plan, recorded", body = ProposedPlan),
        (status = 400, description = "A body that is not JSON", body = Problem,
            content_type = "application/problem+json"),
        (status = 403, description = "Not an operator", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
            content_type = "application/problem+json"),
        (status = 409, description = "Nothing to replay, or a delivery apply would refuse",
            body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field is not acceptable", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn propose(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Segment(name): Segment,
    Body(selection): Body<Selection>,
) -> Result<(StatusCode, Json<ProposedPlan>), ApiError> {
    caller.require(Role::Operator)?;
    let selection = replay_selection(&state, name, selection)?;
    let proposed = state
        .outbox
        .propose_replay(&selection, &caller.name)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(ProposedPlan {
            plan_id: proposed.plan_id,
            planned_by: proposed.planned_by,
            plan: plan_view(&proposed.plan),
        }),
    ))
}

/// Applies a plan another person proposed, as the caller: the second of two people.
#[utoipa::path(
    post,
    path = "/api/v1/consumers/{name}/replays/apply",
    tag = "replays",
    params(("name" = String, Path, description = "The consumer's name")),
    request_body = Approval,
    responses(
        (status = 200, description = "The replay, applied (or applied before under the key)",
            body = Applied),
        (status = 400, description = "A body that is not JSON", body = Problem,
            content_type = "application/problem+json"),
        (status = 403, description = "Not an approver", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
            content_type = "application/problem+json"),
        (status = 409, description = "Refused: the plan changed, was not proposed, was \
            applied, was proposed by the caller, or the key was used otherwise",
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
    Body(approval): Body<Approval>,
) -> Result<Json<Applied>, ApiError> {
    caller.require(Role::Approver)?;
    let (selection, approved) = approval.decision(&state, name, caller.name)?;
    let applied = state.outbox.replay(&selection, &approved).await?;
    Ok(Json(Applied {
        replay_id: applied.replay_id,
        deliveries: applied.deliveries,
        repeated: applied.repeated,
    }))
}

impl Approval {
    /// The selection of `consumer` the approval names and the decision of `approver`, as the
    /// store takes them (a replay's apply and a discard's alike).
    pub(crate) fn decision(
        self,
        state: &AppState,
        consumer: String,
        approver: String,
    ) -> Result<(ReplaySelection, ReplayApproval), ApiError> {
        let selection = replay_selection(state, consumer, self.selection)?;
        let approval = ReplayApproval::new(
            self.digest,
            self.reason,
            self.approval_ref,
            self.idempotency_key,
            approver,
        );
        Ok((selection, approval))
    }
}

pub(crate) fn replay_selection(
    state: &AppState,
    consumer: String,
    selection: Selection,
) -> Result<ReplaySelection, ApiError> {
    registered_consumer(state.outbox.registry(), &consumer)?;
    let limit = selection.limit.unwrap_or(DEFAULT_REPLAY_LIMIT);
    if !(1..=DEFAULT_REPLAY_LIMIT).contains(&limit) {
        return Err(ApiError::Unprocessable(format!(
            "limit must be between 1 and {DEFAULT_REPLAY_LIMIT}"
        )));
    }
    let ids = selection
        .event_ids
        .iter()
        .map(|id| {
            id.parse::<uuid::Uuid>()
                .map_err(|_| ApiError::Unprocessable(format!("event id `{id}` is not a UUID")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut replay = ReplaySelection::consumer(consumer)
        .limit(limit)
        .event_ids(ids);
    if let Some(event_type) = selection.event_type {
        replay = replay.event_type(event_type);
    }
    if let Some(statuses) = selection.statuses {
        if statuses.is_empty() {
            return Err(ApiError::Unprocessable(
                "statuses must name dead, quarantined or both".to_owned(),
            ));
        }
        replay = replay.statuses(statuses.into_iter().map(|status| match status {
            Settled::Dead => SettledStatus::Dead,
            Settled::Quarantined => SettledStatus::Quarantined,
        }));
    }
    Ok(replay)
}

fn plan_view(plan: &ReplayPlan) -> Plan {
    Plan {
        consumer: plan.selection.consumer.clone(),
        digest: plan.digest.clone(),
        deliveries: plan.deliveries.iter().map(dead_letter).collect(),
        not_replayable: plan
            .not_replayable
            .iter()
            .map(|item| Unreplayable {
                event_id: item.event_id.to_string(),
                generation: item.generation,
                reason: item.reason.code().to_owned(),
            })
            .collect(),
    }
}
