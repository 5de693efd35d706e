//! `evc dispatch`: runs dispatcher workers for the consumers a configuration file names, each
//! delivery handed to a command (the payload on standard input, the delivery in environment
//! variables; the exit status is the outcome). It needs no build of the application: the
//! registry comes from the database's mirror (`evc_runtime::deployed_registry`), or from the
//! one a SQLite outbox file records (`evc_runtime::SqliteStore::recorded`), so consumers
//! written in any language can be driven by the runtime's fenced leases, retries, dead-letter
//! and audit. docs/cli.md ("evc dispatch") describes the file and the exit statuses.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use evc_relay::Transport;
use evc_runtime::{BoxFuture, DispatchStats, DynHandler, HandlerContext};
use evc_runtime::{
    DeliveryStatus, Dispatcher, DispatcherConfig, FailureClass, HandlerError, PgStore, Role,
    SqliteStore, Store,
};
use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use crate::operate::{Database, Outbox};
use evc_codegen::printable::escape;

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

/// The largest configuration file read, as for contract files: a bigger one is a mistake.
const MAX_CONFIG_BYTES: usize = evc_codegen::loader::MAX_FILE_BYTES;

/// Most workers per consumer: each holds up to three connections.
const MAX_WORKERS: usize = 64;
/// Largest claim batch.
const MAX_BATCH: u32 = 10_000;
/// Longest `owner`: it is part of every lease row and heartbeat.
const MAX_OWNER_CHARS: usize = 100;

/// A duration setting's range, as the contracts write durations: `lease`, `poll_interval`,
/// `timeout`. Outside it a value is a mistake (a zero timeout kills every command, a lease of
/// years overflows PostgreSQL's `interval` and no claim succeeds).
struct Range {
    name: &'static str,
    min: Duration,
    max: Duration,
    default: Duration,
}

/// Without a `lease` in the file the contracts' `dispatcher.lease` applies; `default` is the
/// contract format's, for the range's sake.
const LEASE: Range = Range {
    name: "lease",
    min: Duration::from_secs(1),
    max: Duration::from_secs(86_400),
    default: Duration::from_secs(30),
};
const POLL_INTERVAL: Range = Range {
    name: "poll_interval",
    min: Duration::from_millis(10),
    max: Duration::from_secs(3_600),
    default: Duration::from_secs(1),
};
/// Without a `timeout` in the file the consumer's `handler_timeout` applies, else `default`.
const TIMEOUT: Range = Range {
    name: "timeout",
    min: Duration::from_millis(10),
    max: Duration::from_secs(86_400),
    default: Duration::from_secs(60),
};

/// A consumer's duration setting (else the default's, else `range.default`), checked against
/// `range`.
fn duration(text: Option<&str>, range: &Range, consumer: &str) -> anyhow::Result<Duration> {
    let Some(text) = text else {
        return Ok(range.default);
    };
    let value = crate::operate::duration(text, &format!("`{}`", range.name))?;
    if value < range.min || value > range.max {
        bail!(
            "consumer {}: `{}` is {}; it must be {} to {}",
            escape(consumer),
            range.name,
            escape(text),
            evc_codegen::duration::format(range.min),
            evc_codegen::duration::format(range.max)
        );
    }
    Ok(value)
}

/// A consumer's number setting (else the default's, else `default`), checked to be in
/// `min..=max`.
fn number<T: Copy + PartialOrd + std::fmt::Display>(
    value: Option<T>,
    (name, min, max, default): (&str, T, T, T),
    consumer: &str,
) -> anyhow::Result<T> {
    let value = value.unwrap_or(default);
    if value < min || value > max {
        bail!(
            "consumer {}: `{name}` is {value}; it must be {min} to {max}",
            escape(consumer)
        );
    }
    Ok(value)
}

/// A consumer's own setting, else the default's.
fn pick<'a>(own: Option<&'a String>, default: Option<&'a String>) -> Option<&'a str> {
    own.or(default).map(String::as_str)
}

/// Reads the configuration file: a regular file (a FIFO or a device would block or never
/// end), at most [`MAX_CONFIG_BYTES`], UTF-8.
fn read(path: &Path) -> anyhow::Result<String> {
    let cannot = || format!("cannot read {}", path.display());
    // `metadata` follows symlinks without opening: opening a FIFO would wait for a writer.
    let metadata = std::fs::metadata(path).with_context(cannot)?;
    if !metadata.is_file() {
        bail!("{} is not a regular file", path.display());
    }
    let too_large = |size: u64| {
        anyhow!(
            "{} is {size} bytes; a dispatch configuration may be at most {MAX_CONFIG_BYTES} bytes",
            path.display()
        )
    };
    if metadata.len() > MAX_CONFIG_BYTES as u64 {
        return Err(too_large(metadata.len()));
    }
    let file = std::fs::File::open(path).with_context(cannot)?;
    let mut bytes = Vec::new();
    // The cap holds even if the file grew, or was swapped, after the check.
    file.take(MAX_CONFIG_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .with_context(cannot)?;
    if bytes.len() > MAX_CONFIG_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|_| anyhow!("{} is not UTF-8", path.display()))
}

fn load(path: &Path) -> anyhow::Result<DispatchFile> {
    let text = read(path)?;
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
    if let Some(owner) = &config.owner {
        if owner.chars().any(char::is_control) {
            bail!(
                "{}: `owner` has control characters (\"{}\"); it is shown in other operators' \
                 status output",
                path.display(),
                escape(owner)
            );
        }
        let chars = owner.chars().count();
        if chars == 0 || chars > MAX_OWNER_CHARS {
            bail!(
                "{}: `owner` has {chars} characters; it must have 1 to {MAX_OWNER_CHARS}",
                path.display()
            );
        }
    }
    for (name, entry) in &config.consumers {
        if entry.command.is_empty() {
            bail!(
                "{}: consumer {} has an empty `command`",
                path.display(),
                escape(name)
            );
        }
    }
    Ok(config)
}

/// One consumer's settings, its own else the defaults', checked. `None`: the file sets none, so
/// the contracts' (the database's settings row) apply.
struct Checked {
    workers: usize,
    batch: Option<u32>,
    lease: Option<Duration>,
    poll_interval: Duration,
    timeout: Option<Duration>,
    held_batches: bool,
    claim_cursor: bool,
}

fn settings(name: &str, own: &Settings, defaults: &Settings) -> anyhow::Result<Checked> {
    Ok(Checked {
        workers: number(
            own.workers.or(defaults.workers),
            ("workers", 1, MAX_WORKERS, 1),
            name,
        )?,
        batch: own
            .batch
            .or(defaults.batch)
            .map(|batch| number(Some(batch), ("batch", 1, MAX_BATCH, batch), name))
            .transpose()?,
        lease: pick(own.lease.as_ref(), defaults.lease.as_ref())
            .map(|lease| duration(Some(lease), &LEASE, name))
            .transpose()?,
        poll_interval: duration(
            pick(own.poll_interval.as_ref(), defaults.poll_interval.as_ref()),
            &POLL_INTERVAL,
            name,
        )?,
        timeout: pick(own.timeout.as_ref(), defaults.timeout.as_ref())
            .map(|timeout| duration(Some(timeout), &TIMEOUT, name))
            .transpose()?,
        held_batches: own.held_batches.or(defaults.held_batches).unwrap_or(false),
        claim_cursor: own.claim_cursor.or(defaults.claim_cursor).unwrap_or(true),
    })
}

/// Hands each delivery to a command.
struct CommandHandler {
    command: Vec<String>,
    /// Kills a command running longer (`command_timed_out`); `None` when the dispatcher's
    /// handler timeout (the file's `timeout`, else the contract's) does it (`handler_timeout`).
    timeout: Option<Duration>,
}

impl<S: Store> DynHandler<S> for CommandHandler {
    fn handle<'a>(
        &'a self,
        context: HandlerContext<'a, S>,
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
            // Past the dispatcher's handler timeout, this future is dropped and the child with
            // it (`kill_on_drop`).
            let waited = match self.timeout {
                Some(timeout) => tokio::time::timeout(timeout, child.wait()).await,
                None => Ok(child.wait().await),
            };
            let status = match waited {
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
    let mut checked = Vec::with_capacity(config.consumers.len());
    for (name, entry) in &config.consumers {
        checked.push((
            name.clone(),
            entry.command.clone(),
            settings(name, &entry.settings, &config.defaults)?,
        ));
    }
    let progress_every = crate::operate::duration(progress_every, "--progress")?;
    // Per worker: the connection it keeps while busy, one for lease renewals and one for
    // failures and reconciliations (docs/runtime.md, "Dispatch"); the rest for the
    // dispatcher's doorbells, recovery and heartbeats. The caps on consumers' workers keep
    // the sum small.
    let connections: usize = checked.iter().map(|(_, _, s)| s.workers * 3).sum::<usize>() + 4;
    let connections = u32::try_from(connections).unwrap_or(u32::MAX);
    let outbox = database.outbox()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let run = Run {
        owner: config.owner,
        checked,
        exit_when_idle,
        progress_every,
    };
    runtime.block_on(async move {
        match outbox {
            Outbox::Postgres(options) => {
                let pool = crate::operate::pool(&options, connections, Role::Dispatcher).await?;
                let registry = evc_runtime::deployed_registry(&pool).await.context(
                    "cannot read the deployed registry (are the evc migrations applied?)",
                )?;
                // A dispatch-only store: nothing here appends.
                let store = PgStore::new(pool.clone(), registry)
                    .context("the deployed registry does not load")?;
                store
                    .verify_registry()
                    .await
                    .context("the database is not ready for this release")?;
                run.within_scope(&store).await?;
                let result = run.workers(store).await;
                pool.close().await;
                result
            }
            Outbox::Sqlite(location, scope) => {
                // The registry the file records; the store holds the file while it runs.
                let store = crate::operate::open_sqlite(&location, &scope, connections).await?;
                let result = run.workers(store.clone()).await;
                store.close().await;
                result
            }
        }
    })
}

/// What `evc dispatch` runs, whichever store it runs on.
struct Run {
    owner: Option<String>,
    checked: Vec<(String, Vec<String>, Checked)>,
    exit_when_idle: bool,
    progress_every: Duration,
}

impl Run {
    /// Refuses to start when the login is scoped to consumers (its dispatcher roles of
    /// consumers) and the file names one outside them: that one's workers would claim nothing.
    async fn within_scope(&self, store: &PgStore) -> anyhow::Result<()> {
        let Some(scope) = store
            .scoped_consumers()
            .await
            .context("cannot read the login's consumer scope")?
        else {
            return Ok(());
        };
        // Only deployed consumers: `workers` reports the others as not deployed.
        let outside: Vec<&str> = self
            .checked
            .iter()
            .map(|(name, _, _)| name.as_str())
            .filter(|name| store.registry().consumer(name).is_some())
            .filter(|name| !scope.iter().any(|scoped| scoped == name))
            .collect();
        if outside.is_empty() {
            return Ok(());
        }
        let list = |names: &[&str]| {
            if names.is_empty() {
                "none".to_owned()
            } else {
                names
                    .iter()
                    .map(|n| escape(n))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let scope: Vec<&str> = scope.iter().map(String::as_str).collect();
        bail!(
            "this login may dispatch only the consumers of its dispatcher roles mapped in this \
             database ({}), not {}: grant it their roles (evc_consumer_roles names each \
             consumer's) or leave them out of the file (docs/runtime.md, \"A dispatcher role per \
             consumer\")",
            list(&scope),
            list(&outside)
        )
    }

    /// Runs the workers on `store` until Ctrl-C (or idle, with `--exit-when-idle`), then prints
    /// the totals.
    async fn workers<S: Store + Idle + Clone>(self, store: S) -> anyhow::Result<ExitCode> {
        let Self {
            owner,
            checked,
            exit_when_idle,
            progress_every,
        } = self;
        let owner = owner.unwrap_or_else(|| format!("evc-dispatch-{}", std::process::id()));
        // Outbox dispatch unless the environment moves consumers to JetStream.
        let transport = Transport::from_env()?;
        let mut handles = Vec::new();
        for (index, (name, command, s)) in checked.into_iter().enumerate() {
            // The contracts' settings as the database's settings row holds them, under the
            // file's: a setting the file gives wins, and the workers' heartbeats say so.
            let mut dispatcher_settings = DispatcherConfig::from_registry(store.registry())
                .owner(format!("{owner}/{name}"))
                .workers(s.workers)
                .poll_interval(s.poll_interval)
                .held_batches(s.held_batches)
                .claim_cursor(s.claim_cursor);
            // The contracts' schedules, lag watch and evidence recording run once per process,
            // beside the first consumer's workers; a drain that exits when idle runs none.
            if index > 0 || exit_when_idle {
                dispatcher_settings = dispatcher_settings
                    .schedule_interval(None)
                    .lag_watch_interval(None)
                    .evidence_interval(None);
            }
            if let Some(batch) = s.batch {
                dispatcher_settings = dispatcher_settings.batch(batch);
            }
            if let Some(lease) = s.lease {
                dispatcher_settings = dispatcher_settings.lease(lease);
            }
            if s.timeout.is_some() {
                dispatcher_settings = dispatcher_settings.handler_timeout(s.timeout);
            }
            let declared_timeout = store
                .registry()
                .consumer(&name)
                .and_then(|c| c.handler_timeout_ms);
            let handler = CommandHandler {
                command,
                // Neither the file nor the contract limits the command: the file's default does.
                timeout: (s.timeout.is_none() && declared_timeout.is_none())
                    .then_some(TIMEOUT.default),
            };
            let dispatcher = Dispatcher::new(store.clone(), dispatcher_settings)
                .consumer(&name, handler)
                .with_context(|| {
                    format!(
                        "consumer {} is not deployed in this database",
                        escape(&name)
                    )
                })?;
            match evc_relay::serve(dispatcher, &transport).await {
                Ok(serving) => handles.push((name, serving)),
                Err(error) => {
                    // The consumers started before give their leases back.
                    for (_, serving) in handles {
                        serving.shutdown().await;
                    }
                    return Err(error.into());
                }
            }
        }
        let names: Vec<String> = handles.iter().map(|(name, _)| name.clone()).collect();
        eprintln!(
            "evc dispatch: running {} as {owner}; Ctrl-C stops after the deliveries in hand",
            escape(&names.join(", "))
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
            if exit_when_idle && store.open_count(&names).await? == 0 {
                break;
            }
        }
        let mut totals = Vec::new();
        for (_, handle) in handles {
            totals.push(handle.shutdown().await);
        }
        let totals = sum(totals.into_iter());
        println!("{}", progress_line(&totals, started.elapsed()));
        Ok(ExitCode::SUCCESS)
    }
}

/// How many deliveries of some consumers are open (pending, due or not, or leased): zero is
/// idle.
trait Idle {
    async fn open_count(&self, consumers: &[String]) -> anyhow::Result<u64>;
}

impl Idle for PgStore {
    async fn open_count(&self, consumers: &[String]) -> anyhow::Result<u64> {
        self.open_deliveries(consumers)
            .await
            .context("cannot count open deliveries")
    }
}

impl Idle for SqliteStore {
    async fn open_count(&self, consumers: &[String]) -> anyhow::Result<u64> {
        let mut open = 0;
        for consumer in consumers {
            open += self
                .count_deliveries(consumer, &[DeliveryStatus::Pending, DeliveryStatus::Leased])
                .await
                .context("cannot count open deliveries")?;
        }
        Ok(open)
    }
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
