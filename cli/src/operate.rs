//! `evc status`, `evc timeline` and `evc consumer`: the operator commands, a thin shell over
//! `evc_runtime::Console` on PostgreSQL (the consumers deployed in the database, from its
//! registry mirror) and over `evc_runtime::SqliteStore` on SQLite (the registry the outbox file
//! records). Also what every database command shares: the URL and its scheme, the first
//! connection, the [`Operator`].

use std::fmt::Write as _;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand, ValueEnum};
use evc_runtime::{
    AttemptTotals, Console, ConsumerMode, ConsumerState, CutoverReport, DispatchError, Observe,
    Operate, Percentiles, Proposed, ReplayApplied, ReplayApproval, ReplayError, ReplayPlan,
    ReplaySelection, Role, RoleCheck, SettledDelivery, SqliteOpenError, SqliteStore, StateChange,
    StatusReport, TenantScope, TimelineEntry,
};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection};

use evc_codegen::printable::escape;

/// How long the first connection may take. A refused connection fails at once; this bounds a
/// host that does not answer at all.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a busy pool may make a query wait for a connection, once the database answered.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest `--window` of `evc status`: ten years of attempts is already all of them, and a
/// much longer one overflows PostgreSQL's `interval`.
const MAX_WINDOW: Duration = Duration::from_secs(3_650 * 86_400);

/// Where the outbox lives.
#[derive(Args)]
pub(crate) struct Database {
    /// The outbox: a PostgreSQL URL, or `sqlite:PATH` for an outbox file (default:
    /// `$DATABASE_URL`).
    #[arg(long, value_name = "URL", global = true)]
    database_url: Option<String>,

    /// Work on one tenant's rows only (default: every tenant): PostgreSQL's row-level
    /// security, or the SQLite store's own filters (docs/runtime.md, "Tenants").
    #[arg(long, value_name = "TENANT", global = true)]
    tenant: Option<String>,
}

impl Database {
    /// The URL: `--database-url`, else `$DATABASE_URL`.
    fn url(&self) -> anyhow::Result<String> {
        match &self.database_url {
            Some(url) => Ok(url.clone()),
            None => std::env::var("DATABASE_URL")
                .context("no database: pass --database-url or set DATABASE_URL"),
        }
    }

    /// `--tenant`, if given.
    pub(crate) fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }

    /// The outbox the URL names, by its scheme: the one place the commands tell the stores
    /// apart. Either works on the rows of `--tenant`, or of every tenant. Errors never repeat
    /// the URL: it may hold a password.
    pub(crate) fn outbox(&self) -> anyhow::Result<Outbox> {
        let url = self.url()?;
        let scope = match &self.tenant {
            Some(tenant) => TenantScope::only(tenant.as_str()).context("--tenant")?,
            None => TenantScope::all(),
        };
        if url.starts_with("sqlite:") {
            return Ok(Outbox::Sqlite(url, scope));
        }
        let scheme = url.split_once("://").map(|(scheme, _)| scheme);
        if !matches!(scheme, Some("postgres" | "postgresql")) {
            bail!("the database URL must start with postgres://, postgresql:// or sqlite:");
        }
        PgConnectOptions::from_str(&url)
            .map(|options| Outbox::Postgres(Box::new(scope.connect_options(options))))
            .map_err(|error| anyhow!("the database URL is not valid: {}", cause(&error)))
    }
}

/// The outbox a database URL names.
pub(crate) enum Outbox {
    /// A PostgreSQL database, by its connection settings.
    Postgres(Box<PgConnectOptions>),
    /// A SQLite outbox file, by its `sqlite:` URL (no password in it), and the tenants a
    /// command works for.
    Sqlite(String, TenantScope),
}

/// Opens the SQLite outbox at `location` on the registry it records, with up to
/// `max_connections`, working for `scope`: never creates a file (docs/cli.md, "SQLite
/// outboxes").
pub(crate) async fn open_sqlite(
    location: &str,
    scope: &TenantScope,
    max_connections: u32,
) -> anyhow::Result<SqliteStore> {
    SqliteStore::recorded(location)
        .max_connections(max_connections)
        .open()
        .await
        .map(|store| store.scoped(scope))
        .map_err(|error| match error {
            SqliteOpenError::Locked { .. } => anyhow!(error).context(
                "cannot open the outbox file: a SQLite outbox has one store at a time; stop the \
                 application (or the other evc command) that holds it",
            ),
            SqliteOpenError::NotAnOutbox { .. } | SqliteOpenError::Missing { .. } => anyhow!(error)
                .context(
                    "cannot open the outbox file (evc migrate creates one; the application's \
                     first open records its registry)",
                ),
            error => anyhow!(error).context("cannot open the outbox file"),
        })
}

/// What a command refuses on a SQLite outbox, naming the command.
pub(crate) fn not_on_sqlite(what: &str) -> anyhow::Error {
    anyhow!(
        "{what} is not available on a SQLite outbox: the SQLite store does not offer it \
         (docs/runtime.md, \"SQLite store\")"
    )
}

/// The operator commands over either store: the console of a PostgreSQL database, or a
/// SQLite store opened on the registry its file records.
pub(crate) enum Operator {
    /// A PostgreSQL database.
    Postgres(Console),
    /// A SQLite outbox file.
    Sqlite(SqliteStore),
}

impl Operator {
    /// The consumers commands may name, by name.
    pub(crate) fn consumers(&self) -> Vec<String> {
        match self {
            Self::Postgres(console) => console.consumers().iter().map(|c| c.name.clone()).collect(),
            Self::Sqlite(store) => store
                .registry()
                .consumers
                .iter()
                .map(|c| c.name.to_owned())
                .collect(),
        }
    }

    /// The PostgreSQL console, for what only it offers (`what` names the command).
    pub(crate) fn console(&self, what: &str) -> anyhow::Result<&Console> {
        match self {
            Self::Postgres(console) => Ok(console),
            Self::Sqlite(_) => Err(not_on_sqlite(what)),
        }
    }

    pub(crate) async fn status(&self, window: Duration) -> Result<StatusReport, DispatchError> {
        match self {
            Self::Postgres(console) => console.status(window).await,
            Self::Sqlite(store) => store.status(window).await,
        }
    }

    /// Every attempt since the store was set up (reads the whole attempts table).
    pub(crate) async fn attempt_totals(&self) -> Result<Vec<AttemptTotals>, DispatchError> {
        match self {
            Self::Postgres(console) => console.attempt_totals().await,
            Self::Sqlite(store) => store.attempt_totals().await,
        }
    }

    pub(crate) async fn timeline(
        &self,
        trace_id: &str,
    ) -> Result<Vec<TimelineEntry>, DispatchError> {
        match self {
            Self::Postgres(console) => console.timeline(trace_id).await,
            Self::Sqlite(store) => store.timeline(trace_id).await,
        }
    }

    pub(crate) async fn consumer_state(
        &self,
        consumer: &str,
    ) -> Result<ConsumerState, DispatchError> {
        match self {
            Self::Postgres(console) => console.consumer_state(consumer).await,
            Self::Sqlite(store) => store.consumer_state(consumer).await,
        }
    }

    pub(crate) async fn pause(
        &self,
        consumer: &str,
        change: &StateChange,
    ) -> Result<ConsumerState, DispatchError> {
        match self {
            Self::Postgres(console) => console.pause(consumer, change).await,
            Self::Sqlite(store) => store.pause(consumer, change).await,
        }
    }

    pub(crate) async fn resume(
        &self,
        consumer: &str,
        change: &StateChange,
    ) -> Result<ConsumerState, DispatchError> {
        match self {
            Self::Postgres(console) => console.resume(consumer, change).await,
            Self::Sqlite(store) => store.resume(consumer, change).await,
        }
    }

    pub(crate) async fn set_mode(
        &self,
        consumer: &str,
        mode: ConsumerMode,
        change: &StateChange,
    ) -> Result<ConsumerState, DispatchError> {
        match self {
            Self::Postgres(console) => console.set_mode(consumer, mode, change).await,
            Self::Sqlite(store) => store.set_mode(consumer, mode, change).await,
        }
    }

    pub(crate) async fn cutover_report(
        &self,
        consumer: &str,
    ) -> Result<CutoverReport, DispatchError> {
        match self {
            Self::Postgres(console) => console.cutover_report(consumer).await,
            Self::Sqlite(store) => store.cutover_report(consumer).await,
        }
    }

    pub(crate) async fn explain_difference(
        &self,
        consumer: &str,
        event_id: uuid::Uuid,
        change: &StateChange,
    ) -> Result<CutoverReport, DispatchError> {
        match self {
            Self::Postgres(console) => console.explain_difference(consumer, event_id, change).await,
            Self::Sqlite(store) => store.explain_difference(consumer, event_id, change).await,
        }
    }

    pub(crate) async fn dead_letters(
        &self,
        selection: &ReplaySelection,
    ) -> Result<Vec<SettledDelivery>, DispatchError> {
        match self {
            Self::Postgres(console) => console.dead_letters(selection).await,
            Self::Sqlite(store) => store.dead_letters(selection).await,
        }
    }

    pub(crate) async fn replay_plan(
        &self,
        selection: &ReplaySelection,
    ) -> Result<ReplayPlan, ReplayError> {
        match self {
            Self::Postgres(console) => console.replay_plan(selection).await,
            Self::Sqlite(store) => store.replay_plan(selection).await,
        }
    }

    pub(crate) async fn propose_replay(
        &self,
        selection: &ReplaySelection,
        planned_by: &str,
    ) -> Result<Proposed<ReplayPlan>, ReplayError> {
        match self {
            Self::Postgres(console) => console.propose_replay(selection, planned_by).await,
            Self::Sqlite(store) => store.propose_replay(selection, planned_by).await,
        }
    }

    pub(crate) async fn replay(
        &self,
        selection: &ReplaySelection,
        approval: &ReplayApproval,
    ) -> Result<ReplayApplied, ReplayError> {
        match self {
            Self::Postgres(console) => console.replay(selection, approval).await,
            Self::Sqlite(store) => store.replay(selection, approval).await,
        }
    }
}

/// The innermost message of a sqlx error: sqlx repeats its source in its own message, so the
/// whole chain would say everything twice.
fn cause(error: &sqlx::Error) -> String {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        message = inner.to_string();
        source = inner.source();
    }
    message
}

/// `host:port/database` (or the socket path), to say which database did not answer; never
/// the user's password.
fn target(options: &PgConnectOptions) -> String {
    let database = options.get_database().unwrap_or(options.get_username());
    match options.get_socket() {
        Some(socket) => format!("{}/{database}", socket.display()),
        None => format!("{}:{}/{database}", options.get_host(), options.get_port()),
    }
}

/// One connection to the outbox database. Connection errors come back at once with their
/// cause (a pool would retry a refused connection until its acquire timeout and then report
/// only the timeout).
pub(crate) async fn connect(options: &PgConnectOptions) -> anyhow::Result<PgConnection> {
    let failed = || {
        format!(
            "cannot connect to the outbox database at {}",
            target(options)
        )
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, options.connect()).await {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(error)) => Err(anyhow!("{}", cause(&error))).with_context(failed),
        Err(_) => {
            Err(anyhow!("no answer within {} s", CONNECT_TIMEOUT.as_secs())).with_context(failed)
        }
    }
}

/// A pool of up to `max_connections` on the outbox database whose connections take `role`,
/// the group role of the command's job (docs/runtime.md, "Roles"), after one connection proved
/// that the database answers ([`connect`]) and that the login can take the role. A login that
/// may not take it is refused: the command stops. Where the role is not in place (it does not
/// exist, or has no grants in this database), the pool runs with the login's own privileges
/// and says so on standard error.
pub(crate) async fn pool(
    options: &PgConnectOptions,
    max_connections: u32,
    role: Role,
) -> anyhow::Result<PgPool> {
    // The first connection checks the role; the pool opens its own as it needs them.
    let mut first = connect(options).await?;
    let check = role.check(&mut first).await;
    let _ = first.close().await;
    let options = match check.context("cannot read the database's roles")? {
        RoleCheck::Ready => role.connect_options(options.clone()),
        RoleCheck::NotMember { login } => bail!(
            "{login} may not take role {role}, which this command's job needs: \
             GRANT {role} TO {login} (docs/runtime.md, \"Roles\")",
            login = escape(&login)
        ),
        missing => {
            let why = match missing {
                RoleCheck::Missing => "it does not exist (the migrating role could not create it)",
                _ => "it has no grants in this database",
            };
            eprintln!(
                "warning: running with {}'s own privileges, not role {role}: {why} \
                 (docs/runtime.md, \"Roles\")",
                escape(options.get_username()),
            );
            options.clone()
        }
    };
    Ok(PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_lazy_with(options))
}

#[derive(Subcommand)]
pub(crate) enum ConsumerAction {
    /// Stop claiming the consumer's deliveries; they wait, in order.
    Pause {
        /// The consumer.
        consumer: String,
        #[command(flatten)]
        change: ChangeArgs,
    },
    /// Claim the consumer's deliveries again.
    Resume {
        /// The consumer.
        consumer: String,
        #[command(flatten)]
        change: ChangeArgs,
    },
    /// Override the consumer's mode (`off` claims nothing, like a pause).
    Mode {
        /// The consumer.
        consumer: String,
        /// The mode.
        #[arg(value_enum)]
        mode: ModeArg,
        #[command(flatten)]
        change: ChangeArgs,
    },
    /// Show the consumer's operator state.
    Show {
        /// The consumer.
        consumer: String,
    },
    /// Judge the consumer's shadow runs against its cut-over gate: how many were compared
    /// with the legacy path's outcome, how they differ, and why a move to `live` would be
    /// refused. Exit 100 when the gate does not pass.
    Gate {
        /// The consumer.
        consumer: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = GateFormat::Text)]
        format: GateFormat,
    },
    /// Explain the difference between the consumer's shadow run of an event and the legacy
    /// path's outcome: the gate no longer counts it.
    Explain {
        /// The consumer.
        consumer: String,
        /// The event whose difference is explained.
        event_id: uuid::Uuid,
        #[command(flatten)]
        change: ChangeArgs,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum GateFormat {
    /// The counts, the shortfalls and the differences, for people.
    Text,
    /// One JSON document, for scripts.
    Json,
}

/// Who changes a consumer's state and why: recorded with the change.
#[derive(Args)]
pub(crate) struct ChangeArgs {
    /// The person making the change (a login).
    #[arg(long = "as", value_name = "PERSON")]
    person: String,
    /// Why (1 to 500 characters).
    #[arg(long, value_name = "TEXT")]
    reason: String,
}

impl ChangeArgs {
    fn change(&self) -> StateChange {
        StateChange::new(&self.person, &self.reason)
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum ModeArg {
    Off,
    Shadow,
    Live,
}

impl From<ModeArg> for ConsumerMode {
    fn from(mode: ModeArg) -> Self {
        match mode {
            ModeArg::Off => Self::Off,
            ModeArg::Shadow => Self::Shadow,
            ModeArg::Live => Self::Live,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum StatusFormat {
    /// Problems first, then a table per consumer, for people.
    Text,
    /// Prometheus / OpenMetrics text, for scrapers and dashboards.
    Prometheus,
    /// One JSON document, for scripts.
    Json,
}

/// `evc status` settings.
pub(crate) struct StatusArgs {
    pub(crate) database: Database,
    pub(crate) window: String,
    pub(crate) lag_limit: String,
    pub(crate) format: StatusFormat,
}

/// `text` as a duration in the contracts' notation; the error names `flag`.
pub(crate) fn duration(text: &str, flag: &str) -> anyhow::Result<Duration> {
    evc_codegen::duration::parse(text).ok_or_else(|| {
        anyhow!(
            "{flag} \"{}\" is not a duration (like 30s, 5m, 1h)",
            escape(text)
        )
    })
}

/// A single-threaded async runtime for one command.
pub(crate) fn async_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Runs `work` with an operator on the outbox of `database`, connected as `role` on
/// PostgreSQL ([`Role::Reader`] or [`Role::Operator`]).
pub(crate) fn with_operator<T>(
    database: &Database,
    role: Role,
    work: impl AsyncFnOnce(&Operator) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    operator_run(database, role, work)
}

/// Runs `work` with an operator connected as [`Role::Approver`], whose PostgreSQL console emits
/// the lifecycle events of replays and discards through a store on the deployed registry and
/// its settings (docs/runtime.md, "Lifecycle events"); the SQLite store emits none.
pub(crate) fn with_approver<T>(
    database: &Database,
    work: impl AsyncFnOnce(&Operator) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    operator_run(database, Role::Approver, work)
}

fn operator_run<T>(
    database: &Database,
    role: Role,
    work: impl AsyncFnOnce(&Operator) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let lifecycle = role == Role::Approver;
    let options = match database.outbox()? {
        Outbox::Postgres(options) => options,
        Outbox::Sqlite(location, scope) => {
            return async_runtime()?.block_on(async move {
                let store = open_sqlite(&location, &scope, 2).await?;
                let operator = Operator::Sqlite(store.clone());
                let result = work(&operator).await;
                drop(operator);
                store.close().await;
                result
            });
        }
    };
    async_runtime()?.block_on(async move {
        let pool = pool(&options, 2, role).await?;
        let mut console = Console::connect(pool.clone())
            .await
            .context("cannot read the registry mirror (are the evc migrations applied?)")?;
        if lifecycle {
            let registry = evc_runtime::deployed_registry(&pool)
                .await
                .context("cannot read the deployed registry (are the evc migrations applied?)")?;
            let store = evc_runtime::PgStore::new(pool.clone(), registry)
                .context("the deployed registry does not load")?;
            console = console.with_lifecycle(store);
        }
        let result = work(&Operator::Postgres(console)).await;
        pool.close().await;
        result
    })
}

/// `evc status`: exit 100 when there are problems.
pub(crate) fn status(args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let window = duration(&args.window, "--window")?;
    if window > MAX_WINDOW {
        bail!(
            "--window {} is longer than {}, the longest window evc status reads",
            escape(&args.window),
            evc_codegen::duration::format(MAX_WINDOW)
        );
    }
    let lag_limit = duration(&args.lag_limit, "--lag-limit")?;
    let metrics = matches!(args.format, StatusFormat::Prometheus);
    let report = with_operator(&args.database, Role::Reader, async |operator| {
        let report = operator.status(window).await?;
        Ok(if metrics {
            report.with_totals(operator.attempt_totals().await?)
        } else {
            report
        })
    })?;
    let problems = report.problems(lag_limit);
    let text = match args.format {
        StatusFormat::Prometheus => report.prometheus(),
        StatusFormat::Text => status_text(&report, &args.window, lag_limit),
        StatusFormat::Json => status_json(&report, &problems),
    };
    print!("{text}");
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::EXIT_FINDINGS)
    })
}

fn status_text(report: &StatusReport, window: &str, lag_limit: Duration) -> String {
    let mut out = String::new();
    let problems = report.problems(lag_limit);
    if problems.is_empty() {
        out.push_str("no problems\n");
    } else {
        let _ = writeln!(out, "problems ({}):", problems.len());
        for problem in &problems {
            let _ = writeln!(out, "  {}", escape(&problem.to_string()));
        }
    }
    let width = report
        .consumers
        .iter()
        .map(|c| escape(&c.consumer).chars().count())
        .max()
        .unwrap_or(0)
        .max("consumer".len());
    let _ = writeln!(
        out,
        "\n{:width$}  {:>8}  {:>7}  {:>6}  {:>11}  {:>14}  {:6}  paused",
        "consumer", "pending", "leased", "dead", "quarantined", "oldest pending", "mode"
    );
    for c in &report.consumers {
        let oldest = c.oldest_pending.map_or_else(
            || "-".to_owned(),
            |age| format!("{:.1} s", age.as_secs_f64()),
        );
        let _ = writeln!(
            out,
            "{:width$}  {:>8}  {:>7}  {:>6}  {:>11}  {:>14}  {:6}  {}",
            escape(&c.consumer),
            c.pending,
            c.leased,
            c.dead,
            c.quarantined,
            oldest,
            c.mode.as_str(),
            if c.paused { "yes" } else { "no" }
        );
    }
    if !report.lag.is_empty() {
        let _ = writeln!(
            out,
            "\nlag, produce to ack (p50 / p95 / p99, last {window}):"
        );
        for lag in &report.lag {
            let what = format!(
                "{} -> {}",
                escape(&lag.producer_class),
                escape(&lag.consumer)
            );
            percentile_line(&mut out, &what, &lag.latency, "acks");
        }
    }
    if !report.classes.is_empty() {
        let _ = writeln!(out, "\nexecutor classes (heartbeats):");
        for class in &report.classes {
            let _ = writeln!(
                out,
                "  {} (owner {}): {} worker{}, {} silent; {}",
                escape(&class.class.executor_class),
                escape(&class.class.heartbeat_owner),
                class.workers,
                if class.workers == 1 { "" } else { "s" },
                class.silent,
                escape(&class.consumers.join(", "))
            );
        }
    }
    if !report.workers.is_empty() {
        let _ = writeln!(out, "\nworkers (where their settings came from):");
        for worker in &report.workers {
            let _ = writeln!(
                out,
                "  {} {}: payload policy {}, dispatcher {}",
                escape(&worker.consumer),
                escape(&worker.owner),
                escape(worker.payload_policy.as_deref().unwrap_or("unknown")),
                dispatcher_source(worker.dispatcher_overrides.as_deref())
            );
        }
    }
    if !report.relays.is_empty() {
        let _ = writeln!(out, "\nrelays:");
        for relay in &report.relays {
            let cursor = &relay.cursor;
            let holder = if relay.held {
                format!("held by {}", escape(&cursor.owner))
            } else {
                "not held".to_owned()
            };
            let _ = writeln!(
                out,
                "  {}: {holder}, {} behind, published {} ({:.0}/s), failed rounds {}{}",
                escape(&cursor.name),
                relay.behind_text(),
                cursor.published,
                relay.rate_per_s(),
                cursor.failed_rounds,
                cursor
                    .failing
                    .as_deref()
                    .map_or_else(String::new, |error| format!(", failing: {}", escape(error)))
            );
        }
    }
    if !report.lag_breaches.is_empty() {
        let _ = writeln!(out, "\nlag breaches (open):");
        for breach in &report.lag_breaches {
            let _ = writeln!(
                out,
                "  {} <- {}: over {} (breach {}, {} when it opened)",
                escape(&breach.consumer),
                escape(&breach.producer_class),
                millis_text(breach.threshold_ms),
                breach.id,
                millis_text(breach.lag_ms)
            );
        }
    }
    if !report.cutover_gates.is_empty() {
        let _ = writeln!(
            out,
            "\ncut-over gates (`evc consumer gate NAME` judges the differences):"
        );
        for progress in &report.cutover_gates {
            let gate = &progress.gate;
            let since = if progress.since.is_some() {
                "since the move to shadow"
            } else {
                "in all"
            };
            let _ = writeln!(
                out,
                "  {}: {} of {} compared deliveries over {} ({} shadow runs {since})",
                escape(&progress.consumer),
                progress.compared,
                gate.min_reconciled,
                gate.min_span_text(),
                progress.shadow_runs
            );
        }
    }
    for applied in &report.last_inventories {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |since| since.as_secs_f64());
        let ago_ms = (now - applied.applied_at).max(0.0).round() as i64 * 1000;
        let counts = &applied.counts;
        let _ = writeln!(
            out,
            "\nlast inventory of {}: {} ({} safe, {} repaired, {} quarantined, {} expired), {} \
             ago, approved by {} ({})",
            escape(&applied.consumer),
            applied.inventory_id,
            counts.safe,
            counts.repair,
            counts.quarantine,
            counts.expire,
            millis_text(ago_ms),
            escape(&applied.approved_by),
            escape(&applied.reason)
        );
    }
    for purge in &report.last_purges {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |since| since.as_secs_f64());
        let ago_ms = (now - purge.purged_at).max(0.0).round() as i64 * 1000;
        let _ = writeln!(
            out,
            "\nlast purge: {} ({}), {} ago by {}: {} rows ({})",
            purge.purge_id,
            escape(&purge.ledger),
            millis_text(ago_ms),
            escape(&purge.actor),
            purge.total(),
            escape(&purge.reason)
        );
    }
    if !report.schedules.is_empty() {
        let _ = writeln!(out, "\nschedules:");
        for schedule in &report.schedules {
            let state = &schedule.state;
            let _ = writeln!(
                out,
                "  {} ({}, {}): {} tick{}, {} skipped; last slot {}; next {}{}",
                escape(&state.name),
                escape(&state.cron),
                escape(&state.event),
                state.ticks,
                if state.ticks == 1 { "" } else { "s" },
                state.skipped,
                schedule
                    .last_slot_text()
                    .unwrap_or_else(|| "none".to_owned()),
                schedule
                    .next_slot_text()
                    .unwrap_or_else(|| "none".to_owned()),
                if schedule.overdue.is_zero() {
                    String::new()
                } else {
                    format!(", overdue {:.0} s", schedule.overdue.as_secs_f64())
                }
            );
        }
    }
    if !report.attempts.is_empty() {
        let _ = writeln!(out, "\nattempt duration (p50 / p95 / p99, last {window}):");
        for attempts in &report.attempts {
            percentile_line(
                &mut out,
                &escape(&attempts.consumer),
                &attempts.latency,
                "attempts",
            );
        }
    }
    out
}

/// Milliseconds written like the contracts' durations (`2m`, `1500ms`).
fn millis_text(ms: i64) -> String {
    evc_codegen::duration::format(std::time::Duration::from_millis(
        u64::try_from(ms).unwrap_or(0),
    ))
}

/// Where a worker's settings came from, as `evc status` writes it: `registry`, `override`, or
/// `override (batch, lease)`; `unknown` for a process that does not record it.
fn dispatcher_source(overrides: Option<&[String]>) -> String {
    match overrides {
        None => "unknown".to_owned(),
        Some([]) => "registry".to_owned(),
        Some(names) => format!("override ({})", escape(&names.join(", "))),
    }
}

/// The report as one JSON document (durations in seconds).
fn status_json(report: &StatusReport, problems: &[evc_runtime::Problem]) -> String {
    let percentiles = |p: &Percentiles| {
        serde_json::json!({
            "samples": p.samples,
            "p50_s": p.p50.as_secs_f64(),
            "p95_s": p.p95.as_secs_f64(),
            "p99_s": p.p99.as_secs_f64(),
        })
    };
    let document = serde_json::json!({
        "problems": problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "consumers": report.consumers.iter().map(|c| serde_json::json!({
            "consumer": c.consumer,
            "pending": c.pending,
            "leased": c.leased,
            "dead": c.dead,
            "quarantined": c.quarantined,
            "oldest_pending_s": c.oldest_pending.map(|age| age.as_secs_f64()),
            "mode": c.mode.as_str(),
            "paused": c.paused,
            "stale_rejections": c.stale_rejections,
        })).collect::<Vec<_>>(),
        "lag": report.lag.iter().map(|l| serde_json::json!({
            "producer_class": l.producer_class,
            "consumer": l.consumer,
            "latency": percentiles(&l.latency),
        })).collect::<Vec<_>>(),
        "attempts": report.attempts.iter().map(|a| serde_json::json!({
            "consumer": a.consumer,
            "latency": percentiles(&a.latency),
        })).collect::<Vec<_>>(),
        "rejects": report.rejects.iter().map(|r| serde_json::json!({
            "event_type": r.event_type,
            "reason_code": r.reason_code,
            "rejects": r.rejects,
            "newest": r.newest,
        })).collect::<Vec<_>>(),
        "silent_workers": report.silent_workers.iter().map(|w| serde_json::json!({
            "owner": w.owner,
            "consumer": w.consumer,
            "silent_for_s": w.silent_for.as_secs_f64(),
            "threshold_s": w.threshold.as_secs_f64(),
            "executor_class": w.class.as_ref().map(|c| &c.executor_class),
            "heartbeat_owner": w.class.as_ref().map(|c| &c.heartbeat_owner),
        })).collect::<Vec<_>>(),
        "executor_classes": report.classes.iter().map(|c| serde_json::json!({
            "executor_class": c.class.executor_class,
            "heartbeat_owner": c.class.heartbeat_owner,
            "consumers": c.consumers,
            "workers": c.workers,
            "silent": c.silent,
        })).collect::<Vec<_>>(),
        "relays": report.relays.iter().map(|r| serde_json::json!({
            "cursor": r.cursor.name,
            "owner": r.cursor.owner,
            "held": r.held,
            "position": r.cursor.position.to_string(),
            "behind": r.behind,
            "published": r.cursor.published,
            "rate_per_s": r.rate_per_s(),
            "failed_rounds": r.cursor.failed_rounds,
            "failing": r.cursor.failing,
        })).collect::<Vec<_>>(),
        "lag_breaches": report.lag_breaches.iter().map(|b| serde_json::json!({
            "breach_id": b.id,
            "consumer": b.consumer,
            "producer_class": b.producer_class,
            "threshold_ms": b.threshold_ms,
            "lag_ms": b.lag_ms,
            "oldest_event_id": b.oldest_event_id.map(|id| id.to_string()),
            "opened_at": b.opened_at,
        })).collect::<Vec<_>>(),
        "cutover_gates": report.cutover_gates.iter().map(|g| serde_json::json!({
            "consumer": g.consumer,
            "min_reconciled": g.gate.min_reconciled,
            "min_span_ms": g.gate.min_span_ms,
            "max_unexplained": g.gate.max_unexplained,
            "since": g.since,
            "shadow_runs": g.shadow_runs,
            "compared": g.compared,
        })).collect::<Vec<_>>(),
        "last_purges": report.last_purges,
        "last_inventories": report.last_inventories,
        "schedules": report.schedules.iter().map(|s| serde_json::json!({
            "schedule": s.state.name,
            "cron": s.state.cron,
            "event": s.state.event,
            "ticks": s.state.ticks,
            "skipped": s.state.skipped,
            "last_slot": s.last_slot_text(),
            "next_slot": s.next_slot_text(),
            "overdue_s": s.overdue.as_secs_f64(),
        })).collect::<Vec<_>>(),
        "workers": report.workers.iter().map(|w| serde_json::json!({
            "owner": w.owner,
            "consumer": w.consumer,
            "payload_policy": w.payload_policy,
            "dispatcher_overrides": w.dispatcher_overrides,
        })).collect::<Vec<_>>(),
    });
    format!("{document:#}\n")
}

fn percentile_line(out: &mut String, what: &str, latency: &Percentiles, unit: &str) {
    let _ = writeln!(
        out,
        "  {what}: {:.3} / {:.3} / {:.3} s ({} {unit})",
        latency.p50.as_secs_f64(),
        latency.p95.as_secs_f64(),
        latency.p99.as_secs_f64(),
        latency.samples
    );
}

/// `evc timeline TRACE_ID`: exit 100 when nothing was recorded for the trace, 2 when the
/// argument is not a trace id.
pub(crate) fn timeline(argument: &str, database: &Database) -> anyhow::Result<ExitCode> {
    let Some(trace_id) = trace_id(argument) else {
        eprintln!(
            "evc: error: `{}` is not a W3C trace id: 32 lower-case hex digits, not all zero \
             (or a traceparent header, 00-<trace id>-<parent id>-<flags>)",
            escape(argument)
        );
        return Ok(ExitCode::from(crate::EXIT_USAGE));
    };
    if argument.bytes().any(|b| b.is_ascii_uppercase()) {
        eprintln!("evc: note: trace ids are lower-case hex; showing trace {trace_id}");
    }
    let entries = with_operator(database, Role::Reader, async |operator| {
        Ok(operator.timeline(&trace_id).await?)
    })?;
    if entries.is_empty() {
        println!("nothing recorded for trace {trace_id}");
        return Ok(ExitCode::from(crate::EXIT_FINDINGS));
    }
    print!("{}", timeline_text(&entries));
    Ok(ExitCode::SUCCESS)
}

/// The trace id `argument` names: 32 hex digits, or a version-00 `traceparent` header (its
/// trace id). Upper-case digits are read as lower case: W3C writes ids in lower case, but
/// tools and people pass them on upper-cased, and the stored ids are lower case.
fn trace_id(argument: &str) -> Option<String> {
    let lower = argument.to_ascii_lowercase();
    if lower.starts_with("00-") {
        let context = evc_runtime::TraceContext::from_traceparent(&lower).ok()?;
        return Some(context.trace_id().to_owned());
    }
    evc_runtime::check_trace_id(&lower).ok()?;
    Some(lower)
}

fn timeline_text(entries: &[TimelineEntry]) -> String {
    let mut out = String::new();
    for entry in entries {
        let at = chrono::DateTime::from_timestamp_micros((entry.at * 1e6).round() as i64)
            .map_or_else(
                || entry.at.to_string(),
                |at| at.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
            );
        let consumer = escape(entry.consumer.as_deref().unwrap_or("-"));
        let attempt = entry
            .attempt
            .map_or_else(String::new, |n| format!(" (attempt {n})"));
        let _ = writeln!(
            out,
            "{at}  {:8}  {}  {consumer}  {}{attempt}",
            escape(&entry.kind),
            entry.event_id,
            escape(&entry.detail)
        );
    }
    out
}

/// `evc consumer pause | resume | mode | show | gate | explain`.
pub(crate) fn consumer(action: &ConsumerAction, database: &Database) -> anyhow::Result<ExitCode> {
    match action {
        ConsumerAction::Gate { consumer, format } => return gate(consumer, *format, database),
        ConsumerAction::Explain {
            consumer,
            event_id,
            change,
        } => return explain(consumer, *event_id, change, database),
        _ => {}
    }
    let role = match action {
        ConsumerAction::Show { .. } => Role::Reader,
        _ => Role::Operator,
    };
    let state = with_operator(database, role, async |operator| {
        let state = match action {
            ConsumerAction::Pause { consumer, change } => {
                operator.pause(consumer, &change.change()).await
            }
            ConsumerAction::Resume { consumer, change } => {
                operator.resume(consumer, &change.change()).await
            }
            ConsumerAction::Mode {
                consumer,
                mode,
                change,
            } => {
                operator
                    .set_mode(consumer, (*mode).into(), &change.change())
                    .await
            }
            ConsumerAction::Show { consumer } => operator.consumer_state(consumer).await,
            ConsumerAction::Gate { .. } | ConsumerAction::Explain { .. } => {
                unreachable!("handled above")
            }
        };
        match state {
            Err(DispatchError::CutoverRefused(report)) => {
                // The report first, a line each; the error line last, as for every refusal.
                eprint!("{}", gate_text(&report));
                let mode = operator.consumer_state(&report.consumer).await?.mode;
                Err(anyhow!(
                    "{} may not go live yet; its mode stays {}",
                    escape(&report.consumer),
                    mode.as_str()
                ))
            }
            Err(DispatchError::UnknownConsumer(name)) => Err(not_deployed(operator, &name)),
            other => Ok(other?),
        }
    })?;
    println!("{}", state_line(&state));
    Ok(ExitCode::SUCCESS)
}

/// The refusal of a consumer the database does not deploy, naming the ones it does.
fn not_deployed(operator: &Operator, name: &str) -> anyhow::Error {
    anyhow!(
        "consumer {} is not deployed in this database (deployed: {})",
        escape(name),
        escape(&operator.consumers().join(", "))
    )
}

/// `evc consumer gate`: exit 100 when the gate does not pass.
fn gate(consumer: &str, format: GateFormat, database: &Database) -> anyhow::Result<ExitCode> {
    let report = with_operator(database, Role::Operator, async |operator| {
        match operator.cutover_report(consumer).await {
            Err(DispatchError::UnknownConsumer(name)) => Err(not_deployed(operator, &name)),
            other => Ok(other?),
        }
    })?;
    match format {
        GateFormat::Text => print!("{}", gate_text(&report)),
        GateFormat::Json => println!("{}", serde_json::to_string_pretty(&gate_json(&report))?),
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::EXIT_FINDINGS)
    })
}

/// `evc consumer explain`.
fn explain(
    consumer: &str,
    event_id: uuid::Uuid,
    change: &ChangeArgs,
    database: &Database,
) -> anyhow::Result<ExitCode> {
    let report = with_operator(database, Role::Operator, async |operator| {
        match operator
            .explain_difference(consumer, event_id, &change.change())
            .await
        {
            Err(DispatchError::UnknownConsumer(name)) => Err(not_deployed(operator, &name)),
            other => Ok(other?),
        }
    })?;
    println!("explained: event {event_id} of {}", escape(consumer));
    print!("{}", gate_text(&report));
    Ok(ExitCode::SUCCESS)
}

/// A gate report for people: the gate, the counts, why it does not pass, the differences.
fn gate_text(report: &CutoverReport) -> String {
    let mut out = String::new();
    let consumer = escape(&report.consumer);
    match &report.gate {
        None => {
            let _ = writeln!(
                out,
                "{consumer}: no cut-over gate; a move to live is not gated"
            );
        }
        Some(gate) => {
            let verdict = if report.passed() {
                "passes"
            } else {
                "does not pass"
            };
            let _ = writeln!(
                out,
                "{consumer}: the cut-over gate {verdict} ({} compared deliveries over {}, at \
                 most {} unexplained differences)",
                gate.min_reconciled,
                gate.min_span_text(),
                gate.max_unexplained
            );
        }
    }
    let since = report
        .since
        .and_then(|at| chrono::DateTime::from_timestamp_millis((at * 1_000.0) as i64))
        .map_or_else(
            || "every shadow run counts (no operator moved it to shadow)".to_owned(),
            |at| {
                format!(
                    "shadow runs since the move to shadow at {}",
                    at.to_rfc3339()
                )
            },
        );
    let _ = writeln!(out, "  {since}");
    let _ = writeln!(
        out,
        "  shadow runs {}, compared {} (matched {}, explained {}, unexplained {}), span {}",
        report.shadow_runs,
        report.reconciled,
        report.matched,
        report.explained,
        report.unexplained,
        report.span_text()
    );
    for shortfall in &report.shortfalls {
        let _ = writeln!(out, "  - {}", escape(shortfall));
    }
    for difference in &report.differences {
        let mut parts = Vec::new();
        for (what, keys) in [
            ("differing", &difference.differing),
            ("only in the legacy outcome", &difference.missing_in_shadow),
            ("only in the shadow run", &difference.missing_in_legacy),
        ] {
            if !keys.is_empty() {
                parts.push(format!("{what}: {}", escape(&keys.join(", "))));
            }
        }
        let explained = if difference.explained {
            " (explained)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  event {}: {}{explained}",
            difference.event_id,
            parts.join("; ")
        );
    }
    out
}

/// A gate report for scripts.
fn gate_json(report: &CutoverReport) -> serde_json::Value {
    serde_json::json!({
        "consumer": report.consumer,
        "gate": report.gate.map(|gate| serde_json::json!({
            "min_reconciled": gate.min_reconciled,
            "min_span_ms": gate.min_span_ms,
            "max_unexplained": gate.max_unexplained,
        })),
        "passed": report.passed(),
        "since": report.since,
        "shadow_runs": report.shadow_runs,
        "reconciled": report.reconciled,
        "matched": report.matched,
        "explained": report.explained,
        "unexplained": report.unexplained,
        "span_seconds": report.span_seconds,
        "shortfalls": report.shortfalls,
        "differences": report.differences.iter().map(|d| serde_json::json!({
            "event_id": d.event_id.to_string(),
            "differing": d.differing,
            "missing_in_shadow": d.missing_in_shadow,
            "missing_in_legacy": d.missing_in_legacy,
            "explained": d.explained,
        })).collect::<Vec<_>>(),
    })
}

fn state_line(state: &ConsumerState) -> String {
    format!(
        "{}: {}, mode {} (revision {})",
        escape(&state.consumer),
        if state.paused { "paused" } else { "running" },
        state.mode.as_str(),
        state.revision
    )
}
