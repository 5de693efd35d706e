//! The operations endpoints: `/healthz` (the process answers), `/readyz` (the store answers, is
//! migrated and holds the registry the service was opened on) and `/metrics` (the status
//! report's metrics in the OpenMetrics text format). They need no token, like any probe.

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::AppState;
use crate::error::{ApiError, report};

/// The window `/metrics` reads lag and attempt latency over.
const METRICS_WINDOW: Duration = Duration::from_secs(300);

/// The OpenMetrics text format's media type.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<AppState>) -> Response {
    match state.outbox.ready().await {
        Ok(()) => format!("ready: registry {}\n", state.outbox.registry().digest).into_response(),
        Err(error) => {
            report(&error);
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: the store does not answer, is not migrated or holds another registry\n",
            )
                .into_response()
        }
    }
}

async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    // The semaphore is never closed; a closed one would only lift the limit.
    let _turn = state.metrics.acquire().await;
    let report = state
        .outbox
        .status(METRICS_WINDOW)
        .await?
        .with_totals(state.outbox.attempt_totals().await?);
    Ok(([(header::CONTENT_TYPE, OPENMETRICS)], report.prometheus()).into_response())
}
