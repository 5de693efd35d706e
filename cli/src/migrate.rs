//! `evc migrate`: applies a directory of SQL migrations (evc's generated ones and any of the
//! application's beside them) with sqlx's migrator, one version at a time so each step is
//! printed as it runs. sqlx records each in `_sqlx_migrations` and refuses a file whose
//! checksum changed after it was applied.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::migrate::Migrator;
use sqlx::postgres::PgPoolOptions;

use crate::operate::Database;

/// `evc migrate [--status]`.
pub(crate) fn migrate(
    dir: &Path,
    status_only: bool,
    database: &Database,
) -> anyhow::Result<ExitCode> {
    let url = database.url()?;
    crate::operate::async_runtime()?.block_on(async move {
        let migrator = Migrator::new(dir)
            .await
            .with_context(|| format!("cannot read the migrations in {}", dir.display()))?;
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .connect(&url)
            .await
            .context("cannot connect to the outbox database")?;
        let applied = applied_versions(&pool).await?;
        let pending: Vec<_> = migrator
            .iter()
            .filter(|m| !applied.contains(&m.version))
            .collect();
        println!(
            "{}: {} migrations, {} applied, {} pending",
            dir.display(),
            migrator.iter().count(),
            migrator.iter().count() - pending.len(),
            pending.len()
        );
        if status_only {
            for m in migrator.iter() {
                let state = if applied.contains(&m.version) {
                    "applied"
                } else {
                    "pending"
                };
                println!("  {state}  {:04}  {}", m.version, m.description);
            }
            pool.close().await;
            return Ok(ExitCode::SUCCESS);
        }
        for (n, m) in pending.iter().enumerate() {
            let started = Instant::now();
            println!(
                "[{}/{}] {:04} {} ...",
                n + 1,
                pending.len(),
                m.version,
                m.description
            );
            migrator.run_to(m.version, &pool).await.with_context(|| {
                format!(
                    "migration {:04} failed; nothing of it was applied",
                    m.version
                )
            })?;
            println!("        done in {:.2} s", started.elapsed().as_secs_f64());
        }
        // Also validates the checksums of the migrations applied before.
        migrator
            .run(&pool)
            .await
            .context("an applied migration no longer matches its file")?;
        println!(
            "{}",
            if pending.is_empty() {
                "up to date".to_owned()
            } else {
                format!("applied {} migrations", pending.len())
            }
        );
        pool.close().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// The versions `_sqlx_migrations` records as applied (none before the first run).
async fn applied_versions(pool: &sqlx::PgPool) -> anyhow::Result<Vec<i64>> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(pool)
        .await
        .context("cannot read the migrations table")?;
    if !exists {
        return Ok(Vec::new());
    }
    sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
        .fetch_all(pool)
        .await
        .context("cannot read the migrations table")
}
