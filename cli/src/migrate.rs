//! `evc migrate`: applies a directory of SQL migrations (evc's generated ones and any of the
//! application's beside them) with sqlx's migrator, one version at a time so each step is
//! printed as it runs. sqlx records each in `_sqlx_migrations`.
//!
//! The whole run holds sqlx's migration lock (a session-level PostgreSQL advisory lock keyed on
//! the database name, the one `sqlx::migrate!().run()` takes too): the applied list is read
//! under it, so two runs at once apply each migration once, the second waiting and then finding
//! nothing pending. Before applying anything the directory is compared with the recorded rows;
//! a migration changed since it was applied, a failed one, a missing file or a new file
//! numbered below the applied ones stops the run with nothing applied.
//!
//! On a `sqlite:` URL it creates the outbox file if missing and applies the SQLite store's own
//! schema (the migrations every open of the store applies); the directory's migrations are
//! PostgreSQL's and are not read (docs/cli.md, "SQLite outboxes").

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use sqlx::Connection;
use sqlx::migrate::{Migrate, Migration, Migrator};
use sqlx::postgres::PgConnection;

use crate::operate::{Database, Outbox};
use evc_codegen::printable::escape;

/// sqlx's table of applied migrations.
const TABLE: &str = "_sqlx_migrations";

/// How long a run waits for the migration lock before it says that it waits.
const LOCK_NOTE_AFTER: Duration = Duration::from_secs(1);

/// `evc migrate [--status]`.
pub(crate) fn migrate(
    dir: &Path,
    status_only: bool,
    database: &Database,
) -> anyhow::Result<ExitCode> {
    if database.tenant().is_some() {
        bail!("evc migrate works on every tenant's rows: drop --tenant");
    }
    let options = match database.outbox()? {
        Outbox::Postgres(options) => options,
        Outbox::Sqlite(location, _) => return sqlite(&location, status_only),
    };
    crate::operate::async_runtime()?.block_on(async move {
        let migrator = Migrator::new(dir)
            .await
            .with_context(|| format!("cannot read the migrations in {}", dir.display()))?;
        let migrations: Vec<&Migration> = migrator
            .iter()
            .filter(|m| !m.migration_type.is_down_migration())
            .collect();
        let mut connection = crate::operate::connect(&options).await?;
        if !status_only {
            lock(&mut connection).await?;
        }
        let recorded = recorded(&mut connection).await?;
        let entries = compare(&migrations, &recorded);
        let pending: Vec<&Migration> = entries
            .iter()
            .filter(|e| e.state == State::Pending)
            .filter_map(|e| e.migration)
            .collect();
        let problems: Vec<&Entry<'_>> = entries.iter().filter(|e| e.state.is_problem()).collect();
        let applied = entries
            .iter()
            .filter(|e| e.migration.is_some() && e.state.is_recorded())
            .count();
        println!(
            "{}: {}, {applied} applied, {} pending",
            escape(&dir.display().to_string()),
            crate::count(migrations.len(), "migration"),
            migrations.len() - applied
        );
        if status_only {
            for entry in &entries {
                println!(
                    "  {}  {:04}  {}",
                    entry.state.as_str(),
                    entry.version,
                    entry
                        .migration
                        .map_or_else(|| "(no file)".into(), |m| escape(&m.description))
                );
            }
            let _ = connection.close().await;
            if problems.is_empty() {
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "failed: {} {} attention; evc migrate applies nothing until they are fixed",
                crate::count(problems.len(), "migration"),
                need(problems.len())
            );
            return Ok(ExitCode::from(crate::EXIT_FINDINGS));
        }
        if !problems.is_empty() {
            let highest = highest_recorded(&recorded);
            for entry in &problems {
                eprintln!("evc: error: {}", entry.problem(dir, highest));
            }
            bail!(
                "nothing was applied: {} {} attention (evc migrate --status lists them)",
                crate::count(problems.len(), "migration"),
                need(problems.len())
            );
        }
        if !pending.is_empty() {
            connection
                .ensure_migrations_table(TABLE)
                .await
                .context("cannot create the migrations table")?;
        }
        for (n, m) in pending.iter().enumerate() {
            let started = Instant::now();
            println!(
                "[{}/{}] {:04} {} ...",
                n + 1,
                pending.len(),
                m.version,
                escape(&m.description)
            );
            connection.apply(TABLE, m).await.with_context(|| {
                format!(
                    "migration {:04} failed; nothing of it was applied",
                    m.version
                )
            })?;
            println!("        done in {:.2} s", started.elapsed().as_secs_f64());
        }
        connection
            .unlock()
            .await
            .context("cannot release the migration lock")?;
        let _ = connection.close().await;
        if pending.is_empty() {
            println!("up to date");
        } else {
            println!("applied {}", crate::count(pending.len(), "migration"));
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `evc migrate` on a SQLite outbox file.
fn sqlite(location: &str, status_only: bool) -> anyhow::Result<ExitCode> {
    if status_only {
        return Err(crate::operate::not_on_sqlite("evc migrate --status"));
    }
    let applied = crate::operate::async_runtime()?
        .block_on(evc_runtime::SqliteStore::apply_schema(location))
        .context("cannot apply the SQLite store's schema to the outbox file")?;
    for (version, name) in &applied {
        println!("applied {version:04} {name}");
    }
    if applied.is_empty() {
        println!("up to date");
    } else {
        println!(
            "applied {} of the SQLite store's schema",
            crate::count(applied.len(), "migration")
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn need(n: usize) -> &'static str {
    if n == 1 { "needs" } else { "need" }
}

/// Takes sqlx's migration lock on `connection`, saying so when another run holds it.
async fn lock(connection: &mut PgConnection) -> anyhow::Result<()> {
    let mut locked = connection.lock();
    tokio::select! {
        result = &mut locked => return result.context("cannot take the migration lock"),
        () = tokio::time::sleep(LOCK_NOTE_AFTER) => {}
    }
    eprintln!("evc migrate: waiting for another migration of this database to finish");
    locked.await.context("cannot take the migration lock")
}

/// A row of `_sqlx_migrations`.
struct Recorded {
    version: i64,
    checksum: Vec<u8>,
    success: bool,
}

/// The rows of `_sqlx_migrations`, by version (none before the first run).
async fn recorded(connection: &mut PgConnection) -> anyhow::Result<Vec<Recorded>> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(&mut *connection)
        .await
        .context("cannot read the migrations table")?;
    if !exists {
        return Ok(Vec::new());
    }
    let rows: Vec<(i64, Vec<u8>, bool)> =
        sqlx::query_as("SELECT version, checksum, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&mut *connection)
            .await
            .context("cannot read the migrations table")?;
    Ok(rows
        .into_iter()
        .map(|(version, checksum, success)| Recorded {
            version,
            checksum,
            success,
        })
        .collect())
}

fn highest_recorded(recorded: &[Recorded]) -> Option<i64> {
    recorded.iter().map(|r| r.version).max()
}

/// A version's state, comparing the directory with `_sqlx_migrations`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Recorded, with the file's checksum.
    Applied,
    /// Not recorded, numbered above every recorded version.
    Pending,
    /// Recorded with another checksum: the file was edited after it was applied.
    Changed,
    /// Recorded with `success = false`.
    Failed,
    /// Recorded, but no file has the version.
    Missing,
    /// Not recorded, numbered below a recorded version: applying it now would run it after
    /// migrations it precedes.
    OutOfOrder,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::Pending => "pending",
            Self::Changed => "changed",
            Self::Failed => "failed",
            Self::Missing => "missing",
            Self::OutOfOrder => "out of order",
        }
    }

    fn is_problem(self) -> bool {
        !matches!(self, Self::Applied | Self::Pending)
    }

    /// Whether `_sqlx_migrations` has a row for the version.
    fn is_recorded(self) -> bool {
        matches!(
            self,
            Self::Applied | Self::Changed | Self::Failed | Self::Missing
        )
    }
}

/// One version of the comparison.
struct Entry<'a> {
    version: i64,
    state: State,
    /// The file's migration (none when it is missing).
    migration: Option<&'a Migration>,
}

impl Entry<'_> {
    /// What is wrong and what to do, for a problem state.
    fn problem(&self, dir: &Path, highest: Option<i64>) -> String {
        let version = self.version;
        let name = self
            .migration
            .map_or_else(String::new, |m| format!(" ({})", escape(&m.description)));
        match self.state {
            State::Changed => format!(
                "migration {version:04}{name} changed since it was applied (its checksum \
                 differs from the recorded one); restore the file as it was applied and put \
                 the change in a new migration"
            ),
            State::Failed => format!(
                "migration {version:04}{name} failed when it was applied (success = false in \
                 {TABLE}); repair the database by hand, then delete that row"
            ),
            State::Missing => format!(
                "migration {version:04} was applied but its file is not in {}; restore the \
                 file, or pass the directory it was applied from",
                escape(&dir.display().to_string())
            ),
            State::OutOfOrder => {
                let highest = highest.unwrap_or(version);
                format!(
                    "migration {version:04}{name} is numbered below the highest applied \
                     migration {highest:04}, so it would run after migrations it precedes; \
                     renumber it above {highest:04}"
                )
            }
            State::Applied | State::Pending => String::new(),
        }
    }
}

/// Each version of the directory and of `_sqlx_migrations`, in order, with its state.
fn compare<'a>(migrations: &[&'a Migration], recorded: &[Recorded]) -> Vec<Entry<'a>> {
    let highest = highest_recorded(recorded);
    let mut entries: Vec<Entry<'a>> = migrations
        .iter()
        .map(|&m| {
            let state = match recorded.iter().find(|r| r.version == m.version) {
                Some(row) if !row.success => State::Failed,
                Some(row) if row.checksum != *m.checksum => State::Changed,
                Some(_) => State::Applied,
                None if highest.is_some_and(|highest| m.version < highest) => State::OutOfOrder,
                None => State::Pending,
            };
            Entry {
                version: m.version,
                state,
                migration: Some(m),
            }
        })
        .collect();
    entries.extend(
        recorded
            .iter()
            .filter(|r| !migrations.iter().any(|m| m.version == r.version))
            .map(|r| Entry {
                version: r.version,
                state: State::Missing,
                migration: None,
            }),
    );
    entries.sort_by_key(|e| e.version);
    entries
}
