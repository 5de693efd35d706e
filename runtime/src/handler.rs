//! What consumer handlers receive and how they fail.

/// Classes of handler failure; they decide what the dispatcher does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// May succeed later: retried by the consumer's policy.
    Transient,
    /// Will never succeed: dead-lettered.
    Permanent,
    /// The event breaks the handler: dead-lettered.
    Poison,
    /// Outside the consumer's scope: quarantined.
    Scope,
    /// The payload does not fit the schema the handler expects: quarantined.
    Schema,
    /// Data integrity violated: quarantined.
    Integrity,
}

impl FailureClass {
    /// Every class, in declaration order.
    pub const ALL: [Self; 6] = [
        Self::Transient,
        Self::Permanent,
        Self::Poison,
        Self::Scope,
        Self::Schema,
        Self::Integrity,
    ];

    /// The class's name in the contract format (`transient`, `permanent`, ...), as retry
    /// policies' `retry_on` lists spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Permanent => "permanent",
            Self::Poison => "poison",
            Self::Scope => "scope",
            Self::Schema => "schema",
            Self::Integrity => "integrity",
        }
    }

    /// The class called `name` in the contract format.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|class| class.as_str() == name)
    }
}

/// A handler failure: a class and a stable error code, never a payload or a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{class:?} failure: {code}")]
pub struct HandlerError {
    /// What the dispatcher does next.
    pub class: FailureClass,
    /// A stable, payload-free code (`smtp_timeout`, `unit_not_found`).
    pub code: String,
}

impl HandlerError {
    /// A failure of `class` with `code`.
    pub fn new(class: FailureClass, code: impl Into<String>) -> Self {
        Self {
            class,
            code: code.into(),
        }
    }

    /// A transient failure.
    pub fn transient(code: impl Into<String>) -> Self {
        Self::new(FailureClass::Transient, code)
    }

    /// A permanent failure.
    pub fn permanent(code: impl Into<String>) -> Self {
        Self::new(FailureClass::Permanent, code)
    }
}

/// The delivery a handler is called for (the payload is passed typed, beside it).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delivery {
    /// The event's id.
    pub event_id: String,
    /// The event type.
    pub event_type: String,
    /// The contract version the event was produced with.
    pub version: String,
    /// The consumer it is delivered to.
    pub consumer: String,
    /// Attempt number, from 1.
    pub attempt: u32,
}

impl Delivery {
    /// A delivery description.
    pub fn new(
        event_id: impl Into<String>,
        event_type: impl Into<String>,
        version: impl Into<String>,
        consumer: impl Into<String>,
        attempt: u32,
    ) -> Self {
        Self {
            event_id: event_id.into(),
            event_type: event_type.into(),
            version: version.into(),
            consumer: consumer.into(),
            attempt,
        }
    }

    /// The major version of the event, parsed from [`Delivery::version`].
    pub fn major(&self) -> Option<u64> {
        self.version.split('.').next()?.parse().ok()
    }
}
