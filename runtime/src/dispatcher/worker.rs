//! A dispatcher worker: claims batches of one consumer, runs their handlers, settles every
//! attempt, renews leases while a handler runs and sleeps until woken when there is nothing to do.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use tokio::sync::{Notify, watch};
use tokio::time::{Instant, Interval, MissedTickBehavior};
use uuid::Uuid;

use super::ConsumerSetup;
use super::config::DispatcherConfig;
use super::context::HandlerContext;
use super::cursor::ClaimStart;
use super::stats::{Counters, add};
use crate::handler::{FailureClass, HandlerError};
use crate::registry::HandlerKind;
use crate::retry::RetryDecision;
use crate::store::{ClaimRequest, Claimed, Connection, DispatchError, Lease, Store};

/// How long a worker about to sleep waits for its consumer's doorbell: long enough for the
/// appends in flight to commit, short enough not to matter when another worker holds it.
const DOORBELL_WAIT: Duration = Duration::from_millis(50);

/// How soon a worker that asked for the doorbell and did not get it looks again.
const DOORBELL_RETRY: Duration = Duration::from_millis(100);

pub(super) struct Worker<S: Store> {
    pub(super) store: S,
    pub(super) config: Arc<DispatcherConfig>,
    pub(super) consumer: Arc<ConsumerSetup<S>>,
    pub(super) owner: String,
    pub(super) wake: Arc<Notify>,
    pub(super) shutdown: watch::Receiver<bool>,
    pub(super) counters: Arc<Counters>,
    pub(super) rng: fastrand::Rng,
    /// The pool connection a busy worker keeps for its claims, acks and transactions, batch
    /// after batch. An sqlx pool pings a connection when it hands it out (a round trip the
    /// worker waits for: a fifth more for a held batch's four) and again when it comes back.
    /// The worker gives it back when a claim finds nothing (idle workers hold no connection)
    /// and after an error or a failed batch.
    pub(super) connection: Option<PoolConnection<S::Database>>,
}

impl<S: Store> Worker<S> {
    pub(super) fn stopping(&self) -> bool {
        *self.shutdown.borrow()
    }

    pub(super) async fn run(mut self) {
        // The earliest moment a delivery this worker scheduled for retry becomes due.
        let mut next_due: Option<Instant> = None;
        while !self.stopping() {
            let wake = Arc::clone(&self.wake);
            let notified = wake.notified();
            tokio::pin!(notified);
            // Registered before the claim, so a notification during the claim is not lost.
            notified.as_mut().enable();
            if self.claim_and_run(&mut next_due).await {
                continue;
            }
            let now = Instant::now();
            let mut wait = self.config.poll_interval;
            if let Some(due) = next_due {
                if due <= now {
                    next_due = None;
                    continue;
                }
                wait = wait.min(due - now);
            }
            // About to sleep: ring-while-asleep. With the doorbell held, appends notify; the
            // claim after taking it sees every append that got in before.
            let (doorbell, asked) = self.take_doorbell().await;
            if doorbell.is_some() && self.claim_and_run(&mut next_due).await {
                self.give_back(doorbell).await;
                continue;
            }
            if asked && doorbell.is_none() {
                // The doorbell could not be had in time (appends kept it busy, or another
                // dispatcher holds it): nobody may be ringing for this worker, so it looks
                // again soon instead of after a whole poll interval.
                wait = wait.min(DOORBELL_RETRY);
            }
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep(wait) => {}
                changed = self.shutdown.changed() => {
                    if changed.is_err() {
                        self.give_back(doorbell).await;
                        break;
                    }
                }
            }
            self.give_back(doorbell).await;
            if next_due.is_some_and(|due| due <= Instant::now()) {
                next_due = None;
            }
        }
        self.connection = None;
        match self.store.release(&self.owner).await {
            Ok(released) => add(&self.counters.released, released),
            Err(error) => {
                tracing::warn!(owner = %self.owner, %error, "could not release leases; they expire");
            }
        }
    }

    /// One claim and its batch; `true` when it found work. Moves `next_due` earlier when the
    /// batch scheduled a retry.
    async fn claim_and_run(&mut self, next_due: &mut Option<Instant>) -> bool {
        let due = if self.holds_batches() {
            match self.run_held_batch().await {
                Ok((0, _)) => return false,
                Ok((_, due)) => due,
                Err(error) => {
                    tracing::warn!(consumer = %self.consumer.name, %error, "held batch failed");
                    return false;
                }
            }
        } else {
            match self.claim().await {
                Ok(batch) if !batch.is_empty() => {
                    add(&self.counters.claimed, batch.len() as u64);
                    let ran = self.run_batch(batch).await;
                    ran.into_iter().filter_map(|(_, ended)| ended.due()).min()
                }
                Ok(_) => return false,
                Err(error) => {
                    tracing::warn!(consumer = %self.consumer.name, %error, "claim failed");
                    return false;
                }
            }
        };
        if let Some(due) = due {
            *next_due = Some(next_due.map_or(due, |d| d.min(due)));
        }
        true
    }

    /// One leased claim of due deliveries and its batch (a [`super::DeliveryRunner`]'s
    /// sweep); returns how many it ran.
    pub(super) async fn sweep(&mut self) -> usize {
        match self.claim().await {
            Ok(batch) if !batch.is_empty() => {
                add(&self.counters.claimed, batch.len() as u64);
                self.run_batch(batch).await.len()
            }
            Ok(_) => 0,
            Err(error) => {
                tracing::warn!(consumer = %self.consumer.name, %error, "claim failed");
                0
            }
        }
    }

    /// The worker's kept connection ([`Worker::connection`]), or one from the pool.
    pub(super) async fn take_connection(
        &mut self,
    ) -> Result<PoolConnection<S::Database>, DispatchError> {
        match self.connection.take() {
            Some(connection) => Ok(connection),
            None => Ok(self.store.pool().acquire().await?),
        }
    }

    /// Whether this worker's claims use the consumer's claim cursor: not for a consumer that
    /// orders per key (its claim must see every key's head), nor when it is turned off.
    fn uses_cursor(&self) -> bool {
        self.config.claim_cursor && !self.consumer.per_key
    }

    /// Where this worker's next claim starts: after the consumer's claim cursor, or the head.
    /// Asked before the claim's transaction begins: it may wait for the sibling's claim that
    /// opens the cursor, which must not wait for this one's transaction (SQLite's writer
    /// lock), nor for its connection: a worker about to wait gives its kept one back.
    pub(super) async fn claim_start(&mut self) -> ClaimStart {
        if !self.uses_cursor() {
            return ClaimStart::HEAD;
        }
        if self.consumer.cursor.is_opening() {
            self.connection = None;
        }
        self.consumer.cursor.start().await
    }

    /// Claims a batch on `connection` from `start` ([`Worker::claim_start`]), held (in the
    /// transaction open on `connection`) or leased, and moves the cursor. A claim handed a
    /// stretch that held nothing runs once more from the same start without the stretch's
    /// end. A claim from the cursor that still finds nothing resets the cursor: the caller
    /// then claims once more from a new start ([`Worker::retries_from_head`]), so before a
    /// worker sleeps a claim from the head (its own, or the one that opened the cursor) has
    /// looked behind the cursor.
    pub(super) async fn claim_from_cursor(
        &self,
        connection: &mut Connection<S>,
        held: bool,
        start: ClaimStart,
    ) -> Result<Vec<Claimed>, DispatchError> {
        // Timed for the cursor: a slow head scan spaces out the next (`cursor.rs`).
        let began = std::time::Instant::now();
        let mut batch = self.claim_once(connection, held, start).await?;
        if start.is_head() && self.uses_cursor() {
            self.consumer.cursor.head_scanned(began.elapsed());
        }
        let mut from = start;
        if batch.is_empty() && start.is_bounded() {
            // A claim from the head took the stretch's deliveries, or the backlog ends in it.
            from = start.unbounded();
            batch = self.claim_once(connection, held, from).await?;
        }
        self.claimed(from, &batch);
        Ok(batch)
    }

    /// Whether a claim from `start` that got `batch` is to be tried once more from a new
    /// start: it came from the cursor and found nothing, so the stretches handed out lie past
    /// the backlog's end, and the cursor is back at the head. Asking for the new start opens
    /// the cursor, or waits for the sibling opening it, outside the claim's transaction;
    /// claiming from the head at once would walk past every batch the siblings lock.
    pub(super) fn retries_from_head(start: ClaimStart, batch: &[Claimed]) -> bool {
        batch.is_empty() && !start.is_head()
    }

    /// One claim statement from `start`, held or leased.
    async fn claim_once(
        &self,
        connection: &mut Connection<S>,
        held: bool,
        start: ClaimStart,
    ) -> Result<Vec<Claimed>, DispatchError> {
        let (consumer, owner, batch) = (&self.consumer.name, &self.owner, self.config.batch);
        let request = if held {
            ClaimRequest::held(consumer, owner, batch)
        } else {
            ClaimRequest::leased(consumer, owner, batch, self.config.lease)
                .per_key(self.consumer.per_key)
        };
        self.store
            .claim(
                connection,
                &request.after_seq(start.after).until_seq(start.end),
            )
            .await
    }

    /// Moves the consumer's claim cursor after a claim that started at `start`.
    fn claimed(&self, start: ClaimStart, batch: &[Claimed]) {
        if self.uses_cursor() {
            let seqs = batch.iter().map(|claimed| claimed.event_seq);
            let span = seqs.clone().min().zip(seqs.max());
            self.consumer
                .cursor
                .claimed(start, self.config.batch, batch.len(), span);
        }
    }

    /// Claims a leased batch on the kept connection; keeps it when the claim found work. A
    /// claim from the cursor that finds nothing is tried again from a new start
    /// ([`Worker::retries_from_head`]).
    async fn claim(&mut self) -> Result<Vec<Claimed>, DispatchError> {
        let start = self.claim_start().await;
        let mut connection = self.take_connection().await?;
        let mut batch = self
            .claim_from_cursor(&mut connection, false, start)
            .await?;
        if Self::retries_from_head(start, &batch) {
            self.connection = Some(connection);
            let start = self.claim_start().await;
            connection = self.take_connection().await?;
            batch = self
                .claim_from_cursor(&mut connection, false, start)
                .await?;
        }
        if !batch.is_empty() {
            self.connection = Some(connection);
        }
        Ok(batch)
    }

    /// The consumer's doorbell, when this dispatcher listens, none of its other workers of the
    /// consumer holds or asks for it, and no other dispatcher's worker holds it. Not taken when
    /// the poll interval is at most [`DOORBELL_WAIT`]: the next poll comes as soon as a
    /// notification could, and the idle worker keeps its connection.
    /// Also says whether it was asked for (`false`: not this worker's turn, or no doorbells).
    async fn take_doorbell(&self) -> (Option<S::Doorbell>, bool) {
        if !self.config.listen
            || self.config.poll_interval <= DOORBELL_WAIT
            || self
                .consumer
                .doorbell_busy
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return (None, false);
        }
        let doorbell = match self
            .store
            .hold_doorbell(&self.consumer.name, DOORBELL_WAIT)
            .await
        {
            Ok(doorbell) => doorbell,
            Err(error) => {
                tracing::debug!(consumer = %self.consumer.name, %error, "doorbell not taken");
                None
            }
        };
        if doorbell.is_none() {
            self.consumer.doorbell_busy.store(false, Ordering::Release);
        }
        (doorbell, true)
    }

    async fn give_back(&self, doorbell: Option<S::Doorbell>) {
        let Some(doorbell) = doorbell else {
            return;
        };
        if let Err(error) = self.store.release_doorbell(doorbell).await {
            tracing::debug!(consumer = %self.consumer.name, %error, "doorbell released by closing its connection");
        }
        self.consumer.doorbell_busy.store(false, Ordering::Release);
    }

    fn holds_batches(&self) -> bool {
        self.config.held_batches
            && self.consumer.kind == HandlerKind::Transactional
            && !self.consumer.per_key
    }

    /// Ends a failed attempt with the retry policy's decision, counted; says how it ended.
    pub(super) async fn record_failure(&mut self, lease: &Lease, failure: &HandlerError) -> Ran {
        let decision = self
            .consumer
            .policy
            .decide(failure.class, lease.attempt, &mut self.rng);
        match self
            .store
            .fail(lease, failure.class, &failure.code, decision)
            .await
        {
            Ok(()) => match decision {
                RetryDecision::Retry(delay) => {
                    add(&self.counters.retried, 1);
                    Ran::Retry {
                        delay,
                        due: Instant::now() + delay,
                    }
                }
                RetryDecision::Dead => {
                    add(&self.counters.dead, 1);
                    Ran::Dead
                }
                RetryDecision::Quarantine => {
                    add(&self.counters.quarantined, 1);
                    Ran::Quarantined
                }
            },
            Err(error) => {
                self.count_error(&error);
                Ran::Unsettled
            }
        }
    }

    /// Runs a claimed batch in order; says how each delivery ended.
    pub(super) async fn run_batch(&mut self, batch: Vec<Claimed>) -> Vec<(Uuid, Ran)> {
        let mut remaining: VecDeque<Claimed> = batch.into();
        let mut ticker = tokio::time::interval_at(
            Instant::now() + self.config.renew_every,
            self.config.renew_every,
        );
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut ran = Vec::with_capacity(remaining.len());
        // Leased handlers that succeeded, not acked yet, and when the oldest succeeded.
        let mut unacked: Vec<Lease> = Vec::new();
        let mut oldest_unacked: Option<Instant> = None;
        while let Some(mut claimed) = remaining.pop_front() {
            if self.stopping() {
                // Not started: released with the rest at the end of `run`.
                ran.push((claimed.lease.event_id, Ran::NotStarted));
                ran.extend(
                    remaining
                        .iter()
                        .map(|c| (c.lease.event_id, Ran::NotStarted)),
                );
                break;
            }
            claimed.lease.mark_started();
            let outcome = match self.take_connection().await {
                Ok(mut connection) => {
                    let kind = self.consumer.kind;
                    let outcome = match kind {
                        HandlerKind::Transactional => {
                            self.run_transactional(
                                &mut connection,
                                &claimed,
                                &remaining,
                                &mut ticker,
                            )
                            .await
                        }
                        HandlerKind::Leased => {
                            self.run_leased(
                                &mut connection,
                                &claimed,
                                &unacked,
                                &remaining,
                                &mut ticker,
                            )
                            .await
                        }
                    };
                    // Kept for the next run unless the run ended in an error (or a
                    // transactional run's rollback).
                    let keep = match kind {
                        HandlerKind::Transactional => matches!(outcome, Ok(Handled::Succeeded)),
                        HandlerKind::Leased => outcome.is_ok(),
                    };
                    if keep {
                        self.connection = Some(connection);
                    }
                    outcome
                }
                Err(error) => Err(error),
            };
            let failure = match outcome {
                Ok(Handled::Succeeded) => {
                    match self.consumer.kind {
                        HandlerKind::Transactional => {
                            add(&self.counters.acked, 1);
                            ran.push((claimed.lease.event_id, Ran::Acked));
                        }
                        HandlerKind::Leased => {
                            unacked.push(claimed.lease);
                            let oldest = *oldest_unacked.get_or_insert_with(Instant::now);
                            if oldest.elapsed() >= self.config.ack_window {
                                self.flush_acks(&mut unacked, &mut ran).await;
                                oldest_unacked = None;
                            }
                        }
                    }
                    continue;
                }
                Ok(Handled::Failed(failure)) => failure,
                // No ack and no fail: the lease is another claim's now, or expires and is
                // recovered (its `lease_expired` attempt row is the attempt's record).
                Ok(Handled::Cancelled) => {
                    ran.push((claimed.lease.event_id, Ran::Unsettled));
                    continue;
                }
                Err(error) => {
                    self.count_error(&error);
                    ran.push((claimed.lease.event_id, Ran::Unsettled));
                    continue;
                }
            };
            let ended = self.record_failure(&claimed.lease, &failure).await;
            ran.push((claimed.lease.event_id, ended));
        }
        // Also when stopping: the handlers ran, so their acks must not be released.
        self.flush_acks(&mut unacked, &mut ran).await;
        ran
    }

    /// Acks the leased handlers' successes in one fenced statement, adding how each ended to
    /// `ran`.
    async fn flush_acks(&mut self, unacked: &mut Vec<Lease>, ran: &mut Vec<(Uuid, Ran)>) {
        if unacked.is_empty() {
            return;
        }
        let leases: Vec<&Lease> = unacked.iter().collect();
        let acked = match self.take_connection().await {
            Ok(mut connection) => {
                let acked = self.store.ack(&mut connection, &leases).await;
                if acked.is_ok() {
                    self.connection = Some(connection);
                }
                acked
            }
            Err(error) => Err(error),
        };
        match acked {
            Ok(outcome) => {
                add(&self.counters.acked, outcome.acked as u64);
                add(&self.counters.stale, outcome.stale.len() as u64);
                for lease in unacked.iter() {
                    let stale = outcome.stale.iter().any(|(id, _, _)| *id == lease.event_id);
                    let ended = if stale { Ran::Unsettled } else { Ran::Acked };
                    ran.push((lease.event_id, ended));
                }
            }
            Err(error) => {
                tracing::warn!(
                    consumer = %self.consumer.name,
                    deliveries = unacked.len(),
                    %error,
                    "acks not written; the leases expire and the deliveries run again"
                );
                ran.extend(unacked.iter().map(|lease| (lease.event_id, Ran::Unsettled)));
            }
        }
        unacked.clear();
    }

    fn count_error(&self, error: &DispatchError) {
        if error.is_stale_token() {
            add(&self.counters.stale, 1);
        } else {
            tracing::warn!(consumer = %self.consumer.name, %error, "delivery not settled; its lease expires");
        }
    }

    /// The transactional kind: fence, handler, ack, all in one transaction on `connection` (the
    /// worker's kept connection). [`Handled::Succeeded`]: acked; [`Handled::Failed`]: the handler
    /// failed and everything it wrote was rolled back.
    async fn run_transactional(
        &self,
        connection: &mut Connection<S>,
        claimed: &Claimed,
        remaining: &VecDeque<Claimed>,
        ticker: &mut Interval,
    ) -> Result<Handled, DispatchError> {
        let mut tx = self.store.begin_on(connection).await?;
        // Row-locks the delivery: recovery and renewal leave it alone until we commit.
        self.store.lock_lease(&mut tx, &claimed.lease).await?;
        let shadow = claimed.lease.is_shadow();
        if shadow {
            self.store.begin_shadow(&mut tx).await?;
        }
        // The current delivery's row is locked by `tx`; renewing it from another connection
        // would wait for `tx`, so only the rest of the batch is renewed.
        let held: Vec<&Lease> = remaining.iter().map(|c| &c.lease).collect();
        let handler = Arc::clone(&self.consumer.handler);
        let result = {
            let context = HandlerContext::new(claimed, &self.store, Some(&mut *tx));
            let future = std::pin::pin!(self.timed(CatchUnwind(handler.handle(context))));
            if S::ONE_WRITER {
                // `tx` holds the one write lock: a renewal beside it would wait for it. No
                // other writer can take the rest of the batch meanwhile; it is renewed in
                // `tx` below, or after the rollback.
                Some(future.await)
            } else {
                // The row lock keeps this lease: only another lease's loss ends the renewals.
                self.with_renewal(future, None, &held, None, ticker).await
            }
        };
        let Some(result) = result else {
            return Ok(Handled::Cancelled);
        };
        match flatten(result) {
            Ok(()) => {
                if S::ONE_WRITER {
                    self.renew_if_due(&mut tx, &held, ticker).await;
                }
                if shadow {
                    // No side effect: the handler's writes go, its intents stay.
                    self.store.end_shadow(&mut tx).await?;
                    self.store
                        .record_reconciliation(&mut tx, &claimed.lease)
                        .await?;
                }
                let acked = self.store.ack(&mut tx, &[&claimed.lease]).await?;
                if let Some((event_id, consumer, token)) = acked.stale.into_iter().next() {
                    return Err(DispatchError::StaleToken {
                        event_id,
                        consumer,
                        token,
                    });
                }
                tx.commit().await?;
                Ok(Handled::Succeeded)
            }
            Err(failure) => {
                tx.rollback().await?;
                if S::ONE_WRITER {
                    self.renew_if_due(connection, &held, ticker).await;
                }
                Ok(Handled::Failed(failure))
            }
        }
    }

    /// Renews `held` on `connection` if a renewal fell due while a transactional handler ran
    /// without renewals beside it ([`Store::ONE_WRITER`]). A lease not renewed is counted
    /// stale; its claim runs on, and its ack or fail is refused by its token.
    async fn renew_if_due(
        &self,
        connection: &mut Connection<S>,
        held: &[&Lease],
        ticker: &mut Interval,
    ) {
        let due = ticker
            .poll_tick(&mut Context::from_waker(std::task::Waker::noop()))
            .is_ready();
        if !held.is_empty() && due {
            self.renew(connection, held).await;
        }
    }

    /// Renews `held` on `connection`, counting the leases not renewed as stale; answers which
    /// were renewed (`None`: the renewal failed, logged).
    async fn renew(&self, connection: &mut Connection<S>, held: &[&Lease]) -> Option<Vec<Uuid>> {
        match self.store.renew(connection, held, self.config.lease).await {
            Ok(renewed) => {
                add(&self.counters.stale, (held.len() - renewed.len()) as u64);
                Some(renewed)
            }
            Err(error) => {
                tracing::warn!(%error, "lease renewal failed");
                None
            }
        }
    }

    /// The leased kind: the handler outside any transaction. [`Handled::Succeeded`]: its lease
    /// waits for the batch's fenced ack ([`Worker::flush_acks`]); [`Handled::Cancelled`]: its lease
    /// was lost while it ran, and it was stopped.
    async fn run_leased(
        &self,
        connection: &mut Connection<S>,
        claimed: &Claimed,
        unacked: &[Lease],
        remaining: &VecDeque<Claimed>,
        ticker: &mut Interval,
    ) -> Result<Handled, DispatchError> {
        let held: Vec<&Lease> = unacked
            .iter()
            .chain(std::iter::once(&claimed.lease))
            .chain(remaining.iter().map(|c| &c.lease))
            .collect();
        let handler = Arc::clone(&self.consumer.handler);
        let result = {
            let context = HandlerContext::new(claimed, &self.store, None);
            let future = std::pin::pin!(self.timed(CatchUnwind(handler.handle(context))));
            self.with_renewal(
                future,
                Some(&mut *connection),
                &held,
                Some(&claimed.lease),
                ticker,
            )
            .await
        };
        let Some(result) = result else {
            add(&self.counters.cancelled, 1);
            tracing::warn!(
                consumer = %claimed.lease.consumer,
                event_id = %claimed.lease.event_id,
                token = claimed.lease.token,
                "lease lost while the handler ran; handler cancelled"
            );
            return Ok(Handled::Cancelled);
        };
        match flatten(result) {
            Ok(()) => {
                if claimed.lease.is_shadow() {
                    self.store
                        .record_reconciliation(connection, &claimed.lease)
                        .await?;
                }
                Ok(Handled::Succeeded)
            }
            Err(failure) => Ok(Handled::Failed(failure)),
        }
    }

    /// `future` (a handler run) under the handler timeout, if one applies: past it, `future` is
    /// dropped unfinished and the run fails as transient with code `handler_timeout`.
    pub(super) async fn timed<F>(&self, future: F) -> std::thread::Result<Result<(), HandlerError>>
    where
        F: Future<Output = std::thread::Result<Result<(), HandlerError>>>,
    {
        match self
            .config
            .handler_timeout
            .or(self.consumer.handler_timeout)
        {
            None => future.await,
            Some(limit) => tokio::time::timeout(limit, future)
                .await
                .unwrap_or_else(|_| {
                    Ok(Err(HandlerError::new(
                        FailureClass::Transient,
                        "handler_timeout",
                    )))
                }),
        }
    }

    /// Drives `future`, renewing `held` leases on every tick meanwhile: on `connection`, or
    /// (`None`: the worker's connection carries the handler's transaction) on one from the
    /// pool. `None` when the lease
    /// `current` (the one `future` runs under, when renewals keep it) could not be renewed:
    /// refused as stale (another claim took it, or it expired and was recovered) or the
    /// renewal failed, so the lease may end before `future` does. `future` is dropped then,
    /// unfinished: a leased handler must not go on acting for a delivery it may no longer hold,
    /// and its ack would be refused anyway.
    async fn with_renewal<F: Future + Unpin>(
        &self,
        mut future: F,
        mut connection: Option<&mut Connection<S>>,
        held: &[&Lease],
        current: Option<&Lease>,
        ticker: &mut Interval,
    ) -> Option<F::Output> {
        loop {
            tokio::select! {
                output = &mut future => return Some(output),
                _ = ticker.tick() => {
                    if held.is_empty() {
                        continue;
                    }
                    let renewed = match connection.as_deref_mut() {
                        Some(connection) => self.renew(connection, held).await,
                        None => match self.store.pool().acquire().await {
                            Ok(mut pooled) => self.renew(&mut pooled, held).await,
                            Err(error) => {
                                tracing::warn!(%error, "lease renewal failed");
                                None
                            }
                        },
                    };
                    let kept = match renewed {
                        Some(renewed) => {
                            current.is_none_or(|lease| renewed.contains(&lease.event_id))
                        }
                        None => current.is_none(),
                    };
                    if !kept {
                        drop(future);
                        return None;
                    }
                }
            }
        }
    }
}

/// How a delivery a worker claimed ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ran {
    /// Its handler succeeded and its ack was written.
    Acked,
    /// Its handler failed; it runs again after `delay`, at `due`.
    Retry {
        /// The retry policy's delay.
        delay: Duration,
        /// When the retry is due.
        due: Instant,
    },
    /// Its handler failed; it was dead-lettered.
    Dead,
    /// Its handler failed; it was quarantined.
    Quarantined,
    /// Nothing was written for it: its lease was lost, or its ack or fail failed. Its lease
    /// ends and lease-expiry recovery brings it back.
    Unsettled,
    /// The worker stopped before its handler: its lease is released at once.
    NotStarted,
}

impl Ran {
    /// When a retry this end scheduled is due.
    pub(super) fn due(self) -> Option<Instant> {
        match self {
            Self::Retry { due, .. } => Some(due),
            _ => None,
        }
    }
}

/// How one handler run ended.
enum Handled {
    /// It succeeded: a transactional run is acked, a leased one waits for its batch's ack.
    Succeeded,
    /// It failed (or panicked); a transactional run's writes were rolled back.
    Failed(HandlerError),
    /// Its lease was lost while it ran, and it was dropped unfinished: no ack, no fail.
    Cancelled,
}

/// A handler's result with a panic turned into a poison failure.
pub(super) fn flatten(
    result: std::thread::Result<Result<(), HandlerError>>,
) -> Result<(), HandlerError> {
    match result {
        Ok(result) => result,
        Err(_) => Err(HandlerError::new(FailureClass::Poison, "handler_panicked")),
    }
}

/// Catches a panic while polling the inner future.
pub(super) struct CatchUnwind<F>(pub(super) F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = std::thread::Result<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(&mut *inner).poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}
