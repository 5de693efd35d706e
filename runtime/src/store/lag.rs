//! Lag thresholds (`lag_thresholds` of a consumer's contract, docs/runtime.md, "Lag breaches"):
//! when a breach opens and closes, and the `event_lag.breach` event an opening appends. Both
//! stores run a watch round ([`crate::Store::watch_lag`]) the same way: in one write
//! transaction, under the store's lock, they measure each (consumer, producer class) pair's lag
//! (how long the oldest open delivery to the consumer of an event of the class has waited),
//! open a breach where it is over the threshold and none is open, appending one
//! `event_lag.breach` in the same transaction, and close the open breach of a pair back under
//! its threshold. One open breach per pair (a unique index) makes it one event per breach.

use serde_json::{Map, Value};
use uuid::Uuid;

use crate::registry::LagThresholdDescriptor;
use crate::store::lifecycle::Lifecycle;

/// The lifecycle event a lag breach appends, when the registry registers it.
pub const LAG_BREACH: &str = "event_lag.breach";

/// A breach as a store keeps it ([`crate::Store::lag_breaches`]). Times are epoch seconds of
/// the store's clock.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LagBreach {
    /// The breach (`evc_lag_breaches.id`).
    pub id: i64,
    /// The consumer.
    pub consumer: String,
    /// The producer class of the events whose lag crossed the threshold.
    pub producer_class: String,
    /// The threshold crossed, in milliseconds.
    pub threshold_ms: i64,
    /// The lag when the breach opened, in milliseconds.
    pub lag_ms: i64,
    /// The event whose delivery had waited longest then.
    pub oldest_event_id: Option<Uuid>,
    /// When it opened.
    pub opened_at: f64,
    /// When the lag was back under the threshold (`None`: open).
    pub closed_at: Option<f64>,
}

/// What one watch round did ([`crate::Store::watch_lag`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LagRound {
    /// Whether this round held the store's lag-watch lock (`false`: another process ran it).
    pub leader: bool,
    /// Breaches opened (one `event_lag.breach` each).
    pub opened: u32,
    /// Breaches closed.
    pub closed: u32,
}

/// A pair's lag as a round measured it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::store) struct Measured {
    /// How long its oldest open delivery has waited, in milliseconds (`None`: none open).
    pub(in crate::store) lag_ms: Option<i64>,
    /// That delivery's event.
    pub(in crate::store) oldest_event_id: Option<Uuid>,
}

/// What a round does about one pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Change {
    /// Over the threshold with no breach open: open one.
    Open,
    /// Back under the threshold (or nothing open) with breach `id` open: close it.
    Close(i64),
}

/// What a round does about `threshold`'s pair, measured `measured`, with breach `open` open
/// (its id and the threshold it was opened under). An open breach closes against its own
/// threshold, so that two builds with different thresholds do not open and close it in turn.
pub(in crate::store) fn change(
    threshold: &LagThresholdDescriptor,
    measured: Measured,
    open: Option<(i64, i64)>,
) -> Option<Change> {
    let over = |limit: i64| measured.lag_ms.is_some_and(|lag| lag > limit);
    match open {
        None if over(i64::try_from(threshold.threshold_ms).unwrap_or(i64::MAX)) => {
            Some(Change::Open)
        }
        Some((id, opened_under)) if !over(opened_under) => Some(Change::Close(id)),
        _ => None,
    }
}

/// The `event_lag.breach` of breach `id` of `threshold`'s pair, opened at `breached_at`
/// (RFC 3339): caused by the event waiting longest, in no tenant (a breach is about a
/// consumer), keyed by the breach so that it is one event.
pub(in crate::store) fn breach_event(
    threshold: &LagThresholdDescriptor,
    id: i64,
    measured: Measured,
    breached_at: String,
) -> Lifecycle {
    let mut payload = Map::new();
    payload.insert("breach_id".into(), Value::from(id));
    payload.insert("producer_class".into(), threshold.producer_class.into());
    payload.insert("consumer_name".into(), threshold.consumer.into());
    payload.insert("threshold_ms".into(), Value::from(threshold.threshold_ms));
    payload.insert("lag_ms".into(), Value::from(measured.lag_ms.unwrap_or(0)));
    if let Some(event_id) = measured.oldest_event_id {
        payload.insert("oldest_event_id".into(), event_id.to_string().into());
    }
    payload.insert("breached_at".into(), breached_at.into());
    Lifecycle {
        payload,
        trace: None,
        causation_id: measured.oldest_event_id.map(|id| id.to_string()),
        tenant_scope: None,
        idempotency_key: Some(format!("evc.lag_breach:{id}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THRESHOLD: LagThresholdDescriptor = LagThresholdDescriptor {
        consumer: "audit",
        producer_class: "dot",
        threshold_ms: 60_000,
    };

    fn lag(ms: Option<i64>) -> Measured {
        Measured {
            lag_ms: ms,
            oldest_event_id: None,
        }
    }

    #[test]
    fn a_breach_opens_over_the_threshold_once_and_closes_at_or_under_it() {
        let open = Some((7, 60_000));
        assert_eq!(
            change(&THRESHOLD, lag(Some(60_001)), None),
            Some(Change::Open)
        );
        assert_eq!(change(&THRESHOLD, lag(Some(90_000)), open), None);
        assert_eq!(change(&THRESHOLD, lag(Some(60_000)), None), None);
        assert_eq!(
            change(&THRESHOLD, lag(Some(60_000)), open),
            Some(Change::Close(7))
        );
        assert_eq!(change(&THRESHOLD, lag(None), open), Some(Change::Close(7)));
        assert_eq!(change(&THRESHOLD, lag(None), None), None);
        // Opened under a build with a higher threshold: it closes against that one.
        let higher = Some((7, 120_000));
        assert_eq!(
            change(&THRESHOLD, lag(Some(90_000)), higher),
            Some(Change::Close(7))
        );
    }

    #[test]
    fn the_breach_event_names_the_pair_and_is_keyed_by_the_breach() {
        let waiting = Uuid::now_v7();
        let measured = Measured {
            lag_ms: Some(61_000),
            oldest_event_id: Some(waiting),
        };
        let event = breach_event(&THRESHOLD, 42, measured, "2026-12-06T03:00:00Z".into());
        assert_eq!(event.idempotency_key.as_deref(), Some("evc.lag_breach:42"));
        assert_eq!(event.causation_id, Some(waiting.to_string()));
        assert_eq!(event.payload["consumer_name"], "audit");
        assert_eq!(event.payload["producer_class"], "dot");
        assert_eq!(event.payload["lag_ms"], 61_000);
        assert_eq!(event.payload["threshold_ms"], 60_000);
        assert!(event.tenant_scope.is_none());
    }
}
