//! `evc status`, `evc timeline` and `evc consumer`: the operator commands, a thin shell over
//! `evc_runtime::Console` (the consumers deployed in the database, from its registry mirror).

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::{Args, Subcommand, ValueEnum};
use evc_runtime::{Console, ConsumerMode, ConsumerState, Percentiles, StatusReport, TimelineEntry};
use sqlx::postgres::PgPoolOptions;

/// Where the outbox lives.
#[derive(Args)]
pub(crate) struct Database {
    /// PostgreSQL URL of the outbox (default: `$DATABASE_URL`).
    #[arg(long, value_name = "URL", global = true)]
    database_url: Option<String>,
}

impl Database {
    /// The URL: `--database-url`, else `$DATABASE_URL`.
    pub(crate) fn url(&self) -> anyhow::Result<String> {
        match &self.database_url {
            Some(url) => Ok(url.clone()),
            None => std::env::var("DATABASE_URL")
                .context("no database: pass --database-url or set DATABASE_URL"),
        }
    }
}

#[derive(Subcommand)]
pub(crate) enum ConsumerAction {
    /// Stop claiming the consumer's deliveries; they wait, in order.
    Pause {
        /// The consumer.
        consumer: String,
    },
    /// Claim the consumer's deliveries again.
    Resume {
        /// The consumer.
        consumer: String,
    },
    /// Override the consumer's mode (`off` claims nothing, like a pause).
    Mode {
        /// The consumer.
        consumer: String,
        /// The mode.
        #[arg(value_enum)]
        mode: ModeArg,
    },
    /// Show the consumer's operator state.
    Show {
        /// The consumer.
        consumer: String,
    },
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
    evc_codegen::duration::parse(text)
        .ok_or_else(|| anyhow!("{flag} {text:?} is not a duration (like 30s, 5m, 1h)"))
}

/// A single-threaded async runtime for one command.
pub(crate) fn async_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Runs `work` with a console on the database of `database`.
pub(crate) fn with_console<T>(
    database: &Database,
    work: impl AsyncFnOnce(&Console) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let url = database.url()?;
    async_runtime()?.block_on(async move {
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(10))
            .connect(&url)
            .await
            .context("cannot connect to the outbox database")?;
        let console = Console::connect(pool.clone())
            .await
            .context("cannot read the registry mirror (are the evc migrations applied?)")?;
        let result = work(&console).await;
        pool.close().await;
        result
    })
}

/// `evc status`: exit 100 when there are problems.
pub(crate) fn status(args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let window = duration(&args.window, "--window")?;
    let lag_limit = duration(&args.lag_limit, "--lag-limit")?;
    let report = with_console(&args.database, async |console| {
        Ok(console.status(window).await?)
    })?;
    let problems = report.problems(lag_limit);
    let text = match args.format {
        StatusFormat::Prometheus => report.prometheus(),
        StatusFormat::Text => status_text(&report, &args.window, lag_limit),
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
            let _ = writeln!(out, "  {problem}");
        }
    }
    let width = report
        .consumers
        .iter()
        .map(|c| c.consumer.len())
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
            c.consumer,
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
            let what = format!("{} -> {}", lag.producer_class, lag.consumer);
            percentile_line(&mut out, &what, &lag.latency, "acks");
        }
    }
    if !report.attempts.is_empty() {
        let _ = writeln!(out, "\nattempt duration (p50 / p95 / p99, last {window}):");
        for attempts in &report.attempts {
            percentile_line(&mut out, &attempts.consumer, &attempts.latency, "attempts");
        }
    }
    out
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

/// `evc timeline TRACE_ID`: exit 100 when nothing was recorded for the trace.
pub(crate) fn timeline(trace_id: &str, database: &Database) -> anyhow::Result<ExitCode> {
    let entries = with_console(database, async |console| {
        Ok(console.timeline(trace_id).await?)
    })?;
    if entries.is_empty() {
        println!("nothing recorded for trace {trace_id}");
        return Ok(ExitCode::from(crate::EXIT_FINDINGS));
    }
    print!("{}", timeline_text(&entries));
    Ok(ExitCode::SUCCESS)
}

fn timeline_text(entries: &[TimelineEntry]) -> String {
    let mut out = String::new();
    for entry in entries {
        let at = chrono::DateTime::from_timestamp_micros((entry.at * 1e6).round() as i64)
            .map_or_else(
                || entry.at.to_string(),
                |at| at.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
            );
        let consumer = entry.consumer.as_deref().unwrap_or("-");
        let attempt = entry
            .attempt
            .map_or_else(String::new, |n| format!(" (attempt {n})"));
        let _ = writeln!(
            out,
            "{at}  {:8}  {}  {consumer}  {}{attempt}",
            entry.kind, entry.event_id, entry.detail
        );
    }
    out
}

/// `evc consumer pause | resume | mode | show`.
pub(crate) fn consumer(action: &ConsumerAction, database: &Database) -> anyhow::Result<ExitCode> {
    let state = with_console(database, async |console| {
        let state = match action {
            ConsumerAction::Pause { consumer } => console.pause(consumer).await,
            ConsumerAction::Resume { consumer } => console.resume(consumer).await,
            ConsumerAction::Mode { consumer, mode } => {
                console.set_mode(consumer, (*mode).into()).await
            }
            ConsumerAction::Show { consumer } => console.consumer_state(consumer).await,
        };
        match state {
            Err(evc_runtime::DispatchError::UnknownConsumer(name)) => {
                let deployed: Vec<&str> = console
                    .consumers()
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect();
                Err(anyhow!(
                    "consumer {name} is not deployed in this database (deployed: {})",
                    deployed.join(", ")
                ))
            }
            other => Ok(other?),
        }
    })?;
    println!("{}", state_line(&state));
    Ok(ExitCode::SUCCESS)
}

fn state_line(state: &ConsumerState) -> String {
    format!(
        "{}: {}, mode {} (revision {})",
        state.consumer,
        if state.paused { "paused" } else { "running" },
        state.mode.as_str(),
        state.revision
    )
}
