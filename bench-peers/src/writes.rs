//! What a run wrote, per job, in figures that do not depend on how fast the machine commits:
//! WAL bytes of the insert and of the drain, commits, rows inserted, updated (of them HOT) and
//! deleted, and index entries written. A rate ratio changes with the day; these explain it.
//!
//! - WAL: the server's WAL insert position (`pg_current_wal_insert_lsn`) before and after
//!   each phase. It is the cluster's, so other databases' writes in the meantime count too
//!   (the machine's services are idle during a run); the benchmark's own setup between the
//!   phases (the `VACUUM ANALYZE` some runs do) is outside both.
//! - Commits and rows: the run's database's cumulative statistics (`pg_stat_database`,
//!   `pg_stat_user_tables`), before the insert and after the run's connections are closed (a
//!   server process reports its counts when it exits, or at most every second or ten while
//!   idle), so they cover both phases and the polls and heartbeats of the system's workers.
//! - Index entries: each inserted row and each update that is not HOT adds one entry to every
//!   index of its table that covers it. For indexes without a predicate that is exact; a
//!   partial index gets an entry only when the row matches its predicate, so its count is an
//!   upper bound, reported apart.

use std::time::Duration;

use sqlx::postgres::PgConnection;
use sqlx::{Connection, Row};

use crate::BenchResult;

/// The database's counts at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Counts {
    commits: i64,
    inserted: i64,
    updated: i64,
    hot_updated: i64,
    deleted: i64,
    index_entries: i64,
    partial_entries: i64,
}

const COUNTS: &str = "\
SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS commits,
    coalesce(sum(t.n_tup_ins), 0)::bigint AS inserted,
    coalesce(sum(t.n_tup_upd), 0)::bigint AS updated,
    coalesce(sum(t.n_tup_hot_upd), 0)::bigint AS hot_updated,
    coalesce(sum(t.n_tup_del), 0)::bigint AS deleted,
    coalesce(sum((t.n_tup_ins + t.n_tup_upd - t.n_tup_hot_upd)
        * (SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid AND i.indpred IS NULL)),
        0)::bigint AS index_entries,
    coalesce(sum((t.n_tup_ins + t.n_tup_upd - t.n_tup_hot_upd)
        * (SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid
            AND i.indpred IS NOT NULL)), 0)::bigint AS partial_entries
FROM pg_stat_user_tables t";

const WAL_POSITION: &str = "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint";

/// The counts of the database at `url` once they stopped moving: two reads 300 ms apart agree
/// (at most 5 s), so the counts of server processes that just exited are in.
async fn settled_counts(url: &str) -> BenchResult<Counts> {
    let mut last: Option<Counts> = None;
    for _ in 0..16 {
        let mut connection = PgConnection::connect(url).await?;
        let row = sqlx::query(COUNTS).fetch_one(&mut connection).await?;
        connection.close().await?;
        let counts = Counts {
            commits: row.try_get("commits")?,
            inserted: row.try_get("inserted")?,
            updated: row.try_get("updated")?,
            hot_updated: row.try_get("hot_updated")?,
            deleted: row.try_get("deleted")?,
            index_entries: row.try_get("index_entries")?,
            partial_entries: row.try_get("partial_entries")?,
        };
        // The reading connection's own commit is reported when it exits: allow for it.
        if last.is_some_and(|last| {
            Counts {
                commits: counts.commits,
                ..last
            } == counts
                && counts.commits - last.commits <= 1
        }) {
            return Ok(counts);
        }
        last = Some(counts);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    last.ok_or_else(|| "no statistics read".into())
}

async fn wal_position(url: &str) -> BenchResult<i64> {
    let mut connection = PgConnection::connect(url).await?;
    let position: i64 = sqlx::query_scalar(WAL_POSITION)
        .fetch_one(&mut connection)
        .await?;
    connection.close().await?;
    Ok(position)
}

/// What one run wrote, per job.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Writes {
    /// WAL bytes of the insert.
    pub(crate) insert_wal: f64,
    /// WAL bytes of the drain.
    pub(crate) drain_wal: f64,
    /// Transactions committed in the run's database, both phases.
    pub(crate) commits: f64,
    /// Rows inserted, updated (of them HOT) and deleted, both phases.
    pub(crate) inserted: f64,
    pub(crate) updated: f64,
    pub(crate) hot_updated: f64,
    pub(crate) deleted: f64,
    /// Entries written to indexes without a predicate.
    pub(crate) index_entries: f64,
    /// Entries written to partial indexes, at most (see the module's documentation).
    pub(crate) partial_entries: f64,
}

impl std::fmt::Display for Writes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "per job: WAL {:.0} B insert + {:.0} B drain, {:.2} commits, rows {:.2} ins / {:.2} upd ({:.2} HOT) / {:.2} del, index entries {:.2} + <= {:.2} partial",
            self.insert_wal,
            self.drain_wal,
            self.commits,
            self.inserted,
            self.updated,
            self.hot_updated,
            self.deleted,
            self.index_entries,
            self.partial_entries
        )
    }
}

/// Takes the marks of one run: [`Meter::start`] before the insert, [`Meter::inserted`] after
/// its commit, [`Meter::draining`] just before the workers start, [`Meter::finish`] once the
/// run's connections are closed.
pub(crate) struct Meter {
    url: String,
    counts: Counts,
    wal: [i64; 3],
}

impl Meter {
    /// Before the insert.
    pub(crate) async fn start(url: &str) -> BenchResult<Self> {
        let counts = settled_counts(url).await?;
        let wal = wal_position(url).await?;
        Ok(Self {
            url: url.to_owned(),
            counts,
            wal: [wal; 3],
        })
    }

    /// Right after the insert committed.
    pub(crate) async fn inserted(&mut self) -> BenchResult<()> {
        self.wal[1] = wal_position(&self.url).await?;
        Ok(())
    }

    /// Right before the workers start.
    pub(crate) async fn draining(&mut self) -> BenchResult<()> {
        self.wal[2] = wal_position(&self.url).await?;
        Ok(())
    }

    /// After the drain, once the run's connections are closed: the figures, per job of `jobs`.
    pub(crate) async fn finish(self, jobs: usize) -> BenchResult<Writes> {
        let drained = wal_position(&self.url).await?;
        let counts = settled_counts(&self.url).await?;
        let per_job = |value: i64| value as f64 / jobs.max(1) as f64;
        Ok(Writes {
            insert_wal: per_job(self.wal[1] - self.wal[0]),
            drain_wal: per_job(drained - self.wal[2]),
            commits: per_job(counts.commits - self.counts.commits),
            inserted: per_job(counts.inserted - self.counts.inserted),
            updated: per_job(counts.updated - self.counts.updated),
            hot_updated: per_job(counts.hot_updated - self.counts.hot_updated),
            deleted: per_job(counts.deleted - self.counts.deleted),
            index_entries: per_job(counts.index_entries - self.counts.index_entries),
            partial_entries: per_job(counts.partial_entries - self.counts.partial_entries),
        })
    }
}
