//! `/api/v1/schedules`: the registry's schedules (`schedules.yaml`) and where each stands: its
//! ticks and skips so far, the newest slot handled, the next one and whether it is overdue.
//! `/api/v1/lag-breaches`: the lag breaches of the consumers' thresholds, open ones first.

use std::time::SystemTime;

use axum::Json;
use axum::extract::State;
use evc_runtime::{LagBreach, MissedSlots, ScheduleStatus};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::Params;
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, Problem, Unavailable};

/// A schedule of the registry and where it stands.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ScheduleView {
    /// Name (`nightly_rollup`).
    name: String,
    /// The cron expression, in UTC.
    cron: String,
    /// The tick event type (`cron.tick.<name>`).
    event: String,
    /// What happens to slots missed while no dispatcher ran: `skip` or `catch_up`.
    missed: &'static str,
    /// The most missed slots a catch-up ticks.
    catch_up_limit: u32,
    /// Whether a scheduler round has seen it (`false`: no dispatcher of this registry has
    /// run yet).
    started: bool,
    /// Ticks appended, by every dispatcher.
    ticks: i64,
    /// Missed slots skipped.
    skipped: i64,
    /// The newest slot ticked or skipped (RFC 3339, UTC).
    last_slot: Option<String>,
    /// The slot after it (RFC 3339, UTC).
    next_slot: Option<String>,
    /// Seconds the next slot has been due without a tick (0: not due yet).
    overdue_s: f64,
}

/// Every schedule of the registry, by name, with where it stands.
#[utoipa::path(
    get,
    path = "/api/v1/schedules",
    tag = "schedules",
    responses(
        (status = 200, description = "The schedules", body = Vec<ScheduleView>),
        Unavailable,
    )
)]
pub(crate) async fn schedules(
    State(state): State<AppState>,
    _caller: Caller,
) -> Result<Json<Vec<ScheduleView>>, ApiError> {
    let declared = state.outbox.registry().schedules;
    // A registry without schedules needs no table that holds them.
    let stored = if declared.is_empty() {
        Vec::new()
    } else {
        state.outbox.schedule_states().await?
    };
    let now = SystemTime::now();
    Ok(Json(
        declared
            .iter()
            .map(|schedule| {
                let stand = stored
                    .iter()
                    .find(|s| s.name == schedule.name)
                    .cloned()
                    .map(|s| ScheduleStatus::at(s, now));
                ScheduleView {
                    name: schedule.name.to_owned(),
                    cron: schedule.cron.to_owned(),
                    event: schedule.event.to_owned(),
                    missed: match schedule.missed {
                        MissedSlots::Skip => "skip",
                        MissedSlots::CatchUp => "catch_up",
                    },
                    catch_up_limit: schedule.catch_up_limit,
                    started: stand.is_some(),
                    ticks: stand.as_ref().map_or(0, |s| s.state.ticks),
                    skipped: stand.as_ref().map_or(0, |s| s.state.skipped),
                    last_slot: stand.as_ref().and_then(ScheduleStatus::last_slot_text),
                    next_slot: stand.as_ref().and_then(ScheduleStatus::next_slot_text),
                    overdue_s: stand.as_ref().map_or(0.0, |s| s.overdue.as_secs_f64()),
                }
            })
            .collect(),
    ))
}

/// A lag breach: a consumer's lag for the events of one producer class over the threshold its
/// contract sets.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LagBreachView {
    /// The breach.
    id: i64,
    /// The consumer.
    consumer: String,
    /// The producer class of the events it lags on.
    producer_class: String,
    /// The threshold crossed, in milliseconds.
    threshold_ms: i64,
    /// How long the oldest open delivery of the pair had waited when the breach opened, in
    /// milliseconds.
    lag_ms: i64,
    /// The event whose delivery had waited longest (its id only).
    oldest_event_id: Option<String>,
    /// When it opened (epoch seconds).
    opened_at: f64,
    /// When the lag was back under the threshold (epoch seconds; null: open).
    closed_at: Option<f64>,
}

impl From<LagBreach> for LagBreachView {
    fn from(breach: LagBreach) -> Self {
        Self {
            id: breach.id,
            consumer: breach.consumer,
            producer_class: breach.producer_class,
            threshold_ms: breach.threshold_ms,
            lag_ms: breach.lag_ms,
            oldest_event_id: breach.oldest_event_id.map(|id| id.to_string()),
            opened_at: breach.opened_at,
            closed_at: breach.closed_at,
        }
    }
}

/// How many breaches to list.
#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct BreachLimit {
    /// At most this many (default 100, at most 1,000).
    limit: Option<u32>,
}

/// The lag breaches, open ones first, then the newest closed.
#[utoipa::path(
    get,
    path = "/api/v1/lag-breaches",
    tag = "consumers",
    params(BreachLimit),
    responses(
        (status = 200, description = "The breaches", body = Vec<LagBreachView>),
        (status = 400, description = "A bad limit", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn lag_breaches(
    State(state): State<AppState>,
    _caller: Caller,
    Params(query): Params<BreachLimit>,
) -> Result<Json<Vec<LagBreachView>>, ApiError> {
    let limit = match query.limit.unwrap_or(100) {
        limit @ 1..=1_000 => limit,
        _ => {
            return Err(ApiError::BadRequest("limit must be 1 to 1000".to_owned()));
        }
    };
    // A database without the breaches' table (before the twenty-fourth step) lists none.
    let breaches = state.outbox.lag_breaches(limit).await?;
    Ok(Json(breaches.into_iter().map(Into::into).collect()))
}
