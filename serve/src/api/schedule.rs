//! `/api/v1/schedules`: the registry's schedules (`schedules.yaml`) and where each stands: its
//! ticks and skips so far, the newest slot handled, the next one and whether it is overdue.

use std::time::SystemTime;

use axum::Json;
use axum::extract::State;
use evc_runtime::{MissedSlots, ScheduleStatus};
use serde::Serialize;
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, Unavailable};

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
