//! Maintenance of the outbox tables an operator (or the outbox benchmark) runs by hand: fresh
//! planner statistics after a bulk load, and the database-side payload cap switched off and on.

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
}
