//! The tour (`cargo run`): the reference contracts end to end on one store, with no hand-written
//! glue. The generated producers append in the caller's transaction (a rolled-back one leaves
//! nothing), the dispatcher delivers to the generated consumer trait's implementation, one
//! delivery fails for good and is dead-lettered, the cause is fixed and an approved replay
//! delivers it again. The same function body runs on SQLite and on PostgreSQL ([`tour`] is
//! generic over the store).

use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evc::sqlx::migrate::Migrator;
use evc::sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use evc::sqlx::{self, AssertSqlSafe, Connection};
use evc::uuid::Uuid;
use evc::{
    AppendOptions, DeliveryStatus, Dispatcher, DispatcherConfig, HandlerContext, HandlerError,
    Operate, PgStore, ReplayApproval, ReplaySelection, SqliteStore, Store, TraceContext,
};
use evc_generated::consumers::{WorkerNotificationIu, WorkerNotificationIuConsumer};
use evc_generated::payloads::{
    IuBornV1, IuBornV1GovernanceState, IuDeprecatedV1, IuDeprecatedV1ReasonCode,
    ProposalApprovedV1, ProposalRejectedV1, StepEscalatedV1,
};
use evc_generated::producers::{emit_iu_born_v1, emit_iu_deprecated_v1};

/// Any error of the tour.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The consumer the tour serves.
pub const CONSUMER: &str = "worker.notification.iu";

/// How long the tour waits for the dispatcher to settle every delivery of [`CONSUMER`].
const SETTLE_LIMIT: Duration = Duration::from_secs(60);

/// What the tour did.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Report {
    /// Events in the outbox after a producer's transaction that was rolled back (0).
    pub after_rollback: u64,
    /// Events published and committed: `(event type, event id, deliveries)`.
    pub published: Vec<(String, Uuid, u32)>,
    /// What the consumer did, one line per handler run.
    pub notifications: Vec<String>,
    /// Deliveries acked by the first dispatch.
    pub acked: u64,
    /// The dead-lettered deliveries' events, with their last error code.
    pub dead: Vec<(Uuid, String)>,
    /// New deliveries the replay created.
    pub replayed: u64,
    /// Deliveries acked by the dispatch after the replay.
    pub acked_after_replay: u64,
    /// Deliveries of [`CONSUMER`] still pending, leased or dead at the end (0).
    pub open_at_end: u64,
}

/// The consumer: implements the generated trait of `worker.notification.iu` for any store. A
/// real one would send mail; this one writes down what it would send, and refuses the owners
/// of one unit until [`Notifier::fix`] (their mailbox rejects mail: a permanent failure).
#[derive(Debug, Default)]
pub struct Notifier {
    sent: Mutex<Vec<String>>,
    bouncing: Mutex<Option<Uuid>>,
}

impl Notifier {
    /// A notifier whose mail to the owners of `unit` bounces.
    pub fn bouncing_for(unit: Uuid) -> Self {
        Self {
            sent: Mutex::default(),
            bouncing: Mutex::new(Some(unit)),
        }
    }

    /// The mailbox accepts mail again.
    pub fn fix(&self) {
        if let Ok(mut bouncing) = self.bouncing.lock() {
            *bouncing = None;
        }
    }

    fn bounces(&self, unit: Uuid) -> bool {
        self.bouncing
            .lock()
            .is_ok_and(|bouncing| *bouncing == Some(unit))
    }

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

impl<S: Store> WorkerNotificationIu<S> for Notifier {
    async fn on_iu_born(
        &self,
        cx: &mut HandlerContext<'_, S>,
        payload: IuBornV1,
    ) -> Result<(), HandlerError> {
        let attempt = cx.delivery().attempt;
        if self.bounces(payload.iu_unit_id) {
            self.note(format!(
                "attempt {attempt}: unit {} born, mail to its owners bounced",
                payload.iu_unit_id
            ));
            return Err(HandlerError::permanent("mailbox_rejected"));
        }
        self.note(format!(
            "attempt {attempt}: unit {} born ({:?}), told its owners",
            payload.iu_unit_id, payload.governance_state
        ));
        Ok(())
    }

    async fn on_iu_deprecated(
        &self,
        cx: &mut HandlerContext<'_, S>,
        payload: IuDeprecatedV1,
    ) -> Result<(), HandlerError> {
        self.note(format!(
            "attempt {}: unit {} deprecated ({:?}), told its readers",
            cx.delivery().attempt,
            payload.iu_unit_id,
            payload.reason_code
        ));
        Ok(())
    }

    async fn on_proposal_approved(
        &self,
        _cx: &mut HandlerContext<'_, S>,
        payload: ProposalApprovedV1,
    ) -> Result<(), HandlerError> {
        self.note(format!("proposal {} approved", payload.proposal_id));
        Ok(())
    }

    async fn on_proposal_rejected(
        &self,
        _cx: &mut HandlerContext<'_, S>,
        payload: ProposalRejectedV1,
    ) -> Result<(), HandlerError> {
        self.note(format!("proposal {} rejected", payload.proposal_id));
        Ok(())
    }

    async fn on_step_escalated(
        &self,
        _cx: &mut HandlerContext<'_, S>,
        payload: StepEscalatedV1,
    ) -> Result<(), HandlerError> {
        self.note(format!("step {} escalated", payload.step_key));
        Ok(())
    }
}

/// Runs the tour on `store` (its schema in place, its registry verified), telling each step to
/// `say` as it happens.
///
/// # Errors
/// When a step fails, or the dispatcher does not settle the deliveries within a minute.
pub async fn tour<S: Store + Operate>(
    store: S,
    say: &mut (dyn FnMut(String) + Send),
) -> Result<Report, Error> {
    let mut report = Report::default();
    let trace = TraceContext::new("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)?;
    let units = [Uuid::now_v7(), Uuid::now_v7()];

    // A producer transaction that rolls back leaves nothing behind.
    let mut tx = store.begin().await?;
    emit_iu_born_v1(
        &mut store.publisher(&mut tx, AppendOptions::new()),
        &trace,
        &born(Uuid::now_v7()),
    )
    .await?;
    tx.rollback().await?;
    report.after_rollback = store.count_events(&[]).await?;
    say(format!(
        "[1/5] append: a producer transaction rolled back; events in the outbox: {}",
        report.after_rollback
    ));

    // The producer's own writes would go on `tx` too; the events commit with them.
    let mut tx = store.begin().await?;
    {
        let mut publisher = store.publisher(&mut tx, AppendOptions::new());
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
    for (event_type, event_id, count) in &report.published {
        say(format!(
            "[2/5] append: committed {event_type} {event_id} with {} (one per subscribed consumer)",
            deliveries(u64::from(*count))
        ));
    }

    // The consumer: the generated adapter serves the trait implementation. The owners of the
    // second unit have a mailbox that rejects mail.
    let notifier = Arc::new(Notifier::bouncing_for(units[1]));
    report.acked = dispatch(&store, &notifier).await?;
    let dead = store
        .dead_letters(&ReplaySelection::consumer(CONSUMER))
        .await?;
    report.dead = dead
        .iter()
        .map(|d| (d.event_id, d.last_error_code.clone().unwrap_or_default()))
        .collect();
    say(format!(
        "[3/5] dispatch: {CONSUMER} acked {}; dead-lettered {}",
        deliveries(report.acked),
        report.dead.len()
    ));
    for (event_id, code) in &report.dead {
        say(format!("      dead letter: event {event_id}, error {code}"));
    }

    // The mailbox is fixed; one operator proposes replaying what died, a second approves it.
    notifier.fix();
    let selection = ReplaySelection::consumer(CONSUMER);
    let plan = store.propose_replay(&selection, "alice").await?.plan;
    let approval = ReplayApproval::new(
        plan.digest.clone(),
        "mailbox accepts mail again",
        "tour",
        format!("tour-{}", units[1]),
        "bob",
    );
    let applied = store.replay(&selection, &approval).await?;
    report.replayed = applied.deliveries;
    say(format!(
        "[4/5] replay: plan {} ({}) proposed by alice, approved and applied by bob; it created {}",
        &plan.digest[..12.min(plan.digest.len())],
        deliveries(plan.deliveries.len() as u64),
        deliveries(report.replayed)
    ));

    report.acked_after_replay = dispatch(&store, &notifier).await?;
    report.notifications = notifier.sent();
    report.open_at_end = store
        .count_deliveries(
            CONSUMER,
            &[
                DeliveryStatus::Pending,
                DeliveryStatus::Leased,
                DeliveryStatus::Dead,
            ],
        )
        .await?;
    say(format!(
        "[5/5] dispatch: {CONSUMER} acked {} after the replay; open or dead now: {}",
        deliveries(report.acked_after_replay),
        report.open_at_end
    ));
    Ok(report)
}

/// Dispatches [`CONSUMER`] until none of its deliveries is pending or leased; returns how many
/// it acked.
async fn dispatch<S: Store>(store: &S, notifier: &Arc<Notifier>) -> Result<u64, Error> {
    let handle = Dispatcher::new(
        store.clone(),
        DispatcherConfig::default()
            .owner("tour")
            .workers(1)
            .poll_interval(Duration::from_millis(100)),
    )
    .serve(WorkerNotificationIuConsumer(Arc::clone(notifier)))?
    .start();
    let start = Instant::now();
    loop {
        let open = store
            .count_deliveries(CONSUMER, &[DeliveryStatus::Pending, DeliveryStatus::Leased])
            .await?;
        if open == 0 {
            break;
        }
        if start.elapsed() > SETTLE_LIMIT {
            handle.shutdown().await;
            return Err(
                format!("{open} deliveries of {CONSUMER} still open after a minute").into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(handle.shutdown().await.acked)
}

/// `n delivery` or `n deliveries`.
fn deliveries(n: u64) -> String {
    if n == 1 {
        "1 delivery".to_owned()
    } else {
        format!("{n} deliveries")
    }
}

fn born(unit: Uuid) -> IuBornV1 {
    IuBornV1::new(
        unit,
        Uuid::now_v7(),
        IuBornV1GovernanceState::Draft,
        evc::chrono::Utc::now(),
    )
}

/// Runs the tour on a SQLite outbox at `location` (a path or a `sqlite:` URL; created when
/// missing): the store applies its own schema and records the registry.
///
/// # Errors
/// When the file cannot be opened (another store holds it, say) or a step fails.
pub async fn on_sqlite(
    location: &str,
    say: &mut (dyn FnMut(String) + Send),
) -> Result<Report, Error> {
    let store = SqliteStore::open(location, evc_generated::REGISTRY).await?;
    say(format!(
        "outbox: SQLite file {} (WAL, one writer; schema applied by the store)",
        store.path().display()
    ));
    let report = tour(store.clone(), say).await;
    store.close().await;
    report
}

/// Runs the tour on the PostgreSQL server at `url`: a throw-away database is created there,
/// `generated/migrations` applied and the registry verified; the database is dropped at the end,
/// also when a step fails.
///
/// # Errors
/// When the server is unreachable or a step fails.
pub async fn on_postgres(url: &str, say: &mut (dyn FnMut(String) + Send)) -> Result<Report, Error> {
    let mut admin = PgConnection::connect(url).await?;
    let database = format!("evc_tour_{}", Uuid::now_v7().simple());
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(&mut admin)
        .await?;
    say(format!(
        "outbox: PostgreSQL database {database} (throw-away, dropped at the end)"
    ));
    let options = PgConnectOptions::from_str(url)?.database(&database);
    let result = async {
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await?;
        let migrations = Path::new(env!("CARGO_MANIFEST_DIR")).join("generated/migrations");
        Migrator::new(migrations.as_path())
            .await?
            .run(&pool)
            .await?;
        let store = PgStore::start(pool.clone(), evc_generated::REGISTRY).await?;
        let report = tour(store, say).await;
        pool.close().await;
        report
    }
    .await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await?;
    admin.close().await?;
    result
}
