//! Relays an evc outbox's event feed to NATS JetStream (docs/relay.md).
//!
//! The outbox stays the record; the broker is transport. A [`Relay`] takes a fenced cursor in
//! the store ([`evc_runtime::Cursors`]), reads the event feed after it
//! ([`evc_runtime::Observe::feed`]: commit order, no event skipped), publishes each event to
//! `<prefix>.<partition>.<event type>.v<major>` with its id as `Nats-Msg-Id`, waits for the
//! broker's acknowledgements, and only then moves the cursor. A relay stopped between a publish and the
//! cursor's move sends those events again, and the stream's duplicate window drops them. Any
//! number of relays may run: one holds the cursor, the others wait for its lease to run out.

mod apply;
mod consume;
mod definitions;
mod message;
mod transport;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::Context;
use std::collections::VecDeque;

use evc_runtime::{CursorLease, CursorProgress, Cursors, DispatchError, FeedEvent, FeedPosition};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use apply::{Applied, ApplyError, Drift, apply, apply_consumer, apply_stream};
pub use consume::{ConsumeConfig, ConsumeError, Consuming, consume};
pub use definitions::{Definitions, DefinitionsError, RelaySettings};
pub use message::{HeaderStyle, headers, message, partition, subject};
pub use transport::{
    DEFINITIONS_VAR, JETSTREAM_CONSUMERS_VAR, NATS_URL_VAR, Serving, TRANSPORT_VAR, Transport,
    TransportError, serve,
};

/// What a relay publishes, where, and how it holds its cursor.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RelayConfig {
    /// The cursor's name in the store: relays sharing it share one position.
    pub cursor: String,
    /// Who this relay is (the cursor's owner while it holds it).
    pub owner: String,
    /// The first subject tokens (`evc`).
    pub subject_prefix: String,
    /// Subject partitions of each event type (events of one order key share one).
    pub partitions: u32,
    /// How the envelope is named in headers.
    pub header_style: HeaderStyle,
    /// Events read and published per round.
    pub batch: u32,
    /// How long the cursor is held without an advance.
    pub lease: Duration,
    /// How long to wait when the feed has nothing new, or another relay holds the cursor.
    pub poll: Duration,
    /// The longest wait between attempts after a failure (the first wait is `poll`, doubling).
    pub max_backoff: Duration,
}

impl RelayConfig {
    /// A relay of cursor `cursor`, owned by `owner`, publishing under `evc`, in batches of
    /// 1,000, holding its cursor for 30 s, polling every 50 ms, backing off up to 30 s.
    pub fn new(cursor: impl Into<String>, owner: impl Into<String>) -> Self {
        Self {
            cursor: cursor.into(),
            owner: owner.into(),
            subject_prefix: "evc".to_owned(),
            partitions: 1,
            header_style: HeaderStyle::Evc,
            batch: 1_000,
            lease: Duration::from_secs(30),
            poll: Duration::from_millis(50),
            max_backoff: Duration::from_secs(30),
        }
    }

    /// Publishes under `prefix` instead.
    #[must_use]
    pub fn subject_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.subject_prefix = prefix.into();
        self
    }

    /// Spreads each event type over `partitions` subjects by order key (at least 1).
    #[must_use]
    pub fn partitions(mut self, partitions: u32) -> Self {
        self.partitions = partitions.max(1);
        self
    }

    /// The prefix, partitions and lease of `settings` (`relay` of `evc.yaml`).
    #[must_use]
    pub fn settings(self, settings: &RelaySettings) -> Self {
        self.subject_prefix(settings.subject_prefix.clone())
            .partitions(settings.partitions)
            .lease(settings.lease)
    }

    /// Names the envelope's headers in `style`.
    #[must_use]
    pub fn header_style(mut self, style: HeaderStyle) -> Self {
        self.header_style = style;
        self
    }

    /// Reads and publishes up to `batch` events per round (at least 1).
    #[must_use]
    pub fn batch(mut self, batch: u32) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// Holds the cursor for `lease` without an advance.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Waits `poll` when there is nothing to do.
    #[must_use]
    pub fn poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }
}

/// What a relay did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayStats {
    /// Events the broker stored.
    pub published: u64,
    /// Events the broker had already (sent again after a stop or a failure, and dropped).
    pub duplicates: u64,
    /// Times this relay took the cursor.
    pub takes: u64,
    /// Times it found the cursor taken by another relay under a newer token.
    pub fenced: u64,
    /// Rounds that failed (a publish refused or unanswered, the store unreachable) and were
    /// tried again.
    pub failures: u64,
}

/// Why a relay stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// The store refused the cursor's name or owner.
    #[error("the relay cannot start: {0}")]
    Start(DispatchError),
}

/// Why one round failed (tried again after a wait).
#[derive(Debug, thiserror::Error)]
enum RoundError {
    #[error("the store: {0}")]
    Store(#[from] DispatchError),
    #[error("publishing to JetStream: {0}")]
    Publish(#[from] async_nats::jetstream::context::PublishError),
    // serde_json's message names no payload value.
    #[error("encoding a payload as JSON: {0}")]
    Payload(#[from] serde_json::Error),
}

/// A relay from one store to one JetStream context.
#[derive(Debug)]
pub struct Relay<S> {
    store: S,
    jetstream: Context,
    config: RelayConfig,
    stats: RelayStats,
    /// Events published per round over the last [`RATE_WINDOW`], for the rate the cursor
    /// reports.
    recent: VecDeque<(Instant, u64)>,
    /// When this relay last took the cursor: the rate's window starts no earlier.
    taken: Option<Instant>,
    /// The next batch, read while the last one's acknowledgements were awaited, and the
    /// position it was read after: used only when the cursor stands there.
    prefetched: Option<(FeedPosition, Vec<FeedEvent>)>,
}

/// How long a relay woken by a commit waits before it reads the feed.
const GATHER: Duration = Duration::from_millis(5);

/// The span a relay's reported publish rate covers.
const RATE_WINDOW: Duration = Duration::from_secs(10);

impl<S: Cursors> Relay<S> {
    /// A relay of `store`'s feed to `jetstream`.
    pub fn new(store: S, jetstream: Context, config: RelayConfig) -> Self {
        Self {
            store,
            jetstream,
            config,
            stats: RelayStats::default(),
            recent: VecDeque::new(),
            taken: None,
            prefetched: None,
        }
    }

    /// Events per second published over the last [`RATE_WINDOW`] (or since this relay took the
    /// cursor, when that is more recent).
    fn rate(&mut self) -> f64 {
        let now = Instant::now();
        while self
            .recent
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > RATE_WINDOW)
        {
            self.recent.pop_front();
        }
        let span = self
            .taken
            .map_or(RATE_WINDOW, |taken| {
                now.duration_since(taken).min(RATE_WINDOW)
            })
            .max(Duration::from_millis(100));
        let events: u64 = self.recent.iter().map(|(_, n)| n).sum();
        events as f64 / span.as_secs_f64()
    }

    /// What the relay did so far.
    pub fn stats(&self) -> RelayStats {
        self.stats
    }

    /// Relays until `shutdown` completes: takes the cursor when it can, publishes what the
    /// feed holds after it, and moves it. Failures are logged (never a payload) and tried
    /// again after a doubling wait; the cursor stays where the broker's acknowledgements
    /// left it, so nothing is lost. Stopping between a publish and the cursor's move is
    /// safe: the next holder sends those events again.
    ///
    /// # Errors
    /// [`RelayError::Start`] for a cursor name or owner the store does not take: no retry
    /// would mend them (every other failure is tried again).
    pub async fn run(
        mut self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<RelayStats, RelayError> {
        tokio::pin!(shutdown);
        let mut held: Option<Held> = None;
        let mut backoff = self.config.poll;
        let wake = Arc::new(Notify::new());
        let listening = self.listen(&wake);
        loop {
            // Registered before the round, so a commit during it is not missed.
            let notified = wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let round = tokio::select! {
                () = &mut shutdown => break,
                round = self.round(&mut held) => round,
            };
            let wait = match round {
                Ok(Progress::Published) => {
                    backoff = self.config.poll;
                    continue;
                }
                Ok(Progress::Idle) => {
                    backoff = self.config.poll;
                    // The next commit that appends deliveries wakes the relay, or the poll
                    // does. A wake-up reads after a short pause: SQLite rings just before a
                    // commit completes, and the pause gathers the commits of a busy moment
                    // into one round (one cursor write) instead of one round each.
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = &mut notified => {
                            tokio::select! {
                                () = &mut shutdown => break,
                                () = tokio::time::sleep(GATHER.min(self.config.poll)) => {}
                            }
                        }
                        () = tokio::time::sleep(self.config.poll) => {}
                    }
                    continue;
                }
                // Another relay holds the cursor: ask again well within its lease, without
                // locking the row every poll.
                Ok(Progress::Standby) => {
                    backoff = self.config.poll;
                    self.config.poll.max(self.config.lease / 10)
                }
                Err(RoundError::Store(
                    error @ (DispatchError::CursorName(_) | DispatchError::CursorOwner { .. }),
                )) => return Err(RelayError::Start(error)),
                Err(error) => {
                    self.stats.failures += 1;
                    tracing::warn!(cursor = %self.config.cursor, %error, "relay round failed; trying again");
                    self.note_failure(&mut held, &error).await;
                    let wait = backoff;
                    backoff = (backoff * 2).min(self.config.max_backoff);
                    wait
                }
            };
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        if let Some(listening) = listening {
            listening.stop().await;
        }
        // Let the cursor go, so that another relay takes it at once rather than after the
        // lease (a stale token means another took it already).
        if let Some(held) = held
            && let Err(error) = self.store.release_cursor(&held.lease).await
            && !matches!(error, DispatchError::StaleCursor { .. })
        {
            tracing::warn!(cursor = %self.config.cursor, %error, "relay could not release its cursor");
        }
        Ok(self.stats)
    }

    /// On a one-writer store (SQLite: every append is in this process, and listening costs
    /// no connection), listens for commits that appended deliveries for any consumer
    /// ([`evc_runtime::Store::listen`]) and rings `wake`, which wakes an idle relay before its
    /// poll; dropped, the listener stops too. `None` on PostgreSQL, where a listener would
    /// hold a pool connection for wake-ups that single appends send only while a
    /// dispatcher's worker sleeps on its doorbell: the relay polls.
    fn listen(&self, wake: &Arc<Notify>) -> Option<Listening> {
        if !S::ONE_WRITER {
            return None;
        }
        let wakers: HashMap<String, Arc<Notify>> = self
            .store
            .registry()
            .consumers
            .iter()
            .map(|consumer| (consumer.name.to_owned(), Arc::clone(wake)))
            .collect();
        let (stop, stopped) = watch::channel(false);
        let store = self.store.clone();
        let retry = self.config.max_backoff;
        let task = tokio::spawn(async move { store.listen(wakers, retry, stopped).await });
        Some(Listening { stop, task })
    }

    /// Lets the cursor go after the store refused this relay's token: another relay took it.
    fn lost_cursor(&mut self, held: &mut Option<Held>) {
        self.stats.fenced += 1;
        tracing::info!(cursor = %self.config.cursor, "another relay took the cursor");
        *held = None;
    }

    /// Records a failed round in the cursor, so that `evc status` shows it, when this relay
    /// still holds it (a store that cannot be reached records nothing).
    async fn note_failure(&mut self, held: &mut Option<Held>, error: &RoundError) {
        let Some(lease) = held.as_ref() else {
            return;
        };
        match self
            .store
            .note_cursor_failure(&lease.lease, &error.to_string())
            .await
        {
            Ok(()) => {}
            Err(DispatchError::StaleCursor { .. }) => self.lost_cursor(held),
            Err(error) => {
                tracing::debug!(cursor = %self.config.cursor, %error, "relay could not record its failed round");
            }
        }
    }

    /// One round: hold the cursor, publish one batch, move the cursor.
    async fn round(&mut self, held: &mut Option<Held>) -> Result<Progress, RoundError> {
        if held.is_none() {
            let asked = Instant::now();
            match self
                .store
                .take_cursor(&self.config.cursor, &self.config.owner, self.config.lease)
                .await?
            {
                Some(lease) => {
                    self.stats.takes += 1;
                    self.prefetched = None;
                    self.taken = Some(asked);
                    self.recent.clear();
                    tracing::info!(cursor = %lease.name, token = lease.token, position = %lease.position, "relay took the cursor");
                    *held = Some(Held {
                        renewed: asked,
                        lease,
                    });
                }
                None => return Ok(Progress::Standby),
            }
        }
        // Publish only with most of the lease ahead: a relay that slept or waited past a third
        // of it renews first, and learns there whether another relay took the cursor.
        if held
            .as_ref()
            .is_some_and(|h| h.renewed.elapsed() >= self.config.lease / 3)
        {
            let position = held.as_ref().map(|h| h.lease.position).unwrap_or_default();
            self.advance(held, position, 0).await?;
        }
        let Some(lease) = held.as_ref() else {
            return Ok(Progress::Idle);
        };
        let position = lease.lease.position;
        let events = match self.prefetched.take() {
            Some((after, events)) if after == position => events,
            _ => self.store.feed(position, self.config.batch).await?,
        };
        let Some(last) = events.last().map(|event| event.position) else {
            return Ok(Progress::Idle);
        };
        let mut acks = Vec::with_capacity(events.len());
        for event in &events {
            acks.push(
                self.jetstream
                    .send_publish(
                        subject(&self.config.subject_prefix, self.config.partitions, event),
                        message(event, self.config.header_style)?,
                    )
                    .await?,
            );
        }
        // The next batch is read while the broker stores this one: the feed read and the
        // broker's work overlap instead of taking turns. Only a full batch promises more.
        // Optional: a failed read only means the next round reads again.
        let next = if events.len() >= self.config.batch as usize {
            match self.store.feed(last, self.config.batch).await {
                Ok(next) if !next.is_empty() => Some((last, next)),
                Ok(_) => None,
                Err(error) => {
                    tracing::debug!(cursor = %self.config.cursor, %error, "reading ahead failed");
                    None
                }
            }
        } else {
            None
        };
        for ack in acks {
            if ack.await?.duplicate {
                self.stats.duplicates += 1;
            } else {
                self.stats.published += 1;
            }
        }
        let passed = u64::try_from(events.len()).unwrap_or(u64::MAX);
        self.recent.push_back((Instant::now(), passed));
        self.advance(held, last, passed).await?;
        // Kept only while this relay holds the cursor at `last`; `round` checks the position.
        self.prefetched = next.filter(|_| held.is_some());
        Ok(Progress::Published)
    }

    /// Moves the held cursor to `position`, past `passed` events; a stale token lets the
    /// cursor go.
    async fn advance(
        &mut self,
        held: &mut Option<Held>,
        position: FeedPosition,
        passed: u64,
    ) -> Result<(), RoundError> {
        let progress = CursorProgress {
            published: passed,
            rate_per_s: self.rate(),
        };
        let Some(lease) = held.as_mut() else {
            return Ok(());
        };
        let asked = Instant::now();
        match self
            .store
            .advance_cursor(&lease.lease, position, progress, self.config.lease)
            .await
        {
            Ok(()) => {
                lease.lease.position = position;
                lease.renewed = asked;
                Ok(())
            }
            Err(DispatchError::StaleCursor { .. }) => {
                self.lost_cursor(held);
                Ok(())
            }
            Err(error) => Err(error.into()),
        }
    }
}

/// A relay's listener for commits ([`Relay::listen`]).
#[derive(Debug)]
struct Listening {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Listening {
    /// Stops the listener and waits for it.
    async fn stop(self) {
        let _ = self.stop.send(true);
        if let Err(error) = self.task.await {
            tracing::debug!(%error, "the relay's listener ended abnormally");
        }
    }
}

/// The cursor as this relay holds it.
#[derive(Debug)]
struct Held {
    lease: CursorLease,
    /// When the store last extended the lease.
    renewed: Instant,
}

enum Progress {
    /// A batch went out.
    Published,
    /// The feed had nothing new.
    Idle,
    /// Another relay holds the cursor.
    Standby,
}
