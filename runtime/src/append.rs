//! The append path shared by every store: envelope options, the checks an event passes before
//! it is written, and why an append is refused.
//!
//! Checks run in this order (docs/runtime.md, "Append path"): the size caps and the nesting
//! depth (measured without serializing the payload), registered event type, registered version,
//! the payload against the version's compiled JSON Schema (formats on), the payload policy
//! (deny-listed keys, credential-shaped keys, credential-shaped values), then the envelope
//! options' free-text fields (credential-shaped values).
//! The first failing check decides the [`Rejection`]. No check reports a payload value: errors
//! name the JSON pointer of the failing location and the rule, never what was there.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::policy::{
    CompiledPolicy, CredentialShape, Finding, PayloadPolicy, credential_shape, redact_pointer,
};
use crate::publish::{OutgoingEvent, PayloadError};
use crate::registry::{EventDescriptor, Registry};
use crate::tenant::ALL_TENANTS;

/// Envelope fields of an append that the producer function does not know: idempotency key,
/// tenant scope, correlation and causation ids, the aggregate key, and a delivery delay.
///
/// The event type, version, order key, trace context and payload come from the
/// [`OutgoingEvent`]; the producer class comes from the event type's descriptor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AppendOptions {
    /// A retried append with the same key (in the same producer class and tenant scope) is the
    /// same event: it returns the first append's event id and writes nothing.
    pub idempotency_key: Option<String>,
    /// The tenant the event belongs to.
    pub tenant_scope: Option<String>,
    /// The id that ties the event to a business conversation.
    pub correlation_id: Option<String>,
    /// The id of the event or command that caused this one.
    pub causation_id: Option<String>,
    /// The order key when the event type names no `order_key` fields (the aggregate the event
    /// belongs to). Without one, such an event is its own key and orders with nothing.
    pub aggregate_key: Option<String>,
    /// No claim takes the event's deliveries before this time (a scheduled delivery). Under
    /// per-key ordering a delayed event holds back the later events of its key until it is
    /// handled. A time in the past is the same as none.
    pub not_before: Option<std::time::SystemTime>,
}

impl AppendOptions {
    /// No options: no idempotency key, tenant, correlation, causation, aggregate or delay.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the idempotency key.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Sets the tenant scope.
    pub fn tenant_scope(mut self, tenant: impl Into<String>) -> Self {
        self.tenant_scope = Some(tenant.into());
        self
    }

    /// Sets the correlation id.
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.correlation_id = Some(id.into());
        self
    }

    /// Sets the causation id.
    pub fn causation_id(mut self, id: impl Into<String>) -> Self {
        self.causation_id = Some(id.into());
        self
    }

    /// Sets the aggregate key.
    pub fn aggregate_key(mut self, key: impl Into<String>) -> Self {
        self.aggregate_key = Some(key.into());
        self
    }

    /// Delays the event's deliveries: no claim takes them before `at`.
    pub fn not_before(mut self, at: std::time::SystemTime) -> Self {
        self.not_before = Some(at);
        self
    }

    /// [`Self::not_before`] in epoch seconds, as the store binds it.
    pub(crate) fn not_before_epoch(&self) -> Option<f64> {
        let at = self.not_before?;
        Some(match at.duration_since(std::time::UNIX_EPOCH) {
            Ok(after) => after.as_secs_f64(),
            Err(before) => -before.duration().as_secs_f64(),
        })
    }
}

/// One event of a batch append: the event and its envelope options.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// The event, as a producer function builds it.
    pub event: OutgoingEvent,
    /// Its envelope options.
    pub options: AppendOptions,
}

impl NewEvent {
    /// An event with its options.
    pub fn new(event: OutgoingEvent, options: AppendOptions) -> Self {
        Self { event, options }
    }
}

impl From<OutgoingEvent> for NewEvent {
    fn from(event: OutgoingEvent) -> Self {
        Self::new(event, AppendOptions::default())
    }
}

/// What an append returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AppendReceipt {
    /// The event's id (UUID v7), or the first append's id when the idempotency key repeated.
    pub event_id: uuid::Uuid,
    /// The event's place in the global append order.
    pub seq: i64,
    /// `false` when the idempotency key repeated and nothing was written.
    pub created: bool,
    /// Deliveries written (one per subscribed live or shadow consumer; 0 when not created).
    pub deliveries: u32,
}

/// Why an append was refused. Recorded as one `evc_validation_rejects` row (event type,
/// version, [`Rejection::reason_code`], the keyed payload digest) and never carrying a payload
/// value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// The event type is not in the registry.
    #[error("event type {event_type} is not registered")]
    UnregisteredType {
        /// Event type.
        event_type: String,
    },
    /// The event type is registered, the version is not.
    #[error("event type {event_type} has no registered version {version}")]
    UnregisteredVersion {
        /// Event type.
        event_type: String,
        /// Version.
        version: String,
    },
    /// The payload does not validate against the version's schema.
    #[error("payload of {event_type} {version} violates its schema: `{keyword}` at `{pointer}`")]
    SchemaViolation {
        /// Event type.
        event_type: String,
        /// Version.
        version: String,
        /// JSON pointer of the failing location in the payload (`""` for the root).
        pointer: String,
        /// The schema keyword that failed (`required`, `format`, `additionalProperties`).
        keyword: String,
    },
    /// The payload carries a deny-listed key.
    #[error("payload of {event_type} {version} has a deny-listed key at `{pointer}` (`{entry}`)")]
    ForbiddenKey {
        /// Event type.
        event_type: String,
        /// Version.
        version: String,
        /// JSON pointer of the key.
        pointer: String,
        /// The deny-list entry the key spells.
        entry: String,
    },
    /// The payload carries a credential-shaped key or value.
    #[error("payload of {event_type} {version} has a credential-shaped {what} at `{pointer}`")]
    CredentialShaped {
        /// Event type.
        event_type: String,
        /// Version.
        version: String,
        /// JSON pointer of the key or value.
        pointer: String,
        /// What looked like a credential.
        what: CredentialKind,
    },
    /// The payload is larger than its cap.
    #[error("payload of {event_type} {version} is {bytes} bytes, over its cap of {cap}")]
    Oversize {
        /// Event type.
        event_type: String,
        /// Version.
        version: String,
        /// Canonical JSON size of the payload.
        bytes: usize,
        /// The smaller of the event type's cap and the policy's hard cap (the hard cap alone
        /// when the event type is not registered).
        cap: u32,
    },
    /// An envelope field of the append's options (correlation id, idempotency key, ...) is
    /// shaped like a credential.
    #[error("envelope field `{field}` of {event_type} {version} is credential-shaped ({shape})")]
    CredentialInEnvelope {
        /// Event type.
        event_type: String,
        /// Version.
        version: String,
        /// The field (`correlation_id`, `causation_id`, `idempotency_key`, `tenant_scope`,
        /// `aggregate_key`).
        field: String,
        /// The credential's shape.
        shape: CredentialShape,
    },
    /// The payload nests arrays and objects deeper than [`MAX_PAYLOAD_DEPTH`].
    #[error(
        "payload of {event_type} {version} nests {depth} levels deep, over the limit of {limit}"
    )]
    TooDeep {
        /// Event type.
        event_type: String,
        /// Version.
        version: String,
        /// How many arrays and objects the deepest value is inside.
        depth: usize,
        /// [`MAX_PAYLOAD_DEPTH`].
        limit: usize,
    },
    /// The append's tenant scope is `*`, which names every tenant where a session sets its
    /// tenant (docs/runtime.md, "Tenants"), so no event may belong to it.
    #[error("{event_type} {version} has tenant scope `*`, which names every tenant")]
    ReservedTenantScope {
        /// Event type.
        event_type: String,
        /// Version.
        version: String,
    },
    /// The registry requires a tenant scope (`envelope.require_tenant_scope`) and the append's
    /// options carry none.
    #[error("{event_type} {version} has no tenant scope; the contracts require one")]
    MissingTenantScope {
        /// Event type.
        event_type: String,
        /// Version.
        version: String,
    },
}

/// What looked like a credential in a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialKind {
    /// A key containing a credential name of the policy (the name).
    Key(String),
    /// A string value of a credential shape.
    Value(CredentialShape),
}

impl std::fmt::Display for CredentialKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Key(name) => write!(f, "key (`{name}`)"),
            Self::Value(shape) => write!(f, "value ({shape})"),
        }
    }
}

impl Rejection {
    /// The stable code stored in `evc_validation_rejects.reason_code`.
    pub fn reason_code(&self) -> &'static str {
        match self {
            Self::UnregisteredType { .. } => "unregistered_type",
            Self::UnregisteredVersion { .. } => "unregistered_version",
            Self::SchemaViolation { .. } => "schema_violation",
            Self::ForbiddenKey { .. } => "forbidden_key",
            Self::CredentialShaped {
                what: CredentialKind::Key(_),
                ..
            } => "credential_key",
            Self::CredentialShaped {
                what: CredentialKind::Value(_),
                ..
            } => "credential_value",
            Self::Oversize { .. } => "oversize",
            Self::CredentialInEnvelope { .. } => "credential_envelope",
            Self::TooDeep { .. } => "too_deep",
            Self::MissingTenantScope { .. } => "missing_tenant_scope",
            Self::ReservedTenantScope { .. } => "reserved_tenant_scope",
        }
    }

    /// The event type of the refused event.
    pub fn event_type(&self) -> &str {
        match self {
            Self::UnregisteredType { event_type }
            | Self::UnregisteredVersion { event_type, .. }
            | Self::SchemaViolation { event_type, .. }
            | Self::ForbiddenKey { event_type, .. }
            | Self::CredentialShaped { event_type, .. }
            | Self::Oversize { event_type, .. }
            | Self::CredentialInEnvelope { event_type, .. }
            | Self::TooDeep { event_type, .. }
            | Self::MissingTenantScope { event_type, .. }
            | Self::ReservedTenantScope { event_type, .. } => event_type,
        }
    }
}

/// Why an append failed. Neither `Display` nor `Debug` ever shows a payload value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// The event was refused; a reject row was recorded and nothing else written.
    #[error("append refused: {0}")]
    Rejected(Rejection),
    /// An event of a batch was refused; the whole batch was refused, a reject row was recorded
    /// for every refused event and nothing else written.
    #[error("batch append refused: event {index} (of {rejected} refused): {rejection}")]
    BatchRejected {
        /// Index of the first refused event in the batch.
        index: usize,
        /// Why it was refused.
        rejection: Rejection,
        /// How many events of the batch were refused.
        rejected: usize,
    },
    /// The payload did not serialize (a producer function's error).
    #[error(transparent)]
    Payload(#[from] PayloadError),
    /// The idempotency key repeated, but the first event is not visible to this transaction
    /// (it was committed after a `REPEATABLE READ` snapshot began): retry the transaction.
    #[error(
        "idempotency key of producer class {producer_class} is taken by an event this transaction cannot see; retry the transaction"
    )]
    IdempotencyConflict {
        /// Producer class.
        producer_class: String,
    },
    /// A store handle that works for one tenant was given an event of another tenant, or of
    /// none (SQLite's [`crate::SqliteStore::scoped`]; PostgreSQL's row-level security refuses
    /// such a row with SQLSTATE 42501). Nothing was written.
    #[error(
        "append refused: this store works for tenant {scope} only; the event names another tenant or none"
    )]
    OutsideTenantScope {
        /// The tenant the store works for.
        scope: String,
    },
    /// The database failed.
    #[error("outbox database error: {0}")]
    Database(#[from] sqlx::Error),
}

impl AppendError {
    /// The rejection, when the append (or an event of the batch) was refused.
    pub fn rejection(&self) -> Option<&Rejection> {
        match self {
            Self::Rejected(rejection) | Self::BatchRejected { rejection, .. } => Some(rejection),
            _ => None,
        }
    }
}

/// A registered schema did not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the schema of {event_type} {version} does not compile: {message}")]
pub struct SchemaCompileError {
    /// Event type.
    pub event_type: &'static str,
    /// Version.
    pub version: &'static str,
    /// The validator's message (about the schema, never a payload).
    pub message: String,
}

/// An event that passed every check, ready to insert.
#[derive(Debug, Clone)]
pub(crate) struct CheckedEvent<'a> {
    pub(crate) descriptor: &'static EventDescriptor,
    /// The payload as canonical JSON (keys sorted, no whitespace).
    pub(crate) payload: String,
    /// The consumers the event fans out to.
    pub(crate) consumers: &'a [&'static str],
    /// Per consumer of `consumers`: whether it orders per key (its delivery then carries the
    /// event's order key; otherwise none).
    pub(crate) ordered: &'a [bool],
}

/// A refused event: why, and the keyed digest of its canonical payload (empty without a digest
/// key, or when the payload was refused for its size or depth and never serialized).
#[derive(Debug, Clone)]
pub(crate) struct Refused {
    pub(crate) rejection: Rejection,
    pub(crate) version: String,
    pub(crate) digest: String,
}

struct VersionEntry {
    validator: jsonschema::Validator,
    consumers: Vec<&'static str>,
    ordered: Vec<bool>,
}

struct EventEntry {
    descriptor: &'static EventDescriptor,
    versions: HashMap<&'static str, VersionEntry>,
}

/// The compiled registry: one validator per event version (compiled once), the fan-out of each
/// version and the payload policy. Store-independent.
pub struct Checker {
    registry: Registry,
    events: HashMap<&'static str, EventEntry>,
    policy: CompiledPolicy,
}

impl std::fmt::Debug for Checker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checker")
            .field("project", &self.registry.project)
            .field("digest", &self.registry.digest)
            .field("events", &self.events.len())
            .finish_non_exhaustive()
    }
}

impl Checker {
    /// Whether every append must name a tenant (`envelope.require_tenant_scope`); the database
    /// then filters the tenant's rows by row-level security (docs/runtime.md, "Tenants").
    pub fn requires_tenant_scope(&self) -> bool {
        self.registry.require_tenant_scope
    }

    /// Compiles every schema of `registry` (formats on) and the fan-out of every version.
    ///
    /// # Errors
    /// [`SchemaCompileError`] when a registered schema is not valid JSON or not a valid schema.
    pub fn new(registry: Registry, policy: &PayloadPolicy) -> Result<Self, SchemaCompileError> {
        let mut events = HashMap::with_capacity(registry.events.len());
        for descriptor in registry.events {
            let mut versions = HashMap::with_capacity(descriptor.versions.len());
            for version in descriptor.versions {
                let fail = |message: String| SchemaCompileError {
                    event_type: descriptor.name,
                    version: version.version,
                    message,
                };
                let schema: Value =
                    serde_json::from_str(version.schema).map_err(|e| fail(e.to_string()))?;
                let validator = jsonschema::draft202012::options()
                    .should_validate_formats(true)
                    .build(&schema)
                    .map_err(|e| fail(e.to_string()))?;
                let (consumers, ordered) = registry
                    .subscribers(descriptor.name, version.version)
                    .map(|consumer| (consumer.name, consumer.per_key_ordering))
                    .unzip();
                versions.insert(
                    version.version,
                    VersionEntry {
                        validator,
                        consumers,
                        ordered,
                    },
                );
            }
            events.insert(
                descriptor.name,
                EventEntry {
                    descriptor,
                    versions,
                },
            );
        }
        Ok(Self {
            registry,
            events,
            policy: policy.compile(),
        })
    }

    /// The registry the checker was built from.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The digest a reject row keeps: HMAC-SHA256 of the canonical payload under the policy's
    /// digest key, or none (empty) without a key. Never a bare hash: a reader of the reject
    /// table could reverse that for any payload with few possible values.
    fn payload_digest(&self, canonical: &str) -> String {
        static NO_KEY: std::sync::Once = std::sync::Once::new();
        match &self.policy.digest_key {
            Some(key) => key.digest_hex(canonical.as_bytes()),
            None => {
                NO_KEY.call_once(|| {
                    tracing::warn!(
                        "no payload digest key ({}): reject rows are recorded without a digest",
                        crate::policy::DigestKey::ENV
                    );
                });
                String::new()
            }
        }
    }

    /// Checks one event and its envelope options in the documented order.
    pub(crate) fn check(
        &self,
        event: &OutgoingEvent,
        options: &AppendOptions,
    ) -> Result<CheckedEvent<'_>, Box<Refused>> {
        let event_type = || event.event_type.to_owned();
        let version = || event.version.to_owned();
        let refuse = |rejection: Rejection, digest: String| {
            Box::new(Refused {
                rejection,
                version: event.version.to_owned(),
                digest,
            })
        };

        // Size and depth come first, measured without serializing and without recursion:
        // nothing else spends work or stack on a payload that is too big or too deep, and such
        // a payload gets no digest (that would mean serializing it).
        let entry = self.events.get(event.event_type);
        let hard_cap = self.policy.hard_max_bytes;
        let cap = entry.map_or(hard_cap, |entry| {
            entry.descriptor.max_payload_bytes.min(hard_cap)
        });
        let measured = measure(&event.payload);
        if measured.bytes > cap as usize {
            return Err(refuse(
                Rejection::Oversize {
                    event_type: event_type(),
                    version: version(),
                    bytes: measured.bytes,
                    cap,
                },
                String::new(),
            ));
        }
        if measured.depth > MAX_PAYLOAD_DEPTH {
            return Err(refuse(
                Rejection::TooDeep {
                    event_type: event_type(),
                    version: version(),
                    depth: measured.depth,
                    limit: MAX_PAYLOAD_DEPTH,
                },
                String::new(),
            ));
        }

        let payload = canonical_json(&event.payload);
        let refuse = |rejection: Rejection| refuse(rejection, self.payload_digest(&payload));
        let Some(entry) = entry else {
            return Err(refuse(Rejection::UnregisteredType {
                event_type: event_type(),
            }));
        };
        let Some(version_entry) = entry.versions.get(event.version) else {
            return Err(refuse(Rejection::UnregisteredVersion {
                event_type: event_type(),
                version: version(),
            }));
        };
        if let Err(error) = version_entry.validator.validate(&event.payload) {
            return Err(refuse(Rejection::SchemaViolation {
                event_type: event_type(),
                version: version(),
                // A credential used as an object key must not reach the error through the path.
                pointer: redact_pointer(error.instance_path().as_str()),
                keyword: error.kind().keyword().to_owned(),
            }));
        }
        if let Some(finding) = self.policy.scan(&event.payload) {
            return Err(refuse(match finding {
                Finding::DeniedKey { pointer, entry } => Rejection::ForbiddenKey {
                    event_type: event_type(),
                    version: version(),
                    pointer,
                    entry,
                },
                Finding::CredentialKey { pointer, name } => Rejection::CredentialShaped {
                    event_type: event_type(),
                    version: version(),
                    pointer,
                    what: CredentialKind::Key(name),
                },
                Finding::CredentialValue { pointer, shape } => Rejection::CredentialShaped {
                    event_type: event_type(),
                    version: version(),
                    pointer,
                    what: CredentialKind::Value(shape),
                },
            }));
        }
        // The envelope's free-text fields are stored beside the payload: a token used as a
        // correlation id leaks as surely as one in the payload.
        let envelope = [
            ("idempotency_key", &options.idempotency_key),
            ("tenant_scope", &options.tenant_scope),
            ("correlation_id", &options.correlation_id),
            ("causation_id", &options.causation_id),
            ("aggregate_key", &options.aggregate_key),
        ];
        for (field, value) in envelope {
            if let Some(shape) = value.as_deref().and_then(credential_shape) {
                return Err(refuse(Rejection::CredentialInEnvelope {
                    event_type: event_type(),
                    version: version(),
                    field: field.to_owned(),
                    shape,
                }));
            }
        }
        if options.tenant_scope.as_deref() == Some(ALL_TENANTS) {
            return Err(refuse(Rejection::ReservedTenantScope {
                event_type: event_type(),
                version: version(),
            }));
        }
        if self.registry.require_tenant_scope
            && options.tenant_scope.as_deref().is_none_or(str::is_empty)
        {
            return Err(refuse(Rejection::MissingTenantScope {
                event_type: event_type(),
                version: version(),
            }));
        }
        Ok(CheckedEvent {
            descriptor: entry.descriptor,
            payload,
            consumers: &version_entry.consumers,
            ordered: &version_entry.ordered,
        })
    }
}

/// The deepest nesting of arrays and objects a payload may have: what `serde_json` parses by
/// default (its recursion limit is 128), so every consumer that reads a stored payload with it,
/// the dispatcher included, can read it. It also bounds the recursion of every later check.
pub const MAX_PAYLOAD_DEPTH: usize = 127;

/// A payload's canonical JSON size and nesting depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Measured {
    bytes: usize,
    depth: usize,
}

/// The length of `canonical_json(value)` and the depth of `value`, without serializing it and
/// without recursion (a deep payload must not exhaust the stack before it is refused).
fn measure(value: &Value) -> Measured {
    enum Open<'a> {
        Array(std::slice::Iter<'a, Value>),
        Object(serde_json::map::Iter<'a>),
    }
    let mut bytes = 0_usize;
    let mut depth = 0;
    // Open arrays and objects, each with whether a member has been written (for commas).
    let mut open: Vec<(Open<'_>, bool)> = Vec::new();
    let mut next = Some(value);
    loop {
        match next.take() {
            Some(Value::Null) => bytes += 4,
            Some(Value::Bool(flag)) => bytes += if *flag { 4 } else { 5 },
            Some(Value::Number(number)) => bytes += display_len(number),
            Some(Value::String(text)) => bytes += quoted_len(text),
            Some(Value::Array(items)) => {
                bytes += 2;
                open.push((Open::Array(items.iter()), false));
                depth = depth.max(open.len());
            }
            Some(Value::Object(map)) => {
                bytes += 2;
                open.push((Open::Object(map.iter()), false));
                depth = depth.max(open.len());
            }
            None => {}
        }
        let Some((container, started)) = open.last_mut() else {
            break;
        };
        let member = match container {
            Open::Array(items) => items.next(),
            Open::Object(entries) => entries.next().map(|(key, child)| {
                bytes += quoted_len(key) + 1;
                child
            }),
        };
        match member {
            Some(child) => {
                if *started {
                    bytes += 1;
                }
                *started = true;
                next = Some(child);
            }
            None => {
                open.pop();
            }
        }
    }
    Measured { bytes, depth }
}

/// The length of `value`'s `Display` output, counted without allocating.
fn display_len(value: &impl std::fmt::Display) -> usize {
    struct Count(usize);
    impl std::fmt::Write for Count {
        fn write_str(&mut self, text: &str) -> std::fmt::Result {
            self.0 += text.len();
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = write!(count, "{value}");
    count.0
}

/// The length of `text` as a JSON string as `serde_json` writes it: quotes, `\"`, `\\` and
/// the short escapes of `\b`, `\f`, `\n`, `\r`, `\t` take two bytes, other control characters
/// six (`\u001f`), everything else its UTF-8 length.
fn quoted_len(text: &str) -> usize {
    2 + text
        .chars()
        .map(|c| match c {
            '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
            c if c < ' ' => 6,
            c => c.len_utf8(),
        })
        .sum::<usize>()
}

/// The order key of an event: the payload's order-key fields, else the aggregate key of the
/// options, else the event id (an event that orders with nothing).
pub(crate) fn order_key(event: &OutgoingEvent, options: &AppendOptions, id: uuid::Uuid) -> String {
    event
        .order_key
        .clone()
        .or_else(|| options.aggregate_key.clone())
        .unwrap_or_else(|| id.to_string())
}

/// Canonical JSON: object keys sorted (by their UTF-8 bytes), no whitespace; the same form the
/// registry digests use.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::with_capacity(128);
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (index, (key, child)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_canonical(child, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, child) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(child, out);
            }
            out.push(']');
        }
        Value::String(text) => write_string(text, out),
        Value::Null => out.push_str("null"),
        Value::Bool(flag) => out.push_str(if *flag { "true" } else { "false" }),
        Value::Number(number) => {
            let _ = write!(out, "{number}");
        }
    }
}

fn write_string(text: &str, out: &mut String) {
    // serde_json's escaping of a string is infallible.
    match serde_json::to_string(text) {
        Ok(quoted) => out.push_str(&quoted),
        Err(_) => out.push_str("\"\""),
    }
}

/// SHA-256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for byte in digest {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::DigestKey;
    use crate::registry::{
        DispatcherDescriptor, EventDescriptor, PayloadPolicyDescriptor, VersionDescriptor,
    };
    use crate::trace::TraceContext;
    use serde_json::json;

    const JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.\
                       dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
    const DIGEST: &str = "0000000000000000000000000000000000000000000000000000000000000001";

    /// `t.map` 1.0.0: an object of integers, any keys; cap 256 bytes. `t.open` 1.0.0: any
    /// object; cap 65,536 bytes.
    static REGISTRY: Registry = Registry {
        project: "append_unit",
        digest: DIGEST,
        events: &[
            EventDescriptor {
                name: "t.map",
                description: "A map.",
                producer_class: "maps",
                order_key: &[],
                deprecated: false,
                max_payload_bytes: 256,
                versions: &[VersionDescriptor {
                    version: "1.0.0",
                    major: 1,
                    schema: r#"{"additionalProperties":{"type":"integer"},"type":"object"}"#,
                    schema_digest: DIGEST,
                }],
            },
            EventDescriptor {
                name: "t.open",
                description: "Anything.",
                producer_class: "open",
                order_key: &[],
                deprecated: false,
                max_payload_bytes: 65_536,
                versions: &[VersionDescriptor {
                    version: "1.0.0",
                    major: 1,
                    schema: r#"{"type":"object"}"#,
                    schema_digest: DIGEST,
                }],
            },
        ],
        consumers: &[],
        retry_policies: &[],
        executor_classes: &[],
        schedules: &[],
        lag_thresholds: &[],
        cutover_gates: &[],
        inventory_rules: &[],
        evidence_recording: None,
        retention: crate::registry::RetentionDescriptor::KEEP,
        payload_policy: PayloadPolicyDescriptor {
            denied_keys: &[],
            credential_key_names: &[],
            default_max_bytes: 4096,
            hard_max_bytes: 65_536,
        },
        require_tenant_scope: false,
        dispatcher: DispatcherDescriptor::FORMAT_DEFAULTS,
    };

    fn checker(policy: &PayloadPolicy) -> Checker {
        Checker::new(REGISTRY, policy).expect("the schema compiles")
    }

    fn event_of(event_type: &'static str, version: &'static str, payload: Value) -> OutgoingEvent {
        let trace = TraceContext::new("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)
            .expect("valid trace");
        OutgoingEvent {
            event_type,
            version,
            order_key: None,
            trace,
            payload,
        }
    }

    impl Checker {
        fn check_event(&self, event: &OutgoingEvent) -> Result<CheckedEvent<'_>, Box<Refused>> {
            self.check(event, &AppendOptions::new())
        }
    }

    fn refusal(checker: &Checker, payload: Value) -> Box<Refused> {
        checker
            .check_event(&event_of("t.map", "1.0.0", payload))
            .expect_err("the payload is refused")
    }

    /// `{"a": [[...[1]...]]}`, the array `depth` levels deep (built by hand: `json!` would
    /// serialize it, recursively).
    fn nested(depth: usize) -> Value {
        let mut value = json!(1);
        for _ in 0..depth {
            value = Value::Array(vec![value]);
        }
        Value::Object([("a".to_owned(), value)].into_iter().collect())
    }

    #[test]
    fn size_is_checked_before_the_schema_and_the_scan() {
        let checker = checker(&PayloadPolicy::reference());
        // Over the cap of 256 bytes, and a schema violation (a string, not an integer).
        let refused = refusal(&checker, json!({"a": "x".repeat(300)}));
        assert_eq!(
            refused.rejection.reason_code(),
            "oversize",
            "{:?}",
            refused.rejection
        );
        // Over the cap, and a credential.
        let refused = refusal(&checker, json!({"a": format!("{JWT} {}", "x".repeat(300))}));
        assert_eq!(
            refused.rejection.reason_code(),
            "oversize",
            "{:?}",
            refused.rejection
        );
    }

    #[test]
    fn size_is_checked_before_the_registry() {
        let checker = checker(&PayloadPolicy::reference());
        // An unregistered version and an unregistered type are measured against their type's
        // cap and the hard cap (65,536 bytes).
        let big = json!({"a": "x".repeat(300)});
        let refused = checker
            .check_event(&event_of("t.map", "9.9.9", big))
            .expect_err("refused");
        assert_eq!(refused.rejection.reason_code(), "oversize");
        let huge = json!({"a": "x".repeat(70_000)});
        let refused = checker
            .check_event(&event_of("t.nope", "1.0.0", huge))
            .expect_err("refused");
        assert!(
            matches!(refused.rejection, Rejection::Oversize { cap: 65_536, .. }),
            "{:?}",
            refused.rejection
        );
    }

    #[test]
    fn a_deeply_nested_payload_is_refused_without_recursion() {
        let checker = checker(&PayloadPolicy::reference());
        // Over the cap: refused for its size. Serializing or validating it first would overflow
        // the stack; so would dropping either payload (the second one where serde_json is built
        // unoptimised, as in tests), hence the `forget`s.
        let event = event_of("t.map", "1.0.0", nested(200_000));
        let refused = checker.check_event(&event).expect_err("refused");
        std::mem::forget(event);
        assert_eq!(refused.rejection.reason_code(), "oversize");
        assert_eq!(
            refused.digest, "",
            "no digest: the payload was not serialized"
        );
        // Under the hard cap (40 KB) but 20,000 levels deep.
        let event = event_of("t.open", "1.0.0", nested(20_000));
        let refused = checker.check_event(&event).expect_err("refused");
        std::mem::forget(event);
        assert!(
            matches!(
                refused.rejection,
                Rejection::TooDeep {
                    depth: 20_001,
                    limit: MAX_PAYLOAD_DEPTH,
                    ..
                }
            ),
            "{:?}",
            refused.rejection
        );
        assert_eq!(refused.rejection.reason_code(), "too_deep");
        assert_eq!(refused.digest, "");
    }

    #[test]
    fn the_depth_limit_is_what_serde_json_reads_back() {
        let checker = checker(&PayloadPolicy::reference());
        // `nested(n)` is n + 1 levels deep.
        let deepest = nested(MAX_PAYLOAD_DEPTH - 1);
        let stored = canonical_json(&deepest);
        assert!(serde_json::from_str::<Value>(&stored).is_ok());
        assert!(
            checker
                .check_event(&event_of("t.open", "1.0.0", deepest))
                .is_ok()
        );
        let deeper = nested(MAX_PAYLOAD_DEPTH);
        assert!(serde_json::from_str::<Value>(&canonical_json(&deeper)).is_err());
        let refused = checker
            .check_event(&event_of("t.open", "1.0.0", deeper))
            .expect_err("refused");
        assert_eq!(refused.rejection.reason_code(), "too_deep");
    }

    #[test]
    fn the_measured_size_is_the_canonical_size() {
        let values = [
            json!(null),
            json!(true),
            json!(false),
            json!(-12),
            json!(1.5e300),
            json!(0.1),
            json!(u64::MAX),
            json!(""),
            json!("a\"b\\c\n\r\t\u{8}\u{c}\u{1}\u{1f}\u{7f} é 😀 /"),
            json!([]),
            json!({}),
            json!([[], {}, [1, [2, [3]]]]),
            json!({"b": [1, {"z": null, "a": "x\"y"}], "a": true, "\u{1}k": {"": ""}}),
        ];
        for value in values {
            let measured = measure(&value);
            assert_eq!(measured.bytes, canonical_json(&value).len(), "{value}");
        }
        assert_eq!(measure(&json!(1)).depth, 0);
        assert_eq!(measure(&json!({"a": [1]})).depth, 2);
    }

    #[test]
    fn a_refused_payload_keeps_its_keyed_digest_or_none() {
        let payload = json!({"pin": "1234"});
        let canonical = canonical_json(&payload);
        let key = DigestKey::new([7_u8; 32]).expect("long enough");
        let keyed = checker(&PayloadPolicy::reference().with_digest_key(key.clone()));
        let refused = keyed
            .check_event(&event_of("t.map", "9.9.9", payload.clone()))
            .expect_err("unregistered version");
        assert_eq!(refused.digest, key.digest_hex(canonical.as_bytes()));
        assert_ne!(refused.digest, sha256_hex(canonical.as_bytes()));
        assert_eq!(refused.digest.len(), 64);
        let unkeyed = checker(&PayloadPolicy::reference());
        let refused = unkeyed
            .check_event(&event_of("t.map", "9.9.9", payload))
            .expect_err("unregistered version");
        assert_eq!(refused.digest, "");
    }

    #[test]
    fn a_schema_violation_under_a_credential_key_does_not_show_the_key() {
        let checker = checker(&PayloadPolicy::reference());
        let refused = refusal(&checker, json!({ JWT: "not an integer" }));
        let rejection = &refused.rejection;
        assert_eq!(rejection.reason_code(), "schema_violation");
        assert!(
            matches!(rejection, Rejection::SchemaViolation { pointer, .. } if pointer == "/*"),
            "{rejection:?}"
        );
        for text in [rejection.to_string(), format!("{rejection:?}")] {
            assert!(!text.contains("dozjgNryP4J3jVmNHl0w5N"), "{text}");
        }
    }

    #[test]
    fn canonical_json_sorts_keys_and_drops_whitespace() {
        let value = json!({"b": [1, {"z": null, "a": "x\"y"}], "a": true});
        assert_eq!(
            canonical_json(&value),
            r#"{"a":true,"b":[1,{"a":"x\"y","z":null}]}"#
        );
    }

    #[test]
    fn digests_are_lower_case_hex() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn rejections_name_their_reason_codes() {
        let rejection = Rejection::CredentialShaped {
            event_type: "a.b".into(),
            version: "1.0.0".into(),
            pointer: "/x".into(),
            what: CredentialKind::Value(CredentialShape::Jwt),
        };
        assert_eq!(rejection.reason_code(), "credential_value");
        assert_eq!(
            rejection.to_string(),
            "payload of a.b 1.0.0 has a credential-shaped value (jwt) at `/x`"
        );
    }
}
