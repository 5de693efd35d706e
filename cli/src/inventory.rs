//! `evc inventory CONSUMER`: the events a consumer would receive on going live, classified by
//! its contract's inventory rules (docs/runtime.md, "Inventory"); `--propose` records the
//! inventory, and another person's `--apply` delivers its safe and repaired events. A thin
//! shell over `evc_runtime::Operate::inventory`, `propose_inventory` and `apply_inventory`: on
//! PostgreSQL on the deployed registry and its settings, on SQLite on the registry the outbox
//! file records.

use std::fmt::Write as _;
use std::time::SystemTime;

use anyhow::{Context, anyhow};
use clap::{Args, ValueEnum};
use evc_codegen::printable::escape;
use evc_runtime::{
    InventoryApplied, InventoryReport, Operate, PgStore, ReplayApproval, ReplayError, Role,
};

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
    /// Record the inventory as proposed by `--as`; another person applies it (two-person
    /// rule).
    #[arg(long, conflicts_with = "apply", requires = "person")]
    propose: bool,
    /// Apply the proposed inventory whose digest `--digest` names: a pending delivery of each
    /// safe and repaired event, every decision recorded. Its proposer cannot.
    #[arg(
        long,
        requires_all = ["digest", "reason", "approval", "idempotency_key", "person"]
    )]
    apply: bool,
    /// The inventory's digest, as listed or proposed.
    #[arg(long)]
    digest: Option<String>,
    /// Why (1 to 500 characters).
    #[arg(long)]
    reason: Option<String>,
    /// Who or what approved it (a ticket, a change request).
    #[arg(long)]
    approval: Option<String>,
    /// Applies once; repeating it answers with the first result.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Who proposes (`--propose`) or approves (`--apply`): a login or a name, recorded.
    #[arg(long = "as", value_name = "PERSON")]
    person: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum InventoryFormat {
    /// Counts, then one line per event, for people.
    Text,
    /// One JSON document, for tools.
    Json,
}

/// Runs `$body` with `$store` bound to a store of `$database` whose PostgreSQL sessions take
/// `$role`, on the deployed registry (PostgreSQL) or the one the file records (SQLite).
macro_rules! with_store {
    ($database:expr, $role:expr, |$store:ident| $body:expr) => {
        async_runtime()?.block_on(async {
            match $database.outbox()? {
                Outbox::Postgres(options) => {
                    let pool = pool(&options, 2, $role).await?;
                    let registry = evc_runtime::deployed_registry(&pool).await.context(
                        "cannot read the deployed registry (are the evc migrations applied?)",
                    )?;
                    let $store = PgStore::new(pool.clone(), registry)
                        .context("the deployed registry does not load")?;
                    let result = $body;
                    pool.close().await;
                    result
                }
                Outbox::Sqlite(location, scope) => {
                    let $store = open_sqlite(&location, &scope, 2).await?;
                    let result = $body;
                    $store.close().await;
                    result
                }
            }
        })
    };
}

/// `evc inventory`: the list (as `evc_operator`), `--propose` (as `evc_operator`) or
/// `--apply` (as `evc_approver`).
pub(crate) fn inventory(args: &InventoryArgs, database: &Database) -> anyhow::Result<()> {
    let consumer = args.consumer.as_str();
    let person = args.person.as_deref().unwrap_or_default();
    if args.apply {
        let approval = ReplayApproval::new(
            args.digest.clone().unwrap_or_default(),
            args.reason.clone().unwrap_or_default(),
            args.approval.clone().unwrap_or_default(),
            args.idempotency_key.clone().unwrap_or_default(),
            person,
        );
        let applied = with_store!(database, Role::Approver, |store| {
            store
                .apply_inventory(consumer, args.limit, &approval)
                .await
                .map_err(refused("apply"))
        })?;
        match args.format {
            InventoryFormat::Text => print!("{}", applied_text(consumer, &applied)),
            InventoryFormat::Json => println!("{}", serde_json::to_string(&applied)?),
        }
        return Ok(());
    }
    let (report, plan_id) = if args.propose {
        let proposed = with_store!(database, Role::Operator, |store| {
            store
                .propose_inventory(consumer, args.limit, person)
                .await
                .map_err(refused("proposal"))
        })?;
        (proposed.plan, Some(proposed.plan_id))
    } else {
        let as_of = SystemTime::now();
        let report = with_store!(database, Role::Operator, |store| {
            Ok::<_, anyhow::Error>(store.inventory(consumer, as_of, args.limit).await?)
        })?;
        (report, None)
    };
    match args.format {
        InventoryFormat::Text => {
            print!("{}", text(&report));
            if let Some(plan_id) = plan_id {
                println!(
                    "proposed as plan {plan_id} by {}; another person applies it: evc inventory \
                     {} --apply --digest {} --reason TEXT --approval REF --idempotency-key KEY \
                     --as PERSON",
                    escape(person.trim()),
                    escape(consumer),
                    report.digest
                );
            }
        }
        InventoryFormat::Json => {
            let mut value = serde_json::to_value(&report)?;
            if let Some(plan_id) = plan_id {
                value["plan_id"] = plan_id.into();
            }
            println!("{value}");
        }
    }
    Ok(())
}

/// A refusal says that `what` was refused and nothing written.
fn refused(what: &'static str) -> impl Fn(ReplayError) -> anyhow::Error {
    move |error| match error {
        ReplayError::Database(error) => error.into(),
        ReplayError::UnknownConsumer(name) => anyhow!(
            "consumer {} is not deployed in this database",
            escape(&name)
        ),
        refusal => anyhow!("{what} refused, nothing written: {refusal}"),
    }
}

/// What an apply did.
fn applied_text(consumer: &str, applied: &InventoryApplied) -> String {
    let counts = &applied.counts;
    if applied.repeated {
        return format!(
            "inventory {} was applied before under this idempotency key ({} deliveries); \
             nothing new\n",
            applied.inventory_id, applied.delivered
        );
    }
    format!(
        "inventory {}: {} new deliveries of {}, pending ({} safe, {} repaired); {} quarantined \
         (evc dlq list {}), {} expired\n",
        applied.inventory_id,
        applied.delivered,
        escape(consumer),
        counts.safe,
        counts.repair,
        applied.quarantined,
        escape(consumer),
        counts.expire
    )
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
