//! The relay's cursors on SQLite ([`Cursors`]): `evc_relay_cursors` (migration `0010`),
//! times from the process's clock, as every time of this store.

use std::time::Duration;

use sqlx::Row;

use super::{SqliteStore, epoch_now, sql};
use crate::store::cursor::{check_name, check_owner};
use crate::store::{CursorLease, CursorState, Cursors, DispatchError, FeedPosition};

impl Cursors for SqliteStore {
    async fn take_cursor(
        &self,
        name: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<CursorLease>, DispatchError> {
        check_name(name)?;
        check_owner(owner)?;
        let now = epoch_now();
        let row = sqlx::query(sql::TAKE_CURSOR)
            .bind(name)
            .bind(owner)
            .bind(now + lease.as_secs_f64())
            .bind(now)
            .fetch_optional(self.pool())
            .await?;
        row.map(|row| {
            Ok(CursorLease {
                name: name.to_owned(),
                owner: owner.to_owned(),
                token: row.try_get("token")?,
                position: FeedPosition {
                    writer: row.try_get("writer")?,
                    seq: row.try_get("seq")?,
                },
            })
        })
        .transpose()
    }

    async fn advance_cursor(
        &self,
        held: &CursorLease,
        position: FeedPosition,
        lease: Duration,
    ) -> Result<(), DispatchError> {
        let now = epoch_now();
        let advanced = sqlx::query(sql::ADVANCE_CURSOR)
            .bind(&held.name)
            .bind(held.token)
            .bind(position.writer)
            .bind(position.seq)
            .bind(now + lease.as_secs_f64())
            .bind(now)
            .fetch_optional(self.pool())
            .await?;
        match advanced {
            Some(_) => Ok(()),
            None => Err(DispatchError::StaleCursor {
                name: held.name.clone(),
                token: held.token,
            }),
        }
    }

    async fn release_cursor(&self, held: &CursorLease) -> Result<(), DispatchError> {
        let released = sqlx::query(sql::RELEASE_CURSOR)
            .bind(&held.name)
            .bind(held.token)
            .bind(epoch_now())
            .fetch_optional(self.pool())
            .await?;
        match released {
            Some(_) => Ok(()),
            None => Err(DispatchError::StaleCursor {
                name: held.name.clone(),
                token: held.token,
            }),
        }
    }

    async fn cursor(&self, name: &str) -> Result<Option<CursorState>, DispatchError> {
        check_name(name)?;
        let row = sqlx::query(sql::READ_CURSOR)
            .bind(name)
            .fetch_optional(self.pool())
            .await?;
        Ok(row
            .map(|row| {
                Ok::<_, sqlx::Error>(CursorState {
                    name: name.to_owned(),
                    position: FeedPosition {
                        writer: row.try_get("writer")?,
                        seq: row.try_get("seq")?,
                    },
                    owner: row.try_get("owner")?,
                    token: row.try_get("token")?,
                    lease_until: row.try_get("lease_until")?,
                    advanced_at: row.try_get("advanced_at")?,
                })
            })
            .transpose()?)
    }
}
