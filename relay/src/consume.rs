//! Consumers on JetStream (docs/relay.md, "Consumers on JetStream"): a dispatcher's consumers
//! run from their durable pull consumers instead of claiming from the outbox.
//!
//! The broker carries the work; the store stays the authority. Each message names an event (its
//! `Nats-Msg-Id`); the consumer's delivery of that event is claimed in the store by id and run
//! like any claimed delivery ([`evc_runtime::DeliveryRunner`]): the handler kind's fence, the
//! effect rows keyed by the delivery, the retry policy, dead letters and quarantine all land in
//! the store. What the store says then decides the message's acknowledgement: done → ack;
//! retried → nak with the policy's delay; dead or quarantined → term. A message redelivered
//! after its delivery was acked finds nothing open and is acked without running the handler
//! again, so effects happen once per event whatever the broker redelivers; a message of an
//! event the consumer does not subscribe to (a filter that covers more subjects, on a server
//! older than 2.10) is acked the same way.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{AckKind, Context, Message};
use evc_runtime::{DeliveryRunner, DispatchStats, Dispatcher, DispatcherHandle, Outcome, Store};
use futures_util::{FutureExt, StreamExt};
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::definitions::Definitions;

/// The header every message the relay publishes carries the event id in.
const EVENT_ID_HEADER: &str = "Nats-Msg-Id";

/// How consumers run on JetStream.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConsumeConfig {
    /// How often each runner also claims due deliveries from the store, for what the broker
    /// does not bring: replays, retries whose message reached its `max_deliver`, deliveries
    /// from before the consumer ran on JetStream.
    pub sweep_every: Duration,
    /// The nak delay of a delivery the store cannot say when to ask about again (its
    /// consumer paused, its key behind another delivery), of one whose claim failed or whose
    /// lease is being given back at shutdown; and the first wait before pulling again after
    /// the pull failed (doubling up to 30 s).
    pub wait_again: Duration,
}

impl Default for ConsumeConfig {
    fn default() -> Self {
        Self {
            sweep_every: Duration::from_secs(30),
            wait_again: Duration::from_secs(1),
        }
    }
}

/// Why consumers could not start on JetStream.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumeError {
    /// The definitions hold no durable consumer for a consumer the dispatcher serves (it is
    /// neither live nor shadow in the contracts, or the definitions are stale).
    #[error(
        "no JetStream consumer is defined for consumer {0} (run `evc generate`, then `evc relay --apply`)"
    )]
    Undefined(String),
    /// The stream is not on the server.
    #[error("stream {stream} is not on the server (run `evc relay --apply`): {source}")]
    Stream {
        /// The stream.
        stream: String,
        /// Cause.
        source: async_nats::jetstream::context::GetStreamError,
    },
    /// A durable consumer is not on the server.
    #[error("durable consumer {durable} is not on the server (run `evc relay --apply`): {source}")]
    Consumer {
        /// The durable consumer.
        durable: String,
        /// Cause.
        source: async_nats::Error,
    },
}

/// Consumers running on JetStream.
#[derive(Debug)]
pub struct Consuming {
    dispatcher: DispatcherHandle,
    tasks: Vec<JoinHandle<()>>,
}

impl Consuming {
    /// What the runners did so far.
    pub fn stats(&self) -> DispatchStats {
        self.dispatcher.stats()
    }

    /// Graceful shutdown: the runners stop fetching, finish the batch they run, release the
    /// leases they hold; unacknowledged messages are redelivered to whoever runs next.
    pub async fn shutdown(self) -> DispatchStats {
        self.dispatcher.stop();
        for task in self.tasks {
            if let Err(error) = task.await {
                tracing::error!(%error, "JetStream consumer task ended abnormally");
            }
        }
        self.dispatcher.shutdown().await
    }
}

/// Runs `dispatcher`'s consumers from their durable consumers in `definitions` on
/// `jetstream`: one task per durable consumer (per partition for a consumer ordering per key),
/// each settling up to the dispatcher's batch at a time. The stream and consumers must be on
/// the server (`evc relay --apply`).
///
/// # Errors
/// [`ConsumeError`] when a consumer has no durable consumer defined or on the server.
pub async fn consume<S: Store>(
    dispatcher: Dispatcher<S>,
    jetstream: &Context,
    definitions: &Definitions,
    config: ConsumeConfig,
) -> Result<Consuming, ConsumeError> {
    let durables = durables_by_consumer(definitions);
    let undefined = std::cell::RefCell::new(Vec::new());
    let (handle, runners) = dispatcher.start_runners(|consumer| {
        let count = durables.get(consumer).map_or(0, Vec::len);
        if count == 0 {
            undefined.borrow_mut().push(consumer.to_owned());
        }
        count
    });
    let undefined = undefined.into_inner();
    let stream_name = definitions.stream.name.clone();
    let started =
        async {
            if let Some(missing) = undefined.into_iter().next() {
                return Err(ConsumeError::Undefined(missing));
            }
            let stream = jetstream.get_stream(&stream_name).await.map_err(|source| {
                ConsumeError::Stream {
                    stream: stream_name.clone(),
                    source,
                }
            })?;
            let mut taken: HashMap<String, usize> = HashMap::new();
            let mut paired = Vec::with_capacity(runners.len());
            for runner in runners {
                let next = taken.entry(runner.consumer().to_owned()).or_default();
                let durable = durables[runner.consumer()][*next].clone();
                *next += 1;
                let consumer: PullConsumer =
                    stream.get_consumer(&durable).await.map_err(|source| {
                        ConsumeError::Consumer {
                            durable: durable.clone(),
                            source,
                        }
                    })?;
                paired.push((runner, consumer));
            }
            Ok(paired)
        };
    let paired = match started.await {
        Ok(paired) => paired,
        Err(error) => {
            handle.shutdown().await;
            return Err(error);
        }
    };
    let tasks = paired
        .into_iter()
        .map(|(runner, consumer)| tokio::spawn(run(runner, consumer, config.clone())))
        .collect();
    Ok(Consuming {
        dispatcher: handle,
        tasks,
    })
}

/// The durable consumer names of each contract consumer (`evc_consumer` in their metadata),
/// in the definitions' order (partition order for one ordering per key).
fn durables_by_consumer(definitions: &Definitions) -> HashMap<String, Vec<String>> {
    let mut durables: HashMap<String, Vec<String>> = HashMap::new();
    for consumer in &definitions.consumers {
        if let (Some(name), Some(durable)) = (
            consumer.metadata.get("evc_consumer"),
            consumer.durable_name.as_ref(),
        ) {
            durables
                .entry(name.clone())
                .or_default()
                .push(durable.clone());
        }
    }
    durables
}

/// One runner on one durable consumer until shutdown: a pull stream of the consumer's
/// messages (the client keeps a pull request open and renews it), settled in batches of what
/// has arrived, up to the dispatcher's batch: one message is not held back for the next.
async fn run<S: Store>(
    mut runner: DeliveryRunner<S>,
    consumer: PullConsumer,
    config: ConsumeConfig,
) {
    let batch = usize::try_from(runner.batch()).unwrap_or(1).max(1);
    let mut backoff = config.wait_again;
    'streams: while !runner.stopping() {
        let mut messages = match consumer
            .stream()
            .max_messages_per_batch(batch)
            .messages()
            .await
        {
            Ok(messages) => messages,
            Err(error) => {
                tracing::warn!(consumer = %runner.consumer(), %error, "pulling from JetStream failed; trying again");
                tokio::select! {
                    () = runner.stopped() => break 'streams,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
                continue;
            }
        };
        loop {
            runner.sweep(config.sweep_every).await;
            let next = tokio::select! {
                () = runner.stopped() => break 'streams,
                next = messages.next() => next,
                // Wakes an idle runner for its sweep.
                () = tokio::time::sleep(config.sweep_every) => continue,
            };
            let first = match next {
                Some(Ok(message)) => message,
                Some(Err(error)) => {
                    tracing::warn!(consumer = %runner.consumer(), %error, "pulling from JetStream failed; pulling again");
                    break;
                }
                None => break,
            };
            backoff = config.wait_again;
            let mut arrived = vec![first];
            while arrived.len() < batch {
                match messages.next().now_or_never() {
                    Some(Some(Ok(message))) => arrived.push(message),
                    Some(Some(Err(error))) => {
                        tracing::warn!(consumer = %runner.consumer(), %error, "pulling from JetStream failed");
                        break;
                    }
                    _ => break,
                }
            }
            settle(&mut runner, arrived, &config).await;
        }
        tokio::select! {
            () = runner.stopped() => break 'streams,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
    runner.release().await;
}

/// Runs the deliveries `messages` name and acknowledges each as its delivery stands.
async fn settle<S: Store>(
    runner: &mut DeliveryRunner<S>,
    messages: Vec<Message>,
    config: &ConsumeConfig,
) {
    let mut named = Vec::with_capacity(messages.len());
    for message in messages {
        match event_id(&message) {
            Some(id) => named.push((id, message)),
            None => {
                // Not a message the relay published: nothing in the store can run it.
                tracing::warn!(consumer = %runner.consumer(), subject = %message.subject, "message without an event id; terminated");
                acknowledge(&message, AckKind::Term).await;
            }
        }
    }
    let ids: Vec<Uuid> = named.iter().map(|(id, _)| *id).collect();
    let lease = runner.lease();
    // While the batch runs, every third of the lease tells the broker its messages are still
    // being worked on, so it does not deliver them again meanwhile (`ack_wait` is the lease).
    let every = (lease / 3).max(Duration::from_millis(100));
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let consumer = runner.consumer().to_owned();
    let ran = {
        let run = runner.run(&ids);
        tokio::pin!(run);
        loop {
            tokio::select! {
                ran = &mut run => break ran,
                _ = ticker.tick() => {
                    for (_, message) in &named {
                        acknowledge(message, AckKind::Progress).await;
                    }
                }
            }
        }
    };
    let outcomes: HashMap<Uuid, Outcome> = match ran {
        Ok(outcomes) => outcomes.into_iter().collect(),
        Err(error) => {
            tracing::warn!(%consumer, %error, "claiming from the store failed; messages delivered again");
            HashMap::new()
        }
    };
    for (id, message) in named {
        let kind = match outcomes.get(&id) {
            Some(Outcome::Acked | Outcome::Settled) => AckKind::Ack,
            Some(Outcome::Dead | Outcome::Quarantined | Outcome::Ended) => AckKind::Term,
            Some(Outcome::Retry(delay)) => AckKind::Nak(Some(*delay)),
            Some(Outcome::Waiting(wait)) if !wait.is_zero() => AckKind::Nak(Some(*wait)),
            // Its lease has to run out before recovery makes it pending again.
            Some(Outcome::Unsettled) => AckKind::Nak(Some(lease)),
            // Given back at shutdown, just after this: pending again then, for whoever runs
            // next.
            Some(Outcome::Released) => AckKind::Nak(Some(config.wait_again)),
            _ => AckKind::Nak(Some(config.wait_again)),
        };
        acknowledge(&message, kind).await;
    }
}

/// The event id a message names (`Nats-Msg-Id`).
fn event_id(message: &Message) -> Option<Uuid> {
    let headers = message.headers.as_ref()?;
    Uuid::parse_str(headers.get(EVENT_ID_HEADER)?.as_str()).ok()
}

/// Sends `kind` for `message`; a lost acknowledgement only means a redelivery, which the
/// store settles.
async fn acknowledge(message: &Message, kind: AckKind) {
    if let Err(error) = message.ack_with(kind).await {
        tracing::debug!(%error, "acknowledgement not sent; the message is delivered again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The repository's own definitions: an unordered consumer has one durable consumer, an
    /// ordered one a durable consumer per partition, in partition order.
    #[test]
    fn durables_are_found_per_consumer_in_partition_order() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/jetstream.json");
        let mut definitions = Definitions::read(&path).expect("generated definitions");
        let mut partitions = definitions.consumers.clone();
        for consumer in &mut partitions {
            if let Some(name) = consumer.durable_name.as_mut() {
                name.push_str("-x");
            }
        }
        definitions.consumers.extend(partitions);
        let durables = durables_by_consumer(&definitions);
        assert_eq!(durables["audit"], ["audit", "audit-x"]);
        assert_eq!(
            durables["worker.render.mout_view"],
            [
                "worker-render-mout_view--p0",
                "worker-render-mout_view--p0-x"
            ]
        );
        assert_eq!(durables.len(), definitions.consumers.len() / 2);
    }
}
