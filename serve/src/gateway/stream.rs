//! One client's stream: what it missed (read from the store, when it resumes), then what the
//! hub queues for it, as Server-Sent Events.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use evc_runtime::FeedPosition;
use serde_json::json;
use tokio::sync::watch;

use super::hub::{Hub, Interest, PAGE, Subscription};
use super::queue::{Message, Next};

/// Where a stream is.
enum Phase {
    /// Sending what the client missed, read from the store up to where the hub stood when the
    /// client joined; `read` is how far the store has been read.
    CatchUp {
        read: FeedPosition,
        pending: VecDeque<Message>,
    },
    /// Sending what the hub queues.
    Live,
    /// Dropped for falling behind, or the service is closing.
    Ended,
}

struct Stream {
    hub: Arc<Hub>,
    interest: Interest,
    subscription: Subscription,
    /// The position of the last message sent: nothing at or before it is sent again.
    sent: FeedPosition,
    phase: Phase,
    closing: watch::Receiver<bool>,
}

/// The response streaming `subscription` to the client, after what it missed since `resume`.
pub(crate) fn respond(
    hub: Arc<Hub>,
    interest: Interest,
    subscription: Subscription,
    resume: Option<FeedPosition>,
) -> impl IntoResponse {
    let ping_every = hub.config.ping_every;
    let phase = match resume {
        Some(read) if read < subscription.joined_at => Phase::CatchUp {
            read,
            pending: VecDeque::new(),
        },
        _ => Phase::Live,
    };
    let stream = Stream {
        closing: hub.closing(),
        sent: resume.unwrap_or(subscription.joined_at),
        hub,
        interest,
        subscription,
        phase,
    };
    let events = futures_util::stream::unfold(stream, |mut stream| async move {
        let event = stream.next().await?;
        Some((Ok::<Event, Infallible>(event), stream))
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(ping_every).text("ping"))
}

impl Stream {
    /// The next message, or `None` when the stream ends.
    async fn next(&mut self) -> Option<Event> {
        loop {
            if *self.closing.borrow() {
                self.phase = Phase::Ended;
            }
            match &mut self.phase {
                Phase::Ended => return None,
                Phase::CatchUp { read, pending } => {
                    if let Some(message) = pending.pop_front() {
                        return Some(self.event(message));
                    }
                    let joined_at = self.subscription.joined_at;
                    if *read >= joined_at {
                        self.phase = Phase::Live;
                        continue;
                    }
                    // One catch-up read at a time for the whole gateway: reconnecting clients
                    // take turns instead of the connections every other reader needs.
                    let turn = self.hub.catch_up.acquire().await;
                    let events = self.hub.outbox.feed(*read, PAGE).await;
                    drop(turn);
                    let events = match events {
                        Ok(events) => events,
                        Err(error) => {
                            tracing::warn!(%error, "a gateway client's catch-up cannot read the feed");
                            self.phase = Phase::Ended;
                            return Some(
                                Event::default().event("unavailable").data(
                                    json!({"detail": "the store failed; reconnect to resume"})
                                        .to_string(),
                                ),
                            );
                        }
                    };
                    let Some(last) = events.last() else {
                        self.phase = Phase::Live;
                        continue;
                    };
                    *read = last.position;
                    let topics = &self.hub.config.topics;
                    pending.extend(
                        events
                            .iter()
                            .take_while(|event| event.position <= joined_at)
                            .filter_map(|event| self.interest.message(topics, event)),
                    );
                }
                Phase::Live => {
                    let next = tokio::select! {
                        next = self.subscription.queue.next() => next,
                        _ = self.closing.changed() => {
                            self.phase = Phase::Ended;
                            continue;
                        }
                    };
                    match next {
                        Next::Event(message) if message.position <= self.sent => continue,
                        Next::Event(message) => return Some(self.event(message)),
                        // A summary of events the client already has (it resumed from a later
                        // id) says nothing new.
                        Next::Summary(summary) if summary.last <= self.sent => continue,
                        Next::Summary(summary) => {
                            self.sent = summary.last;
                            return Some(
                                Event::default()
                                    .event("summary")
                                    .id(summary.last.to_string())
                                    .data(
                                        json!({
                                            "events": summary.events,
                                            "first": summary.first.to_string(),
                                            "last": summary.last.to_string(),
                                        })
                                        .to_string(),
                                    ),
                            );
                        }
                        Next::Overflow => {
                            self.phase = Phase::Ended;
                            return Some(
                                Event::default().event("overflow").data(
                                    json!({
                                        "detail": "the client fell too far behind; reconnect \
                                                   with Last-Event-ID to resume",
                                    })
                                    .to_string(),
                                ),
                            );
                        }
                    }
                }
            }
        }
    }

    fn event(&mut self, message: Message) -> Event {
        self.sent = message.position;
        Event::default()
            .event("event")
            .id(message.position.to_string())
            .data(&*message.data)
    }
}
