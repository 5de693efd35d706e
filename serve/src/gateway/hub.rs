//! The hub: one task reads the event feed and hands each event to the queues of the clients
//! it is for. It starts with the first subscription, at the feed's head, and stops when the
//! service is dropped or closed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use evc_runtime::{DispatchError, FeedEvent, FeedPosition};
use serde::Serialize;
use tokio::sync::{OnceCell, watch};

use super::GatewayConfig;
use super::queue::{Limits, Message, Queue};
use super::topic::Topic;
use crate::outbox::Outbox;

/// Events read from the feed at a time.
pub(crate) const PAGE: u32 = 500;

/// How long the hub waits after the store failed before it reads again.
const RETRY: Duration = Duration::from_secs(1);

/// What a client subscribed to and may read.
#[derive(Debug, Clone)]
pub(crate) struct Interest {
    /// The topic, by its index in the configuration; `None`: every event, as a pulse that
    /// names its type only (the web page's live updates).
    pub(crate) topic: Option<usize>,
    /// The one partition value the client asked for, if any.
    pub(crate) key: Option<String>,
    /// The one tenant the client may read, if it is bound to one.
    pub(crate) tenant: Option<String>,
}

impl Interest {
    /// Whether an event of `topic` with partition value `key` and tenant `tenant` is for the
    /// client.
    fn admits(&self, topic: Option<usize>, key: Option<&str>, tenant: Option<&str>) -> bool {
        self.topic == topic
            && self.key.as_deref().is_none_or(|wanted| key == Some(wanted))
            && self.tenant.as_deref().is_none_or(|own| tenant == Some(own))
    }

    /// `event` as the client's message, if it is for the client.
    pub(crate) fn message(&self, topics: &[Topic], event: &FeedEvent) -> Option<Message> {
        let Some(index) = self.topic else {
            return self
                .admits(None, None, event.tenant_scope.as_deref())
                .then(|| pulse(event));
        };
        let topic = &topics[index];
        if !topic.carries(event) {
            return None;
        }
        let key = topic.key_of(event);
        self.admits(self.topic, key.as_deref(), event.tenant_scope.as_deref())
            .then(|| render(topic, key.as_deref(), event))
    }
}

/// The `data` of an event message: the envelope and the partition value, never the payload.
#[derive(Serialize)]
struct EventData<'a> {
    topic: &'a str,
    key: Option<&'a str>,
    event_id: String,
    event_type: &'a str,
    schema_version: &'a str,
    tenant_scope: Option<&'a str>,
    trace_id: Option<&'a str>,
    correlation_id: Option<&'a str>,
    causation_id: Option<&'a str>,
    produced_at: f64,
}

/// An event as a pulse: its type, nothing else.
fn pulse(event: &FeedEvent) -> Message {
    Message {
        position: event.position,
        data: Arc::from(serde_json::json!({ "event_type": event.event_type }).to_string()),
    }
}

fn render(topic: &Topic, key: Option<&str>, event: &FeedEvent) -> Message {
    let data = EventData {
        topic: &topic.name,
        key,
        event_id: event.event_id.to_string(),
        event_type: &event.event_type,
        schema_version: &event.schema_version,
        tenant_scope: event.tenant_scope.as_deref(),
        trace_id: event.trace_id.as_deref(),
        correlation_id: event.correlation_id.as_deref(),
        causation_id: event.causation_id.as_deref(),
        produced_at: event.produced_at,
    };
    Message {
        position: event.position,
        // Plain strings and numbers: serializing cannot fail.
        data: Arc::from(serde_json::to_string(&data).unwrap_or_default()),
    }
}

/// An event as one topic (or the pulse, `None`) carries it: the topic, the partition value,
/// the tenant and the message.
type Routed<'a> = (Option<usize>, Option<String>, Option<&'a str>, Message);

struct Client {
    interest: Interest,
    queue: Arc<Queue>,
}

#[derive(Default)]
struct State {
    /// The position of the last event handed out.
    position: FeedPosition,
    next_id: u64,
    clients: HashMap<u64, Client>,
}

/// The gateway's shared part: the configuration, the clients and the reading task.
pub(crate) struct Hub {
    pub(crate) outbox: Arc<Outbox>,
    pub(crate) config: GatewayConfig,
    state: Mutex<State>,
    /// One catch-up read of the store at a time (never closed).
    pub(crate) catch_up: tokio::sync::Semaphore,
    started: OnceCell<()>,
    closing: watch::Sender<bool>,
}

/// A client's place in the hub; dropping it unsubscribes.
pub(crate) struct Subscription {
    hub: Arc<Hub>,
    id: u64,
    pub(crate) queue: Arc<Queue>,
    /// The position the hub stood at when the client joined: the queue holds what follows.
    pub(crate) joined_at: FeedPosition,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.lock().clients.remove(&self.id);
    }
}

impl Hub {
    pub(crate) fn new(outbox: Arc<Outbox>, config: GatewayConfig) -> Self {
        Self {
            outbox,
            config,
            state: Mutex::new(State::default()),
            catch_up: tokio::sync::Semaphore::new(1),
            started: OnceCell::new(),
            closing: watch::Sender::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Turns true when the service shuts down: streams end so the server can.
    pub(crate) fn closing(&self) -> watch::Receiver<bool> {
        self.closing.subscribe()
    }

    /// Ends every stream and the reading task.
    pub(crate) fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Adds a client, starting the reading task first if it is not running.
    pub(crate) async fn subscribe(
        self: &Arc<Self>,
        interest: Interest,
    ) -> Result<Subscription, DispatchError> {
        self.started
            .get_or_try_init(|| async {
                let head = self.outbox.feed_head().await?;
                self.lock().position = head;
                tokio::spawn(read(Arc::downgrade(self)));
                Ok::<(), DispatchError>(())
            })
            .await?;
        let queue = Arc::new(Queue::new(Limits {
            buffer: self.config.buffer,
            overflow: self.config.overflow,
        }));
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.clients.insert(
            id,
            Client {
                interest,
                queue: Arc::clone(&queue),
            },
        );
        Ok(Subscription {
            hub: Arc::clone(self),
            id,
            queue,
            joined_at: state.position,
        })
    }

    /// Hands `events` to the clients they are for, each topic's message rendered once.
    fn hand_out(&self, events: &[FeedEvent]) {
        let mut routed: Vec<Routed<'_>> = Vec::new();
        for event in events {
            let tenant = event.tenant_scope.as_deref();
            routed.push((None, None, tenant, pulse(event)));
            for (index, topic) in self.config.topics.iter().enumerate() {
                if topic.carries(event) {
                    let key = topic.key_of(event);
                    let message = render(topic, key.as_deref(), event);
                    routed.push((Some(index), key, tenant, message));
                }
            }
        }
        let mut state = self.lock();
        for client in state.clients.values() {
            let messages = routed
                .iter()
                .filter(|(topic, key, tenant, _)| {
                    client.interest.admits(*topic, key.as_deref(), *tenant)
                })
                .map(|(.., message)| message.clone());
            client.queue.push(messages);
        }
        if let Some(last) = events.last() {
            state.position = last.position;
        }
    }
}

/// Reads the feed from the hub's position until the hub is dropped or closed.
async fn read(hub: Weak<Hub>) {
    loop {
        let Some(strong) = hub.upgrade() else { return };
        if *strong.closing.borrow() {
            return;
        }
        let position = strong.lock().position;
        let wait = match strong.outbox.feed(position, PAGE).await {
            Ok(events) if !events.is_empty() => {
                strong.hand_out(&events);
                continue;
            }
            Ok(_) => strong.config.poll_every,
            Err(error) => {
                tracing::warn!(%error, "the realtime gateway cannot read the event feed");
                RETRY
            }
        };
        let mut closing = strong.closing();
        drop(strong);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = closing.changed() => return,
        }
    }
}
