//! The relay's cursors ([`Cursors`]), on both stores: how far a relay published the event
//! feed ([`crate::Observe::feed`]) to a broker, advanced only after the broker acknowledged
//! the events. One relay holds a cursor at a time: taking it draws a new fencing token, and a
//! position is written only under the newest token, so a relay that lost the cursor (its lease
//! ran out while it was stopped, slow or cut off) can no longer move it (docs/relay.md).

use std::future::Future;
use std::time::Duration;

use crate::store::{DispatchError, FeedPosition, Observe};

/// The longest cursor name.
pub const MAX_CURSOR_NAME_CHARS: usize = 64;

/// Fenced cursors over the event feed. Implemented by [`crate::PgStore`] and
/// [`crate::SqliteStore`] with the same semantics.
pub trait Cursors: Observe {
    /// Takes cursor `name` for `owner` until `lease` from now, when no one holds it, its
    /// holder's lease ran out, or `owner` holds it already (a restarted relay takes its cursor
    /// back at once). Each take draws a new fencing token, which fences every earlier holder.
    /// A cursor taken for the first time stands at the start of the feed. `None`: another
    /// owner holds it.
    ///
    /// # Errors
    /// [`DispatchError::CursorName`] for a name that is not 1 to 64 of `a-z`, `0-9`, `.`, `_`,
    /// `-`, starting with a letter or digit; [`DispatchError::CursorOwner`] for an owner that is
    /// empty or longer than 200 characters; [`DispatchError::Database`].
    fn take_cursor(
        &self,
        name: &str,
        owner: &str,
        lease: Duration,
    ) -> impl Future<Output = Result<Option<CursorLease>, DispatchError>> + Send;

    /// Moves the cursor `held` names to `position`, adds `progress.published` to the events it
    /// passed, records the holder's publish rate, and extends the lease to `lease` from now, if
    /// `held`'s token still holds it. A relay with nothing to publish advances to the same
    /// position (with [`CursorProgress::default`]) to keep its lease.
    ///
    /// # Errors
    /// [`DispatchError::StaleCursor`] when a later take drew a newer token (nothing is
    /// written); [`DispatchError::Database`].
    fn advance_cursor(
        &self,
        held: &CursorLease,
        position: FeedPosition,
        progress: CursorProgress,
        lease: Duration,
    ) -> impl Future<Output = Result<(), DispatchError>> + Send;

    /// Records a failed round of the relay holding `held`, with its error (at most 500
    /// characters are kept; it must name no payload), if `held`'s token still holds it: the
    /// cursor reports failing until it passes an event again.
    ///
    /// # Errors
    /// [`DispatchError::StaleCursor`] when a later take drew a newer token (nothing is
    /// written); [`DispatchError::Database`].
    fn note_cursor_failure(
        &self,
        held: &CursorLease,
        error: &str,
    ) -> impl Future<Output = Result<(), DispatchError>> + Send;

    /// Lets the cursor `held` names go (its lease ends now), if `held`'s token still holds it,
    /// so another relay takes it at once: what a relay does when it stops. Its position stays.
    ///
    /// # Errors
    /// [`DispatchError::StaleCursor`] when a later take drew a newer token (nothing is
    /// written); [`DispatchError::Database`].
    fn release_cursor(
        &self,
        held: &CursorLease,
    ) -> impl Future<Output = Result<(), DispatchError>> + Send;

    /// The cursor `name` as stored (`None`: never taken).
    ///
    /// # Errors
    /// [`DispatchError::CursorName`]; [`DispatchError::Database`].
    fn cursor(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<CursorState>, DispatchError>> + Send;
}

/// A cursor held under a fencing token ([`Cursors::take_cursor`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CursorLease {
    /// The cursor.
    pub name: String,
    /// Who holds it.
    pub owner: String,
    /// The fencing token of this take.
    pub token: i64,
    /// Where the cursor stood when taken: the last event published.
    pub position: FeedPosition,
}

/// A cursor as stored ([`Cursors::cursor`]). Times are epoch seconds of the store's clock.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CursorState {
    /// The cursor.
    pub name: String,
    /// The last event published.
    pub position: FeedPosition,
    /// Who took it last.
    pub owner: String,
    /// The newest fencing token.
    pub token: i64,
    /// When the holder's lease ends unless advanced.
    pub lease_until: f64,
    /// When it was last taken or advanced.
    pub advanced_at: f64,
    /// Events its moves passed, by every holder.
    pub published: i64,
    /// The holder's publish rate at its last move, in events per second.
    pub rate_per_s: f64,
    /// When a move last passed an event (or the cursor was created).
    pub progressed_at: f64,
    /// Rounds that failed while a relay held it.
    pub failed_rounds: i64,
    /// The last failure's error, while it is newer than the last progress.
    pub failing: Option<String>,
}

/// A cursor row as both stores' cursor statements return it (`READ_CURSOR`, `RELAY_CURSORS`):
/// the same column names and types on either database.
pub(crate) fn cursor_state<'r, R>(row: &'r R) -> Result<CursorState, sqlx::Error>
where
    R: sqlx::Row,
    &'r str: sqlx::ColumnIndex<R>,
    String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    f64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
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

/// What a relay reports with a move of its cursor ([`Cursors::advance_cursor`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CursorProgress {
    /// Events the move passes.
    pub published: u64,
    /// The relay's publish rate over its recent rounds, in events per second.
    pub rate_per_s: f64,
}

impl CursorProgress {
    /// The `published` and `rate_per_s` columns a move adds and writes: saturated, and never
    /// a negative rate.
    pub(crate) fn columns(self) -> (i64, f64) {
        (
            i64::try_from(self.published).unwrap_or(i64::MAX),
            self.rate_per_s.max(0.0),
        )
    }
}

/// The longest failure message a cursor keeps ([`Cursors::note_cursor_failure`]).
pub const MAX_CURSOR_ERROR_CHARS: usize = 500;

/// `error` cut to [`MAX_CURSOR_ERROR_CHARS`] characters.
pub(crate) fn error_text(error: &str) -> &str {
    error
        .char_indices()
        .nth(MAX_CURSOR_ERROR_CHARS)
        .map_or(error, |(at, _)| &error[..at])
}

/// Refuses a cursor name the stores would not take, before any query.
pub(crate) fn check_name(name: &str) -> Result<(), DispatchError> {
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let rest_ok = bytes
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'));
    if first_ok && rest_ok && name.len() <= MAX_CURSOR_NAME_CHARS {
        Ok(())
    } else {
        Err(DispatchError::CursorName(name.to_owned()))
    }
}

/// The longest cursor owner.
pub const MAX_CURSOR_OWNER_CHARS: usize = 200;

/// Refuses an owner the stores would not take, before any query.
pub(crate) fn check_owner(owner: &str) -> Result<(), DispatchError> {
    let chars = owner.chars().count();
    if (1..=MAX_CURSOR_OWNER_CHARS).contains(&chars) {
        Ok(())
    } else {
        Err(DispatchError::CursorOwner { chars })
    }
}

/// Ok when a fenced statement found the cursor under `held`'s token, else stale.
pub(crate) fn fenced(held: &CursorLease, found: bool) -> Result<(), DispatchError> {
    if found {
        Ok(())
    } else {
        Err(DispatchError::StaleCursor {
            name: held.name.clone(),
            token: held.token,
        })
    }
}

/// A lease length in whole milliseconds, as the stores bind it.
pub(crate) fn lease_ms(lease: Duration) -> i64 {
    i64::try_from(lease.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_names_are_plain() {
        for good in ["relay", "jetstream.main", "r-2_b", "0"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        let long = "a".repeat(MAX_CURSOR_NAME_CHARS + 1);
        for bad in ["", "Relay", ".x", "a b", "a/b", long.as_str()] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
