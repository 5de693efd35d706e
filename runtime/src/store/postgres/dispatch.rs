//! The PostgreSQL store's lease operations: claim, fenced ack / fail / renew, release,
//! lease-expiry recovery and the idempotent effect row. Statements live in [`super::sql`];
//! docs/runtime.md ("Dispatch") explains the claim and the fencing.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{AssertSqlSafe, Connection, Row};
use uuid::Uuid;

use super::{PgStore, sql};
use crate::handler::{Delivery, FailureClass};
use crate::registry::ConsumerMode;
use crate::retry::RetryDecision;
use crate::store::lifecycle::{self, DeadLetter};
use crate::store::{
    AckBatch, Claimed, ClaimedEvents, DispatchError, Heartbeat, Intent, Lease, Unclaimed,
    not_claimed, unclaimed_state,
};
use crate::trace::TraceContext;

/// Milliseconds of a duration as a bind parameter (`int8`).
fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

impl PgStore {
    /// Fenced operations refused so far because their token was stale (acks, fails, renewals,
    /// effect writes, transactional fences). Monotonic for the life of the store.
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
        // Counted in the database too, so `evc status` adds up every process's refusals. On
        // its own task: the refusal is the caller's answer, and the count must not hold it
        // up (nor wait for a connection a caller's transaction holds).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let pool = self.inner.pool.clone();
            let consumer = consumer.to_owned();
            runtime.spawn(async move {
                if let Err(error) = sqlx::query(sql::COUNT_STALE)
                    .bind(&consumer)
                    .bind(1_i64)
                    .execute(&pool)
                    .await
                {
                    tracing::debug!(%error, consumer, "stale-token count not stored");
                }
            });
        }
    }

    /// Whether `consumer`'s claims run in shadow mode: the operator's override (the claim
    /// reads it, `mode_override`), else the mode its contract declares.
    fn shadow_mode(&self, consumer: &str, mode_override: Option<&str>) -> bool {
        match mode_override {
            Some(mode) => mode == ConsumerMode::Shadow.as_str(),
            None => self
                .registry()
                .consumer(consumer)
                .is_some_and(|descriptor| descriptor.mode == ConsumerMode::Shadow),
        }
    }

    /// A claimed row, shadowed when its consumer runs in shadow mode.
    fn claimed(&self, row: &PgRow, owner: &str) -> Result<Claimed, DispatchError> {
        let mut claimed = claimed(row, owner)?;
        let address: String = row.try_get("address")?;
        claimed.lease = claimed.lease.at_address(address);
        crate::store::inventory::conform_claimed(
            self.registry(),
            &mut claimed,
            row.try_get("repair_version")?,
            row.try_get("repair_digest")?,
        )?;
        let mode_override: Option<String> = row.try_get("mode_override")?;
        if self.shadow_mode(&claimed.lease.consumer, mode_override.as_deref()) {
            claimed.lease = claimed.lease.shadowed();
        }
        Ok(claimed)
    }

    /// Records what a shadow-mode handler meant to do (its lease's intents), fenced like an
    /// effect write: on `connection` (the handler's transaction for the transactional kind,
    /// after its writes were rolled back). One row per delivery generation.
    ///
    /// # Errors
    /// [`DispatchError::StaleToken`] or [`DispatchError::Database`].
    pub(super) async fn record_reconciliation(
        &self,
        connection: &mut PgConnection,
        lease: &Lease,
    ) -> Result<(), DispatchError> {
        let intents: Vec<Intent> = lease
            .shadow_log()
            .map(|log| log.intents())
            .unwrap_or_default();
        let intended = serde_json::to_string(&intents).unwrap_or_else(|_| "[]".to_owned());
        let leased: i64 = sqlx::query_scalar(sql::RECORD_RECONCILIATION)
            .bind(&lease.consumer)
            .bind(lease.event_id)
            .bind(lease.token)
            .bind(intended)
            .bind(lease.is_held())
            .fetch_one(connection)
            .await?;
        if leased == 0 {
            return Err(self.stale(lease));
        }
        Ok(())
    }

    /// A leased claim ([`crate::Hold::Lease`]) on the caller's connection (outside a
    /// transaction: the claim commits its leases itself), for [`crate::Store::claim`].
    /// Only deliveries whose `event_seq` is above `after_seq` (0: all of them) and at most
    /// `until_seq` are considered: the dispatcher's claim cursor skips the index entries of
    /// deliveries it knows were claimed, and keeps each claim to its own stretch
    /// (docs/runtime.md, "Claim cursor"). A per-key claim ignores both: it must see every head
    /// of a key.
    ///
    /// Without per-key ordering: one statement ([`sql::CLAIM_BATCH`]). With it: one transaction
    /// of two statements — candidates that head their key and whose key's transaction-scoped
    /// advisory lock this transaction obtains ([`sql::CLAIM_KEY_HEADS_LOCK`]), then the lease,
    /// re-checking the head predicate on a snapshot taken after the key locks were granted
    /// ([`sql::CLAIM_KEY_HEADS_LEASE`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn claim_leased(
        &self,
        connection: &mut PgConnection,
        consumer: &str,
        owner: &str,
        batch: u32,
        lease: Duration,
        per_key: bool,
        after_seq: i64,
        until_seq: i64,
    ) -> Result<Vec<Claimed>, DispatchError> {
        let rows = if per_key {
            let mut tx = connection.begin().await?;
            let heads = sql::with_batch(sql::CLAIM_KEY_HEADS_LOCK, batch);
            let candidates: Vec<(Uuid, i64)> = sqlx::query_as(AssertSqlSafe(heads))
                .bind(consumer)
                .fetch_all(&mut *tx)
                .await?;
            let seqs = candidates.iter().map(|&(_, seq)| seq);
            let (Some(first), Some(last)) = (seqs.clone().min(), seqs.max()) else {
                tx.rollback().await?;
                return Ok(Vec::new());
            };
            let ids: Vec<Uuid> = candidates.iter().map(|&(id, _)| id).collect();
            let rows = sqlx::query(sql::CLAIM_KEY_HEADS_LEASE)
                .bind(consumer)
                .bind(&ids)
                .bind(owner)
                .bind(millis(lease))
                .bind(first)
                .bind(last)
                .fetch_all(&mut *tx)
                .await?;
            tx.commit().await?;
            rows
        } else {
            sqlx::query(AssertSqlSafe(sql::with_batch(sql::CLAIM_BATCH, batch)))
                .bind(consumer)
                .bind(owner)
                .bind(millis(lease))
                .bind(after_seq)
                .bind(until_seq)
                .fetch_all(&mut *connection)
                .await?
        };
        rows.iter().map(|row| self.claimed(row, owner)).collect()
    }

    /// A claim by event id for [`crate::Store::claim_events`]: one statement leases what it
    /// can ([`sql::CLAIM_EVENTS`]), a second says where the rest stand
    /// ([`sql::UNCLAIMED_EVENTS`]), only when some were left.
    pub(super) async fn claim_by_id(
        &self,
        connection: &mut PgConnection,
        consumer: &str,
        owner: &str,
        event_ids: &[Uuid],
        lease: Duration,
    ) -> Result<ClaimedEvents, DispatchError> {
        if event_ids.is_empty() {
            return Ok(ClaimedEvents::default());
        }
        let rows = sqlx::query(sql::CLAIM_EVENTS)
            .bind(consumer)
            .bind(event_ids)
            .bind(owner)
            .bind(millis(lease))
            .fetch_all(&mut *connection)
            .await?;
        let claimed = rows
            .iter()
            .map(|row| self.claimed(row, owner))
            .collect::<Result<Vec<_>, _>>()?;
        let left = not_claimed(event_ids, &claimed);
        let mut unclaimed = Vec::with_capacity(left.len());
        if !left.is_empty() {
            let rows: Vec<(Uuid, Option<bool>, Option<bool>, f64)> =
                sqlx::query_as(sql::UNCLAIMED_EVENTS)
                    .bind(consumer)
                    .bind(&left)
                    .fetch_all(&mut *connection)
                    .await?;
            for id in left {
                let state = rows.iter().find(|row| row.0 == id).map_or(
                    Unclaimed::Settled,
                    |&(_, open, ended, wait)| {
                        unclaimed_state(open.unwrap_or(false), ended.unwrap_or(false), wait)
                    },
                );
                unclaimed.push((id, state));
            }
        }
        Ok(ClaimedEvents { claimed, unclaimed })
    }

    /// A claim held by the caller's transaction ([`crate::Hold::Transaction`]), for
    /// [`crate::Store::claim`]: the due deliveries of `consumer` (one that does not order per
    /// key) whose `event_seq` is above `after_seq` (0: all of them) and at most `until_seq`,
    /// oldest first, row-locked
    /// until `transaction` ends and otherwise untouched ([`sql::CLAIM_HELD`]). Nothing is
    /// committed by the claim: if the transaction rolls back or its connection dies, the
    /// deliveries are simply due again, with no attempt counted. The caller runs the handlers
    /// on `transaction`, then acks ([`PgStore::held_acks`]) and commits: the handlers' writes,
    /// the acks and the attempt rows commit together.
    ///
    /// The leases returned are [held](Lease::is_held): their `token` and `attempt` are the
    /// values the ack writes.
    pub(super) async fn claim_held(
        &self,
        transaction: &mut PgConnection,
        consumer: &str,
        owner: &str,
        batch: u32,
        after_seq: i64,
        until_seq: i64,
    ) -> Result<Vec<Claimed>, DispatchError> {
        let rows = sqlx::query(AssertSqlSafe(sql::with_batch(sql::CLAIM_HELD, batch)))
            .bind(consumer)
            .bind(after_seq)
            .bind(until_seq)
            .fetch_all(&mut *transaction)
            .await?;
        rows.iter()
            .map(|row| {
                let mut claimed = self.claimed(row, owner)?;
                claimed.lease = claimed.lease.held();
                Ok(claimed)
            })
            .collect()
    }

    /// Acks held deliveries ([`PgStore::claim_held`]) of one consumer in the transaction that
    /// claimed them, with their `acked` attempts, in one statement ([`sql::ACK_HELD`]),
    /// answering which deliveries were acked (by event id). A lease that is not held by this
    /// transaction's claim is refused (counted as stale) and skipped. The ends of the replays
    /// the acks end are appended in the same transaction.
    pub(super) async fn held_acks(
        &self,
        transaction: &mut PgConnection,
        leases: &[&Lease],
    ) -> Result<Vec<Uuid>, DispatchError> {
        let Some(first) = leases.first() else {
            return Ok(Vec::new());
        };
        let held: Vec<&&Lease> = leases
            .iter()
            .filter(|lease| lease.is_held() && lease.consumer == first.consumer)
            .collect();
        let ids: Vec<Uuid> = held.iter().map(|lease| lease.event_id).collect();
        let tokens: Vec<i64> = held.iter().map(|lease| lease.token).collect();
        let started: Vec<f64> = held.iter().map(|lease| lease.started_at).collect();
        // Every held lease of this store has one (`claim_held`); one without is acked by none.
        let addresses: Vec<Option<&str>> = held.iter().map(|lease| lease.address()).collect();
        debug_assert!(
            addresses.iter().all(Option::is_some),
            "a held lease without address"
        );
        let rows = sqlx::query(sql::ACK_HELD)
            .bind(&ids)
            .bind(&tokens)
            .bind(&first.consumer)
            .bind(&started)
            .bind(&first.owner)
            .bind(&addresses)
            .fetch_all(&mut *transaction)
            .await?;
        let mut acked: Vec<Uuid> = Vec::with_capacity(rows.len());
        let mut replays: Vec<i64> = Vec::new();
        for row in &rows {
            acked.push(row.try_get("event_id")?);
            replays.extend(row.try_get::<Option<i64>, _>("replay_id")?);
        }
        // Held deliveries commit with the claiming transaction: so does their replay's end.
        self.end_replays(transaction, &replays).await?;
        // A set: a batch of 500 would otherwise compare 250,000 pairs.
        let acked_ids: HashSet<Uuid> = acked.iter().copied().collect();
        for lease in leases {
            if !(lease.consumer == first.consumer && acked_ids.contains(&lease.event_id)) {
                self.count_stale(lease.event_id, &lease.consumer, lease.token);
            }
        }
        Ok(acked)
    }

    /// Acks one lease on the caller's connection (the single-lease case of
    /// [`crate::Store::ack`]). The ack of a replayed delivery (a later
    /// [generation](Lease::generation)) that ends its replay appends the replay's end in the
    /// same transaction (a savepoint of the caller's, or a transaction of its own on a
    /// connection outside one), when the registry registers it (docs/runtime.md, "Lifecycle
    /// events").
    ///
    /// # Errors
    /// [`DispatchError::StaleToken`] (counted) or [`DispatchError::Database`].
    pub(super) async fn ack_one(
        &self,
        connection: &mut PgConnection,
        lease: &Lease,
    ) -> Result<(), DispatchError> {
        let ack = sqlx::query(sql::ACK_FENCED)
            .bind(lease.event_id)
            .bind(&lease.consumer)
            .bind(lease.token)
            .bind(lease.started_at);
        if lease.generation() == 0 || !self.tracks_replays() {
            return match ack.fetch_optional(connection).await? {
                Some(_) => Ok(()),
                None => Err(self.stale(lease)),
            };
        }
        // The replay's end commits with the ack or not at all.
        let mut transaction = connection.begin().await?;
        let Some(row) = ack.fetch_optional(&mut *transaction).await? else {
            transaction.rollback().await?;
            return Err(self.stale(lease));
        };
        let replay_id: Option<i64> = row.try_get("replay_id")?;
        self.end_replays(&mut transaction, replay_id.as_slice())
            .await?;
        transaction.commit().await?;
        Ok(())
    }

    /// Acks many leases in one statement on the caller's connection (see
    /// [`crate::Store::ack`]): each lease is fenced on its own (owner and token), every acked
    /// one gets its `acked` attempt (started when its handler started), and every refused
    /// one is counted as a stale token and returned in [`AckBatch::stale`]. With a replayed
    /// delivery among the leases, the acks and the ends of the replays they end commit
    /// together, as in [`PgStore::ack_one`].
    pub(super) async fn ack_many(
        &self,
        connection: &mut PgConnection,
        leases: &[&Lease],
    ) -> Result<AckBatch, DispatchError> {
        if leases.is_empty() {
            return Ok(AckBatch::default());
        }
        if !self.tracks_replays() || leases.iter().all(|lease| lease.generation() == 0) {
            return Ok(self.ack_batch_statement(connection, leases).await?.0);
        }
        let mut transaction = connection.begin().await?;
        let (outcome, replays) = self.ack_batch_statement(&mut transaction, leases).await?;
        self.end_replays(&mut transaction, &replays).await?;
        transaction.commit().await?;
        Ok(outcome)
    }

    /// The statement of [`PgStore::ack_many`] ([`sql::ACK_BATCH_FENCED`]): what it acked, and
    /// the replays that made the acked deliveries. Each lease is looked for at the address its
    /// claim returned, and by key when it is not there (renewed since) or has none.
    async fn ack_batch_statement(
        &self,
        connection: &mut PgConnection,
        leases: &[&Lease],
    ) -> Result<(AckBatch, Vec<i64>), DispatchError> {
        let ids: Vec<Uuid> = leases.iter().map(|lease| lease.event_id).collect();
        let consumers: Vec<&str> = leases.iter().map(|lease| lease.consumer.as_str()).collect();
        let tokens: Vec<i64> = leases.iter().map(|lease| lease.token).collect();
        let owners: Vec<&str> = leases.iter().map(|lease| lease.owner.as_str()).collect();
        let started: Vec<f64> = leases.iter().map(|lease| lease.started_at).collect();
        let addresses: Vec<Option<&str>> = leases.iter().map(|lease| lease.address()).collect();
        let rows = sqlx::query(sql::ACK_BATCH_FENCED)
            .bind(&ids)
            .bind(&consumers)
            .bind(&tokens)
            .bind(&owners)
            .bind(&started)
            .bind(&addresses)
            .fetch_all(&mut *connection)
            .await?;
        let mut acked = HashSet::with_capacity(rows.len());
        let mut replays: Vec<i64> = Vec::new();
        for row in &rows {
            let event_id: Uuid = row.try_get("event_id")?;
            let consumer: String = row.try_get("consumer")?;
            acked.insert((event_id, consumer));
            replays.extend(row.try_get::<Option<i64>, _>("replay_id")?);
        }
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
        Ok((outcome, replays))
    }

    /// Ends a failed attempt (see [`crate::Store::fail`]). A [held](Lease::is_held) lease is
    /// failed after its batch rolled back: the attempt is counted then ([`sql::FAIL_HELD`]),
    /// unless another claimer took the delivery meanwhile (then: stale). A dead-lettering
    /// appends `job.dead_lettered`, and a replayed delivery that settles the end of the replay
    /// it ends, in the same transaction when the registry registers them (docs/runtime.md,
    /// "Lifecycle events").
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
        let statement = if lease.is_held() {
            sql::FAIL_HELD
        } else {
            sql::FAIL_FENCED
        };
        let query = sqlx::query(statement)
            .bind(lease.event_id)
            .bind(&lease.consumer)
            .bind(lease.token)
            .bind(status)
            .bind(millis(delay))
            .bind(code)
            .bind(lease.started_at)
            .bind(outcome);
        let query = if lease.is_held() {
            query.bind(&lease.owner)
        } else {
            query
        };
        let dead_lettered = match decision {
            RetryDecision::Dead => self.dead_letter_type(),
            _ => None,
        };
        // A replayed delivery that settles (dead or quarantined) may end its replay.
        let ends_replay = !matches!(decision, RetryDecision::Retry(_))
            && lease.generation() > 0
            && self.tracks_replays();
        if dead_lettered.is_none() && !ends_replay {
            let row = query.fetch_optional(&self.inner.pool).await?;
            return match row {
                Some(_) => Ok(()),
                None => Err(self.stale(lease)),
            };
        }
        // The lifecycle events commit with the settle or not at all.
        let mut transaction = self.inner.pool.begin().await?;
        let Some(row) = query.fetch_optional(&mut *transaction).await? else {
            transaction.rollback().await?;
            return Err(self.stale(lease));
        };
        if let Some(descriptor) = dead_lettered {
            let dead = DeadLetter {
                event_id: lease.event_id,
                consumer: &lease.consumer,
                // A held lease's attempt is the one the fail statement counted; a leased one's
                // was counted by its claim.
                attempts: lease.attempt,
                failure_class: lifecycle::failure_class(class),
                error_code: code,
            };
            self.emit_dead_lettered(&mut transaction, descriptor, dead)
                .await?;
        }
        if ends_replay {
            let replay_id: Option<i64> = row.try_get("replay_id")?;
            self.end_replays(&mut transaction, replay_id.as_slice())
                .await?;
        }
        transaction.commit().await?;
        Ok(())
    }

    /// Extends leases on `connection` (see [`crate::Store::renew`]), answering which were
    /// renewed (by event id; the leases are of one consumer). A lease not in the answer is
    /// lost: counted as a stale token.
    pub(super) async fn renewed(
        &self,
        connection: &mut PgConnection,
        leases: &[&Lease],
        lease: Duration,
    ) -> Result<Vec<Uuid>, DispatchError> {
        let Some(first) = leases.first() else {
            return Ok(Vec::new());
        };
        let ids: Vec<Uuid> = leases.iter().map(|l| l.event_id).collect();
        let tokens: Vec<i64> = leases.iter().map(|l| l.token).collect();
        let renewed: Vec<Uuid> = sqlx::query_scalar(sql::RENEW_FENCED)
            .bind(&ids)
            .bind(&tokens)
            .bind(&first.consumer)
            .bind(millis(lease))
            .fetch_all(connection)
            .await?;
        if renewed.len() < leases.len() {
            for lost in leases.iter().filter(|l| !renewed.contains(&l.event_id)) {
                let _ = self.stale(lost);
            }
        }
        Ok(renewed)
    }

    /// Locks the lease's delivery in the caller's transaction if its token is current (see
    /// [`crate::Store::lock_lease`]).
    ///
    /// # Errors
    /// [`DispatchError::StaleToken`] or [`DispatchError::Database`].
    pub(super) async fn lock_lease(
        &self,
        connection: &mut PgConnection,
        lease: &Lease,
    ) -> Result<(), DispatchError> {
        let held = sqlx::query(sql::LOCK_LEASE)
            .bind(lease.event_id)
            .bind(&lease.consumer)
            .bind(lease.token)
            .fetch_optional(connection)
            .await?;
        match held {
            Some(_) => Ok(()),
            None => Err(self.stale(lease)),
        }
    }

    /// Releases every lease of `owner` (see [`crate::Store::release`]).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub(super) async fn release(&self, owner: &str) -> Result<u64, DispatchError> {
        let released: i64 = sqlx::query_scalar(sql::RELEASE_LEASES)
            .bind(owner)
            .fetch_one(&self.inner.pool)
            .await?;
        Ok(u64::try_from(released).unwrap_or(0))
    }

    /// Recovers up to `limit` expired leases (see [`crate::Store::recover_expired`]); each one
    /// dead-lettered past its attempt limit appends `job.dead_lettered`, and the replay it
    /// ends its end, in the same transaction when the registry registers them
    /// (docs/runtime.md, "Lifecycle events").
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub(super) async fn recover_expired(&self, limit: u32) -> Result<u64, DispatchError> {
        let (consumers, limits) = &self.inner.attempt_limits;
        let recover = || {
            sqlx::query(sql::RECOVER_EXPIRED)
                .bind(i64::from(limit.max(1)))
                .bind(consumers)
                .bind(limits)
        };
        let dead_lettered = self.dead_letter_type();
        if dead_lettered.is_none() && !self.tracks_replays() {
            // No lifecycle event to emit: one statement, committed on its own.
            let row = recover().fetch_one(&self.inner.pool).await?;
            return recovered(&row);
        }
        // One transaction: the lifecycle events commit with the dead-lettering or not at all.
        let mut transaction = self.inner.pool.begin().await?;
        let row = recover().fetch_one(&mut *transaction).await?;
        if let Some(descriptor) = dead_lettered {
            let events: Vec<Uuid> = row.try_get("dead_events")?;
            let consumers: Vec<String> = row.try_get("dead_consumers")?;
            let attempts: Vec<i32> = row.try_get("dead_attempts")?;
            for ((event_id, consumer), attempts) in events.iter().zip(&consumers).zip(attempts) {
                let dead = DeadLetter {
                    event_id: *event_id,
                    consumer,
                    attempts: u32::try_from(attempts).unwrap_or(1),
                    // The handler never answered: its attempts ended like transient failures.
                    failure_class: "transient",
                    error_code: "lease_expired",
                };
                self.emit_dead_lettered(&mut transaction, descriptor, dead)
                    .await?;
            }
        }
        let replays: Vec<i64> = row.try_get("dead_replays")?;
        self.end_replays(&mut transaction, &replays).await?;
        transaction.commit().await?;
        recovered(&row)
    }

    /// Records an effect once, fenced (see [`crate::Store::record_effect`]). For a
    /// [held](Lease::is_held) lease the fence is the claiming transaction's row lock: the
    /// delivery must still be pending with the token below the held one. For a
    /// [shadow](Lease::is_shadow) lease nothing is written: the effect is added to the lease's
    /// intents (the dispatcher stores them as the delivery's reconciliation row), and the
    /// answer is whether a live run would record it for the first time.
    ///
    /// # Errors
    /// [`DispatchError::StaleToken`] or [`DispatchError::Database`].
    pub(super) async fn record_effect(
        &self,
        connection: &mut PgConnection,
        lease: &Lease,
        effect_key: &str,
        outcome_digest: &str,
    ) -> Result<bool, DispatchError> {
        let namespace = self
            .registry()
            .class_of(&lease.consumer)
            .map(|class| class.idempotency_namespace);
        if let Some(log) = lease.shadow_log() {
            // Shadow mode: no effect row, only the intent; the answer is what a live run
            // would get.
            let query = match namespace {
                Some(namespace) => sqlx::query_scalar(sql::EFFECT_RECORDED_IN_NAMESPACE)
                    .bind(&lease.consumer)
                    .bind(effect_key)
                    .bind(lease.event_id)
                    .bind(namespace),
                None => sqlx::query_scalar(sql::EFFECT_RECORDED)
                    .bind(&lease.consumer)
                    .bind(effect_key)
                    .bind(lease.event_id),
            };
            let recorded: bool = query.fetch_one(connection).await?;
            log.push(Intent {
                effect_key: effect_key.to_owned(),
                outcome_digest: outcome_digest.to_owned(),
            });
            return Ok(!recorded);
        }
        // Without a namespace, the statements name no column of the twenty-second step.
        let statement = match (lease.is_held(), namespace.is_some()) {
            (false, false) => sql::RECORD_EFFECT,
            (true, false) => sql::RECORD_EFFECT_HELD,
            (false, true) => sql::RECORD_EFFECT_IN_NAMESPACE,
            (true, true) => sql::RECORD_EFFECT_HELD_IN_NAMESPACE,
        };
        let mut query = sqlx::query(statement)
            .bind(&lease.consumer)
            .bind(effect_key)
            .bind(lease.event_id)
            .bind(outcome_digest)
            .bind(lease.token);
        if let Some(namespace) = namespace {
            query = query.bind(namespace);
        }
        let row = query.fetch_one(connection).await?;
        let leased: i64 = row.try_get("leased")?;
        let inserted: i64 = row.try_get("inserted")?;
        if leased == 0 {
            return Err(self.stale(lease));
        }
        Ok(inserted > 0)
    }

    /// Writes the heartbeat of every worker, with where its settings came from (this store's
    /// payload policy, its dispatcher's overrides).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub(crate) async fn heartbeat(&self, workers: &[Heartbeat]) -> Result<(), DispatchError> {
        let owners: Vec<&str> = workers.iter().map(|beat| beat.owner.as_str()).collect();
        let consumers: Vec<&str> = workers.iter().map(|beat| beat.consumer.as_str()).collect();
        let overrides: Vec<&str> = workers.iter().map(|beat| beat.overrides.as_str()).collect();
        sqlx::query(sql::HEARTBEAT)
            .bind(&owners)
            .bind(&consumers)
            .bind(&overrides)
            .bind(self.inner.policy_source.as_str())
            .execute(&self.inner.pool)
            .await?;
        Ok(())
    }
}

/// A claimed row: the lease and the event.
fn claimed(row: &PgRow, owner: &str) -> Result<Claimed, DispatchError> {
    let event_id: Uuid = row.try_get("event_id")?;
    let consumer: String = row.try_get("consumer")?;
    let attempt: i32 = row.try_get("attempt")?;
    let attempt = u32::try_from(attempt).unwrap_or(0);
    let generation: i32 = row.try_get("generation")?;
    let token: i64 = row.try_get("fencing_token")?;
    let claimed_at: f64 = row.try_get("claimed_at")?;
    let event_type: String = row.try_get("event_type")?;
    let version: String = row.try_get("schema_version")?;
    let payload: String = row.try_get("payload")?;
    let payload = serde_json::from_str(&payload)
        .map_err(|source| DispatchError::Payload { event_id, source })?;
    let trace_id: Option<String> = row.try_get("trace_id")?;
    let span_id: Option<String> = row.try_get("parent_span_id")?;
    let flags: Option<String> = row.try_get("trace_flags")?;
    let trace = match (trace_id, span_id, flags) {
        (Some(trace_id), Some(span_id), Some(flags)) => u8::from_str_radix(&flags, 16)
            .ok()
            .and_then(|flags| TraceContext::new(trace_id, span_id, flags).ok()),
        _ => None,
    };
    Ok(Claimed {
        delivery: Delivery::new(
            event_id.to_string(),
            event_type,
            version,
            consumer.clone(),
            attempt,
        ),
        lease: Lease::new(event_id, consumer, owner, token, attempt, claimed_at)
            .of_generation(u32::try_from(generation).unwrap_or(0)),
        event_seq: row.try_get("event_seq")?,
        order_key: row.try_get("order_key")?,
        payload,
        trace,
    })
}

/// The recovered count of a [`sql::RECOVER_EXPIRED`] row; warns of the deliveries it
/// dead-lettered.
fn recovered(row: &PgRow) -> Result<u64, DispatchError> {
    let recovered: i64 = row.try_get("recovered")?;
    let dead: i64 = row.try_get("dead")?;
    if dead > 0 {
        tracing::warn!(
            dead,
            "expired leases dead-lettered: their attempts reached the retry policy's maximum"
        );
    }
    Ok(u64::try_from(recovered).unwrap_or(0))
}
