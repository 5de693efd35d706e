//! An event type's page: its versions with their schemas and the consumers accepting each, and
//! the difference between two versions' schemas (`?from=1.0.0&to=2.0.0`; by default the last
//! two), line by line over the schemas printed with sorted keys.

use askama::Template;
use axum::extract::State;
use axum::response::Html;
use serde::Deserialize;
use similar::{ChangeTag, TextDiff};

use super::{Viewer, render};
use crate::AppState;
use crate::api::{Params, Segment, event_type_detail};
use crate::error::ApiError;

/// A version as the page shows it: its schema pretty-printed.
struct ShownVersion {
    version: String,
    schema_digest: String,
    accepted_by: Vec<String>,
    pretty: String,
}

/// An event type as the page shows it.
struct ShownType {
    name: String,
    description: String,
    producer_class: String,
    order_key: Vec<String>,
    deprecated: bool,
    max_payload_bytes: u32,
    compat: Option<String>,
    versions: Vec<ShownVersion>,
}

/// One line of a schema diff: `-` (only in `from`), `+` (only in `to`) or ` ` (in both).
struct DiffLine {
    sign: char,
    text: String,
}

/// The difference between two versions' schemas.
struct SchemaDiff {
    from: String,
    to: String,
    lines: Vec<DiffLine>,
}

#[derive(Template)]
#[template(path = "event_type.html")]
struct EventTypePage {
    viewer: String,
    event_type: ShownType,
    diff: Option<SchemaDiff>,
}

/// Which two versions to compare.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DiffQuery {
    from: Option<String>,
    to: Option<String>,
}

pub(crate) async fn page(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Segment(name): Segment,
    Params(query): Params<DiffQuery>,
) -> Result<Html<String>, ApiError> {
    let detail = event_type_detail(&state, &name)?;
    let versions: Vec<ShownVersion> = detail
        .versions
        .into_iter()
        .map(|version| ShownVersion {
            pretty: serde_json::to_string_pretty(&sorted(version.schema)).unwrap_or_default(),
            version: version.version,
            schema_digest: version.schema_digest,
            accepted_by: version.accepted_by,
        })
        .collect();
    let diff = diff(&versions, query)?;
    render(&EventTypePage {
        viewer: viewer.name,
        event_type: ShownType {
            name: detail.name,
            description: detail.description,
            producer_class: detail.producer_class,
            order_key: detail.order_key,
            deprecated: detail.deprecated,
            max_payload_bytes: detail.max_payload_bytes,
            compat: detail.compat,
            versions,
        },
        diff,
    })
}

/// The diff the query asks for (the last two versions when it names none; none for a type
/// with one version).
fn diff(versions: &[ShownVersion], query: DiffQuery) -> Result<Option<SchemaDiff>, ApiError> {
    let find = |wanted: &str| {
        versions
            .iter()
            .find(|version| version.version == wanted)
            .ok_or_else(|| ApiError::NotFound(format!("version `{wanted}`")))
    };
    let (from, to) = match (query.from, query.to, versions) {
        (Some(from), Some(to), _) => (find(&from)?, find(&to)?),
        (None, None, [.., from, to]) => (from, to),
        (None, None, _) => return Ok(None),
        _ => {
            return Err(ApiError::BadRequest(
                "name both versions to compare: ?from=VERSION&to=VERSION".to_owned(),
            ));
        }
    };
    let lines = TextDiff::from_lines(&from.pretty, &to.pretty)
        .iter_all_changes()
        .map(|change| DiffLine {
            sign: match change.tag() {
                ChangeTag::Delete => '-',
                ChangeTag::Insert => '+',
                ChangeTag::Equal => ' ',
            },
            text: change.value().trim_end_matches('\n').to_owned(),
        })
        .collect();
    Ok(Some(SchemaDiff {
        from: from.version.clone(),
        to: to.version.clone(),
        lines,
    }))
}

/// `value` with every object's keys in order, so that two schemas line up.
fn sorted(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<_> = map.into_iter().collect();
            entries.sort_by(|(a, _), (b, _)| a.cmp(b));
            serde_json::Value::Object(
                entries
                    .into_iter()
                    .map(|(key, value)| (key, sorted(value)))
                    .collect(),
            )
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(sorted).collect())
        }
        other => other,
    }
}
