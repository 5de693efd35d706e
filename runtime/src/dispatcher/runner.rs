//! Delivery runners: a consumer's handler run on the deliveries an outside transport names (a
//! broker's messages), with the dispatcher's claims, fences, retries and acks
//! (docs/relay.md, "Consumers on JetStream").

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::stats::add;
use super::worker::{Ran, Worker};
use crate::store::{Store, Unclaimed};

/// How a delivery a [`DeliveryRunner`] was asked to run stands afterwards: what the transport
/// should do with the message that named it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Its handler succeeded and the ack was written: done.
    Acked,
    /// Its handler failed; the store runs it again after this delay (the retry policy's).
    Retry(Duration),
    /// Its handler failed and it was dead-lettered, recorded in the store.
    Dead,
    /// Its handler failed and it was quarantined, recorded in the store.
    Quarantined,
    /// Nothing could be written for it (its lease was lost, or the store failed): the lease
    /// ends and lease-expiry recovery makes it pending again.
    Unsettled,
    /// Claimed but not run: the dispatcher is shutting down, and its lease is given back
    /// ([`DeliveryRunner::release`]), so it is pending again at once.
    Released,
    /// The store holds no open delivery of the event for the consumer: done before (a
    /// redelivered message), or never addressed to the consumer.
    Settled,
    /// Dead-lettered or quarantined before: an operator's replay runs it again.
    Ended,
    /// Open but not claimable now (not due, leased elsewhere, behind its key, paused): ask
    /// again after this long.
    Waiting(Duration),
}

impl From<Ran> for Outcome {
    fn from(ran: Ran) -> Self {
        match ran {
            Ran::Acked => Self::Acked,
            Ran::Retry { delay, .. } => Self::Retry(delay),
            Ran::Dead => Self::Dead,
            Ran::Quarantined => Self::Quarantined,
            Ran::Unsettled => Self::Unsettled,
            Ran::NotStarted => Self::Released,
        }
    }
}

impl From<Unclaimed> for Outcome {
    fn from(unclaimed: Unclaimed) -> Self {
        match unclaimed {
            Unclaimed::Settled => Self::Settled,
            Unclaimed::Ended => Self::Ended,
            Unclaimed::Waiting(wait) => Self::Waiting(wait),
        }
    }
}

/// One consumer's handler, run on the deliveries a transport names: each named event's
/// delivery is claimed by id ([`Store::claim_events`]), run and settled exactly as a
/// dispatcher worker settles what it claims (fences, the handler kind's transaction or lease,
/// the retry policy, dead letters and quarantine), and [`DeliveryRunner::run`] says how each
/// ended. Made by [`crate::Dispatcher::start_runners`].
pub struct DeliveryRunner<S: Store> {
    pub(super) worker: Worker<S>,
    /// When [`DeliveryRunner::sweep`] last claimed from the store (its start, at first).
    pub(super) swept: Instant,
}

impl<S: Store> std::fmt::Debug for DeliveryRunner<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeliveryRunner")
            .field("consumer", &self.worker.consumer.name)
            .field("owner", &self.worker.owner)
            .finish_non_exhaustive()
    }
}

impl<S: Store> DeliveryRunner<S> {
    /// The consumer it runs.
    pub fn consumer(&self) -> &str {
        &self.worker.consumer.name
    }

    /// The lease owner its claims name (`<owner>/<consumer>/r<n>`).
    pub fn owner(&self) -> &str {
        &self.worker.owner
    }

    /// Whether the consumer orders its deliveries per key.
    pub fn per_key(&self) -> bool {
        self.worker.consumer.per_key
    }

    /// How many deliveries one claim takes ([`crate::DispatcherConfig::batch`]).
    pub fn batch(&self) -> u32 {
        self.worker.config.batch
    }

    /// How long its claims lease a delivery ([`crate::DispatcherConfig::lease`]).
    pub fn lease(&self) -> Duration {
        self.worker.config.lease
    }

    /// Whether the dispatcher was told to shut down.
    pub fn stopping(&self) -> bool {
        self.worker.stopping()
    }

    /// Waits until the dispatcher is told to shut down.
    pub async fn stopped(&mut self) {
        while !self.worker.stopping() {
            if self.worker.shutdown.changed().await.is_err() {
                return;
            }
        }
    }

    /// Claims the consumer's deliveries of `event_ids` and runs them in `event_seq` order;
    /// answers how each stands afterwards, in no particular order.
    ///
    /// # Errors
    /// The claim failed ([`crate::DispatchError`]): nothing was claimed or run.
    pub async fn run(
        &mut self,
        event_ids: &[Uuid],
    ) -> Result<Vec<(Uuid, Outcome)>, crate::DispatchError> {
        let mut connection = self.worker.take_connection().await?;
        let found = self
            .worker
            .store
            .claim_events(
                &mut connection,
                &self.worker.consumer.name,
                &self.worker.owner,
                event_ids,
                self.worker.config.lease,
            )
            .await?;
        // Kept for the batch's acks and transactions; an idle runner holds no connection.
        if !found.claimed.is_empty() {
            self.worker.connection = Some(connection);
        }
        let mut outcomes: Vec<(Uuid, Outcome)> = found
            .unclaimed
            .into_iter()
            .map(|(id, unclaimed)| (id, unclaimed.into()))
            .collect();
        if !found.claimed.is_empty() {
            add(&self.worker.counters.claimed, found.claimed.len() as u64);
            let ran = self.worker.run_batch(found.claimed).await;
            outcomes.extend(ran.into_iter().map(|(id, ran)| (id, ran.into())));
        }
        Ok(outcomes)
    }

    /// Claims and runs the consumer's due deliveries from the store, batch after batch until
    /// none is left or a third of the lease has passed, as a dispatcher worker does, at most once per `every` (the first `every`
    /// after the start): what the transport does not bring
    /// (replays, retries whose message was lost, deliveries from before the transport
    /// carried the consumer). Returns how many it ran.
    pub async fn sweep(&mut self, every: Duration) -> usize {
        if self.swept.elapsed() < every {
            return 0;
        }
        // Batch after batch while there is work (a consumer just resumed, a replay of many),
        // for at most a third of the lease (the transport's messages in hand wait meanwhile,
        // without progress acknowledgements), then not again for `every`.
        let budget = self.worker.config.lease / 3;
        let started = Instant::now();
        let mut ran = 0;
        while !self.stopping() && started.elapsed() < budget {
            let batch = self.worker.sweep().await;
            ran += batch;
            if batch == 0 {
                break;
            }
        }
        self.swept = Instant::now();
        ran
    }

    /// Gives back every lease it still holds (shutdown); returns how many.
    pub async fn release(mut self) -> u64 {
        self.worker.connection = None;
        match self.worker.store.release(&self.worker.owner).await {
            Ok(released) => {
                add(&self.worker.counters.released, released);
                released
            }
            Err(error) => {
                tracing::warn!(owner = %self.worker.owner, %error, "could not release leases; they expire");
                0
            }
        }
    }
}
