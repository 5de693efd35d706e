//! The AsyncAPI 3.0 document (`asyncapi/asyncapi.yaml`), its cross-object checks and its parity
//! with the contracts.
//!
//! Layout of the document [`render`] writes:
//!
//! - `info`: the project name as title, version `1.0.0`, and the registry digest
//!   (`x-evc-registry-digest`, the same digest as `registry.json`).
//! - `channels`: one per event type; the channel id and the address are the event type
//!   (`iu.born`). Compatibility mode, status, order key and size cap are `x-evc-*` extensions.
//! - `channels.<event>.messages`: one per version, id `<event>-v<version>` (`iu.born-v1.0.0`, a
//!   `+` of build metadata written `_`), each a reference to `components.messages`.
//! - `components.messages`: the message objects. The payload is a Multi Format Schema Object
//!   with `schemaFormat: application/schema+json;version=draft-2020-12` ([`SCHEMA_FORMAT`]): the
//!   payload schemas are JSON Schema 2020-12, which the AsyncAPI 3.0.0 formats table does not
//!   name, so the schema says what it is instead of claiming to be draft-07 or an AsyncAPI Schema
//!   Object. References inside a payload schema (`#/$defs/x`) are anchored to the schema's place
//!   in the document (`#/components/messages/<id>/payload/schema/$defs/x`) so that every `$ref`
//!   resolves within the document. The version is `x-evc-version`; the digest of the contract's
//!   schema is `x-evc-schema-digest`.
//! - `operations`: one `send` per producer class and event type (id
//!   `<producer_class>-send-<event>`, all versions) and one `receive` per consumer and subscribed
//!   event type (id `<consumer>-receive-<event>`, the versions its requirement accepts), with the
//!   consumer's settings, retry policy and dead-letter handling as `x-evc-*` extensions.
//! - `components.x-evc-retry-policies`: every retry policy, and `components.x-evc-executor-classes`
//!   every executor class (with each receive operation's `x-evc-executor-class`), so the
//!   document carries the whole registry.
//!
//! `-` never occurs in evc names, so every id above is unambiguous, and every id matches the
//! component key pattern `^[\w\d.\-_]+$`. Everything is ordered (event types and consumers by
//! name, versions ascending), so the document is byte-stable.

mod check;
mod parity;

use std::collections::BTreeMap;

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::Value as Json;

pub use check::{DocumentProblem, ProblemKind, check_document, resolve_pointer};
pub(crate) use check::{local_pointer, root_channel_id};
pub use parity::parity;

use super::{Artifact, EmitError, GENERATED_NOTICE, Layout};
use crate::digest;
use crate::duration;
use crate::format::{DurationText, ExecutorClassDef, Name};
use crate::model::{
    CompatMode, ConsumerMode, ContractSet, EventStatus, ExecutorKind, FailureClass, HandlerKind,
    Jitter, Ordering, RetryKind, RetryPolicy,
};
use crate::yaml::escape_pointer_segment;

/// The AsyncAPI version written.
pub const ASYNCAPI_VERSION: &str = "3.0.0";

/// The `schemaFormat` of every payload: JSON Schema 2020-12 as JSON-compatible data.
pub const SCHEMA_FORMAT: &str = "application/schema+json;version=draft-2020-12";

/// The content type of every payload.
pub const CONTENT_TYPE: &str = "application/json";

/// The `info.version` written; the registry digest (`x-evc-registry-digest`) tells contents apart.
pub const INFO_VERSION: &str = "1.0.0";

/// The channel id of an event type: the event type itself (`iu.born`).
pub fn channel_id(event: &str) -> String {
    event.to_owned()
}

/// The message id of one event version (`iu.born-v1.0.0`), used in the channel and in
/// `components.messages`. Build metadata's `+` is written `_`, which no version contains.
pub fn message_id(event: &str, version: &semver::Version) -> String {
    format!("{event}-v{}", version.to_string().replace('+', "_"))
}

/// The id of the `send` operation of a producer class for an event type.
pub fn send_operation_id(producer_class: &str, event: &str) -> String {
    format!("{producer_class}-send-{event}")
}

/// The id of the `receive` operation of a consumer for an event type.
pub fn receive_operation_id(consumer: &str, event: &str) -> String {
    format!("{consumer}-receive-{event}")
}

/// `#/channels/<id>`.
pub fn channel_ref(channel: &str) -> String {
    format!("#/channels/{}", escape_pointer_segment(channel))
}

/// `#/channels/<channel>/messages/<message>`.
pub fn channel_message_ref(channel: &str, message: &str) -> String {
    format!(
        "#/channels/{}/messages/{}",
        escape_pointer_segment(channel),
        escape_pointer_segment(message)
    )
}

/// `#/components/messages/<id>`.
pub fn component_message_ref(message: &str) -> String {
    format!("#/components/messages/{}", escape_pointer_segment(message))
}

/// The JSON pointer of a message's payload schema in the document.
pub fn payload_schema_pointer(message: &str) -> String {
    format!(
        "/components/messages/{}/payload/schema",
        escape_pointer_segment(message)
    )
}

/// The `summary` of a `send` operation.
pub fn send_summary(producer_class: &str, event: &str) -> String {
    format!("Producer class `{producer_class}` sends {event}.")
}

/// The `summary` of a `receive` operation.
pub fn receive_summary(consumer: &str, event: &str) -> String {
    format!("Consumer `{consumer}` receives {event}.")
}

/// The `title` of a message.
pub fn message_title(event: &str, version: &semver::Version) -> String {
    format!("{event} {version}")
}

/// The `info.description` of the document of a project.
pub fn info_description(project: &str) -> String {
    format!(
        "Events of the `{project}` project: one channel per event type, one message per version, \
         one send operation per producer class and one receive operation per consumer \
         subscription. Generated by evc from the contracts; edit the contracts, not this file."
    )
}

/// Renders `asyncapi/asyncapi.yaml`.
///
/// # Errors
/// [`EmitError::Serialize`] when the document cannot be serialized (a bug: the model is valid).
pub fn render(set: &ContractSet, layout: &Layout) -> Result<Artifact, EmitError> {
    let document = document(set)?;
    let yaml = serde_saphyr::to_string(&document).map_err(|error| EmitError::Serialize {
        document: "asyncapi.yaml",
        message: error.to_string(),
    })?;
    let mut contents = format!("# {GENERATED_NOTICE}\n");
    contents.push_str(yaml.strip_prefix("---\n").unwrap_or(&yaml));
    if !contents.ends_with('\n') {
        contents.push('\n');
    }
    Ok(Artifact {
        path: layout.asyncapi_file.clone(),
        contents,
    })
}

/// The document as JSON, the form [`check_document`] and schema validators read.
///
/// # Errors
/// [`EmitError::Serialize`] when the document cannot be converted (a bug).
pub fn render_json(set: &ContractSet) -> Result<Json, EmitError> {
    serde_json::to_value(document(set)?).map_err(|error| EmitError::Serialize {
        document: "asyncapi.yaml",
        message: error.to_string(),
    })
}

fn document(set: &ContractSet) -> Result<Document, EmitError> {
    let mut channels = OrderedMap::default();
    let mut messages = OrderedMap::default();
    let mut operations = BTreeMap::new();
    for (name, event) in &set.events {
        let cid = channel_id(name);
        let mut channel_messages = OrderedMap::default();
        let mut all_refs = Vec::new();
        for version in &event.versions {
            let mid = message_id(name, &version.version);
            channel_messages.push(
                mid.clone(),
                Reference {
                    reference: component_message_ref(&mid),
                },
            );
            all_refs.push(Reference {
                reference: channel_message_ref(&cid, &mid),
            });
            let mut schema = serde_json::Value::clone(&version.schema);
            anchor_refs(&mut schema, &payload_schema_pointer(&mid));
            messages.push(
                mid.clone(),
                Message {
                    name: mid.clone(),
                    title: message_title(name, &version.version),
                    description: version.description.clone(),
                    content_type: CONTENT_TYPE,
                    deprecated: event.status == EventStatus::Deprecated,
                    payload: Payload {
                        schema_format: SCHEMA_FORMAT,
                        schema,
                    },
                    event: name.clone(),
                    version: version.version.to_string(),
                    schema_digest: digest::json_digest(&version.schema),
                    migration_policy: version.migration_policy.as_ref().map(|policy| {
                        MigrationPolicyExt {
                            producer_window: duration::format(policy.producer_window),
                            consumer_window: duration::format(policy.consumer_window),
                            dual_write: policy.dual_write.clone(),
                            rollback: policy.rollback.clone(),
                        }
                    }),
                },
            );
        }
        operations.insert(
            send_operation_id(&event.producer_class, name),
            Operation {
                action: "send",
                channel: Reference {
                    reference: channel_ref(&cid),
                },
                summary: send_summary(&event.producer_class, name),
                description: None,
                messages: all_refs,
                producer_class: Some(event.producer_class.clone()),
                consumer: None,
            },
        );
        channels.push(
            cid,
            Channel {
                address: name.clone(),
                description: event.description.clone(),
                messages: channel_messages,
                compat: event.compat,
                status: event.status,
                order_key: event.order_key.clone(),
                max_payload_bytes: event.max_payload_bytes,
            },
        );
    }
    for (name, consumer) in &set.consumers {
        let policy = set.retry_policies.get(&consumer.retry_policy);
        for subscription in &consumer.subscriptions {
            let Some(event) = set.events.get(&subscription.event) else {
                continue;
            };
            let cid = channel_id(&event.name);
            let refs = event
                .versions
                .iter()
                .filter(|version| subscription.requirement.matches(&version.version))
                .map(|version| Reference {
                    reference: channel_message_ref(
                        &cid,
                        &message_id(&event.name, &version.version),
                    ),
                })
                .collect();
            operations.insert(
                receive_operation_id(name, &event.name),
                Operation {
                    action: "receive",
                    channel: Reference {
                        reference: channel_ref(&cid),
                    },
                    summary: receive_summary(name, &event.name),
                    description: Some(consumer.description.clone()),
                    messages: refs,
                    producer_class: None,
                    consumer: Some(ConsumerExt {
                        consumer: name.clone(),
                        subscription: subscription.requirement.to_string(),
                        executor_kind: consumer.executor_kind,
                        executor_class: consumer.executor_class.clone(),
                        handler: consumer.handler,
                        mode: consumer.mode,
                        ordering: consumer.ordering,
                        heartbeat_threshold: duration::format(consumer.heartbeat_threshold),
                        retry_policy: NamedRetryPolicy {
                            name: consumer.retry_policy.clone(),
                            settings: policy.map(retry_settings),
                        },
                        dead_letter: DeadLetter {
                            status: "dead",
                            after_attempts: policy.map_or(
                                set.project.dispatcher.max_attempts,
                                |policy| {
                                    policy.max_attempts.min(set.project.dispatcher.max_attempts)
                                },
                            ),
                            immediately_on: [FailureClass::Permanent, FailureClass::Poison],
                            quarantine_status: "quarantined",
                            quarantined_on: [
                                FailureClass::Scope,
                                FailureClass::Schema,
                                FailureClass::Integrity,
                            ],
                        },
                    }),
                },
            );
        }
    }
    Ok(Document {
        asyncapi: ASYNCAPI_VERSION,
        info: Info {
            title: set.project.name.clone(),
            version: INFO_VERSION,
            description: info_description(&set.project.name),
            registry_digest: super::manifest::registry_digest(set)?,
        },
        default_content_type: CONTENT_TYPE,
        channels,
        operations,
        components: Components {
            messages,
            retry_policies: set
                .retry_policies
                .iter()
                .map(|(name, policy)| {
                    (
                        name.clone(),
                        DescribedRetryPolicy {
                            description: policy.description.clone(),
                            settings: retry_settings(policy),
                        },
                    )
                })
                .collect(),
            executor_classes: set
                .executor_classes
                .iter()
                .map(|(name, class)| {
                    (
                        name.clone(),
                        ExecutorClassDef {
                            description: class.description.clone(),
                            mutating: class.mutating,
                            retry_policy: class.retry_policy.clone().map(Name),
                            idempotency_namespace: Name(class.idempotency_namespace.clone()),
                            heartbeat_owner: class.heartbeat_owner.clone(),
                            heartbeat_threshold: class
                                .heartbeat_threshold
                                .map(|threshold| DurationText(duration::format(threshold))),
                            active: class.active,
                        },
                    )
                })
                .collect(),
        },
    })
}

fn retry_settings(policy: &RetryPolicy) -> RetrySettings {
    RetrySettings {
        kind: policy.kind,
        base_delay: duration::format(policy.base_delay),
        max_delay: policy.max_delay.map(duration::format),
        max_attempts: policy.max_attempts,
        jitter: policy.jitter,
        retry_on: policy.retry_on.clone(),
    }
}

/// Keywords whose values are data, not subschemas: `$ref`-shaped values inside them stay as
/// they are.
const DATA_KEYWORDS: &[&str] = &["const", "enum", "default", "examples"];

/// Rewrites schema-local references (`#`, `#/$defs/x`) to document pointers below `base`.
fn anchor_refs(schema: &mut Json, base: &str) {
    match schema {
        Json::Object(map) => {
            for (key, value) in map.iter_mut() {
                if key == "$ref" {
                    if let Json::String(reference) = value
                        && let Some(rest) = reference.strip_prefix('#')
                        && (rest.is_empty() || rest.starts_with('/'))
                    {
                        *reference = format!("#{base}{rest}");
                    }
                } else if !DATA_KEYWORDS.contains(&key.as_str()) && !key.starts_with("x-") {
                    anchor_refs(value, base);
                }
            }
        }
        Json::Array(items) => items.iter_mut().for_each(|item| anchor_refs(item, base)),
        _ => {}
    }
}

/// The inverse of the anchoring [`render`] applies: references below `base` become
/// schema-local again (`#/components/messages/m/payload/schema/$defs/x` → `#/$defs/x`).
pub fn unanchor_refs(schema: &mut Json, base: &str) {
    match schema {
        Json::Object(map) => {
            for (key, value) in map.iter_mut() {
                if key == "$ref" {
                    if let Json::String(reference) = value
                        && let Some(rest) = reference
                            .strip_prefix('#')
                            .and_then(|rest| rest.strip_prefix(base))
                        && (rest.is_empty() || rest.starts_with('/'))
                    {
                        *reference = format!("#{rest}");
                    }
                } else if !DATA_KEYWORDS.contains(&key.as_str()) && !key.starts_with("x-") {
                    unanchor_refs(value, base);
                }
            }
        }
        Json::Array(items) => items.iter_mut().for_each(|item| unanchor_refs(item, base)),
        _ => {}
    }
}

/// A map serialized in insertion order.
#[derive(Debug)]
struct OrderedMap<V>(Vec<(String, V)>);

impl<V> Default for OrderedMap<V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<V> OrderedMap<V> {
    fn push(&mut self, key: String, value: V) {
        self.0.push((key, value));
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<V> FromIterator<(String, V)> for OrderedMap<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl<V: Serialize> Serialize for OrderedMap<V> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

#[derive(Debug, Serialize)]
struct Document {
    asyncapi: &'static str,
    info: Info,
    #[serde(rename = "defaultContentType")]
    default_content_type: &'static str,
    channels: OrderedMap<Channel>,
    operations: BTreeMap<String, Operation>,
    components: Components,
}

#[derive(Debug, Serialize)]
struct Info {
    title: String,
    version: &'static str,
    description: String,
    #[serde(rename = "x-evc-registry-digest")]
    registry_digest: String,
}

#[derive(Debug, Serialize)]
struct Reference {
    #[serde(rename = "$ref")]
    reference: String,
}

#[derive(Debug, Serialize)]
struct Channel {
    address: String,
    description: String,
    messages: OrderedMap<Reference>,
    #[serde(rename = "x-evc-compat")]
    compat: CompatMode,
    #[serde(rename = "x-evc-status")]
    status: EventStatus,
    #[serde(rename = "x-evc-order-key", skip_serializing_if = "Vec::is_empty")]
    order_key: Vec<String>,
    #[serde(rename = "x-evc-max-payload-bytes")]
    max_payload_bytes: u32,
}

#[derive(Debug, Serialize)]
struct Message {
    name: String,
    title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    #[serde(rename = "contentType")]
    content_type: &'static str,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    deprecated: bool,
    payload: Payload,
    #[serde(rename = "x-evc-event")]
    event: String,
    #[serde(rename = "x-evc-version")]
    version: String,
    #[serde(rename = "x-evc-schema-digest")]
    schema_digest: String,
    #[serde(
        rename = "x-evc-migration-policy",
        skip_serializing_if = "Option::is_none"
    )]
    migration_policy: Option<MigrationPolicyExt>,
}

#[derive(Debug, Serialize)]
struct Payload {
    #[serde(rename = "schemaFormat")]
    schema_format: &'static str,
    schema: Json,
}

#[derive(Debug, Serialize)]
struct MigrationPolicyExt {
    producer_window: String,
    consumer_window: String,
    dual_write: String,
    rollback: String,
}

#[derive(Debug, Serialize)]
struct Operation {
    action: &'static str,
    channel: Reference,
    summary: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    messages: Vec<Reference>,
    #[serde(
        rename = "x-evc-producer-class",
        skip_serializing_if = "Option::is_none"
    )]
    producer_class: Option<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    consumer: Option<ConsumerExt>,
}

#[derive(Debug, Serialize)]
struct ConsumerExt {
    #[serde(rename = "x-evc-consumer")]
    consumer: String,
    #[serde(rename = "x-evc-subscription")]
    subscription: String,
    #[serde(rename = "x-evc-executor-kind")]
    executor_kind: ExecutorKind,
    #[serde(
        rename = "x-evc-executor-class",
        skip_serializing_if = "Option::is_none"
    )]
    executor_class: Option<String>,
    #[serde(rename = "x-evc-handler")]
    handler: HandlerKind,
    #[serde(rename = "x-evc-mode")]
    mode: ConsumerMode,
    #[serde(rename = "x-evc-ordering")]
    ordering: Ordering,
    #[serde(rename = "x-evc-heartbeat-threshold")]
    heartbeat_threshold: String,
    #[serde(rename = "x-evc-retry-policy")]
    retry_policy: NamedRetryPolicy,
    #[serde(rename = "x-evc-dead-letter")]
    dead_letter: DeadLetter,
}

#[derive(Debug, Serialize)]
struct NamedRetryPolicy {
    name: String,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    settings: Option<RetrySettings>,
}

#[derive(Debug, Serialize)]
struct DescribedRetryPolicy {
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    #[serde(flatten)]
    settings: RetrySettings,
}

#[derive(Debug, Serialize)]
struct RetrySettings {
    kind: RetryKind,
    base_delay: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_delay: Option<String>,
    max_attempts: u32,
    jitter: Jitter,
    retry_on: Vec<FailureClass>,
}

#[derive(Debug, Serialize)]
struct DeadLetter {
    status: &'static str,
    after_attempts: u32,
    immediately_on: [FailureClass; 2],
    quarantine_status: &'static str,
    quarantined_on: [FailureClass; 3],
}

#[derive(Debug, Serialize)]
struct Components {
    messages: OrderedMap<Message>,
    #[serde(rename = "x-evc-retry-policies")]
    retry_policies: OrderedMap<DescribedRetryPolicy>,
    #[serde(
        rename = "x-evc-executor-classes",
        skip_serializing_if = "OrderedMap::is_empty"
    )]
    executor_classes: OrderedMap<ExecutorClassDef>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ids_are_unambiguous_and_valid_component_keys() {
        let version = semver::Version::parse("1.2.0-rc.1+build.7").expect("semver");
        let id = message_id("iu.born", &version);
        assert_eq!(id, "iu.born-v1.2.0-rc.1_build.7");
        assert!(
            id.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        );
        assert_eq!(
            send_operation_id("governance", "proposal.approved"),
            "governance-send-proposal.approved"
        );
        assert_eq!(
            receive_operation_id("audit", "iu.born"),
            "audit-receive-iu.born"
        );
        assert_eq!(
            channel_message_ref("iu.born", "iu.born-v1.0.0"),
            "#/channels/iu.born/messages/iu.born-v1.0.0"
        );
    }

    #[test]
    fn schema_refs_are_anchored_and_unanchored() {
        let original = json!({
            "type": "object",
            "properties": {
                "a": {"$ref": "#/$defs/unit"},
                "b": {"$ref": "#"},
                "c": {"const": {"$ref": "#/data"}},
                "d": {"$ref": "https://example.com/x.json"}
            },
            "$defs": {"unit": {"type": "string"}}
        });
        let base = payload_schema_pointer("iu.merged-v1.0.0");
        let mut schema = original.clone();
        anchor_refs(&mut schema, &base);
        assert_eq!(
            schema["properties"]["a"]["$ref"],
            "#/components/messages/iu.merged-v1.0.0/payload/schema/$defs/unit"
        );
        assert_eq!(
            schema["properties"]["b"]["$ref"],
            "#/components/messages/iu.merged-v1.0.0/payload/schema"
        );
        assert_eq!(schema["properties"]["c"]["const"]["$ref"], "#/data");
        assert_eq!(
            schema["properties"]["d"]["$ref"],
            "https://example.com/x.json"
        );
        unanchor_refs(&mut schema, &base);
        assert_eq!(schema, original);
    }
}
