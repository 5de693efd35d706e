//! The macros' output against a real PostgreSQL, in a throw-away database per test with the
//! generated migrations applied: a `#[derive(evc::Event)]` struct appends through
//! `Publish::emit` like a generated payload, and a `#[evc::consumer]` impl block receives its
//! deliveries through `Dispatcher::serve`.
//!
//! The server comes from `DATABASE_URL` (default `postgres://root@localhost/test`). When it
//! cannot be reached a test is skipped with a message, except under `CI=true`, where that is a
//! failure.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evc::sqlx::migrate::Migrator;
use evc::sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use evc::sqlx::{self, AssertSqlSafe, Connection};
use evc::uuid::Uuid;
use evc::{
    DeliveryStatus, Dispatcher, HandlerContext, HandlerError, PgStore, Publish, Store, TraceContext,
};
use evc_generated::payloads::{
    IuBornV1, IuBornV1GovernanceState, IuBornV2, IuBornV2Axes, IuBornV2GovernanceState,
    IuDeprecatedV1, IuDeprecatedV1ReasonCode, IuEditedV1, IuMergedV1, IuSplitApprovedV1,
    IuValidatedV1, ProposalApprovedV1, ProposalRejectedV1, StepEscalatedV1,
};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Deliveries not yet settled.
const OPEN: &[DeliveryStatus] = &[DeliveryStatus::Pending, DeliveryStatus::Leased];

const CONSUMER: &str = "worker.notification.iu";

/// `iu.born` 1.0.0, checked against the contract at compile time; ordered by `iu_unit_id`.
#[derive(evc::Event, serde::Serialize, serde::Deserialize, Debug, Clone)]
#[evc(event = "iu.born", version = "1.0.0")]
struct Born {
    iu_unit_id: Uuid,
    iu_version_id: Uuid,
    governance_state: String,
    born_at: evc::chrono::DateTime<evc::chrono::Utc>,
}

fn born(unit: Uuid) -> Born {
    Born {
        iu_unit_id: unit,
        iu_version_id: Uuid::now_v7(),
        governance_state: "draft".to_owned(),
        born_at: evc::chrono::Utc::now(),
    }
}

fn trace() -> TraceContext {
    TraceContext::new("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)
        .expect("valid trace context")
}

/// One handled delivery: the handler, the event id and the unit the payload named.
type Handled = (&'static str, String, Uuid);

/// What an attribute consumer saw.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Handled>>>);

impl Seen {
    fn record(&self, handler: &'static str, cx: &HandlerContext<'_>, unit: Uuid) {
        if let Ok(mut seen) = self.0.lock() {
            seen.push((handler, cx.delivery().event_id.clone(), unit));
        }
    }

    fn all(&self) -> Vec<Handled> {
        self.0.lock().map(|seen| seen.clone()).unwrap_or_default()
    }
}

struct Notifier {
    seen: Seen,
}

#[evc::consumer("worker.notification.iu")]
impl Notifier {
    async fn on_iu_born(
        &self,
        cx: &mut HandlerContext<'_>,
        payload: Born,
    ) -> Result<(), HandlerError> {
        self.seen.record("on_iu_born", cx, payload.iu_unit_id);
        Ok(())
    }

    async fn on_iu_deprecated(
        &self,
        cx: &mut HandlerContext<'_>,
        payload: IuDeprecatedV1,
    ) -> Result<(), HandlerError> {
        self.seen.record("on_iu_deprecated", cx, payload.iu_unit_id);
        Ok(())
    }

    async fn on_proposal_approved(
        &self,
        _cx: &mut HandlerContext<'_>,
        _payload: ProposalApprovedV1,
    ) -> Result<(), HandlerError> {
        Err(HandlerError::permanent("not_published_here"))
    }

    async fn on_proposal_rejected(
        &self,
        _cx: &mut HandlerContext<'_>,
        _payload: ProposalRejectedV1,
    ) -> Result<(), HandlerError> {
        Err(HandlerError::permanent("not_published_here"))
    }

    async fn on_step_escalated(
        &self,
        _cx: &mut HandlerContext<'_>,
        _payload: StepEscalatedV1,
    ) -> Result<(), HandlerError> {
        Err(HandlerError::permanent("not_published_here"))
    }
}

/// `worker.render.mout_view` subscribes to `iu.born@>=1,<3`; its `on_iu_born` reads major 1.
struct Renderer {
    seen: Seen,
}

#[evc::consumer("worker.render.mout_view")]
impl Renderer {
    async fn on_iu_born(
        &self,
        cx: &mut HandlerContext<'_>,
        payload: Born,
    ) -> Result<(), HandlerError> {
        self.seen.record("on_iu_born", cx, payload.iu_unit_id);
        Ok(())
    }

    async fn on_iu_edited(
        &self,
        _cx: &mut HandlerContext<'_>,
        _payload: IuEditedV1,
    ) -> Result<(), HandlerError> {
        Err(HandlerError::permanent("not_published_here"))
    }

    async fn on_iu_validated(
        &self,
        _cx: &mut HandlerContext<'_>,
        _payload: IuValidatedV1,
    ) -> Result<(), HandlerError> {
        Err(HandlerError::permanent("not_published_here"))
    }

    async fn on_iu_split_approved(
        &self,
        _cx: &mut HandlerContext<'_>,
        _payload: IuSplitApprovedV1,
    ) -> Result<(), HandlerError> {
        Err(HandlerError::permanent("not_published_here"))
    }

    async fn on_iu_merged(
        &self,
        _cx: &mut HandlerContext<'_>,
        _payload: IuMergedV1,
    ) -> Result<(), HandlerError> {
        Err(HandlerError::permanent("not_published_here"))
    }

    async fn on_iu_deprecated(
        &self,
        _cx: &mut HandlerContext<'_>,
        _payload: IuDeprecatedV1,
    ) -> Result<(), HandlerError> {
        Err(HandlerError::permanent("not_published_here"))
    }
}

#[tokio::test]
async fn a_derived_struct_is_emitted_with_the_contracts_order_key() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), evc_generated::REGISTRY)?;
        let unit = Uuid::now_v7();
        let derived = born(unit);
        let generated = IuBornV1::new(
            unit,
            Uuid::now_v7(),
            IuBornV1GovernanceState::Draft,
            evc::chrono::Utc::now(),
        );
        let mut tx = pool.begin().await?;
        let (from_derived, from_generated) = {
            let mut publisher = store.publisher(&mut tx);
            let a = publisher.emit(&trace(), &derived).await?;
            let b = publisher.emit(&trace(), &generated).await?;
            (a, b)
        };
        tx.commit().await?;
        assert!(from_derived.deliveries >= 1, "iu.born has subscribers");
        assert_eq!(from_derived.deliveries, from_generated.deliveries);

        let stored = store
            .event(from_derived.event_id)
            .await?
            .ok_or("the derived event is not stored")?;
        assert_eq!(
            (stored.event_type, stored.schema_version, stored.order_key),
            ("iu.born".to_owned(), "1.0.0".to_owned(), unit.to_string())
        );
        // The generated payload of the same unit takes the same path to the same key.
        let generated = store
            .event(from_generated.event_id)
            .await?
            .ok_or("the generated event is not stored")?;
        assert_eq!(generated.order_key, unit.to_string());
        Ok(())
    })
    .await
}

#[tokio::test]
async fn an_attribute_consumer_receives_its_events_through_serve() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), evc_generated::REGISTRY)?;
        let units = [Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7()];
        let mut expected = BTreeMap::new();
        let mut tx = pool.begin().await?;
        {
            let mut publisher = store.publisher(&mut tx);
            for unit in units {
                let receipt = publisher.emit(&trace(), &born(unit)).await?;
                expected.insert(receipt.event_id.to_string(), ("on_iu_born", unit));
            }
            let deprecated = IuDeprecatedV1::new(
                units[0],
                Uuid::now_v7(),
                IuDeprecatedV1ReasonCode::Superseded,
                evc::chrono::Utc::now(),
            );
            let receipt = publisher.emit(&trace(), &deprecated).await?;
            expected.insert(receipt.event_id.to_string(), ("on_iu_deprecated", units[0]));
        }
        tx.commit().await?;

        let seen = Seen::default();
        let handle = Dispatcher::from_registry(store.clone())
            .serve(Notifier { seen: seen.clone() })?
            .start();
        // Bounded wait for the work to be done; how long it takes is not asserted.
        let deadline = Instant::now() + Duration::from_secs(60);
        let open = loop {
            let open = store.count_deliveries(CONSUMER, OPEN).await?;
            if open == 0 || Instant::now() > deadline {
                break open;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let stats = handle.shutdown().await;
        assert_eq!(open, 0, "deliveries of {CONSUMER} still open");

        // Each event reached its typed handler once, with its payload decoded.
        let mut got = BTreeMap::new();
        for (handler, event_id, unit) in seen.all() {
            let previous = got.insert(event_id.clone(), (handler, unit));
            assert!(previous.is_none(), "{event_id} handled twice");
        }
        assert_eq!(got, expected);

        // Every delivery was acked exactly once, on its first attempt, and nothing else.
        for event_id in expected.keys() {
            let rows = store.attempts(event_id.parse()?, CONSUMER).await?;
            let rows: Vec<(&str, u32)> = rows
                .iter()
                .map(|row| (row.outcome.as_str(), row.attempt))
                .collect();
            assert_eq!(rows, [("acked", 1)], "{event_id}");
        }
        assert_eq!(stats.acked, expected.len() as u64);
        assert_eq!((stats.dead, stats.quarantined), (0, 0));
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_delivery_of_another_major_than_the_handlers_is_quarantined() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), evc_generated::REGISTRY)?;
        let (v1_unit, v2_unit) = (Uuid::now_v7(), Uuid::now_v7());
        let v2 = IuBornV2::new(
            v2_unit,
            Uuid::now_v7(),
            IuBornV2GovernanceState::Draft,
            evc::chrono::Utc::now(),
            IuBornV2Axes::new(Uuid::now_v7(), Uuid::now_v7()),
        );
        let mut tx = pool.begin().await?;
        let (v1_event, v2_event) = {
            let mut publisher = store.publisher(&mut tx);
            let a = publisher.emit(&trace(), &born(v1_unit)).await?;
            let b = publisher.emit(&trace(), &v2).await?;
            (a.event_id, b.event_id)
        };
        tx.commit().await?;

        let seen = Seen::default();
        let handle = Dispatcher::from_registry(store.clone())
            .serve(Renderer { seen: seen.clone() })?
            .start();
        let consumer = <Renderer as evc::Consumer>::NAME;
        let deadline = Instant::now() + Duration::from_secs(60);
        let open = loop {
            let open = store.count_deliveries(consumer, OPEN).await?;
            if open == 0 || Instant::now() > deadline {
                break open;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let stats = handle.shutdown().await;
        assert_eq!(open, 0, "deliveries of {consumer} still open");

        // Only the major-1 event reached the handler.
        let handled: Vec<Uuid> = seen.all().into_iter().map(|(_, _, unit)| unit).collect();
        assert_eq!(handled, [v1_unit]);
        let mut attempts = BTreeMap::new();
        for event_id in [v1_event, v2_event] {
            for row in store.attempts(event_id, consumer).await? {
                let previous = attempts.insert(event_id, (row.outcome, row.error_code));
                assert!(previous.is_none(), "{event_id}: more than one attempt");
            }
        }
        assert_eq!(
            attempts.remove(&v2_event),
            Some((
                "quarantined".to_owned(),
                Some("version_not_subscribed".to_owned())
            ))
        );
        assert_eq!(attempts.remove(&v1_event), Some(("acked".to_owned(), None)));
        assert!(attempts.is_empty(), "{attempts:?}");
        assert_eq!((stats.acked, stats.quarantined), (1, 1));
        Ok(())
    })
    .await
}

/// Runs `check` against a fresh database with the generated migrations applied, then drops the
/// database (also when `check` fails or panics).
async fn with_database<F, Fut>(check: F) -> TestResult
where
    F: FnOnce(PgPool) -> Fut + Send + 'static,
    Fut: Future<Output = TestResult> + Send + 'static,
{
    let url =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://root@localhost/test".into());
    let mut admin = match PgConnection::connect(&url).await {
        Ok(connection) => connection,
        Err(error) => {
            let ci = std::env::var("CI").is_ok_and(|value| value.eq_ignore_ascii_case("true"));
            assert!(
                !ci,
                "CI=true and PostgreSQL at {url} is unreachable: {error}"
            );
            eprintln!("skipped: PostgreSQL at {url} is unreachable ({error}); set DATABASE_URL");
            return Ok(());
        }
    };
    let database = format!("evc_facade_{}", Uuid::now_v7().simple());
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(&mut admin)
        .await?;
    let options = PgConnectOptions::from_str(&url)?.database(&database);
    // The checks run in their own task so a failed assertion still drops the database.
    let outcome = tokio::spawn(async move {
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await?;
        let migrations = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/migrations");
        Migrator::new(migrations.as_path())
            .await?
            .run(&pool)
            .await?;
        let result = check(pool.clone()).await;
        pool.close().await;
        result
    })
    .await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await?;
    admin.close().await?;
    match outcome {
        Ok(result) => result,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => Err(error.into()),
    }
}
