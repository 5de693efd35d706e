//! `evc inventory CONSUMER`: the events a consumer would receive on going live, classified by
//! its contract's inventory rules (docs/runtime.md, "Inventory"). A thin shell over
//! `evc_runtime::Operate::inventory`: on PostgreSQL as `evc_operator` on the deployed registry
//! and its settings, on SQLite on the registry the outbox file records. Nothing is written.

use std::fmt::Write as _;
use std::time::SystemTime;

use anyhow::Context;
use clap::{Args, ValueEnum};
use evc_codegen::printable::escape;
use evc_runtime::{InventoryReport, Operate, PgStore, Role};

use crate::operate::{Database, Outbox, async_runtime, open_sqlite, pool};

/// `evc inventory`'s arguments.
#[derive(Args)]
pub(crate) struct InventoryArgs {
    /// The consumer.
    consumer: String,
    /// Classify at most this many events, oldest first (1 to 10000).
    #[arg(long, default_value_t = 1_000, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(evc_runtime::MAX_INVENTORY_EVENTS)))]
    limit: u32,
    /// Output format.
    #[arg(long, value_enum, default_value_t = InventoryFormat::Text)]
    format: InventoryFormat,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum InventoryFormat {
    /// Counts, then one line per event, for people.
    Text,
    /// The report as one JSON document, for tools.
    Json,
}

/// `evc inventory`.
pub(crate) fn inventory(args: &InventoryArgs, database: &Database) -> anyhow::Result<()> {
    let as_of = SystemTime::now();
    let report = async_runtime()?.block_on(async {
        match database.outbox()? {
            Outbox::Postgres(options) => {
                let pool = pool(&options, 2, Role::Operator).await?;
                let registry = evc_runtime::deployed_registry(&pool).await.context(
                    "cannot read the deployed registry (are the evc migrations applied?)",
                )?;
                let store = PgStore::new(pool.clone(), registry)
                    .context("the deployed registry does not load")?;
                let report = store.inventory(&args.consumer, as_of, args.limit).await;
                pool.close().await;
                Ok::<_, anyhow::Error>(report?)
            }
            Outbox::Sqlite(location, scope) => {
                let store = open_sqlite(&location, &scope, 2).await?;
                let report = store.inventory(&args.consumer, as_of, args.limit).await;
                store.close().await;
                Ok(report?)
            }
        }
    })?;
    match args.format {
        InventoryFormat::Text => print!("{}", text(&report)),
        InventoryFormat::Json => println!("{}", serde_json::to_string(&report)?),
    }
    Ok(())
}

/// The counts, the rules, then one line per event that is not safe (a safe event needs no
/// decision).
fn text(report: &InventoryReport) -> String {
    let mut out = String::new();
    let max_age = report.max_age_ms.map_or_else(
        || "none".to_owned(),
        |ms| evc_codegen::duration::format(std::time::Duration::from_millis(ms)),
    );
    let _ = writeln!(
        out,
        "inventory of {} (max_age {max_age}, repair {}): {} safe, {} repair, {} quarantine, {} \
         expire{}",
        escape(&report.consumer),
        report.repair,
        report.counts.safe,
        report.counts.repair,
        report.counts.quarantine,
        report.counts.expire,
        if report.truncated {
            " (more events wait: raise --limit)"
        } else {
            ""
        }
    );
    let _ = writeln!(out, "digest {}", report.digest);
    for item in &report.items {
        let _ = write!(
            out,
            "  {:<10} {} {}@{}",
            item.class.as_str(),
            item.event_id,
            escape(&item.event_type),
            escape(&item.version)
        );
        if let Some(reason) = item.reason {
            let _ = write!(out, " {reason}");
        }
        if let (Some(target), Some(repaired)) = (&item.target_version, &item.repaired_digest) {
            let _ = write!(
                out,
                " -> {} (payload {} -> {})",
                escape(target),
                &item.payload_digest[..12.min(item.payload_digest.len())],
                &repaired[..12.min(repaired.len())]
            );
        }
        out.push('\n');
    }
    out
}
