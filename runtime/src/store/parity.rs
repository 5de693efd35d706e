//! Start-up registry parity: the database's registry mirror against the static registry.
//!
//! The registry migrations (`NNNN_evc_registry_*.sql`) upsert one row per event type, event
//! version, consumer, subscription and retry policy, and store the registry digest in
//! `evc_registry_state`. A store compares those rows with the [`Registry`] it was compiled with
//! and refuses to start on any difference:
//!
//! - the registry digest;
//! - every compiled object must have its row, with the same values (schema digest, producer
//!   class, consumer mode, subscription requirement, ...);
//! - a row tagged with the compiled registry's digest that the compiled registry lacks is
//!   unexpected. Rows tagged with an older digest are retired objects and are ignored.

use std::collections::BTreeMap;
use std::fmt;

use crate::registry::{ConsumerMode, HandlerKind, Registry};

/// An object of the registry, named in a [`Drift`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum RegistryObject {
    /// An event type.
    EventType(String),
    /// A version of an event type.
    EventVersion(String, String),
    /// A consumer.
    Consumer(String),
    /// A consumer's subscription to an event type.
    Subscription(String, String),
    /// A retry policy.
    RetryPolicy(String),
}

impl fmt::Display for RegistryObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EventType(name) => write!(f, "event type {name}"),
            Self::EventVersion(name, version) => write!(f, "event version {name} {version}"),
            Self::Consumer(name) => write!(f, "consumer {name}"),
            Self::Subscription(consumer, event) => {
                write!(f, "subscription of {consumer} to {event}")
            }
            Self::RetryPolicy(name) => write!(f, "retry policy {name}"),
        }
    }
}

/// One difference between the database's registry and the compiled one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    /// The registry digests differ (`None`: the database has no registry state).
    Digest {
        /// The database's digest.
        database: Option<String>,
        /// The compiled registry's digest.
        compiled: String,
    },
    /// A compiled object has no row.
    Missing(RegistryObject),
    /// A row of the compiled registry's digest names an object the compiled registry lacks.
    Unexpected(RegistryObject),
    /// A row's value differs from the compiled one.
    Field {
        /// The object.
        object: RegistryObject,
        /// The field (`schema digest`, `mode`, ...).
        field: &'static str,
        /// The value in the database.
        database: String,
        /// The compiled value.
        compiled: String,
    },
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Digest {
                database: None,
                compiled,
            } => write!(
                f,
                "registry state missing from database (compiled registry {compiled})"
            ),
            Self::Digest {
                database: Some(database),
                compiled,
            } => write!(
                f,
                "registry digest in database {database}, compiled {compiled}"
            ),
            Self::Missing(object) => write!(f, "{object} missing from database"),
            Self::Unexpected(object) => {
                write!(f, "{object} in database for this registry but not compiled")
            }
            Self::Field {
                object,
                field,
                database,
                compiled,
            } => write!(
                f,
                "{object}: {field} in database {database}, compiled {compiled}"
            ),
        }
    }
}

/// The database's registry differs from the compiled registry: the store refuses to start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "database registry differs from the compiled registry ({} difference(s)): {}; apply the generated migrations (`generated/migrations`) or rebuild against the database's contracts",
    differences.len(),
    differences.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
)]
pub struct RegistryDrift {
    /// Every difference found, in a fixed order.
    pub differences: Vec<Drift>,
}

/// The registry mirror rows a store read.
#[derive(Debug, Clone, Default)]
pub(crate) struct Mirror {
    pub(crate) digest: Option<String>,
    pub(crate) event_types: Vec<EventTypeRow>,
    pub(crate) versions: Vec<EventVersionRow>,
    pub(crate) consumers: Vec<ConsumerRow>,
    pub(crate) subscriptions: Vec<SubscriptionRow>,
    pub(crate) retry_policies: Vec<RetryPolicyRow>,
}

#[derive(Debug, Clone)]
pub(crate) struct EventTypeRow {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) producer_class: String,
    pub(crate) order_key: Vec<String>,
    pub(crate) status: String,
    pub(crate) max_payload_bytes: i64,
    pub(crate) registry_digest: String,
}

#[derive(Debug, Clone)]
pub(crate) struct EventVersionRow {
    pub(crate) event_type: String,
    pub(crate) version: String,
    pub(crate) major: i64,
    pub(crate) schema_digest: String,
    pub(crate) registry_digest: String,
}

#[derive(Debug, Clone)]
pub(crate) struct ConsumerRow {
    pub(crate) name: String,
    pub(crate) retry_policy: String,
    pub(crate) handler: String,
    pub(crate) ordering: String,
    pub(crate) mode: String,
    pub(crate) heartbeat_threshold_ms: i64,
    pub(crate) registry_digest: String,
}

#[derive(Debug, Clone)]
pub(crate) struct SubscriptionRow {
    pub(crate) consumer: String,
    pub(crate) event_type: String,
    pub(crate) requirement: String,
    pub(crate) registry_digest: String,
}

#[derive(Debug, Clone)]
pub(crate) struct RetryPolicyRow {
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) base_delay_ms: i64,
    pub(crate) max_delay_ms: Option<i64>,
    pub(crate) max_attempts: i64,
    pub(crate) jitter: String,
    pub(crate) retry_on: Vec<String>,
    pub(crate) registry_digest: String,
}

/// Collects differences of one object's fields.
struct Fields<'a> {
    object: RegistryObject,
    out: &'a mut Vec<Drift>,
}

impl Fields<'_> {
    fn compare(&mut self, field: &'static str, database: impl ToString, compiled: impl ToString) {
        let (database, compiled) = (database.to_string(), compiled.to_string());
        if database != compiled {
            self.out.push(Drift::Field {
                object: self.object.clone(),
                field,
                database,
                compiled,
            });
        }
    }
}

fn list(items: &[impl AsRef<str>]) -> String {
    let items: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("[{}]", items.join(", "))
}

pub(crate) fn handler_name(kind: HandlerKind) -> &'static str {
    match kind {
        HandlerKind::Transactional => "transactional",
        HandlerKind::Leased => "leased",
    }
}

/// Every difference between `mirror` and `registry`, in a fixed order (digest, event types,
/// versions, retry policies, consumers, subscriptions).
pub(crate) fn compare(registry: &Registry, mirror: &Mirror) -> Vec<Drift> {
    let mut out = Vec::new();
    let current = registry.digest;
    if mirror.digest.as_deref() != Some(current) {
        out.push(Drift::Digest {
            database: mirror.digest.clone(),
            compiled: current.to_owned(),
        });
    }

    // Event types and versions.
    let types: BTreeMap<&str, &EventTypeRow> = mirror
        .event_types
        .iter()
        .map(|row| (row.name.as_str(), row))
        .collect();
    let versions: BTreeMap<(&str, &str), &EventVersionRow> = mirror
        .versions
        .iter()
        .map(|row| ((row.event_type.as_str(), row.version.as_str()), row))
        .collect();
    for event in registry.events {
        let object = RegistryObject::EventType(event.name.to_owned());
        match types.get(event.name) {
            None => out.push(Drift::Missing(object)),
            Some(row) => {
                let mut fields = Fields {
                    object,
                    out: &mut out,
                };
                fields.compare("description", &row.description, event.description);
                fields.compare("producer class", &row.producer_class, event.producer_class);
                fields.compare("order key", list(&row.order_key), list(event.order_key));
                fields.compare("deprecated", row.status == "deprecated", event.deprecated);
                fields.compare(
                    "max payload bytes",
                    row.max_payload_bytes,
                    event.max_payload_bytes,
                );
            }
        }
        for version in event.versions {
            let object =
                RegistryObject::EventVersion(event.name.to_owned(), version.version.to_owned());
            match versions.get(&(event.name, version.version)) {
                None => out.push(Drift::Missing(object)),
                Some(row) => {
                    let mut fields = Fields {
                        object,
                        out: &mut out,
                    };
                    fields.compare("schema digest", &row.schema_digest, version.schema_digest);
                    fields.compare("major", row.major, version.major);
                }
            }
        }
    }
    for row in &mirror.event_types {
        if row.registry_digest == current && registry.event(&row.name).is_none() {
            out.push(Drift::Unexpected(RegistryObject::EventType(
                row.name.clone(),
            )));
        }
    }
    for row in &mirror.versions {
        if row.registry_digest == current
            && registry.version(&row.event_type, &row.version).is_none()
        {
            out.push(Drift::Unexpected(RegistryObject::EventVersion(
                row.event_type.clone(),
                row.version.clone(),
            )));
        }
    }

    // Retry policies.
    let policies: BTreeMap<&str, &RetryPolicyRow> = mirror
        .retry_policies
        .iter()
        .map(|row| (row.name.as_str(), row))
        .collect();
    for policy in registry.retry_policies {
        let object = RegistryObject::RetryPolicy(policy.name.to_owned());
        match policies.get(policy.name) {
            None => out.push(Drift::Missing(object)),
            Some(row) => {
                let mut fields = Fields {
                    object,
                    out: &mut out,
                };
                fields.compare("kind", &row.kind, policy.kind);
                fields.compare("base delay ms", row.base_delay_ms, policy.base_delay_ms);
                fields.compare(
                    "max delay ms",
                    format!("{:?}", row.max_delay_ms),
                    format!("{:?}", policy.max_delay_ms),
                );
                fields.compare("max attempts", row.max_attempts, policy.max_attempts);
                fields.compare("jitter", &row.jitter, policy.jitter);
                fields.compare("retry on", list(&row.retry_on), list(policy.retry_on));
            }
        }
    }
    for row in &mirror.retry_policies {
        if row.registry_digest == current
            && !registry.retry_policies.iter().any(|p| p.name == row.name)
        {
            out.push(Drift::Unexpected(RegistryObject::RetryPolicy(
                row.name.clone(),
            )));
        }
    }

    // Consumers and subscriptions.
    let consumers: BTreeMap<&str, &ConsumerRow> = mirror
        .consumers
        .iter()
        .map(|row| (row.name.as_str(), row))
        .collect();
    let subscriptions: BTreeMap<(&str, &str), &SubscriptionRow> = mirror
        .subscriptions
        .iter()
        .map(|row| ((row.consumer.as_str(), row.event_type.as_str()), row))
        .collect();
    for consumer in registry.consumers {
        let object = RegistryObject::Consumer(consumer.name.to_owned());
        match consumers.get(consumer.name) {
            None => out.push(Drift::Missing(object)),
            Some(row) => {
                let mut fields = Fields {
                    object,
                    out: &mut out,
                };
                fields.compare("handler", &row.handler, handler_name(consumer.handler));
                fields.compare(
                    "ordering",
                    &row.ordering,
                    if consumer.per_key_ordering {
                        "per_key"
                    } else {
                        "none"
                    },
                );
                fields.compare("mode", &row.mode, ConsumerMode::as_str(consumer.mode));
                fields.compare("retry policy", &row.retry_policy, consumer.retry_policy);
                fields.compare(
                    "heartbeat threshold ms",
                    row.heartbeat_threshold_ms,
                    consumer.heartbeat_threshold_ms,
                );
            }
        }
        for subscription in consumer.subscriptions {
            let object = RegistryObject::Subscription(
                consumer.name.to_owned(),
                subscription.event.to_owned(),
            );
            match subscriptions.get(&(consumer.name, subscription.event)) {
                None => out.push(Drift::Missing(object)),
                Some(row) => Fields {
                    object,
                    out: &mut out,
                }
                .compare("requirement", &row.requirement, subscription.requirement),
            }
        }
    }
    for row in &mirror.consumers {
        if row.registry_digest == current && registry.consumer(&row.name).is_none() {
            out.push(Drift::Unexpected(RegistryObject::Consumer(
                row.name.clone(),
            )));
        }
    }
    for row in &mirror.subscriptions {
        let compiled = registry.consumer(&row.consumer).is_some_and(|consumer| {
            consumer
                .subscriptions
                .iter()
                .any(|s| s.event == row.event_type)
        });
        if row.registry_digest == current && !compiled {
            out.push(Drift::Unexpected(RegistryObject::Subscription(
                row.consumer.clone(),
                row.event_type.clone(),
            )));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{EventDescriptor, VersionDescriptor};

    const DIGEST: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    const REGISTRY: Registry = Registry {
        project: "t",
        digest: DIGEST,
        events: &[EventDescriptor {
            name: "iu.born",
            description: "born",
            producer_class: "p",
            order_key: &["iu_unit_id"],
            deprecated: false,
            max_payload_bytes: 4096,
            versions: &[VersionDescriptor {
                version: "2.0.0",
                major: 2,
                schema: "{}",
                schema_digest: "def",
            }],
        }],
        consumers: &[],
        retry_policies: &[],
        executor_classes: &[],
        schedules: &[],
        lag_thresholds: &[],
        cutover_gates: &[],
        inventory_rules: &[],
        evidence_recording: None,
        retention: crate::registry::RetentionDescriptor::KEEP,
        payload_policy: crate::registry::PayloadPolicyDescriptor {
            denied_keys: &[],
            credential_key_names: &[],
            default_max_bytes: 4096,
            hard_max_bytes: 65_536,
        },
        require_tenant_scope: false,
        dispatcher: crate::registry::DispatcherDescriptor::FORMAT_DEFAULTS,
    };

    fn mirror(schema_digest: &str) -> Mirror {
        Mirror {
            digest: Some(DIGEST.to_owned()),
            event_types: vec![EventTypeRow {
                name: "iu.born".into(),
                description: "born".into(),
                producer_class: "p".into(),
                order_key: vec!["iu_unit_id".into()],
                status: "active".into(),
                max_payload_bytes: 4096,
                registry_digest: DIGEST.into(),
            }],
            versions: vec![EventVersionRow {
                event_type: "iu.born".into(),
                version: "2.0.0".into(),
                major: 2,
                schema_digest: schema_digest.into(),
                registry_digest: DIGEST.into(),
            }],
            ..Mirror::default()
        }
    }

    #[test]
    fn matching_mirror_has_no_drift() {
        assert_eq!(compare(&REGISTRY, &mirror("def")), []);
    }

    #[test]
    fn drift_names_object_field_and_both_values() {
        let drift = compare(&REGISTRY, &mirror("abc"));
        assert_eq!(drift.len(), 1);
        assert_eq!(
            drift[0].to_string(),
            "event version iu.born 2.0.0: schema digest in database abc, compiled def"
        );
        let mut retired = mirror("def");
        retired.versions.push(EventVersionRow {
            event_type: "iu.born".into(),
            version: "3.0.0".into(),
            major: 3,
            schema_digest: "x".into(),
            registry_digest: "0".repeat(64),
        });
        retired.digest = None;
        let drift = compare(&REGISTRY, &retired);
        assert_eq!(
            drift,
            [Drift::Digest {
                database: None,
                compiled: DIGEST.into()
            }]
        );
    }
}
