//! A consumer's cut-over gate over HTTP (docs/runtime.md, "Cut-over gate"): operators read how
//! its shadow runs compare with the legacy path's outcomes and explain the differences they
//! accept; the legacy path records its outcomes here when it does not run in the application's
//! process.

use axum::Json;
use axum::extract::State;
use evc_runtime::{CutoverReport, Intent, StateChange};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::AppState;
use crate::api::{Body, Segment, registered_consumer};
use crate::auth::{Caller, Role};
use crate::error::{ApiError, Problem, Unavailable};

/// The gate a report was judged against.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GateView {
    /// Compared deliveries it needs.
    min_reconciled: u32,
    /// How long they must span, first to newest, in milliseconds.
    min_span_ms: u64,
    /// Unexplained differences it lets pass.
    max_unexplained: u32,
}

/// How one shadow run differs from the legacy outcome of its event.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DifferenceView {
    /// The event.
    event_id: String,
    /// Effect keys both sides name, with different outcome digests.
    differing: Vec<String>,
    /// Effect keys only the legacy outcome names.
    missing_in_shadow: Vec<String>,
    /// Effect keys only the shadow run names.
    missing_in_legacy: Vec<String>,
    /// Whether an operator explained it.
    explained: bool,
}

/// What a consumer's shadow runs since it last entered shadow mode show against its gate.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GateReport {
    /// The consumer.
    consumer: String,
    /// Its gate; null: a move to `live` is not gated.
    gate: Option<GateView>,
    /// Whether a move to `live` may go ahead.
    passed: bool,
    /// When an operator last moved it to shadow (epoch seconds); null: every run counts.
    since: Option<f64>,
    /// Deliveries run in shadow mode since.
    shadow_runs: u64,
    /// Of those, compared with a legacy outcome.
    reconciled: u64,
    /// Compared runs that matched.
    matched: u64,
    /// Compared runs that differed, explained.
    explained: u64,
    /// Compared runs that differed, unexplained.
    unexplained: u64,
    /// Seconds from the first to the newest compared run.
    span_seconds: f64,
    /// Why the gate does not pass yet; empty when it passes.
    shortfalls: Vec<String>,
    /// The differences, unexplained first (at most 50).
    differences: Vec<DifferenceView>,
}

/// The event whose difference is explained, and why.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Explanation {
    /// The event (a UUID).
    event_id: String,
    /// Why the difference is accepted, 1 to 500 characters.
    reason: String,
}

/// One effect the legacy path performed, as the new handler would present it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Effect {
    /// The effect key.
    effect_key: String,
    /// The outcome digest.
    outcome_digest: String,
}

/// The outcome the legacy path produced for one event.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LegacyOutcome {
    /// The event (a UUID).
    event_id: String,
    /// The effects it performed (at most 1,000).
    effects: Vec<Effect>,
}

/// Whether a legacy outcome was recorded.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Recorded {
    /// `false`: an outcome was recorded for the event before, and it stays.
    recorded: bool,
}

/// The consumer's shadow runs against its cut-over gate.
#[utoipa::path(
    get,
    path = "/api/v1/consumers/{name}/cutover",
    tag = "consumers",
    params(("name" = String, Path, description = "The consumer's name")),
    responses(
        (status = 200, description = "The report", body = GateReport),
        (status = 403, description = "Not an operator", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn report(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Segment(name): Segment,
) -> Result<Json<GateReport>, ApiError> {
    caller.require(Role::Operator)?;
    registered_consumer(state.outbox.registry(), &name)?;
    Ok(Json(view(&state.outbox.cutover_report(&name).await?)))
}

/// Explains the difference of the consumer's shadow run of an event: the gate no longer counts
/// it. Answers the report after the explanation.
#[utoipa::path(
    post,
    path = "/api/v1/consumers/{name}/explanations",
    tag = "consumers",
    params(("name" = String, Path, description = "The consumer's name")),
    request_body = Explanation,
    responses(
        (status = 200, description = "Explained, and recorded", body = GateReport),
        (status = 400, description = "A body that is not JSON", body = Problem,
            content_type = "application/problem+json"),
        (status = 403, description = "Not an operator", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
            content_type = "application/problem+json"),
        (status = 422, description = "No difference to explain, no reason, or one that \
            cannot be recorded", body = Problem, content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn explain(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Segment(name): Segment,
    Body(body): Body<Explanation>,
) -> Result<Json<GateReport>, ApiError> {
    caller.require(Role::Operator)?;
    registered_consumer(state.outbox.registry(), &name)?;
    let event_id = event_id(&body.event_id)?;
    let change = StateChange::new(caller.name, body.reason);
    let report = state
        .outbox
        .explain_difference(&name, event_id, &change)
        .await?;
    Ok(Json(view(&report)))
}

/// Records the outcome the legacy path produced for an event the consumer, in shadow mode
/// beside it, also handles; the first outcome of an event stays.
#[utoipa::path(
    post,
    path = "/api/v1/consumers/{name}/legacy-outcomes",
    tag = "consumers",
    params(("name" = String, Path, description = "The consumer's name")),
    request_body = LegacyOutcome,
    responses(
        (status = 200, description = "Recorded, or kept from before", body = Recorded),
        (status = 400, description = "A body that is not JSON", body = Problem,
            content_type = "application/problem+json"),
        (status = 403, description = "Not an operator", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
            content_type = "application/problem+json"),
        (status = 422, description = "An event the consumer does not receive, or effects \
            that cannot be recorded", body = Problem, content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn legacy_outcome(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Segment(name): Segment,
    Body(body): Body<LegacyOutcome>,
) -> Result<Json<Recorded>, ApiError> {
    caller.require(Role::Operator)?;
    registered_consumer(state.outbox.registry(), &name)?;
    let event_id = event_id(&body.event_id)?;
    let outcome: Vec<Intent> = body
        .effects
        .into_iter()
        .map(|e| Intent::new(e.effect_key, e.outcome_digest))
        .collect();
    let recorded = state
        .outbox
        .record_legacy_outcome(&name, event_id, &outcome)
        .await?;
    Ok(Json(Recorded { recorded }))
}

/// A request's event id (422 when it is not a UUID).
fn event_id(text: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(text).map_err(|_| ApiError::Unprocessable("event_id is not a UUID".to_owned()))
}

fn view(report: &CutoverReport) -> GateReport {
    GateReport {
        consumer: report.consumer.clone(),
        gate: report.gate.map(|gate| GateView {
            min_reconciled: gate.min_reconciled,
            min_span_ms: gate.min_span_ms,
            max_unexplained: gate.max_unexplained,
        }),
        passed: report.passed(),
        since: report.since,
        shadow_runs: report.shadow_runs,
        reconciled: report.reconciled,
        matched: report.matched,
        explained: report.explained,
        unexplained: report.unexplained,
        span_seconds: report.span_seconds,
        shortfalls: report.shortfalls.clone(),
        differences: report
            .differences
            .iter()
            .map(|d| DifferenceView {
                event_id: d.event_id.to_string(),
                differing: d.differing.clone(),
                missing_in_shadow: d.missing_in_shadow.clone(),
                missing_in_legacy: d.missing_in_legacy.clone(),
                explained: d.explained,
            })
            .collect(),
    }
}
