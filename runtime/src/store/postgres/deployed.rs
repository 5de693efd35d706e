//! The registry a database deploys, read back from its mirror: every event type, version,
//! consumer, subscription and retry policy whose rows carry the current registry digest, as a
//! [`Registry`]. A process that dispatches without the application's compiled registry
//! (`evc dispatch`) runs on it; the start-up parity check then compares like with like.
//!
//! The mirror holds no project settings (payload policy, envelope requirements, dispatcher
//! block): the registry read back has the contract format's dispatcher defaults and refuses
//! every append.

use sqlx::Row;
use sqlx::postgres::PgPool;

use super::sql;
use crate::registry::{
    ConsumerDescriptor, ConsumerMode, DispatcherDescriptor, EventDescriptor, HandlerKind,
    PayloadPolicyDescriptor, Registry, RetryPolicyDescriptor, SubscriptionDescriptor,
    VersionDescriptor,
};
use crate::store::DispatchError;

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

    let subscription_rows = sqlx::query(sql::DEPLOYED_SUBSCRIPTIONS)
        .fetch_all(pool)
        .await?;
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
            // The database's mirror does not hold it (outside the registry digest).
            handler_timeout_ms: None,
            subscriptions: leak_slice(subscriptions),
        });
    }

    Ok(Registry {
        project: "deployed",
        digest: leak(digest),
        events: leak_slice(events),
        consumers: leak_slice(consumers),
        retry_policies: leak_slice(retry_policies),
        // The mirror holds no project settings. Appends through this registry fail closed: a
        // hard cap of 0 refuses every payload, since the contracts' deny-list is not known.
        payload_policy: PayloadPolicyDescriptor {
            denied_keys: &[],
            credential_key_names: &[],
            default_max_bytes: 0,
            hard_max_bytes: 0,
        },
        require_tenant_scope: true,
        dispatcher: DispatcherDescriptor::FORMAT_DEFAULTS,
    })
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

fn leak(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

fn leak_slice<T>(items: Vec<T>) -> &'static [T] {
    Box::leak(items.into_boxed_slice())
}
