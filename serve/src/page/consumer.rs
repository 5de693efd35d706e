//! A consumer's page, and the replay of its dead letters from it by two people: an operator
//! proposes the replay of every dead letter, an approver who is not that operator reads the plan
//! (its digest and size) and approves it with a reason and a reference. The store applies the
//! two-person rule and records both; the page shows what it answered.
//!
//! The forms are posted with the session cookie, which the browser sends only to this site
//! (`SameSite=Strict`); each post must also come from a page of this site (its `Origin`).

use askama::Template;
use axum::extract::{Form, State};
use axum::http::HeaderMap;
use axum::http::header::{HOST, ORIGIN};
use axum::response::{Html, IntoResponse, Response};
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
    /// The digest of the plan the viewer may approve, when the viewer is an approver and there
    /// is something to replay.
    approvable: Option<String>,
}

pub(crate) async fn page(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Segment(name): Segment,
) -> Result<Html<String>, ApiError> {
    show(&state, viewer, &name, None).await
}

async fn show(
    state: &AppState,
    viewer: crate::auth::Principal,
    name: &str,
    notice: Option<String>,
) -> Result<Html<String>, ApiError> {
    let descriptor = registered_consumer(state.outbox.registry(), name)?;
    let report = state.outbox.status(WINDOW).await?;
    let all = ReplaySelection::consumer(name);
    let dead = state
        .outbox
        .dead_letters(&all.clone().limit(LISTED))
        .await?;
    let changes = state.outbox.state_changes(name, LISTED).await?;
    let approvable = if viewer.role == Role::Approver && !dead.is_empty() {
        Some(state.outbox.replay_plan(&all, Role::Approver).await?.digest)
    } else {
        None
    };
    render(&ConsumerPage {
        can_propose: viewer.role == Role::Operator && !dead.is_empty(),
        can_pause: viewer.role == Role::Operator,
        viewer: viewer.name,
        consumer: consumer_view(descriptor, &report),
        dead: dead.iter().map(dead_letter).collect(),
        changes: changes.iter().map(change).collect(),
        notice,
        approvable,
    })
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
    same_site(&headers)?;
    viewer.require(Role::Operator)?;
    registered_consumer(state.outbox.registry(), &name)?;
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
    Ok(show(&state, viewer, &name, Some(notice))
        .await?
        .into_response())
}

/// Proposes the replay of every dead letter of the consumer, as the viewer.
pub(crate) async fn propose(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Segment(name): Segment,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    same_site(&headers)?;
    viewer.require(Role::Operator)?;
    registered_consumer(state.outbox.registry(), &name)?;
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
    Ok(show(&state, viewer, &name, Some(notice))
        .await?
        .into_response())
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
    same_site(&headers)?;
    viewer.require(Role::Approver)?;
    registered_consumer(state.outbox.registry(), &name)?;
    // One key per plan and approver: posting the same approval again is answered with the
    // first result.
    let key = format!(
        "web-{}",
        &crate::auth::digest_hex(&format!("{}\n{}", form.digest, viewer.name))[..40]
    );
    let approval = ReplayApproval::new(
        form.digest,
        form.reason,
        form.approval_ref,
        key,
        &viewer.name,
    );
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
    Ok(show(&state, viewer, &name, Some(notice))
        .await?
        .into_response())
}

/// A refused replay as the page says it; a store failure stays an error.
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
