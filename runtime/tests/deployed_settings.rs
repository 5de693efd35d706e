//! The settings a database deploys: the settings migration writes the contracts' runtime
//! settings into the mirror, `deployed_registry` reads them back (so `evc dispatch` runs on the
//! contracts' settings, not on the format's defaults), a changed settings row changes what a
//! store built on it accepts and how its dispatcher claims, and each worker's heartbeat records
//! where its settings came from.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use evc_runtime::{
    AppendError, AppendOptions, Console, DeliveryStatus, DispatchError, Dispatcher,
    DispatcherConfig, HandlerError, OutgoingEvent, PgStore, Registry, Rejection, deployed_registry,
};
use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use sqlx::postgres::{PgPool, PgPoolOptions};
use support::{TestResult, trace, with_database};
use tokio::sync::Semaphore;

/// An `iu.born` 1.0.0 payload for unit `n`.
fn born(n: u64) -> OutgoingEvent {
    let payload = serde_json::json!({
        "born_at": "2026-01-01T00:00:00Z",
        "governance_state": "draft",
        "iu_unit_id": format!("01890a5d-ac96-774b-bcce-{n:012x}"),
        "iu_version_id": "01890a5d-ac96-774b-bcce-b302099a8058",
    });
    let key = evc_runtime::order_key_part(&payload["iu_unit_id"]);
    OutgoingEvent::new("iu.born", "1.0.0", Some(key), &trace(), &payload).expect("serializes")
}

/// Appends `born(n)` through a store on the registry the database deploys.
async fn append_deployed(
    pool: &PgPool,
    n: u64,
    options: AppendOptions,
) -> Result<Result<(), AppendError>, Box<dyn std::error::Error + Send + Sync>> {
    let store = PgStore::start(pool.clone(), deployed_registry(pool).await?).await?;
    let mut connection = pool.acquire().await?;
    Ok(store
        .append(&mut connection, born(n), options)
        .await
        .map(|_| ()))
}

#[tokio::test]
async fn the_mirror_carries_the_settings_the_application_is_built_with() -> TestResult {
    with_database(|pool| async move {
        let deployed = deployed_registry(&pool).await?;
        let built = &evc_generated::REGISTRY;
        assert_eq!(deployed.payload_policy, built.payload_policy);
        assert_eq!(deployed.require_tenant_scope, built.require_tenant_scope);
        assert_eq!(deployed.dispatcher, built.dispatcher);
        for consumer in built.consumers {
            assert_eq!(
                deployed
                    .consumer(consumer.name)
                    .map(|c| c.handler_timeout_ms),
                Some(consumer.handler_timeout_ms),
                "{}",
                consumer.name
            );
        }
        // So an append through it is checked as the application's is: accepted.
        let appended = append_deployed(&pool, 1, AppendOptions::new()).await?;
        assert!(appended.is_ok(), "{appended:?}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_database_without_settings_refuses_appends_and_has_the_format_defaults() -> TestResult {
    with_database(|pool| async move {
        sqlx::query("DROP TABLE evc_settings")
            .execute(&pool)
            .await?;
        let deployed = deployed_registry(&pool).await?;
        assert_eq!(deployed.payload_policy.hard_max_bytes, 0);
        assert!(deployed.require_tenant_scope);
        assert_eq!(
            deployed.dispatcher,
            evc_runtime::DispatcherDescriptor::FORMAT_DEFAULTS
        );
        let refused = append_deployed(&pool, 1, AppendOptions::new().tenant_scope("t")).await?;
        assert!(
            matches!(
                refused,
                Err(AppendError::Rejected(Rejection::Oversize { cap: 0, .. }))
            ),
            "{refused:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn changed_settings_rows_change_what_appends_pass() -> TestResult {
    with_database(|pool| async move {
        // A lowered hard cap, as a settings migration of a changed `evc.yaml` writes it.
        sqlx::query("UPDATE evc_settings SET hard_max_bytes = 64")
            .execute(&pool)
            .await?;
        let refused = append_deployed(&pool, 1, AppendOptions::new()).await?;
        assert!(
            matches!(
                refused,
                Err(AppendError::Rejected(Rejection::Oversize { cap: 64, .. }))
            ),
            "{refused:?}"
        );

        // `envelope.require_tenant_scope: true`.
        sqlx::query("UPDATE evc_settings SET hard_max_bytes = 65536, require_tenant_scope = true")
            .execute(&pool)
            .await?;
        let refused = append_deployed(&pool, 2, AppendOptions::new()).await?;
        assert!(
            matches!(
                refused,
                Err(AppendError::Rejected(Rejection::MissingTenantScope { .. }))
            ),
            "{refused:?}"
        );
        let with = append_deployed(&pool, 3, AppendOptions::new().tenant_scope("t-1")).await?;
        assert!(with.is_ok(), "{with:?}");

        // A newly denied key: `governance_state` is a field of the payload.
        sqlx::query(
            "UPDATE evc_settings SET require_tenant_scope = false, \
             denied_keys = denied_keys || ARRAY['governance_state']",
        )
        .execute(&pool)
        .await?;
        let refused = append_deployed(&pool, 4, AppendOptions::new()).await?;
        assert!(
            matches!(
                refused,
                Err(AppendError::Rejected(Rejection::ForbiddenKey { .. }))
            ),
            "{refused:?}"
        );
        Ok(())
    })
    .await
}

/// Holds every delivery until a permit is added.
struct Held(Arc<Semaphore>);

impl DynHandler for Held {
    fn handle<'a>(&'a self, _: HandlerContext<'a>) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let _permit = self.0.acquire().await;
            Ok(())
        })
    }
}

/// Leased deliveries of `consumer`.
async fn leased(store: &PgStore, consumer: &str) -> Result<u64, DispatchError> {
    store
        .count_deliveries(consumer, &[DeliveryStatus::Leased])
        .await
}

/// Waits until `done` holds (a hang guard of a minute, not a timing assertion).
async fn eventually<F, Fut>(what: &str, mut done: F) -> TestResult
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, Box<dyn std::error::Error + Send + Sync>>>,
{
    let start = Instant::now();
    while !done().await? {
        assert!(start.elapsed() < Duration::from_secs(60), "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployed_batch_size_bounds_a_claim_and_heartbeats_name_overrides() -> TestResult {
    with_database(|pool| async move {
        const CONSUMER: &str = "worker.notification.iu";
        sqlx::query("UPDATE evc_settings SET batch_size = 3")
            .execute(&pool)
            .await?;
        let options = (*pool.connect_options()).clone();
        let dispatch_pool = PgPoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await?;
        let registry: Registry = deployed_registry(&pool).await?;
        assert_eq!(registry.dispatcher.batch_size, 3);
        let store = PgStore::start(dispatch_pool, registry).await?;
        for n in 0..10 {
            let mut connection = pool.acquire().await?;
            store
                .append(&mut connection, born(n), AppendOptions::new())
                .await?;
        }

        // One worker whose first handler waits: the claim it made holds exactly one batch.
        let gate = Arc::new(Semaphore::new(0));
        let config = DispatcherConfig::from_registry(store.registry())
            .owner("deployed")
            .workers(1)
            .poll_interval(Duration::from_millis(20));
        let dispatcher =
            Dispatcher::new(store.clone(), config).consumer(CONSUMER, Held(Arc::clone(&gate)))?;
        assert!(dispatcher.overrides(CONSUMER).is_empty());
        let handle = dispatcher.start();
        eventually("a claim", || async {
            Ok(leased(&store, CONSUMER).await? > 0)
        })
        .await?;
        assert_eq!(
            leased(&store, CONSUMER).await?,
            3,
            "the deployed batch_size"
        );

        // Its heartbeat says the settings are the registry's.
        let console = Console::connect(pool.clone()).await?;
        eventually("a heartbeat", || async {
            Ok(!console
                .status(Duration::from_secs(60))
                .await?
                .workers
                .is_empty())
        })
        .await?;
        let workers = console.status(Duration::from_secs(60)).await?.workers;
        assert_eq!(workers.len(), 1);
        assert_eq!(workers[0].owner, format!("deployed/{CONSUMER}/0"));
        assert_eq!(workers[0].payload_policy.as_deref(), Some("registry"));
        assert_eq!(workers[0].dispatcher_overrides, Some(Vec::new()));
        assert!(!workers[0].overridden());
        gate.add_permits(1_000);
        handle.shutdown().await;

        // An explicit batch and handler timeout are overrides, and heartbeats say so.
        let config = DispatcherConfig::from_registry(store.registry())
            .owner("explicit")
            .workers(1)
            .batch(5)
            .handler_timeout(Some(Duration::from_secs(30)));
        let dispatcher =
            Dispatcher::new(store.clone(), config).consumer(CONSUMER, Held(Arc::clone(&gate)))?;
        assert_eq!(dispatcher.overrides(CONSUMER), ["batch", "handler_timeout"]);
        let handle = dispatcher.start();
        eventually("an overriding worker's heartbeat", || async {
            let workers = console.status(Duration::from_secs(60)).await?.workers;
            Ok(workers.iter().any(|w| w.owner.starts_with("explicit/")))
        })
        .await?;
        let workers = console.status(Duration::from_secs(60)).await?.workers;
        let explicit = workers
            .iter()
            .find(|w| w.owner.starts_with("explicit/"))
            .expect("the worker");
        assert_eq!(
            explicit.dispatcher_overrides,
            Some(vec!["batch".to_owned(), "handler_timeout".to_owned()])
        );
        assert!(explicit.overridden());
        handle.shutdown().await;
        Ok(())
    })
    .await
}
