//! `evc purge`: removes the rows the deployed retention periods expire (docs/runtime.md,
//! "Retention"), or, without `--apply`, counts them. A thin shell over
//! `evc_runtime::Operate::purge_expired`: on PostgreSQL as the `evc_retention` role on the
//! deployed registry and its settings, on SQLite on the registry the outbox file records.

use std::time::SystemTime;

use anyhow::Context;
use clap::{Args, ValueEnum};
use evc_runtime::{Operate, PgStore, RetentionDescriptor, RetentionPurge, Role};

use crate::operate::{Database, Outbox, async_runtime, open_sqlite, pool};

/// `evc purge`'s arguments.
#[derive(Args)]
pub(crate) struct PurgeArgs {
    /// Who runs the purge (a login), recorded with it.
    #[arg(long = "as", value_name = "PERSON")]
    person: String,
    /// Why (1 to 500 characters), recorded with it.
    #[arg(long, value_name = "TEXT")]
    reason: String,
    /// Remove the rows; without it, count what would go and remove nothing.
    #[arg(long)]
    apply: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = PurgeFormat::Text)]
    format: PurgeFormat,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum PurgeFormat {
    /// One line per table, for people.
    Text,
    /// One JSON document, for tools.
    Json,
}

/// `evc purge`.
pub(crate) fn purge(args: &PurgeArgs, database: &Database) -> anyhow::Result<()> {
    let as_of = SystemTime::now();
    let (retention, purged) = async_runtime()?.block_on(async {
        match database.outbox()? {
            Outbox::Postgres(options) => {
                let pool = pool(&options, 2, Role::Retention).await?;
                let registry = evc_runtime::deployed_registry(&pool).await.context(
                    "cannot read the deployed registry (are the evc migrations applied?)",
                )?;
                let retention = registry.retention;
                let store = PgStore::new(pool.clone(), registry)
                    .context("the deployed registry does not load")?;
                let purged = run(&store, args, as_of).await;
                pool.close().await;
                Ok::<_, anyhow::Error>((retention, purged?))
            }
            Outbox::Sqlite(location, scope) => {
                let store = open_sqlite(&location, &scope, 2).await?;
                let purged = run(&store, args, as_of).await;
                let retention = store.registry().retention;
                store.close().await;
                Ok((retention, purged?))
            }
        }
    })?;
    match args.format {
        PurgeFormat::Text => print!("{}", text(&retention, &purged, args.apply)),
        PurgeFormat::Json => println!(
            "{}",
            serde_json::json!({
                "applied": args.apply,
                "retention_declared": !retention.keeps_everything(),
                "purged": purged,
            })
        ),
    }
    Ok(())
}

async fn run<S: Operate>(
    store: &S,
    args: &PurgeArgs,
    as_of: SystemTime,
) -> anyhow::Result<RetentionPurge> {
    store
        .purge_expired(as_of, &args.reason, &args.person, args.apply)
        .await
        .context(if args.apply {
            "the purge was refused; nothing was removed"
        } else {
            "the dry run was refused"
        })
}

/// The counts, one table per line.
fn text(retention: &RetentionDescriptor, purged: &RetentionPurge, applied: bool) -> String {
    if retention.keeps_everything() {
        return "the deployed contracts declare no retention (`retention` of evc.yaml): every \
                row is kept\n"
            .to_owned();
    }
    let mut out = match (applied, purged.purge_id) {
        (true, Some(id)) => format!("purge {id} removed:\n"),
        _ => "would remove (dry run; pass --apply to remove):\n".to_owned(),
    };
    for (table, rows) in [
        ("events", purged.events),
        ("deliveries", purged.deliveries),
        ("attempts", purged.attempts),
        ("reconciliations", purged.reconciliations),
        ("replay items", purged.replay_items),
        ("rejects", purged.rejects),
        ("idempotency records", purged.effects),
    ] {
        out.push_str(&format!("  {table:<20} {rows:>10}\n"));
    }
    out
}
