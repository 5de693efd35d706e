//! Live updates of the pages: `/live` streams a pulse for each event the outbox commits (its type
//! and feed position, nothing else) to a signed-in browser, and `/live.js` swaps in the page's
//! main part again when pulses arrive. The stream is the realtime gateway's, with every event.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;

use super::Viewer;
use crate::AppState;
use crate::error::ApiError;
use crate::gateway::{Interest, respond};

/// The script every page loads.
const SCRIPT: &str = include_str!("../../templates/live.js");

/// A pulse per event committed from now on, for a signed-in browser. `Last-Event-ID` (which
/// `EventSource` sends by itself on reconnecting) is ignored: the page fetches itself again
/// when its stream opens, so replaying what it missed would only read the store for nothing.
pub(crate) async fn stream(
    State(state): State<AppState>,
    Viewer(_viewer): Viewer,
) -> Result<impl IntoResponse, ApiError> {
    let interest = Interest {
        topic: None,
        key: None,
        tenant: None,
    };
    let subscription = state.gateway.subscribe(interest.clone()).await?;
    Ok(respond(
        Arc::clone(&state.gateway),
        interest,
        subscription,
        None,
    ))
}

/// `/live.js`.
pub(crate) async fn script() -> impl IntoResponse {
    (
        [
            (CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (CACHE_CONTROL, "no-cache"),
        ],
        SCRIPT,
    )
}
