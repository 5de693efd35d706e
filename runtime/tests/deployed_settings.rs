//! The settings a database deploys: the settings migration writes the contracts' runtime
//! settings into the mirror, `deployed_registry` reads them back (so `evc dispatch` runs on the
//! contracts' settings, not on the format's defaults), changed settings deployed later
//! (`PgStore::install_settings`, as the settings migration of a changed `evc.yaml` writes them)
//! change what a store built on it accepts and how its dispatcher claims, and each worker's
//! heartbeat records where its settings came from.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use evc_runtime::{
    AppendError, AppendOptions, Console, DeliveryStatus, DispatchError, Dispatcher,
    DispatcherConfig, DispatcherDescriptor, HandlerError, OutgoingEvent, PayloadPolicyDescriptor,
    PgStore, Registry, Rejection, Store, StoreError, deployed_registry,
};
use evc_runtime::{BoxFuture, DynHandler, HandlerContext};
use sqlx::postgres::{PgPool, PgPoolOptions};
use support::{TestResult, trace, with_database, with_database_before};
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

/// Deploys `registry`'s runtime settings, as the settings migration of an `evc.yaml` changed to
/// them would.
async fn deploy_settings(
    pool: &PgPool,
    registry: Registry,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    PgStore::new(pool.clone(), registry)?
        .install_settings()
        .await?;
    Ok(())
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
        // The generated settings migration's recording reads back as the generated registry's.
        assert!(built.evidence_recording.is_some());
        assert_eq!(deployed.evidence_recording, built.evidence_recording);
        assert_eq!(deployed.require_tenant_scope, built.require_tenant_scope);
        assert_eq!(deployed.dispatcher, built.dispatcher);
        for consumer in built.consumers {
            assert_eq!(
                deployed
                    .consumer(consumer.name)
                    .map(|c| (c.handler_timeout_ms, c.executor_class)),
                Some((consumer.handler_timeout_ms, consumer.executor_class)),
                "{}",
                consumer.name
            );
        }
        // The executor classes too, the retired one included.
        assert!(!built.executor_classes.is_empty());
        assert_eq!(deployed.executor_classes, built.executor_classes);
        // And the schedules and lag thresholds, which `evc dispatch` runs.
        assert!(!built.schedules.is_empty() && !built.lag_thresholds.is_empty());
        assert_eq!(deployed.schedules, built.schedules);
        assert_eq!(deployed.lag_thresholds, built.lag_thresholds);
        // So an append through it is checked as the application's is: accepted.
        let appended = append_deployed(&pool, 1, AppendOptions::new()).await?;
        assert!(appended.is_ok(), "{appended:?}");
        Ok(())
    })
    .await
}

/// The console reads the deployed consumers' executor classes from the mirror the generated
/// migrations write, so `evc status` reports a worker's class and owner without a build of
/// the application.
#[tokio::test]
async fn the_console_reports_heartbeats_by_deployed_executor_class() -> TestResult {
    with_database(|pool| async move {
        let built = &evc_generated::REGISTRY;
        let consumer = built
            .consumers
            .iter()
            .find(|c| c.executor_class.is_some())
            .expect("a consumer on a class");
        let class = built.class_of(consumer.name).expect("its class");
        PgStore::new(pool.clone(), deployed_registry(&pool).await?)?
            .heartbeat(&[evc_runtime::Heartbeat::new("w/0", consumer.name, "")])
            .await?;
        let report = Console::connect(pool.clone())
            .await?
            .status(Duration::from_secs(60))
            .await?;
        let health = report
            .classes
            .iter()
            .find(|health| health.class.executor_class == class.name)
            .expect("the class is reported");
        assert_eq!(health.class.heartbeat_owner, class.heartbeat_owner);
        assert!(health.consumers.iter().any(|c| c == consumer.name));
        assert_eq!((health.workers, health.silent), (1, 0));
        // Every class a deployed consumer runs on, and no other.
        let mut expected: Vec<&str> = built
            .consumers
            .iter()
            .filter_map(|c| c.executor_class)
            .collect();
        expected.sort_unstable();
        expected.dedup();
        let reported: Vec<&str> = report
            .classes
            .iter()
            .map(|health| health.class.executor_class.as_str())
            .collect();
        assert_eq!(reported, expected);
        Ok(())
    })
    .await
}

/// Asserts that the database behind `pool` deploys no settings: the format's defaults, a
/// tenant scope required, and a hard cap of 0 that refuses every append.
async fn assert_no_settings(pool: &PgPool) -> TestResult {
    let deployed = deployed_registry(pool).await?;
    // An older database mirrors no executor classes (the twenty-second step), and the console
    // still connects to it.
    assert!(deployed.executor_classes.is_empty());
    let console = Console::connect(pool.clone()).await?;
    assert!(console.consumers().iter().all(|c| c.class.is_none()));
    assert_eq!(deployed.payload_policy.hard_max_bytes, 0);
    assert!(deployed.require_tenant_scope);
    assert_eq!(deployed.dispatcher, DispatcherDescriptor::FORMAT_DEFAULTS);
    assert!(
        deployed
            .consumers
            .iter()
            .all(|c| c.handler_timeout_ms.is_none()),
        "{:?}",
        deployed.consumers
    );
    // A store of this release refuses to start on it: its acks need the thirty-first step.
    let started = PgStore::start(pool.clone(), deployed).await;
    assert!(
        matches!(started, Err(StoreError::MissingStep { .. })),
        "{started:?}"
    );
    // Built without the start-up check, it refuses every append: the hard cap is 0.
    let store = PgStore::new(pool.clone(), deployed)?;
    let mut connection = pool.acquire().await?;
    let refused = store
        .append(
            &mut connection,
            born(1),
            AppendOptions::new().tenant_scope("t"),
        )
        .await;
    assert!(
        matches!(
            refused,
            Err(AppendError::Rejected(Rejection::Oversize { cap: 0, .. }))
        ),
        "{refused:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_database_without_the_settings_table_refuses_appends_and_has_the_format_defaults()
-> TestResult {
    // Migrations generated before the seventh runtime step: no settings table.
    with_database_before(Some("evc runtime v7"), |pool| async move {
        assert_no_settings(&pool).await
    })
    .await
}

#[tokio::test]
async fn a_database_without_the_settings_row_refuses_appends_and_has_the_format_defaults()
-> TestResult {
    // The seventh step applied, the settings migration not (yet): the table has no row.
    with_database_before(Some("evc settings"), |pool| async move {
        assert_no_settings(&pool).await
    })
    .await
}

#[tokio::test]
async fn installed_settings_are_the_settings_deployed_registry_reads() -> TestResult {
    with_database(|pool| async move {
        let built = evc_generated::REGISTRY;
        let consumers: Vec<_> = built
            .consumers
            .iter()
            .enumerate()
            .map(|(i, consumer)| evc_runtime::ConsumerDescriptor {
                // Every other consumer with a timeout of its own, the rest without one.
                handler_timeout_ms: (i % 2 == 0).then_some(1_000 + i as u64),
                executor_class: None,
                ..*consumer
            })
            .collect();
        let lag_thresholds = &[evc_runtime::LagThresholdDescriptor {
            consumer: "audit",
            producer_class: "dot",
            threshold_ms: 1_500,
        }];
        let changed = Registry {
            consumers: Box::leak(consumers.into_boxed_slice()),
            executor_classes: &[],
            schedules: &built.schedules[..1],
            lag_thresholds,
            payload_policy: PayloadPolicyDescriptor {
                denied_keys: &["secret", "it's"],
                credential_key_names: &["token"],
                default_max_bytes: 100,
                hard_max_bytes: 200,
            },
            require_tenant_scope: !built.require_tenant_scope,
            dispatcher: DispatcherDescriptor {
                batch_size: 7,
                lease_ms: 12_345,
                heartbeat_ms: 2_345,
                max_attempts: 4,
                backoff_ceiling_ms: 0,
            },
            ..built
        };
        assert_ne!(changed.dispatcher, built.dispatcher);
        deploy_settings(&pool, changed).await?;
        // Installing them again changes nothing.
        deploy_settings(&pool, changed).await?;

        let deployed = deployed_registry(&pool).await?;
        assert_eq!(deployed.payload_policy, changed.payload_policy);
        assert_eq!(deployed.require_tenant_scope, changed.require_tenant_scope);
        assert_eq!(deployed.dispatcher, changed.dispatcher);
        assert_eq!(deployed.schedules, changed.schedules);
        assert_eq!(deployed.lag_thresholds, changed.lag_thresholds);
        assert_eq!(deployed.evidence_recording, changed.evidence_recording);
        for consumer in changed.consumers {
            assert_eq!(
                deployed
                    .consumer(consumer.name)
                    .map(|c| c.handler_timeout_ms),
                Some(consumer.handler_timeout_ms),
                "{}",
                consumer.name
            );
        }
        // Settings installed later without schedules or thresholds leave the recorded ones
        // behind under the older digest, where no reader takes them.
        deploy_settings(
            &pool,
            Registry {
                schedules: &[],
                lag_thresholds: &[],
                cutover_gates: &[],
                inventory_rules: &[],
                evidence_recording: None,
                retention: evc_runtime::RetentionDescriptor::KEEP,
                ..changed
            },
        )
        .await?;
        let deployed = deployed_registry(&pool).await?;
        assert!(deployed.schedules.is_empty() && deployed.lag_thresholds.is_empty());
        assert_eq!(deployed.evidence_recording, None);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn changed_settings_rows_change_what_appends_pass() -> TestResult {
    with_database(|pool| async move {
        let built = evc_generated::REGISTRY;
        assert!(!built.require_tenant_scope);
        assert!(
            !built
                .payload_policy
                .denied_keys
                .contains(&"governance_state")
        );

        // A lowered hard cap.
        deploy_settings(
            &pool,
            Registry {
                executor_classes: &[],
                schedules: &[],
                lag_thresholds: &[],
                cutover_gates: &[],
                inventory_rules: &[],
                evidence_recording: None,
                retention: evc_runtime::RetentionDescriptor::KEEP,
                payload_policy: PayloadPolicyDescriptor {
                    hard_max_bytes: 64,
                    ..built.payload_policy
                },
                ..built
            },
        )
        .await?;
        let refused = append_deployed(&pool, 1, AppendOptions::new()).await?;
        assert!(
            matches!(
                refused,
                Err(AppendError::Rejected(Rejection::Oversize { cap: 64, .. }))
            ),
            "{refused:?}"
        );

        // The built cap again, and `envelope.require_tenant_scope: true`.
        deploy_settings(
            &pool,
            Registry {
                require_tenant_scope: true,
                ..built
            },
        )
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
        let mut denied_keys = built.payload_policy.denied_keys.to_vec();
        denied_keys.push("governance_state");
        deploy_settings(
            &pool,
            Registry {
                executor_classes: &[],
                schedules: &[],
                lag_thresholds: &[],
                cutover_gates: &[],
                inventory_rules: &[],
                evidence_recording: None,
                retention: evc_runtime::RetentionDescriptor::KEEP,
                payload_policy: PayloadPolicyDescriptor {
                    denied_keys: Box::leak(denied_keys.into_boxed_slice()),
                    ..built.payload_policy
                },
                ..built
            },
        )
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
        assert!(start.elapsed() < support::HANG, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployed_batch_size_bounds_a_claim_and_heartbeats_name_overrides() -> TestResult {
    with_database(|pool| async move {
        const CONSUMER: &str = "worker.notification.iu";
        let built = evc_generated::REGISTRY;
        deploy_settings(
            &pool,
            Registry {
                dispatcher: DispatcherDescriptor {
                    batch_size: 3,
                    ..built.dispatcher
                },
                ..built
            },
        )
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
