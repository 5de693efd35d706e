//! The SQLite store's lease operations: claim, fenced ack / fail / renew, release, lease-expiry
//! recovery and the idempotent effect row, with the PostgreSQL store's semantics
//! ([`crate::store::postgres::PgStore`]; docs/runtime.md, "Dispatch"). Statements live in
//! [`super::sql`].
//!
//! Each operation that writes more than one statement (an ack and its attempt row, a claim and
//! its events) runs in one transaction: `BEGIN IMMEDIATE` on the store's pool or on a caller's
//! connection outside a transaction, a savepoint inside the caller's transaction.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use sqlx::Row;
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use uuid::Uuid;

use super::lifecycle::SettledKey;
use super::{SqliteStore, begin_write, epoch_now, parse_uuid, sql};
use crate::handler::{Delivery, FailureClass};
use crate::registry::ConsumerMode;
use crate::retry::RetryDecision;
use crate::store::lifecycle::{self, DeadLetter};
use crate::store::{
    AckBatch, Claimed, ClaimedEvents, DispatchError, Heartbeat, Intent, Lease, Unclaimed,
    not_claimed, unclaimed_state,
};
use crate::trace::TraceContext;

/// A delivery row a fenced statement settled (its `RETURNING`): what its attempt row needs.
struct Settled {
    event_id: String,
    consumer: String,
    generation: i64,
    attempt: i64,
    owner: String,
    token: i64,
}

impl Settled {
    fn read(row: &SqliteRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            event_id: row.try_get("event_id")?,
            consumer: row.try_get("consumer")?,
            generation: row.try_get("generation")?,
            attempt: row.try_get("attempt")?,
            owner: row
                .try_get::<Option<String>, _>("lease_owner")?
                .unwrap_or_default(),
            token: row.try_get("fencing_token")?,
        })
    }

    /// A held delivery [`sql::ACK_HELD`] deleted, acked by worker `owner`.
    fn read_held(row: &SqliteRow, owner: &str) -> Result<Self, sqlx::Error> {
        Ok(Self {
            event_id: row.try_get("event_id")?,
            consumer: row.try_get("consumer")?,
            generation: row.try_get("generation")?,
            attempt: row.try_get("attempt")?,
            owner: owner.to_owned(),
            token: row.try_get("fencing_token")?,
        })
    }
}

/// The replayed deliveries among `settled` (generation above 0), as
/// [`SqliteStore::end_replays`] looks them up: none, and no allocation, for an ordinary settle.
fn replayed(settled: &[(Settled, f64)]) -> Vec<SettledKey<'_>> {
    settled
        .iter()
        .filter(|(row, _)| row.generation > 0)
        .map(|(row, _)| (row.event_id.as_str(), row.consumer.as_str(), row.generation))
        .collect()
}

/// Writes the attempt rows of `settled` deliveries in one statement, each started when its
/// lease says and finished now (never before it), all with `outcome` and `error_code`.
async fn write_attempts(
    connection: &mut SqliteConnection,
    settled: &[(Settled, f64)],
    outcome: &str,
    error_code: Option<&str>,
) -> Result<(), sqlx::Error> {
    if settled.is_empty() {
        return Ok(());
    }
    let now = epoch_now();
    let rows: Vec<serde_json::Value> = settled
        .iter()
        .map(|(row, started)| {
            let finished = now.max(*started);
            // Whole milliseconds, as PostgreSQL's `floor(extract(epoch ...) * 1000)`.
            let duration_ms = ((finished - started) * 1000.0).floor() as i64;
            serde_json::json!([
                row.event_id,
                row.consumer,
                row.generation,
                row.attempt.max(1),
                row.owner,
                row.token,
                started,
                finished,
                duration_ms
            ])
        })
        .collect();
    sqlx::query(sql::INSERT_ATTEMPTS)
        .bind(serde_json::Value::from(rows).to_string())
        .bind(outcome)
        .bind(error_code)
        .execute(connection)
        .await?;
    Ok(())
}

impl SqliteStore {
    /// Fenced operations refused so far because their token was stale (acks, fails, renewals,
    /// effect writes, transactional fences). Monotonic for the life of the store; the file's
    /// `evc_stale_rejections` counts them per consumer too ([`SqliteStore::stale_rejections`]).
    pub fn stale_tokens(&self) -> u64 {
        self.inner.stale_tokens.load(Ordering::Relaxed)
    }

    fn stale(&self, lease: &Lease) -> DispatchError {
        self.count_stale(lease.event_id, &lease.consumer, lease.token);
        DispatchError::StaleToken {
            event_id: lease.event_id,
            consumer: lease.consumer.clone(),
            token: lease.token,
        }
    }

    fn count_stale(&self, event_id: Uuid, consumer: &str, token: i64) {
        self.inner.stale_tokens.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            %event_id,
            consumer,
            token,
            "fenced operation refused: stale token"
        );
        // Counted in the file on a task of its own: the refusal may come inside a caller's
        // write transaction, which holds the write lock the count needs.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let store = self.clone();
            let consumer = consumer.to_owned();
            runtime.spawn(async move {
                if let Err(error) = store.write_stale(&consumer).await {
                    tracing::debug!(%error, consumer, "stale-token count not stored");
                }
            });
        }
    }

    async fn write_stale(&self, consumer: &str) -> Result<(), sqlx::Error> {
        let mut tx = self.begin().await?;
        sqlx::query(sql::COUNT_STALE)
            .bind(consumer)
            .bind(1_i64)
            .bind(epoch_now())
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }

    /// Whether `consumer`'s claims run in shadow mode: the operator's override, else the mode
    /// its contract declares.
    fn shadow_mode(&self, consumer: &str, mode_override: Option<&str>) -> bool {
        match mode_override {
            Some(mode) => mode == ConsumerMode::Shadow.as_str(),
            None => self
                .registry()
                .consumer(consumer)
                .is_some_and(|descriptor| descriptor.mode == ConsumerMode::Shadow),
        }
    }

    /// A leased claim ([`crate::Hold::Lease`]) on the caller's connection, for
    /// [`crate::Store::claim`] (outside a transaction: the claim commits its leases itself;
    /// inside one, they commit with it). Only deliveries whose `event_seq` is above
    /// `after_seq` (0: all of them) and at most `until_seq` are considered, the dispatcher's
    /// claim cursor and the stretch it handed the claim. A per-key claim ignores both: it must
    /// see every head of a key.
    ///
    /// One statement leases the batch (`CLAIM_BATCH` or `CLAIM_KEY_HEADS`) and
    /// one reads its events, in one `BEGIN IMMEDIATE` transaction: oldest first, due only, the
    /// attempt counted and the fencing token raised; with `per_key`, only the head of each key
    /// and never while another delivery of the key is leased.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn claim_leased(
        &self,
        connection: &mut SqliteConnection,
        consumer: &str,
        owner: &str,
        batch: u32,
        lease: Duration,
        per_key: bool,
        after_seq: i64,
        until_seq: i64,
    ) -> Result<Vec<Claimed>, DispatchError> {
        let now = epoch_now();
        let until = now + lease.as_secs_f64();
        let batch = i64::from(batch.max(1));
        let mut tx = begin_write(connection).await?;
        let leased = if per_key {
            sqlx::query(sql::CLAIM_KEY_HEADS)
                .bind(consumer)
                .bind(owner)
                .bind(until)
                .bind(now)
                .bind(batch)
                .bind(self.tenant())
                .fetch_all(&mut *tx)
                .await?
        } else {
            sqlx::query(sql::CLAIM_BATCH)
                .bind(consumer)
                .bind(owner)
                .bind(until)
                .bind(now)
                .bind(after_seq)
                .bind(batch)
                .bind(self.tenant())
                .bind(until_seq)
                .fetch_all(&mut *tx)
                .await?
        };
        if leased.is_empty() {
            tx.rollback().await?;
            return Ok(Vec::new());
        }
        let claimed = self
            .with_events(&mut tx, &leased, consumer, owner, now)
            .await?;
        tx.commit().await?;
        Ok(claimed)
    }

    /// A claim by event id for [`crate::Store::claim_events`], in one `BEGIN IMMEDIATE`
    /// transaction: the lease ([`sql::CLAIM_EVENTS`]), the claimed events, and where the
    /// rest stand ([`sql::UNCLAIMED_EVENTS`]).
    pub(super) async fn claim_by_id(
        &self,
        connection: &mut SqliteConnection,
        consumer: &str,
        owner: &str,
        event_ids: &[Uuid],
        lease: Duration,
    ) -> Result<ClaimedEvents, DispatchError> {
        if event_ids.is_empty() {
            return Ok(ClaimedEvents::default());
        }
        let now = epoch_now();
        let ids: Vec<String> = event_ids.iter().map(Uuid::to_string).collect();
        let ids = serde_json::Value::from(ids).to_string();
        let mut tx = begin_write(connection).await?;
        let leased = sqlx::query(sql::CLAIM_EVENTS)
            .bind(consumer)
            .bind(owner)
            .bind(now + lease.as_secs_f64())
            .bind(now)
            .bind(&ids)
            .bind(self.tenant())
            .fetch_all(&mut *tx)
            .await?;
        let claimed = self
            .with_events(&mut tx, &leased, consumer, owner, now)
            .await?;
        let left = not_claimed(event_ids, &claimed);
        let mut unclaimed = Vec::with_capacity(left.len());
        if !left.is_empty() {
            let rows: Vec<(String, bool, bool, f64)> = sqlx::query_as(sql::UNCLAIMED_EVENTS)
                .bind(consumer)
                .bind(&ids)
                .bind(now)
                .bind(self.tenant())
                .fetch_all(&mut *tx)
                .await?;
            for id in left {
                let text = id.to_string();
                let state = rows
                    .iter()
                    .find(|row| row.0 == text)
                    .map_or(Unclaimed::Settled, |&(_, open, ended, wait)| {
                        unclaimed_state(open, ended, wait)
                    });
                unclaimed.push((id, state));
            }
        }
        tx.commit().await?;
        Ok(ClaimedEvents { claimed, unclaimed })
    }

    /// The claimed deliveries of `rows` (a claim's `RETURNING`) with their events, read on
    /// `connection`, in `event_seq` order.
    async fn with_events(
        &self,
        connection: &mut SqliteConnection,
        rows: &[SqliteRow],
        consumer: &str,
        owner: &str,
        claimed_at: f64,
    ) -> Result<Vec<Claimed>, DispatchError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = rows
            .iter()
            .map(|row| row.try_get("event_id"))
            .collect::<Result<_, _>>()?;
        let ids = serde_json::Value::from(ids).to_string();
        let events = sqlx::query(sql::CLAIMED_EVENTS)
            .bind(ids)
            .bind(consumer)
            .fetch_all(connection)
            .await?;
        let mut by_id: HashMap<String, &SqliteRow> = HashMap::with_capacity(events.len());
        for row in &events {
            by_id.insert(row.try_get("event_id")?, row);
        }
        let mut claimed = Vec::with_capacity(rows.len());
        for row in rows {
            let event_id: String = row.try_get("event_id")?;
            let Some(event) = by_id.get(&event_id) else {
                // The foreign key keeps every delivery's event; a missing one is a broken file.
                return Err(sqlx::Error::RowNotFound.into());
            };
            claimed.push(self.claimed(row, event, owner, claimed_at)?);
        }
        claimed.sort_by_key(|claimed| claimed.event_seq);
        Ok(claimed)
    }

    /// A claimed delivery from its leased row and its event's row, shadowed when its consumer
    /// runs in shadow mode.
    fn claimed(
        &self,
        leased: &SqliteRow,
        event: &SqliteRow,
        owner: &str,
        claimed_at: f64,
    ) -> Result<Claimed, DispatchError> {
        let event_id = parse_uuid(&leased.try_get::<String, _>("event_id")?)?;
        let consumer: String = leased.try_get("consumer")?;
        let attempt = u32::try_from(leased.try_get::<i64, _>("attempt")?).unwrap_or(0);
        let generation = u32::try_from(leased.try_get::<i64, _>("generation")?).unwrap_or(0);
        let token: i64 = leased.try_get("fencing_token")?;
        let event_type: String = event.try_get("event_type")?;
        let version: String = event.try_get("schema_version")?;
        let payload: String = event.try_get("payload")?;
        let payload = serde_json::from_str(&payload)
            .map_err(|source| DispatchError::Payload { event_id, source })?;
        let trace_id: Option<String> = event.try_get("trace_id")?;
        let span_id: Option<String> = event.try_get("parent_span_id")?;
        let flags: Option<String> = event.try_get("trace_flags")?;
        let trace = match (trace_id, span_id, flags) {
            (Some(trace_id), Some(span_id), Some(flags)) => u8::from_str_radix(&flags, 16)
                .ok()
                .and_then(|flags| TraceContext::new(trace_id, span_id, flags).ok()),
            _ => None,
        };
        let mode_override: Option<String> = event.try_get("mode_override")?;
        let mut lease = Lease::new(
            event_id,
            consumer.clone(),
            owner,
            token,
            attempt,
            claimed_at,
        )
        .of_generation(generation);
        if self.shadow_mode(&consumer, mode_override.as_deref()) {
            lease = lease.shadowed();
        }
        let mut claimed = Claimed {
            delivery: Delivery::new(event_id.to_string(), event_type, version, consumer, attempt),
            lease,
            event_seq: leased.try_get("event_seq")?,
            order_key: event.try_get("order_key")?,
            payload,
            trace,
        };
        crate::store::inventory::conform_claimed(
            self.registry(),
            &mut claimed,
            event.try_get("repair_version")?,
            event.try_get("repair_digest")?,
        )?;
        Ok(claimed)
    }

    /// A claim held by the caller's transaction ([`crate::Hold::Transaction`]), for
    /// [`crate::Store::claim`]: the due deliveries of `consumer` (one that does not order per
    /// key) whose `event_seq` is above `after_seq` (0: all of them) and at most `until_seq`,
    /// oldest first, otherwise
    /// untouched (`CLAIM_HELD`: a no-op update that takes the write lock, so nobody else
    /// claims, recovers or renews them until `transaction` ends). Nothing is committed by the
    /// claim: if the transaction rolls back, the deliveries are simply due again, with no
    /// attempt counted. The caller runs the handlers on `transaction`, then acks
    /// ([`SqliteStore::held_acks`]) and commits.
    ///
    /// The leases returned are [held](Lease::is_held): their `token` and `attempt` are the
    /// values the ack writes.
    pub(super) async fn claim_held(
        &self,
        transaction: &mut SqliteConnection,
        consumer: &str,
        owner: &str,
        batch: u32,
        after_seq: i64,
        until_seq: i64,
    ) -> Result<Vec<Claimed>, DispatchError> {
        let now = epoch_now();
        let held = sqlx::query(sql::CLAIM_HELD)
            .bind(consumer)
            .bind(now)
            .bind(after_seq)
            .bind(i64::from(batch.max(1)))
            .bind(self.tenant())
            .bind(until_seq)
            .fetch_all(&mut *transaction)
            .await?;
        let mut claimed = self
            .with_events(transaction, &held, consumer, owner, now)
            .await?;
        for claimed in &mut claimed {
            claimed.lease = claimed.lease.clone().held();
        }
        Ok(claimed)
    }

    /// Acks held deliveries ([`SqliteStore::claim_held`]) of one consumer in the transaction
    /// that claimed them, each with its `acked` attempt row (the held attempt number, token
    /// and owner), answering which deliveries were acked (by event id). A lease not held by
    /// this transaction's claim is refused (counted as stale) and skipped.
    pub(super) async fn held_acks(
        &self,
        transaction: &mut SqliteConnection,
        leases: &[&Lease],
    ) -> Result<Vec<Uuid>, DispatchError> {
        let Some(first) = leases.first() else {
            return Ok(Vec::new());
        };
        // Each held lease's owner and start, by event id (named twice: the first).
        let mut held: HashMap<String, &Lease> = HashMap::with_capacity(leases.len());
        let mut pairs = Vec::with_capacity(leases.len());
        for lease in leases
            .iter()
            .filter(|lease| lease.is_held() && lease.consumer == first.consumer)
        {
            let id = lease.event_id.to_string();
            pairs.push(serde_json::json!([id, lease.token]));
            held.entry(id).or_insert(lease);
        }
        let mut tx = begin_write(transaction).await?;
        let rows = sqlx::query(sql::ACK_HELD)
            .bind(serde_json::Value::from(pairs).to_string())
            .bind(&first.consumer)
            .bind(self.tenant())
            .fetch_all(&mut *tx)
            .await?;
        let mut acked: Vec<Uuid> = Vec::with_capacity(rows.len());
        let mut settled = Vec::with_capacity(rows.len());
        for row in &rows {
            let event_id: String = row.try_get("event_id")?;
            let Some(lease) = held.get(&event_id) else {
                continue;
            };
            acked.push(lease.event_id);
            settled.push((Settled::read_held(row, &lease.owner)?, lease.started_at));
        }
        write_attempts(&mut tx, &settled, "acked", None).await?;
        self.end_replays(&mut tx, &replayed(&settled), epoch_now())
            .await?;
        tx.commit().await?;
        for lease in leases {
            if !(lease.consumer == first.consumer && acked.contains(&lease.event_id)) {
                self.count_stale(lease.event_id, &lease.consumer, lease.token);
            }
        }
        Ok(acked)
    }

    /// Acks one lease on the caller's connection (the single-lease case of
    /// [`crate::Store::ack`]): deletes the delivery if still leased with the lease's token and
    /// writes its `acked` attempt row, together.
    ///
    /// # Errors
    /// [`DispatchError::StaleToken`] (counted) or [`DispatchError::Database`].
    pub(super) async fn ack_one(
        &self,
        connection: &mut SqliteConnection,
        lease: &Lease,
    ) -> Result<(), DispatchError> {
        let mut tx = begin_write(connection).await?;
        let row = sqlx::query(sql::ACK_FENCED)
            .bind(lease.event_id.to_string())
            .bind(&lease.consumer)
            .bind(lease.token)
            .bind(self.tenant())
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            return Err(self.stale(lease));
        };
        let settled = [(Settled::read(&row)?, lease.started_at)];
        write_attempts(&mut tx, &settled, "acked", None).await?;
        self.end_replays(&mut tx, &replayed(&settled), epoch_now())
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Acks many leases in one transaction on the caller's connection (see
    /// [`crate::Store::ack`]): each fenced on its own (owner and token); every refused one is
    /// counted as a stale token and returned in [`AckBatch::stale`].
    pub(super) async fn ack_many(
        &self,
        connection: &mut SqliteConnection,
        leases: &[&Lease],
    ) -> Result<AckBatch, DispatchError> {
        if leases.is_empty() {
            return Ok(AckBatch::default());
        }
        // When each lease's attempt started, by delivery (a delivery named twice: the first).
        let mut started: HashMap<(String, &str), f64> = HashMap::with_capacity(leases.len());
        let entries: Vec<serde_json::Value> = leases
            .iter()
            .map(|lease| {
                let id = lease.event_id.to_string();
                started
                    .entry((id.clone(), lease.consumer.as_str()))
                    .or_insert(lease.started_at);
                serde_json::json!([id, lease.consumer, lease.token, lease.owner])
            })
            .collect();
        let mut tx = begin_write(connection).await?;
        let rows = sqlx::query(sql::ACK_BATCH)
            .bind(serde_json::Value::from(entries).to_string())
            .bind(self.tenant())
            .fetch_all(&mut *tx)
            .await?;
        let mut settled = Vec::with_capacity(rows.len());
        let mut acked: HashSet<(Uuid, String)> = HashSet::with_capacity(rows.len());
        for row in &rows {
            let row = Settled::read(row)?;
            let began = started
                .get(&(row.event_id.clone(), row.consumer.as_str()))
                .copied()
                .unwrap_or_else(epoch_now);
            acked.insert((parse_uuid(&row.event_id)?, row.consumer.clone()));
            settled.push((row, began));
        }
        write_attempts(&mut tx, &settled, "acked", None).await?;
        self.end_replays(&mut tx, &replayed(&settled), epoch_now())
            .await?;
        tx.commit().await?;
        // As PostgreSQL's: an entry whose delivery was acked (by it or a duplicate of it) is
        // not stale.
        let mut outcome = AckBatch {
            acked: acked.len(),
            stale: Vec::new(),
        };
        for lease in leases {
            if !acked.contains(&(lease.event_id, lease.consumer.clone())) {
                self.count_stale(lease.event_id, &lease.consumer, lease.token);
                outcome
                    .stale
                    .push((lease.event_id, lease.consumer.clone(), lease.token));
            }
        }
        Ok(outcome)
    }

    /// Ends a failed attempt (see [`crate::Store::fail`]): back to pending due after the
    /// delay, dead or quarantined, with its attempt row (outcome `retry`, `dead` or
    /// `quarantined`, the error code).
    ///
    /// # Errors
    /// [`DispatchError::StaleToken`] or [`DispatchError::Database`].
    pub(super) async fn fail(
        &self,
        lease: &Lease,
        class: FailureClass,
        code: &str,
        decision: RetryDecision,
    ) -> Result<(), DispatchError> {
        let (status, outcome, delay) = match decision {
            RetryDecision::Retry(delay) => ("pending", "retry", delay),
            RetryDecision::Dead => ("dead", "dead", Duration::ZERO),
            RetryDecision::Quarantine => ("quarantined", "quarantined", Duration::ZERO),
        };
        tracing::debug!(
            event_id = %lease.event_id,
            consumer = %lease.consumer,
            attempt = lease.attempt,
            class = class.as_str(),
            code,
            outcome,
            "delivery attempt failed"
        );
        // A held lease is failed after its batch rolled back: the attempt is counted now.
        let statement = if lease.is_held() {
            sql::FAIL_HELD
        } else {
            sql::FAIL_FENCED
        };
        let mut tx = self.begin().await?;
        // The delay runs from the attempt's end, however long the write lock took.
        let now = epoch_now();
        let query = sqlx::query(statement)
            .bind(lease.event_id.to_string())
            .bind(&lease.consumer)
            .bind(lease.token)
            .bind(status)
            .bind(now + delay.as_secs_f64())
            .bind(code)
            .bind(now);
        // `?8` is only FAIL_HELD's; FAIL_FENCED leaves it unread.
        let query = query.bind(&lease.owner).bind(self.tenant());
        let row = query.fetch_optional(&mut *tx).await?;
        let Some(row) = row else {
            tx.rollback().await?;
            return Err(self.stale(lease));
        };
        let settled = [(Settled::read(&row)?, lease.started_at)];
        write_attempts(&mut tx, &settled, outcome, Some(code)).await?;
        if let (RetryDecision::Dead, Some(descriptor)) = (decision, self.dead_letter_type()) {
            let dead = DeadLetter {
                event_id: lease.event_id,
                consumer: &lease.consumer,
                // A held lease's attempt is the one the fail statement counted; a leased one's
                // was counted by its claim.
                attempts: lease.attempt,
                failure_class: lifecycle::failure_class(class),
                error_code: code,
            };
            self.emit_dead_lettered(&mut tx, descriptor, dead, now)
                .await?;
        }
        if !matches!(decision, RetryDecision::Retry(_)) {
            self.end_replays(&mut tx, &replayed(&settled), now).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Extends leases on `connection` (see [`crate::Store::renew`]), answering which were
    /// renewed (by event id; the leases are of one consumer). A lease not in the answer is
    /// lost: counted as a stale token.
    pub(super) async fn renewed(
        &self,
        connection: &mut SqliteConnection,
        leases: &[&Lease],
        lease: Duration,
    ) -> Result<Vec<Uuid>, DispatchError> {
        let Some(first) = leases.first() else {
            return Ok(Vec::new());
        };
        let pairs = serde_json::Value::from(
            leases
                .iter()
                .map(|l| serde_json::json!([l.event_id.to_string(), l.token]))
                .collect::<Vec<_>>(),
        )
        .to_string();
        let mut tx = begin_write(connection).await?;
        let rows: Vec<String> = sqlx::query_scalar(sql::RENEW_FENCED)
            .bind(pairs)
            .bind(&first.consumer)
            .bind(epoch_now() + lease.as_secs_f64())
            .bind(self.tenant())
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        let renewed: Vec<Uuid> = rows
            .iter()
            .map(|id| parse_uuid(id))
            .collect::<Result<_, _>>()?;
        if renewed.len() < leases.len() {
            for lost in leases.iter().filter(|l| !renewed.contains(&l.event_id)) {
                let _ = self.stale(lost);
            }
        }
        Ok(renewed)
    }

    /// Fences the lease in the caller's transaction (see [`crate::Store::lock_lease`]): a
    /// no-op update of the delivery if its token is current, which takes the database's write
    /// lock until the transaction ends, so no recovery, claim or other fenced write moves the
    /// lease meanwhile (and no other writer runs: keep the transaction short).
    ///
    /// # Errors
    /// [`DispatchError::StaleToken`] or [`DispatchError::Database`].
    pub(super) async fn lock_lease(
        &self,
        connection: &mut SqliteConnection,
        lease: &Lease,
    ) -> Result<(), DispatchError> {
        match self.fence(connection, lease).await? {
            Some(_) => Ok(()),
            None => Err(self.stale(lease)),
        }
    }

    /// The lease's delivery generation if its token is current ([`sql::FENCE_LEASE`]; for a
    /// [held](Lease::is_held) lease, [`sql::FENCE_HELD`]).
    async fn fence(
        &self,
        connection: &mut SqliteConnection,
        lease: &Lease,
    ) -> Result<Option<i64>, sqlx::Error> {
        let statement = if lease.is_held() {
            sql::FENCE_HELD
        } else {
            sql::FENCE_LEASE
        };
        sqlx::query_scalar(statement)
            .bind(lease.event_id.to_string())
            .bind(&lease.consumer)
            .bind(lease.token)
            .bind(self.tenant())
            .fetch_optional(connection)
            .await
    }

    /// Releases every lease of `owner` (see [`crate::Store::release`]).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub(super) async fn release(&self, owner: &str) -> Result<u64, DispatchError> {
        let mut tx = self.begin().await?;
        let released = sqlx::query(sql::RELEASE_LEASES)
            .bind(owner)
            .bind(epoch_now())
            .bind(self.tenant())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(released)
    }

    /// Recovers up to `limit` expired leases (see [`crate::Store::recover_expired`]): back to
    /// pending, due now, attempt kept, with an attempt row `lease_expired` (started at the
    /// claim); or `dead` (outcome `dead`, error code `lease_expired`) once the attempts reached
    /// the consumer's retry policy's `max_attempts`. A caller's transaction that fenced a lease
    /// holds the write lock, so recovery waits for it rather than skipping its row.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub(super) async fn recover_expired(&self, limit: u32) -> Result<u64, DispatchError> {
        let mut tx = self.begin().await?;
        let now = epoch_now();
        let expired = sqlx::query(sql::EXPIRED_LEASES)
            .bind(now)
            .bind(i64::from(limit.max(1)))
            .bind(self.tenant())
            .fetch_all(&mut *tx)
            .await?;
        let mut recovered = 0_u64;
        let mut dead = 0_u64;
        for row in &expired {
            let settled = Settled::read(row)?;
            let limit = self
                .inner
                .attempt_limits
                .get(settled.consumer.as_str())
                .copied();
            let exhausted = limit.is_some_and(|limit| settled.attempt >= i64::from(limit));
            let status = if exhausted { "dead" } else { "pending" };
            let updated = sqlx::query(sql::RECOVER_LEASE)
                .bind(row.try_get::<i64, _>("rowid")?)
                .bind(status)
                .bind(now)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if updated == 0 {
                continue;
            }
            // Started at the claim: the delivery's last update (renewals move only the lease
            // end).
            let started: f64 = row.try_get("updated_at")?;
            let outcome = if exhausted { "dead" } else { "lease_expired" };
            let settled = [(settled, started)];
            write_attempts(&mut tx, &settled, outcome, Some("lease_expired")).await?;
            recovered += 1;
            if !exhausted {
                continue;
            }
            dead += 1;
            let (delivery, _) = &settled[0];
            if let Some(descriptor) = self.dead_letter_type() {
                let dead = DeadLetter {
                    event_id: parse_uuid(&delivery.event_id)?,
                    consumer: &delivery.consumer,
                    attempts: u32::try_from(delivery.attempt).unwrap_or(1),
                    // The handler never answered: its attempts ended like transient failures.
                    failure_class: "transient",
                    error_code: "lease_expired",
                };
                self.emit_dead_lettered(&mut tx, descriptor, dead, now)
                    .await?;
            }
            self.end_replays(&mut tx, &replayed(&settled), now).await?;
        }
        tx.commit().await?;
        if dead > 0 {
            tracing::warn!(
                dead,
                "expired leases dead-lettered: their attempts reached the retry policy's maximum"
            );
        }
        Ok(recovered)
    }

    /// Records an effect once, fenced (see [`crate::Store::record_effect`]), in the caller's
    /// transaction: the fence takes the write lock ([`SqliteStore::lock_lease`]), then the
    /// effect row is inserted unless the consumer recorded the key before. For a
    /// [shadow](Lease::is_shadow) lease nothing is written: the effect is added to the lease's
    /// intents, and the answer is whether a live run would record it for the first time.
    ///
    /// # Errors
    /// [`DispatchError::StaleToken`] or [`DispatchError::Database`].
    pub(super) async fn record_effect(
        &self,
        connection: &mut SqliteConnection,
        lease: &Lease,
        effect_key: &str,
        outcome_digest: &str,
    ) -> Result<bool, DispatchError> {
        let namespace = self
            .registry()
            .class_of(&lease.consumer)
            .map(|class| class.idempotency_namespace);
        if let Some(log) = lease.shadow_log() {
            let recorded: bool = sqlx::query_scalar(sql::EFFECT_RECORDED)
                .bind(&lease.consumer)
                .bind(effect_key)
                .bind(lease.event_id.to_string())
                .bind(namespace)
                .fetch_one(connection)
                .await?;
            log.push(Intent {
                effect_key: effect_key.to_owned(),
                outcome_digest: outcome_digest.to_owned(),
            });
            return Ok(!recorded);
        }
        let mut tx = begin_write(connection).await?;
        if self.fence(&mut tx, lease).await?.is_none() {
            tx.rollback().await?;
            return Err(self.stale(lease));
        }
        let inserted = sqlx::query(sql::RECORD_EFFECT)
            .bind(&lease.consumer)
            .bind(effect_key)
            .bind(lease.event_id.to_string())
            .bind(outcome_digest)
            .bind(lease.token)
            .bind(epoch_now())
            .bind(namespace)
            .fetch_optional(&mut *tx)
            .await?
            .is_some();
        tx.commit().await?;
        Ok(inserted)
    }

    /// Records what a shadow-mode handler meant to do (its lease's intents), fenced like an
    /// effect write, on `connection`. One row per delivery generation.
    ///
    /// # Errors
    /// [`DispatchError::StaleToken`] or [`DispatchError::Database`].
    pub(super) async fn record_reconciliation(
        &self,
        connection: &mut SqliteConnection,
        lease: &Lease,
    ) -> Result<(), DispatchError> {
        let intents: Vec<Intent> = lease
            .shadow_log()
            .map(|log| log.intents())
            .unwrap_or_default();
        let intended = serde_json::to_string(&intents).unwrap_or_else(|_| "[]".to_owned());
        let mut tx = begin_write(connection).await?;
        let Some(generation) = self.fence(&mut tx, lease).await? else {
            tx.rollback().await?;
            return Err(self.stale(lease));
        };
        sqlx::query(sql::RECORD_RECONCILIATION)
            .bind(&lease.consumer)
            .bind(lease.event_id.to_string())
            .bind(generation)
            .bind(lease.token)
            .bind(intended)
            .bind(epoch_now())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Writes the heartbeat of every worker, with where its settings came from.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub(crate) async fn heartbeat(&self, workers: &[Heartbeat]) -> Result<(), DispatchError> {
        let now = epoch_now();
        let mut tx = self.begin().await?;
        for beat in workers {
            let overrides: Vec<&str> = beat
                .overrides
                .split(',')
                .filter(|name| !name.is_empty())
                .collect();
            sqlx::query(sql::HEARTBEAT)
                .bind(&beat.owner)
                .bind(&beat.consumer)
                .bind(now)
                .bind(self.inner.policy_source.as_str())
                .bind(serde_json::Value::from(overrides).to_string())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Forgets the heartbeats of `owners` (workers that stopped, not silent ones).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub(crate) async fn forget_heartbeats(&self, owners: &[String]) -> Result<(), DispatchError> {
        if owners.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin().await?;
        sqlx::query(sql::FORGET_HEARTBEATS)
            .bind(serde_json::Value::from(owners.to_vec()).to_string())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}
