//! `evc evidence`: what the ledger alone says over a window (docs/runtime.md, "Usage
//! evidence"): event types appended in one trace, consumers failing together, chronic
//! (producer class, consumer) pairs and escalations by step kind. A thin shell over
//! `evc_runtime::Observe::evidence`: on PostgreSQL as `evc_reader` on the deployed registry,
//! on SQLite on the registry the outbox file records.

use std::fmt::Write as _;

use anyhow::Context;
use clap::{Args, ValueEnum};
use evc_codegen::printable::escape;
use evc_runtime::{
    EvidenceQuery, EvidenceReport, EvidenceSnapshot, MAX_EVIDENCE_SNAPSHOTS, Observe, PgStore, Role,
};

use crate::operate::{Database, Outbox, async_runtime, duration, open_sqlite, pool};

/// The longest `--window`: ten years, as `evc status` reads.
const MAX_WINDOW: std::time::Duration = std::time::Duration::from_secs(3_650 * 86_400);

/// `evc evidence`'s arguments.
#[derive(Args)]
pub(crate) struct EvidenceArgs {
    /// How far back to read the ledger.
    #[arg(long, default_value = "7d", value_name = "DURATION")]
    window: String,
    /// Two consumers fail together when both fail within one slot of this length.
    #[arg(long, default_value = "1m", value_name = "DURATION")]
    correlation: String,
    /// List a signal seen at least this many times.
    #[arg(long, default_value_t = 2, value_name = "N")]
    min_count: u32,
    /// List the snapshots the dispatchers recorded (`evidence` of `evc.yaml`), newest first,
    /// instead of reading the ledger now.
    #[arg(long, conflicts_with_all = ["window", "correlation", "min_count"])]
    snapshots: bool,
    /// With `--snapshots`: list at most this many.
    #[arg(long, default_value_t = 10, value_name = "N", requires = "snapshots",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_EVIDENCE_SNAPSHOTS)))]
    limit: u32,
    /// Output format.
    #[arg(long, value_enum, default_value_t = EvidenceFormat::Text)]
    format: EvidenceFormat,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum EvidenceFormat {
    /// One section per signal, for people.
    Text,
    /// The report as one JSON document, for tools.
    Json,
}

/// `evc evidence`.
pub(crate) fn evidence(args: &EvidenceArgs, database: &Database) -> anyhow::Result<()> {
    if args.snapshots {
        return snapshots(args, database);
    }
    let window = duration(&args.window, "--window")?;
    if window > MAX_WINDOW {
        anyhow::bail!(
            "--window {} is longer than {}, the longest window evc evidence reads",
            escape(&args.window),
            evc_codegen::duration::format(MAX_WINDOW)
        );
    }
    let query = EvidenceQuery::over(window)
        .correlation(duration(&args.correlation, "--correlation")?)
        .min_count(args.min_count);
    let report = async_runtime()?.block_on(async {
        match database.outbox()? {
            Outbox::Postgres(options) => {
                let pool = pool(&options, 2, Role::Reader).await?;
                let registry = evc_runtime::deployed_registry(&pool).await.context(
                    "cannot read the deployed registry (are the evc migrations applied?)",
                )?;
                let store = PgStore::new(pool.clone(), registry)
                    .context("the deployed registry does not load")?;
                let report = store.evidence(&query).await;
                pool.close().await;
                Ok::<_, anyhow::Error>(report?)
            }
            Outbox::Sqlite(location, scope) => {
                let store = open_sqlite(&location, &scope, 2).await?;
                let report = store.evidence(&query).await;
                store.close().await;
                Ok(report?)
            }
        }
    })?;
    match args.format {
        EvidenceFormat::Text => print!("{}", text(&report)),
        EvidenceFormat::Json => println!("{}", serde_json::to_string(&report)?),
    }
    Ok(())
}

/// `evc evidence --snapshots`.
fn snapshots(args: &EvidenceArgs, database: &Database) -> anyhow::Result<()> {
    let snapshots = async_runtime()?.block_on(async {
        match database.outbox()? {
            Outbox::Postgres(options) => {
                let pool = pool(&options, 2, Role::Reader).await?;
                let registry = evc_runtime::deployed_registry(&pool).await.context(
                    "cannot read the deployed registry (are the evc migrations applied?)",
                )?;
                let store = PgStore::new(pool.clone(), registry)
                    .context("the deployed registry does not load")?;
                let snapshots = store.evidence_snapshots(args.limit).await;
                pool.close().await;
                Ok::<_, anyhow::Error>(snapshots?)
            }
            Outbox::Sqlite(location, scope) => {
                let store = open_sqlite(&location, &scope, 2).await?;
                let snapshots = store.evidence_snapshots(args.limit).await;
                store.close().await;
                Ok(snapshots?)
            }
        }
    })?;
    match args.format {
        EvidenceFormat::Text => print!("{}", snapshots_text(&snapshots)),
        EvidenceFormat::Json => println!("{}", serde_json::to_string(&snapshots)?),
    }
    Ok(())
}

/// Each snapshot's slot and recording time, then its report.
fn snapshots_text(snapshots: &[EvidenceSnapshot]) -> String {
    if snapshots.is_empty() {
        return "no evidence snapshots recorded (the contracts' `evidence` of evc.yaml makes \
                the dispatchers record them)\n"
            .to_owned();
    }
    let at = |epoch: f64| {
        #[allow(clippy::cast_possible_truncation)]
        let millis = (epoch * 1_000.0).round() as i64;
        chrono::DateTime::from_timestamp_millis(millis)
            .map_or_else(|| format!("{epoch}"), |at| at.to_rfc3339())
    };
    let mut out = String::new();
    for (index, snapshot) in snapshots.iter().enumerate() {
        if index > 0 {
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "== snapshot of the slot starting {} (recorded {})",
            at(snapshot.slot),
            at(snapshot.recorded_at)
        );
        out.push_str(&text(&snapshot.report));
    }
    out
}

/// One section per signal, strongest first; `none` where nothing reached the threshold.
fn text(report: &EvidenceReport) -> String {
    let seconds =
        |s: f64| evc_codegen::duration::format(std::time::Duration::from_secs_f64(s.max(0.0)));
    let mut out = format!(
        "usage evidence over {} (slots of {}; signals seen at least {} times)\n",
        seconds(report.window_s),
        seconds(report.correlation_s),
        report.min_count
    );
    let none = |out: &mut String, empty: bool| {
        if empty {
            out.push_str("  none\n");
        }
    };
    out.push_str("\nco-triggered in one trace:\n");
    for pair in &report.co_triggered {
        let _ = writeln!(
            out,
            "  {} + {}: {} traces",
            escape(&pair.first),
            escape(&pair.second),
            pair.traces
        );
    }
    none(&mut out, report.co_triggered.is_empty());
    out.push_str("\nfailing together (a failed attempt of each in one slot):\n");
    for pair in &report.failing_together {
        let _ = writeln!(
            out,
            "  {} + {}: {} slots",
            escape(&pair.first),
            escape(&pair.second),
            pair.slots
        );
    }
    none(&mut out, report.failing_together.is_empty());
    out.push_str("\nchronic (producer class -> consumer):\n");
    for pair in &report.chronic {
        let _ = writeln!(
            out,
            "  {} -> {}: {} dead letters, {} lag breaches",
            escape(&pair.producer_class),
            escape(&pair.consumer),
            pair.dead_letters,
            pair.lag_breaches
        );
    }
    none(&mut out, report.chronic.is_empty());
    out.push_str("\nescalations (dead-lettered or quarantined) by step kind:\n");
    for kind in &report.escalations {
        let consumers: Vec<String> = kind
            .consumers
            .iter()
            .map(|(consumer, n)| format!("{} {n}", escape(consumer)))
            .collect();
        let _ = writeln!(
            out,
            "  {}: {} ({})",
            escape(&kind.step_kind),
            kind.escalations,
            consumers.join(", ")
        );
    }
    none(&mut out, report.escalations.is_empty());
    out
}
