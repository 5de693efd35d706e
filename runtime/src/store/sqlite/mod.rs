//! The embedded SQLite store: one process owns an outbox file. Appends run in the caller's
//! transaction, rejections are audited on the store's pool, and the fenced lease operations
//! have the PostgreSQL store's semantics ([`crate::store::postgres::PgStore`]; docs/runtime.md,
//! "SQLite store").
//!
//! ```no_run
//! # async fn example(registry: evc_runtime::Registry, event: evc_runtime::OutgoingEvent)
//! #     -> Result<(), Box<dyn std::error::Error>> {
//! use evc_runtime::SqliteStore;
//! use evc_runtime::{AppendOptions, Publish};
//!
//! // Creates the file if missing, applies the store's migrations, takes `outbox.db.lock`.
//! let store = SqliteStore::open("outbox.db", registry).await?;
//! let wake = store.wakeups("audit.log").expect("a registered consumer");
//! let mut tx = store.begin().await?; // BEGIN IMMEDIATE
//! // ... the caller's own writes on `tx` ...
//! let mut publisher = store
//!     .publisher(&mut tx)
//!     .with_options(AppendOptions::new().idempotency_key("order-42"));
//! let receipt = publisher.publish(event).await?;
//! tx.commit().await?; // the event and its deliveries, or nothing; `wake` fires on commit
//! # let _ = (receipt, wake); Ok(()) }
//! ```
//!
//! What differs from PostgreSQL, all from SQLite having one writer at a time:
//!
//! - One store per file: [`SqliteStore::open`] takes an exclusive lock on `<file>.lock` and
//!   refuses ([`SqliteOpenError::Locked`]) while another store holds it, in this process or
//!   another. Clone the store to share it. The lock belongs to the open file, so a child
//!   process started at the moment the store closes keeps it until the child execs.
//! - Every write transaction the store starts is `BEGIN IMMEDIATE`; a caller's transaction
//!   that writes (an append, a lease fence) keeps every other writer (claims, acks, other
//!   appends) waiting until it ends, for at most the busy timeout. Begin write transactions
//!   with [`SqliteStore::begin`] (also `BEGIN IMMEDIATE`): a deferred transaction that reads
//!   first may fail to upgrade to a writer.
//! - Times are the process's clock (epoch seconds), not a database clock.
//! - Wake-ups are in-process ([`SqliteStore::wakeups`]): no listener, no doorbell.

use std::collections::{BTreeSet, HashMap};
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use sqlx::migrate::{MigrateError, Migration, MigrationType, Migrator};
use sqlx::query::Query;
use sqlx::sqlite::{
    Sqlite, SqliteArguments, SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool,
    SqlitePoolOptions, SqliteQueryResult, SqliteRow, SqliteSynchronous,
};
use sqlx::{Connection, Row, SqlSafeStr, Transaction};
use tokio::sync::{Notify, watch};
use uuid::Uuid;

use crate::append::{
    AppendError, AppendOptions, AppendReceipt, CheckedEvent, Checker, NewEvent, Refused, order_key,
};
use crate::handler::FailureClass;
use crate::policy::{DigestKey, PayloadPolicy};
use crate::publish::{OutgoingEvent, Publish};
use crate::registry::Registry;
use crate::retry::RetryDecision;
use crate::store::parity::Drift;
use crate::store::postgres::PolicySource;
use crate::store::{
    AckBatch, AttemptRecord, ClaimRequest, Claimed, ClaimedEvents, DeliveryRecord, DeliveryStatus,
    DispatchError, EffectRecord, EventRecord, Heartbeat, Hold, Lease, ReconciliationRecord,
    RegistryDrift, RejectRecord, Store, StoreError,
};
use crate::tenant::TenantScope;

mod cursor;
mod cutover;
mod dispatch;
mod evidence;
mod inventory;
mod lag;
mod lifecycle;
mod observe;
mod operate;
mod read;
mod recorded;
mod retention;
mod schedule;
pub(crate) mod sql;
mod wake;

/// The store's schema, applied when it opens its file.
const MIGRATION_0001: &str = include_str!("../../../migrations/sqlite/0001_evc_runtime.sql");

/// The replay tables, applied after [`MIGRATION_0001`].
const MIGRATION_0002: &str = include_str!("../../../migrations/sqlite/0002_evc_replays.sql");

/// The recorded registry document, applied after [`MIGRATION_0002`].
const MIGRATION_0003: &str =
    include_str!("../../../migrations/sqlite/0003_evc_registry_document.sql");

/// Replay keys scoped per consumer, applied after [`MIGRATION_0003`]. It rebuilds a table with
/// foreign keys off, so it runs outside sqlx's migration transaction and brings its own.
const MIGRATION_0004: &str = include_str!("../../../migrations/sqlite/0004_evc_replay_keys.sql");

/// The two-person rule of replay: recorded plans, and the plan and approver of each replay.
const MIGRATION_0005: &str = include_str!("../../../migrations/sqlite/0005_evc_plans.sql");

/// A recorded plan is applied once.
const MIGRATION_0006: &str = include_str!("../../../migrations/sqlite/0006_evc_plan_once.sql");

/// Idempotency keys scoped per producer class and tenant.
const MIGRATION_0007: &str =
    include_str!("../../../migrations/sqlite/0007_evc_tenant_idempotency_keys.sql");

/// Effect keys scoped per consumer and tenant.
const MIGRATION_0008: &str =
    include_str!("../../../migrations/sqlite/0008_evc_tenant_effect_keys.sql");

/// Who changed a consumer's operator state, and why.
const MIGRATION_0009: &str = include_str!("../../../migrations/sqlite/0009_evc_state_changes.sql");

/// The relay's fenced cursors.
const MIGRATION_0010: &str = include_str!("../../../migrations/sqlite/0010_evc_relay_cursors.sql");
const MIGRATION_0011: &str = include_str!("../../../migrations/sqlite/0011_evc_relay_progress.sql");

/// Tenant scopes of records, pauses per tenant and replay keys scoped per tenant.
const MIGRATION_0012: &str = include_str!("../../../migrations/sqlite/0012_evc_tenant_scopes.sql");

/// Effect keys unique within an executor class's idempotency namespace.
const MIGRATION_0013: &str =
    include_str!("../../../migrations/sqlite/0013_evc_effect_namespaces.sql");

/// Where each schedule stands.
const MIGRATION_0014: &str = include_str!("../../../migrations/sqlite/0014_evc_schedules.sql");

/// Lag breaches.
const MIGRATION_0015: &str = include_str!("../../../migrations/sqlite/0015_evc_lag_breaches.sql");

/// Legacy outcomes and explained differences (the cut-over gate).
const MIGRATION_0016: &str = include_str!("../../../migrations/sqlite/0016_evc_cutover.sql");
/// Retention purges.
const MIGRATION_0017: &str = include_str!("../../../migrations/sqlite/0017_evc_purges.sql");

/// Inventory plans, applies and their items.
const MIGRATION_0018: &str = include_str!("../../../migrations/sqlite/0018_evc_inventories.sql");
const MIGRATION_0019: &str =
    include_str!("../../../migrations/sqlite/0019_evc_evidence_snapshots.sql");

/// Connections of the store's pool unless [`SqliteStoreBuilder::max_connections`] says
/// otherwise: one for a caller's transaction, one for the reject audit and the dispatcher's
/// work beside it, and readers (WAL lets them read while one connection writes).
pub(crate) const DEFAULT_MAX_CONNECTIONS: u32 = 4;

/// How long a statement waits for the write lock unless [`SqliteStoreBuilder::busy_timeout`]
/// says otherwise.
pub(crate) const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a SQLite store could not open its file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqliteOpenError {
    /// Another store holds the file's lock file: in another process, or in this one (a file
    /// has one store; clone it to share it).
    #[error(
        "outbox file {} is in use: another store holds its lock file {}",
        database.display(),
        lock_file.display()
    )]
    Locked {
        /// The database file.
        database: PathBuf,
        /// Its lock file, `<database>.lock`.
        lock_file: PathBuf,
    },
    /// The lock file could not be created or locked.
    #[error("lock file {}: {source}", path.display())]
    LockFile {
        /// The lock file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The location is not a file (`:memory:`, `mode=memory`): an in-memory database has no
    /// lock file and dies with its last connection, so it cannot hold an outbox.
    #[error("an in-memory SQLite database cannot hold an outbox; give a file path")]
    InMemory,
    /// The location does not parse as a `sqlite:` URL.
    #[error("SQLite location {location}: {source}")]
    Location {
        /// The location as given.
        location: String,
        /// Why.
        source: sqlx::Error,
    },
    /// The store's migrations failed.
    #[error("migrations of {}: {source}", path.display())]
    Migrate {
        /// The database file.
        path: PathBuf,
        /// Why.
        source: MigrateError,
    },
    /// [`SqliteStore::recorded`] found no file: it never creates one.
    #[error("no outbox file at {}", path.display())]
    Missing {
        /// The database file.
        path: PathBuf,
    },
    /// [`SqliteStore::recorded`] found a SQLite file that no evc store ever opened (it has no
    /// evc tables); nothing was written to it.
    #[error("{} is not an evc outbox file: no evc store ever opened it", path.display())]
    NotAnOutbox {
        /// The database file.
        path: PathBuf,
    },
    /// [`SqliteStore::recorded`] found an outbox file that records no whole registry: no
    /// application opened it since the store began recording one. Open it once with the
    /// application.
    #[error(
        "outbox file {} records no registry; open it once with the application first",
        path.display()
    )]
    NoRecordedRegistry {
        /// The database file.
        path: PathBuf,
    },
    /// The registry the file records does not read back (never quoted: it is the file's
    /// content).
    #[error("the registry outbox file {} records does not read back: {reason}", path.display())]
    RecordedRegistry {
        /// The database file.
        path: PathBuf,
        /// What is wrong with the document.
        reason: String,
    },
    /// A registered schema does not compile, the file was opened with another registry
    /// ([`StoreError::Drift`]), or the database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for SqliteOpenError {
    fn from(error: sqlx::Error) -> Self {
        Self::Store(StoreError::Database(error))
    }
}

/// Builds and opens a [`SqliteStore`]: payload policy and digest key as
/// [`crate::PgStoreBuilder`]'s, plus the pool size, the busy timeout and whether a changed
/// registry is accepted.
#[derive(Debug)]
#[must_use]
pub struct SqliteStoreBuilder {
    location: String,
    /// `None`: the registry the file records ([`SqliteStore::recorded`]).
    registry: Option<Registry>,
    policy: Option<PayloadPolicy>,
    digest_key: Option<DigestKey>,
    max_connections: u32,
    busy_timeout: Duration,
    accept_registry_change: bool,
}

impl SqliteStoreBuilder {
    /// Replaces the registry's payload policy with `policy` (its digest key too, unless
    /// [`SqliteStoreBuilder::digest_key`] sets one).
    pub fn payload_policy(mut self, policy: PayloadPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// The deployment's key for the digests of refused payloads ([`DigestKey::from_env`]).
    pub fn digest_key(mut self, key: DigestKey) -> Self {
        self.digest_key = Some(key);
        self
    }

    /// Connections of the store's pool (at least 2: a caller's transaction holds one while
    /// the reject audit needs another). Default [`DEFAULT_MAX_CONNECTIONS`].
    pub fn max_connections(mut self, connections: u32) -> Self {
        self.max_connections = connections.max(2);
        self
    }

    /// How long a statement waits for the database's write lock before it fails with
    /// "database is locked". Default [`DEFAULT_BUSY_TIMEOUT`].
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Opens a file last opened with another registry (the application's contracts changed):
    /// records this registry instead of refusing with [`StoreError::Drift`]. Deliveries
    /// already in the file stay as they were fanned out.
    pub fn accept_registry_change(mut self) -> Self {
        self.accept_registry_change = true;
        self
    }

    /// Opens the store: takes `<file>.lock`, creates the file if missing (WAL journal,
    /// `synchronous = NORMAL`, foreign keys on, the busy timeout), applies the store's
    /// migrations and records the registry on first open; a later open with another
    /// registry is refused unless [`SqliteStoreBuilder::accept_registry_change`].
    ///
    /// # Errors
    /// [`SqliteOpenError::Locked`] naming the lock file when another store holds it; the
    /// other [`SqliteOpenError`] variants.
    pub async fn open(self) -> Result<SqliteStore, SqliteOpenError> {
        let (options, path) = connect_options(&self.location)?;
        let recorded = self.registry.is_none();
        // The application's registry is checked before anything is created; a recorded one
        // is read from the file.
        let prepared = self
            .registry
            .map(|registry| Prepared::new(registry, self.policy.clone(), self.digest_key.clone()))
            .transpose()?;
        if recorded && !path.is_file() {
            return Err(SqliteOpenError::Missing { path });
        }
        let lock = lock_file(&path)?;

        let options = options
            .create_if_missing(!recorded)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(self.busy_timeout);
        let pool = SqlitePoolOptions::new()
            .max_connections(self.max_connections)
            .connect_with(options)
            .await?;
        if recorded {
            let outbox: bool = sqlx::query_scalar(sql::IS_OUTBOX).fetch_one(&pool).await?;
            if !outbox {
                pool.close().await;
                return Err(SqliteOpenError::NotAnOutbox { path });
            }
        }
        migrate(&pool, &path).await?;
        let prepared = match prepared {
            Some(prepared) => prepared,
            None => {
                let registry = recorded_registry(&pool, &path).await?;
                Prepared::new(registry, self.policy, self.digest_key)?
            }
        };

        let store = SqliteStore {
            tenant: None,
            inner: Arc::new(Inner {
                pool,
                checker: prepared.checker,
                policy: prepared.policy,
                policy_source: prepared.policy_source,
                attempt_limits: prepared.attempt_limits,
                stale_tokens: AtomicU64::new(0),
                wakeups: prepared.wakeups,
                path,
                _lock: lock,
            }),
        };
        if !recorded {
            store.record_registry(self.accept_registry_change).await?;
        }
        Ok(store)
    }
}

/// What a store derives from its registry before it opens its file.
struct Prepared {
    checker: Checker,
    policy: PayloadPolicy,
    policy_source: PolicySource,
    attempt_limits: HashMap<&'static str, u32>,
    wakeups: wake::Wakeups,
}

impl Prepared {
    fn new(
        registry: Registry,
        policy: Option<PayloadPolicy>,
        digest_key: Option<DigestKey>,
    ) -> Result<Self, StoreError> {
        let (mut policy, policy_source) = match policy {
            Some(policy) => {
                tracing::info!(
                    project = registry.project,
                    "payload policy overridden by the application; the registry's does not apply"
                );
                (policy, PolicySource::Override)
            }
            None => (
                PayloadPolicy::from_registry(&registry),
                PolicySource::Registry,
            ),
        };
        if let Some(key) = digest_key {
            policy = policy.with_digest_key(key);
        }
        let attempt_limits = attempt_limits(&registry);
        let wakeups = wake::Wakeups::new(&registry);
        let checker = Checker::new(registry, &policy)?;
        Ok(Self {
            checker,
            policy,
            policy_source,
            attempt_limits,
            wakeups,
        })
    }
}

/// The store's schema: each migration's version, name, SQL and whether it runs outside a
/// transaction of sqlx's (it brings its own), in order.
const SCHEMA: [(i64, &str, &str, bool); 19] = [
    (1, "evc_runtime", MIGRATION_0001, false),
    (2, "evc_replays", MIGRATION_0002, false),
    (3, "evc_registry_document", MIGRATION_0003, false),
    (4, "evc_replay_keys", MIGRATION_0004, true),
    (5, "evc_plans", MIGRATION_0005, false),
    (6, "evc_plan_once", MIGRATION_0006, false),
    (7, "evc_tenant_idempotency_keys", MIGRATION_0007, false),
    (8, "evc_tenant_effect_keys", MIGRATION_0008, false),
    (9, "evc_state_changes", MIGRATION_0009, false),
    (10, "evc_relay_cursors", MIGRATION_0010, false),
    (11, "evc_relay_progress", MIGRATION_0011, false),
    (12, "evc_tenant_scopes", MIGRATION_0012, true),
    (13, "evc_effect_namespaces", MIGRATION_0013, false),
    (14, "evc_schedules", MIGRATION_0014, false),
    (15, "evc_lag_breaches", MIGRATION_0015, false),
    (16, "evc_cutover", MIGRATION_0016, false),
    (17, "evc_purges", MIGRATION_0017, false),
    (18, "evc_inventories", MIGRATION_0018, false),
    (19, "evc_evidence_snapshots", MIGRATION_0019, false),
];

/// Applies the store's migrations (sqlx's migrator: each once, in order).
async fn migrate(pool: &SqlitePool, path: &Path) -> Result<(), SqliteOpenError> {
    let migrations = SCHEMA
        .into_iter()
        .map(|(version, name, sql, no_transaction)| {
            Migration::new(
                version,
                name.into(),
                MigrationType::Simple,
                sql.into_sql_str(),
                no_transaction,
            )
        })
        .collect();
    Migrator::with_migrations(migrations)
        .run(pool)
        .await
        .map_err(|source| SqliteOpenError::Migrate {
            path: path.to_path_buf(),
            source,
        })
}

/// The registry the file records.
async fn recorded_registry(pool: &SqlitePool, path: &Path) -> Result<Registry, SqliteOpenError> {
    let document: Option<Option<String>> = sqlx::query_scalar(sql::REGISTRY_DOCUMENT)
        .fetch_optional(pool)
        .await?;
    let Some(document) = document.flatten() else {
        return Err(SqliteOpenError::NoRecordedRegistry {
            path: path.to_path_buf(),
        });
    };
    recorded::registry(&document).map_err(|reason| SqliteOpenError::RecordedRegistry {
        path: path.to_path_buf(),
        reason,
    })
}

/// The SQLite outbox store. Cheap to clone (shared state behind an `Arc`); the file's lock is
/// held until the last clone is dropped or [`SqliteStore::close`] runs.
///
/// A store serves every tenant; [`SqliteStore::scoped`] gives a handle on the same file that
/// works for one tenant only (docs/runtime.md, "Tenants").
#[derive(Debug, Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
    /// The one tenant this handle works for; `None`: every tenant.
    tenant: Option<Arc<str>>,
}

#[derive(Debug)]
struct Inner {
    pool: SqlitePool,
    checker: Checker,
    /// The policy `checker` applies (digest key included; `Debug` never shows the key).
    policy: PayloadPolicy,
    policy_source: PolicySource,
    /// Each consumer's attempt limit from its retry policy (lease-expiry recovery).
    attempt_limits: HashMap<&'static str, u32>,
    /// Fenced operations refused for a stale token.
    stale_tokens: AtomicU64,
    wakeups: wake::Wakeups,
    /// The database file.
    path: PathBuf,
    /// `<path>.lock`, exclusively locked while the store lives.
    _lock: File,
}

impl SqliteStore {
    /// Opens (creating if missing) the outbox at `location` for `registry`: a file path, or a
    /// `sqlite:` URL naming a file. See [`SqliteStoreBuilder::open`]; for the digest key or an
    /// overriding policy, use [`SqliteStore::builder`].
    ///
    /// # Errors
    /// As [`SqliteStoreBuilder::open`].
    pub async fn open(
        location: impl AsRef<str>,
        registry: Registry,
    ) -> Result<Self, SqliteOpenError> {
        Self::builder(location, registry).open().await
    }

    /// A builder for the store at `location` (a path or a `sqlite:` URL) for `registry`.
    pub fn builder(location: impl AsRef<str>, registry: Registry) -> SqliteStoreBuilder {
        SqliteStoreBuilder {
            location: location.as_ref().to_owned(),
            registry: Some(registry),
            policy: None,
            digest_key: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            accept_registry_change: false,
        }
    }

    /// A builder for the store at `location` on the registry the file records: the whole
    /// registry the application last opened it with, read back as
    /// [`crate::deployed_registry`] reads PostgreSQL's (its strings are leaked: call it once
    /// per process). It is how a process without the application's compiled registry (`evc`)
    /// opens an outbox file. It never creates a file, nor writes to a file no evc store
    /// opened; it takes the file's lock as any store does (refused while the application
    /// holds it), applies the store's later migrations, and records nothing.
    ///
    /// # Errors
    /// At [`SqliteStoreBuilder::open`]: [`SqliteOpenError::Missing`],
    /// [`SqliteOpenError::NotAnOutbox`], [`SqliteOpenError::NoRecordedRegistry`],
    /// [`SqliteOpenError::RecordedRegistry`], and the others of an open.
    pub fn recorded(location: impl AsRef<str>) -> SqliteStoreBuilder {
        SqliteStoreBuilder {
            location: location.as_ref().to_owned(),
            registry: None,
            policy: None,
            digest_key: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            accept_registry_change: false,
        }
    }

    /// Creates the outbox file at `location` if missing and applies the store's schema (the
    /// migrations every open applies), holding the file's lock meanwhile; records no registry
    /// (the application's first open does). `evc migrate` on a `sqlite:` URL runs it.
    /// Returns the version and name of each migration this call applied, in order (empty: the
    /// file was up to date).
    ///
    /// # Errors
    /// [`SqliteOpenError::Locked`] while a store holds the file; [`SqliteOpenError::InMemory`],
    /// [`SqliteOpenError::Location`], [`SqliteOpenError::LockFile`],
    /// [`SqliteOpenError::Migrate`] or the database's.
    pub async fn apply_schema(
        location: impl AsRef<str>,
    ) -> Result<Vec<(i64, &'static str)>, SqliteOpenError> {
        let (options, path) = connect_options(location.as_ref())?;
        let _lock = lock_file(&path)?;
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await?;
        let migrated_before: bool = sqlx::query_scalar(sql::HAS_MIGRATIONS)
            .fetch_one(&pool)
            .await?;
        let before: Vec<i64> = if migrated_before {
            sqlx::query_scalar(sql::APPLIED_MIGRATIONS)
                .fetch_all(&pool)
                .await?
        } else {
            Vec::new()
        };
        let migrated = migrate(&pool, &path).await;
        pool.close().await;
        migrated?;
        Ok(SCHEMA
            .into_iter()
            .filter(|(version, _, _, _)| !before.contains(version))
            .map(|(version, name, _, _)| (version, name))
            .collect())
    }

    /// Closes the pool and gives the file's lock back once every clone of the store is gone
    /// (another store can then open the file).
    pub async fn close(self) {
        self.inner.pool.close().await;
    }

    /// A handle on the same file (pool, lock and registry shared) that works for `scope`
    /// only: its appends are refused unless they carry `scope`'s tenant
    /// ([`AppendError::OutsideTenantScope`]), and its claims, reads, replays and recoveries
    /// see that tenant's events, deliveries and attempts only. SQLite has no row-level
    /// security: the scope is a filter of the store's own statements, so code that runs SQL
    /// on [`SqliteStore::pool`] sees every tenant. [`TenantScope::all`] gives a handle for
    /// every tenant.
    pub fn scoped(&self, scope: &TenantScope) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            tenant: scope.tenant().map(Arc::from),
        }
    }

    /// The tenants this handle works for ([`SqliteStore::scoped`]).
    pub fn tenant_scope(&self) -> TenantScope {
        match self.tenant.as_deref() {
            // Checked when the scope was made.
            Some(tenant) => TenantScope::only(tenant).unwrap_or_else(|_| TenantScope::all()),
            None => TenantScope::all(),
        }
    }

    /// The tenant the store's statements bind as their tenant filter (NULL: every tenant).
    fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }

    /// Refuses an append of an event outside this handle's tenant.
    fn check_scope(&self, options: &AppendOptions) -> Result<(), AppendError> {
        match self.tenant() {
            Some(scope) if options.tenant_scope.as_deref() != Some(scope) => {
                Err(AppendError::OutsideTenantScope {
                    scope: scope.to_owned(),
                })
            }
            _ => Ok(()),
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The payload policy appends are checked against, and where it came from.
    pub fn payload_policy(&self) -> (&PayloadPolicy, PolicySource) {
        (&self.inner.policy, self.inner.policy_source)
    }

    /// The store's pool. Write transactions on it should start with `BEGIN IMMEDIATE`
    /// ([`SqliteStore::begin`]).
    pub fn pool(&self) -> &SqlitePool {
        &self.inner.pool
    }

    /// A write transaction on the store's pool, started with `BEGIN IMMEDIATE`: it takes the
    /// write lock at once (waiting up to the busy timeout), so its later writes cannot fail to
    /// upgrade a read snapshot another writer moved past.
    ///
    /// # Errors
    /// The database's.
    pub async fn begin(&self) -> Result<Transaction<'static, Sqlite>, sqlx::Error> {
        self.inner.pool.begin_with("BEGIN IMMEDIATE").await
    }

    /// The static registry.
    pub fn registry(&self) -> &Registry {
        self.inner.checker.registry()
    }

    /// The wake-up of `consumer` (`None`: not in the registry): notified when a transaction
    /// that appended a delivery for it commits, never for one that rolled back. Each commit
    /// wakes every task waiting on it (`notify_waiters`) and leaves one permit
    /// (`notify_one`), so a worker that claims and then waits does not miss an append that
    /// committed in between. Delays, retries and recovered leases that fall due notify nothing
    /// (as on PostgreSQL): poll for them.
    pub fn wakeups(&self, consumer: &str) -> Option<Arc<Notify>> {
        self.inner.wakeups.get(consumer)
    }

    /// A [`Publish`] implementation over the caller's connection or transaction, for the
    /// generated producer functions (`emit_*`).
    pub fn publisher<'a>(&'a self, connection: &'a mut SqliteConnection) -> SqlitePublisher<'a> {
        SqlitePublisher {
            store: self,
            connection,
            options: AppendOptions::default(),
        }
    }

    /// Compares the registry the file records with the static registry (the SQLite store owns
    /// its file: it records the registry on first open, and an accepted change replaces it).
    ///
    /// # Errors
    /// [`StoreError::Drift`] ([`Drift::Digest`]) when they differ or the file records none;
    /// [`StoreError::Database`].
    pub async fn verify_registry(&self) -> Result<(), StoreError> {
        let recorded: Option<(String, String)> = sqlx::query_as(sql::REGISTRY_STATE)
            .fetch_optional(&self.inner.pool)
            .await?;
        let registry = self.registry();
        match recorded {
            Some((project, digest)) if project == registry.project && digest == registry.digest => {
                Ok(())
            }
            recorded => Err(RegistryDrift {
                differences: vec![Drift::Digest {
                    database: recorded.map(|(project, digest)| format!("{digest} ({project})")),
                    compiled: format!("{} ({})", registry.digest, registry.project),
                }],
            }
            .into()),
        }
    }

    /// Records the static registry on first open; on a later open, refuses another one unless
    /// `accept_change`.
    async fn record_registry(&self, accept_change: bool) -> Result<(), StoreError> {
        let registry = self.registry();
        let document = recorded::document(registry);
        let mut tx = self.begin().await?;
        let recorded: Option<(String, String)> = sqlx::query_as(sql::REGISTRY_STATE)
            .fetch_optional(&mut *tx)
            .await?;
        match recorded {
            Some((project, digest)) if project == registry.project && digest == registry.digest => {
                // Same digest, but a file recorded before the document was, or settings
                // outside the digest (handler timeouts) that changed: the document follows.
                let stored: Option<String> = sqlx::query_scalar(sql::REGISTRY_DOCUMENT)
                    .fetch_one(&mut *tx)
                    .await?;
                if stored.as_deref() != Some(document.as_str()) {
                    sqlx::query(sql::RECORD_REGISTRY_DOCUMENT)
                        .bind(&document)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                }
                return Ok(());
            }
            Some(_) if !accept_change => {
                drop(tx);
                return self.verify_registry().await;
            }
            Some((project, digest)) => tracing::info!(
                file = %self.inner.path.display(),
                from_project = project,
                from_digest = digest,
                to_project = registry.project,
                to_digest = registry.digest,
                "outbox file opened with a changed registry"
            ),
            None => {}
        }
        let now = epoch_now();
        for statement in [sql::RECORD_REGISTRY, sql::RECORD_REGISTRY_HISTORY] {
            sqlx::query(statement)
                .bind(registry.project)
                .bind(registry.digest)
                .bind(now)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query(sql::RECORD_REGISTRY_DOCUMENT)
            .bind(&document)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Appends one event in the caller's transaction (see [`Store::append`]): the event and
    /// its deliveries in a savepoint of the caller's transaction, or in a transaction of their
    /// own on a connection outside one. The consumers' [wake-ups](SqliteStore::wakeups) fire
    /// when that commits.
    ///
    /// # Errors
    /// [`AppendError::Rejected`], [`AppendError::IdempotencyConflict`] or
    /// [`AppendError::Database`].
    pub async fn append(
        &self,
        connection: &mut SqliteConnection,
        event: OutgoingEvent,
        options: AppendOptions,
    ) -> Result<AppendReceipt, AppendError> {
        self.check_scope(&options)?;
        let checked = match self.inner.checker.check(&event, &options) {
            Ok(checked) => checked,
            Err(refused) => {
                let rejection = refused.rejection.clone();
                self.record_rejects(vec![RejectRow::new(&event, &refused)]);
                return Err(AppendError::Rejected(rejection));
            }
        };
        self.inner
            .wakeups
            .arm(connection, checked.consumers)
            .await?;
        let mut tx = begin_write(connection).await?;
        let events = [NewEvent::new(event, options)];
        // Checked above, before taking the write lock, so a refusal never waits for it.
        let written = insert_events(&mut tx, &events, |_| Ok(checked.clone()), epoch_now()).await?;
        let receipt = match written {
            Written::Appended { mut receipts, .. } => receipts
                .pop()
                .ok_or(AppendError::Database(sqlx::Error::RowNotFound))?,
            Written::Refused(refused) => {
                tx.rollback().await?;
                return Err(self.refuse_batch(&events, &refused));
            }
        };
        tx.commit().await?;
        Ok(receipt)
    }

    /// Appends many events in the caller's transaction (see [`Store::append_batch`]), in
    /// one savepoint (or transaction), in order. Every event is checked; the checks of each
    /// statement's rows run while SQLite inserts the rows before them, and one refused event
    /// rolls the whole batch back. An event whose idempotency key was taken, before the batch
    /// or by an earlier event of it, returns the first event's receipt.
    ///
    /// # Errors
    /// [`AppendError::BatchRejected`], [`AppendError::IdempotencyConflict`] or
    /// [`AppendError::Database`].
    pub async fn append_batch(
        &self,
        connection: &mut SqliteConnection,
        events: Vec<NewEvent>,
    ) -> Result<Vec<AppendReceipt>, AppendError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        for new in &events {
            self.check_scope(&new.options)?;
        }
        let checker = &self.inner.checker;
        let mut tx = begin_write(connection).await?;
        let check = |new: &NewEvent| checker.check(&new.event, &new.options);
        match insert_events(&mut tx, &events, check, epoch_now()).await? {
            Written::Appended {
                receipts,
                consumers,
            } => {
                // Armed inside the transaction: its commit (or the caller's) wakes them.
                self.inner.wakeups.arm(&mut tx, &consumers).await?;
                tx.commit().await?;
                Ok(receipts)
            }
            Written::Refused(refused) => {
                tx.rollback().await?;
                Err(self.refuse_batch(&events, &refused))
            }
        }
    }

    /// Records the refused events of a batch (see [`Self::record_rejects`]) and names the
    /// first in the error.
    fn refuse_batch(&self, events: &[NewEvent], refused: &[(usize, Box<Refused>)]) -> AppendError {
        let rows = refused
            .iter()
            .map(|(index, why)| RejectRow::new(&events[*index].event, why))
            .collect();
        self.record_rejects(rows);
        match refused.first() {
            Some((index, first)) => AppendError::BatchRejected {
                index: *index,
                rejection: first.rejection.clone(),
                rejected: refused.len(),
            },
            None => AppendError::Database(sqlx::Error::RowNotFound),
        }
    }

    /// Records reject rows on the store's pool from a task of their own: the caller's open
    /// write transaction holds the write lock, so the audit waits for it (up to the busy
    /// timeout) and survives its rollback. A failure to record is logged, never returned.
    fn record_rejects(&self, rows: Vec<RejectRow>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                rejects = rows.len(),
                "no tokio runtime: rejected appends not recorded in evc_validation_rejects"
            );
            return;
        };
        let store = self.clone();
        runtime.spawn(async move {
            if let Err(error) = store.write_rejects(&rows).await {
                tracing::warn!(
                    rejects = rows.len(),
                    error = %error,
                    "could not record rejected appends in evc_validation_rejects"
                );
            }
        });
    }

    async fn write_rejects(&self, rows: &[RejectRow]) -> Result<(), sqlx::Error> {
        let mut tx = self.begin().await?;
        let now = epoch_now();
        for row in rows {
            sqlx::query(sql::RECORD_REJECT)
                .bind(&row.event_type)
                .bind(&row.version)
                .bind(row.reason_code)
                .bind(&row.digest)
                .bind(now)
                .bind(self.tenant())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    }
}

/// One refused event's audit row.
struct RejectRow {
    event_type: String,
    version: String,
    reason_code: &'static str,
    digest: String,
}

impl RejectRow {
    fn new(event: &OutgoingEvent, why: &Refused) -> Self {
        Self {
            event_type: event.event_type.to_owned(),
            version: why.version.clone(),
            reason_code: why.rejection.reason_code(),
            digest: why.digest.clone(),
        }
    }
}

/// What [`insert_events`] did: appended every event, or found refused ones (and inserted
/// part of the batch, which the caller rolls back).
enum Written {
    /// The receipts, in the order of the events, and the consumers their deliveries are for.
    Appended {
        receipts: Vec<AppendReceipt>,
        consumers: Vec<&'static str>,
    },
    /// Every refused event: its index in the batch and why.
    Refused(Vec<(usize, Box<Refused>)>),
}

/// Checks `events` with `check` and writes them and their deliveries on `connection` (inside
/// the batch's savepoint or transaction) in multi-row statements of [`sql::VALUES_ROWS`] rows
/// at most: round trips to the connection's thread, not SQLite, bound a statement-per-row
/// batch. A statement's rows are checked while the connection's thread inserts the rows of
/// the statement before ([`run_in_turn`] builds the next statement then); after a refusal the
/// rest of the batch is checked and nothing more is inserted. Receipts come back in the order
/// of `events`; an event whose idempotency key was taken returns the first event's.
async fn insert_events<'c>(
    connection: &mut SqliteConnection,
    events: &[NewEvent],
    mut check: impl FnMut(&NewEvent) -> Result<CheckedEvent<'c>, Box<Refused>>,
    now: f64,
) -> Result<Written, AppendError> {
    let ids: Vec<Uuid> = events.iter().map(|_| Uuid::now_v7()).collect();
    // Texts bound more than once (an event's id and order key, in its row and each delivery's)
    // or by many rows (event types, consumers) are shared: sqlx copies a bound `&str` into a
    // new `String` and `Arc` for every row, a bound `Arc<str>` costs a reference count.
    let id_texts: Vec<Arc<str>> = ids
        .iter()
        .map(|id| Arc::from(id.hyphenated().encode_lower(&mut Uuid::encode_buffer()) as &str))
        .collect();
    let order_keys: Vec<Arc<str>> = events
        .iter()
        .zip(&ids)
        .map(|(new, &id)| Arc::from(order_key(&new.event, &new.options, id)))
        .collect();
    let mut texts = SharedTexts::default();
    let mut checked: Vec<CheckedEvent<'c>> = Vec::with_capacity(events.len());
    let mut refused: Vec<(usize, Box<Refused>)> = Vec::new();
    let mut chunks = sql::values_chunks(events.len());
    let statements = std::iter::from_fn(|| {
        if !refused.is_empty() {
            return None;
        }
        let (start, rows) = chunks.next()?;
        // Up to the end of this statement's rows, or of the batch once one is refused.
        let mut end = start + rows;
        let mut index = start;
        while index < end {
            match check(&events[index]) {
                Ok(event) => checked.push(event),
                Err(why) => {
                    refused.push((index, why));
                    end = events.len();
                }
            }
            index += 1;
        }
        if !refused.is_empty() {
            return None;
        }
        let keyed = events[start..start + rows]
            .iter()
            .any(|new| new.options.idempotency_key.is_some());
        let mut query = sqlx::query(if keyed {
            sql::append_events(rows)
        } else {
            sql::append_unkeyed_events(rows)
        });
        for (index, checked) in (start..).zip(&mut checked[start..]) {
            let (event, options) = (&events[index].event, &events[index].options);
            let length = i64::try_from(checked.payload.len()).unwrap_or(i64::MAX);
            query = query
                .bind(Arc::clone(&id_texts[index]))
                .bind(texts.get(event.event_type))
                .bind(texts.get(event.version))
                .bind(Arc::clone(&order_keys[index]))
                .bind(options.tenant_scope.as_deref())
                .bind(texts.get(checked.descriptor.producer_class))
                .bind(options.idempotency_key.as_deref())
                .bind(now)
                .bind(event.trace.trace_id())
                .bind(event.trace.parent_span_id())
                .bind(format!("{:02x}", event.trace.trace_flags()))
                .bind(options.correlation_id.as_deref())
                .bind(options.causation_id.as_deref())
                // Moved, not copied: the payload is not needed after its insert.
                .bind(std::mem::take(&mut checked.payload))
                .bind(length);
        }
        Some(if keyed {
            Step::Rows(query)
        } else {
            Step::Write(query)
        })
    });
    let results = run_in_turn(connection, statements).await?;
    if !refused.is_empty() {
        return Ok(Written::Refused(refused));
    }
    // Each event's seq, or none when its idempotency key was taken.
    let mut seqs: Vec<Option<i64>> = vec![None; events.len()];
    for ((start, rows), result) in sql::values_chunks(events.len()).zip(results) {
        match result {
            Stepped::Rows(returned) => {
                let chunk: HashMap<Uuid, usize> = (start..start + rows)
                    .map(|index| (ids[index], index))
                    .collect();
                for row in returned {
                    let event_id = parse_uuid(&row.try_get::<String, _>("event_id")?)?;
                    if let Some(&index) = chunk.get(&event_id) {
                        seqs[index] = Some(row.try_get("seq")?);
                    }
                }
            }
            Stepped::Written(done) => {
                let last = done.last_insert_rowid();
                let written = i64::try_from(rows).unwrap_or(i64::MAX);
                if done.rows_affected() != rows as u64 {
                    return Err(AppendError::Database(sqlx::Error::Protocol(format!(
                        "an unkeyed append wrote {} rows of {rows}",
                        done.rows_affected()
                    ))));
                }
                for (offset, seq) in seqs[start..start + rows].iter_mut().enumerate() {
                    *seq = Some(last - written + 1 + offset as i64);
                }
            }
        }
    }
    // Per delivery: its event's index, the consumer, the event's seq, whether the consumer
    // orders per key, when it is due.
    let mut deliveries: Vec<(usize, &'static str, i64, bool, f64)> = Vec::new();
    let mut receipts = Vec::with_capacity(events.len());
    for (index, (new, checked)) in events.iter().zip(&checked).enumerate() {
        let event_id = ids[index];
        let Some(seq) = seqs[index] else {
            receipts.push(first_receipt(connection, checked, &new.options).await?);
            continue;
        };
        let due = new.options.not_before_epoch().unwrap_or(now);
        for (consumer, &ordered) in checked.consumers.iter().zip(checked.ordered) {
            deliveries.push((index, consumer, seq, ordered, due));
        }
        receipts.push(AppendReceipt {
            event_id,
            seq,
            created: true,
            deliveries: u32::try_from(checked.consumers.len()).unwrap_or(u32::MAX),
        });
    }
    let statements = sql::values_chunks(deliveries.len()).map(|(start, rows)| {
        let mut query = sqlx::query(sql::append_deliveries(rows));
        for &(index, consumer, seq, ordered, due) in &deliveries[start..start + rows] {
            query = query
                .bind(Arc::clone(&id_texts[index]))
                .bind(texts.get(consumer))
                .bind(seq)
                .bind(ordered.then(|| Arc::clone(&order_keys[index])))
                .bind(due)
                .bind(now)
                .bind(now);
        }
        Step::Write(query)
    });
    run_in_turn(connection, statements).await?;
    let consumers = deliveries
        .iter()
        .map(|&(_, consumer, ..)| consumer)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    Ok(Written::Appended {
        receipts,
        consumers,
    })
}

/// One `Arc<str>` per distinct static text of a batch (event types, versions, producer
/// classes, consumers), keyed by where the text lives.
#[derive(Default)]
struct SharedTexts(HashMap<(usize, usize), Arc<str>>);

impl SharedTexts {
    fn get(&mut self, text: &'static str) -> Arc<str> {
        let shared = self
            .0
            .entry((text.as_ptr().addr(), text.len()))
            .or_insert_with(|| Arc::from(text));
        Arc::clone(shared)
    }
}

/// A statement of a batch, by what comes back: its rows (`RETURNING`), or only its result
/// (rows written, last insert rowid).
enum Step<'q> {
    Rows(Query<'q, Sqlite, SqliteArguments>),
    Write(Query<'q, Sqlite, SqliteArguments>),
}

/// What a [`Step`] gave back.
enum Stepped {
    Rows(Vec<SqliteRow>),
    Written(SqliteQueryResult),
}

/// Runs `statements` one after the other on `connection` and returns what each gave back, in
/// order. Each next statement is bound while the connection's thread runs the one before:
/// binding (about a third of what SQLite's insert costs, in a profile) and the insert run on
/// different threads.
async fn run_in_turn<'q>(
    connection: &mut SqliteConnection,
    mut statements: impl Iterator<Item = Step<'q>>,
) -> Result<Vec<Stepped>, sqlx::Error> {
    let mut results = Vec::new();
    let mut next = statements.next();
    while let Some(statement) = next.take() {
        let run = async {
            match statement {
                Step::Rows(query) => query.fetch_all(&mut *connection).await.map(Stepped::Rows),
                Step::Write(query) => query.execute(&mut *connection).await.map(Stepped::Written),
            }
        };
        // `join!` polls the statement first, which hands it to the connection's thread, and
        // then binds the next one on this thread while that runs.
        let (result, following) = tokio::join!(run, async { statements.next() });
        results.push(result?);
        next = following;
    }
    Ok(results)
}

/// The receipt of the event that took `options`' idempotency key first (an append that wrote
/// nothing because the key was taken).
async fn first_receipt(
    connection: &mut SqliteConnection,
    checked: &CheckedEvent<'_>,
    options: &AppendOptions,
) -> Result<AppendReceipt, AppendError> {
    let producer_class = checked.descriptor.producer_class;
    let existing = sqlx::query(sql::FIND_BY_IDEMPOTENCY_KEY)
        .bind(producer_class)
        .bind(&options.idempotency_key)
        .bind(&options.tenant_scope)
        .fetch_optional(&mut *connection)
        .await?;
    match existing {
        Some(row) => Ok(AppendReceipt {
            event_id: parse_uuid(&row.try_get::<String, _>("event_id")?)?,
            seq: row.try_get("seq")?,
            created: false,
            deliveries: 0,
        }),
        None => Err(AppendError::IdempotencyConflict {
            producer_class: producer_class.to_owned(),
        }),
    }
}

/// A write transaction on `connection`: a savepoint of the caller's transaction when one is
/// open, else `BEGIN IMMEDIATE`. Dropped without commit, it rolls back.
async fn begin_write(
    connection: &mut SqliteConnection,
) -> Result<Transaction<'_, Sqlite>, sqlx::Error> {
    if connection.is_in_transaction() {
        connection.begin().await
    } else {
        connection.begin_with("BEGIN IMMEDIATE").await
    }
}

/// The process's clock in epoch seconds (one process owns the file, so one clock).
fn epoch_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

/// An event id column value.
fn parse_uuid(text: &str) -> Result<Uuid, sqlx::Error> {
    Uuid::parse_str(text).map_err(|error| sqlx::Error::Decode(Box::new(error)))
}

/// Each consumer whose retry policy is registered, with that policy's `max_attempts` within
/// the dispatcher's ceiling (as the PostgreSQL store computes it).
fn attempt_limits(registry: &Registry) -> HashMap<&'static str, u32> {
    registry
        .consumers
        .iter()
        .filter_map(|consumer| {
            let policy = registry
                .retry_policies
                .iter()
                .find(|policy| policy.name == consumer.retry_policy)?;
            Some((
                consumer.name,
                policy.max_attempts.min(registry.dispatcher.max_attempts),
            ))
        })
        .collect()
}

/// The connect options and the database file of a location: a path, or a `sqlite:` URL.
fn connect_options(location: &str) -> Result<(SqliteConnectOptions, PathBuf), SqliteOpenError> {
    if location.contains(":memory:") || location.contains("mode=memory") {
        return Err(SqliteOpenError::InMemory);
    }
    if location.starts_with("sqlite:") {
        let options = SqliteConnectOptions::from_str(location).map_err(|source| {
            SqliteOpenError::Location {
                location: location.to_owned(),
                source,
            }
        })?;
        let path = options.get_filename().to_path_buf();
        return Ok((options, path));
    }
    let path = PathBuf::from(location);
    Ok((SqliteConnectOptions::new().filename(&path), path))
}

/// Creates and exclusively locks `<database>.lock` (an OS lock, released when the file is
/// closed, also when the process dies).
fn lock_file(database: &Path) -> Result<File, SqliteOpenError> {
    let mut name = database.as_os_str().to_owned();
    name.push(".lock");
    let path = PathBuf::from(name);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| SqliteOpenError::LockFile {
            path: path.clone(),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(SqliteOpenError::Locked {
            database: database.to_path_buf(),
            lock_file: path,
        }),
        Err(TryLockError::Error(source)) => Err(SqliteOpenError::LockFile { path, source }),
    }
}

impl Store for SqliteStore {
    type Database = Sqlite;
    type Publisher<'a> = SqlitePublisher<'a>;
    type Doorbell = CommitBell;

    const ONE_WRITER: bool = true;

    fn registry(&self) -> &Registry {
        SqliteStore::registry(self)
    }

    fn pool(&self) -> &SqlitePool {
        SqliteStore::pool(self)
    }

    fn publisher<'a>(
        &'a self,
        connection: &'a mut SqliteConnection,
        options: AppendOptions,
    ) -> SqlitePublisher<'a> {
        SqliteStore::publisher(self, connection).with_options(options)
    }

    async fn verify_registry(&self) -> Result<(), StoreError> {
        SqliteStore::verify_registry(self).await
    }

    async fn append(
        &self,
        connection: &mut SqliteConnection,
        event: OutgoingEvent,
        options: AppendOptions,
    ) -> Result<AppendReceipt, AppendError> {
        SqliteStore::append(self, connection, event, options).await
    }

    async fn append_batch(
        &self,
        connection: &mut SqliteConnection,
        events: Vec<NewEvent>,
    ) -> Result<Vec<AppendReceipt>, AppendError> {
        SqliteStore::append_batch(self, connection, events).await
    }

    async fn claim(
        &self,
        connection: &mut SqliteConnection,
        request: &ClaimRequest<'_>,
    ) -> Result<Vec<Claimed>, DispatchError> {
        let ClaimRequest {
            consumer,
            owner,
            batch,
            per_key,
            after_seq,
            until_seq,
            ..
        } = *request;
        match request.hold {
            Hold::Lease(lease) => {
                self.claim_leased(
                    connection, consumer, owner, batch, lease, per_key, after_seq, until_seq,
                )
                .await
            }
            // As PostgreSQL: held batches serve consumers without per-key ordering.
            Hold::Transaction if per_key => Err(DispatchError::Unsupported(
                "a claim held by a transaction does not order per key",
            )),
            Hold::Transaction => {
                self.claim_held(connection, consumer, owner, batch, after_seq, until_seq)
                    .await
            }
        }
    }

    async fn claim_events(
        &self,
        connection: &mut SqliteConnection,
        consumer: &str,
        owner: &str,
        event_ids: &[Uuid],
        lease: Duration,
    ) -> Result<ClaimedEvents, DispatchError> {
        self.claim_by_id(connection, consumer, owner, event_ids, lease)
            .await
    }

    async fn ack(
        &self,
        connection: &mut SqliteConnection,
        leases: &[&Lease],
    ) -> Result<AckBatch, DispatchError> {
        if !leases.is_empty() && leases.iter().all(|lease| lease.is_held()) {
            let acked = self.held_acks(connection, leases).await?;
            let stale = leases
                .iter()
                .filter(|lease| !acked.contains(&lease.event_id))
                .map(|lease| (lease.event_id, lease.consumer.clone(), lease.token))
                .collect();
            return Ok(AckBatch {
                acked: acked.len(),
                stale,
            });
        }
        if let [lease] = leases {
            // One lease: the fenced single ack, as PostgreSQL's.
            return match self.ack_one(connection, lease).await {
                Ok(()) => Ok(AckBatch {
                    acked: 1,
                    stale: Vec::new(),
                }),
                Err(DispatchError::StaleToken {
                    event_id,
                    consumer,
                    token,
                }) => Ok(AckBatch {
                    acked: 0,
                    stale: vec![(event_id, consumer, token)],
                }),
                Err(error) => Err(error),
            };
        }
        self.ack_many(connection, leases).await
    }

    async fn fail(
        &self,
        lease: &Lease,
        class: FailureClass,
        code: &str,
        decision: RetryDecision,
    ) -> Result<(), DispatchError> {
        SqliteStore::fail(self, lease, class, code, decision).await
    }

    async fn renew(
        &self,
        connection: &mut SqliteConnection,
        leases: &[&Lease],
        lease: Duration,
    ) -> Result<Vec<Uuid>, DispatchError> {
        self.renewed(connection, leases, lease).await
    }

    async fn lock_lease(
        &self,
        connection: &mut SqliteConnection,
        lease: &Lease,
    ) -> Result<(), DispatchError> {
        SqliteStore::lock_lease(self, connection, lease).await
    }

    async fn begin_shadow(&self, connection: &mut SqliteConnection) -> Result<(), DispatchError> {
        sqlx::query(sql::SHADOW_SAVEPOINT)
            .execute(connection)
            .await?;
        Ok(())
    }

    async fn end_shadow(&self, connection: &mut SqliteConnection) -> Result<(), DispatchError> {
        sqlx::query(sql::SHADOW_ROLLBACK)
            .execute(connection)
            .await?;
        Ok(())
    }

    async fn record_reconciliation(
        &self,
        connection: &mut SqliteConnection,
        lease: &Lease,
    ) -> Result<(), DispatchError> {
        SqliteStore::record_reconciliation(self, connection, lease).await
    }

    async fn record_legacy_outcome(
        &self,
        connection: &mut SqliteConnection,
        consumer: &str,
        event_id: Uuid,
        outcome: &[crate::store::Intent],
    ) -> Result<bool, DispatchError> {
        self.write_legacy_outcome(connection, consumer, event_id, outcome)
            .await
    }

    async fn release(&self, owner: &str) -> Result<u64, DispatchError> {
        SqliteStore::release(self, owner).await
    }

    async fn recover_expired(&self, limit: u32) -> Result<u64, DispatchError> {
        SqliteStore::recover_expired(self, limit).await
    }

    async fn record_effect(
        &self,
        connection: &mut SqliteConnection,
        lease: &Lease,
        effect_key: &str,
        outcome_digest: &str,
    ) -> Result<bool, DispatchError> {
        SqliteStore::record_effect(self, connection, lease, effect_key, outcome_digest).await
    }

    async fn heartbeat(&self, workers: &[Heartbeat]) -> Result<(), DispatchError> {
        SqliteStore::heartbeat(self, workers).await
    }

    async fn forget_heartbeats(&self, owners: &[String]) -> Result<(), DispatchError> {
        SqliteStore::forget_heartbeats(self, owners).await
    }

    async fn tick_schedules(
        &self,
        at: Option<std::time::SystemTime>,
    ) -> Result<crate::store::ScheduleRound, DispatchError> {
        self.run_schedules(at).await
    }

    async fn schedule_states(&self) -> Result<Vec<crate::store::ScheduleState>, DispatchError> {
        self.read_schedules().await
    }

    async fn watch_lag(&self) -> Result<crate::store::LagRound, DispatchError> {
        self.run_lag_watch().await
    }

    async fn record_evidence(&self) -> Result<crate::store::EvidenceRound, DispatchError> {
        self.run_evidence_recording().await
    }

    async fn lag_breaches(
        &self,
        limit: u32,
    ) -> Result<Vec<crate::store::LagBreach>, DispatchError> {
        self.read_lag_breaches(limit).await
    }

    /// Wakes `wakers` at every commit that appended for their consumer (the commit hook, no
    /// connection), until `shutdown`; `retry` is not needed: nothing can fail.
    async fn listen(
        &self,
        wakers: HashMap<String, Arc<Notify>>,
        _retry: Duration,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let subscription = self.inner.wakeups.subscribe(wakers.clone());
        // Anything appended before the subscription is picked up by this wake-up, as on
        // PostgreSQL.
        wakers.values().for_each(|wake| wake.notify_waiters());
        while !*shutdown.borrow_and_update() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
        drop(subscription);
    }

    /// `None`: appends wake listeners at every commit, so no doorbell is needed.
    async fn hold_doorbell(
        &self,
        _consumer: &str,
        _wait: Duration,
    ) -> Result<Option<CommitBell>, DispatchError> {
        // Every commit of an append already wakes the listeners: the bell is always had, so an
        // idle worker sleeps a whole poll interval instead of asking again.
        Ok(Some(CommitBell(())))
    }

    async fn release_doorbell(&self, _doorbell: CommitBell) -> Result<(), DispatchError> {
        Ok(())
    }

    fn stale_tokens(&self) -> u64 {
        SqliteStore::stale_tokens(self)
    }

    async fn begin(&self) -> Result<Transaction<'static, Sqlite>, DispatchError> {
        Ok(SqliteStore::begin(self).await?)
    }

    /// `BEGIN IMMEDIATE`, as [`SqliteStore::begin`]: the handler's fence writes first thing,
    /// but a deferred transaction would still take a read snapshot it may fail to upgrade.
    async fn begin_on<'c>(
        &self,
        connection: &'c mut SqliteConnection,
    ) -> Result<Transaction<'c, Sqlite>, DispatchError> {
        Ok(connection.begin_with("BEGIN IMMEDIATE").await?)
    }

    async fn delivery(
        &self,
        event_id: Uuid,
        consumer: &str,
    ) -> Result<Option<DeliveryRecord>, DispatchError> {
        SqliteStore::delivery(self, event_id, consumer).await
    }

    async fn deliveries(
        &self,
        event_id: Uuid,
        consumer: &str,
    ) -> Result<Vec<DeliveryRecord>, DispatchError> {
        read::deliveries(self, event_id, consumer).await
    }

    async fn attempts(
        &self,
        event_id: Uuid,
        consumer: &str,
    ) -> Result<Vec<AttemptRecord>, DispatchError> {
        SqliteStore::attempts(self, event_id, consumer).await
    }

    async fn count_deliveries(
        &self,
        consumer: &str,
        statuses: &[DeliveryStatus],
    ) -> Result<u64, DispatchError> {
        SqliteStore::count_deliveries(self, consumer, statuses).await
    }

    async fn count_attempts(&self, consumer: &str, outcome: &str) -> Result<u64, DispatchError> {
        read::count_attempts(self, consumer, outcome).await
    }

    async fn count_events(&self, event_types: &[&str]) -> Result<u64, DispatchError> {
        SqliteStore::count_events(self, event_types).await
    }

    async fn event(&self, event_id: Uuid) -> Result<Option<EventRecord>, DispatchError> {
        read::event(self, event_id).await
    }

    async fn rejects(&self, limit: u32) -> Result<Vec<RejectRecord>, DispatchError> {
        SqliteStore::rejects(self, limit).await
    }

    async fn effect(
        &self,
        consumer: &str,
        effect_key: &str,
        tenant_scope: Option<&str>,
    ) -> Result<Option<EffectRecord>, DispatchError> {
        read::effect(self, consumer, effect_key, tenant_scope).await
    }

    async fn reconciliations(
        &self,
        event_id: Uuid,
        consumer: &str,
    ) -> Result<Vec<ReconciliationRecord>, DispatchError> {
        read::reconciliations(self, event_id, consumer).await
    }
}

/// The SQLite store's doorbell ([`Store::hold_doorbell`]): always had at once and nothing to
/// give back, because every commit of an append wakes [`Store::listen`] in this process.
#[derive(Debug)]
pub struct CommitBell(());

/// The [`Publish`] implementation of the SQLite store: appends on the caller's connection or
/// transaction with the envelope options set on it. As [`crate::PgPublisher`]: the per-event
/// options (idempotency key, aggregate key, delay) apply to the next published event only; the
/// context options (tenant scope, correlation and causation ids) stay.
#[derive(Debug)]
pub struct SqlitePublisher<'a> {
    store: &'a SqliteStore,
    connection: &'a mut SqliteConnection,
    options: AppendOptions,
}

impl SqlitePublisher<'_> {
    /// Replaces the envelope options.
    #[must_use]
    pub fn with_options(mut self, options: AppendOptions) -> Self {
        self.options = options;
        self
    }

    /// The envelope options the next publish uses.
    pub fn options_mut(&mut self) -> &mut AppendOptions {
        &mut self.options
    }

    /// Sets the idempotency key of the next published event.
    pub fn idempotency_key(&mut self, key: impl Into<String>) -> &mut Self {
        self.options.idempotency_key = Some(key.into());
        self
    }
}

impl Publish for SqlitePublisher<'_> {
    type Receipt = AppendReceipt;
    type Error = AppendError;

    async fn publish(&mut self, event: OutgoingEvent) -> Result<AppendReceipt, AppendError> {
        let options = AppendOptions {
            idempotency_key: self.options.idempotency_key.take(),
            aggregate_key: self.options.aggregate_key.take(),
            not_before: self.options.not_before.take(),
            ..self.options.clone()
        };
        self.store.append(self.connection, event, options).await
    }
}
