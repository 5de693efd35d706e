//! One client's queue: what the feed has for the client and the client has not yet been sent.
//!
//! The queue holds at most `buffer` messages. When a client falls behind, later events are
//! collapsed into one summary (how many, from where to where) instead of queued; once the
//! summary covers more than `overflow` events the client is dropped, and resumes from the
//! last id it received (the gateway replays the rest from the store). Memory per client is
//! bounded by `buffer` whatever the burst.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use evc_runtime::FeedPosition;
use tokio::sync::Notify;

/// One event for one client: its position and the `data` line, rendered once per topic and
/// shared by every client of it.
#[derive(Debug, Clone)]
pub(crate) struct Message {
    pub(crate) position: FeedPosition,
    pub(crate) data: Arc<str>,
}

/// Events collapsed while the client was behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Summary {
    /// How many.
    pub(crate) events: u64,
    /// The first one's position.
    pub(crate) first: FeedPosition,
    /// The last one's position.
    pub(crate) last: FeedPosition,
}

/// What a client is sent next.
#[derive(Debug, Clone)]
pub(crate) enum Next {
    Event(Message),
    Summary(Summary),
    /// The client fell too far behind: end its stream.
    Overflow,
}

/// How much a queue holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) buffer: usize,
    pub(crate) overflow: u64,
}

#[derive(Debug, Default)]
struct State {
    messages: VecDeque<Message>,
    summary: Option<Summary>,
    overflowed: bool,
}

/// A client's queue; the gateway pushes, the client's stream takes.
#[derive(Debug)]
pub(crate) struct Queue {
    state: Mutex<State>,
    ready: Notify,
    limits: Limits,
}

impl Queue {
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            state: Mutex::new(State::default()),
            ready: Notify::new(),
            limits,
        }
    }

    /// Queues `messages` in order, collapsing what does not fit.
    pub(crate) fn push(&self, messages: impl IntoIterator<Item = Message>) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.overflowed {
            return;
        }
        let mut pushed = false;
        for message in messages {
            pushed = true;
            // Once a summary is open every later event joins it: events stay in order.
            if state.summary.is_none() && state.messages.len() < self.limits.buffer {
                state.messages.push_back(message);
                continue;
            }
            let summary = state.summary.get_or_insert(Summary {
                events: 0,
                first: message.position,
                last: message.position,
            });
            summary.events += 1;
            summary.last = message.position;
            if summary.events > self.limits.overflow {
                state.overflowed = true;
                state.messages.clear();
                state.summary = None;
                break;
            }
        }
        drop(state);
        if pushed {
            self.ready.notify_one();
        }
    }

    /// The next thing to send, waiting until there is one.
    pub(crate) async fn next(&self) -> Next {
        loop {
            {
                let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
                if state.overflowed {
                    return Next::Overflow;
                }
                if let Some(message) = state.messages.pop_front() {
                    return Next::Event(message);
                }
                if let Some(summary) = state.summary.take() {
                    return Next::Summary(summary);
                }
            }
            // One reader per queue: a notification while nobody waits is kept as a permit.
            self.ready.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(seq: i64) -> Message {
        Message {
            position: FeedPosition { writer: 0, seq },
            data: Arc::from(seq.to_string()),
        }
    }

    fn seqs(next: &Next) -> String {
        match next {
            Next::Event(message) => message.data.to_string(),
            Next::Summary(summary) => format!(
                "{}x{}..{}",
                summary.events, summary.first.seq, summary.last.seq
            ),
            Next::Overflow => "overflow".to_owned(),
        }
    }

    #[tokio::test]
    async fn a_burst_past_the_buffer_collapses_into_one_summary_in_order() {
        let queue = Queue::new(Limits {
            buffer: 2,
            overflow: 100,
        });
        queue.push((1..=10).map(message));
        let mut sent = Vec::new();
        for _ in 0..3 {
            sent.push(seqs(&queue.next().await));
        }
        assert_eq!(sent, ["1", "2", "8x3..10"]);
        // Caught up, the client is sent events one by one again.
        queue.push([message(11)]);
        assert_eq!(seqs(&queue.next().await), "11");
    }

    #[tokio::test]
    async fn a_client_too_far_behind_is_dropped() {
        let queue = Queue::new(Limits {
            buffer: 2,
            overflow: 5,
        });
        queue.push((1..=7).map(message));
        queue.push([message(8)]);
        // Nothing queued is sent: the client resumes from its last id, replayed from the store.
        assert_eq!(seqs(&queue.next().await), "overflow");
        queue.push([message(9)]);
        assert_eq!(seqs(&queue.next().await), "overflow");
    }
}
