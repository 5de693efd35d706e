//! `evc dispatch`: runs dispatcher workers for the consumers a configuration file names, each
//! delivery handed to a command (the payload on standard input, the delivery in environment
//! variables; the exit status is the outcome). It needs no build of the application: the
//! registry comes from the database's mirror (`evc_runtime::deployed_registry`), so consumers
//! written in any language can be driven by the runtime's fenced leases, retries, dead-letter
//! and audit. docs/cli.md ("evc dispatch") describes the file and the exit statuses.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use evc_runtime::dispatcher::{BoxFuture, DispatchStats, DynHandler, HandlerContext};
use evc_runtime::{
    Dispatcher, DispatcherConfig, FailureClass, HandlerError, PayloadPolicy, PgStore,
};
use serde::Deserialize;
use sqlx::postgres::PgPoolOptions;
use tokio::io::AsyncWriteExt;

use crate::operate::Database;

/// The exit status of a handler command that asks for a retry (`EX_TEMPFAIL`).
const EXIT_RETRY: i32 = 75;
/// The exit status of a handler command that quarantines the delivery (`EX_DATAERR`).
const EXIT_QUARANTINE: i32 = 65;

/// The configuration file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DispatchFile {
    /// The lease owner prefix (default: `evc-dispatch-<pid>`).
    owner: Option<String>,
    /// Defaults for every consumer.
    #[serde(default)]
    defaults: Settings,
    /// The consumers to run, by name.
    consumers: BTreeMap<String, ConsumerEntry>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    workers: Option<usize>,
    batch: Option<u32>,
    lease: Option<String>,
    poll_interval: Option<String>,
    held_batches: Option<bool>,
    /// Whether claims start after the claim cursor (default on).
    claim_cursor: Option<bool>,
    /// How long one command may run before it is killed (a transient failure).
    timeout: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsumerEntry {
    /// The program and its arguments (no shell).
    command: Vec<String>,
    #[serde(flatten)]
    settings: Settings,
}

/// A setting's duration, or `default` when the file does not set it.
fn duration(text: Option<&str>, what: &str, default: Duration) -> anyhow::Result<Duration> {
    text.map_or(Ok(default), |text| crate::operate::duration(text, what))
}

/// A consumer's own setting, else the default's.
fn pick<'a>(own: Option<&'a String>, default: Option<&'a String>) -> Option<&'a str> {
    own.or(default).map(String::as_str)
}

fn load(path: &Path) -> anyhow::Result<DispatchFile> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let file = evc_codegen::SourceFile::new(path.display().to_string(), text);
    let node = evc_codegen::yaml::parse(&file).map_err(|d| {
        anyhow!(
            "{}:{}:{}: {} ({})",
            d.location.file,
            d.location.line,
            d.location.column,
            d.message,
            d.fix
        )
    })?;
    let Some(node) = node else {
        bail!("{} is empty", path.display());
    };
    let config: DispatchFile = serde_json::from_value(node.to_json())
        .with_context(|| format!("{} is not a dispatch configuration", path.display()))?;
    if config.consumers.is_empty() {
        bail!("{}: `consumers` names no consumer", path.display());
    }
    for (name, entry) in &config.consumers {
        if entry.command.is_empty() {
            bail!("{}: consumer {name} has an empty `command`", path.display());
        }
    }
    Ok(config)
}

/// Hands each delivery to a command.
struct CommandHandler {
    command: Vec<String>,
    timeout: Duration,
}

impl DynHandler for CommandHandler {
    fn handle<'a>(
        &'a self,
        context: HandlerContext<'a>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let delivery = context.delivery();
            let payload = serde_json::to_vec(context.payload())
                .map_err(|_| HandlerError::permanent("payload_not_serializable"))?;
            let mut child = tokio::process::Command::new(&self.command[0])
                .args(&self.command[1..])
                .env("EVC_EVENT_ID", &delivery.event_id)
                .env("EVC_EVENT_TYPE", &delivery.event_type)
                .env("EVC_EVENT_VERSION", &delivery.version)
                .env("EVC_CONSUMER", &delivery.consumer)
                .env("EVC_ATTEMPT", delivery.attempt.to_string())
                .env("EVC_SHADOW", if context.is_shadow() { "1" } else { "0" })
                .stdin(Stdio::piped())
                // The command's output may echo the payload: it is not kept, nor logged.
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .map_err(|_| HandlerError::transient("command_not_started"))?;
            if let Some(mut stdin) = child.stdin.take() {
                // A command that does not read its input is not a failure.
                let _ = stdin.write_all(&payload).await;
            }
            let status = match tokio::time::timeout(self.timeout, child.wait()).await {
                Ok(Ok(status)) => status,
                Ok(Err(_)) => return Err(HandlerError::transient("command_wait_failed")),
                Err(_) => return Err(HandlerError::transient("command_timed_out")),
            };
            match status.code() {
                Some(0) => Ok(()),
                Some(EXIT_RETRY) => Err(HandlerError::transient("exit_75")),
                Some(EXIT_QUARANTINE) => Err(HandlerError::new(FailureClass::Schema, "exit_65")),
                Some(code) => Err(HandlerError::permanent(format!("exit_{code}"))),
                None => Err(HandlerError::transient("command_killed")),
            }
        })
    }
}

/// `evc dispatch --config FILE [--exit-when-idle]`.
pub(crate) fn dispatch(
    config_path: &Path,
    exit_when_idle: bool,
    progress_every: &str,
    database: &Database,
) -> anyhow::Result<ExitCode> {
    let config = load(config_path)?;
    let progress_every = crate::operate::duration(progress_every, "--progress")?;
    let url = database.url()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        // Per worker: the connection it keeps while busy, one for lease renewals and one for
        // failures and reconciliations (docs/runtime.md, "Dispatch"); the rest for the
        // dispatcher's doorbells, recovery and heartbeats.
        let connections: usize = config
            .consumers
            .values()
            .map(|c| c.settings.workers.or(config.defaults.workers).unwrap_or(1) * 3)
            .sum::<usize>()
            + 4;
        let pool = PgPoolOptions::new()
            .max_connections(u32::try_from(connections).unwrap_or(u32::MAX))
            .acquire_timeout(Duration::from_secs(10))
            .connect(&url)
            .await
            .context("cannot connect to the outbox database")?;
        let registry = evc_runtime::deployed_registry(&pool)
            .await
            .context("cannot read the deployed registry (are the evc migrations applied?)")?;
        let store = PgStore::new(pool.clone(), registry, PayloadPolicy::default())
            .context("the deployed registry does not load")?;
        store
            .verify_registry()
            .await
            .context("the database's registry does not match its mirror")?;

        let owner = config
            .owner
            .clone()
            .unwrap_or_else(|| format!("evc-dispatch-{}", std::process::id()));
        let mut handles = Vec::new();
        for (name, entry) in &config.consumers {
            let s = &entry.settings;
            let d = &config.defaults;
            let settings = DispatcherConfig::default()
                .owner(format!("{owner}/{name}"))
                .workers(s.workers.or(d.workers).unwrap_or(1))
                .batch(s.batch.or(d.batch).unwrap_or(50))
                .lease(duration(
                    pick(s.lease.as_ref(), d.lease.as_ref()),
                    "lease",
                    Duration::from_secs(30),
                )?)
                .poll_interval(duration(
                    pick(s.poll_interval.as_ref(), d.poll_interval.as_ref()),
                    "poll_interval",
                    Duration::from_secs(1),
                )?)
                .held_batches(s.held_batches.or(d.held_batches).unwrap_or(false))
                .claim_cursor(s.claim_cursor.or(d.claim_cursor).unwrap_or(true));
            let handler = CommandHandler {
                command: entry.command.clone(),
                timeout: duration(
                    pick(s.timeout.as_ref(), d.timeout.as_ref()),
                    "timeout",
                    Duration::from_secs(60),
                )?,
            };
            let dispatcher = Dispatcher::new(store.clone(), settings)
                .consumer(name, handler)
                .with_context(|| format!("consumer {name} is not deployed in this database"))?;
            handles.push((name.clone(), dispatcher.start()));
        }
        let names: Vec<String> = handles.iter().map(|(name, _)| name.clone()).collect();
        eprintln!(
            "evc dispatch: running {} as {owner}; Ctrl-C stops after the deliveries in hand",
            names.join(", ")
        );

        let started = Instant::now();
        let mut last_report = Instant::now();
        let mut ticker = tokio::time::interval(Duration::from_millis(200));
        let interrupted = tokio::signal::ctrl_c();
        tokio::pin!(interrupted);
        loop {
            tokio::select! {
                _ = &mut interrupted => break,
                _ = ticker.tick() => {}
            }
            if !progress_every.is_zero() && last_report.elapsed() >= progress_every {
                last_report = Instant::now();
                let totals = sum(handles.iter().map(|(_, h)| h.stats()));
                eprintln!("{}", progress_line(&totals, started.elapsed()));
            }
            if exit_when_idle && idle(&pool, &names).await? {
                break;
            }
        }
        let mut totals = Vec::new();
        for (_, handle) in handles {
            totals.push(handle.shutdown().await);
        }
        let totals = sum(totals.into_iter());
        println!("{}", progress_line(&totals, started.elapsed()));
        pool.close().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// Whether none of `consumers`' deliveries is pending (due or not) or leased.
async fn idle(pool: &sqlx::PgPool, consumers: &[String]) -> anyhow::Result<bool> {
    let open: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM evc_deliveries WHERE consumer = ANY($1) \
         AND status IN ('pending', 'leased')",
    )
    .bind(consumers)
    .fetch_one(pool)
    .await
    .context("cannot count open deliveries")?;
    Ok(open == 0)
}

fn sum(stats: impl Iterator<Item = DispatchStats>) -> DispatchStats {
    stats.fold(DispatchStats::default(), |mut total, s| {
        total.claimed += s.claimed;
        total.acked += s.acked;
        total.retried += s.retried;
        total.dead += s.dead;
        total.quarantined += s.quarantined;
        total.stale += s.stale;
        total
    })
}

fn progress_line(stats: &DispatchStats, elapsed: Duration) -> String {
    format!(
        "{:.0} s: {} acked ({:.0}/s), {} retried, {} dead, {} quarantined, {} stale",
        elapsed.as_secs_f64(),
        stats.acked,
        stats.acked as f64 / elapsed.as_secs_f64().max(0.001),
        stats.retried,
        stats.dead,
        stats.quarantined,
        stats.stale
    )
}
