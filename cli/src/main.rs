//! `evc`: the event-contract toolchain's command line, a thin shell over evc-codegen (and, for
//! the operator commands, evc-runtime).
//!
//! Exit codes: 0 clean, 100 findings, 1 the tool could not run, 2 invalid arguments.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use evc_codegen::compat::{self, git};
use evc_codegen::printable::escape;
use evc_codegen::structure::FileKind;
use evc_codegen::{ContractSet, Diagnostic, LoadCache, LoadError, Sources, diagnostic};

mod dispatch;
mod evidence;
mod inventory;
mod migrate;
mod operate;
mod purge;
mod relay;
mod replay;
mod serve;

/// Loading and comparing contract sets builds and drops millions of small YAML and JSON nodes,
/// on two threads; the system allocator spends a fifth of `evc check` on them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Where `evc generate` writes the AsyncAPI document, relative to the repository root.
const ASYNCAPI_DEFAULT: &str = "asyncapi/asyncapi.yaml";

/// Exit code when the contracts have problems.
const EXIT_FINDINGS: u8 = 100;
/// Exit code when the tool could not run.
const EXIT_FAILURE: u8 = 1;
/// Exit code for invalid arguments (clap's own, for the checks clap cannot make).
const EXIT_USAGE: u8 = 2;

#[derive(Parser)]
#[command(
    name = "evc",
    version,
    about = "Event contracts: check, generate, gate and dispatch."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a contract directory and report every problem with file:line:col.
    Check {
        /// The contract directory.
        #[arg(default_value = "contracts")]
        dir: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Colors in text output.
        #[arg(long, value_enum, default_value_t = Color::Auto)]
        color: Color,
        /// The AsyncAPI document to check for drift against the contracts (default:
        /// `asyncapi/asyncapi.yaml` beside the contract directory, when it exists).
        #[arg(long)]
        asyncapi: Option<PathBuf>,
    },
    /// Generate the Rust crate, registry manifest, SQL migrations and AsyncAPI document from the
    /// contracts; write only files whose content changed.
    Generate {
        /// The contract directory.
        #[arg(default_value = "contracts")]
        dir: PathBuf,
        /// Render in memory and report stale or missing files instead of writing (exit 100).
        #[arg(long)]
        check: bool,
        /// The directory generated paths are relative to.
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
    /// Judge the contracts against a base revision (or directory): which changes break which
    /// consumers, and which version bump each change needs.
    Compat {
        /// The contract directory with the proposed contracts.
        #[arg(default_value = "contracts")]
        dir: PathBuf,
        /// The git revision to compare against (default: the merge-base of HEAD with
        /// `origin/main`, else with `main`). Read from the local repository, without network.
        #[arg(long, value_name = "REV", conflicts_with = "against_dir")]
        against: Option<String>,
        /// A contract directory to compare against instead of a git revision.
        #[arg(long, value_name = "DIR")]
        against_dir: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = CompatFormat::Text)]
        format: CompatFormat,
        /// Colors in text output.
        #[arg(long, value_enum, default_value_t = Color::Auto)]
        color: Color,
        /// Write the report to this file instead of standard output.
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Turn another description of events into contracts.
    Import {
        #[command(subcommand)]
        source: ImportSource,
    },
    /// Print the JSON Schema of a contract file kind (for editors), or write all of them.
    Schema {
        /// Which kind of file (default `event`); with `--out`, only that kind is written.
        #[arg(value_enum)]
        kind: Option<SchemaKind>,
        /// Write the schema (every kind's, when no kind is named) into this directory as
        /// `<kind>.schema.json` instead of printing it.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// The outbox's state: problems first (dead letters, silent workers, lag over the limit,
    /// paused or stopped consumers), then each deployed consumer. Exit 100 when there are
    /// problems.
    Status {
        #[command(flatten)]
        database: operate::Database,
        /// How far back lag and attempt durations look.
        #[arg(long, default_value = "1h")]
        window: String,
        /// The p99 produce-to-ack lag above which a consumer has a problem.
        #[arg(long, default_value = "30s")]
        lag_limit: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = operate::StatusFormat::Text)]
        format: operate::StatusFormat,
    },
    /// Everything recorded for one W3C trace id, in time order: its events, their deliveries
    /// and their attempts. Exit 100 when nothing was recorded.
    Timeline {
        /// The trace id: 32 hex digits (upper case is read as lower case), or a whole
        /// `traceparent` header.
        trace_id: String,
        #[command(flatten)]
        database: operate::Database,
    },
    /// Pause, resume, or change the mode of a deployed consumer.
    Consumer {
        #[command(subcommand)]
        action: operate::ConsumerAction,
        #[command(flatten)]
        database: operate::Database,
    },
    /// Dead-lettered and quarantined deliveries.
    Dlq {
        #[command(subcommand)]
        action: replay::DlqAction,
        #[command(flatten)]
        database: operate::Database,
    },
    /// Replay a consumer's dead-lettered or quarantined deliveries, by two people: `--dry-run`
    /// prints the plan and its digest; `--propose --as PERSON` records it; another person's
    /// `--apply --as PERSON` needs that digest, a reason, an approval reference and an
    /// idempotency key.
    Replay {
        #[command(flatten)]
        args: replay::ReplayArgs,
        #[command(flatten)]
        database: operate::Database,
    },
    /// What the ledger alone says over a window: event types appended in one trace,
    /// consumers failing together, (producer class, consumer) pairs with repeated dead letters
    /// or lag breaches, and escalations by step kind.
    Evidence {
        #[command(flatten)]
        args: evidence::EvidenceArgs,
        #[command(flatten)]
        database: operate::Database,
    },
    /// Classify the events a consumer would receive on going live (of its types, with no
    /// delivery to it) as safe, repair, quarantine or expire, by its contract's inventory
    /// rules; `--propose` records the inventory, and another person's `--apply` gives the
    /// consumer a pending delivery of each safe and repaired event, every decision recorded.
    Inventory {
        #[command(flatten)]
        args: inventory::InventoryArgs,
        #[command(flatten)]
        database: operate::Database,
    },
    /// Remove the rows the deployed retention periods expire (`retention` of the contracts):
    /// settled events with what hangs on them, old attempts, shadow runs, rejects and
    /// idempotency records whose event is gone. Without `--apply`, count them and remove
    /// nothing. A delivery still open keeps its event. Recorded with who and why.
    Purge {
        #[command(flatten)]
        args: purge::PurgeArgs,
        #[command(flatten)]
        database: operate::Database,
    },
    /// Run dispatcher workers for the consumers a configuration file names, each delivery
    /// handed to a command (payload on standard input; exit 0 acks, 75 retries, 65
    /// quarantines, anything else dead-letters). Batch, lease and timeout come from the
    /// deployed contracts' settings; a setting the file gives wins over the contract's.
    Dispatch {
        /// The configuration file (YAML); its `batch`, `lease` and `timeout` override the
        /// contracts' `dispatcher` block and `handler_timeout`.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Stop once none of the consumers' deliveries is pending or leased.
        #[arg(long)]
        exit_when_idle: bool,
        /// Print the counts on standard error this often (`0s`: never).
        #[arg(long, default_value = "10s", value_name = "DURATION")]
        progress: String,
        #[command(flatten)]
        database: operate::Database,
    },
    /// Serve the governance API (`/api/v1`: event types, consumers, dead letters, timelines;
    /// its OpenAPI document at `/api/v1/openapi.json`), the realtime gateway of `topics.yaml`
    /// (`/api/v1/topics/{topic}/stream`), the web page and `/healthz`, `/readyz` and
    /// `/metrics` over HTTP until Ctrl-C. Callers present a bearer token from the tokens file.
    Serve {
        /// The address to listen on (port 0: any free port, printed on standard error).
        #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDRESS")]
        listen: std::net::SocketAddr,
        /// The tokens file: one `ROLE NAME TOKEN [tenant=ID] [topics=NAME,...]` per line, roles
        /// reader, operator or approver; tokens of 24 characters or more.
        #[arg(long, value_name = "FILE")]
        tokens: PathBuf,
        /// The contract directory whose `topics.yaml` the realtime gateway serves (without it,
        /// the gateway has no topics).
        #[arg(long, value_name = "DIR")]
        contracts: Option<PathBuf>,
        #[command(flatten)]
        database: operate::Database,
    },
    /// Relay the outbox's event feed to NATS JetStream until Ctrl-C: each event to
    /// `PREFIX.<partition>.<event type>.v<major>` with its id as `Nats-Msg-Id`, the envelope in
    /// headers and the payload as the body; the cursor in the store moves only after the broker
    /// acknowledged the events, and one relay of a cursor holds it at a time. The subjects, the
    /// stream and its consumers come from `relay` of `evc.yaml`, through the definitions `evc
    /// generate` writes (docs/relay.md).
    Relay {
        /// The NATS server.
        #[arg(long, default_value = "nats://127.0.0.1:4222", value_name = "URL")]
        nats_url: String,
        /// The stream and consumer definitions `evc generate` writes.
        #[arg(long, default_value = "generated/jetstream.json", value_name = "FILE")]
        definitions: PathBuf,
        /// The cursor's name in the store: relays sharing it share one position.
        #[arg(long, default_value = "jetstream", value_name = "NAME")]
        cursor: String,
        /// Who this relay is (default: `HOST/PID`).
        #[arg(long, value_name = "NAME")]
        owner: Option<String>,
        /// Publish under this subject prefix instead of the definitions' (one broker serving
        /// several deployments); the stream's subjects and consumers' filters follow it.
        #[arg(long, value_name = "PREFIX")]
        subject_prefix: Option<String>,
        /// Use this stream instead of the definitions'.
        #[arg(long, value_name = "NAME")]
        stream: Option<String>,
        /// Name the envelope's headers as CloudEvents 1.0 binary mode (`ce-id`, `ce-type`, ...).
        #[arg(long)]
        cloudevents: bool,
        /// Create the stream and consumers of the definitions, or set back the settings they
        /// own, print what differed, and exit (100 when something had drifted); relay nothing.
        #[arg(long)]
        apply: bool,
        #[command(flatten)]
        database: operate::Database,
    },
    /// Apply the SQL migrations of a directory (default `generated/migrations`) to the outbox
    /// database, each once, in order, printing each step; one run at a time (sqlx's migration
    /// lock). Nothing is applied while a migration is changed, failed, missing or out of order.
    Migrate {
        /// The migrations directory.
        #[arg(long, default_value = "generated/migrations")]
        dir: PathBuf,
        /// List each migration as applied, pending, changed, failed, missing or out of order;
        /// apply nothing. Exit 100 when one needs attention.
        #[arg(long)]
        status: bool,
        #[command(flatten)]
        database: operate::Database,
    },
}

#[derive(Subcommand)]
enum ImportSource {
    /// An AsyncAPI 3.0 document: channels and messages become event types, operations
    /// producers and consumers; unsupported parts are reported.
    Asyncapi {
        /// The AsyncAPI document (YAML or JSON).
        file: PathBuf,
        /// The contract directory to write.
        #[arg(long, default_value = "contracts")]
        out: PathBuf,
        /// Overwrite files that already exist.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// Diagnostics with source snippets, for people.
    Text,
    /// One JSON document, for tools.
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum CompatFormat {
    /// Findings, a table of event types and a summary line, for people.
    Text,
    /// The report as one JSON document, for tools.
    Json,
    /// GitHub Actions workflow commands: findings annotate the pull request.
    Github,
    /// SARIF 2.1.0, for code-scanning uploads.
    Sarif,
    /// JUnit XML, for test dashboards.
    Junit,
}

impl From<CompatFormat> for compat::output::Format {
    fn from(format: CompatFormat) -> Self {
        match format {
            CompatFormat::Text => Self::Text,
            CompatFormat::Json => Self::Json,
            CompatFormat::Github => Self::Github,
            CompatFormat::Sarif => Self::Sarif,
            CompatFormat::Junit => Self::Junit,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Color {
    Auto,
    Always,
    Never,
}

#[derive(Clone, Copy, ValueEnum)]
enum SchemaKind {
    Project,
    Event,
    Consumer,
    RetryPolicies,
    Topics,
    ExecutorClasses,
    Schedules,
}

impl From<SchemaKind> for FileKind {
    fn from(kind: SchemaKind) -> Self {
        match kind {
            SchemaKind::Project => FileKind::Project,
            SchemaKind::Event => FileKind::Event,
            SchemaKind::Consumer => FileKind::Consumer,
            SchemaKind::RetryPolicies => FileKind::RetryPolicies,
            SchemaKind::Topics => FileKind::Topics,
            SchemaKind::ExecutorClasses => FileKind::ExecutorClasses,
            SchemaKind::Schedules => FileKind::Schedules,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check {
            dir,
            format,
            color,
            asyncapi,
        } => check(&dir, format, color, asyncapi.as_deref()),
        Command::Import {
            source: ImportSource::Asyncapi { file, out, force },
        } => import_asyncapi(&file, &out, force),
        Command::Schema { kind, out } => schema(kind.map(FileKind::from), out.as_deref()),
        Command::Generate { dir, check, root } => generate(&dir, &root, check),
        Command::Compat {
            dir,
            against,
            against_dir,
            format,
            color,
            output,
        } => compat(&CompatArgs {
            dir,
            against,
            against_dir,
            format,
            color,
            output,
        }),
        Command::Status {
            database,
            window,
            lag_limit,
            format,
        } => operate::status(&operate::StatusArgs {
            database,
            window,
            lag_limit,
            format,
        }),
        Command::Timeline { trace_id, database } => operate::timeline(&trace_id, &database),
        Command::Consumer { action, database } => operate::consumer(&action, &database),
        Command::Dlq { action, database } => replay::dlq(&action, &database),
        Command::Replay { args, database } => replay::replay(&args, &database),
        Command::Evidence { args, database } => {
            evidence::evidence(&args, &database).map(|()| ExitCode::SUCCESS)
        }
        Command::Inventory { args, database } => {
            inventory::inventory(&args, &database).map(|()| ExitCode::SUCCESS)
        }
        Command::Purge { args, database } => {
            purge::purge(&args, &database).map(|()| ExitCode::SUCCESS)
        }
        Command::Dispatch {
            config,
            exit_when_idle,
            progress,
            database,
        } => dispatch::dispatch(&config, exit_when_idle, &progress, &database),
        Command::Migrate {
            dir,
            status,
            database,
        } => migrate::migrate(&dir, status, &database),
        Command::Relay {
            nats_url,
            cursor,
            owner,
            definitions,
            subject_prefix,
            stream,
            cloudevents,
            apply,
            database,
        } => relay::relay(
            &relay::RelayArgs {
                nats_url: &nats_url,
                definitions: &definitions,
                cursor: &cursor,
                owner: owner.as_deref(),
                subject_prefix: subject_prefix.as_deref(),
                stream: stream.as_deref(),
                cloudevents,
                apply,
            },
            &database,
        ),
        Command::Serve {
            listen,
            tokens,
            contracts,
            database,
        } => serve::serve(listen, &tokens, contracts.as_deref(), &database),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            // Errors quote names from the command line, files, contracts and the database.
            eprintln!("evc: error: {}", escape(&format!("{error:#}")));
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

fn use_color(color: Color) -> bool {
    match color {
        Color::Always => true,
        Color::Never => false,
        Color::Auto => std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    }
}

fn check(
    dir: &Path,
    format: Format,
    color: Color,
    asyncapi: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let use_color = use_color(color);
    let (mut diagnostics, sources, summary) = match ContractSet::load(dir) {
        Ok(loaded) => {
            let set = &loaded.contracts;
            let summary = Summary {
                event_types: set.events.len(),
                versions: set.version_count(),
                consumers: set.consumers.len(),
                retry_policies: set.retry_policies.len(),
                executor_classes: set.executor_classes.len(),
                topics: set.topics.len(),
                schedules: set.schedules.len(),
            };
            let mut diagnostics = loaded.warnings.clone();
            let mut sources = set.sources.clone();
            let beside = dir.join("..");
            let default_document = beside.join(ASYNCAPI_DEFAULT);
            // The default document comes with the contracts, so like them it must stay inside
            // the repository; one named on the command line is the caller's choice.
            let document = match asyncapi {
                Some(path) => Some((path.to_owned(), path.display().to_string(), None)),
                None if default_document.symlink_metadata().is_ok() => Some((
                    default_document,
                    ASYNCAPI_DEFAULT.to_owned(),
                    Some(
                        std::fs::canonicalize(&beside)
                            .with_context(|| format!("cannot resolve `{}`", beside.display()))?,
                    ),
                )),
                None => None,
            };
            if let Some((path, display, inside)) = document {
                let text = read_text(&path, inside.as_deref())?;
                diagnostics.extend(evc_codegen::emit::asyncapi::parity(set, &display, &text));
                sources.insert(evc_codegen::SourceFile::new(display, text));
            }
            exit_without_freeing(loaded);
            (diagnostics, sources, Some(summary))
        }
        Err(LoadError::Invalid {
            diagnostics,
            sources,
        }) => (diagnostics, sources, None),
        Err(error) => {
            return Err(error).with_context(|| format!("cannot check `{}`", dir.display()));
        }
    };
    diagnostic::sort(&mut diagnostics);
    let summary = summary.filter(|_| !diagnostics.iter().any(Diagnostic::is_error));
    let errors = diagnostics.iter().filter(|d| d.is_error()).count();
    let warnings = diagnostics.len() - errors;
    let mut stdout = std::io::stdout().lock();
    match format {
        Format::Json => {
            let document = serde_json::json!({
                "ok": summary.is_some(),
                "errors": errors,
                "warnings": warnings,
                "summary": summary,
                "diagnostics": diagnostics,
            });
            serde_json::to_writer_pretty(&mut stdout, &document)?;
            writeln!(stdout)?;
        }
        Format::Text => {
            write_human(&mut stdout, &diagnostics, &sources, use_color)?;
            match &summary {
                Some(summary) => writeln!(
                    stdout,
                    "ok: {}, {}, {}, {}, {}, {}, {} ({})",
                    count(summary.event_types, "event type"),
                    count(summary.versions, "version"),
                    count(summary.consumers, "consumer"),
                    plural_policies(summary.retry_policies),
                    plural_classes(summary.executor_classes),
                    count(summary.topics, "topic"),
                    count(summary.schedules, "schedule"),
                    count(warnings, "warning")
                )?,
                None => writeln!(
                    stdout,
                    "failed: {}, {} in `{}`",
                    count(errors, "error"),
                    count(warnings, "warning"),
                    dir.display()
                )?,
            }
        }
    }
    Ok(if summary.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FINDINGS)
    })
}

/// Lets go of a loaded model without freeing it. The command ends soon after, and the process's
/// exit returns the memory at once, where freeing a tree of a thousand event types node by node
/// takes a noticeable share of `evc check` (docs/bench/2026-12-04-contract-door-events.md).
fn exit_without_freeing<T>(value: T) {
    std::mem::forget(value);
}

/// Reads an AsyncAPI document the way the loader reads contracts: a regular file, opened without
/// blocking, and (with `inside`) resolving inside that directory; its cap is a document's
/// (`MAX_DOCUMENT_BYTES`), since it describes the whole contract set.
fn read_text(path: &Path, inside: Option<&Path>) -> anyhow::Result<String> {
    let bytes =
        evc_codegen::loader::read_capped_to(path, inside, evc_codegen::yaml::MAX_DOCUMENT_BYTES)
            .with_context(|| format!("cannot read `{}`", path.display()))?;
    let text =
        String::from_utf8(bytes).with_context(|| format!("`{}` is not UTF-8", path.display()))?;
    // As for contract files: a byte-order mark is not part of the text, and left in it would
    // shift the columns of the first line.
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_owned(),
        None => text,
    })
}

fn write_human(
    out: &mut impl Write,
    diagnostics: &[Diagnostic],
    sources: &Sources,
    color: bool,
) -> std::io::Result<()> {
    if !diagnostics.is_empty() {
        out.write_all(diagnostic::render_human(diagnostics, sources, color).as_bytes())?;
    }
    Ok(())
}

fn plural_policies(n: usize) -> String {
    if n == 1 {
        "1 retry policy".to_owned()
    } else {
        format!("{n} retry policies")
    }
}

fn plural_classes(n: usize) -> String {
    if n == 1 {
        "1 executor class".to_owned()
    } else {
        format!("{n} executor classes")
    }
}

fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// The counts `evc check` prints for a clean contract set.
#[derive(serde::Serialize)]
struct Summary {
    event_types: usize,
    versions: usize,
    consumers: usize,
    retry_policies: usize,
    executor_classes: usize,
    topics: usize,
    schedules: usize,
}

fn generate(dir: &Path, root: &Path, check_only: bool) -> anyhow::Result<ExitCode> {
    let loaded = match ContractSet::load(dir) {
        Ok(loaded) => loaded,
        Err(LoadError::Invalid {
            diagnostics,
            sources,
        }) => {
            let mut stdout = std::io::stdout().lock();
            write_human(&mut stdout, &diagnostics, &sources, false)?;
            writeln!(
                stdout,
                "failed: the contracts are invalid; nothing was generated (run `evc check`)"
            )?;
            return Ok(ExitCode::from(EXIT_FINDINGS));
        }
        Err(error) => {
            return Err(error).with_context(|| format!("cannot load `{}`", dir.display()));
        }
    };
    let layout = evc_codegen::emit::Layout::default();
    let artifacts = evc_codegen::generate::render(&loaded.contracts, root, &layout)?;
    exit_without_freeing(loaded);
    if check_only {
        let drifted = evc_codegen::generate::drift(&artifacts, root)?;
        if drifted.is_empty() {
            println!("ok: {} generated files are up to date", artifacts.len());
            return Ok(ExitCode::SUCCESS);
        }
        for (path, drift) in &drifted {
            let what = match drift {
                evc_codegen::generate::Drift::Missing => "missing",
                evc_codegen::generate::Drift::Stale => "stale",
            };
            println!("{what}: {}", escape(&path.display().to_string()));
        }
        println!(
            "failed: {} of {} generated files differ from the contracts; run `evc generate`",
            drifted.len(),
            artifacts.len()
        );
        return Ok(ExitCode::from(EXIT_FINDINGS));
    }
    let report = evc_codegen::generate::write(&artifacts, root)?;
    for path in &report.written {
        println!("wrote {}", escape(&path.display().to_string()));
    }
    println!(
        "ok: {} changed, {} unchanged",
        count(report.written.len(), "file"),
        report.unchanged
    );
    Ok(ExitCode::SUCCESS)
}

/// The arguments of `evc compat`.
struct CompatArgs {
    dir: PathBuf,
    against: Option<String>,
    against_dir: Option<PathBuf>,
    format: CompatFormat,
    color: Color,
    output: Option<PathBuf>,
}

fn compat(args: &CompatArgs) -> anyhow::Result<ExitCode> {
    let dir = &args.dir;
    let color = match (args.color, &args.output) {
        (Color::Auto, Some(_)) => false,
        (color, _) => use_color(color),
    };
    // The base is found (for a revision: checked out of git) while the head loads; it loads
    // after the head with the same cache, so the files the two share are parsed and checked once.
    let cache = LoadCache::new();
    let (head, base) = std::thread::scope(|scope| {
        let base = scope.spawn(|| base_side(args, dir));
        let head = ContractSet::load_with(dir, &cache);
        let base = base
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (head, base)
    });
    // The proposed contracts: their problems are findings (exit 100), shown as `evc check` does.
    let head = match head {
        Ok(loaded) => loaded.contracts,
        Err(LoadError::Invalid {
            mut diagnostics,
            sources,
        }) => {
            diagnostic::sort(&mut diagnostics);
            let errors = diagnostics.iter().filter(|d| d.is_error()).count();
            let mut stdout = std::io::stdout().lock();
            write_human(&mut stdout, &diagnostics, &sources, color)?;
            writeln!(
                stdout,
                "failed: {}, {} in `{}`; nothing was compared (run `evc check`)",
                count(errors, "error"),
                count(diagnostics.len() - errors, "warning"),
                dir.display()
            )?;
            return Ok(ExitCode::from(EXIT_FINDINGS));
        }
        Err(error) => {
            return Err(error).with_context(|| format!("cannot load `{}`", dir.display()));
        }
    };
    let head_label = format!("dir:{}", dir.display());

    let base_side = base?;
    let base = match &base_side.dir {
        Some((base_dir, what)) => load_base(base_dir, what, &cache)?,
        None => empty_like(&head),
    };
    // Its copies of the head's files are not needed for the comparison.
    drop(cache);
    let base_label = base_side.label;

    let report = compat::compare(&base, &head, &base_label, &head_label);
    exit_without_freeing((base, head));
    let options = compat::output::RenderOptions {
        color,
        path_prefix: Some(dir.display().to_string()),
    };
    let text = compat::output::render_with(&report, args.format.into(), &options);
    match &args.output {
        Some(path) => std::fs::write(path, &text)
            .with_context(|| format!("cannot write `{}`", path.display()))?,
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(text.as_bytes())?;
            stdout.flush()?;
        }
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FINDINGS)
    })
}

/// Where the base contracts of `evc compat` are, before they load.
struct BaseSide {
    /// The base directory and what to call it in errors; `None` when the contract directory did
    /// not exist at the base revision (every event type is then new).
    dir: Option<(PathBuf, String)>,
    /// How the report names the base (`dir:...`, `git:<commit>`).
    label: String,
    /// A revision's checkout, kept on disk until the base has loaded.
    _checkout: Option<git::BaseCheckout>,
}

/// Finds the base contracts: the `--against-dir` directory, or the contracts of a revision
/// checked out of git.
fn base_side(args: &CompatArgs, dir: &Path) -> anyhow::Result<BaseSide> {
    if let Some(base_dir) = &args.against_dir {
        return Ok(BaseSide {
            dir: Some((
                base_dir.clone(),
                format!("the base directory `{}`", base_dir.display()),
            )),
            label: format!("dir:{}", base_dir.display()),
            _checkout: None,
        });
    }
    let rev = match &args.against {
        Some(rev) => rev.clone(),
        None => git::default_base(dir).context("cannot choose the base revision")?,
    };
    let checkout = git::checkout_contracts(dir, &rev)
        .with_context(|| format!("cannot read the contracts of revision `{rev}`"))?;
    let label = format!("git:{}", checkout.short_commit());
    let dir = if checkout.existed() {
        Some((
            checkout.contracts_dir().to_owned(),
            format!(
                "the contracts of revision `{rev}` ({})",
                checkout.short_commit()
            ),
        ))
    } else {
        eprintln!(
            "evc: note: `{}` did not exist at revision `{rev}` ({}); every event type is new",
            dir.display(),
            checkout.short_commit()
        );
        None
    };
    Ok(BaseSide {
        dir,
        label,
        _checkout: Some(checkout),
    })
}

/// Loads base contracts; any problem is a tool failure naming `what`.
fn load_base(dir: &Path, what: &str, cache: &LoadCache) -> anyhow::Result<ContractSet> {
    match ContractSet::load_base_with(dir, cache) {
        Ok(loaded) => Ok(loaded.contracts),
        Err(LoadError::Invalid { diagnostics, .. }) => {
            let errors: Vec<&Diagnostic> = diagnostics.iter().filter(|d| d.is_error()).collect();
            let first = errors.first().map_or_else(String::new, |d| {
                format!(
                    "; first: {}: {} [{}]",
                    escape(&d.location.to_string()),
                    escape(&d.message),
                    d.rule.id()
                )
            });
            anyhow::bail!(
                "cannot load {what}: {}{first}; compare against another base",
                count(errors.len(), "error")
            )
        }
        Err(error) => Err(error).with_context(|| format!("cannot load {what}")),
    }
}

/// A contract set with the project settings of `head` and no event types or consumers: the base
/// when the contract directory did not exist at the base revision.
fn empty_like(head: &ContractSet) -> ContractSet {
    let mut base = head.clone();
    base.events.clear();
    base.consumers.clear();
    base.retry_policies.clear();
    base.topics.clear();
    base
}

fn import_asyncapi(file: &Path, out: &Path, force: bool) -> anyhow::Result<ExitCode> {
    let text = read_text(file, None)?;
    let imported = evc_codegen::import::asyncapi::import(&text)
        .with_context(|| format!("cannot import `{}`", file.display()))?;
    if !force {
        let existing: Vec<String> = imported
            .files
            .iter()
            .filter(|artifact| out.join(&artifact.path).exists())
            .map(|artifact| escape(&artifact.path.display().to_string()).into_owned())
            .collect();
        anyhow::ensure!(
            existing.is_empty(),
            "{} already exist in `{}` ({}); pass --force to overwrite",
            count(existing.len(), "file"),
            out.display(),
            existing.join(", ")
        );
    }
    let report = evc_codegen::generate::write(&imported.files, out)?;
    let mut stdout = std::io::stdout().lock();
    for path in &report.written {
        writeln!(
            stdout,
            "wrote {}",
            escape(&out.join(path).display().to_string())
        )?;
    }
    for note in &imported.unsupported {
        writeln!(stdout, "unsupported: {}", escape(note))?;
    }
    for note in &imported.adapted {
        writeln!(stdout, "adapted: {}", escape(note))?;
    }
    match ContractSet::load(out) {
        Ok(loaded) => {
            writeln!(
                stdout,
                "ok: imported {} and {} into `{}` ({} unsupported, {} adapted)",
                count(loaded.contracts.events.len(), "event type"),
                count(loaded.contracts.consumers.len(), "consumer"),
                out.display(),
                imported.unsupported.len(),
                imported.adapted.len()
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Err(LoadError::Invalid {
            diagnostics,
            sources,
        }) => {
            write_human(&mut stdout, &diagnostics, &sources, false)?;
            writeln!(
                stdout,
                "failed: the imported contracts do not pass `evc check`"
            )?;
            Ok(ExitCode::from(EXIT_FINDINGS))
        }
        Err(error) => Err(error.into()),
    }
}

fn schema(kind: Option<FileKind>, out: Option<&Path>) -> anyhow::Result<ExitCode> {
    match out {
        None => {
            let kind = kind.unwrap_or(FileKind::Event);
            let mut stdout = std::io::stdout().lock();
            writeln!(stdout, "{}", serde_json::to_string_pretty(&kind.schema())?)?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create `{}`", dir.display()))?;
            let kinds = kind.map_or_else(|| FileKind::ALL.to_vec(), |kind| vec![kind]);
            for kind in kinds {
                let path = dir.join(format!("{}.schema.json", kind.name()));
                let text = serde_json::to_string_pretty(&kind.schema())? + "\n";
                std::fs::write(&path, text)
                    .with_context(|| format!("cannot write `{}`", path.display()))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
