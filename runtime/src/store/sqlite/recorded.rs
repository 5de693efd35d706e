//! The registry a SQLite outbox file records (`evc_registry_state.registry`): the whole
//! [`Registry`] as a JSON document, written when an application opens the file and read back
//! by [`crate::SqliteStore::recorded`], the counterpart of PostgreSQL's
//! [`crate::deployed_registry`] for a process without the application's compiled registry.

use serde_json::{Map, Value, json};

use crate::registry::{
    ConsumerDescriptor, ConsumerMode, DispatcherDescriptor, EventDescriptor,
    ExecutorClassDescriptor, HandlerKind, PayloadPolicyDescriptor, Registry, RetentionDescriptor,
    RetryPolicyDescriptor, SubscriptionDescriptor, VersionDescriptor,
};
use crate::store::rows::{leak, leak_slice};
use crate::store::{evidence, inventory, retention, rows, scheduling};

/// The document's format, so a later change of shape is told apart from a damaged file.
const FORMAT: u64 = 1;

/// `registry` as the JSON document the file records.
pub(crate) fn document(registry: &Registry) -> String {
    let events: Vec<Value> = registry
        .events
        .iter()
        .map(|e| {
            json!({
                "name": e.name,
                "description": e.description,
                "producer_class": e.producer_class,
                "order_key": e.order_key,
                "deprecated": e.deprecated,
                "max_payload_bytes": e.max_payload_bytes,
                "versions": e.versions.iter().map(|v| json!({
                    "version": v.version,
                    "major": v.major,
                    "schema": v.schema,
                    "schema_digest": v.schema_digest,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let consumers: Vec<Value> = registry
        .consumers
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "handler": match c.handler {
                    HandlerKind::Transactional => "transactional",
                    HandlerKind::Leased => "leased",
                },
                "mode": c.mode.as_str(),
                "per_key_ordering": c.per_key_ordering,
                "retry_policy": c.retry_policy,
                "heartbeat_threshold_ms": c.heartbeat_threshold_ms,
                "handler_timeout_ms": c.handler_timeout_ms,
                "executor_class": c.executor_class,
                "subscriptions": c.subscriptions.iter().map(|s| json!({
                    "event": s.event,
                    "requirement": s.requirement,
                    "versions": s.versions,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let retry_policies: Vec<Value> = registry
        .retry_policies
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "kind": p.kind,
                "base_delay_ms": p.base_delay_ms,
                "max_delay_ms": p.max_delay_ms,
                "max_attempts": p.max_attempts,
                "jitter": p.jitter,
                "retry_on": p.retry_on,
            })
        })
        .collect();
    let executor_classes: Vec<Value> = registry
        .executor_classes
        .iter()
        .map(|class| {
            json!({
                "name": class.name,
                "mutating": class.mutating,
                "idempotency_namespace": class.idempotency_namespace,
                "heartbeat_owner": class.heartbeat_owner,
                "active": class.active,
            })
        })
        .collect();
    let policy = &registry.payload_policy;
    let dispatcher = &registry.dispatcher;
    json!({
        "format": FORMAT,
        "project": registry.project,
        "digest": registry.digest,
        "events": events,
        "consumers": consumers,
        "retry_policies": retry_policies,
        "executor_classes": executor_classes,
        "schedules": scheduling::schedules_value(registry.schedules),
        "lag_thresholds": scheduling::thresholds_value(registry.lag_thresholds),
        "cutover_gates": scheduling::gates_value(registry.cutover_gates),
        "retention": retention::retention_value(&registry.retention),
        "inventory_rules": inventory::rules_value(registry.inventory_rules),
        "evidence_recording": evidence::recording_value(registry.evidence_recording),
        "payload_policy": rows::payload_policy_document(policy),
        "require_tenant_scope": registry.require_tenant_scope,
        "dispatcher": rows::dispatcher_document(dispatcher),
    })
    .to_string()
}

/// The registry a recorded document describes. Its strings and lists are leaked: they live as
/// long as the process, as the compiled registry's do (open a file this way once per process).
///
/// # Errors
/// What is wrong with the document (never its content).
pub(crate) fn registry(document: &str) -> Result<Registry, String> {
    let root: Value =
        serde_json::from_str(document).map_err(|_| "not a JSON document".to_owned())?;
    let root = object(&root, "the document")?;
    let format = number(root, "format")?;
    if format != FORMAT {
        return Err(format!("format {format}; this build reads format {FORMAT}"));
    }
    let mut events = Vec::new();
    for e in list(root, "events")? {
        let e = object(e, "an event type")?;
        let mut versions = Vec::new();
        for v in list(e, "versions")? {
            let v = object(v, "a version")?;
            versions.push(VersionDescriptor {
                version: text(v, "version")?,
                major: number(v, "major")?,
                schema: text(v, "schema")?,
                schema_digest: text(v, "schema_digest")?,
            });
        }
        events.push(EventDescriptor {
            name: text(e, "name")?,
            description: text(e, "description")?,
            producer_class: text(e, "producer_class")?,
            order_key: texts(e, "order_key")?,
            deprecated: flag(e, "deprecated")?,
            max_payload_bytes: small(e, "max_payload_bytes")?,
            versions: leak_slice(versions),
        });
    }
    let mut consumers = Vec::new();
    for c in list(root, "consumers")? {
        let c = object(c, "a consumer")?;
        let mut subscriptions = Vec::new();
        for s in list(c, "subscriptions")? {
            let s = object(s, "a subscription")?;
            subscriptions.push(SubscriptionDescriptor {
                event: text(s, "event")?,
                requirement: text(s, "requirement")?,
                versions: texts(s, "versions")?,
            });
        }
        let handler = match text(c, "handler")? {
            "transactional" => HandlerKind::Transactional,
            "leased" => HandlerKind::Leased,
            _ => return Err("a consumer's `handler` is not a handler kind".to_owned()),
        };
        let mode = ConsumerMode::parse(text(c, "mode")?)
            .ok_or_else(|| "a consumer's `mode` is not a mode".to_owned())?;
        consumers.push(ConsumerDescriptor {
            name: text(c, "name")?,
            handler,
            mode,
            per_key_ordering: flag(c, "per_key_ordering")?,
            retry_policy: text(c, "retry_policy")?,
            heartbeat_threshold_ms: number(c, "heartbeat_threshold_ms")?,
            handler_timeout_ms: optional_number(c, "handler_timeout_ms")?,
            executor_class: optional_text(c, "executor_class")?,
            subscriptions: leak_slice(subscriptions),
        });
    }
    let mut retry_policies = Vec::new();
    for p in list(root, "retry_policies")? {
        let p = object(p, "a retry policy")?;
        retry_policies.push(RetryPolicyDescriptor {
            name: text(p, "name")?,
            kind: text(p, "kind")?,
            base_delay_ms: number(p, "base_delay_ms")?,
            max_delay_ms: optional_number(p, "max_delay_ms")?,
            max_attempts: small(p, "max_attempts")?,
            jitter: text(p, "jitter")?,
            retry_on: texts(p, "retry_on")?,
        });
    }
    // A file recorded before executor classes were recorded has no such list.
    let mut executor_classes = Vec::new();
    if root.contains_key("executor_classes") {
        for class in list(root, "executor_classes")? {
            let class = object(class, "an executor class")?;
            executor_classes.push(ExecutorClassDescriptor {
                name: text(class, "name")?,
                mutating: flag(class, "mutating")?,
                idempotency_namespace: text(class, "idempotency_namespace")?,
                heartbeat_owner: text(class, "heartbeat_owner")?,
                active: flag(class, "active")?,
            });
        }
    }
    executor_classes.sort_by_key(|class| class.name);
    let policy = object(field(root, "payload_policy")?, "`payload_policy`")?;
    let dispatcher = object(field(root, "dispatcher")?, "`dispatcher`")?;
    Ok(Registry {
        project: text(root, "project")?,
        digest: text(root, "digest")?,
        events: leak_slice(events),
        consumers: leak_slice(consumers),
        retry_policies: leak_slice(retry_policies),
        executor_classes: leak_slice(executor_classes),
        // A file recorded before these lists were recorded has none of them.
        schedules: match root.get("schedules") {
            Some(value) => scheduling::schedules_of(value.clone())?,
            None => &[],
        },
        lag_thresholds: match root.get("lag_thresholds") {
            Some(value) => scheduling::thresholds_of(value.clone())?,
            None => &[],
        },
        cutover_gates: match root.get("cutover_gates") {
            Some(value) => scheduling::gates_of(value.clone())?,
            None => &[],
        },
        retention: match root.get("retention") {
            Some(value) => retention::retention_of(value.clone())?,
            None => RetentionDescriptor::KEEP,
        },
        inventory_rules: match root.get("inventory_rules") {
            Some(value) => inventory::rules_of(value.clone())?,
            None => &[],
        },
        evidence_recording: match root.get("evidence_recording") {
            Some(value) => evidence::recording_of(value.clone())?,
            None => None,
        },
        payload_policy: PayloadPolicyDescriptor {
            denied_keys: texts(policy, "denied_keys")?,
            credential_key_names: texts(policy, "credential_key_names")?,
            default_max_bytes: small(policy, "default_max_bytes")?,
            hard_max_bytes: small(policy, "hard_max_bytes")?,
        },
        require_tenant_scope: flag(root, "require_tenant_scope")?,
        dispatcher: DispatcherDescriptor {
            batch_size: small(dispatcher, "batch_size")?,
            lease_ms: number(dispatcher, "lease_ms")?,
            heartbeat_ms: number(dispatcher, "heartbeat_ms")?,
            max_attempts: small(dispatcher, "max_attempts")?,
            backoff_ceiling_ms: number(dispatcher, "backoff_ceiling_ms")?,
        },
    })
}

type Object = Map<String, Value>;

fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Object, String> {
    value
        .as_object()
        .ok_or_else(|| format!("{what} is not an object"))
}

fn field<'a>(object: &'a Object, key: &str) -> Result<&'a Value, String> {
    object.get(key).ok_or_else(|| format!("`{key}` is missing"))
}

fn list<'a>(object: &'a Object, key: &str) -> Result<&'a Vec<Value>, String> {
    field(object, key)?
        .as_array()
        .ok_or_else(|| format!("`{key}` is not a list"))
}

fn text(object: &Object, key: &str) -> Result<&'static str, String> {
    let value = field(object, key)?
        .as_str()
        .ok_or_else(|| format!("`{key}` is not a string"))?;
    Ok(leak(value.to_owned()))
}

fn texts(object: &Object, key: &str) -> Result<&'static [&'static str], String> {
    let items = list(object, key)?
        .iter()
        .map(|item| {
            item.as_str()
                .map(|value| leak(value.to_owned()))
                .ok_or_else(|| format!("`{key}` holds something other than strings"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(leak_slice(items))
}

fn flag(object: &Object, key: &str) -> Result<bool, String> {
    field(object, key)?
        .as_bool()
        .ok_or_else(|| format!("`{key}` is not a boolean"))
}

fn number(object: &Object, key: &str) -> Result<u64, String> {
    field(object, key)?
        .as_u64()
        .ok_or_else(|| format!("`{key}` is not a whole number"))
}

fn optional_number(object: &Object, key: &str) -> Result<Option<u64>, String> {
    match field(object, key)? {
        Value::Null => Ok(None),
        _ => number(object, key).map(Some),
    }
}

/// A string that may be missing or null (absent in a file recorded before it was).
fn optional_text(object: &Object, key: &str) -> Result<Option<&'static str>, String> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => text(object, key).map(Some),
    }
}

fn small(object: &Object, key: &str) -> Result<u32, String> {
    u32::try_from(number(object, key)?).map_err(|_| format!("`{key}` is out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RetryPolicyDescriptor = RetryPolicyDescriptor {
        name: "fixed",
        kind: "fixed_delay",
        base_delay_ms: 200,
        max_delay_ms: None,
        max_attempts: 3,
        jitter: "none",
        retry_on: &["transient"],
    };

    const VERSIONS: &[VersionDescriptor] = &[VersionDescriptor {
        version: "1.0.0",
        major: 1,
        schema: "{\"type\":\"object\"}",
        schema_digest: "ab",
    }];

    const REGISTRY: Registry = Registry {
        project: "p",
        digest: "d",
        events: &[EventDescriptor {
            name: "a.b",
            description: "what \"happened\"",
            producer_class: "svc",
            order_key: &["id"],
            deprecated: true,
            max_payload_bytes: 1024,
            versions: VERSIONS,
        }],
        consumers: &[ConsumerDescriptor {
            name: "c",
            handler: HandlerKind::Leased,
            mode: ConsumerMode::Shadow,
            per_key_ordering: true,
            retry_policy: "fixed",
            heartbeat_threshold_ms: 5_000,
            handler_timeout_ms: Some(250),
            executor_class: Some("notification.email"),
            subscriptions: &[SubscriptionDescriptor {
                event: "a.b",
                requirement: "^1",
                versions: &["1.0.0"],
            }],
        }],
        retry_policies: &[POLICY],
        executor_classes: &[ExecutorClassDescriptor {
            name: "notification.email",
            mutating: true,
            idempotency_namespace: "notify",
            heartbeat_owner: "team-notify",
            active: true,
        }],
        schedules: &[crate::registry::ScheduleDescriptor {
            name: "nightly",
            cron: "0 3 * * *",
            event: "a.b",
            missed: crate::registry::MissedSlots::CatchUp,
            catch_up_limit: 7,
            tenant_scope: None,
        }],
        lag_thresholds: &[crate::registry::LagThresholdDescriptor {
            consumer: "c",
            producer_class: "p",
            threshold_ms: 60_000,
        }],
        cutover_gates: &[crate::registry::CutoverGateDescriptor {
            consumer: "c",
            min_reconciled: 30,
            min_span_ms: 259_200_000,
            max_unexplained: 1,
        }],
        retention: crate::registry::RetentionDescriptor {
            events: &[crate::registry::EventRetention {
                event_type: "a.b",
                ms: 86_400_000,
            }],
            attempts_ms: Some(3_600_000),
            reconciliations_ms: None,
            rejects_ms: Some(60_000),
            effects_ms: Some(1_000),
        },
        inventory_rules: &[crate::registry::InventoryRulesDescriptor {
            consumer: "c",
            max_age_ms: Some(86_400_000),
            repair: crate::registry::InventoryRepair::Conform,
        }],
        evidence_recording: Some(crate::registry::EvidenceRecordingDescriptor {
            every_ms: 3_600_000,
            keep_ms: 86_400_000,
            window_ms: 604_800_000,
            correlation_ms: 60_000,
            min_count: 2,
        }),
        payload_policy: PayloadPolicyDescriptor {
            denied_keys: &["password"],
            credential_key_names: &["token"],
            default_max_bytes: 100,
            hard_max_bytes: 200,
        },
        require_tenant_scope: false,
        dispatcher: DispatcherDescriptor::FORMAT_DEFAULTS,
    };

    #[test]
    fn a_recorded_registry_reads_back_equal() {
        assert_eq!(registry(&document(&REGISTRY)), Ok(REGISTRY));
    }

    #[test]
    fn a_document_recorded_before_schedules_reads_back_without_them() {
        let mut value: Value = serde_json::from_str(&document(&REGISTRY)).expect("JSON");
        if let Some(root) = value.as_object_mut() {
            root.remove("schedules");
            root.remove("lag_thresholds");
        }
        let read = registry(&value.to_string()).expect("readable");
        assert!(read.schedules.is_empty() && read.lag_thresholds.is_empty());
    }

    #[test]
    fn a_document_recorded_before_inventory_rules_reads_back_the_defaults() {
        let mut value: Value = serde_json::from_str(&document(&REGISTRY)).expect("JSON");
        if let Some(root) = value.as_object_mut() {
            root.remove("inventory_rules");
        }
        let read = registry(&value.to_string()).expect("readable");
        assert_eq!(
            read.inventory_rules("c"),
            crate::registry::InventoryRulesDescriptor::DEFAULT
        );
    }

    #[test]
    fn a_document_recorded_before_evidence_recording_records_none() {
        let mut value: Value = serde_json::from_str(&document(&REGISTRY)).expect("JSON");
        if let Some(root) = value.as_object_mut() {
            root.remove("evidence_recording");
        }
        let read = registry(&value.to_string()).expect("readable");
        assert_eq!(read.evidence_recording, None);
    }

    #[test]
    fn a_document_recorded_before_retention_keeps_every_row() {
        let mut value: Value = serde_json::from_str(&document(&REGISTRY)).expect("JSON");
        if let Some(root) = value.as_object_mut() {
            root.remove("retention");
        }
        let read = registry(&value.to_string()).expect("readable");
        assert!(read.retention.keeps_everything());
    }

    #[test]
    fn a_document_recorded_before_executor_classes_reads_back_without_them() {
        let mut value: Value = serde_json::from_str(&document(&REGISTRY)).expect("JSON");
        if let Some(root) = value.as_object_mut() {
            root.remove("executor_classes");
        }
        if let Some(consumer) = value["consumers"][0].as_object_mut() {
            consumer.remove("executor_class");
        }
        let read = registry(&value.to_string()).expect("an older document loads");
        assert!(read.executor_classes.is_empty());
        assert_eq!(read.consumers[0].executor_class, None);
        assert_eq!(read.class_of("c"), None);
        assert_eq!(
            registry(&document(&REGISTRY))
                .expect("loads")
                .class_of("c")
                .map(|class| class.heartbeat_owner),
            Some("team-notify")
        );
    }

    #[test]
    fn a_damaged_document_is_refused_without_quoting_it() {
        assert!(registry("not json").is_err());
        let mut value: Value = serde_json::from_str(&document(&REGISTRY)).expect("JSON");
        value["format"] = json!(2);
        assert!(registry(&value.to_string()).is_err());
        value["format"] = json!(1);
        value["consumers"][0]["mode"] = json!("sideways");
        let refused = registry(&value.to_string()).expect_err("refused");
        assert!(!refused.contains("sideways"), "{refused}");
    }
}
