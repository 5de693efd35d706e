//! A consumer's operator state over HTTP: operators pause, resume and set its mode, each change
//! recorded by the store with the caller's name and the reason the request gives; anyone reads
//! the record (docs/runtime.md, "Pause, resume and modes").

use axum::Json;
use axum::extract::State;
use evc_runtime::{ConsumerMode, ConsumerState, StateChange, StateChangeRecord};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::api::{Body, Params, Segment, registered_consumer};
use crate::auth::{Caller, Role};
use crate::error::{ApiError, Problem, Unavailable};

/// Most recorded changes one request lists.
const MAX_CHANGES: u32 = 1_000;

/// Why the caller pauses or resumes.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Reason {
    /// Why, 1 to 500 characters.
    pub(crate) reason: String,
}

/// The mode to set, and why.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ModeChange {
    /// `off` (claims nothing), `shadow` (handles without committing effects) or `live`.
    pub(crate) mode: Mode,
    /// Why, 1 to 500 characters.
    pub(crate) reason: String,
}

/// A consumer mode.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    /// No deliveries.
    Off,
    /// Deliveries handled, effects not committed.
    Shadow,
    /// Deliveries handled.
    Live,
}

/// A consumer's operator state after a change.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct OperatorState {
    /// The consumer.
    pub(crate) consumer: String,
    /// Whether it is paused (for the server's tenant, when it serves one).
    pub(crate) paused: bool,
    /// The mode in force.
    pub(crate) mode: String,
    /// Grows with every change for every tenant.
    pub(crate) revision: i64,
}

/// One recorded change.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Change {
    /// Grows with each change.
    pub(crate) id: i64,
    /// `pause`, `resume` or `mode`.
    pub(crate) change: String,
    /// The mode set (mode changes only).
    pub(crate) mode: Option<String>,
    /// The tenant the change was for; null: every tenant.
    pub(crate) tenant: Option<String>,
    /// Who made it.
    pub(crate) by: String,
    /// Why.
    pub(crate) reason: String,
    /// When, epoch seconds.
    pub(crate) at: f64,
}

/// How many recorded changes to list.
#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct ChangeLimit {
    /// At most this many, newest first (default 100, at most 1,000).
    pub(crate) limit: Option<u32>,
}

/// Pauses the consumer: its deliveries wait, in order, until it is resumed.
#[utoipa::path(
    post,
    path = "/api/v1/consumers/{name}/pause",
    tag = "consumers",
    params(("name" = String, Path, description = "The consumer's name")),
    request_body = Reason,
    responses(
        (status = 200, description = "Paused, and recorded", body = OperatorState),
        (status = 400, description = "A body that is not JSON", body = Problem,
            content_type = "application/problem+json"),
        (status = 403, description = "Not an operator", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
            content_type = "application/problem+json"),
        (status = 422, description = "No reason, or one that cannot be recorded",
            body = Problem, content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn pause(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Segment(name): Segment,
    Body(body): Body<Reason>,
) -> Result<Json<OperatorState>, ApiError> {
    caller.require(Role::Operator)?;
    registered_consumer(state.outbox.registry(), &name)?;
    let change = StateChange::new(caller.name, body.reason);
    Ok(Json(operator_state(
        &state.outbox.pause(&name, &change).await?,
    )))
}

/// Resumes the consumer: its waiting deliveries are claimed in order again.
#[utoipa::path(
    post,
    path = "/api/v1/consumers/{name}/resume",
    tag = "consumers",
    params(("name" = String, Path, description = "The consumer's name")),
    request_body = Reason,
    responses(
        (status = 200, description = "Resumed, and recorded", body = OperatorState),
        (status = 400, description = "A body that is not JSON", body = Problem,
            content_type = "application/problem+json"),
        (status = 403, description = "Not an operator", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
            content_type = "application/problem+json"),
        (status = 422, description = "No reason, or one that cannot be recorded",
            body = Problem, content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn resume(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Segment(name): Segment,
    Body(body): Body<Reason>,
) -> Result<Json<OperatorState>, ApiError> {
    caller.require(Role::Operator)?;
    registered_consumer(state.outbox.registry(), &name)?;
    let change = StateChange::new(caller.name, body.reason);
    Ok(Json(operator_state(
        &state.outbox.resume(&name, &change).await?,
    )))
}

/// Overrides the consumer's mode for every tenant.
#[utoipa::path(
    post,
    path = "/api/v1/consumers/{name}/mode",
    tag = "consumers",
    params(("name" = String, Path, description = "The consumer's name")),
    request_body = ModeChange,
    responses(
        (status = 200, description = "Set, and recorded", body = OperatorState),
        (status = 400, description = "A body that is not JSON", body = Problem,
            content_type = "application/problem+json"),
        (status = 403, description = "Not an operator", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
            content_type = "application/problem+json"),
        (status = 409, description = "The server serves one tenant, and a mode is every \
            tenant's; or a move to `live` the consumer's cut-over gate refuses (the detail \
            says why)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "An unknown mode, no reason, or one that cannot be \
            recorded", body = Problem, content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn mode(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Segment(name): Segment,
    Body(body): Body<ModeChange>,
) -> Result<Json<OperatorState>, ApiError> {
    caller.require(Role::Operator)?;
    registered_consumer(state.outbox.registry(), &name)?;
    let mode = match body.mode {
        Mode::Off => ConsumerMode::Off,
        Mode::Shadow => ConsumerMode::Shadow,
        Mode::Live => ConsumerMode::Live,
    };
    let change = StateChange::new(caller.name, body.reason);
    Ok(Json(operator_state(
        &state.outbox.set_mode(&name, mode, &change).await?,
    )))
}

/// Who paused, resumed or set the mode of the consumer, when and why; newest first.
#[utoipa::path(
    get,
    path = "/api/v1/consumers/{name}/changes",
    tag = "consumers",
    params(("name" = String, Path, description = "The consumer's name"), ChangeLimit),
    responses(
        (status = 200, description = "The recorded changes", body = Vec<Change>),
        (status = 400, description = "A bad limit", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn changes(
    State(state): State<AppState>,
    _caller: Caller,
    Segment(name): Segment,
    Params(limit): Params<ChangeLimit>,
) -> Result<Json<Vec<Change>>, ApiError> {
    let limit = match limit.limit.unwrap_or(100) {
        limit @ 1..=MAX_CHANGES => limit,
        _ => {
            return Err(ApiError::BadRequest(format!(
                "limit must be between 1 and {MAX_CHANGES}"
            )));
        }
    };
    registered_consumer(state.outbox.registry(), &name)?;
    let records = state.outbox.state_changes(&name, limit).await?;
    Ok(Json(records.iter().map(change).collect()))
}

fn operator_state(state: &ConsumerState) -> OperatorState {
    OperatorState {
        consumer: state.consumer.clone(),
        paused: state.paused,
        mode: state.mode.as_str().to_owned(),
        revision: state.revision,
    }
}

pub(crate) fn change(record: &StateChangeRecord) -> Change {
    Change {
        id: record.id,
        change: record.change.clone(),
        mode: record.mode.map(|mode| mode.as_str().to_owned()),
        tenant: record.tenant_scope.clone(),
        by: record.by.clone(),
        reason: record.reason.clone(),
        at: record.at,
    }
}
