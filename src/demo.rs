//! The end-to-end example's flow (`cargo run --example outbox`, docs/runtime.md, "Example: end
//! to end"): the generated producers append events in the caller's transaction, and a
//! generated consumer trait, served by its generated adapter, receives them from PostgreSQL.
//!
//! [`run`] creates a throw-away database on the server, applies `generated/migrations`,
//! verifies the registry, publishes, dispatches the `worker.notification.iu` consumer until its
//! deliveries are acked, and drops the database again.

use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evc::sqlx::migrate::Migrator;
use evc::sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use evc::sqlx::{self, AssertSqlSafe, Connection};
use evc::uuid::Uuid;
use evc::{Dispatcher, DispatcherConfig, HandlerContext, HandlerError, PgStore, TraceContext};
use evc_generated::consumers::{WorkerNotificationIu, WorkerNotificationIuConsumer};
use evc_generated::payloads::{
    IuBornV1, IuBornV1GovernanceState, IuDeprecatedV1, IuDeprecatedV1ReasonCode,
    ProposalApprovedV1, ProposalRejectedV1, StepEscalatedV1,
};
use evc_generated::producers::{emit_iu_born_v1, emit_iu_deprecated_v1};

/// Any error of the example.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The consumer the example serves.
pub const CONSUMER: &str = "worker.notification.iu";

/// What the example did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The throw-away database it used (dropped at the end).
    pub database: String,
    /// Events published and committed: `(event type, event id, deliveries)`.
    pub published: Vec<(String, Uuid, u32)>,
    /// Events in the database after a producer's transaction that was rolled back (0).
    pub after_rollback: i64,
    /// What the consumer did, one line per handled delivery.
    pub notifications: Vec<String>,
    /// Deliveries the dispatcher acked.
    pub acked: u64,
    /// Deliveries by `(consumer, state, count)` at the end: the delivery rows by status, and
    /// `acked` for the acked attempt rows (an ack deletes its delivery). Consumers the example
    /// does not serve keep theirs pending.
    pub deliveries: Vec<(String, String, i64)>,
}

/// The consumer: implements the generated trait of `worker.notification.iu`. A real one would
/// send mail; this one writes down what it would send.
#[derive(Debug, Default)]
pub struct Notifier {
    sent: Mutex<Vec<String>>,
}

impl Notifier {
    fn note(&self, line: String) {
        if let Ok(mut sent) = self.sent.lock() {
            sent.push(line);
        }
    }

    /// The notifications so far.
    pub fn sent(&self) -> Vec<String> {
        self.sent
            .lock()
            .map(|sent| sent.clone())
            .unwrap_or_default()
    }
}

impl WorkerNotificationIu for Notifier {
    async fn on_iu_born(
        &self,
        cx: &mut HandlerContext<'_>,
        payload: IuBornV1,
    ) -> Result<(), HandlerError> {
        self.note(format!(
            "attempt {}: unit {} born ({:?}), telling its owners",
            cx.delivery().attempt,
            payload.iu_unit_id,
            payload.governance_state
        ));
        Ok(())
    }

    async fn on_iu_deprecated(
        &self,
        cx: &mut HandlerContext<'_>,
        payload: IuDeprecatedV1,
    ) -> Result<(), HandlerError> {
        self.note(format!(
            "attempt {}: unit {} deprecated ({:?}), telling its readers",
            cx.delivery().attempt,
            payload.iu_unit_id,
            payload.reason_code
        ));
        Ok(())
    }

    async fn on_proposal_approved(
        &self,
        _cx: &mut HandlerContext<'_>,
        payload: ProposalApprovedV1,
    ) -> Result<(), HandlerError> {
        self.note(format!("proposal approved: {payload:?}"));
        Ok(())
    }

    async fn on_proposal_rejected(
        &self,
        _cx: &mut HandlerContext<'_>,
        payload: ProposalRejectedV1,
    ) -> Result<(), HandlerError> {
        self.note(format!("proposal rejected: {payload:?}"));
        Ok(())
    }

    async fn on_step_escalated(
        &self,
        _cx: &mut HandlerContext<'_>,
        payload: StepEscalatedV1,
    ) -> Result<(), HandlerError> {
        self.note(format!("step escalated: {payload:?}"));
        Ok(())
    }
}

/// Runs the example against the server at `url` (a throw-away database is created there and
/// dropped at the end, also when a step fails).
///
/// # Errors
/// When the server is unreachable or a step fails.
pub async fn run(url: &str) -> Result<Report, Error> {
    let mut admin = PgConnection::connect(url).await?;
    let database = format!("evc_example_{}", Uuid::now_v7().simple());
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(&mut admin)
        .await?;
    let options = PgConnectOptions::from_str(url)?.database(&database);
    let result = flow(options, database.clone()).await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await?;
    admin.close().await?;
    result
}

async fn flow(options: PgConnectOptions, database: String) -> Result<Report, Error> {
    let mut report = Report {
        database,
        ..Report::default()
    };
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await?;
    // The generated migrations create the outbox tables and the registry mirror.
    let migrations = Path::new(env!("CARGO_MANIFEST_DIR")).join("generated/migrations");
    Migrator::new(migrations.as_path())
        .await?
        .run(&pool)
        .await?;
    // Start-up parity: the database's registry must match the generated one.
    // The payload policy and envelope requirements come from the generated registry.
    let store = PgStore::new(pool.clone(), evc_generated::REGISTRY)?;
    store.verify_registry().await?;

    let trace = TraceContext::new("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)?;
    let units = [Uuid::now_v7(), Uuid::now_v7()];

    // A producer transaction that rolls back leaves nothing behind.
    let mut tx = pool.begin().await?;
    emit_iu_born_v1(&mut store.publisher(&mut tx), &trace, &born(Uuid::now_v7())).await?;
    tx.rollback().await?;
    report.after_rollback = sqlx::query_scalar("SELECT count(*) FROM evc_events")
        .fetch_one(&pool)
        .await?;

    // The producer's own writes would go on `tx` too; the events commit with them.
    let mut tx = pool.begin().await?;
    {
        let mut publisher = store.publisher(&mut tx);
        for unit in units {
            let receipt = emit_iu_born_v1(&mut publisher, &trace, &born(unit)).await?;
            report
                .published
                .push(("iu.born".to_owned(), receipt.event_id, receipt.deliveries));
        }
        let deprecated = IuDeprecatedV1::new(
            units[0],
            Uuid::now_v7(),
            IuDeprecatedV1ReasonCode::Superseded,
            evc::chrono::Utc::now(),
        )
        .with_superseded_by_unit_id(units[1]);
        let receipt = emit_iu_deprecated_v1(&mut publisher, &trace, &deprecated).await?;
        report.published.push((
            "iu.deprecated".to_owned(),
            receipt.event_id,
            receipt.deliveries,
        ));
    }
    tx.commit().await?;

    // The consumer: the generated adapter serves the trait implementation.
    let notifier = Arc::new(Notifier::default());
    let handle = Dispatcher::new(
        store.clone(),
        DispatcherConfig::default()
            .owner("example")
            .workers(1)
            .poll_interval(Duration::from_millis(100)),
    )
    .serve(WorkerNotificationIuConsumer(Arc::clone(&notifier)))?
    .start();
    let start = Instant::now();
    loop {
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM evc_deliveries WHERE consumer = $1 \
             AND status IN ('pending', 'leased')",
        )
        .bind(CONSUMER)
        .fetch_one(&pool)
        .await?;
        if open == 0 {
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            handle.shutdown().await;
            return Err(format!("{open} deliveries of {CONSUMER} still open after 30 s").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    report.acked = handle.shutdown().await.acked;
    report.notifications = notifier.sent();
    report.deliveries = sqlx::query_as(
        "SELECT consumer, status, count(*) FROM evc_deliveries GROUP BY 1, 2 \
         UNION ALL \
         SELECT consumer, 'acked', count(*) FROM evc_delivery_attempts WHERE outcome = 'acked' \
         GROUP BY 1 \
         ORDER BY 1, 2",
    )
    .fetch_all(&pool)
    .await?;
    pool.close().await;
    Ok(report)
}

fn born(unit: Uuid) -> IuBornV1 {
    IuBornV1::new(
        unit,
        Uuid::now_v7(),
        IuBornV1GovernanceState::Draft,
        evc::chrono::Utc::now(),
    )
    .with_axis_count(2)
}
