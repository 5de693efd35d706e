//! The SQLite store's lifecycle events (docs/runtime.md, "Lifecycle events"): when the registry
//! registers `job.dead_lettered`, dead-lettering a delivery appends one in the transaction of
//! the dead-lettering, through the checked append path. What it says is
//! [`crate::store::lifecycle`]'s, as on PostgreSQL.

use sqlx::Row;
use sqlx::sqlite::SqliteConnection;

use super::{SqliteStore, sql};
use crate::append::AppendError;
use crate::registry::EventDescriptor;
use crate::store::DispatchError;
use crate::store::lifecycle::{
    DEAD_LETTERED, DeadLetter, Source, dead_lettered, outgoing, stored_trace,
};

impl SqliteStore {
    /// The registered `job.dead_lettered` type, if the registry has a version of it.
    pub(super) fn dead_letter_type(&self) -> Option<&'static EventDescriptor> {
        self.registry()
            .event(DEAD_LETTERED)
            .filter(|descriptor| !descriptor.versions.is_empty())
    }

    /// Appends the `job.dead_lettered` event of `dead` on `transaction` (the one that
    /// dead-lettered it, at `now`, epoch seconds), in the newest registered version, through
    /// [`SqliteStore::append`]. A dead-lettered `job.dead_lettered` delivery emits nothing
    /// (the loop guard). A refused event (the registered schema wants fields the runtime
    /// cannot fill) is recorded as a reject and logged; the dead-lettering stands.
    ///
    /// # Errors
    /// [`DispatchError::Database`]; the caller's transaction must then roll back.
    pub(super) async fn emit_dead_lettered(
        &self,
        transaction: &mut SqliteConnection,
        descriptor: &'static EventDescriptor,
        dead: DeadLetter<'_>,
        now: f64,
    ) -> Result<(), DispatchError> {
        let Some(row) = sqlx::query(sql::LIFECYCLE_SOURCE)
            .bind(dead.event_id.to_string())
            .bind(now)
            .fetch_optional(&mut *transaction)
            .await?
        else {
            return Ok(());
        };
        let source = Source {
            event_type: row.try_get("event_type")?,
            version: row.try_get("schema_version")?,
            tenant_scope: row.try_get("tenant_scope")?,
            trace: stored_trace(
                row.try_get("trace_id")?,
                row.try_get("parent_span_id")?,
                row.try_get("trace_flags")?,
            ),
            now: row.try_get("now")?,
        };
        let Some((event, options)) =
            dead_lettered(source, dead).and_then(|lifecycle| outgoing(descriptor, lifecycle))
        else {
            return Ok(());
        };
        match self.append(transaction, event, options).await {
            Ok(_) => Ok(()),
            Err(AppendError::Database(error)) => Err(error.into()),
            Err(error) => {
                tracing::warn!(
                    event_type = descriptor.name,
                    %error,
                    "lifecycle event not emitted: the registered contract refused it"
                );
                Ok(())
            }
        }
    }
}
