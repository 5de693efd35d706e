//! The web page `evc serve` serves at `/`: server-rendered HTML (askama), problems first, each
//! linking to its consumer or event type; a consumer's page with its counts, dead letters, subscriptions and
//! recorded changes; an event's page with every delivery and attempt. A browser signs in once
//! with a token from the tokens file; the session cookie is signed by the process and never
//! holds the token ([`SessionKey`]), `HttpOnly` and `SameSite=Strict`. The consumer's page
//! takes the pause, resume, replay and discard forms ([`consumer`]).

use std::time::Duration;

use askama::Template;
use axum::Router;
use axum::extract::{Form, FromRequestParts, State};
use axum::http::header::{
    CONTENT_LENGTH, CONTENT_SECURITY_POLICY, CONTENT_TYPE, COOKIE, REFERRER_POLICY, SET_COOKIE,
    X_CONTENT_TYPE_OPTIONS,
};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use evc_runtime::Problem;
use serde::Deserialize;
use uuid::Uuid;

use crate::AppState;
use crate::api::event::{EventDetail, load};
use crate::api::{ConsumerView, Segment, TimelineItem, consumer_view, timeline_item};
use crate::auth::Principal;
use crate::error::ApiError;

mod consumer;
mod event_type;
mod live;
mod session;

pub(crate) use session::SessionKey;

/// The cookie of a signed-in browser.
const SESSION_COOKIE: &str = "evc_session";
/// The p99 produce-to-ack lag above which a consumer is a problem.
const LAG_LIMIT: Duration = Duration::from_secs(30);
/// The window of the status the pages read.
pub(crate) const WINDOW: Duration = Duration::from_secs(300);

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(problems))
        .route("/login", get(login_form).post(login))
        .route("/logout", post(logout))
        .route("/consumers/{name}", get(consumer::page))
        .route("/consumers/{name}/replay/propose", post(consumer::propose))
        .route("/consumers/{name}/replay/apply", post(consumer::apply))
        .route("/consumers/{name}/pause", post(consumer::pause))
        .route("/consumers/{name}/resume", post(consumer::resume))
        .route(
            "/consumers/{name}/discard/propose",
            post(consumer::propose_discard),
        )
        .route(
            "/consumers/{name}/discard/apply",
            post(consumer::apply_discard),
        )
        .route("/events/{event_id}", get(event))
        .route("/event-types/{name}", get(event_type::page))
        .route("/timeline/{trace_id}", get(timeline))
        .route("/live", get(live::stream))
        .route("/live.js", get(live::script))
        .layer(axum::middleware::map_response(page_headers))
}

/// Errors as pages: a refusal of a page route (a problem document, or the plain text of a form
/// that does not parse) is shown as HTML with the same status and detail.
#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    status: u16,
    title: String,
    detail: String,
}

/// Longest error body read back to render it as a page.
const MAX_ERROR_BODY: usize = 64 * 1024;

async fn as_html_error(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_ERROR_BODY)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let detail = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|problem| problem["detail"].as_str().map(str::to_owned))
        .unwrap_or(text);
    let page = ErrorPage {
        status: parts.status.as_u16(),
        title: parts
            .status
            .canonical_reason()
            .unwrap_or_default()
            .to_owned(),
        detail,
    };
    let html = page.render().unwrap_or_else(|_| page.detail.clone());
    parts.headers.remove(CONTENT_LENGTH);
    parts.headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    Response::from_parts(parts, axum::body::Body::from(html))
}

/// The pages load nothing from elsewhere, run only this server's script (`/live.js`), connect
/// only to this server and are never framed by another site.
async fn page_headers(response: Response) -> Response {
    let html = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            value.starts_with("text/html") || value.starts_with("text/event-stream")
        });
    let mut response = if response.status().is_client_error() || response.status().is_server_error()
    {
        if html {
            response
        } else {
            as_html_error(response).await
        }
    } else {
        response
    };
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; script-src 'self'; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    response
}

/// The signed-in caller of a page; without a session the browser is sent to sign in.
pub(crate) struct Viewer(pub(crate) Principal);

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Redirect;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Redirect> {
        cookie(&parts.headers, SESSION_COOKIE)
            .and_then(|value| state.sessions.open(value, &state.tokens))
            // A caller bound to a tenant may use the realtime gateway only.
            .filter(|principal| principal.tenant.is_none())
            .cloned()
            .map(Viewer)
            .ok_or_else(|| Redirect::to("/login"))
    }
}

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    failed: bool,
}

#[derive(Deserialize)]
struct Login {
    token: String,
}

async fn login_form() -> Result<Html<String>, ApiError> {
    render(&LoginPage { failed: false })
}

async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<Login>,
) -> Response {
    if let Err(error) = consumer::same_site(&headers) {
        return error.into_response();
    }
    let known = state.tokens.principal(&form.token);
    if known.is_none_or(|principal| principal.tenant.is_some()) {
        return match render(&LoginPage { failed: true }) {
            Ok(page) => (axum::http::StatusCode::UNAUTHORIZED, page).into_response(),
            Err(error) => error.into_response(),
        };
    }
    let cookie = format!(
        "{SESSION_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        state.sessions.issue(&form.token),
        session::SESSION_LIFETIME.as_secs()
    );
    ([(SET_COOKIE, cookie)], Redirect::to("/")).into_response()
}

async fn logout(headers: HeaderMap) -> Response {
    if let Err(error) = consumer::same_site(&headers) {
        return error.into_response();
    }
    let cookie = format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    ([(SET_COOKIE, cookie)], Redirect::to("/login")).into_response()
}

/// The value of the request's cookie `name`.
pub(crate) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|cookies| cookies.split(';'))
        .filter_map(|cookie| cookie.trim().split_once('='))
        .find_map(|(key, value)| (key == name).then_some(value))
}

/// A problem as the page lists it: what, and the page that details it.
struct Listed {
    text: String,
    /// The page that details it.
    href: Option<String>,
}

#[derive(Template)]
#[template(path = "problems.html")]
struct ProblemsPage {
    viewer: String,
    lag_limit: String,
    problems: Vec<Listed>,
    consumers: Vec<ConsumerView>,
}

async fn problems(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
) -> Result<Html<String>, ApiError> {
    let report = state.outbox.status(WINDOW).await?;
    // Drift first: every other line may be about a registry the database no longer holds.
    let drift = match state.outbox.ready().await {
        Err(evc_runtime::StoreError::Drift(drift)) => Some(Listed {
            text: format!(
                "registry drift: the database holds another registry than this server was \
                 opened on ({} difference{}, first: {}); restart the server on the new one",
                drift.differences.len(),
                if drift.differences.len() == 1 {
                    ""
                } else {
                    "s"
                },
                drift
                    .differences
                    .first()
                    .map_or_else(String::new, ToString::to_string)
            ),
            href: None,
        }),
        _ => None,
    };
    let registry = state.outbox.registry();
    let problems = drift
        .into_iter()
        .chain(report.problems(LAG_LIMIT).iter().map(|problem| {
            Listed {
                text: problem.to_string(),
                href: match problem {
                    Problem::DeadLetters { consumer, .. }
                    | Problem::LagBreach { consumer, .. }
                    | Problem::Stopped { consumer, .. } => Some(format!("/consumers/{consumer}")),
                    Problem::SilentWorker(worker) => {
                        Some(format!("/consumers/{}", worker.consumer))
                    }
                    // A refused type may be one the registry does not know: no page then.
                    Problem::Rejects(rejects) => registry
                        .event(&rejects.event_type)
                        .map(|event| format!("/event-types/{}", event.name)),
                    _ => None,
                },
            }
        }))
        .collect();
    let consumers = state
        .outbox
        .registry()
        .consumers
        .iter()
        .map(|consumer| consumer_view(state.outbox.registry(), consumer, &report))
        .collect();
    render(&ProblemsPage {
        viewer: viewer.name,
        lag_limit: format!("{} s", LAG_LIMIT.as_secs()),
        problems,
        consumers,
    })
}

#[derive(Template)]
#[template(path = "event.html")]
struct EventPage {
    viewer: String,
    event: EventDetail,
}

async fn event(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Segment(event_id): Segment,
) -> Result<Html<String>, ApiError> {
    let id: Uuid = event_id
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("`{event_id}` is not a UUID")))?;
    render(&EventPage {
        viewer: viewer.name,
        event: load(&state, id).await?,
    })
}

pub(crate) fn render(page: &impl Template) -> Result<Html<String>, ApiError> {
    page.render().map(Html).map_err(|error| {
        crate::error::report(&error);
        ApiError::Store
    })
}

#[derive(Template)]
#[template(path = "timeline.html")]
struct TimelinePage {
    viewer: String,
    trace_id: String,
    entries: Vec<TimelineItem>,
}

async fn timeline(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Segment(trace_id): Segment,
) -> Result<Html<String>, ApiError> {
    let entries = state.outbox.timeline(&trace_id).await?;
    render(&TimelinePage {
        viewer: viewer.name,
        entries: entries.iter().map(timeline_item).collect(),
        trace_id,
    })
}
