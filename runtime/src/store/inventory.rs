//! The inventory of a consumer before it goes live (docs/runtime.md, "Inventory"): every event
//! of a type it subscribes to that has no delivery to it (appended before the consumer existed,
//! or while it was `off`), classified by the contract's rules as
//!
//! - **expire**: older than the rules' `max_age`; never delivered to it;
//! - **quarantine**: without the tenant scope the project requires, or refused by its
//!   subscription or its version's schema and not repairable;
//! - **repair**: refused as it is, but conformed to the newest registered version the consumer
//!   accepts, the conformed payload validates (rules with `repair: conform`);
//! - **safe**: its version is accepted, registered, and its payload validates.
//!
//! Each store reads the candidates (the session's tenant's alone where row-level security is
//! on); the classification is here, one function for both stores, against the registry the
//! store runs on. Payloads are read to be validated and never leave this module: a report
//! holds their SHA-256 digests (of canonical JSON), the repaired payload's beside the stored
//! one's.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::SystemTime;

use serde::Serialize;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::append::{canonical_json, sha256_hex};
use crate::registry::{
    ConsumerDescriptor, InventoryRepair, InventoryRulesDescriptor, Registry, accepts,
};
use crate::store::DispatchError;
use crate::store::ops::{ReplayApproval, ReplayError, compile};
use crate::store::rows::{leak, leak_slice};

/// The most events one inventory classifies; a larger backlog is reported as truncated.
pub const MAX_INVENTORY_EVENTS: u32 = 10_000;

/// Deepest nesting of schemas and payloads conforming follows (a `$ref` cycle stops here).
const MAX_CONFORM_DEPTH: usize = 64;

/// What the inventory of one consumer classified, as of one instant.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct InventoryReport {
    /// The consumer.
    pub consumer: String,
    /// The instant ages are measured from, epoch seconds.
    pub as_of: f64,
    /// The rules' `max_age`, in milliseconds (`None`: no event expires).
    pub max_age_ms: Option<u64>,
    /// The rules' repair (`none`, `conform`).
    pub repair: &'static str,
    /// How many events fell in each class.
    pub counts: InventoryCounts,
    /// The events, oldest first.
    pub items: Vec<InventoryItem>,
    /// Whether more events wait than the limit let in: classify again after acting on these.
    pub truncated: bool,
    /// SHA-256 (hex) of the consumer and of each item's event, class, target version and
    /// digests, in order: any change to what the inventory found changes it.
    pub digest: String,
}

/// Events per class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct InventoryCounts {
    /// Deliverable as they are.
    pub safe: u64,
    /// Deliverable once conformed to an accepted version.
    pub repair: u64,
    /// Not deliverable: an operator decides.
    pub quarantine: u64,
    /// Too old: never delivered.
    pub expire: u64,
}

/// One event of an inventory and its class.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct InventoryItem {
    /// The event.
    #[serde(serialize_with = "uuid_text")]
    pub event_id: Uuid,
    /// Its type.
    pub event_type: String,
    /// The version it was appended with.
    pub version: String,
    /// When it was appended, epoch seconds.
    pub produced_at: f64,
    /// Its class.
    pub class: InventoryClass,
    /// Why it is not safe (`None` for a safe event).
    pub reason: Option<InventoryReason>,
    /// The version it would be delivered as: its own when safe, the conformed one when
    /// repaired; `None` otherwise.
    pub target_version: Option<String>,
    /// SHA-256 (hex) of the stored payload's canonical JSON.
    pub payload_digest: String,
    /// SHA-256 (hex) of the repaired payload's canonical JSON (repairs only).
    pub repaired_digest: Option<String>,
}

fn uuid_text<S: serde::Serializer>(id: &Uuid, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(id)
}

/// The class of an event in an inventory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InventoryClass {
    /// Deliverable as it is.
    Safe,
    /// Deliverable once conformed to an accepted version.
    Repair,
    /// Not deliverable as it is nor repairable.
    Quarantine,
    /// Older than the rules' `max_age`.
    Expire,
}

impl InventoryClass {
    /// The class's name (`safe`, `repair`, `quarantine`, `expire`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Safe => "safe",
            Self::Repair => "repair",
            Self::Quarantine => "quarantine",
            Self::Expire => "expire",
        }
    }
}

/// Why an inventoried event is not safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InventoryReason {
    /// Older than the rules' `max_age`.
    TooOld,
    /// Older than what a retention purge kept of the attempts: whether the consumer received
    /// it, the ledger no longer tells.
    ReceiptUnknown,
    /// The project requires a tenant scope and the event has none.
    ScopeMissing,
    /// The consumer's subscription does not accept the event's version.
    VersionNotAccepted,
    /// The registry holds no schema for the event's version.
    VersionNotDeployed,
    /// The payload does not validate against its version's schema.
    SchemaInvalid,
}

impl InventoryReason {
    /// The reason code (`too_old`, ...).
    pub fn code(self) -> &'static str {
        match self {
            Self::TooOld => "too_old",
            Self::ReceiptUnknown => "receipt_unknown",
            Self::ScopeMissing => "scope_missing",
            Self::VersionNotAccepted => "version_not_accepted",
            Self::VersionNotDeployed => "version_not_deployed",
            Self::SchemaInvalid => "schema_invalid",
        }
    }
}

impl std::fmt::Display for InventoryReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

/// An event a store read for an inventory: one of the consumer's types, without a delivery
/// to it.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    /// The event, as text (both stores).
    pub(crate) event_id: String,
    pub(crate) event_type: String,
    pub(crate) schema_version: String,
    pub(crate) tenant_scope: Option<String>,
    /// Epoch seconds.
    pub(crate) produced_at: f64,
    /// The stored payload's JSON text.
    pub(crate) payload: String,
}

/// A candidate's row as both stores read it: event id (text), type, version, tenant, epoch
/// seconds, payload text.
pub(crate) type CandidateRow = (String, String, String, Option<String>, f64, String);

impl From<CandidateRow> for Candidate {
    fn from(row: CandidateRow) -> Self {
        let (event_id, event_type, schema_version, tenant_scope, produced_at, payload) = row;
        Self {
            event_id,
            event_type,
            schema_version,
            tenant_scope,
            produced_at,
            payload,
        }
    }
}

/// What applying an inventory did ([`crate::Operate::apply_inventory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct InventoryApplied {
    /// The recorded inventory (`evc_inventories.id`).
    pub inventory_id: i64,
    /// Events per class it recorded (by the first apply, when repeated).
    pub counts: InventoryCounts,
    /// Pending deliveries it created: one per safe and repaired event.
    pub delivered: u64,
    /// Quarantined deliveries it created: one per quarantined event, waiting for an
    /// operator's replay or discard.
    pub quarantined: u64,
    /// Whether the idempotency key had been applied before: nothing new was written.
    pub repeated: bool,
}

/// A read's error as a proposal's or an apply's: an unknown consumer or the database (a read
/// fails no other way).
pub(crate) fn refusal(error: DispatchError) -> ReplayError {
    match error {
        DispatchError::UnknownConsumer(consumer) => ReplayError::UnknownConsumer(consumer),
        DispatchError::Database(error) => ReplayError::Database(error),
        other => ReplayError::Database(sqlx::Error::Protocol(other.to_string())),
    }
}

/// An applied inventory as its ledger row keeps it (the newest of each consumer in
/// [`crate::StatusReport::last_inventories`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct InventoryRecord {
    /// The recorded inventory (`evc_inventories.id`).
    pub inventory_id: i64,
    /// The consumer.
    pub consumer: String,
    /// Events it recorded per class.
    pub counts: InventoryCounts,
    /// Who approved it.
    pub approved_by: String,
    /// Why.
    pub reason: String,
    /// When it was applied, epoch seconds.
    pub applied_at: f64,
}

/// A ledger row's columns as both stores select them: id, consumer, counts (JSON), approver,
/// reason, when.
pub(crate) type RecordColumns = (i64, String, String, String, String, f64);

/// The record of a ledger row's columns.
pub(crate) fn record_of(columns: RecordColumns) -> InventoryRecord {
    let (inventory_id, consumer, counts, approved_by, reason, applied_at) = columns;
    InventoryRecord {
        inventory_id,
        consumer,
        counts: counts_of(&counts),
        approved_by,
        reason,
        applied_at,
    }
}

/// An applicable inventory: it lists an event, and its digest is the approval's.
pub(crate) fn check_applicable(
    report: &InventoryReport,
    approval: &ReplayApproval,
) -> Result<(), ReplayError> {
    if report.digest != approval.digest {
        return Err(ReplayError::DigestMismatch {
            presented: approval.digest.clone(),
            current: report.digest.clone(),
        });
    }
    check_proposable(report)
}

/// A proposable inventory lists at least one event.
pub(crate) fn check_proposable(report: &InventoryReport) -> Result<(), ReplayError> {
    if report.items.is_empty() {
        return Err(ReplayError::NothingToInventory(report.consumer.clone()));
    }
    Ok(())
}

/// The counts as the ledger records them (`{"safe": n, ...}`).
pub(crate) fn counts_json(counts: &InventoryCounts) -> String {
    serde_json::to_string(counts).unwrap_or_else(|_| "{}".to_owned())
}

/// The counts of a ledger row's JSON (zeros where it says nothing).
pub(crate) fn counts_of(json: &str) -> InventoryCounts {
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct Counts {
        safe: u64,
        repair: u64,
        quarantine: u64,
        expire: u64,
    }
    let counts: Counts = serde_json::from_str(json).unwrap_or_default();
    InventoryCounts {
        safe: counts.safe,
        repair: counts.repair,
        quarantine: counts.quarantine,
        expire: counts.expire,
    }
}

/// An applied inventory's items as parallel columns, for one insert: event ids (text),
/// classes, reasons, target versions, payload digests, repaired digests.
pub(crate) struct ItemColumns {
    pub(crate) event_ids: Vec<String>,
    pub(crate) classes: Vec<&'static str>,
    pub(crate) reasons: Vec<Option<&'static str>>,
    pub(crate) targets: Vec<Option<String>>,
    pub(crate) payload_digests: Vec<String>,
    pub(crate) repaired_digests: Vec<Option<String>>,
}

impl ItemColumns {
    pub(crate) fn of(report: &InventoryReport) -> Self {
        let items = &report.items;
        Self {
            event_ids: items.iter().map(|i| i.event_id.to_string()).collect(),
            classes: items.iter().map(|i| i.class.as_str()).collect(),
            reasons: items
                .iter()
                .map(|i| i.reason.map(InventoryReason::code))
                .collect(),
            targets: items.iter().map(|i| i.target_version.clone()).collect(),
            payload_digests: items.iter().map(|i| i.payload_digest.clone()).collect(),
            repaired_digests: items.iter().map(|i| i.repaired_digest.clone()).collect(),
        }
    }
}

/// The events of `report` of the classes in `classes`, in order.
pub(crate) fn events_of(report: &InventoryReport, classes: &[InventoryClass]) -> Vec<Uuid> {
    report
        .items
        .iter()
        .filter(|i| classes.contains(&i.class))
        .map(|i| i.event_id)
        .collect()
}

/// The classes an applied inventory gives a delivery: a pending one to the safe and the
/// repaired, a quarantined one to the quarantined.
pub(crate) const DELIVERED: [InventoryClass; 3] = [
    InventoryClass::Safe,
    InventoryClass::Repair,
    InventoryClass::Quarantine,
];

/// The answer to a repeated apply, from the counts its first apply recorded.
pub(crate) fn repeated(inventory_id: i64, counts: InventoryCounts) -> InventoryApplied {
    InventoryApplied {
        inventory_id,
        delivered: counts.safe + counts.repair,
        quarantined: counts.quarantine,
        counts,
        repeated: true,
    }
}

/// A claimed delivery of a repaired event (`target` and `digest` from its inventory item;
/// both `None` for any other delivery): its payload conformed to the target version, as the
/// inventory that repaired it did. The conformed payload must have the recorded digest (a
/// version's schema never changes, so it has unless the registry lacks the version).
///
/// # Errors
/// [`DispatchError::RepairUnavailable`] when the target version is not registered or the
/// conformed payload differs from the recorded one.
pub(crate) fn conform_claimed(
    registry: &Registry,
    claimed: &mut crate::store::Claimed,
    target: Option<String>,
    digest: Option<String>,
) -> Result<(), DispatchError> {
    let (Some(target), Some(digest)) = (target, digest) else {
        return Ok(());
    };
    let unavailable = || DispatchError::RepairUnavailable {
        event_id: claimed.lease.event_id,
        consumer: claimed.lease.consumer.clone(),
    };
    let version = registry
        .version(&claimed.delivery.event_type, &target)
        .ok_or_else(unavailable)?;
    let schema: Value = serde_json::from_str(version.schema).map_err(|_| unavailable())?;
    let repaired = conform(&schema, &schema, &claimed.payload, 0);
    if sha256_hex(canonical_json(&repaired).as_bytes()) != digest {
        return Err(unavailable());
    }
    claimed.payload = repaired;
    claimed.delivery.version = target;
    Ok(())
}

/// The consumer `consumer` of `registry` and the types it subscribes to, for a store's read.
///
/// # Errors
/// [`DispatchError::UnknownConsumer`].
pub(crate) fn subscribed(
    registry: &Registry,
    consumer: &str,
) -> Result<(&'static ConsumerDescriptor, Vec<String>), DispatchError> {
    let descriptor = registry
        .consumer(consumer)
        .ok_or_else(|| DispatchError::UnknownConsumer(consumer.to_owned()))?;
    let mut types: Vec<String> = descriptor
        .subscriptions
        .iter()
        .map(|s| s.event.to_owned())
        .collect();
    types.sort();
    types.dedup();
    Ok((descriptor, types))
}

/// The bounded limit a store reads (`limit` at least 1, at most [`MAX_INVENTORY_EVENTS`]),
/// plus one to tell whether more wait.
pub(crate) fn read_limit(limit: u32) -> i64 {
    i64::from(limit.clamp(1, MAX_INVENTORY_EVENTS)) + 1
}

/// Epoch seconds of `time` (0 before the epoch).
pub(crate) fn epoch_s(time: SystemTime) -> f64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// When and how far an inventory looks.
pub(crate) struct Window {
    /// The instant ages are measured from.
    pub(crate) as_of: SystemTime,
    /// The most events kept.
    pub(crate) limit: u32,
    /// The newest time a retention purge counted back from (epoch seconds), if one ran.
    pub(crate) purged_through: Option<f64>,
}

impl Window {
    /// Before this (epoch seconds), an acked delivery's attempts may have been purged, so the
    /// ledger no longer tells whether an event was received: the newest purge's time less the
    /// registry's attempts period.
    fn receipt_horizon(&self, registry: &Registry) -> Option<f64> {
        let attempts_ms = registry.retention.attempts_ms?;
        Some(self.purged_through? - attempts_ms as f64 / 1000.0)
    }
}

/// Classifies `candidates` (oldest first; at most `window.limit` are kept, one more means
/// truncated) for `consumer` of `registry`.
pub(crate) fn classify(
    registry: &Registry,
    consumer: &ConsumerDescriptor,
    window: Window,
    mut candidates: Vec<Candidate>,
) -> InventoryReport {
    let keep = usize::try_from(window.limit.clamp(1, MAX_INVENTORY_EVENTS)).unwrap_or(usize::MAX);
    let truncated = candidates.len() > keep;
    candidates.truncate(keep);
    let rules = registry.inventory_rules(consumer.name);
    let as_of_s = epoch_s(window.as_of);
    let horizon = window.receipt_horizon(registry);
    let mut validators = Validators::default();
    let mut counts = InventoryCounts::default();
    let items: Vec<InventoryItem> = candidates
        .into_iter()
        .map(|candidate| {
            let item = classify_one(
                registry,
                consumer,
                &rules,
                (as_of_s, horizon),
                &mut validators,
                candidate,
            );
            match item.class {
                InventoryClass::Safe => counts.safe += 1,
                InventoryClass::Repair => counts.repair += 1,
                InventoryClass::Quarantine => counts.quarantine += 1,
                InventoryClass::Expire => counts.expire += 1,
            }
            item
        })
        .collect();
    InventoryReport {
        digest: digest(consumer.name, &items),
        consumer: consumer.name.to_owned(),
        as_of: as_of_s,
        max_age_ms: rules.max_age_ms,
        repair: rules.repair.as_str(),
        counts,
        items,
        truncated,
    }
}

/// One validator per schema text (an inventory meets few versions).
#[derive(Default)]
struct Validators(HashMap<&'static str, Option<jsonschema::Validator>>);

impl Validators {
    fn valid(&mut self, schema: &'static str, payload: &Value) -> bool {
        self.0
            .entry(schema)
            .or_insert_with(|| compile(schema))
            .as_ref()
            .is_some_and(|validator| validator.is_valid(payload))
    }
}

fn classify_one(
    registry: &Registry,
    consumer: &ConsumerDescriptor,
    rules: &InventoryRulesDescriptor,
    (as_of_s, horizon): (f64, Option<f64>),
    validators: &mut Validators,
    candidate: Candidate,
) -> InventoryItem {
    let payload: Option<Value> = serde_json::from_str(&candidate.payload).ok();
    let payload_digest = payload.as_ref().map_or_else(
        || sha256_hex(candidate.payload.as_bytes()),
        |payload| sha256_hex(canonical_json(payload).as_bytes()),
    );
    let mut item = InventoryItem {
        event_id: Uuid::parse_str(&candidate.event_id).unwrap_or_default(),
        event_type: candidate.event_type,
        version: candidate.schema_version,
        produced_at: candidate.produced_at,
        class: InventoryClass::Quarantine,
        reason: None,
        target_version: None,
        payload_digest,
        repaired_digest: None,
    };
    let age_ms = (as_of_s - candidate.produced_at) * 1000.0;
    if rules.max_age_ms.is_some_and(|max| age_ms > max as f64) {
        item.class = InventoryClass::Expire;
        item.reason = Some(InventoryReason::TooOld);
        return item;
    }
    if horizon.is_some_and(|horizon| candidate.produced_at < horizon) {
        item.reason = Some(InventoryReason::ReceiptUnknown);
        return item;
    }
    if registry.require_tenant_scope && candidate.tenant_scope.is_none() {
        item.reason = Some(InventoryReason::ScopeMissing);
        return item;
    }
    let subscription = consumer
        .subscriptions
        .iter()
        .find(|s| s.event == item.event_type);
    let accepted = subscription.is_some_and(|s| accepts(s.requirement, &item.version));
    let reason = match (accepted, registry.version(&item.event_type, &item.version)) {
        (false, _) => InventoryReason::VersionNotAccepted,
        (true, None) => InventoryReason::VersionNotDeployed,
        (true, Some(version)) => {
            if payload
                .as_ref()
                .is_some_and(|payload| validators.valid(version.schema, payload))
            {
                item.class = InventoryClass::Safe;
                item.target_version = Some(item.version.clone());
                return item;
            }
            InventoryReason::SchemaInvalid
        }
    };
    item.reason = Some(reason);
    if rules.repair == InventoryRepair::Conform
        && let (Some(subscription), Some(payload)) = (subscription, payload.as_ref())
    {
        let mut targets: Vec<semver::Version> = subscription
            .versions
            .iter()
            .filter_map(|v| semver::Version::parse(v).ok())
            .collect();
        targets.sort_by(|a, b| b.cmp(a));
        for target in targets {
            let target = target.to_string();
            let Some(version) = registry.version(&item.event_type, &target) else {
                continue;
            };
            let Ok(schema) = serde_json::from_str::<Value>(version.schema) else {
                continue;
            };
            let repaired = conform(&schema, &schema, payload, 0);
            if validators.valid(version.schema, &repaired) {
                item.class = InventoryClass::Repair;
                item.repaired_digest = Some(sha256_hex(canonical_json(&repaired).as_bytes()));
                item.target_version = Some(target);
                break;
            }
        }
    }
    item
}

/// `value` conformed to `schema` (resolving local `$ref`s in `root`): in each object whose
/// schema closes it (`additionalProperties: false`, no `patternProperties`), properties the
/// schema does not declare are dropped; absent properties that declare a `default` get it;
/// present properties and array items are conformed to their own schemas. Anything else is
/// left as it is: validation decides.
pub(crate) fn conform(root: &Value, schema: &Value, value: &Value, depth: usize) -> Value {
    if depth > MAX_CONFORM_DEPTH {
        return value.clone();
    }
    let Some(schema) = schema.as_object() else {
        return value.clone();
    };
    if let Some(target) = schema.get("$ref").and_then(Value::as_str)
        && let Some(pointer) = target.strip_prefix('#')
        && let Some(resolved) = root.pointer(pointer)
    {
        return conform(root, resolved, value, depth + 1);
    }
    match value {
        Value::Object(object) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let closed = schema.get("additionalProperties") == Some(&Value::Bool(false))
                && !schema.contains_key("patternProperties");
            let mut out = Map::new();
            for (key, field) in object {
                match properties.and_then(|p| p.get(key)) {
                    Some(field_schema) => {
                        out.insert(key.clone(), conform(root, field_schema, field, depth + 1));
                    }
                    None if closed => {}
                    None => {
                        out.insert(key.clone(), field.clone());
                    }
                }
            }
            for (key, field_schema) in properties.into_iter().flatten() {
                if !out.contains_key(key)
                    && let Some(default) = field_schema.get("default")
                {
                    out.insert(key.clone(), default.clone());
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            // `prefixItems` describes the first elements; `items` only those after them.
            let prefix = schema
                .get("prefixItems")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice);
            let rest = schema.get("items").filter(|items| items.is_object());
            Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(index, item)| match prefix.get(index).or(rest) {
                        Some(item_schema) => conform(root, item_schema, item, depth + 1),
                        None => item.clone(),
                    })
                    .collect(),
            )
        }
        _ => value.clone(),
    }
}

/// SHA-256 (hex) of the consumer and each item, in order.
fn digest(consumer: &str, items: &[InventoryItem]) -> String {
    let mut canonical = format!("evc-inventory/1\n{consumer}\n");
    for item in items {
        let _ = writeln!(
            canonical,
            "{} {} {} {} {} {}",
            item.event_id,
            item.class.as_str(),
            item.reason.map_or("-", InventoryReason::code),
            item.target_version.as_deref().unwrap_or("-"),
            item.payload_digest,
            item.repaired_digest.as_deref().unwrap_or("-"),
        );
    }
    sha256_hex(canonical.as_bytes())
}

/// The inventory rules as a JSON list (the settings row, SQLite's recorded document).
pub(in crate::store) fn rules_value(rules: &[InventoryRulesDescriptor]) -> Value {
    Value::Array(
        rules
            .iter()
            .map(|r| {
                serde_json::json!({
                    "consumer": r.consumer,
                    "max_age_ms": r.max_age_ms,
                    "repair": r.repair.as_str(),
                })
            })
            .collect(),
    )
}

/// The inventory rules of a JSON list, sorted by consumer as the registry keeps them.
///
/// # Errors
/// What is wrong with the list (never its content).
pub(in crate::store) fn rules_of(
    value: Value,
) -> Result<&'static [InventoryRulesDescriptor], String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Rules {
        consumer: String,
        max_age_ms: Option<u64>,
        repair: String,
    }
    let rows: Vec<Rules> = serde_json::from_value(value)
        .map_err(|_| "the inventory rules are not a list of rules".to_owned())?;
    let mut rules = Vec::with_capacity(rows.len());
    for row in rows {
        let repair = InventoryRepair::parse(&row.repair)
            .ok_or_else(|| "an inventory rule names an unknown repair".to_owned())?;
        rules.push(InventoryRulesDescriptor {
            consumer: leak(row.consumer),
            max_age_ms: row.max_age_ms,
            repair,
        });
    }
    rules.sort_by_key(|r| r.consumer);
    Ok(leak_slice(rules))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conforming_drops_what_a_closed_object_does_not_declare_and_fills_defaults() {
        let schema = json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["id", "channel"],
            "properties": {
                "id": {"type": "string"},
                "channel": {"type": "string", "default": "email"},
                "address": {"$ref": "#/$defs/address"},
                "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}}
            },
            "$defs": {
                "address": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {"city": {"type": "string"}}
                },
                "tag": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {"name": {"type": "string"}}
                }
            }
        });
        let payload = json!({
            "id": "u1",
            "legacy": true,
            "address": {"city": "Oslo", "zip": "0150"},
            "tags": [{"name": "a", "colour": "red"}]
        });
        assert_eq!(
            conform(&schema, &schema, &payload, 0),
            json!({
                "id": "u1",
                "channel": "email",
                "address": {"city": "Oslo"},
                "tags": [{"name": "a"}]
            })
        );
    }

    #[test]
    fn prefix_items_describe_the_first_elements_and_items_the_rest() {
        let closed = json!({"type": "object", "additionalProperties": false,
            "properties": {"id": {"type": "integer"}}});
        let schema = json!({"type": "array", "prefixItems": [{"type": "object"}],
            "items": closed});
        let payload = json!([{"meta": 1}, {"id": 1, "junk": 2}]);
        assert_eq!(
            conform(&schema, &schema, &payload, 0),
            json!([{"meta": 1}, {"id": 1}])
        );
    }

    #[test]
    fn an_open_object_keeps_its_undeclared_properties() {
        let schema = json!({"type": "object", "properties": {"id": {"type": "string"}}});
        let payload = json!({"id": "u1", "extra": 1});
        assert_eq!(conform(&schema, &schema, &payload, 0), payload);
    }

    #[test]
    fn a_ref_cycle_stops_at_the_depth_limit() {
        let schema = json!({"$ref": "#"});
        let payload = json!({"a": 1});
        assert_eq!(conform(&schema, &schema, &payload, 0), payload);
    }

    use crate::registry::{
        DispatcherDescriptor, EventDescriptor, HandlerKind, PayloadPolicyDescriptor,
        RetentionDescriptor, SubscriptionDescriptor, VersionDescriptor,
    };

    const SCHEMA: &str =
        r#"{"type":"object","required":["id"],"properties":{"id":{"type":"string"}}}"#;

    static CONSUMER: ConsumerDescriptor = ConsumerDescriptor {
        name: "c",
        handler: HandlerKind::Leased,
        mode: crate::registry::ConsumerMode::Off,
        per_key_ordering: false,
        retry_policy: "p",
        heartbeat_threshold_ms: 1,
        handler_timeout_ms: None,
        executor_class: None,
        subscriptions: &[SubscriptionDescriptor {
            event: "a.b",
            requirement: ">=1",
            versions: &["1.0.0"],
        }],
    };

    static SCOPED: Registry = Registry {
        project: "t",
        digest: "",
        events: &[EventDescriptor {
            name: "a.b",
            description: "",
            producer_class: "p",
            order_key: &[],
            deprecated: false,
            max_payload_bytes: 1024,
            versions: &[VersionDescriptor {
                version: "1.0.0",
                major: 1,
                schema: SCHEMA,
                schema_digest: "",
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
        retention: RetentionDescriptor::KEEP,
        payload_policy: PayloadPolicyDescriptor {
            denied_keys: &[],
            credential_key_names: &[],
            default_max_bytes: 1024,
            hard_max_bytes: 1024,
        },
        require_tenant_scope: true,
        dispatcher: DispatcherDescriptor::FORMAT_DEFAULTS,
    };

    fn candidate(version: &str, tenant: Option<&str>, payload: &str) -> Candidate {
        Candidate {
            event_id: Uuid::nil().to_string(),
            event_type: "a.b".to_owned(),
            schema_version: version.to_owned(),
            tenant_scope: tenant.map(str::to_owned),
            produced_at: 1_000.0,
            payload: payload.to_owned(),
        }
    }

    #[test]
    fn scope_version_and_schema_each_have_their_reason() {
        let as_of = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_001);
        let window = Window {
            as_of,
            limit: 10,
            purged_through: None,
        };
        let report = classify(
            &SCOPED,
            &CONSUMER,
            window,
            vec![
                candidate("1.0.0", None, r#"{"id":"x"}"#),
                candidate("2.0.0", Some("t1"), r#"{"id":"x"}"#),
                candidate("1.0.0", Some("t1"), r#"{"id":7}"#),
                candidate("1.0.0", Some("t1"), "not json"),
                candidate("1.0.0", Some("t1"), r#"{"id":"x"}"#),
            ],
        );
        let reasons: Vec<_> = report.items.iter().map(|i| (i.class, i.reason)).collect();
        assert_eq!(
            reasons,
            [
                (
                    InventoryClass::Quarantine,
                    Some(InventoryReason::ScopeMissing)
                ),
                (
                    InventoryClass::Quarantine,
                    Some(InventoryReason::VersionNotDeployed)
                ),
                (
                    InventoryClass::Quarantine,
                    Some(InventoryReason::SchemaInvalid)
                ),
                (
                    InventoryClass::Quarantine,
                    Some(InventoryReason::SchemaInvalid)
                ),
                (InventoryClass::Safe, None),
            ]
        );
        assert_eq!(report.items[3].payload_digest, sha256_hex(b"not json"));
    }

    #[test]
    fn an_event_older_than_the_purged_attempts_has_an_unknown_receipt() {
        let registry = Registry {
            retention: RetentionDescriptor {
                attempts_ms: Some(100_000),
                ..RetentionDescriptor::KEEP
            },
            ..SCOPED
        };
        let window = |purged_through| Window {
            as_of: SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(2_000),
            limit: 10,
            purged_through,
        };
        let classes = |window| {
            classify(
                &registry,
                &CONSUMER,
                window,
                vec![candidate("1.0.0", Some("t1"), r#"{"id":"x"}"#)],
            )
            .items[0]
                .reason
        };
        // Produced at 1000 s: a purge counting back from 1050 s removed attempts finished
        // before 950 s, which cannot be this event's; one from 1200 s could have.
        assert_eq!(classes(window(None)), None);
        assert_eq!(classes(window(Some(1_050.0))), None);
        assert_eq!(
            classes(window(Some(1_200.0))),
            Some(InventoryReason::ReceiptUnknown)
        );
    }

    #[test]
    fn a_claimed_repair_is_conformed_only_to_the_digest_it_was_decided_with() {
        let claimed = || crate::store::Claimed {
            lease: crate::Lease::new(Uuid::nil(), "c", "w", 1, 1, 0.0),
            delivery: crate::Delivery::new(Uuid::nil().to_string(), "a.b", "0.9.0", "c", 1),
            event_seq: 1,
            order_key: String::new(),
            payload: json!({"id": "x", "old": true}),
            trace: None,
        };
        let conformed = json!({"id": "x", "old": true});
        let digest = sha256_hex(canonical_json(&conformed).as_bytes());

        let mut plain = claimed();
        conform_claimed(&SCOPED, &mut plain, None, None).expect("no repair");
        assert_eq!(
            (&plain.delivery, &plain.payload),
            (&claimed().delivery, &claimed().payload)
        );

        // SCHEMA is open: conforming keeps `old`, and the digest matches.
        let mut repaired = claimed();
        conform_claimed(
            &SCOPED,
            &mut repaired,
            Some("1.0.0".to_owned()),
            Some(digest.clone()),
        )
        .expect("repairs");
        assert_eq!(
            (repaired.delivery.version.as_str(), &repaired.payload),
            ("1.0.0", &conformed)
        );

        for (target, digest) in [("1.0.0", "0".repeat(64)), ("3.0.0", digest)] {
            let refused = conform_claimed(
                &SCOPED,
                &mut claimed(),
                Some(target.to_owned()),
                Some(digest),
            );
            assert!(
                matches!(refused, Err(DispatchError::RepairUnavailable { .. })),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn rules_read_back_as_written() {
        let written = [
            InventoryRulesDescriptor {
                consumer: "b",
                max_age_ms: None,
                repair: InventoryRepair::Conform,
            },
            InventoryRulesDescriptor {
                consumer: "a",
                max_age_ms: Some(86_400_000),
                repair: InventoryRepair::None,
            },
        ];
        let read = rules_of(rules_value(&written)).expect("rules");
        assert_eq!(read, [written[1], written[0]]);
        assert!(rules_of(json!([{"consumer": "a", "repair": "rewrite"}])).is_err());
    }
}
