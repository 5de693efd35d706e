//! Maintenance of the outbox tables an operator (or the outbox benchmark) runs by hand: fresh
//! planner statistics after a bulk load, the database-side payload cap switched off and on,
//! and the space the churned tables take.

use super::{PgStore, sql};
use crate::store::DispatchError;

impl PgStore {
    /// Vacuums and analyzes the deliveries table and analyzes the events table: what
    /// autovacuum does in its own time, done now, so that the claim's plans after a bulk append
    /// see the rows it wrote. Runs on the pool, outside a transaction (`VACUUM` cannot run in one).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn analyze(&self) -> Result<(), DispatchError> {
        for statement in sql::ANALYZE_OUTBOX {
            sqlx::raw_sql(statement).execute(self.pool()).await?;
        }
        Ok(())
    }

    /// Switches the database's own payload cap (the `evc_events_payload_cap` trigger, the last
    /// check of `payload_policy.hard_max_bytes` behind the stores' append checks) off or on,
    /// for every writer of the database. Off, only the append checks hold the cap: meant for
    /// measuring what the trigger costs an append (the outbox benchmark) or for a bulk load of
    /// events already checked; switch it on again after. Needs the owner of `evc_events`.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn set_payload_cap(&self, on: bool) -> Result<(), DispatchError> {
        let statement = if on {
            sql::ENABLE_PAYLOAD_CAP
        } else {
            sql::DISABLE_PAYLOAD_CAP
        };
        sqlx::raw_sql(statement).execute(self.pool()).await?;
        Ok(())
    }

    /// The space the tables a delivery churns take now: deliveries, acked batches, attempts and
    /// events, each with its live and dead rows (the statistics' estimates, which autovacuum
    /// reads), its heap and index bytes and autovacuum's passes over it. What to watch while a
    /// long transaction holds back vacuum: the dead rows and index bytes then grow with every
    /// ack (docs/runtime.md, "Benchmark").
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn table_space(&self) -> Result<Vec<TableSpace>, DispatchError> {
        let rows: Vec<(String, i64, i64, i64, i64, i64)> = sqlx::query_as(sql::TABLE_SPACE)
            .fetch_all(self.pool())
            .await?;
        Ok(rows
            .into_iter()
            .map(
                |(table, live_rows, dead_rows, table_bytes, index_bytes, autovacuums)| TableSpace {
                    table,
                    live_rows,
                    dead_rows,
                    table_bytes,
                    index_bytes,
                    autovacuums,
                },
            )
            .collect())
    }
}

/// One outbox table's space ([`PgStore::table_space`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableSpace {
    /// The table's name.
    pub table: String,
    /// Live rows (an estimate).
    pub live_rows: i64,
    /// Dead rows vacuum has not removed yet (an estimate).
    pub dead_rows: i64,
    /// Bytes of the heap (with its TOAST and maps).
    pub table_bytes: i64,
    /// Bytes of all its indexes.
    pub index_bytes: i64,
    /// Autovacuum's finished passes over the table since the statistics were reset: none while
    /// dead rows pile up says autovacuum never got through (or is off), not that a held
    /// horizon kept it from removing them.
    pub autovacuums: i64,
}
