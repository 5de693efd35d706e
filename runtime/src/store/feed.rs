//! The event feed: every event of a store, in an order no later commit can fall behind
//! ([`crate::Observe::feed`]; docs/runtime.md, "The event feed").
//!
//! A reader that follows `seq` alone can miss events: on PostgreSQL `seq` is drawn when a row
//! is built, so a transaction that drew 41 may commit after one that drew 42 was read. The
//! feed orders events by the transaction that wrote them and then by `seq`, and yields an
//! event only once every transaction that could still write before it has ended. On SQLite
//! one writer at a time commits in `seq` order, and the position is `seq` alone.

use std::fmt;
use std::str::FromStr;

use uuid::Uuid;

/// Where a reader of the feed stands: after the event at this position. The default is the
/// start of the feed. Written `WRITER-SEQ` (the id a gateway gives its clients to resume from).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FeedPosition {
    /// The transaction that wrote the event, on PostgreSQL (0 on SQLite, and for events
    /// written before the store recorded it).
    pub writer: i64,
    /// The event's append order.
    pub seq: i64,
}

impl fmt::Display for FeedPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.writer, self.seq)
    }
}

/// A feed position that is not `WRITER-SEQ` with two non-negative integers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a feed position is WRITER-SEQ, two non-negative integers")]
pub struct FeedPositionError;

impl FromStr for FeedPosition {
    type Err = FeedPositionError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (writer, seq) = text.split_once('-').ok_or(FeedPositionError)?;
        let number = |part: &str| {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(FeedPositionError);
            }
            part.parse::<i64>().map_err(|_| FeedPositionError)
        };
        Ok(Self {
            writer: number(writer)?,
            seq: number(seq)?,
        })
    }
}

/// One event of the feed, with its payload. The payload is for the reader to route and filter
/// on; whoever passes events on decides what of it leaves the process, so `Debug` prints its
/// size only.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct FeedEvent {
    /// Where the event stands in the feed.
    pub position: FeedPosition,
    /// The event.
    pub event_id: Uuid,
    /// Its type.
    pub event_type: String,
    /// The schema version it was appended under.
    pub schema_version: String,
    /// The order key.
    pub order_key: String,
    /// The producer class that appended it.
    pub producer_class: String,
    /// The tenant scope, if any.
    pub tenant_scope: Option<String>,
    /// The W3C trace id, if any.
    pub trace_id: Option<String>,
    /// The correlation id, if any.
    pub correlation_id: Option<String>,
    /// The causation id, if any.
    pub causation_id: Option<String>,
    /// When it was produced, in epoch seconds of the store's clock.
    pub produced_at: f64,
    /// The payload.
    pub payload: serde_json::Value,
}

impl fmt::Debug for FeedEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeedEvent")
            .field("position", &self.position)
            .field("event_id", &self.event_id)
            .field("event_type", &self.event_type)
            .field("schema_version", &self.schema_version)
            .field("tenant_scope", &self.tenant_scope)
            .field("trace_id", &self.trace_id)
            .field("payload", &"<redacted>")
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_reads_back_what_it_writes_and_nothing_else() {
        let position = FeedPosition {
            writer: 748,
            seq: 12,
        };
        assert_eq!(position.to_string(), "748-12");
        assert_eq!("748-12".parse(), Ok(position));
        for bad in [
            "",
            "12",
            "-12",
            "1--2",
            "a-1",
            "1-+2",
            "1-2-3",
            "1- 2",
            "99999999999999999999-1",
        ] {
            assert_eq!(
                bad.parse::<FeedPosition>(),
                Err(FeedPositionError),
                "{bad:?}"
            );
        }
        assert!(FeedPosition { writer: 1, seq: 9 } < FeedPosition { writer: 2, seq: 3 });
    }
}
