//! A realtime topic of `topics.yaml`: which events it carries, what partitions it, and which
//! payload values it lets through.

use std::collections::{BTreeMap, BTreeSet};

use evc_runtime::FeedEvent;

/// What partitions a topic's stream: a client names one value and receives only its events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicKey {
    /// A top-level payload field (`payload.iu_unit_id`).
    Payload(String),
    /// An envelope field (`envelope.trace_id`).
    Envelope(EnvelopeField),
}

/// The envelope fields a topic may be keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvelopeField {
    /// The W3C trace id.
    TraceId,
    /// The correlation id.
    CorrelationId,
    /// The tenant scope.
    TenantScope,
    /// The causation id.
    CausationId,
    /// The order key.
    OrderKey,
    /// The producer class.
    ProducerClass,
}

impl EnvelopeField {
    /// The field's name in the envelope.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::TraceId => "trace_id",
            Self::CorrelationId => "correlation_id",
            Self::CausationId => "causation_id",
            Self::TenantScope => "tenant_scope",
            Self::OrderKey => "order_key",
            Self::ProducerClass => "producer_class",
        }
    }
}

impl std::fmt::Display for TopicKey {
    /// As `topics.yaml` writes it (`payload.iu_unit_id`, `envelope.trace_id`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Payload(field) => write!(f, "payload.{field}"),
            Self::Envelope(field) => write!(f, "envelope.{}", field.as_str()),
        }
    }
}

/// A `topics.yaml` key (`payload.FIELD` or `envelope.FIELD`) the gateway cannot key by.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a topic key is payload.FIELD or envelope. and one of trace_id, correlation_id, \
     causation_id, tenant_scope, order_key or producer_class"
)]
pub struct TopicKeyError;

impl std::str::FromStr for TopicKey {
    type Err = TopicKeyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if let Some(field) = text.strip_prefix("payload.") {
            return if field.is_empty() {
                Err(TopicKeyError)
            } else {
                Ok(Self::Payload(field.to_owned()))
            };
        }
        let field = match text.strip_prefix("envelope.") {
            Some("trace_id") => EnvelopeField::TraceId,
            Some("correlation_id") => EnvelopeField::CorrelationId,
            Some("tenant_scope") => EnvelopeField::TenantScope,
            Some("causation_id") => EnvelopeField::CausationId,
            Some("order_key") => EnvelopeField::OrderKey,
            Some("producer_class") => EnvelopeField::ProducerClass,
            _ => return Err(TopicKeyError),
        };
        Ok(Self::Envelope(field))
    }
}

/// A realtime topic: a named selection of the outbox's events that clients subscribe to.
#[derive(Debug, Clone, PartialEq)]
pub struct Topic {
    /// Its name.
    pub name: String,
    /// What its subscribers see.
    pub description: String,
    /// The event types it carries (its patterns, resolved against the contracts).
    pub event_types: BTreeSet<String>,
    /// What partitions it, if anything.
    pub key: Option<TopicKey>,
    /// Payload field filters: an event passes when each named top-level field holds one of
    /// the listed values.
    pub filter: BTreeMap<String, Vec<serde_json::Value>>,
}

impl Topic {
    /// Whether `event` belongs to the topic: its type is carried and its payload passes the
    /// filter.
    pub(crate) fn carries(&self, event: &FeedEvent) -> bool {
        self.event_types.contains(&event.event_type)
            && self.filter.iter().all(|(field, allowed)| {
                event
                    .payload
                    .get(field)
                    .is_some_and(|value| allowed.contains(value))
            })
    }

    /// The partition value of `event` (`None`: the topic has no key, or the event lacks the
    /// field). A string is itself; any other JSON value is its JSON text.
    pub(crate) fn key_of(&self, event: &FeedEvent) -> Option<String> {
        match self.key.as_ref()? {
            TopicKey::Payload(field) => match event.payload.get(field)? {
                serde_json::Value::String(text) => Some(text.clone()),
                serde_json::Value::Null => None,
                other => Some(other.to_string()),
            },
            TopicKey::Envelope(EnvelopeField::TraceId) => event.trace_id.clone(),
            TopicKey::Envelope(EnvelopeField::CorrelationId) => event.correlation_id.clone(),
            TopicKey::Envelope(EnvelopeField::TenantScope) => event.tenant_scope.clone(),
            TopicKey::Envelope(EnvelopeField::CausationId) => event.causation_id.clone(),
            TopicKey::Envelope(EnvelopeField::OrderKey) => Some(event.order_key.clone()),
            TopicKey::Envelope(EnvelopeField::ProducerClass) => Some(event.producer_class.clone()),
        }
    }
}
