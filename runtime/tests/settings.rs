//! The contracts' runtime settings take effect: a store and a dispatcher started from a
//! registry apply its payload policy, envelope requirements and dispatcher block, each changed
//! here from the test registry as a changed `evc.yaml` changes the generated one
//! (`codegen/tests/settings.rs` checks that generation carries them).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use evc_runtime::{
    AppendError, AppendOptions, Dispatcher, DispatcherConfig, DispatcherDescriptor, HandlerError,
    PayloadPolicy, PayloadPolicyDescriptor, PgStore, PolicySource, Registry, Rejection,
};
use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use sqlx::postgres::{PgPool, PgPoolOptions};
use support::{
    DISPATCH_REGISTRY, REFERENCE_POLICY, TEST_REGISTRY, TestResult, event, note, statuses,
    with_database,
};

const NOTE_ID: &str = "01890a5d-ac96-774b-bcce-b302099a8057";

/// A `test.note` payload carrying `key` inside its free-form `meta`.
fn note_with(key: &str) -> serde_json::Value {
    serde_json::json!({"note_id": NOTE_ID, "meta": {key: "x"}})
}

/// Appends `payload` as `test.note` 1.0.0 through a store started from `registry`.
async fn append_with(
    pool: &PgPool,
    registry: Registry,
    payload: serde_json::Value,
    options: AppendOptions,
) -> Result<Result<(), AppendError>, Box<dyn std::error::Error + Send + Sync>> {
    let store = PgStore::start(pool.clone(), registry).await;
    // The test registry has no mirror rows, so start-up parity is not what is tested here:
    // build without it when it reports drift.
    let store = match store {
        Ok(store) => store,
        Err(_) => PgStore::new(pool.clone(), registry)?,
    };
    let mut connection = pool.acquire().await?;
    Ok(store
        .append(
            &mut connection,
            event("test.note", "1.0.0", payload),
            options,
        )
        .await
        .map(|_| ()))
}

#[tokio::test]
async fn a_key_newly_denied_by_the_contracts_is_refused() -> TestResult {
    with_database(|pool| async move {
        // The reference policy does not deny `internal_memo`: accepted.
        let accepted = append_with(
            &pool,
            TEST_REGISTRY,
            note_with("internal_memo"),
            AppendOptions::new(),
        )
        .await?;
        assert!(accepted.is_ok(), "{accepted:?}");

        // The application's contracts deny it (and not the reference project's `iu_body`).
        let registry = Registry {
            executor_classes: &[],
            schedules: &[],
            lag_thresholds: &[],
            cutover_gates: &[],
            inventory_rules: &[],
            evidence_recording: None,
            retention: evc_runtime::RetentionDescriptor::KEEP,
            payload_policy: PayloadPolicyDescriptor {
                denied_keys: &["internal_memo"],
                ..REFERENCE_POLICY
            },
            ..TEST_REGISTRY
        };
        let refused = append_with(
            &pool,
            registry,
            note_with("internalMemo"),
            AppendOptions::new(),
        )
        .await?;
        assert!(
            matches!(
                refused,
                Err(AppendError::Rejected(Rejection::ForbiddenKey { ref entry, .. }))
                    if entry == "internal_memo"
            ),
            "{refused:?}"
        );
        let reference_only =
            append_with(&pool, registry, note_with("iu_body"), AppendOptions::new()).await?;
        assert!(
            reference_only.is_ok(),
            "the reference deny-list applied: {reference_only:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_lowered_hard_cap_refuses_what_the_event_cap_allows() -> TestResult {
    with_database(|pool| async move {
        // 512 bytes is `test.note`'s own cap; this payload is about 100.
        let payload = note(NOTE_ID);
        let accepted =
            append_with(&pool, TEST_REGISTRY, payload.clone(), AppendOptions::new()).await?;
        assert!(accepted.is_ok(), "{accepted:?}");

        let registry = Registry {
            executor_classes: &[],
            schedules: &[],
            lag_thresholds: &[],
            cutover_gates: &[],
            inventory_rules: &[],
            evidence_recording: None,
            retention: evc_runtime::RetentionDescriptor::KEEP,
            payload_policy: PayloadPolicyDescriptor {
                hard_max_bytes: 64,
                ..REFERENCE_POLICY
            },
            ..TEST_REGISTRY
        };
        let refused = append_with(&pool, registry, payload, AppendOptions::new()).await?;
        assert!(
            matches!(
                refused,
                Err(AppendError::Rejected(Rejection::Oversize { cap: 64, .. }))
            ),
            "{refused:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn required_tenant_scope_refuses_an_append_without_one() -> TestResult {
    with_database(|pool| async move {
        let without =
            append_with(&pool, TEST_REGISTRY, note(NOTE_ID), AppendOptions::new()).await?;
        assert!(without.is_ok(), "not required: {without:?}");

        let registry = Registry {
            require_tenant_scope: true,
            ..TEST_REGISTRY
        };
        let reader = PgStore::new(pool.clone(), TEST_REGISTRY)?;
        let rejects_before = reader.rejects(u32::MAX).await?.len();
        let refused = append_with(&pool, registry, note(NOTE_ID), AppendOptions::new()).await?;
        assert!(
            matches!(
                refused,
                Err(AppendError::Rejected(Rejection::MissingTenantScope { .. }))
            ),
            "{refused:?}"
        );
        let empty = append_with(
            &pool,
            registry,
            note(NOTE_ID),
            AppendOptions::new().tenant_scope(""),
        )
        .await?;
        assert!(
            matches!(
                empty,
                Err(AppendError::Rejected(Rejection::MissingTenantScope { .. }))
            ),
            "an empty scope is none: {empty:?}"
        );
        // `*` names every tenant where a session sets its scope: no event belongs to it.
        let star = append_with(
            &pool,
            registry,
            note(NOTE_ID),
            AppendOptions::new().tenant_scope(evc_runtime::ALL_TENANTS),
        )
        .await?;
        assert!(
            matches!(
                star,
                Err(AppendError::Rejected(Rejection::ReservedTenantScope { .. }))
            ),
            "{star:?}"
        );
        // Recorded like every refusal, with its reason code.
        let codes: Vec<String> = reader
            .rejects(u32::MAX)
            .await?
            .into_iter()
            .skip(rejects_before)
            .map(|reject| reject.reason_code)
            .collect();
        assert_eq!(
            codes,
            [
                "missing_tenant_scope",
                "missing_tenant_scope",
                "reserved_tenant_scope"
            ]
        );

        let with = append_with(
            &pool,
            registry,
            note(NOTE_ID),
            AppendOptions::new().tenant_scope("tenant-7"),
        )
        .await?;
        assert!(with.is_ok(), "{with:?}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn the_store_reports_its_policy_and_an_override_replaces_it() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), TEST_REGISTRY)?;
        let (policy, source) = store.payload_policy();
        assert_eq!(source, PolicySource::Registry);
        assert_eq!(policy, &PayloadPolicy::from_registry(&TEST_REGISTRY));

        let store = PgStore::builder(pool.clone(), TEST_REGISTRY)
            .payload_policy(PayloadPolicy::new(["internal_memo"], ["token"], 65_536))
            .build()?;
        assert_eq!(store.payload_policy().1, PolicySource::Override);
        let mut connection = pool.acquire().await?;
        let refused = store
            .append(
                &mut connection,
                event("test.note", "1.0.0", note_with("internal_memo")),
                AppendOptions::new(),
            )
            .await;
        assert!(
            matches!(
                refused,
                Err(AppendError::Rejected(Rejection::ForbiddenKey { .. }))
            ),
            "{refused:?}"
        );
        // The registry's deny-list no longer applies.
        store
            .append(
                &mut connection,
                event("test.note", "1.0.0", note_with("iu_body")),
                AppendOptions::new(),
            )
            .await?;
        Ok(())
    })
    .await
}

/// A dispatch registry with a dispatcher block of its own.
static CHANGED_DISPATCHER: Registry = Registry {
    dispatcher: DispatcherDescriptor {
        batch_size: 7,
        lease_ms: 3_000,
        heartbeat_ms: 2_000,
        max_attempts: 2,
        backoff_ceiling_ms: 100,
    },
    ..DISPATCH_REGISTRY
};

#[tokio::test]
async fn the_dispatcher_block_configures_the_dispatcher_and_explicit_config_wins() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), CHANGED_DISPATCHER)?;
        let dispatcher = Dispatcher::from_registry(store.clone());
        let config = dispatcher.config();
        assert_eq!(config.batch, 7);
        assert_eq!(config.lease, Duration::from_secs(3));
        assert_eq!(config.heartbeat_interval, Duration::from_secs(2));
        assert_eq!(
            config.renew_every,
            Duration::from_secs(1),
            "a third of the lease"
        );

        let defaults = DispatcherConfig::from_registry(&DISPATCH_REGISTRY);
        assert_eq!(
            (defaults.batch, defaults.lease),
            (50, Duration::from_secs(30))
        );

        let explicit = DispatcherConfig::from_registry(store.registry()).batch(3);
        assert_eq!(Dispatcher::new(store, explicit).config().batch, 3);
        Ok(())
    })
    .await
}

/// Fails every delivery with a retryable error, counting the calls.
#[derive(Default)]
struct AlwaysFails {
    calls: AtomicU32,
}

impl DynHandler for AlwaysFails {
    fn handle<'a>(&'a self, _: HandlerContext<'a>) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Err(HandlerError::transient("unavailable"))
        })
    }
}

/// Runs `d.tx` (retry policy: 4 attempts, 200 ms apart) on one failing delivery until it is
/// dead, and returns how often the handler ran.
async fn attempts_until_dead(
    pool: &PgPool,
    registry: Registry,
) -> Result<u32, Box<dyn std::error::Error + Send + Sync>> {
    let options = (*pool.connect_options()).clone();
    let dispatch_pool = PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await?;
    let store = PgStore::new(dispatch_pool, registry)?;
    let mut connection = pool.acquire().await?;
    store
        .append(
            &mut connection,
            event(
                "test.note",
                "1.0.0",
                serde_json::json!({"note_id": support::note_key(1), "text": "fail"}),
            ),
            AppendOptions::new(),
        )
        .await?;
    let handler = Arc::new(AlwaysFails::default());
    let config = DispatcherConfig::from_registry(&registry)
        .owner("settings")
        .workers(1)
        .poll_interval(Duration::from_millis(20))
        .recovery_interval(Duration::from_millis(200))
        .seed(7);
    let handle = Dispatcher::new(store.clone(), config)
        .consumer("d.tx", Arc::clone(&handler))?
        .start();
    let start = Instant::now();
    while statuses(&store, "d.tx").await? != [("dead".to_owned(), 1)] {
        assert!(start.elapsed() < support::HANG, "never dead-lettered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    handle.shutdown().await;
    Ok(handler.calls.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatcher_max_attempts_caps_every_retry_policy() -> TestResult {
    with_database(|pool| async move {
        assert_eq!(attempts_until_dead(&pool, DISPATCH_REGISTRY).await?, 4);
        Ok(())
    })
    .await?;
    with_database(|pool| async move {
        assert_eq!(attempts_until_dead(&pool, CHANGED_DISPATCHER).await?, 2);
        Ok(())
    })
    .await
}
