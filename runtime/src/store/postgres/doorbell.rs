//! The doorbell: single-event appends notify a consumer only while one of its workers sleeps.
//!
//! `pg_notify` makes PostgreSQL serialise the commits of notifying transactions on one queue
//! lock; measured, it halved single-event produce. A busy dispatcher does not need the
//! notification (it claims again as soon as its batch is done), only a sleeping one does. So a
//! worker about to sleep takes its consumer's doorbell, a session-level exclusive advisory lock,
//! and holds it while it sleeps; an append tries the shared transaction lock of the same key and
//! notifies only when that is refused ([`sql::APPEND_EVENT`]).
//!
//! No wake-up is lost to the check: an append that got the shared lock holds it to its commit,
//! so the worker's lock request waits for every such append, and the worker claims once more
//! after it got the doorbell, which sees them all. Appends after that see the doorbell and
//! notify. Batch appends always notify (one notification per consumer and batch).

use std::time::Duration;

use sqlx::Row;
use sqlx::pool::PoolConnection;
use sqlx::postgres::Postgres;

use super::{PgStore, sql};
use crate::store::DispatchError;

/// SQLSTATE of a statement cancelled by `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// A consumer's doorbell, held by a sleeping worker: appends for the consumer notify while it is
/// held. Give it back with [`Doorbell::release`]; dropped unreleased, its connection is closed
/// (which releases the lock) instead of going back to the pool.
#[derive(Debug)]
pub struct Doorbell {
    connection: Option<PoolConnection<Postgres>>,
    consumer: String,
}

impl Doorbell {
    /// The consumer whose doorbell this is.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Gives the doorbell back; the connection returns to the pool.
    ///
    /// # Errors
    /// [`DispatchError::Database`]; the connection is then closed, which releases the lock.
    pub async fn release(mut self) -> Result<(), DispatchError> {
        let Some(mut connection) = self.connection.take() else {
            return Ok(());
        };
        let released = sqlx::query(sql::RELEASE_DOORBELL)
            .bind(&self.consumer)
            .fetch_one(&mut *connection)
            .await;
        match released {
            Ok(row) if row.try_get::<bool, _>("released").unwrap_or(false) => Ok(()),
            Ok(_) => {
                connection.close_on_drop();
                Ok(())
            }
            Err(error) => {
                connection.close_on_drop();
                Err(error.into())
            }
        }
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        if let Some(connection) = self.connection.as_mut() {
            connection.close_on_drop();
        }
    }
}

impl PgStore {
    /// Takes `consumer`'s doorbell, waiting at most `wait` for the appends in flight to commit.
    /// `None` when another worker holds it (its notifications wake every listening dispatcher)
    /// or the pool gave no connection within `wait`; the caller then sleeps without it and relies on
    /// notifications and polling as before.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn hold_doorbell(
        &self,
        consumer: &str,
        wait: Duration,
    ) -> Result<Option<Doorbell>, DispatchError> {
        let Ok(connection) = tokio::time::timeout(wait, self.inner.pool.acquire()).await else {
            return Ok(None);
        };
        let mut connection = connection?;
        sqlx::raw_sql("BEGIN").execute(&mut *connection).await?;
        let held = async {
            sqlx::query(sql::LOCAL_LOCK_TIMEOUT)
                .bind(format!("{}ms", wait.as_millis().max(1)))
                .execute(&mut *connection)
                .await?;
            sqlx::query(sql::HOLD_DOORBELL)
                .bind(consumer)
                .execute(&mut *connection)
                .await
        }
        .await;
        match held {
            Ok(_) => {
                // The session lock outlives the transaction; the timeout does not.
                if let Err(error) = sqlx::raw_sql("COMMIT").execute(&mut *connection).await {
                    connection.close_on_drop();
                    return Err(error.into());
                }
                Ok(Some(Doorbell {
                    connection: Some(connection),
                    consumer: consumer.to_owned(),
                }))
            }
            Err(error) => {
                sqlx::raw_sql("ROLLBACK").execute(&mut *connection).await?;
                let timed_out = error
                    .as_database_error()
                    .and_then(|db| db.code())
                    .is_some_and(|code| code == LOCK_NOT_AVAILABLE);
                if timed_out {
                    Ok(None)
                } else {
                    Err(error.into())
                }
            }
        }
    }
}
