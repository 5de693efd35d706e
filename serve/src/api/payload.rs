//! One event's payload, for the roles whose job needs it (an operator deciding on a dead letter,
//! an approver checking a replay), redacted by the contracts' payload policy: the values of
//! deny-listed and credential-named keys and anything shaped like a credential are hidden. A
//! reader never reads payloads (on PostgreSQL its database role may not either).

use axum::Json;
use axum::extract::State;
use evc_runtime::PayloadPolicy;
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::AppState;
use crate::api::Segment;
use crate::auth::{Caller, Role};
use crate::error::{ApiError, Problem, Unavailable};

/// An event's payload, redacted.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PayloadView {
    /// The event.
    event_id: String,
    /// The payload, with what the payload policy names replaced by `"[redacted]"`.
    #[schema(value_type = Object)]
    payload: serde_json::Value,
}

/// An event's payload, redacted by the payload policy; for operators and approvers.
#[utoipa::path(
    get,
    path = "/api/v1/events/{event_id}/payload",
    tag = "timeline",
    params(("event_id" = String, Path, description = "The event's UUID")),
    responses(
        (status = 200, description = "The payload, redacted", body = PayloadView),
        (status = 400, description = "Not a UUID", body = Problem,
            content_type = "application/problem+json"),
        (status = 403, description = "A reader, who reads no payloads", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such event, or its payload was purged", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn payload(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Segment(event_id): Segment,
) -> Result<Json<PayloadView>, ApiError> {
    caller.require_either(Role::Approver, Role::Operator)?;
    let id: Uuid = event_id
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("`{event_id}` is not a UUID")))?;
    let stored = state
        .outbox
        .payload(id, caller.role)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("event `{id}`")))?;
    let policy = PayloadPolicy::from_registry(state.outbox.registry());
    Ok(Json(PayloadView {
        event_id: id.to_string(),
        payload: policy.redact(&stored),
    }))
}
