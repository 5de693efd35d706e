//! `evc import asyncapi`: contract files from an AsyncAPI 3.0 document.
//!
//! # Mapping
//!
//! - **Project**: `info.title`, normalized to a name (`Streetlights Kafka API` →
//!   `streetlights_kafka_api`), is the project in `evc.yaml`.
//! - **Channels and messages → event types.** A channel's event type is its `x-evc-event`, else
//!   its `address` normalized to the event type pattern: parameters (`{streetlightId}`) dropped,
//!   `/` and `.` separate segments, everything else snake_case
//!   (`smartylighting/streetlights/1/0/event/{streetlightId}/lighting/measured` →
//!   `smartylighting.streetlights.1.0.event.lighting.measured`). An address of fewer than two
//!   segments (or none) falls back to the channel id, and then to `<project>.<segment>`.
//!   Messages with an `x-evc-version` are versions of that event type. Otherwise one message is
//!   version `1.0.0`; several messages without versions are different kinds of message, and each
//!   becomes its own event type `<channel type>.<message id>` at `1.0.0`. Names that collide get
//!   a numeric suffix.
//! - **Payloads** keep what they say: unions (`oneOf`, `anyOf`, `allOf`), tuples, type unions,
//!   enums and consts of any type, conditionals, non-object roots and open objects are written
//!   to the contract as they are. A `$ref` inside the payload schema stays; a `$ref` into the
//!   rest of the document is inlined, except that a target referring to itself is copied once
//!   into the payload's `$defs` and its references point there, so recursion is kept. An event
//!   type whose payloads have an object that accepts keys it does not list gets
//!   `payload_policy: {content: open}`; the others stay closed and get no setting.
//! - **Schema formats**: AsyncAPI Schema Objects, JSON Schema draft-07 (-06, -04) and OpenAPI 3.0
//!   schemas are translated to JSON Schema 2020-12 (`definitions` → `$defs`, tuple `items` →
//!   `prefixItems`, `dependencies` split, boolean exclusive bounds as numbers, `nullable` folded
//!   into `type`, `$schema` removed), each reported as an adaptation. They are translated, not
//!   kept under their `$schema`, because the AsyncAPI and OpenAPI Schema Objects are no draft the
//!   checker reads (`nullable`, `discriminator`), inlined components and the payload must make one
//!   schema in one dialect, and 2020-12 is what the loader turns every draft into and what
//!   `evc generate` writes back. Keywords 2020-12 does not know are kept as `x-<keyword>`
//!   annotations and reported.
//! - **What the checker refuses** (an invalid keyword, a reference cycle no type can hold, an
//!   `enum` or `const` string holding a character generated code cannot carry) is kept as an
//!   `x-<keyword>` annotation and reported; a deny-listed or credential-shaped
//!   property name is handled by the payload policy (below). Payloads in other formats (Avro,
//!   RAML, ...), and payloads or subschemas behind references that cannot be resolved offline,
//!   become an empty closed object (or an unconstrained subschema) that keeps the original under
//!   an `x-asyncapi-*` annotation, and are reported as unsupported.
//! - **`send` operations → producer class** of the event types of their messages
//!   (`x-evc-producer-class`, else the project name). An event type no operation sends gets the
//!   project as producer class (noted as an adaptation).
//! - **`receive` operations → consumers** (`x-evc-consumer`, else the operation id normalized)
//!   subscribing to the event types of their messages at `type@^major` (or the
//!   `x-evc-subscription` requirement). Consumer settings the document cannot say (executor kind,
//!   handler) default to `external` and `leased`, noted as adaptations; `x-evc-*` settings
//!   written by `evc generate` are read back.
//! - **Retry policies** from `x-evc-retry-policy` and `components.x-evc-retry-policies`, else one
//!   `default` policy.
//! - **Executor classes** from `components.x-evc-executor-classes` (into
//!   `executor-classes.yaml`) and each receive operation's `x-evc-executor-class`.
//! - The payload policy in `evc.yaml` is evc's default; a deny-listed or credential-shaped name a
//!   payload uses is taken off the list and reported, so the import loads but the finding is not
//!   lost.
//!
//! Servers, security, bindings, traits, correlation ids, headers, replies, channel parameters,
//! tags, external docs, examples and any key evc has no place for are listed in
//! [`Imported::unsupported`] with their JSON pointers; nothing is dropped silently.
//!
//! A document written by `evc generate` imports back to contracts that render the same
//! document.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::{Map, Value as Json, json};

use crate::diagnostic::{Rule, Severity};
use crate::emit::Artifact;
use crate::emit::asyncapi as doc_layout;
use crate::emit::asyncapi::{local_pointer, root_channel_id};
use crate::format::{
    CompatMode, ConsumerMode, EventPayloadPolicyDef, EventStatus, ExecutorClassDef, ExecutorKind,
    FailureClass, FieldName, HandlerKind, Jitter, MigrationPolicyDef, OrderKeyDef, Ordering,
    RetryKind, RetryPolicyDef,
};
use crate::model::{ContentModel, PayloadPolicy};
use crate::payload_schema;
use crate::source::SourceFile;
use crate::yaml::{self, escape_pointer_segment, pointer_segments};

/// Modeline of `evc.yaml`, pointing editors at the format schema.
pub const PROJECT_MODELINE: &str =
    "# yaml-language-server: $schema=../docs/schema/project.schema.json";
/// Modeline of event files.
pub const EVENT_MODELINE: &str =
    "# yaml-language-server: $schema=../../docs/schema/event.schema.json";
/// Modeline of consumer files.
pub const CONSUMER_MODELINE: &str =
    "# yaml-language-server: $schema=../../docs/schema/consumer.schema.json";
/// Modeline of `retry-policies.yaml`.
pub const RETRY_POLICIES_MODELINE: &str =
    "# yaml-language-server: $schema=../docs/schema/retry-policies.schema.json";
/// Modeline of `executor-classes.yaml`.
pub const EXECUTOR_CLASSES_MODELINE: &str =
    "# yaml-language-server: $schema=../docs/schema/executor-classes.schema.json";

/// The retry policy consumers get when the document names none.
pub const DEFAULT_POLICY: &str = "default";

/// The result of an import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The project name (from `info.title`).
    pub project: String,
    /// Contract files, relative to the contract directory, ordered by path: `evc.yaml`,
    /// `events/<type>.yaml`, `consumers/<name>.yaml`, `executor-classes.yaml`,
    /// `retry-policies.yaml`.
    pub files: Vec<Artifact>,
    /// How each channel of the document was mapped, in document order.
    pub channels: Vec<ImportedChannel>,
    /// How each operation of the document was mapped, in document order.
    pub operations: Vec<ImportedOperation>,
    /// Parts of the document evc contracts cannot express, each `<JSON pointer>: <why>`.
    pub unsupported: Vec<String>,
    /// Changes made so the contracts are valid, each `<JSON pointer>: <what>`.
    pub adapted: Vec<String>,
}

/// How one channel was imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedChannel {
    /// The channel id in the document.
    pub id: String,
    /// Its address (`None` when null or absent).
    pub address: Option<String>,
    /// Its messages, in document order.
    pub messages: Vec<ImportedMessage>,
}

/// How one message of a channel was imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedMessage {
    /// The message id in the channel.
    pub id: String,
    /// The event type it became a version of.
    pub event: String,
    /// The version.
    pub version: semver::Version,
}

/// How one operation was imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedOperation {
    /// The operation id in the document.
    pub id: String,
    /// `send` or `receive`.
    pub action: String,
    /// The channel id it refers to.
    pub channel: String,
    /// The event types of its messages.
    pub events: Vec<String>,
    /// The producer class (`send`) or consumer (`receive`) it became; empty when skipped.
    pub becomes: String,
}

/// Why a document could not be imported at all.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The text is not YAML (or JSON) the loader accepts.
    #[error("the document does not parse at line {line}, column {column}: {message}")]
    Yaml {
        /// 1-based line.
        line: u32,
        /// 1-based column.
        column: u32,
        /// What is wrong.
        message: String,
    },
    /// The document is not an AsyncAPI 3 document.
    #[error("not an AsyncAPI 3 document: {found}")]
    NotAsyncApi3 {
        /// What was found instead.
        found: String,
    },
    /// A contract file could not be serialized (a bug).
    #[error("serializing {file}: {message}")]
    Serialize {
        /// The file.
        file: String,
        /// What went wrong.
        message: String,
    },
}

/// Imports an AsyncAPI 3.0 document (YAML or JSON text).
///
/// # Errors
/// [`ImportError::Yaml`] when the text does not parse, [`ImportError::NotAsyncApi3`] when it is
/// not an AsyncAPI 3 document.
pub fn import(asyncapi_text: &str) -> Result<Imported, ImportError> {
    let file = SourceFile::new("asyncapi.yaml", asyncapi_text);
    let doc = match yaml::parse_within(&file, yaml::Limits::DOCUMENT) {
        Ok(Some(node)) => node.to_json(),
        Ok(None) => {
            return Err(ImportError::NotAsyncApi3 {
                found: "an empty document".to_owned(),
            });
        }
        Err(diagnostic) => {
            return Err(ImportError::Yaml {
                line: diagnostic.location.line,
                column: diagnostic.location.column,
                message: diagnostic.message,
            });
        }
    };
    match doc.get("asyncapi") {
        Some(Json::String(version)) if version.starts_with("3.") => {}
        Some(other) => {
            return Err(ImportError::NotAsyncApi3 {
                found: format!("`asyncapi: {other}`"),
            });
        }
        None if doc.is_object() => {
            return Err(ImportError::NotAsyncApi3 {
                found: "no `asyncapi` field".to_owned(),
            });
        }
        None => {
            return Err(ImportError::NotAsyncApi3 {
                found: "a document that is not a mapping".to_owned(),
            });
        }
    }
    let mut importer = Importer::new(&doc);
    importer.root();
    importer.channels();
    importer.operations();
    importer.components();
    importer.finish()
}

// ---------------------------------------------------------------------------------------------
// Names

/// One snake_case segment: camelCase and acronyms split (`receiveACostingRequest` →
/// `receive_a_costing_request`, `AsyncAPI` → `async_api`), anything not alphanumeric becomes
/// `_`, runs of `_` collapsed and trimmed.
fn snake_segment(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    for (index, &c) in chars.iter().enumerate() {
        if c.is_ascii_alphanumeric() {
            if c.is_ascii_uppercase() && !out.is_empty() && !out.ends_with('_') {
                let previous = index.checked_sub(1).map(|i| chars[i]);
                let next = chars.get(index + 1);
                let after_lower =
                    previous.is_some_and(|p| p.is_ascii_lowercase() || p.is_ascii_digit());
                let acronym_end = previous.is_some_and(|p| p.is_ascii_uppercase())
                    && next.is_some_and(char::is_ascii_lowercase);
                if after_lower || acronym_end {
                    out.push('_');
                }
            }
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').to_owned()
}

/// Dot-separated snake_case segments of `text` (split at `/` and `.`), empty ones dropped.
fn segments(text: &str) -> Vec<String> {
    text.split(['/', '.'])
        .map(snake_segment)
        .filter(|segment| !segment.is_empty())
        .collect()
}

/// Joins segments into a name whose first segment starts with a letter.
fn join_name(mut parts: Vec<String>, prefix: &str) -> String {
    if let Some(first) = parts.first_mut()
        && !first.starts_with(|c: char| c.is_ascii_lowercase())
    {
        *first = format!("{prefix}_{first}");
    }
    parts.join(".")
}

/// A name matching the contract format's name pattern (`[a-z][a-z0-9_]*(\.[a-z0-9_]+)*`).
fn normalize_name(text: &str, fallback: &str) -> String {
    let parts = segments(text);
    if parts.is_empty() {
        fallback.to_owned()
    } else {
        join_name(parts, "n")
    }
}

fn is_segment(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Whether `text` matches the name pattern.
fn is_name(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_lowercase()) && text.split('.').all(is_segment)
}

/// Whether `text` matches the executor class pattern (a kind, a dot, a name).
fn is_executor_class(text: &str) -> bool {
    text.split_once('.').is_some_and(|(kind, rest)| {
        serde_json::from_value::<ExecutorKind>(Json::from(kind)).is_ok()
            && rest.split('.').all(is_segment)
    })
}

/// Whether `text` matches the event type pattern (a name of at least two segments).
fn is_event_type(text: &str) -> bool {
    is_name(text) && text.contains('.')
}

/// Removes `{parameter}` expressions from a channel address.
fn strip_parameters(address: &str) -> (String, bool) {
    let mut out = String::new();
    let mut depth = 0_usize;
    let mut stripped = false;
    for c in address.chars() {
        match c {
            '{' => {
                depth += 1;
                stripped = true;
            }
            '}' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    (out, stripped)
}

// ---------------------------------------------------------------------------------------------
// Notes

#[derive(Debug, Default, Clone)]
struct Notes {
    unsupported: Vec<String>,
    adapted: Vec<String>,
    seen: BTreeSet<String>,
}

impl Notes {
    fn unsupported(&mut self, pointer: &str, what: impl Display) {
        let line = format!("{pointer}: {what}");
        if self.seen.insert(line.clone()) {
            self.unsupported.push(line);
        }
    }

    fn adapted(&mut self, pointer: &str, what: impl Display) {
        let line = format!("{pointer}: {what}");
        if self.seen.insert(line.clone()) {
            self.adapted.push(line);
        }
    }
}

/// Why a key of the document has no place in the contracts.
fn reason(key: &str) -> &'static str {
    match key {
        "servers" => "servers (hosts, protocols) are not part of evc contracts",
        "security" | "securitySchemes" => "security requirements are not part of evc contracts",
        "bindings" | "serverBindings" | "channelBindings" | "operationBindings"
        | "messageBindings" => "protocol bindings are not part of evc contracts",
        "traits" | "messageTraits" | "operationTraits" => {
            "traits are not applied; what they add (headers, bindings) has no place in evc contracts"
        }
        "correlationId" | "correlationIds" => {
            "correlation ids are not part of evc contracts (the evc envelope carries `correlation_id`)"
        }
        "headers" => {
            "message headers are not part of evc contracts (the evc envelope carries the metadata)"
        }
        "reply" | "replies" | "replyAddresses" => "request/reply is not part of evc contracts",
        "parameters" => {
            "channel address parameters are not part of evc event types (dropped from the name)"
        }
        "tags" => "tags are not kept",
        "externalDocs" => "external documentation links are not kept",
        "examples" => "message examples are not kept",
        "id" => "the application id is not kept",
        "contact" | "license" | "termsOfService" => "not kept",
        "title" | "summary" | "description" | "name" => "not kept (evc keeps one description)",
        "version" => "not kept (evc versions each event type)",
        "serverVariables" | "channels" | "operations" => {
            "reusable components are imported only through the channels and operations that use them"
        }
        _ if key.starts_with("x-evc-") => "an evc extension this importer does not read",
        _ if key.starts_with("x-") => "extensions evc does not know are not kept",
        _ => "not part of evc contracts",
    }
}

/// Reports every key of `object` at `pointer` that is not in `used`.
fn leftovers(notes: &mut Notes, object: &Json, pointer: &str, used: &[&str]) {
    let Some(map) = object.as_object() else {
        return;
    };
    for key in map.keys() {
        if !used.contains(&key.as_str()) {
            notes.unsupported(
                &format!("{pointer}/{}", escape_pointer_segment(key)),
                reason(key),
            );
        }
    }
}

fn is_json_content_type(content_type: &str) -> bool {
    let base = content_type.split(';').next().unwrap_or_default().trim();
    base == "application/json" || base.ends_with("+json")
}

// ---------------------------------------------------------------------------------------------
// The plan

#[derive(Debug)]
struct EventPlan {
    name: String,
    description: String,
    producer_class: Option<String>,
    order_key: Vec<String>,
    compat: Option<CompatMode>,
    status: Option<EventStatus>,
    max_payload_bytes: Option<u32>,
    /// `open` when a payload has an object that accepts keys it does not list.
    content: ContentModel,
    versions: Vec<VersionPlan>,
    /// The pointer of the channel it came from.
    channel_pointer: String,
}

#[derive(Debug)]
struct VersionPlan {
    version: semver::Version,
    description: Option<String>,
    schema: Json,
    migration_policy: Option<MigrationPolicyDef>,
    deprecated: bool,
    /// The pointer of the message it came from.
    message_pointer: String,
}

#[derive(Debug)]
struct ChannelMessage {
    id: String,
    /// Pointer of the message object, after following references.
    target: String,
    event: String,
    version: semver::Version,
}

#[derive(Debug)]
struct ConsumerPlan {
    name: String,
    description: String,
    executor_kind: ExecutorKind,
    executor_class: Option<String>,
    handler: HandlerKind,
    ordering: Option<Ordering>,
    mode: Option<ConsumerMode>,
    heartbeat_threshold: Option<String>,
    retry_policy: Option<String>,
    subscribes: Vec<(String, String)>,
    /// Whether the name came from `x-evc-consumer` (operations naming it are merged).
    named: bool,
}

#[derive(Debug, Clone, Serialize)]
struct PolicyOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    kind: RetryKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    base_delay: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_delay: Option<String>,
    max_attempts: u32,
    jitter: Jitter,
    retry_on: Vec<FailureClass>,
}

impl From<RetryPolicyDef> for PolicyOut {
    fn from(def: RetryPolicyDef) -> Self {
        let base_delay = def.base_delay.map(|text| text.0).filter(|text| {
            !(def.kind == RetryKind::NoRetry && text.trim_start_matches('0') == "s")
        });
        Self {
            description: def.description,
            kind: def.kind,
            base_delay,
            max_delay: def.max_delay.map(|text| text.0),
            max_attempts: def.max_attempts,
            jitter: def.jitter,
            retry_on: def.retry_on,
        }
    }
}

fn default_policy() -> PolicyOut {
    PolicyOut {
        description: Some(
            "Imported default: transient failures retried with exponential backoff from 30s, capped at 30m, 5 attempts, full jitter."
                .to_owned(),
        ),
        kind: RetryKind::ExponentialBackoff,
        base_delay: Some("30s".to_owned()),
        max_delay: Some("30m".to_owned()),
        max_attempts: 5,
        jitter: Jitter::Full,
        retry_on: vec![FailureClass::Transient],
    }
}

/// Which schema language a payload is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    /// JSON Schema 2020-12 (what `evc generate` writes).
    Draft2020,
    /// JSON Schema draft-07 (or -06, -04), or the AsyncAPI Schema Object (a superset of
    /// draft-07).
    Draft07,
    /// The OpenAPI 3.0 Schema Object.
    OpenApi30,
}

fn dialect(schema_format: Option<&str>) -> Option<Dialect> {
    let Some(format) = schema_format else {
        return Some(Dialect::Draft07);
    };
    let normalized: String = format.chars().filter(|c| !c.is_whitespace()).collect();
    let normalized = normalized.to_ascii_lowercase();
    let (media, version) = normalized
        .split_once(";version=")
        .unwrap_or((&normalized, ""));
    match media {
        "application/schema+json" | "application/schema+yaml" => match version {
            "draft-2020-12" | "2020-12" => Some(Dialect::Draft2020),
            // Draft-04 and -06 differ from draft-07 only in what the conversion rewrites
            // anyway (boolean exclusive bounds) or in keywords 2020-12 has too.
            "draft-07" | "draft-7" | "draft-06" | "draft-6" | "draft-04" | "draft-4" | "" => {
                Some(Dialect::Draft07)
            }
            _ => None,
        },
        "application/vnd.aai.asyncapi"
        | "application/vnd.aai.asyncapi+json"
        | "application/vnd.aai.asyncapi+yaml" => Some(Dialect::Draft07),
        "application/vnd.oai.openapi"
        | "application/vnd.oai.openapi+json"
        | "application/vnd.oai.openapi+yaml" => Some(Dialect::OpenApi30),
        _ => None,
    }
}

const SUBSCHEMA_MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];
const SUBSCHEMA_LISTS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];
const SUBSCHEMA_SINGLE: &[&str] = &[
    "additionalProperties",
    "additionalItems",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
];

/// Deepest subschema nesting of an imported payload: each level takes one or two YAML levels in
/// the event file, which the loader caps at [`yaml::MAX_DEPTH`].
const MAX_SCHEMA_DEPTH: usize = 28;

/// Most subschemas one payload may grow to once references are inlined (a document that
/// references one schema twice at every level would otherwise grow exponentially).
const MAX_INLINED_SUBSCHEMAS: usize = 10_000;

fn empty_payload() -> Json {
    json!({"type": "object", "additionalProperties": false})
}

// ---------------------------------------------------------------------------------------------
// The importer

struct Importer<'a> {
    doc: &'a Json,
    notes: Notes,
    /// Pointers of components used (following references).
    used: BTreeSet<String>,
    project: String,
    events: Vec<EventPlan>,
    channel_messages: BTreeMap<String, Vec<ChannelMessage>>,
    channels: Vec<ImportedChannel>,
    consumers: Vec<ConsumerPlan>,
    policies: BTreeMap<String, PolicyOut>,
    classes: BTreeMap<String, ExecutorClassDef>,
    operations: Vec<ImportedOperation>,
    /// Subschema nesting of the payload being inlined.
    inline_depth: usize,
    /// Subschemas the payload being inlined may still grow by.
    inline_budget: usize,
    /// Targets of recursive references of the payload being inlined, by document pointer, with
    /// their name in its `$defs`.
    hoisted: BTreeMap<String, String>,
    /// Recursive targets the current inlining pass found that are not hoisted yet.
    recursive: BTreeSet<String>,
}

impl<'a> Importer<'a> {
    fn new(doc: &'a Json) -> Self {
        Self {
            doc,
            notes: Notes::default(),
            used: BTreeSet::new(),
            project: String::new(),
            events: Vec::new(),
            channel_messages: BTreeMap::new(),
            channels: Vec::new(),
            consumers: Vec::new(),
            policies: BTreeMap::new(),
            classes: BTreeMap::new(),
            operations: Vec::new(),
            inline_depth: 0,
            inline_budget: MAX_INLINED_SUBSCHEMAS,
            hoisted: BTreeMap::new(),
            recursive: BTreeSet::new(),
        }
    }

    /// Follows `$ref`s from `value` (found at `pointer`) to the object they stand for, returning
    /// its pointer; components passed through are marked used.
    fn follow(&mut self, value: &'a Json, pointer: &str) -> Option<(String, &'a Json)> {
        let mut current = value;
        let mut at = pointer.to_owned();
        for _ in 0..32 {
            let Some(reference) = current.get("$ref").and_then(Json::as_str) else {
                return Some((at, current));
            };
            let target = local_pointer(reference)?;
            current = self.doc.pointer(&target)?;
            if target.starts_with("/components/") {
                self.mark_used(&target);
            }
            at = target;
        }
        None
    }

    /// Marks the component at `pointer` (and the component entry containing it) as used.
    fn mark_used(&mut self, pointer: &str) {
        let parts: Vec<String> = pointer_segments(pointer).take(3).collect();
        if parts.len() == 3 {
            self.used.insert(format!(
                "/{}/{}/{}",
                escape_pointer_segment(&parts[0]),
                escape_pointer_segment(&parts[1]),
                escape_pointer_segment(&parts[2])
            ));
        }
    }

    fn extension<T: serde::de::DeserializeOwned>(
        &mut self,
        object: &Json,
        pointer: &str,
        key: &str,
    ) -> Option<T> {
        let value = object.get(key)?;
        match serde_json::from_value(value.clone()) {
            Ok(parsed) => Some(parsed),
            Err(error) => {
                self.notes.unsupported(
                    &format!("{pointer}/{key}"),
                    format!("not understood ({error}); ignored"),
                );
                None
            }
        }
    }

    /// The operation's `x-evc-executor-class`, when it is a valid class reference; otherwise a
    /// note.
    fn executor_class(&mut self, operation: &Json, pointer: &str) -> Option<String> {
        let class: String = self.extension(operation, pointer, "x-evc-executor-class")?;
        if is_executor_class(&class) {
            return Some(class);
        }
        self.notes.unsupported(
            &format!("{pointer}/x-evc-executor-class"),
            format!("`{class}` is not a valid executor class; ignored"),
        );
        None
    }

    fn root(&mut self) {
        let doc = self.doc;
        let info = doc.get("info").unwrap_or(&Json::Null);
        let title = info.get("title").and_then(Json::as_str).unwrap_or_default();
        self.project = normalize_name(title, "imported");
        if title != self.project {
            self.notes.adapted(
                "/info/title",
                format!("`{title}` becomes the project name `{}`", self.project),
            );
        }
        let mut used = vec!["title", "x-evc-registry-digest"];
        if info.get("version").and_then(Json::as_str) == Some(doc_layout::INFO_VERSION) {
            used.push("version");
        }
        if info.get("description").and_then(Json::as_str)
            == Some(doc_layout::info_description(&self.project).as_str())
        {
            used.push("description");
        }
        leftovers(&mut self.notes, info, "/info", &used);
        let mut used = vec!["asyncapi", "info", "channels", "operations", "components"];
        match doc.get("defaultContentType").and_then(Json::as_str) {
            Some(content_type) if is_json_content_type(content_type) => {
                used.push("defaultContentType");
            }
            Some(content_type) => self.notes.unsupported(
                "/defaultContentType",
                format!("evc payloads are JSON, not `{content_type}`"),
            ),
            None => {}
        }
        if doc.get("asyncapi").and_then(Json::as_str) != Some(doc_layout::ASYNCAPI_VERSION) {
            self.notes.adapted(
                "/asyncapi",
                "read as AsyncAPI 3.0.0; features of later versions may be missed",
            );
        }
        leftovers(&mut self.notes, doc, "", &used);
        if let Some(Json::Object(policies)) = doc
            .get("components")
            .and_then(|components| components.get("x-evc-retry-policies"))
        {
            for (name, settings) in policies {
                let pointer = format!(
                    "/components/x-evc-retry-policies/{}",
                    escape_pointer_segment(name)
                );
                self.policy(name, settings, &pointer);
            }
        }
        if let Some(Json::Object(classes)) = doc
            .get("components")
            .and_then(|components| components.get("x-evc-executor-classes"))
        {
            for (name, def) in classes {
                let pointer = format!(
                    "/components/x-evc-executor-classes/{}",
                    escape_pointer_segment(name)
                );
                if !is_executor_class(name) {
                    self.notes.unsupported(
                        &pointer,
                        format!("`{name}` is not a valid executor class; ignored"),
                    );
                    continue;
                }
                match serde_json::from_value::<ExecutorClassDef>(def.clone()) {
                    Ok(def) => {
                        self.classes.insert(name.clone(), def);
                    }
                    Err(error) => self.notes.unsupported(
                        &pointer,
                        format!("executor class not understood ({error}); ignored"),
                    ),
                }
            }
        }
    }

    /// Reads a retry policy written by `evc generate`.
    fn policy(&mut self, name: &str, settings: &Json, pointer: &str) -> Option<String> {
        if !is_name(name) {
            self.notes.unsupported(
                pointer,
                format!("`{name}` is not a valid policy name; ignored"),
            );
            return None;
        }
        let Json::Object(map) = settings else {
            self.notes
                .unsupported(pointer, "a retry policy is a mapping; ignored");
            return None;
        };
        let mut map = map.clone();
        map.remove("name");
        if map.is_empty() {
            return Some(name.to_owned());
        }
        match serde_json::from_value::<RetryPolicyDef>(Json::Object(map)) {
            // The first definition read wins (`components.x-evc-retry-policies` comes first and
            // carries descriptions); operations repeat the same settings.
            Ok(def) => {
                self.policies
                    .entry(name.to_owned())
                    .or_insert_with(|| PolicyOut::from(def));
            }
            Err(error) => {
                self.notes.unsupported(
                    pointer,
                    format!("retry policy not understood ({error}); ignored"),
                );
                return None;
            }
        }
        Some(name.to_owned())
    }

    // -----------------------------------------------------------------------------------------
    // Channels

    fn channels(&mut self) {
        let doc = self.doc;
        let Some(Json::Object(channels)) = doc.get("channels") else {
            return;
        };
        for (id, value) in channels {
            let pointer = format!("/channels/{}", escape_pointer_segment(id));
            let Some((channel_pointer, channel)) = self.follow(value, &pointer) else {
                self.notes.unsupported(
                    &pointer,
                    "the channel reference cannot be resolved; skipped",
                );
                continue;
            };
            self.channel(id, &pointer, &channel_pointer, channel);
        }
    }

    fn unique_event_name(&mut self, wanted: String, pointer: &str) -> String {
        if !self.events.iter().any(|event| event.name == wanted) {
            return wanted;
        }
        let mut index = 2;
        loop {
            let candidate = format!("{wanted}_{index}");
            if !self.events.iter().any(|event| event.name == candidate) {
                self.notes.adapted(
                    pointer,
                    format!("`{wanted}` is taken by another channel; named `{candidate}`"),
                );
                return candidate;
            }
            index += 1;
        }
    }

    /// The event type name a channel stands for.
    fn channel_event_name(&mut self, id: &str, channel: &Json, pointer: &str) -> String {
        if let Some(name) = channel.get("x-evc-event").and_then(Json::as_str)
            && is_event_type(name)
        {
            return name.to_owned();
        }
        let address = channel.get("address").and_then(Json::as_str);
        let (address_parts, stripped) = address.map_or((Vec::new(), false), |address| {
            let (text, stripped) = strip_parameters(address);
            (segments(&text), stripped)
        });
        let name = if address_parts.len() >= 2 {
            join_name(address_parts, "e")
        } else if segments(id).len() >= 2 {
            join_name(segments(id), "e")
        } else {
            let last = address_parts
                .into_iter()
                .next()
                .or_else(|| segments(id).into_iter().next())
                .unwrap_or_else(|| "channel".to_owned());
            format!("{}.{last}", self.project)
        };
        if address != Some(name.as_str()) {
            let what = match address {
                Some(address) if stripped => format!(
                    "address `{address}` becomes the event type `{name}` (parameters dropped)"
                ),
                Some(address) => format!("address `{address}` becomes the event type `{name}`"),
                None => format!("no address; the event type is `{name}`"),
            };
            self.notes.adapted(&format!("{pointer}/address"), what);
        }
        name
    }

    fn channel(&mut self, id: &str, pointer: &str, channel_pointer: &str, channel: &'a Json) {
        let base = self.channel_event_name(id, channel, pointer);
        // The messages, resolved, in document order.
        let mut versioned = Vec::new();
        let mut unversioned = Vec::new();
        if let Some(Json::Object(messages)) = channel.get("messages") {
            for (message_id, value) in messages {
                let message_pointer = format!(
                    "{channel_pointer}/messages/{}",
                    escape_pointer_segment(message_id)
                );
                let Some((target, message)) = self.follow(value, &message_pointer) else {
                    self.notes.unsupported(
                        &message_pointer,
                        "the message reference cannot be resolved; skipped",
                    );
                    continue;
                };
                let version = message
                    .get("x-evc-version")
                    .and_then(Json::as_str)
                    .and_then(|text| semver::Version::parse(text).ok());
                match version {
                    Some(version)
                        if !versioned.iter().any(
                            |(_, _, _, known): &(String, String, &Json, semver::Version)| {
                                *known == version
                            },
                        ) =>
                    {
                        versioned.push((message_id.clone(), target, message, version));
                    }
                    Some(version) => {
                        self.notes.adapted(
                            &message_pointer,
                            format!("a second message for version {version}; imported as its own event type"),
                        );
                        unversioned.push((message_id.clone(), target, message));
                    }
                    None => unversioned.push((message_id.clone(), target, message)),
                }
            }
        }
        let description_key = ["description", "summary", "title"].into_iter().find(|key| {
            channel
                .get(*key)
                .and_then(Json::as_str)
                .is_some_and(|t| !t.trim().is_empty())
        });
        let channel_description = description_key
            .and_then(|key| channel.get(key))
            .and_then(Json::as_str)
            .map(str::to_owned);
        if unversioned.len() > 1 || (!versioned.is_empty() && !unversioned.is_empty()) {
            self.notes.adapted(
                pointer,
                format!(
                    "the channel carries {} kinds of message without an `x-evc-version`; each becomes its own event type `{base}.<message>`",
                    unversioned.len()
                ),
            );
        }
        let mut imported = ImportedChannel {
            id: id.to_owned(),
            address: channel
                .get("address")
                .and_then(Json::as_str)
                .map(str::to_owned),
            messages: Vec::new(),
        };
        let mut channel_messages = Vec::new();
        let mut used_channel_keys = vec![
            "address",
            "messages",
            "x-evc-event",
            "x-evc-compat",
            "x-evc-status",
            "x-evc-order-key",
            "x-evc-max-payload-bytes",
        ];
        // The channel's own event type: its versioned messages, or its only message.
        let own: Vec<(String, String, &Json, semver::Version)> = if versioned.is_empty() {
            if unversioned.len() == 1 {
                let (message_id, target, message) = unversioned.remove(0);
                vec![(message_id, target, message, semver::Version::new(1, 0, 0))]
            } else {
                Vec::new()
            }
        } else {
            versioned
        };
        if !own.is_empty() || unversioned.is_empty() {
            let name = self.unique_event_name(base.clone(), pointer);
            let description = channel_description.clone().or_else(|| {
                own.first()
                    .and_then(|(_, _, message, _)| message_description(message))
            });
            if let Some(key) = description_key
                && channel_description.is_some()
            {
                used_channel_keys.push(key);
            }
            let mut event = self.new_event(
                &name,
                description.unwrap_or_else(|| format!("Messages of the AsyncAPI channel `{id}`.")),
                channel_pointer,
            );
            self.channel_extensions(&mut event, channel, channel_pointer);
            if own.is_empty() {
                self.notes.adapted(
                    pointer,
                    format!("the channel lists no messages; `{name}` 1.0.0 has an empty payload"),
                );
                event.versions.push(VersionPlan {
                    version: semver::Version::new(1, 0, 0),
                    description: None,
                    schema: empty_payload(),
                    migration_policy: None,
                    deprecated: false,
                    message_pointer: pointer.to_owned(),
                });
            }
            let described_by_message = channel_description.is_none();
            for (index, (message_id, target, message, version)) in own.into_iter().enumerate() {
                let plan = self.version(
                    &name,
                    &message_id,
                    &target,
                    message,
                    version.clone(),
                    described_by_message && index == 0,
                );
                event.versions.push(plan);
                imported.messages.push(ImportedMessage {
                    id: message_id.clone(),
                    event: name.clone(),
                    version: version.clone(),
                });
                channel_messages.push(ChannelMessage {
                    id: message_id,
                    target,
                    event: name.clone(),
                    version,
                });
            }
            self.finish_event(event);
        }
        for (message_id, target, message) in unversioned {
            let wanted = format!("{base}.{}", join_segment(&message_id));
            let name = self.unique_event_name(wanted, pointer);
            let description = message_description(message)
                .or_else(|| channel_description.clone())
                .unwrap_or_else(|| {
                    format!("`{message_id}` messages of the AsyncAPI channel `{id}`.")
                });
            let mut event = self.new_event(&name, description, channel_pointer);
            let version = semver::Version::new(1, 0, 0);
            let plan = self.version(&name, &message_id, &target, message, version.clone(), true);
            event.versions.push(plan);
            self.finish_event(event);
            imported.messages.push(ImportedMessage {
                id: message_id.clone(),
                event: name.clone(),
                version: version.clone(),
            });
            channel_messages.push(ChannelMessage {
                id: message_id,
                target,
                event: name,
                version,
            });
        }
        leftovers(
            &mut self.notes,
            channel,
            channel_pointer,
            &used_channel_keys,
        );
        self.channel_messages
            .insert(id.to_owned(), channel_messages);
        self.channels.push(imported);
    }

    fn new_event(&self, name: &str, description: String, channel_pointer: &str) -> EventPlan {
        EventPlan {
            name: name.to_owned(),
            description,
            producer_class: None,
            order_key: Vec::new(),
            compat: None,
            status: None,
            max_payload_bytes: None,
            content: ContentModel::Closed,
            versions: Vec::new(),
            channel_pointer: channel_pointer.to_owned(),
        }
    }

    fn channel_extensions(&mut self, event: &mut EventPlan, channel: &Json, pointer: &str) {
        event.compat = self.extension(channel, pointer, "x-evc-compat");
        event.status = self.extension(channel, pointer, "x-evc-status");
        event.order_key = self
            .extension::<Vec<String>>(channel, pointer, "x-evc-order-key")
            .unwrap_or_default();
        event.max_payload_bytes = self.extension(channel, pointer, "x-evc-max-payload-bytes");
    }

    fn finish_event(&mut self, mut event: EventPlan) {
        if event.status.is_none()
            && !event.versions.is_empty()
            && event.versions.iter().all(|version| version.deprecated)
        {
            event.status = Some(EventStatus::Deprecated);
        }
        self.events.push(event);
    }

    /// One message as one version of `event`.
    fn version(
        &mut self,
        event: &str,
        message_id: &str,
        target: &str,
        message: &'a Json,
        version: semver::Version,
        description_used_for_event: bool,
    ) -> VersionPlan {
        let mut used = vec![
            "payload",
            "description",
            "deprecated",
            "x-evc-event",
            "x-evc-version",
            "x-evc-schema-digest",
            "x-evc-migration-policy",
        ];
        if message.get("name").and_then(Json::as_str)
            == Some(doc_layout::message_id(event, &version).as_str())
            || message.get("name").and_then(Json::as_str) == Some(message_id)
        {
            used.push("name");
        }
        if message.get("title").and_then(Json::as_str)
            == Some(doc_layout::message_title(event, &version).as_str())
        {
            used.push("title");
        }
        if description_used_for_event && let Some(key) = message_description_key(message) {
            used.push(key);
        }
        match message.get("contentType").and_then(Json::as_str) {
            Some(content_type) if is_json_content_type(content_type) => used.push("contentType"),
            Some(content_type) => self.notes.unsupported(
                &format!("{target}/contentType"),
                format!("evc payloads are JSON, not `{content_type}`"),
            ),
            None => {}
        }
        leftovers(&mut self.notes, message, target, &used);
        let schema = self.payload(message, target);
        if let Some(digest) = message.get("x-evc-schema-digest").and_then(Json::as_str)
            && digest != crate::digest::json_digest(&schema)
        {
            self.notes.adapted(
                &format!("{target}/x-evc-schema-digest"),
                "does not match the payload schema; the payload schema is imported",
            );
        }
        let description = message
            .get("description")
            .and_then(Json::as_str)
            .filter(|text| !text.trim().is_empty())
            .map(str::to_owned);
        VersionPlan {
            version,
            description,
            schema,
            migration_policy: self.extension(message, target, "x-evc-migration-policy"),
            deprecated: message.get("deprecated") == Some(&Json::Bool(true)),
            message_pointer: target.to_owned(),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Payloads

    fn payload(&mut self, message: &'a Json, message_pointer: &str) -> Json {
        let Some(payload) = message.get("payload") else {
            self.notes.adapted(
                message_pointer,
                "no payload schema; imported as an empty object",
            );
            return empty_payload();
        };
        let payload_pointer = format!("{message_pointer}/payload");
        let Some((at, value)) = self.follow(payload, &payload_pointer) else {
            let reference = payload
                .get("$ref")
                .and_then(Json::as_str)
                .unwrap_or_default();
            self.notes.unsupported(
                &payload_pointer,
                format!("`$ref: {reference}` cannot be resolved inside the document; imported as an empty object"),
            );
            let mut placeholder = empty_payload();
            placeholder["x-asyncapi-schema-ref"] = Json::String(reference.to_owned());
            return placeholder;
        };
        let (format, schema_pointer, schema) = match value.get("schema") {
            Some(schema) if value.is_object() => (
                value.get("schemaFormat").and_then(Json::as_str),
                format!("{at}/schema"),
                schema,
            ),
            _ => (None, at.clone(), value),
        };
        let Some(dialect) = dialect(format) else {
            let format = format.unwrap_or_default();
            self.notes.unsupported(
                &at,
                format!("payload schema format `{format}` is not JSON Schema; imported as an empty object"),
            );
            let mut placeholder = empty_payload();
            placeholder["x-asyncapi-schema-format"] = Json::String(format.to_owned());
            if let Some(reference) = schema.get("$ref").and_then(Json::as_str) {
                placeholder["x-asyncapi-schema-ref"] = Json::String(reference.to_owned());
            }
            return placeholder;
        };
        // A `schema` that is itself a reference.
        let (schema_pointer, schema) = match self.follow(schema, &schema_pointer) {
            Some(found) => found,
            None => (schema_pointer, schema),
        };
        let mut converted = self.inline_payload(schema, &schema_pointer, dialect);
        rewrite_definition_refs(&mut converted);
        disable_unsafe_values(&mut converted, "", &schema_pointer, &mut self.notes);
        let problems = self.disable_unsupported_keywords(&mut converted, &schema_pointer);
        if !problems.is_empty() {
            self.notes.unsupported(
                &schema_pointer,
                format!(
                    "the payload schema breaks evc rules even after adaptation ({}); imported as an empty object keeping it under `x-asyncapi-payload`",
                    problems.join("; ")
                ),
            );
            let mut placeholder = empty_payload();
            placeholder["x-asyncapi-payload"] = converted;
            return placeholder;
        }
        converted
    }

    /// Checks the converted payload against evc's payload rules (the payload policy aside) and
    /// turns each keyword evc refuses (one it cannot generate code for, say) into an `x-`
    /// annotation, reported as unsupported. Returns the problems that are not about one keyword.
    fn disable_unsupported_keywords(
        &mut self,
        schema: &mut Json,
        schema_pointer: &str,
    ) -> Vec<String> {
        let permissive = PayloadPolicy {
            denied_keys: Vec::new(),
            credential_key_names: Vec::new(),
            ..PayloadPolicy::default()
        };
        for _ in 0..256 {
            // Open objects are kept: the event type's content model is chosen from the result.
            let errors: Vec<_> = payload_schema::check(schema, &permissive, ContentModel::Open)
                .problems
                .into_iter()
                .filter(|problem| problem.rule.severity() == Severity::Error)
                .collect();
            if errors.is_empty() {
                return Vec::new();
            }
            let mut fixed = false;
            for problem in &errors {
                if problem.rule == Rule::RefCycle && !is_keyword_position(&problem.pointer) {
                    // A target that holds itself without an object between: its references
                    // to itself are what no type can hold.
                    let reference = format!("#{}", problem.pointer);
                    if let Some(target) = schema.pointer_mut(&problem.pointer)
                        && disable_references(target, &reference)
                    {
                        self.notes.unsupported(
                            &format!("{schema_pointer}{}", problem.pointer),
                            format!(
                                "{} ({}); its `$ref: {reference}` kept as `x-$ref` and not enforced",
                                problem.message,
                                problem.rule.id()
                            ),
                        );
                        fixed = true;
                    }
                    continue;
                }
                if !is_keyword_position(&problem.pointer) {
                    continue;
                }
                let Some((parent, keyword)) = problem.pointer.rsplit_once('/') else {
                    continue;
                };
                let keyword = keyword.replace("~1", "/").replace("~0", "~");
                let Some(Json::Object(map)) = schema.pointer_mut(parent) else {
                    continue;
                };
                let Some(value) = map.remove(&keyword) else {
                    continue;
                };
                let mut renamed = format!("x-{keyword}");
                while map.contains_key(&renamed) {
                    renamed.insert_str(2, "asyncapi-");
                }
                self.notes.unsupported(
                    &format!("{schema_pointer}{}", problem.pointer),
                    format!(
                        "{} ({}); kept as `{renamed}` and not enforced",
                        problem.message,
                        problem.rule.id()
                    ),
                );
                map.insert(renamed, value);
                fixed = true;
            }
            if !fixed {
                return errors
                    .iter()
                    .map(|problem| {
                        format!(
                            "{} at `{}`: {}",
                            problem.rule.id(),
                            problem.pointer,
                            problem.message
                        )
                    })
                    .collect();
            }
        }
        vec!["too many unsupported keywords".to_owned()]
    }

    /// The payload schema at `root` with the document's references resolved and its keywords
    /// converted. A reference is inlined, unless its target refers back to itself: such a target
    /// is copied once into the payload's `$defs` and every reference to it points there, so the
    /// recursion is kept.
    fn inline_payload(&mut self, schema: &'a Json, root: &str, dialect: Dialect) -> Json {
        self.hoisted.clear();
        loop {
            // A pass that finds a new recursive target is done again, so only its notes are lost.
            let notes_before = self.notes.clone();
            self.recursive.clear();
            self.inline_budget = MAX_INLINED_SUBSCHEMAS;
            let mut converted =
                self.inline(schema, root, root, dialect, &mut vec![root.to_owned()]);
            let mut definitions = Vec::new();
            for (target, name) in self.hoisted.clone() {
                if let Some(value) = self.doc.pointer(&target) {
                    let mut stack = vec![target.clone()];
                    definitions
                        .push((name, self.inline(value, &target, root, dialect, &mut stack)));
                }
            }
            if self.recursive.is_empty() {
                if let Json::Object(map) = &mut converted
                    && !definitions.is_empty()
                {
                    let defs = map
                        .entry("$defs")
                        .or_insert_with(|| Json::Object(Map::new()));
                    if let Json::Object(defs) = defs {
                        defs.extend(definitions);
                    }
                }
                return converted;
            }
            self.notes = notes_before;
            let mut taken: BTreeSet<String> = converted
                .get("$defs")
                .and_then(Json::as_object)
                .map(|defs| defs.keys().cloned().collect())
                .unwrap_or_default();
            taken.extend(self.hoisted.values().cloned());
            for target in std::mem::take(&mut self.recursive) {
                let name = definition_name(&target, &taken);
                taken.insert(name.clone());
                self.hoisted.insert(target, name);
            }
        }
    }

    /// Resolves references and converts keywords of the subschema `value`, found at `at`; `root`
    /// is the pointer of the payload schema.
    fn inline(
        &mut self,
        value: &'a Json,
        at: &str,
        root: &str,
        dialect: Dialect,
        stack: &mut Vec<String>,
    ) -> Json {
        let Json::Object(_) = value else {
            return value.clone();
        };
        if self.inline_depth >= MAX_SCHEMA_DEPTH || self.inline_budget == 0 {
            self.notes.unsupported(
                at,
                "the payload schema nests too deep or grows too large once references are inlined; replaced by an unconstrained schema",
            );
            return json!({"x-asyncapi-truncated": true});
        }
        self.inline_depth += 1;
        self.inline_budget -= 1;
        let out = self.inline_object(value, at, root, dialect, stack);
        self.inline_depth -= 1;
        out
    }

    fn inline_object(
        &mut self,
        value: &'a Json,
        at: &str,
        root: &str,
        dialect: Dialect,
        stack: &mut Vec<String>,
    ) -> Json {
        let Json::Object(map) = value else {
            return value.clone();
        };
        let mut out = Map::new();
        let mut resolved: Option<Json> = None;
        if let Some(Json::String(reference)) = map.get("$ref") {
            match local_pointer(reference) {
                Some(target) if target == root || target.starts_with(&format!("{root}/")) => {
                    // A reference inside the payload schema itself: keep it, schema-local.
                    out.insert(
                        "$ref".to_owned(),
                        Json::String(format!("#{}", &target[root.len()..])),
                    );
                }
                Some(target) if self.hoisted.contains_key(&target) => {
                    if target.starts_with("/components/") {
                        self.mark_used(&target);
                    }
                    let name = &self.hoisted[&target];
                    self.notes.adapted(
                        &target,
                        format!("refers to itself; copied into the `$defs` of the payloads that use it as `{name}`"),
                    );
                    out.insert(
                        "$ref".to_owned(),
                        Json::String(format!("#/$defs/{}", escape_pointer_segment(name))),
                    );
                }
                Some(target) => match self.doc.pointer(&target) {
                    Some(_) if stack.contains(&target) => {
                        // Hoisted into `$defs` on the next pass, which replaces this one.
                        self.recursive.insert(target.clone());
                        out.insert("x-asyncapi-ref".to_owned(), Json::String(reference.clone()));
                    }
                    Some(found) => {
                        if target.starts_with("/components/") {
                            self.mark_used(&target);
                        }
                        self.notes
                            .adapted(&target, "inlined into the payloads that use it");
                        stack.push(target.clone());
                        resolved = Some(self.inline(found, &target, root, dialect, stack));
                        stack.pop();
                    }
                    None => {
                        // Not in the document: a schema-local reference (`#/$defs/x`) is kept
                        // when the payload schema has its target.
                        let inside = self
                            .doc
                            .pointer(root)
                            .and_then(|schema| schema.pointer(&target))
                            .is_some();
                        if inside {
                            out.insert("$ref".to_owned(), Json::String(reference.clone()));
                        } else {
                            self.notes.unsupported(
                                at,
                                format!("`$ref: {reference}` points at nothing; replaced by an unconstrained schema"),
                            );
                            out.insert(
                                "x-asyncapi-ref".to_owned(),
                                Json::String(reference.clone()),
                            );
                        }
                    }
                },
                None => {
                    self.notes.unsupported(
                        at,
                        format!("the external `$ref: {reference}` cannot be resolved offline; replaced by an unconstrained schema"),
                    );
                    out.insert("x-asyncapi-ref".to_owned(), Json::String(reference.clone()));
                }
            }
        }
        for (key, child) in map {
            if key == "$ref" {
                continue;
            }
            let child_at = format!("{at}/{}", escape_pointer_segment(key));
            // draft-07 `dependencies` maps names to subschemas (or to name lists, kept as is).
            let converted = if SUBSCHEMA_MAPS.contains(&key.as_str()) || key == "dependencies" {
                match child {
                    Json::Object(children) => Json::Object(
                        children
                            .iter()
                            .map(|(name, grandchild)| {
                                let at = format!("{child_at}/{}", escape_pointer_segment(name));
                                (
                                    name.clone(),
                                    self.inline(grandchild, &at, root, dialect, stack),
                                )
                            })
                            .collect(),
                    ),
                    other => other.clone(),
                }
            } else if SUBSCHEMA_LISTS.contains(&key.as_str())
                || (key == "items" && child.is_array())
            {
                match child {
                    Json::Array(items) => Json::Array(
                        items
                            .iter()
                            .enumerate()
                            .map(|(index, item)| {
                                self.inline(
                                    item,
                                    &format!("{child_at}/{index}"),
                                    root,
                                    dialect,
                                    stack,
                                )
                            })
                            .collect(),
                    ),
                    other => other.clone(),
                }
            } else if SUBSCHEMA_SINGLE.contains(&key.as_str()) || key == "items" {
                self.inline(child, &child_at, root, dialect, stack)
            } else {
                child.clone()
            };
            out.insert(key.clone(), converted);
        }
        convert_keywords(&mut out, at, dialect, &mut self.notes);
        match resolved {
            Some(Json::Object(mut target)) => {
                // draft-07 ignores siblings of `$ref`; they usually annotate (a description),
                // so they are kept where the target does not say otherwise.
                for (key, value) in out {
                    target.entry(key).or_insert(value);
                }
                Json::Object(target)
            }
            Some(other) => other,
            None => Json::Object(out),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Operations

    fn operations(&mut self) {
        let doc = self.doc;
        let Some(Json::Object(operations)) = doc.get("operations") else {
            return;
        };
        for (id, value) in operations {
            let pointer = format!("/operations/{}", escape_pointer_segment(id));
            let Some((at, operation)) = self.follow(value, &pointer) else {
                self.notes.unsupported(
                    &pointer,
                    "the operation reference cannot be resolved; skipped",
                );
                continue;
            };
            self.operation(id, &at, operation);
        }
    }

    /// The channel messages an operation lists (all of the channel's when it lists none).
    fn operation_messages(
        &mut self,
        channel: &str,
        operation: &'a Json,
        at: &str,
    ) -> Vec<(String, semver::Version)> {
        let Some(known) = self.channel_messages.get(channel) else {
            return Vec::new();
        };
        let known: Vec<(String, String, String, semver::Version)> = known
            .iter()
            .map(|message| {
                (
                    message.id.clone(),
                    message.target.clone(),
                    message.event.clone(),
                    message.version.clone(),
                )
            })
            .collect();
        let Some(Json::Array(messages)) = operation.get("messages") else {
            return known
                .into_iter()
                .map(|(_, _, event, version)| (event, version))
                .collect();
        };
        let prefix = format!("/channels/{}/messages/", escape_pointer_segment(channel));
        let mut out = Vec::new();
        for (index, message) in messages.iter().enumerate() {
            let message_at = format!("{at}/messages/{index}");
            let direct = message
                .get("$ref")
                .and_then(Json::as_str)
                .and_then(local_pointer)
                .and_then(|pointer| {
                    pointer.strip_prefix(&prefix).map(|rest| {
                        pointer_segments(&format!("/{rest}"))
                            .next()
                            .unwrap_or_default()
                    })
                })
                .and_then(|id| known.iter().find(|(known_id, ..)| *known_id == id));
            let found = match direct {
                Some(found) => Some(found),
                None => self.follow(message, &message_at).and_then(|(target, _)| {
                    known
                        .iter()
                        .find(|(_, known_target, ..)| *known_target == target)
                }),
            };
            match found {
                Some((_, _, event, version)) => out.push((event.clone(), version.clone())),
                None => self.notes.unsupported(
                    &message_at,
                    format!("not one of the messages of channel `{channel}`; ignored"),
                ),
            }
        }
        out
    }

    fn operation(&mut self, id: &str, at: &str, operation: &'a Json) {
        let action = operation
            .get("action")
            .and_then(Json::as_str)
            .unwrap_or_default();
        let Some(channel) = operation.get("channel").and_then(root_channel_id) else {
            self.notes.unsupported(
                &format!("{at}/channel"),
                "not a reference into the root `channels`; the operation is skipped",
            );
            return;
        };
        if !self.channel_messages.contains_key(&channel) {
            self.notes.unsupported(
                &format!("{at}/channel"),
                format!("channel `{channel}` was not imported; the operation is skipped"),
            );
            return;
        }
        let messages = self.operation_messages(&channel, operation, at);
        let mut events: Vec<String> = Vec::new();
        for (event, _) in &messages {
            if !events.contains(event) {
                events.push(event.clone());
            }
        }
        let mut imported = ImportedOperation {
            id: id.to_owned(),
            action: action.to_owned(),
            channel: channel.clone(),
            events: events.clone(),
            becomes: String::new(),
        };
        match action {
            "send" => imported.becomes = self.send(at, operation, &events),
            "receive" => imported.becomes = self.receive(id, at, operation, &messages, &events),
            other => self.notes.unsupported(
                &format!("{at}/action"),
                format!("unknown action `{other}`; the operation is skipped"),
            ),
        }
        self.operations.push(imported);
    }

    fn send(&mut self, at: &str, operation: &Json, events: &[String]) -> String {
        let producer = match operation.get("x-evc-producer-class").and_then(Json::as_str) {
            Some(name) if is_name(name) => name.to_owned(),
            _ => self.project.clone(),
        };
        for name in events {
            let Some(event) = self.events.iter_mut().find(|event| event.name == *name) else {
                continue;
            };
            match &event.producer_class {
                None => event.producer_class = Some(producer.clone()),
                Some(existing) if *existing == producer => {}
                Some(existing) => {
                    let existing = existing.clone();
                    self.notes.unsupported(
                        at,
                        format!("`{name}` is already sent by producer class `{existing}`; evc has one producer class per event type"),
                    );
                }
            }
        }
        let mut used = vec!["action", "channel", "messages", "x-evc-producer-class"];
        if let [event] = events
            && operation.get("summary").and_then(Json::as_str)
                == Some(doc_layout::send_summary(&producer, event).as_str())
        {
            used.push("summary");
        }
        leftovers(&mut self.notes, operation, at, &used);
        producer
    }

    fn receive(
        &mut self,
        id: &str,
        at: &str,
        operation: &Json,
        messages: &[(String, semver::Version)],
        events: &[String],
    ) -> String {
        let named = operation
            .get("x-evc-consumer")
            .and_then(Json::as_str)
            .filter(|name| is_name(name));
        let name = match named {
            Some(name) => name.to_owned(),
            None => {
                let wanted = normalize_name(id, "consumer");
                let mut candidate = wanted.clone();
                let mut index = 2;
                while self
                    .consumers
                    .iter()
                    .any(|consumer| consumer.name == candidate)
                {
                    candidate = format!("{wanted}_{index}");
                    index += 1;
                }
                if candidate != id {
                    self.notes.adapted(
                        at,
                        format!("the operation becomes the consumer `{candidate}`"),
                    );
                }
                candidate
            }
        };
        let mut used = vec![
            "action",
            "channel",
            "messages",
            "x-evc-consumer",
            "x-evc-subscription",
            "x-evc-executor-kind",
            "x-evc-executor-class",
            "x-evc-handler",
            "x-evc-mode",
            "x-evc-ordering",
            "x-evc-heartbeat-threshold",
            "x-evc-retry-policy",
            "x-evc-dead-letter",
        ];
        let description_key = ["description", "summary", "title"].into_iter().find(|key| {
            operation
                .get(*key)
                .and_then(Json::as_str)
                .is_some_and(|t| !t.trim().is_empty())
        });
        if let Some(key) = description_key {
            used.push(key);
        }
        if let [event] = events
            && operation.get("summary").and_then(Json::as_str)
                == Some(doc_layout::receive_summary(&name, event).as_str())
        {
            used.push("summary");
        }
        leftovers(&mut self.notes, operation, at, &used);
        let description = description_key
            .and_then(|key| operation.get(key))
            .and_then(Json::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("Receives the messages of the AsyncAPI operation `{id}`."));
        let retry_policy = operation.get("x-evc-retry-policy").and_then(|policy| {
            let name = policy.get("name").and_then(Json::as_str)?;
            self.policy(name, policy, &format!("{at}/x-evc-retry-policy"))
        });
        let requirement = operation
            .get("x-evc-subscription")
            .and_then(Json::as_str)
            .and_then(|text| semver::VersionReq::parse(text).ok());
        let index = match self
            .consumers
            .iter()
            .position(|consumer| consumer.name == name && consumer.named && named.is_some())
        {
            Some(index) => index,
            None => {
                let executor_kind = self.extension(operation, at, "x-evc-executor-kind");
                let handler = self.extension(operation, at, "x-evc-handler");
                if executor_kind.is_none() || handler.is_none() {
                    self.notes.adapted(
                        at,
                        format!(
                            "consumer `{name}`: the document does not say how it runs; executor_kind `external` and handler `leased` assumed"
                        ),
                    );
                }
                let heartbeat_threshold = operation
                    .get("x-evc-heartbeat-threshold")
                    .and_then(Json::as_str)
                    .filter(|text| crate::duration::parse(text).is_some())
                    .map(str::to_owned);
                let plan = ConsumerPlan {
                    name: name.clone(),
                    description,
                    executor_kind: executor_kind.unwrap_or(ExecutorKind::External),
                    executor_class: self.executor_class(operation, at),
                    handler: handler.unwrap_or(HandlerKind::Leased),
                    ordering: self.extension(operation, at, "x-evc-ordering"),
                    mode: self.extension(operation, at, "x-evc-mode"),
                    heartbeat_threshold,
                    retry_policy: retry_policy.clone(),
                    subscribes: Vec::new(),
                    named: named.is_some(),
                };
                self.consumers.push(plan);
                self.consumers.len() - 1
            }
        };
        for event in events {
            let versions: Vec<&semver::Version> = messages
                .iter()
                .filter(|(name, _)| name == event)
                .map(|(_, version)| version)
                .collect();
            let requirement = requirement
                .clone()
                .filter(|requirement| versions.iter().any(|version| requirement.matches(version)))
                .map_or_else(
                    || requirement_for(&versions),
                    |requirement| requirement.to_string(),
                );
            let consumer = &mut self.consumers[index];
            if consumer.subscribes.iter().any(|(known, _)| known == event) {
                self.notes.unsupported(
                    at,
                    format!("consumer `{name}` already subscribes to `{event}`; the second subscription is dropped"),
                );
                continue;
            }
            consumer.subscribes.push((event.clone(), requirement));
        }
        name
    }

    // -----------------------------------------------------------------------------------------
    // Components

    fn components(&mut self) {
        let doc = self.doc;
        let Some(Json::Object(components)) = doc.get("components") else {
            return;
        };
        for (section, entries) in components {
            let pointer = format!("/components/{}", escape_pointer_segment(section));
            match section.as_str() {
                "messages" | "schemas" => {
                    let Json::Object(entries) = entries else {
                        continue;
                    };
                    for key in entries.keys() {
                        let entry = format!("{pointer}/{}", escape_pointer_segment(key));
                        if !self.used.contains(&entry) {
                            self.notes.unsupported(
                                &entry,
                                "not used by any imported channel; not imported",
                            );
                        }
                    }
                }
                "x-evc-retry-policies" | "x-evc-executor-classes" => {}
                other => self.notes.unsupported(&pointer, reason(other)),
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Output

    /// Keeps the executor classes only where the contracts they make load: each class with a
    /// valid namespace and a retry policy the import has; each consumer's class when it is one
    /// of those, active and of the consumer's kind; and the classes at all only when every
    /// written consumer then names one (with classes, a consumer must). Each drop is a note.
    fn reconcile_classes(&mut self) {
        let mut notes = Vec::new();
        let mut invalid = Vec::new();
        for (name, def) in &mut self.classes {
            let pointer = format!(
                "/components/x-evc-executor-classes/{}",
                escape_pointer_segment(name)
            );
            if !is_name(def.idempotency_namespace.as_str()) {
                notes.push((
                    pointer,
                    format!("`{name}`: the idempotency namespace is not a valid name; the class is not imported"),
                ));
                invalid.push(name.clone());
                continue;
            }
            if let Some(threshold) = &def.heartbeat_threshold
                && !crate::duration::parse(threshold.as_str())
                    .is_some_and(|value| !value.is_zero() && value <= crate::duration::MAX_RUNTIME)
            {
                notes.push((
                    format!("{pointer}/heartbeat_threshold"),
                    format!(
                        "`{name}`: the heartbeat threshold `{threshold}` is not a usable duration; dropped"
                    ),
                ));
                def.heartbeat_threshold = None;
            }
            if let Some(policy) = &def.retry_policy
                && !self.policies.contains_key(policy.as_str())
            {
                notes.push((
                    format!("{pointer}/retry_policy"),
                    format!(
                        "`{name}`: the retry policy `{policy}` is not in the document; dropped"
                    ),
                ));
                def.retry_policy = None;
            }
        }
        for name in invalid {
            self.classes.remove(&name);
        }
        for (pointer, note) in notes {
            self.notes.unsupported(&pointer, note);
        }
        for consumer in &mut self.consumers {
            let Some(class) = &consumer.executor_class else {
                continue;
            };
            let kind = crate::format::keyword(&consumer.executor_kind);
            let usable = self.classes.get(class).is_some_and(|def| {
                def.active
                    && class
                        .split_once('.')
                        .is_some_and(|(prefix, _)| prefix == kind)
            });
            if !usable {
                self.notes.unsupported(
                    "/operations",
                    format!(
                        "consumer `{}`: `{class}` is not an active `{kind}` executor class of the document; dropped",
                        consumer.name
                    ),
                );
                consumer.executor_class = None;
            }
        }
        let unclassed = self
            .consumers
            .iter()
            .any(|consumer| consumer.executor_class.is_none() && !consumer.subscribes.is_empty());
        if !self.classes.is_empty() && unclassed {
            self.notes.adapted(
                "/components/x-evc-executor-classes",
                "not every consumer names an executor class; the classes are not imported",
            );
            self.classes.clear();
            for consumer in &mut self.consumers {
                consumer.executor_class = None;
            }
        }
    }

    fn finish(mut self) -> Result<Imported, ImportError> {
        self.reconcile_classes();
        let mut hard_max_bytes = PayloadPolicy::default().hard_max_bytes;
        for event in &mut self.events {
            event
                .versions
                .sort_by(|a, b| a.version.cmp_precedence(&b.version));
            if event.producer_class.is_none() {
                self.notes.adapted(
                    &event.channel_pointer,
                    format!(
                        "no `send` operation sends `{}`; its producer class is the project, `{}`",
                        event.name, self.project
                    ),
                );
                event.producer_class = Some(self.project.clone());
            }
            let order_key_ok = event.order_key.iter().all(|field| {
                is_field(field)
                    && event.versions.iter().all(|version| {
                        version.schema["required"]
                            .as_array()
                            .is_some_and(|required| required.iter().any(|r| r == field))
                    })
            });
            if !order_key_ok {
                self.notes.adapted(
                    &format!("{}/x-evc-order-key", event.channel_pointer),
                    "names fields not required by every version; dropped (deliveries are ordered by the envelope's aggregate)",
                );
                event.order_key.clear();
            }
            let majors: BTreeSet<u64> = event.versions.iter().map(|v| v.version.major).collect();
            if majors.len() > 1 {
                let allowed = match event.compat {
                    Some(CompatMode::None) => true,
                    Some(CompatMode::BreakingWithPolicy) => {
                        let mut previous_major = None;
                        event.versions.iter().all(|version| {
                            let bump =
                                previous_major.is_some_and(|major| version.version.major > major);
                            previous_major = Some(version.version.major);
                            !bump || version.migration_policy.is_some()
                        })
                    }
                    _ => false,
                };
                if !allowed {
                    self.notes.adapted(
                        &event.channel_pointer,
                        format!(
                            "`{}` has several major versions without a migration policy for each bump; `compat: none`",
                            event.name
                        ),
                    );
                    event.compat = Some(CompatMode::None);
                }
            }
            // Objects that accept keys they do not list are kept; the event type says so.
            let open = event.versions.iter().any(|version| {
                payload_schema::check(
                    &version.schema,
                    &PayloadPolicy::default(),
                    ContentModel::Closed,
                )
                .problems
                .iter()
                .any(|problem| problem.rule == Rule::OpenPayloadObject)
            });
            event.content = if open {
                ContentModel::Open
            } else {
                ContentModel::Closed
            };
            if let Some(cap) = event.max_payload_bytes
                && cap > hard_max_bytes
            {
                hard_max_bytes = cap.min(64 * 1024 * 1024);
            }
        }
        let policy = self.relaxed_policy(hard_max_bytes);
        let needs_default = self.consumers.iter().any(|consumer| {
            consumer
                .retry_policy
                .as_ref()
                .is_none_or(|name| !self.policies.contains_key(name))
        });
        let mut default_policy_name = None;
        if needs_default {
            let name = if self.policies.contains_key(DEFAULT_POLICY) {
                let mut index = 2;
                while self
                    .policies
                    .contains_key(&format!("{DEFAULT_POLICY}_{index}"))
                {
                    index += 1;
                }
                format!("{DEFAULT_POLICY}_{index}")
            } else {
                DEFAULT_POLICY.to_owned()
            };
            self.notes.adapted(
                "/operations",
                format!("the document names no retry policy for some consumers; they use `{name}` (exponential from 30s, capped at 30m, 5 attempts)"),
            );
            self.policies.insert(name.clone(), default_policy());
            for consumer in &mut self.consumers {
                if consumer
                    .retry_policy
                    .as_ref()
                    .is_none_or(|known| !self.policies.contains_key(known))
                {
                    consumer.retry_policy = None;
                }
            }
            default_policy_name = Some(name);
        }

        let mut files = Vec::new();
        files.push(artifact(
            "evc.yaml",
            PROJECT_MODELINE,
            &ProjectOut {
                project: self.project.clone(),
                payload_policy: PayloadPolicyOut {
                    denied_keys: policy.denied_keys.clone(),
                    credential_key_names: policy.credential_key_names.clone(),
                    default_max_bytes: policy.default_max_bytes,
                    hard_max_bytes: policy.hard_max_bytes,
                },
                defaults: default_policy_name.map(|retry_policy| DefaultsOut { retry_policy }),
            },
        )?);
        for event in &self.events {
            let order_key = match event.order_key.as_slice() {
                [] => None,
                [one] => Some(OrderKeyDef::One(FieldName(one.clone()))),
                many => Some(OrderKeyDef::Many(
                    many.iter().map(|field| FieldName(field.clone())).collect(),
                )),
            };
            let out = EventOut {
                event: event.name.clone(),
                description: event.description.clone(),
                producer_class: event.producer_class.clone().unwrap_or_default(),
                order_key,
                compat: event.compat,
                status: event
                    .status
                    .filter(|status| *status == EventStatus::Deprecated),
                max_payload_bytes: event.max_payload_bytes,
                payload_policy: (event.content == ContentModel::Open).then_some(
                    EventPayloadPolicyDef {
                        content: Some(ContentModel::Open),
                    },
                ),
                versions: event
                    .versions
                    .iter()
                    .map(|version| VersionOut {
                        version: version.version.to_string(),
                        description: version.description.clone(),
                        schema: version.schema.clone(),
                        migration_policy: version.migration_policy.clone(),
                    })
                    .collect(),
            };
            files.push(artifact(
                &format!("events/{}.yaml", event.name),
                EVENT_MODELINE,
                &out,
            )?);
        }
        for consumer in &self.consumers {
            let out = ConsumerOut {
                consumer: consumer.name.clone(),
                description: consumer.description.clone(),
                executor_kind: consumer.executor_kind,
                executor_class: consumer.executor_class.clone(),
                subscribes: consumer
                    .subscribes
                    .iter()
                    .map(|(event, requirement)| format!("{event}@{requirement}"))
                    .collect(),
                retry_policy: consumer.retry_policy.clone(),
                handler: consumer.handler,
                ordering: consumer.ordering,
                mode: consumer.mode,
                heartbeat_threshold: consumer.heartbeat_threshold.clone(),
            };
            if out.subscribes.is_empty() {
                self.notes.unsupported(
                    "/operations",
                    format!(
                        "consumer `{}` receives no imported message; not written",
                        consumer.name
                    ),
                );
                continue;
            }
            files.push(artifact(
                &format!("consumers/{}.yaml", consumer.name),
                CONSUMER_MODELINE,
                &out,
            )?);
        }
        if !self.classes.is_empty() {
            files.push(artifact(
                "executor-classes.yaml",
                EXECUTOR_CLASSES_MODELINE,
                &ClassesOut {
                    classes: self.classes.clone(),
                },
            )?);
        }
        if !self.policies.is_empty() {
            files.push(artifact(
                "retry-policies.yaml",
                RETRY_POLICIES_MODELINE,
                &PoliciesOut {
                    policies: self.policies.clone(),
                },
            )?);
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(Imported {
            project: self.project,
            files,
            channels: self.channels,
            operations: self.operations,
            unsupported: self.notes.unsupported,
            adapted: self.notes.adapted,
        })
    }

    /// evc's default payload policy without the names the payloads use, each reported.
    fn relaxed_policy(&mut self, hard_max_bytes: u32) -> PayloadPolicy {
        let mut policy = PayloadPolicy {
            hard_max_bytes,
            ..PayloadPolicy::default()
        };
        if hard_max_bytes != PayloadPolicy::default().hard_max_bytes {
            self.notes.adapted(
                "/channels",
                format!("`payload_policy.hard_max_bytes` raised to {hard_max_bytes} for the largest `x-evc-max-payload-bytes`"),
            );
        }
        loop {
            let mut changed = false;
            for event in &self.events {
                for version in &event.versions {
                    for problem in
                        payload_schema::check(&version.schema, &policy, ContentModel::Open).problems
                    {
                        let key = pointer_segments(&problem.pointer)
                            .last()
                            .unwrap_or_default();
                        let (list, entry) = match problem.rule {
                            Rule::DeniedKeyInSchema => {
                                ("denied_keys", policy.denied_as(&key).map(str::to_owned))
                            }
                            Rule::CredentialKeyInSchema => (
                                "credential_key_names",
                                policy.credential_shape(&key).map(str::to_owned),
                            ),
                            _ => continue,
                        };
                        let Some(entry) = entry else {
                            continue;
                        };
                        self.notes.adapted(
                            &format!("{}/payload{}", version.message_pointer, problem.pointer),
                            format!(
                                "`{key}` is {}; `{entry}` is taken off `payload_policy.{list}` in evc.yaml so the import loads: review it",
                                if list == "denied_keys" { "on evc's default deny-list" } else { "shaped like a credential" }
                            ),
                        );
                        policy.denied_keys.retain(|known| *known != entry);
                        policy.credential_key_names.retain(|known| *known != entry);
                        changed = true;
                    }
                }
            }
            if !changed {
                return policy;
            }
        }
    }
}

fn is_field(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// A message id as one event type segment.
fn join_segment(text: &str) -> String {
    let segment = snake_segment(text);
    if segment.is_empty() {
        "message".to_owned()
    } else {
        segment
    }
}

/// The key of a message whose text describes its event type: its summary, else its title.
fn message_description_key(message: &Json) -> Option<&'static str> {
    ["summary", "title"].into_iter().find(|key| {
        message
            .get(*key)
            .and_then(Json::as_str)
            .is_some_and(|text| !text.trim().is_empty())
    })
}

/// The description of an event type taken from a message: its summary, else its title.
fn message_description(message: &Json) -> Option<String> {
    message_description_key(message)
        .and_then(|key| message.get(key))
        .and_then(Json::as_str)
        .map(str::to_owned)
}

/// The requirement accepting the majors of `versions` (`^1`; `>=1, <3` for 1.x and 2.x).
fn requirement_for(versions: &[&semver::Version]) -> String {
    let first = versions
        .iter()
        .map(|version| version.major)
        .min()
        .unwrap_or(1);
    let last = versions
        .iter()
        .map(|version| version.major)
        .max()
        .unwrap_or(first);
    if first == last {
        format!("^{first}")
    } else {
        format!(">={first}, <{}", last + 1)
    }
}

/// Draft-07, AsyncAPI and OpenAPI keywords, rewritten to their JSON Schema 2020-12 form.
fn convert_keywords(map: &mut Map<String, Json>, at: &str, dialect: Dialect, notes: &mut Notes) {
    if dialect != Dialect::Draft2020 {
        if map.remove("$schema").is_some() {
            notes.adapted(at, "`$schema` removed (payloads are JSON Schema 2020-12)");
        }
        if let Some(definitions) = map.remove("definitions") {
            map.insert("$defs".to_owned(), definitions);
            notes.adapted(at, "`definitions` renamed `$defs`");
        }
        if let Some(Json::Array(_)) = map.get("items") {
            if let Some(items) = map.remove("items") {
                map.insert("prefixItems".to_owned(), items);
            }
            if let Some(additional) = map.remove("additionalItems") {
                map.insert("items".to_owned(), additional);
            }
            notes.adapted(at, "tuple `items` written as `prefixItems`");
        } else if map.remove("additionalItems").is_some() {
            notes.adapted(
                at,
                "`additionalItems` without tuple `items` removed (it had no effect)",
            );
        }
        if let Some(Json::Object(dependencies)) = map.remove("dependencies") {
            let mut required = Map::new();
            let mut schemas = Map::new();
            for (name, value) in dependencies {
                if value.is_array() {
                    required.insert(name, value);
                } else {
                    schemas.insert(name, value);
                }
            }
            if !required.is_empty() {
                map.insert("dependentRequired".to_owned(), Json::Object(required));
            }
            if !schemas.is_empty() {
                map.insert("dependentSchemas".to_owned(), Json::Object(schemas));
            }
            notes.adapted(
                at,
                "`dependencies` split into `dependentRequired` and `dependentSchemas`",
            );
        }
        for (bound, exclusive) in [
            ("minimum", "exclusiveMinimum"),
            ("maximum", "exclusiveMaximum"),
        ] {
            if let Some(Json::Bool(flag)) = map.get(exclusive).cloned() {
                map.remove(exclusive);
                if flag && let Some(value) = map.remove(bound) {
                    map.insert(exclusive.to_owned(), value);
                }
                notes.adapted(
                    at,
                    format!("boolean `{exclusive}` written in its 2020-12 form"),
                );
            }
        }
        if let Some(nullable) = map.remove("nullable") {
            if nullable == Json::Bool(true) {
                match map.get_mut("type") {
                    Some(Json::String(single)) => {
                        let single = single.clone();
                        map.insert("type".to_owned(), json!([single, "null"]));
                    }
                    Some(Json::Array(types)) if !types.iter().any(|t| t == "null") => {
                        types.push(json!("null"));
                    }
                    _ => {}
                }
            }
            notes.adapted(at, "`nullable` folded into `type`");
        }
        if let Some(example) = map.remove("example") {
            match map.get_mut("examples") {
                Some(Json::Array(examples)) => examples.push(example),
                _ => {
                    map.insert("examples".to_owned(), json!([example]));
                }
            }
            notes.adapted(at, "`example` written as `examples`");
        }
    }
    let unknown: Vec<String> = map
        .keys()
        .filter(|key| !payload_schema::KEYWORDS.contains(&key.as_str()) && !key.starts_with("x-"))
        .cloned()
        .collect();
    for key in unknown {
        if let Some(value) = map.remove(&key) {
            notes.adapted(
                &format!("{at}/{}", escape_pointer_segment(&key)),
                format!("`{key}` is not a JSON Schema 2020-12 keyword; kept as `x-{key}`"),
            );
            map.insert(format!("x-{key}"), value);
        }
    }
}

/// `#/definitions/...` (draft-07) references become `#/$defs/...`.
fn rewrite_definition_refs(schema: &mut Json) {
    match schema {
        Json::Object(map) => {
            for (key, value) in map.iter_mut() {
                if key == "$ref" {
                    if let Json::String(reference) = value
                        && let Some(rest) = reference.strip_prefix("#/definitions/")
                    {
                        *reference = format!("#/$defs/{rest}");
                    }
                } else if !matches!(key.as_str(), "const" | "enum" | "default" | "examples")
                    && !key.starts_with("x-")
                {
                    rewrite_definition_refs(value);
                }
            }
        }
        Json::Array(items) => items.iter_mut().for_each(rewrite_definition_refs),
        _ => {}
    }
}

/// Renames each `enum` and `const` under `schema` (at `pointer`) that holds a string with a
/// character generated code cannot carry (`"\r\n"`, say) to `x-enum`/`x-const`, reported: the
/// loader refuses such values, since they become Rust docs and names.
fn disable_unsafe_values(schema: &mut Json, pointer: &str, base: &str, notes: &mut Notes) {
    fn unsafe_in(value: &Json) -> Option<char> {
        match value {
            Json::String(text) => crate::emit::unsafe_character(text),
            Json::Array(items) => items.iter().find_map(unsafe_in),
            _ => None,
        }
    }
    match schema {
        Json::Object(map) => {
            for keyword in ["enum", "const"] {
                if let Some(found) = map.get(keyword).and_then(unsafe_in)
                    && let Some(value) = map.remove(keyword)
                {
                    notes.unsupported(
                        &format!("{base}{pointer}/{keyword}"),
                        format!(
                            "holds {}, which generated code cannot carry; kept as `x-{keyword}` and not enforced",
                            crate::emit::describe_character(found)
                        ),
                    );
                    map.insert(format!("x-{keyword}"), value);
                }
            }
            for (key, child) in map.iter_mut() {
                if !matches!(key.as_str(), "const" | "enum" | "default" | "examples")
                    && !key.starts_with("x-")
                {
                    let at = format!("{pointer}/{}", escape_pointer_segment(key));
                    disable_unsafe_values(child, &at, base, notes);
                }
            }
        }
        Json::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                disable_unsafe_values(item, &format!("{pointer}/{index}"), base, notes);
            }
        }
        _ => {}
    }
}

/// Renames each `$ref: reference` under `schema` to `x-$ref`; whether there was one.
fn disable_references(schema: &mut Json, reference: &str) -> bool {
    match schema {
        Json::Object(map) => {
            let mut found = false;
            if map.get("$ref").and_then(Json::as_str) == Some(reference)
                && let Some(value) = map.remove("$ref")
            {
                map.insert("x-$ref".to_owned(), value);
                found = true;
            }
            for (key, child) in map.iter_mut() {
                if !matches!(key.as_str(), "const" | "enum" | "default" | "examples")
                    && !key.starts_with("x-")
                {
                    found |= disable_references(child, reference);
                }
            }
            found
        }
        Json::Array(items) => {
            // Every item, not up to the first: each reference is disabled.
            let mut found = false;
            for item in items {
                found |= disable_references(item, reference);
            }
            found
        }
        _ => false,
    }
}

/// A `$defs` name for the schema at `target` (its last segment) that is not in `taken`.
fn definition_name(target: &str, taken: &BTreeSet<String>) -> String {
    let base = pointer_segments(target)
        .last()
        .filter(|segment| !segment.is_empty())
        .unwrap_or_else(|| "schema".to_owned());
    let mut name = base.clone();
    let mut index = 2;
    while taken.contains(&name) {
        name = format!("{base}_{index}");
        index += 1;
    }
    name
}

/// Whether the last segment of a pointer into a schema names a keyword (as opposed to a
/// property name, a `$defs` entry or a list index).
fn is_keyword_position(pointer: &str) -> bool {
    #[derive(Clone, Copy)]
    enum Next {
        Keyword,
        Name,
        Index,
        Data,
    }
    let mut next = Next::Keyword;
    let mut last = None;
    for segment in pointer_segments(pointer) {
        last = Some(next);
        next = match next {
            Next::Keyword
                if SUBSCHEMA_MAPS.contains(&segment.as_str()) || segment == "dependencies" =>
            {
                Next::Name
            }
            Next::Keyword if SUBSCHEMA_LISTS.contains(&segment.as_str()) => Next::Index,
            Next::Keyword if SUBSCHEMA_SINGLE.contains(&segment.as_str()) || segment == "items" => {
                Next::Keyword
            }
            Next::Keyword | Next::Data => Next::Data,
            Next::Name | Next::Index => Next::Keyword,
        };
    }
    matches!(last, Some(Next::Keyword))
}

// ---------------------------------------------------------------------------------------------
// Contract files

#[derive(Serialize)]
struct ProjectOut {
    project: String,
    payload_policy: PayloadPolicyOut,
    #[serde(skip_serializing_if = "Option::is_none")]
    defaults: Option<DefaultsOut>,
}

#[derive(Serialize)]
struct PayloadPolicyOut {
    denied_keys: Vec<String>,
    credential_key_names: Vec<String>,
    default_max_bytes: u32,
    hard_max_bytes: u32,
}

#[derive(Serialize)]
struct DefaultsOut {
    retry_policy: String,
}

#[derive(Serialize)]
struct EventOut {
    event: String,
    description: String,
    producer_class: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    order_key: Option<OrderKeyDef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    compat: Option<CompatMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<EventStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_payload_bytes: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_policy: Option<EventPayloadPolicyDef>,
    versions: Vec<VersionOut>,
}

#[derive(Serialize)]
struct VersionOut {
    version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    schema: Json,
    #[serde(skip_serializing_if = "Option::is_none")]
    migration_policy: Option<MigrationPolicyDef>,
}

#[derive(Serialize)]
struct ConsumerOut {
    consumer: String,
    description: String,
    executor_kind: ExecutorKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    executor_class: Option<String>,
    subscribes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_policy: Option<String>,
    handler: HandlerKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    ordering: Option<Ordering>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<ConsumerMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    heartbeat_threshold: Option<String>,
}

#[derive(Serialize)]
struct PoliciesOut {
    policies: BTreeMap<String, PolicyOut>,
}

#[derive(Serialize)]
struct ClassesOut {
    classes: BTreeMap<String, ExecutorClassDef>,
}

fn artifact(path: &str, modeline: &str, value: &impl Serialize) -> Result<Artifact, ImportError> {
    let options = serde_saphyr::ser_options! {
        compact_list_indent: false,
    };
    let yaml = serde_saphyr::to_string_with_options(value, options).map_err(|error| {
        ImportError::Serialize {
            file: path.to_owned(),
            message: error.to_string(),
        }
    })?;
    let mut contents = format!("{modeline}\n");
    contents.push_str(yaml.strip_prefix("---\n").unwrap_or(&yaml));
    if !contents.ends_with('\n') {
        contents.push('\n');
    }
    Ok(Artifact {
        path: PathBuf::from(path),
        contents,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_normalized_to_the_contract_patterns() {
        assert_eq!(snake_segment("lightMeasured"), "light_measured");
        assert_eq!(snake_segment("COSTING-REQUEST"), "costing_request");
        assert_eq!(
            snake_segment("receiveACostingRequest"),
            "receive_a_costing_request"
        );
        assert_eq!(snake_segment("AsyncAPI Case"), "async_api_case");
        assert_eq!(snake_segment("HTTPServer2Go"), "http_server2_go");
        assert_eq!(
            normalize_name("Streetlights Kafka API", "x"),
            "streetlights_kafka_api"
        );
        assert_eq!(
            normalize_name("receiveLightMeasurement", "x"),
            "receive_light_measurement"
        );
        assert_eq!(normalize_name("1st", "x"), "n_1st");
        assert_eq!(normalize_name("!!!", "fallback"), "fallback");
        let (address, stripped) = strip_parameters(
            "smartylighting/streetlights/1/0/event/{streetlightId}/lighting/measured",
        );
        assert!(stripped);
        assert_eq!(
            join_name(segments(&address), "e"),
            "smartylighting.streetlights.1.0.event.lighting.measured"
        );
        assert!(is_event_type("iu.born"));
        assert!(!is_event_type("iu"));
        assert!(!is_name("Iu.born"));
        assert!(is_name("default.transient.5x.30s.exp"));
    }

    #[test]
    fn keyword_positions_are_told_from_names() {
        assert!(is_keyword_position("/oneOf"));
        assert!(is_keyword_position("/properties/a/type"));
        assert!(is_keyword_position("/properties/properties/enum"));
        assert!(is_keyword_position("/prefixItems/0/not"));
        assert!(is_keyword_position("/items/not"));
        assert!(!is_keyword_position("/properties/type"));
        assert!(!is_keyword_position("/$defs/oneOf"));
        assert!(!is_keyword_position("/allOf/0"));
        assert!(!is_keyword_position(""));
    }

    /// The event file of `event` in `imported`.
    fn event_file<'i>(imported: &'i Imported, event: &str) -> &'i str {
        &imported
            .files
            .iter()
            .find(|file| file.path.ends_with(format!("{event}.yaml")))
            .unwrap_or_else(|| panic!("no event file for {event}: {:#?}", imported.files))
            .contents
    }

    /// The payload schema of the first version in an event file.
    fn first_schema(contents: &str) -> Json {
        let file = SourceFile::new("event.yaml", contents);
        let event = yaml::parse(&file)
            .expect("the event file parses")
            .expect("not empty")
            .to_json();
        event["versions"][0]["schema"].clone()
    }

    #[test]
    fn unions_enums_and_open_objects_are_kept() {
        let text = r"
asyncapi: 3.0.0
info: {title: T, version: 1.0.0}
channels:
  c:
    address: a.b
    messages:
      m:
        payload:
          type: object
          properties:
            choice:
              oneOf: [{type: string}, {type: integer}]
            level:
              enum: [1, 2, 3]
            pair:
              type: array
              items: [{type: string}, {type: number}]
            either: {type: [string, integer]}
            meta: {type: object, additionalProperties: {type: string}}
";
        let imported = import(text).expect("imports");
        let schema = first_schema(event_file(&imported, "a.b"));
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {
                    "choice": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                    "level": {"enum": [1, 2, 3]},
                    "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}]},
                    "either": {"type": ["string", "integer"]},
                    "meta": {"type": "object", "additionalProperties": {"type": "string"}}
                }
            })
        );
        assert!(
            event_file(&imported, "a.b").contains("payload_policy:\n  content: open\n"),
            "{}",
            event_file(&imported, "a.b")
        );
        // The tuple's translation is the only change, and it is reported.
        assert_eq!(imported.unsupported, Vec::<String>::new());
        assert_eq!(
            imported
                .adapted
                .iter()
                .filter(|note| note.starts_with("/channels/c/messages/m/payload"))
                .collect::<Vec<_>>(),
            [
                "/channels/c/messages/m/payload/properties/pair: tuple `items` written as `prefixItems`"
            ]
        );
    }

    #[test]
    fn a_closed_payload_gets_no_content_setting() {
        let text = r"
asyncapi: 3.0.0
info: {title: T, version: 1.0.0}
channels:
  c:
    address: a.b
    messages:
      m:
        payload:
          type: object
          additionalProperties: false
          properties:
            id: {type: string}
";
        let imported = import(text).expect("imports");
        let event = event_file(&imported, "a.b");
        assert!(!event.contains("payload_policy"), "{event}");
        assert!(event.contains("additionalProperties: false"), "{event}");
    }

    #[test]
    fn non_object_roots_are_kept() {
        let text = r"
asyncapi: 3.0.0
info: {title: T, version: 1.0.0}
channels:
  c:
    address: a.b
    messages:
      m:
        payload: {type: array, items: {type: string}}
";
        let imported = import(text).expect("imports");
        assert_eq!(
            first_schema(event_file(&imported, "a.b")),
            json!({"type": "array", "items": {"type": "string"}})
        );
        assert_eq!(imported.unsupported, Vec::<String>::new());
    }

    #[test]
    fn keywords_the_checker_refuses_are_disabled_not_fatal() {
        let text = r"
asyncapi: 3.0.0
info: {title: T, version: 1.0.0}
channels:
  c:
    address: a.b
    messages:
      m:
        payload:
          type: object
          additionalProperties: false
          properties:
            name: {type: string, minLength: 2.5}
";
        let imported = import(text).expect("imports");
        let schema = first_schema(event_file(&imported, "a.b"));
        assert_eq!(
            schema["properties"]["name"],
            json!({"type": "string", "x-minLength": 2.5})
        );
        assert!(
            imported.unsupported.iter().any(|note| note
                .starts_with("/channels/c/messages/m/payload/properties/name/minLength: ")
                && note.contains("kept as `x-minLength`")),
            "{:#?}",
            imported.unsupported
        );
    }

    #[test]
    fn enum_values_generated_code_cannot_carry_are_disabled() {
        let mut notes = Notes::default();
        let mut schema = json!({
            "type": "object",
            "properties": {
                "line": {"type": "string", "enum": ["\r\n", "ok"]},
                "mark": {"const": "fine"}
            }
        });
        disable_unsafe_values(&mut schema, "", "/p", &mut notes);
        assert_eq!(
            schema["properties"],
            json!({
                "line": {"type": "string", "x-enum": ["\r\n", "ok"]},
                "mark": {"const": "fine"}
            })
        );
        assert_eq!(notes.unsupported.len(), 1);
        assert!(
            notes.unsupported[0].starts_with("/p/properties/line/enum: holds U+000D"),
            "{:?}",
            notes.unsupported
        );
    }

    #[test]
    fn recursive_references_are_kept_in_defs() {
        let text = r"
asyncapi: 3.0.0
info: {title: T, version: 1.0.0}
channels:
  c:
    address: a.b
    messages:
      m:
        payload:
          type: object
          additionalProperties: false
          properties:
            root: {$ref: '#/components/schemas/Node'}
components:
  schemas:
    Node:
      type: object
      additionalProperties: false
      properties:
        children: {type: array, items: {$ref: '#/components/schemas/Node'}}
";
        let imported = import(text).expect("imports");
        let event = event_file(&imported, "a.b");
        assert_eq!(
            first_schema(event),
            json!({
                "type": "object",
                "additionalProperties": false,
                "properties": {"root": {"$ref": "#/$defs/Node"}},
                "$defs": {"Node": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}
                }}
            })
        );
        assert_eq!(imported.unsupported, Vec::<String>::new());
        assert!(
            imported
                .adapted
                .iter()
                .any(|note| note.starts_with("/components/schemas/Node: refers to itself")),
            "{:#?}",
            imported.adapted
        );
        assert!(!event.contains("payload_policy"), "{event}");
    }

    #[test]
    fn a_list_of_itself_loses_only_its_recursion() {
        let text = r"
asyncapi: 3.0.0
info: {title: T, version: 1.0.0}
channels:
  c:
    address: a.b
    messages:
      m:
        payload:
          type: object
          additionalProperties: false
          properties:
            id: {type: string}
            tree: {$ref: '#/components/schemas/Tree'}
components:
  schemas:
    Tree: {type: array, items: {$ref: '#/components/schemas/Tree'}}
";
        let imported = import(text).expect("imports");
        assert_eq!(
            first_schema(event_file(&imported, "a.b")),
            json!({
                "type": "object",
                "additionalProperties": false,
                "properties": {"id": {"type": "string"}, "tree": {"$ref": "#/$defs/Tree"}},
                "$defs": {"Tree": {"type": "array", "items": {"x-$ref": "#/$defs/Tree"}}}
            })
        );
        assert!(
            imported.unsupported.iter().any(|note| note
                .starts_with("/channels/c/messages/m/payload/$defs/Tree: ")
                && note.contains("kept as `x-$ref`")),
            "{:#?}",
            imported.unsupported
        );
    }

    #[test]
    fn reference_bombs_and_deep_chains_are_cut() {
        let mut text = String::from(
            "asyncapi: 3.0.0\ninfo: {title: T, version: 1.0.0}\nchannels:\n  c:\n    address: a.b\n    messages:\n      m:\n        payload: {$ref: '#/components/schemas/s0'}\ncomponents:\n  schemas:\n",
        );
        for level in 0..40 {
            let next = level + 1;
            text.push_str(&format!(
                "    s{level}:\n      type: object\n      properties:\n        l: {{$ref: '#/components/schemas/s{next}'}}\n        r: {{$ref: '#/components/schemas/s{next}'}}\n"
            ));
        }
        text.push_str("    s40: {type: string}\n");
        let imported = import(&text).expect("imports");
        assert!(
            imported
                .unsupported
                .iter()
                .any(|note| note.contains("too deep or grows too large")),
            "{:#?}",
            imported.unsupported
        );
        let event = imported
            .files
            .iter()
            .find(|file| file.path.ends_with("a.b.yaml"))
            .expect("the event file");
        assert!(event.contents.len() < 4_000_000, "{}", event.contents.len());
    }

    #[test]
    fn requirements_cover_the_listed_majors() {
        let v = |text| semver::Version::parse(text).expect("version");
        assert_eq!(requirement_for(&[&v("1.0.0"), &v("1.2.0")]), "^1");
        assert_eq!(requirement_for(&[&v("1.0.0"), &v("2.0.0")]), ">=1, <3");
        assert_eq!(requirement_for(&[&v("0.3.0")]), "^0");
    }

    #[test]
    fn schema_formats_are_classified() {
        assert_eq!(dialect(None), Some(Dialect::Draft07));
        assert_eq!(
            dialect(Some(doc_layout::SCHEMA_FORMAT)),
            Some(Dialect::Draft2020)
        );
        assert_eq!(
            dialect(Some("application/schema+yaml;version=draft-07")),
            Some(Dialect::Draft07)
        );
        assert_eq!(
            dialect(Some("application/vnd.oai.openapi;version=3.0.0")),
            Some(Dialect::OpenApi30)
        );
        assert_eq!(
            dialect(Some("application/vnd.apache.avro;version=1.9.0")),
            None
        );
    }

    #[test]
    fn draft07_and_openapi_keywords_become_2020_12() {
        let mut notes = Notes::default();
        let mut map = json!({
            "type": "string",
            "nullable": true,
            "example": "x",
            "discriminator": "kind",
            "definitions": {"a": {}},
            "items": [{"type": "string"}],
            "additionalItems": false,
            "minimum": 1,
            "exclusiveMinimum": true
        })
        .as_object()
        .cloned()
        .expect("object");
        convert_keywords(&mut map, "/s", Dialect::OpenApi30, &mut notes);
        assert_eq!(
            Json::Object(map),
            json!({
                "type": ["string", "null"],
                "examples": ["x"],
                "x-discriminator": "kind",
                "$defs": {"a": {}},
                "prefixItems": [{"type": "string"}],
                "items": false,
                "exclusiveMinimum": 1
            })
        );
        assert!(!notes.adapted.is_empty());
    }

    #[test]
    fn non_asyncapi_documents_are_refused() {
        assert!(matches!(
            import("asyncapi: 2.6.0\ninfo: {title: t, version: '1'}\n"),
            Err(ImportError::NotAsyncApi3 { .. })
        ));
        assert!(matches!(
            import("openapi: 3.0.0\n"),
            Err(ImportError::NotAsyncApi3 { .. })
        ));
        assert!(matches!(import("a: [\n"), Err(ImportError::Yaml { .. })));
    }

    #[test]
    fn a_minimal_document_imports() {
        let text = r"
asyncapi: 3.0.0
info: {title: Shop, version: 2.0.0}
servers:
  prod: {host: example.com, protocol: kafka}
channels:
  orderPlaced:
    address: shop/order/placed
    messages:
      placed:
        payload:
          type: object
          properties:
            orderId: {type: string, format: uuid}
operations:
  onOrderPlaced:
    action: receive
    channel: {$ref: '#/channels/orderPlaced'}
";
        let imported = import(text).expect("imports");
        let paths: Vec<_> = imported
            .files
            .iter()
            .map(|file| file.path.display().to_string())
            .collect();
        assert_eq!(
            paths,
            [
                "consumers/on_order_placed.yaml",
                "evc.yaml",
                "events/shop.order.placed.yaml",
                "retry-policies.yaml"
            ]
        );
        assert!(
            imported
                .unsupported
                .iter()
                .any(|note| note.starts_with("/servers: ")),
            "{:?}",
            imported.unsupported
        );
        assert!(
            imported
                .unsupported
                .iter()
                .any(|note| note.starts_with("/info/version: ")),
            "{:?}",
            imported.unsupported
        );
        let event = &imported.files[2].contents;
        assert!(event.starts_with(EVENT_MODELINE), "{event}");
        assert!(!event.contains("additionalProperties"), "{event}");
        assert!(
            event.contains("payload_policy:\n  content: open\n"),
            "{event}"
        );
        assert!(event.contains("producer_class: shop"), "{event}");
        let consumer = &imported.files[0].contents;
        assert!(consumer.contains("shop.order.placed@^1"), "{consumer}");
        assert_eq!(imported.operations[0].becomes, "on_order_placed");
    }
}
