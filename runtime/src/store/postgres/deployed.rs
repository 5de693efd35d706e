//! The registry a database deploys, read back from its mirror: every event type, version,
//! consumer, subscription and retry policy whose rows carry the current registry digest, as a
//! [`Registry`]. A process that dispatches without the application's compiled registry
//! (`evc dispatch`) runs on it; the start-up parity check then compares like with like.
//!
//! The project's runtime settings (payload policy, envelope requirements, dispatcher block,
//! handler timeouts) come from the settings row the settings migration wrote
//! (`NNNN_evc_settings_<digest12>.sql`). A database without one (migrations generated before
//! the seventh runtime step) yields the contract format's dispatcher defaults, no handler
//! timeouts and a payload policy that refuses every append.

use sqlx::Row;
use sqlx::postgres::PgPool;

use super::{PgStore, sql};
use crate::registry::{
    ConsumerDescriptor, ConsumerMode, CutoverGateDescriptor, DispatcherDescriptor, EventDescriptor,
    ExecutorClassDescriptor, HandlerKind, InventoryRulesDescriptor, LagThresholdDescriptor,
    PayloadPolicyDescriptor, Registry, RetentionDescriptor, RetryPolicyDescriptor,
    ScheduleDescriptor, SubscriptionDescriptor, VersionDescriptor,
};
use crate::store::retention::{retention_of, retention_value};
use crate::store::rows::{leak, leak_slice};
use crate::store::{DispatchError, StoreError};
use crate::store::{evidence, inventory, parity, rows, scheduling};

/// Reads the deployed registry of the database behind `pool`.
///
/// The registry's strings and lists are leaked: they live as long as the process, as the
/// compiled registry's do. Call it once per process.
///
/// # Errors
/// [`DispatchError::Database`] (also when the evc migrations were not applied), or
/// [`DispatchError::UnknownRetryPolicy`] when a consumer's policy is missing from the mirror.
pub async fn deployed_registry(pool: &PgPool) -> Result<Registry, DispatchError> {
    let digest: String = sqlx::query_scalar(sql::REGISTRY_DIGEST)
        .fetch_one(pool)
        .await?;

    let version_rows = sqlx::query(sql::DEPLOYED_VERSIONS).fetch_all(pool).await?;
    let mut events = Vec::new();
    for row in sqlx::query(sql::DEPLOYED_EVENT_TYPES)
        .fetch_all(pool)
        .await?
    {
        let name: String = row.try_get("name")?;
        let mut versions = Vec::new();
        for v in version_rows.iter() {
            if v.try_get::<String, _>("event_type")? != name {
                continue;
            }
            versions.push(VersionDescriptor {
                version: leak(v.try_get("version")?),
                major: u64::try_from(v.try_get::<i64, _>("major")?).unwrap_or(0),
                schema: leak(v.try_get("schema")?),
                schema_digest: leak(v.try_get("schema_digest")?),
            });
        }
        let order_key: Vec<String> = row.try_get("order_key")?;
        let status: String = row.try_get("status")?;
        events.push(EventDescriptor {
            name: leak(name),
            description: leak(row.try_get("description")?),
            producer_class: leak(row.try_get("producer_class")?),
            order_key: leak_slice(order_key.into_iter().map(leak).collect()),
            deprecated: status == "deprecated",
            max_payload_bytes: u32::try_from(row.try_get::<i64, _>("max_payload_bytes")?)
                .unwrap_or(u32::MAX),
            versions: leak_slice(versions),
        });
    }

    let mut retry_policies = Vec::new();
    for row in sqlx::query(sql::DEPLOYED_RETRY_POLICIES)
        .fetch_all(pool)
        .await?
    {
        let retry_on: Vec<String> = row.try_get("retry_on")?;
        retry_policies.push(RetryPolicyDescriptor {
            name: leak(row.try_get("name")?),
            kind: leak(row.try_get("kind")?),
            base_delay_ms: u64::try_from(row.try_get::<i64, _>("base_delay_ms")?).unwrap_or(0),
            max_delay_ms: row
                .try_get::<Option<i64>, _>("max_delay_ms")?
                .and_then(|ms| u64::try_from(ms).ok()),
            max_attempts: u32::try_from(row.try_get::<i64, _>("max_attempts")?).unwrap_or(1),
            jitter: leak(row.try_get("jitter")?),
            retry_on: leak_slice(retry_on.into_iter().map(leak).collect()),
        });
    }

    let (executor_classes, consumer_classes) = deployed_classes(pool).await?;
    let (schedules, lag_thresholds) = deployed_scheduling(pool).await?;
    let subscription_rows = sqlx::query(sql::DEPLOYED_SUBSCRIPTIONS)
        .fetch_all(pool)
        .await?;
    let settings = deployed_settings(pool).await?;
    let mut consumers = Vec::new();
    for row in sqlx::query(sql::DEPLOYED_CONSUMER_ROWS)
        .fetch_all(pool)
        .await?
    {
        let name: String = row.try_get("name")?;
        let policy: String = row.try_get("retry_policy")?;
        if !retry_policies.iter().any(|p| p.name == policy) {
            return Err(DispatchError::UnknownRetryPolicy {
                consumer: name,
                policy,
            });
        }
        let mut subscriptions = Vec::new();
        for s in subscription_rows.iter() {
            if s.try_get::<String, _>("consumer")? != name {
                continue;
            }
            let event: String = s.try_get("event_type")?;
            let requirement: String = s.try_get("requirement")?;
            let accepted = accepted_versions(&events, &event, &requirement);
            subscriptions.push(SubscriptionDescriptor {
                event: leak(event),
                requirement: leak(requirement),
                versions: leak_slice(accepted),
            });
        }
        let handler: String = row.try_get("handler")?;
        let ordering: String = row.try_get("ordering")?;
        let mode: String = row.try_get("mode")?;
        let handler_timeout_ms = settings
            .as_ref()
            .and_then(|s| s.handler_timeouts.get(name.as_str()))
            .and_then(serde_json::Value::as_u64);
        let executor_class = consumer_classes
            .iter()
            .find(|(consumer, _)| *consumer == name)
            .map(|(_, class)| *class);
        consumers.push(ConsumerDescriptor {
            name: leak(name),
            handler: if handler == "transactional" {
                HandlerKind::Transactional
            } else {
                HandlerKind::Leased
            },
            mode: ConsumerMode::parse(&mode).unwrap_or(ConsumerMode::Live),
            per_key_ordering: ordering == "per_key",
            retry_policy: leak(policy),
            heartbeat_threshold_ms: u64::try_from(row.try_get::<i64, _>("heartbeat_threshold_ms")?)
                .unwrap_or(0),
            handler_timeout_ms,
            executor_class,
            subscriptions: leak_slice(subscriptions),
        });
    }

    Ok(Registry {
        project: "deployed",
        digest: leak(digest),
        events: leak_slice(events),
        consumers: leak_slice(consumers),
        retry_policies: leak_slice(retry_policies),
        executor_classes: leak_slice(executor_classes),
        schedules,
        lag_thresholds,
        cutover_gates: deployed_gates(pool).await?,
        retention: deployed_retention(pool).await?,
        inventory_rules: deployed_inventory(pool).await?,
        evidence_recording: deployed_evidence(pool).await?,
        payload_policy: settings.as_ref().map_or(FAIL_CLOSED, |s| s.payload_policy),
        require_tenant_scope: settings.as_ref().is_none_or(|s| s.require_tenant_scope),
        dispatcher: settings
            .as_ref()
            .map_or(DispatcherDescriptor::FORMAT_DEFAULTS, |s| s.dispatcher),
    })
}

/// The deployed schedules and lag thresholds; none in a database before the twenty-fourth
/// step, or whose settings in force were written without them.
async fn deployed_scheduling(
    pool: &PgPool,
) -> Result<
    (
        &'static [ScheduleDescriptor],
        &'static [LagThresholdDescriptor],
    ),
    DispatchError,
> {
    let present: bool = sqlx::query_scalar(sql::HAS_LAG_BREACHES)
        .fetch_one(pool)
        .await?;
    if !present {
        return Ok((&[], &[]));
    }
    let Some(row) = sqlx::query(sql::DEPLOYED_SCHEDULING)
        .fetch_optional(pool)
        .await?
    else {
        return Ok((&[], &[]));
    };
    let parse = |column: &str| -> Result<serde_json::Value, DispatchError> {
        setting_json(&row.try_get::<String, _>(column)?, column)
    };
    let schedules = scheduling::schedules_of(parse("schedules")?).map_err(broken_setting)?;
    let thresholds = scheduling::thresholds_of(parse("lag_thresholds")?).map_err(broken_setting)?;
    Ok((schedules, thresholds))
}

/// The deployed cut-over gates; none in a database before the twenty-fifth step, or whose
/// settings in force were written without them.
async fn deployed_gates(pool: &PgPool) -> Result<&'static [CutoverGateDescriptor], DispatchError> {
    let gates = settings_column(
        pool,
        sql::HAS_CUTOVER,
        sql::DEPLOYED_GATES,
        "cutover_gates",
        scheduling::gates_of,
    );
    Ok(gates.await?.unwrap_or(&[]))
}

/// The deployed retention periods; none in a database before the twenty-sixth step, or whose
/// settings in force were written without them.
async fn deployed_retention(pool: &PgPool) -> Result<RetentionDescriptor, DispatchError> {
    let retention = settings_column(
        pool,
        sql::HAS_RETENTION,
        sql::DEPLOYED_RETENTION,
        "retention",
        retention_of,
    );
    Ok(retention.await?.unwrap_or(RetentionDescriptor::KEEP))
}

/// The deployed inventory rules; none in a database before the twenty-seventh step, or whose
/// settings in force were written without them.
async fn deployed_inventory(
    pool: &PgPool,
) -> Result<&'static [InventoryRulesDescriptor], DispatchError> {
    let rules = settings_column(
        pool,
        sql::HAS_INVENTORY,
        sql::DEPLOYED_INVENTORY,
        "inventory_rules",
        inventory::rules_of,
    );
    Ok(rules.await?.unwrap_or(&[]))
}

/// The deployed evidence recording; none in a database before the twenty-ninth step, or whose
/// settings in force were written without one.
async fn deployed_evidence(
    pool: &PgPool,
) -> Result<Option<crate::registry::EvidenceRecordingDescriptor>, DispatchError> {
    let recording = settings_column(
        pool,
        sql::HAS_EVIDENCE_RECORDING,
        sql::DEPLOYED_EVIDENCE,
        "evidence_recording",
        evidence::recording_of,
    );
    Ok(recording.await?.flatten())
}

/// A JSON column of the settings row that a later runtime step added, parsed by `parse`:
/// `None` when the step is not applied (`has` answers false) or the settings in force were
/// written without it (`read`, one text column, finds no row).
pub(super) async fn settings_column<T>(
    pool: &PgPool,
    has: &'static str,
    read: &'static str,
    column: &str,
    parse: impl FnOnce(serde_json::Value) -> Result<T, String>,
) -> Result<Option<T>, DispatchError> {
    let present: bool = sqlx::query_scalar(has).fetch_one(pool).await?;
    if !present {
        return Ok(None);
    }
    let Some(text) = sqlx::query_scalar::<_, String>(read)
        .fetch_optional(pool)
        .await?
    else {
        return Ok(None);
    };
    parse(setting_json(&text, column)?)
        .map(Some)
        .map_err(broken_setting)
}

/// The JSON of settings column `column`, read as `text`.
fn setting_json(text: &str, column: &str) -> Result<serde_json::Value, DispatchError> {
    serde_json::from_str(text).map_err(|_| broken_setting(format!("{column} is not JSON")))
}

/// A settings row the runtime cannot read: `what` says which column and why.
fn broken_setting(what: String) -> DispatchError {
    DispatchError::Database(sqlx::Error::Decode(format!("evc_settings: {what}").into()))
}

/// The names of the deployed schedules and the (consumer, producer class) of the deployed lag
/// thresholds ([`deployed_scheduling`]), for a console that should not leak a registry per
/// connection.
pub(super) async fn deployed_watched(
    pool: &PgPool,
) -> Result<(Vec<String>, Vec<(String, String)>), DispatchError> {
    let present: bool = sqlx::query_scalar(sql::HAS_LAG_BREACHES)
        .fetch_one(pool)
        .await?;
    if !present {
        return Ok((Vec::new(), Vec::new()));
    }
    let names: Vec<String> = sqlx::query_scalar(sql::DEPLOYED_SCHEDULE_NAMES)
        .fetch_one(pool)
        .await?;
    let pairs: Vec<(String, String)> = sqlx::query_as(sql::DEPLOYED_LAG_PAIRS)
        .fetch_all(pool)
        .await?;
    Ok((names, pairs))
}

/// The deployed executor classes, and the class of each consumer that names a deployed one;
/// both empty in a database without the classes' mirror (before the twenty-second step).
async fn deployed_classes(
    pool: &PgPool,
) -> Result<(Vec<ExecutorClassDescriptor>, Vec<(String, &'static str)>), DispatchError> {
    let present: bool = sqlx::query_scalar(sql::HAS_EXECUTOR_CLASSES)
        .fetch_one(pool)
        .await?;
    if !present {
        return Ok((Vec::new(), Vec::new()));
    }
    let mut classes = Vec::new();
    for row in sqlx::query(sql::DEPLOYED_EXECUTOR_CLASSES)
        .fetch_all(pool)
        .await?
    {
        classes.push(ExecutorClassDescriptor {
            name: leak(row.try_get("name")?),
            mutating: row.try_get("mutating")?,
            idempotency_namespace: leak(row.try_get("idempotency_namespace")?),
            heartbeat_owner: leak(row.try_get("heartbeat_owner")?),
            active: row.try_get("active")?,
        });
    }
    // In byte order, as the registry's lookups search them (the database's collation may
    // order names otherwise).
    classes.sort_by_key(|class| class.name);
    let mut consumer_classes = Vec::new();
    for row in sqlx::query(sql::DEPLOYED_CONSUMER_CLASSES)
        .fetch_all(pool)
        .await?
    {
        let class: String = row.try_get("executor_class")?;
        // A class that left the contracts keeps its row under an older digest; a consumer row
        // still naming it runs on no deployed class.
        if let Some(deployed) = classes.iter().find(|c| c.name == class) {
            consumer_classes.push((row.try_get("name")?, deployed.name));
        }
    }
    Ok((classes, consumer_classes))
}

/// The policy of a database without settings: the contracts' deny-list is not known, so a hard
/// cap of 0 refuses every payload.
const FAIL_CLOSED: PayloadPolicyDescriptor = PayloadPolicyDescriptor {
    denied_keys: &[],
    credential_key_names: &[],
    default_max_bytes: 0,
    hard_max_bytes: 0,
};

/// The settings row, read back.
struct DeployedSettings {
    payload_policy: PayloadPolicyDescriptor,
    require_tenant_scope: bool,
    dispatcher: DispatcherDescriptor,
    /// `{"<consumer>": <milliseconds>}`.
    handler_timeouts: serde_json::Map<String, serde_json::Value>,
}

/// The settings row; `None` when the database has no settings table or no row in it.
async fn deployed_settings(pool: &PgPool) -> Result<Option<DeployedSettings>, DispatchError> {
    let present: bool = sqlx::query_scalar(sql::HAS_SETTINGS)
        .fetch_one(pool)
        .await?;
    if !present {
        return Ok(None);
    }
    let Some(row) = sqlx::query(sql::DEPLOYED_SETTINGS)
        .fetch_optional(pool)
        .await?
    else {
        return Ok(None);
    };
    let denied_keys: Vec<String> = row.try_get("denied_keys")?;
    let credential_key_names: Vec<String> = row.try_get("credential_key_names")?;
    // The table's checks keep the numbers positive; larger than a field holds saturates.
    let u32_of = |column: &str| -> Result<u32, sqlx::Error> {
        Ok(u32::try_from(row.try_get::<i64, _>(column)?.max(0)).unwrap_or(u32::MAX))
    };
    let u64_of = |column: &str| -> Result<u64, sqlx::Error> {
        Ok(u64::try_from(row.try_get::<i64, _>(column)?).unwrap_or(0))
    };
    // A `jsonb` column holds JSON; anything but an object of numbers sets no timeout.
    let handler_timeouts: String = row.try_get("handler_timeouts")?;
    let handler_timeouts = match serde_json::from_str(&handler_timeouts) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    Ok(Some(DeployedSettings {
        payload_policy: PayloadPolicyDescriptor {
            denied_keys: leak_slice(denied_keys.into_iter().map(leak).collect()),
            credential_key_names: leak_slice(credential_key_names.into_iter().map(leak).collect()),
            default_max_bytes: u32_of("default_max_bytes")?,
            hard_max_bytes: u32_of("hard_max_bytes")?,
        },
        require_tenant_scope: row.try_get("require_tenant_scope")?,
        dispatcher: DispatcherDescriptor {
            batch_size: u32_of("batch_size")?,
            lease_ms: u64_of("lease_ms")?,
            heartbeat_ms: u64_of("heartbeat_ms")?,
            max_attempts: u32_of("max_attempts")?,
            backoff_ceiling_ms: u64_of("backoff_ceiling_ms")?,
        },
        handler_timeouts,
    }))
}

/// The versions of `event` that `requirement` accepts, ascending.
fn accepted_versions(
    events: &[EventDescriptor],
    event: &str,
    requirement: &str,
) -> Vec<&'static str> {
    events
        .iter()
        .filter(|e| e.name == event)
        .flat_map(|e| e.versions.iter())
        .filter(|v| crate::registry::accepts(requirement, v.version))
        .map(|v| v.version)
        .collect()
}

impl PgStore {
    /// Writes the store's registry into the database's registry mirror, as the generated
    /// registry migration (`NNNN_evc_registry_*.sql`) of the same registry would, in one
    /// transaction: upserts every retry policy, event type, version, consumer and subscription
    /// under the registry's digest, then makes that digest the deployed one. Rows of objects
    /// the registry lacks stay, under their older digest, so they are no longer deployed.
    ///
    /// For databases set up without `evc generate` migrations (a registry built in code, as
    /// tests build theirs); after it, [`PgStore::verify_registry`] finds no drift. What the
    /// compiled registry does not hold is written as: no description for consumers, the
    /// handler kind as the executor kind, no description for executor classes, and
    /// compatibility `unknown`. The runtime settings
    /// row (the settings migration) is not written: [`PgStore::install_settings`] writes it.
    ///
    /// # Errors
    /// [`StoreError::Database`] (nothing is written then).
    pub async fn install_registry(&self) -> Result<(), StoreError> {
        let registry = self.registry();
        let digest = registry.digest;
        let mut tx = self.pool().begin().await?;
        for policy in registry.retry_policies {
            sqlx::query(sql::INSTALL_RETRY_POLICY)
                .bind(policy.name)
                .bind(policy.kind)
                .bind(i64::try_from(policy.base_delay_ms).unwrap_or(i64::MAX))
                .bind(
                    policy
                        .max_delay_ms
                        .map(|ms| i64::try_from(ms).unwrap_or(i64::MAX)),
                )
                .bind(i32::try_from(policy.max_attempts).unwrap_or(i32::MAX))
                .bind(policy.jitter)
                .bind(policy.retry_on)
                .bind(digest)
                .execute(&mut *tx)
                .await?;
        }
        for event in registry.events {
            sqlx::query(sql::INSTALL_EVENT_TYPE)
                .bind(event.name)
                .bind(event.description)
                .bind(event.producer_class)
                .bind(event.order_key)
                .bind("unknown")
                .bind(if event.deprecated {
                    "deprecated"
                } else {
                    "active"
                })
                .bind(i32::try_from(event.max_payload_bytes).unwrap_or(i32::MAX))
                .bind(digest)
                .execute(&mut *tx)
                .await?;
            for version in event.versions {
                let (minor, patch) = semver::Version::parse(version.version)
                    .map_or((0, 0), |parsed| (parsed.minor, parsed.patch));
                sqlx::query(sql::INSTALL_EVENT_VERSION)
                    .bind(event.name)
                    .bind(version.version)
                    .bind(i64::try_from(version.major).unwrap_or(i64::MAX))
                    .bind(i64::try_from(minor).unwrap_or(i64::MAX))
                    .bind(i64::try_from(patch).unwrap_or(i64::MAX))
                    .bind(version.schema)
                    .bind(version.schema_digest)
                    .bind(digest)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        for consumer in registry.consumers {
            let handler = parity::handler_name(consumer.handler);
            sqlx::query(sql::INSTALL_CONSUMER)
                .bind(consumer.name)
                .bind("")
                .bind(handler)
                .bind(consumer.retry_policy)
                .bind(handler)
                .bind(if consumer.per_key_ordering {
                    "per_key"
                } else {
                    "none"
                })
                .bind(consumer.mode.as_str())
                .bind(i64::try_from(consumer.heartbeat_threshold_ms).unwrap_or(i64::MAX))
                .bind(digest)
                .execute(&mut *tx)
                .await?;
            for subscription in consumer.subscriptions {
                sqlx::query(sql::INSTALL_SUBSCRIPTION)
                    .bind(consumer.name)
                    .bind(subscription.event)
                    .bind(subscription.requirement)
                    .bind(digest)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        // Only a registry with classes needs the classes' mirror (the twenty-second step).
        for class in registry.executor_classes {
            sqlx::query(sql::INSTALL_EXECUTOR_CLASS)
                .bind(class.name)
                .bind(class.mutating)
                .bind(class.idempotency_namespace)
                .bind(class.heartbeat_owner)
                .bind(class.active)
                .bind(digest)
                .execute(&mut *tx)
                .await?;
        }
        for consumer in registry.consumers {
            if let Some(class) = consumer.executor_class {
                sqlx::query(sql::INSTALL_CONSUMER_CLASS)
                    .bind(consumer.name)
                    .bind(class)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        sqlx::query(sql::INSTALL_REGISTRY_DIGEST)
            .bind(digest)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Writes the store's registry's runtime settings into the database's settings row, as a
    /// generated settings migration (`NNNN_evc_settings_*.sql`) of the same settings would:
    /// the payload policy, the tenant-scope requirement, the dispatcher block and the
    /// consumers' handler timeouts, replacing the row whole (a row already holding them is not
    /// rewritten). [`deployed_registry`] then reads them back, so a process started on the
    /// deployed registry (`evc dispatch`) runs on these settings.
    ///
    /// For databases set up without `evc generate` migrations and for tests that deploy
    /// settings of their own (a registry built in code). It writes the registry's payload
    /// policy, not an override set with [`super::PgStoreBuilder::payload_policy`]. The
    /// `settings_digest` column gets the SHA-256 of the canonical JSON of the settings as the
    /// registry holds them: not the digest a generated file is named by, which covers
    /// `registry.json`'s settings (some of which the compiled registry does not carry); the
    /// runtime compares it only with the digest its schedules, lag thresholds, cut-over gates
    /// retention periods, inventory rules and evidence recording were recorded with. The row and those are written in one transaction.
    ///
    /// # Errors
    /// [`StoreError::Database`], also when the database lacks the settings table (the
    /// seventh runtime step, `NNNN_evc_runtime_v7.sql`, was not applied), or, for a registry
    /// with schedules or lag thresholds, their columns (the twenty-fourth step), with
    /// cut-over gates, theirs (the twenty-fifth), or with retention periods, theirs (the
    /// twenty-sixth), with inventory rules, theirs (the twenty-seventh), or with an evidence
    /// recording, its own (the twenty-ninth); nothing is written then.
    pub async fn install_settings(&self) -> Result<(), StoreError> {
        let registry = self.registry();
        let policy = &registry.payload_policy;
        let dispatcher = &registry.dispatcher;
        let mut handler_timeouts = serde_json::Map::new();
        for consumer in registry.consumers {
            if let Some(ms) = consumer.handler_timeout_ms {
                handler_timeouts.insert(consumer.name.to_owned(), serde_json::Value::from(ms));
            }
        }
        let handler_timeouts = crate::canonical_json(&serde_json::Value::Object(handler_timeouts));
        let schedules = scheduling::schedules_value(registry.schedules);
        let thresholds = scheduling::thresholds_value(registry.lag_thresholds);
        let scheduled = !registry.schedules.is_empty() || !registry.lag_thresholds.is_empty();
        let gated = !registry.cutover_gates.is_empty();
        let gates = scheduling::gates_value(registry.cutover_gates);
        let mut settings = serde_json::json!({
            "payload_policy": rows::payload_policy_document(policy),
            "require_tenant_scope": registry.require_tenant_scope,
            "dispatcher": rows::dispatcher_document(dispatcher),
            "handler_timeouts": handler_timeouts,
        });
        if scheduled {
            settings["schedules"] = schedules.clone();
            settings["lag_thresholds"] = thresholds.clone();
        }
        if gated {
            settings["cutover_gates"] = gates.clone();
        }
        let retained = !registry.retention.keeps_everything();
        let retention = retention_value(&registry.retention);
        if retained {
            settings["retention"] = retention.clone();
        }
        let inventoried = !registry.inventory_rules.is_empty();
        let inventory_rules = inventory::rules_value(registry.inventory_rules);
        if inventoried {
            settings["inventory_rules"] = inventory_rules.clone();
        }
        let recording = evidence::recording_value(registry.evidence_recording);
        if registry.evidence_recording.is_some() {
            settings["evidence"] = recording.clone();
        }
        let digest = crate::sha256_hex(crate::canonical_json(&settings).as_bytes());
        let bigint = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        let mut transaction = self.pool().begin().await?;
        sqlx::query(sql::INSTALL_SETTINGS)
            .bind(&digest)
            .bind(policy.denied_keys)
            .bind(policy.credential_key_names)
            .bind(i64::from(policy.default_max_bytes))
            .bind(i64::from(policy.hard_max_bytes))
            .bind(registry.require_tenant_scope)
            .bind(i64::from(dispatcher.batch_size))
            .bind(bigint(dispatcher.lease_ms))
            .bind(bigint(dispatcher.heartbeat_ms))
            .bind(i64::from(dispatcher.max_attempts))
            .bind(bigint(dispatcher.backoff_ceiling_ms))
            .bind(handler_timeouts)
            .execute(&mut *transaction)
            .await?;
        if scheduled {
            sqlx::query(sql::INSTALL_SCHEDULING)
                .bind(schedules.to_string())
                .bind(thresholds.to_string())
                .bind(&digest)
                .execute(&mut *transaction)
                .await?;
        }
        if gated {
            sqlx::query(sql::INSTALL_GATES)
                .bind(gates.to_string())
                .bind(&digest)
                .execute(&mut *transaction)
                .await?;
        }
        if retained {
            sqlx::query(sql::INSTALL_RETENTION)
                .bind(retention.to_string())
                .bind(&digest)
                .execute(&mut *transaction)
                .await?;
        }
        if inventoried {
            sqlx::query(sql::INSTALL_INVENTORY)
                .bind(inventory_rules.to_string())
                .bind(&digest)
                .execute(&mut *transaction)
                .await?;
        }
        if registry.evidence_recording.is_some() {
            sqlx::query(sql::INSTALL_EVIDENCE)
                .bind(recording.to_string())
                .bind(&digest)
                .execute(&mut *transaction)
                .await?;
        }
        transaction.commit().await?;
        Ok(())
    }
}
