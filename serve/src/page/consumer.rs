//! A consumer's page, and what operators do from it: pause and resume (saying why), and the
//! replay or discard of its dead letters by two people. An operator proposes; an approver who
//! is not that operator reads the plan's digest and approves it with a reason and a reference.
//! The store applies the two-person rule and records both. A discard is for PostgreSQL
//! outboxes only (SQLite has none).
//!
//! Each form's post answers with a redirect to the page (POST/redirect/GET: reloading the page
//! posts nothing again), carrying what the store answered in a short-lived cookie the process
//! signs, which the page shows once.
//!
//! The forms are posted with the session cookie, which the browser sends only to this site
//! (`SameSite=Strict`); each post must also come from a page of this site (its `Origin`).

use askama::Template;
use axum::extract::{Form, State};
use axum::http::header::{HOST, LOCATION, ORIGIN, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use evc_runtime::{ReplayApproval, ReplaySelection, StateChange};
use serde::Deserialize;

use super::{Viewer, WINDOW, render};
use crate::AppState;
use crate::api::state::{Change, change};
use crate::api::{
    ConsumerView, DeadLetter, Segment, consumer_view, dead_letter, registered_consumer,
};
use crate::auth::Role;
use crate::error::ApiError;

/// Dead letters and recorded changes the page lists.
const LISTED: u32 = 100;

/// The cookie carrying a post's answer to the page it redirects to.
const NOTICE_COOKIE: &str = "evc_notice";

#[derive(Template)]
#[template(path = "consumer.html")]
struct ConsumerPage {
    viewer: String,
    consumer: ConsumerView,
    dead: Vec<DeadLetter>,
    changes: Vec<Change>,
    /// What the last form's post answered.
    notice: Option<String>,
    /// Whether the viewer may propose a replay.
    can_propose: bool,
    /// Whether the viewer may pause and resume the consumer.
    can_pause: bool,
    /// The digest of the replay the viewer may approve, when the viewer is an approver and
    /// there is something to replay.
    approvable: Option<String>,
    /// Whether the outbox can discard (PostgreSQL).
    discards: bool,
    /// The digest of the discard the viewer may approve, when the viewer is an approver, the
    /// outbox can discard and there is something to discard.
    discardable: Option<String>,
    /// Its cut-over gate's progress, when its contract declares one.
    gate: Option<GateLine>,
}

/// A cut-over gate's progress, as the page shows it (counts only: the judgement needs the
/// shadow intents, `evc consumer gate` and the API give it to operators).
struct GateLine {
    compared: u64,
    shadow_runs: u64,
    min_reconciled: u32,
    min_span: String,
    max_unexplained: u32,
}

pub(crate) async fn page(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Segment(name): Segment,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let notice = super::cookie(&headers, NOTICE_COOKIE)
        .and_then(|value| state.sessions.unseal(&name, value));
    let page = show(&state, viewer, &name, notice.clone()).await?;
    Ok(match notice {
        // Shown once: the cookie goes with this answer.
        Some(_) => (
            [(
                SET_COOKIE,
                format!(
                    "{NOTICE_COOKIE}=; HttpOnly; SameSite=Strict; Path=/consumers/{name}; Max-Age=0"
                ),
            )],
            page,
        )
            .into_response(),
        None => page.into_response(),
    })
}

async fn show(
    state: &AppState,
    viewer: crate::auth::Principal,
    name: &str,
    notice: Option<String>,
) -> Result<Response, ApiError> {
    let descriptor = registered_consumer(state.outbox.registry(), name)?;
    let report = state.outbox.status(WINDOW).await?;
    let all = ReplaySelection::consumer(name);
    let dead = state
        .outbox
        .dead_letters(&all.clone().limit(LISTED))
        .await?;
    let changes = state.outbox.state_changes(name, LISTED).await?;
    let approver = viewer.role == Role::Approver && !dead.is_empty();
    let approvable = if approver {
        Some(state.outbox.replay_plan(&all, Role::Approver).await?.digest)
    } else {
        None
    };
    let discards = state.outbox.discards();
    // A discard plan the database refuses or cannot make (a consumer it has not deployed, an
    // outage) shows no form; the rest of the page still loads.
    let discardable = if approver && discards {
        match state.outbox.console(Role::Approver).await? {
            Some(console) => console
                .discard_plan(&all)
                .await
                .ok()
                .map(|plan| plan.digest),
            None => None,
        }
    } else {
        None
    };
    let gate = report
        .cutover_gates
        .iter()
        .find(|g| g.consumer == name)
        .map(|g| GateLine {
            compared: g.compared,
            shadow_runs: g.shadow_runs,
            min_reconciled: g.gate.min_reconciled,
            min_span: g.gate.min_span_text(),
            max_unexplained: g.gate.max_unexplained,
        });
    Ok(render(&ConsumerPage {
        can_propose: viewer.role == Role::Operator && !dead.is_empty(),
        can_pause: viewer.role == Role::Operator,
        viewer: viewer.name,
        consumer: consumer_view(state.outbox.registry(), descriptor, &report),
        dead: dead.iter().map(dead_letter).collect(),
        changes: changes.iter().map(change).collect(),
        notice,
        approvable,
        discards,
        discardable,
        gate,
    })?
    .into_response())
}

/// The answer to a form's post: back to the consumer's page, which shows `notice` once.
fn back(state: &AppState, name: &str, notice: &str) -> Response {
    let cookie = format!(
        "{NOTICE_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/consumers/{name}; Max-Age={}",
        state.sessions.seal(name, notice),
        super::session::NOTICE_LIFETIME.as_secs()
    );
    (
        StatusCode::SEE_OTHER,
        [
            (LOCATION, format!("/consumers/{name}")),
            (SET_COOKIE, cookie),
        ],
    )
        .into_response()
}

/// The pause and resume forms' field.
#[derive(Deserialize)]
pub(crate) struct ReasonForm {
    reason: String,
}

/// Pauses the consumer, as the viewer, for the reason the form gives.
pub(crate) async fn pause(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Segment(name): Segment,
    headers: HeaderMap,
    Form(form): Form<ReasonForm>,
) -> Result<Response, ApiError> {
    change_state(state, viewer, name, headers, form, true).await
}

/// Resumes the consumer, as the viewer, for the reason the form gives.
pub(crate) async fn resume(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Segment(name): Segment,
    headers: HeaderMap,
    Form(form): Form<ReasonForm>,
) -> Result<Response, ApiError> {
    change_state(state, viewer, name, headers, form, false).await
}

async fn change_state(
    state: AppState,
    viewer: crate::auth::Principal,
    name: String,
    headers: HeaderMap,
    form: ReasonForm,
    pause: bool,
) -> Result<Response, ApiError> {
    form_allowed(&state, &viewer, &name, &headers, Role::Operator)?;
    let change = StateChange::new(viewer.name.as_str(), form.reason);
    let changed = if pause {
        state.outbox.pause(&name, &change).await
    } else {
        state.outbox.resume(&name, &change).await
    };
    let notice = match changed.map_err(ApiError::from) {
        Ok(_) if pause => "Paused: no delivery is claimed until it is resumed.".to_owned(),
        Ok(_) => "Resumed.".to_owned(),
        Err(ApiError::Unprocessable(why) | ApiError::Conflict(why)) => format!("Refused: {why}"),
        Err(error) => return Err(error),
    };
    Ok(back(&state, &name, &notice))
}

/// Proposes the replay of every dead letter of the consumer, as the viewer.
pub(crate) async fn propose(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Segment(name): Segment,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    form_allowed(&state, &viewer, &name, &headers, Role::Operator)?;
    let notice = match state
        .outbox
        .propose_replay(&ReplaySelection::consumer(name.as_str()), &viewer.name)
        .await
    {
        Ok(proposed) => format!(
            "Proposed plan {} ({} deliveries, digest {}): another person approves it.",
            proposed.plan_id,
            proposed.plan.deliveries.len(),
            short(&proposed.plan.digest)
        ),
        Err(error) => refusal(error)?,
    };
    Ok(back(&state, &name, &notice))
}

/// The approval form's fields.
#[derive(Deserialize)]
pub(crate) struct ApprovalForm {
    digest: String,
    reason: String,
    approval_ref: String,
}

/// Applies the proposed replay whose digest the approver read, as the viewer.
pub(crate) async fn apply(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Segment(name): Segment,
    headers: HeaderMap,
    Form(form): Form<ApprovalForm>,
) -> Result<Response, ApiError> {
    form_allowed(&state, &viewer, &name, &headers, Role::Approver)?;
    let approval = web_approval(form, &viewer.name, "replay");
    let notice = match state
        .outbox
        .replay(&ReplaySelection::consumer(name.as_str()), &approval)
        .await
    {
        Ok(applied) if applied.repeated => {
            format!("Replay {} was applied before.", applied.replay_id)
        }
        Ok(applied) => format!(
            "Applied replay {}: {} deliveries are pending again.",
            applied.replay_id, applied.deliveries
        ),
        Err(error) => refusal(error)?,
    };
    Ok(back(&state, &name, &notice))
}

/// Proposes the discard of every dead letter of the consumer, as the viewer.
pub(crate) async fn propose_discard(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Segment(name): Segment,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    form_allowed(&state, &viewer, &name, &headers, Role::Operator)?;
    let notice = match state.outbox.console(Role::Operator).await? {
        None => NO_DISCARD.to_owned(),
        Some(console) => match console
            .propose_discard(&ReplaySelection::consumer(name.as_str()), &viewer.name)
            .await
        {
            Ok(proposed) => format!(
                "Proposed discard plan {} ({} deliveries, digest {}): another person approves it.",
                proposed.plan_id,
                proposed.plan.deliveries.len(),
                short(&proposed.plan.digest)
            ),
            Err(error) => refusal(error)?,
        },
    };
    Ok(back(&state, &name, &notice))
}

/// Applies the proposed discard whose digest the approver read, as the viewer.
pub(crate) async fn apply_discard(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Segment(name): Segment,
    headers: HeaderMap,
    Form(form): Form<ApprovalForm>,
) -> Result<Response, ApiError> {
    form_allowed(&state, &viewer, &name, &headers, Role::Approver)?;
    let approval = web_approval(form, &viewer.name, "discard");
    let notice = match state.outbox.console(Role::Approver).await? {
        None => NO_DISCARD.to_owned(),
        Some(console) => match console
            .discard(&ReplaySelection::consumer(name.as_str()), &approval)
            .await
        {
            Ok(applied) if applied.repeated => {
                format!("Discard {} was applied before.", applied.discard_id)
            }
            Ok(applied) => format!(
                "Applied discard {}: {} deliveries are settled for good.",
                applied.discard_id,
                applied.discarded.len()
            ),
            Err(error) => refusal(error)?,
        },
    };
    Ok(back(&state, &name, &notice))
}

/// What the page says to a discard on an outbox without one.
const NO_DISCARD: &str =
    "Refused: a SQLite outbox has no discard; replay the dead letters, or leave them.";

/// The approval of `approver` from the form, under one idempotency key per plan, approver and
/// kind (`replay`, `discard`): posting the same approval again is answered with the first
/// result.
fn web_approval(form: ApprovalForm, approver: &str, kind: &str) -> ReplayApproval {
    let key = format!(
        "web-{}",
        &crate::auth::digest_hex(&format!("{kind}\n{}\n{approver}", form.digest))[..40]
    );
    ReplayApproval::new(form.digest, form.reason, form.approval_ref, key, approver)
}

/// A refused replay or discard as the page says it; a store failure stays an error.
fn refusal(error: evc_runtime::ReplayError) -> Result<String, ApiError> {
    match ApiError::from(error) {
        ApiError::Conflict(why) | ApiError::Unprocessable(why) => Ok(format!("Refused: {why}")),
        error => Err(error),
    }
}

/// The first 12 hex digits of a digest.
fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

/// Refuses a form posted from another site, by a role whose job it is not, or for a consumer
/// the registry lacks.
fn form_allowed(
    state: &AppState,
    viewer: &crate::auth::Principal,
    name: &str,
    headers: &HeaderMap,
    role: Role,
) -> Result<(), ApiError> {
    same_site(headers)?;
    viewer.require(role)?;
    registered_consumer(state.outbox.registry(), name)?;
    Ok(())
}

/// Refuses a form posted from another site. A browser says where a request comes from in
/// `Sec-Fetch-Site`, which no proxy rewrites; without it the `Origin`'s host and port must be
/// the `Host` the request was sent to (whatever the scheme: a TLS proxy in front turns
/// `https` into `http`).
pub(crate) fn same_site(headers: &HeaderMap) -> Result<(), ApiError> {
    let value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = value("sec-fetch-site") {
        return if site == "same-origin" {
            Ok(())
        } else {
            Err(ApiError::CrossSite)
        };
    }
    let authority = value(ORIGIN.as_str()).and_then(|origin| origin.split_once("://"));
    match (authority, value(HOST.as_str())) {
        (Some((_, origin)), Some(host)) if origin == host => Ok(()),
        _ => Err(ApiError::CrossSite),
    }
}
