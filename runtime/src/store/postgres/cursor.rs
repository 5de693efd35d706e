//! The relay's cursors on PostgreSQL ([`Cursors`]): `evc_relay_cursors` (the nineteenth
//! runtime step), times from the database's clock.

use std::time::Duration;

use sqlx::Row;

use super::{PgStore, sql};
use crate::store::cursor::{check_name, check_owner, cursor_state, error_text, fenced, lease_ms};
use crate::store::{
    CursorLease, CursorProgress, CursorState, Cursors, DispatchError, FeedPosition,
};

impl Cursors for PgStore {
    async fn take_cursor(
        &self,
        name: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<CursorLease>, DispatchError> {
        check_name(name)?;
        check_owner(owner)?;
        // A cursor passes every tenant's events: under row-level security a session of one
        // tenant reads only its own feed and would move the cursor past the others'.
        if let Some(tenant) = super::operations::session_tenant(self.pool()).await? {
            return Err(DispatchError::TenantScoped("a relay cursor", tenant));
        }
        let row = sqlx::query(sql::TAKE_CURSOR)
            .bind(name)
            .bind(owner)
            .bind(lease_ms(lease))
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
        let (published, rate_per_s) = progress.columns();
        let advanced = sqlx::query(sql::ADVANCE_CURSOR)
            .bind(&held.name)
            .bind(held.token)
            .bind(position.writer)
            .bind(position.seq)
            .bind(lease_ms(lease))
            .bind(published)
            .bind(rate_per_s)
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
            .fetch_optional(self.pool())
            .await?;
        fenced(held, noted.is_some())
    }

    async fn release_cursor(&self, held: &CursorLease) -> Result<(), DispatchError> {
        let released = sqlx::query(sql::RELEASE_CURSOR)
            .bind(&held.name)
            .bind(held.token)
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
