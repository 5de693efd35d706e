//! What producer functions hand to the outbox.

use std::future::Future;

use crate::trace::TraceContext;

/// An event ready to append: registered type and version, typed payload already serialized.
#[derive(Debug, Clone, PartialEq)]
pub struct OutgoingEvent {
    /// Event type (`iu.born`).
    pub event_type: &'static str,
    /// The exact contract version the payload was built for (the newest of its major).
    pub version: &'static str,
    /// The per-key ordering value taken from the payload's `order_key` fields, if any.
    pub order_key: Option<String>,
    /// The trace the event belongs to.
    pub trace: TraceContext,
    /// The payload as JSON.
    pub payload: serde_json::Value,
}

/// A payload could not be turned into JSON.
#[derive(Debug, thiserror::Error)]
#[error("payload of {event_type} {version} does not serialize: {source}")]
pub struct PayloadError {
    /// Event type.
    pub event_type: &'static str,
    /// Version.
    pub version: &'static str,
    /// Cause.
    pub source: serde_json::Error,
}

impl OutgoingEvent {
    /// Serializes `payload` into an outgoing event.
    ///
    /// # Errors
    /// [`PayloadError`] when the payload does not serialize (a map with non-string keys, say).
    pub fn new<T: serde::Serialize + ?Sized>(
        event_type: &'static str,
        version: &'static str,
        order_key: Option<String>,
        trace: &TraceContext,
        payload: &T,
    ) -> Result<Self, PayloadError> {
        let payload = serde_json::to_value(payload).map_err(|source| PayloadError {
            event_type,
            version,
            source,
        })?;
        Ok(Self {
            event_type,
            version,
            order_key,
            trace: trace.clone(),
            payload,
        })
    }
}

/// A payload type checked against one registered event type and version: the generated payload
/// types and every `#[derive(evc::Event)]` struct. [`Publish::emit`] appends it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a registered event payload",
    label = "not a registered event payload",
    note = "derive `evc::Event` for it (checked against a contract version), or use a generated payload type"
)]
pub trait RegisteredEvent: serde::Serialize {
    /// The event type (`iu.born`).
    const EVENT_TYPE: &'static str;
    /// The exact contract version the type was checked against.
    const VERSION: &'static str;

    /// The per-key ordering value of this payload, from the contract's `order_key` fields;
    /// `None` when the event type names none (the event orders by its aggregate key, or alone).
    fn order_key(&self) -> Option<String>;
}

/// Where producer functions append events: the caller's transaction on an outbox store.
pub trait Publish {
    /// What a successful append returns (the event id, say).
    type Receipt;
    /// Why an append failed.
    type Error: From<PayloadError>;

    /// Appends one event in the caller's transaction.
    fn publish(
        &mut self,
        event: OutgoingEvent,
    ) -> impl Future<Output = Result<Self::Receipt, Self::Error>> + Send;

    /// Appends a registered payload in the caller's transaction: its event type, version and
    /// order key come from its [`RegisteredEvent`] implementation, so a derived struct and a
    /// generated payload take the same path.
    fn emit<E: RegisteredEvent + ?Sized>(
        &mut self,
        trace: &TraceContext,
        payload: &E,
    ) -> impl Future<Output = Result<Self::Receipt, Self::Error>> + Send
    where
        Self: Send,
    {
        let event = OutgoingEvent::new(
            E::EVENT_TYPE,
            E::VERSION,
            payload.order_key(),
            trace,
            payload,
        );
        async move { self.publish(event?).await }
    }
}

/// One part of an order key: the field's value as text (a JSON string without quotes, any
/// other value as JSON).
pub fn order_key_part<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(text)) => text,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_key_parts_are_plain_text() {
        assert_eq!(order_key_part(&"unit-1"), "unit-1");
        assert_eq!(order_key_part(&42_u32), "42");
        assert_eq!(order_key_part(&true), "true");
    }

    #[test]
    fn outgoing_events_carry_the_serialized_payload() {
        let trace = TraceContext::new("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)
            .expect("valid trace");
        let event = OutgoingEvent::new("iu.born", "1.1.0", Some("u".into()), &trace, &[1, 2])
            .expect("serializes");
        assert_eq!(event.payload, serde_json::json!([1, 2]));
        assert_eq!(event.trace.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
    }
}
