//! W3C trace context carried by every event.

/// A W3C trace context: the ids that tie an event to the trace that produced it.
///
/// `traceparent` is derived from the parts; it is never stored in place of them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TraceContext {
    trace_id: String,
    parent_span_id: String,
    trace_flags: u8,
}

/// Why a trace context was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceContextError {
    /// The trace id is not 32 lower-case hex digits, or is all zeros.
    #[error("trace_id must be 32 lower-case hex digits, not all zero")]
    TraceId,
    /// The parent span id is not 16 lower-case hex digits, or is all zeros.
    #[error("parent_span_id must be 16 lower-case hex digits, not all zero")]
    ParentSpanId,
    /// A `traceparent` header is malformed.
    #[error("traceparent must be `00-<trace_id>-<parent_span_id>-<flags>`")]
    Traceparent,
}

/// Checks a W3C trace id: 32 lower-case hex digits, not all zero.
///
/// # Errors
/// [`TraceContextError::TraceId`] otherwise (upper-case digits included: W3C trace context
/// writes ids in lower case).
pub fn check_trace_id(trace_id: &str) -> Result<(), TraceContextError> {
    if is_id(trace_id, 32) {
        Ok(())
    } else {
        Err(TraceContextError::TraceId)
    }
}

fn is_id(text: &str, len: usize) -> bool {
    text.len() == len
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && text.bytes().any(|b| b != b'0')
}

/// 16 random lower-case hex digits, never all zeros (a v4 UUID's random bits).
fn random_span_id() -> String {
    loop {
        let text = uuid::Uuid::new_v4().simple().to_string();
        let span = &text[16..];
        if is_id(span, 16) {
            return span.to_owned();
        }
    }
}

impl TraceContext {
    /// Builds a trace context from its parts.
    ///
    /// # Errors
    /// When an id is not lower-case hex of the right length, or is all zeros.
    pub fn new(
        trace_id: impl Into<String>,
        parent_span_id: impl Into<String>,
        trace_flags: u8,
    ) -> Result<Self, TraceContextError> {
        let trace_id = trace_id.into();
        let parent_span_id = parent_span_id.into();
        check_trace_id(&trace_id)?;
        if !is_id(&parent_span_id, 16) {
            return Err(TraceContextError::ParentSpanId);
        }
        Ok(Self {
            trace_id,
            parent_span_id,
            trace_flags,
        })
    }

    /// Parses a version-00 `traceparent` header.
    ///
    /// # Errors
    /// When the header is malformed or its ids are invalid.
    pub fn from_traceparent(header: &str) -> Result<Self, TraceContextError> {
        let parts: Vec<&str> = header.split('-').collect();
        let [version, trace_id, parent_span_id, flags] = parts.as_slice() else {
            return Err(TraceContextError::Traceparent);
        };
        if *version != "00" || flags.len() != 2 {
            return Err(TraceContextError::Traceparent);
        }
        let flags = u8::from_str_radix(flags, 16).map_err(|_| TraceContextError::Traceparent)?;
        Self::new(*trace_id, *parent_span_id, flags)
    }

    /// The 32-hex-digit trace id.
    pub fn trace_id(&self) -> &str {
        &self.trace_id
    }

    /// The 16-hex-digit id of the span that produced the event.
    pub fn parent_span_id(&self) -> &str {
        &self.parent_span_id
    }

    /// The trace flags (bit 0: sampled).
    pub fn trace_flags(&self) -> u8 {
        self.trace_flags
    }

    /// A new trace: a random trace id and span id, sampled. For work that no incoming event or
    /// request started.
    pub fn fresh() -> Self {
        let trace_id = uuid::Uuid::new_v4().simple().to_string();
        Self {
            trace_id,
            parent_span_id: random_span_id(),
            trace_flags: 1,
        }
    }

    /// The context of a span this one starts: the same trace and flags, a new random span id.
    /// A handler's follow-up events carry the child of the delivery's trace, so the trace
    /// continues through them.
    pub fn child(&self) -> Self {
        Self {
            trace_id: self.trace_id.clone(),
            parent_span_id: random_span_id(),
            trace_flags: self.trace_flags,
        }
    }

    /// The `traceparent` header for this context.
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            self.trace_id, self.parent_span_id, self.trace_flags
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = TraceContext::from_traceparent(header).expect("valid");
        assert_eq!(context.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(context.trace_flags(), 1);
        assert_eq!(context.traceparent(), header);
    }

    #[test]
    fn a_child_continues_the_trace_in_a_new_span() {
        let parent = TraceContext::fresh();
        assert!(TraceContext::new(parent.trace_id(), parent.parent_span_id(), 1).is_ok());
        let child = parent.child();
        assert_eq!(child.trace_id(), parent.trace_id());
        assert_eq!(child.trace_flags(), parent.trace_flags());
        assert_ne!(child.parent_span_id(), parent.parent_span_id());
        assert!(TraceContext::new(child.trace_id(), child.parent_span_id(), 1).is_ok());
        assert_ne!(TraceContext::fresh().trace_id(), parent.trace_id());
    }

    #[test]
    fn trace_ids_are_checked_alone() {
        assert_eq!(check_trace_id("4bf92f3577b34da6a3ce929d0e0e4736"), Ok(()));
        for bad in [
            "",
            "4BF92F3577B34DA6A3CE929D0E0E4736",
            "4bf92f3577b34da6a3ce929d0e0e473",
            "4bf92f3577b34da6a3ce929d0e0e47360",
            "4bf92f3577b34da6a3ce929d0e0e473g",
            "00000000000000000000000000000000",
        ] {
            assert_eq!(
                check_trace_id(bad),
                Err(TraceContextError::TraceId),
                "{bad}"
            );
        }
    }

    #[test]
    fn malformed_ids_are_refused() {
        let zero = "0".repeat(32);
        assert_eq!(
            TraceContext::new(zero, "00f067aa0ba902b7", 1),
            Err(TraceContextError::TraceId)
        );
        assert_eq!(
            TraceContext::new("4BF92F3577B34DA6A3CE929D0E0E4736", "00f067aa0ba902b7", 1),
            Err(TraceContextError::TraceId)
        );
        assert_eq!(
            TraceContext::new("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa", 1),
            Err(TraceContextError::ParentSpanId)
        );
        assert_eq!(
            TraceContext::from_traceparent(
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            ),
            Err(TraceContextError::Traceparent)
        );
    }
}
