//! What the relay publishes for one event: its subject, its headers (the envelope) and its
//! body (the payload as JSON).

use async_nats::HeaderMap;
use async_nats::jetstream::message::PublishMessage;
use bytes::Bytes;
use evc_runtime::FeedEvent;
use sha2::{Digest, Sha256};

/// How the envelope is named in the message headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HeaderStyle {
    /// `Evc-Event-Type`, `Evc-Schema-Version`, ... (docs/relay.md, "Messages").
    #[default]
    Evc,
    /// CloudEvents 1.0 binary mode for NATS: `ce-id`, `ce-type`, `ce-source`, `ce-time`,
    /// `ce-specversion`, `ce-datacontenttype`, with evc's other fields as `ce-evc*` extensions;
    /// values percent-encoded as the binding asks.
    CloudEvents,
}

/// The subject of an event: `<prefix>.<partition>.<event type>.v<major>` (`evc.0.iu.born.v1`),
/// its partition that of its order key among `partitions`.
pub fn subject(prefix: &str, partitions: u32, event: &FeedEvent) -> String {
    let major = event
        .schema_version
        .split('.')
        .next()
        .unwrap_or(event.schema_version.as_str());
    format!(
        "{prefix}.{}.{}.v{major}",
        partition(&event.order_key, partitions),
        event.event_type
    )
}

/// The partition of `order_key` among `partitions` (from 0): the first eight bytes of its
/// SHA-256, big-endian, modulo `partitions`. Stable across processes, releases and languages,
/// so a consumer written elsewhere finds a key's partition too.
pub fn partition(order_key: &str, partitions: u32) -> u32 {
    if partitions <= 1 {
        return 0;
    }
    let digest = Sha256::digest(order_key.as_bytes());
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    let bucket = u64::from_be_bytes(head) % u64::from(partitions);
    u32::try_from(bucket).unwrap_or(0)
}

/// The message of `event` as the relay publishes it: the payload as the body, the envelope as
/// headers, and `Nats-Msg-Id` the event id, so the broker drops a message sent again within
/// the stream's duplicate window.
///
/// # Errors
/// A payload that does not encode as JSON.
pub fn message(event: &FeedEvent, style: HeaderStyle) -> Result<PublishMessage, serde_json::Error> {
    let body = Bytes::from(serde_json::to_vec(&event.payload)?);
    Ok(PublishMessage::build()
        .payload(body)
        .headers(headers(event, style))
        .message_id(event.event_id.to_string()))
}

/// The envelope as headers (never the payload).
pub fn headers(event: &FeedEvent, style: HeaderStyle) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let id = event.event_id.to_string();
    let position = event.position.to_string();
    let produced = produced_at(event.produced_at);
    let optional = [
        ("tenant", event.tenant_scope.as_deref()),
        ("trace-id", event.trace_id.as_deref()),
        ("correlation-id", event.correlation_id.as_deref()),
        ("causation-id", event.causation_id.as_deref()),
    ];
    match style {
        HeaderStyle::Evc => {
            for (name, value) in [
                ("Evc-Event-Id", id.as_str()),
                ("Evc-Event-Type", event.event_type.as_str()),
                ("Evc-Schema-Version", event.schema_version.as_str()),
                ("Evc-Order-Key", event.order_key.as_str()),
                ("Evc-Producer-Class", event.producer_class.as_str()),
                ("Evc-Produced-At", produced.as_str()),
                ("Evc-Feed-Position", position.as_str()),
            ] {
                headers.insert(name, value);
            }
            for (name, value) in optional {
                if let Some(value) = value {
                    headers.insert(format!("Evc-{}", title(name)).as_str(), value);
                }
            }
        }
        HeaderStyle::CloudEvents => {
            for (name, value) in [
                ("ce-specversion", "1.0"),
                ("ce-id", id.as_str()),
                ("ce-type", event.event_type.as_str()),
                ("ce-source", event.producer_class.as_str()),
                ("ce-time", produced.as_str()),
                ("ce-datacontenttype", "application/json"),
                ("ce-evcschemaversion", event.schema_version.as_str()),
                ("ce-evcorderkey", event.order_key.as_str()),
                ("ce-evcfeedposition", position.as_str()),
            ] {
                headers.insert(name, encoded(value).as_str());
            }
            for (name, value) in optional {
                if let Some(value) = value {
                    headers.insert(
                        format!("ce-evc{}", name.replace('-', "")).as_str(),
                        encoded(value).as_str(),
                    );
                }
            }
        }
    }
    headers
}

/// The characters the CloudEvents NATS binding percent-encodes in header values: controls,
/// space, `"`, `%` and everything outside printable ASCII.
const CLOUDEVENTS_ENCODED: &percent_encoding::AsciiSet =
    &percent_encoding::CONTROLS.add(b' ').add(b'"').add(b'%');

/// `value` percent-encoded for a CloudEvents header.
fn encoded(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, CLOUDEVENTS_ENCODED).to_string()
}

/// `trace-id` as `Trace-Id`.
fn title(name: &str) -> String {
    name.split('-')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// Epoch seconds as RFC 3339 with microseconds (`2026-12-04T10:52:42.123456Z`).
fn produced_at(epoch_seconds: f64) -> String {
    let micros = (epoch_seconds * 1_000_000.0).round() as i64;
    chrono::DateTime::from_timestamp_micros(micros).map_or_else(String::new, |time| {
        time.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_and_times_are_written_as_headers_expect() {
        assert_eq!(title("trace-id"), "Trace-Id");
        assert_eq!(title("tenant"), "Tenant");
        assert_eq!(produced_at(1.5), "1970-01-01T00:00:01.500000Z");
    }

    /// The partition is a format other languages compute too: these values come from Python's
    /// `int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % n`.
    #[test]
    fn partitions_follow_the_documented_hash() {
        let key = "0190a8c2-0000-7000-8000-000000000001";
        assert_eq!(
            [partition(key, 3), partition(key, 7), partition(key, 64)],
            [2, 4, 10]
        );
        assert_eq!(
            [
                partition("iu-42", 3),
                partition("iu-42", 7),
                partition("iu-42", 64)
            ],
            [0, 5, 9]
        );
        assert_eq!([partition("", 3), partition("", 64)], [1, 20]);
        assert_eq!(partition(key, 1), 0);
        assert_eq!(partition(key, 0), 0);
    }

    #[test]
    fn cloudevents_values_are_percent_encoded() {
        assert_eq!(encoded("tenant a\"%ü\r\n"), "tenant%20a%22%25%C3%BC%0D%0A");
        assert_eq!(encoded("iu.born"), "iu.born");
    }
}
