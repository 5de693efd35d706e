//! Errors as HTTP answers: RFC 9457 problem details (`application/problem+json`), whose text
//! never holds a payload, a token or a database message.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::collections::BTreeMap;

use evc_runtime::ReplayError;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa::openapi::{self, ContentBuilder, Ref, RefOr, ResponseBuilder};

use crate::auth::Role;

/// A problem details document (RFC 9457).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Problem {
    /// A URI naming the kind of problem (`about:blank`: the status says it all).
    #[serde(rename = "type")]
    pub(crate) kind: String,
    /// The status's reason phrase.
    pub(crate) title: String,
    /// The HTTP status.
    pub(crate) status: u16,
    /// What went wrong with this request.
    pub(crate) detail: String,
}

/// The problems every `/api/v1` route but the document may answer, for its `responses(...)`:
/// 401 (no known bearer token) and 503 (the store did not answer).
pub(crate) struct Unavailable;

impl utoipa::IntoResponses for Unavailable {
    fn responses() -> BTreeMap<String, RefOr<openapi::Response>> {
        [
            ("401", "No known bearer token"),
            ("503", "The store did not answer"),
        ]
        .into_iter()
        .map(|(status, description)| (status.to_owned(), problem_response(description)))
        .collect()
    }
}

/// A response whose body is a [`Problem`].
fn problem_response(description: &str) -> RefOr<openapi::Response> {
    let content = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name("Problem")))
        .build();
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content("application/problem+json", content)
            .build(),
    )
}

/// Why a request was not answered.
#[derive(Debug)]
pub(crate) enum ApiError {
    /// No `Authorization: Bearer` token, or one no caller holds.
    Unauthorized,
    /// A form posted from another site than this server's pages.
    CrossSite,
    /// The caller's role may not do this.
    Forbidden {
        /// The caller's role.
        role: Role,
        /// The role the call needs.
        needed: Role,
    },
    /// The caller may not read this (a topic its token does not list, a route a tenant-bound
    /// token may not use); `detail` says which.
    NotPermitted(String),
    /// Nothing of that name (`what`).
    NotFound(String),
    /// The outbox's state refuses the call (a changed plan, the two-person rule, a reused
    /// key); `detail` says why and what to do.
    Conflict(String),
    /// A field of the request is not acceptable; `detail` names it.
    Unprocessable(String),
    /// The request is malformed; `detail` says how.
    BadRequest(String),
    /// The route exists, but not with this method.
    MethodNotAllowed,
    /// The store failed; the detail stays in the server's own error output.
    Store,
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden { .. } | Self::CrossSite | Self::NotPermitted(_) => {
                StatusCode::FORBIDDEN
            }
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Store => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn detail(&self) -> String {
        match self {
            Self::Unauthorized => "a bearer token of a known caller is required".to_owned(),
            Self::Forbidden { role, needed } => {
                format!("this needs the {needed} role; the caller is a {role}")
            }
            Self::NotFound(what) => format!("{what} does not exist"),
            Self::BadRequest(detail)
            | Self::Conflict(detail)
            | Self::Unprocessable(detail)
            | Self::NotPermitted(detail) => detail.clone(),
            Self::Store => "the outbox store did not answer; see the server's log".to_owned(),
            Self::MethodNotAllowed => "the route does not take this method".to_owned(),
            Self::CrossSite => "forms are taken only from this server's own pages".to_owned(),
        }
    }
}

/// A store error: reported by the server, answered without its text.
impl From<evc_runtime::DispatchError> for ApiError {
    fn from(error: evc_runtime::DispatchError) -> Self {
        match error {
            evc_runtime::DispatchError::UnknownConsumer(name) => {
                Self::NotFound(format!("consumer `{name}`"))
            }
            evc_runtime::DispatchError::TraceId(error) => Self::BadRequest(error.to_string()),
            evc_runtime::DispatchError::InvalidChange(why)
            | evc_runtime::DispatchError::InvalidOutcome(why) => Self::Unprocessable(why),
            error @ evc_runtime::DispatchError::NotDelivered { .. } => {
                Self::Unprocessable(error.to_string())
            }
            error @ evc_runtime::DispatchError::CutoverRefused(_) => {
                Self::Conflict(error.to_string())
            }
            error @ evc_runtime::DispatchError::TenantScoped(..) => {
                Self::Conflict(error.to_string())
            }
            error => {
                report(&error);
                Self::Store
            }
        }
    }
}

/// A refused replay: its fields (422), the outbox's state (409), or the store (503).
impl From<ReplayError> for ApiError {
    fn from(error: ReplayError) -> Self {
        match error {
            ReplayError::UnknownConsumer(name) => Self::NotFound(format!("consumer `{name}`")),
            ReplayError::Database(error) => {
                report(&error);
                Self::Store
            }
            ReplayError::ReasonMissing
            | ReplayError::ReasonTooLong { .. }
            | ReplayError::ApprovalMissing
            | ReplayError::IdempotencyKeyMissing
            | ReplayError::PersonMissing { .. }
            | ReplayError::PersonNotALogin { .. }
            | ReplayError::RefTooLong { .. }
            | ReplayError::ControlCharacters { .. } => Self::Unprocessable(error.to_string()),
            error => Self::Conflict(error.to_string()),
        }
    }
}

/// Writes a store failure to the server's standard error, where an operator reads it.
pub(crate) fn report(error: &dyn std::error::Error) {
    eprintln!("evc serve: store error: {error}");
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let problem = Problem {
            kind: "about:blank".to_owned(),
            title: status.canonical_reason().unwrap_or_default().to_owned(),
            status: status.as_u16(),
            detail: self.detail(),
        };
        let mut response = (status, axum::Json(problem)).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if matches!(self, Self::Unauthorized) {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
