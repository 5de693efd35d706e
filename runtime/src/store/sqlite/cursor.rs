//! The relay's cursors on SQLite ([`Cursors`]): `evc_relay_cursors` (migrations `0010` and
//! `0011`),
//! times from the process's clock, as every time of this store.

use std::time::Duration;

use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use super::{SqliteStore, epoch_now, sql};
use crate::store::cursor::{check_name, check_owner, error_text, fenced};
use crate::store::{
    CursorLease, CursorProgress, CursorState, Cursors, DispatchError, FeedPosition,
};

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
        progress: CursorProgress,
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
            .bind(i64::try_from(progress.published).unwrap_or(i64::MAX))
            .bind(progress.rate_per_s.max(0.0))
            .fetch_optional(self.pool())
            .await?;
        fenced(held, advanced.is_some())
    }

    async fn note_cursor_failure(
        &self,
        held: &CursorLease,
        error: &str,
    ) -> Result<(), DispatchError> {
        let noted = sqlx::query(sql::NOTE_CURSOR_FAILURE)
            .bind(&held.name)
            .bind(held.token)
            .bind(error_text(error))
            .bind(epoch_now())
            .fetch_optional(self.pool())
            .await?;
        fenced(held, noted.is_some())
    }

    async fn release_cursor(&self, held: &CursorLease) -> Result<(), DispatchError> {
        let released = sqlx::query(sql::RELEASE_CURSOR)
            .bind(&held.name)
            .bind(held.token)
            .bind(epoch_now())
            .fetch_optional(self.pool())
            .await?;
        fenced(held, released.is_some())
    }

    async fn cursor(&self, name: &str) -> Result<Option<CursorState>, DispatchError> {
        check_name(name)?;
        let row = sqlx::query(sql::READ_CURSOR)
            .bind(name)
            .fetch_optional(self.pool())
            .await?;
        Ok(row.as_ref().map(cursor_state).transpose()?)
    }
}

/// A cursor row of [`sql::READ_CURSOR`] or [`sql::RELAY_CURSORS`].
pub(super) fn cursor_state(row: &SqliteRow) -> Result<CursorState, sqlx::Error> {
    Ok(CursorState {
        name: row.try_get("name")?,
        position: FeedPosition {
            writer: row.try_get("writer")?,
            seq: row.try_get("seq")?,
        },
        owner: row.try_get("owner")?,
        token: row.try_get("token")?,
        lease_until: row.try_get("lease_until")?,
        advanced_at: row.try_get("advanced_at")?,
        published: row.try_get("published")?,
        rate_per_s: row.try_get("rate_per_s")?,
        progressed_at: row.try_get("progressed_at")?,
        failed_rounds: row.try_get("failed_rounds")?,
        failing: row.try_get("failing")?,
    })
}
