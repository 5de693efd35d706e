//! Where a consumer's next claim starts scanning its due deliveries (docs/runtime.md, "Claim
//! cursor").
//!
//! A claim reads the consumer's pending deliveries in `event_seq` order from the due index.
//! At the head of that index lie the entries of deliveries already acked or leased (dead or no
//! longer pending, until vacuum removes them) and the rows sibling workers hold locked: every
//! claim from the head walks past all of them. Starting after the highest `event_seq` a full
//! batch claimed skips that region with one index seek; in `pgbench`, a held lock-then-delete
//! cycle drained 2.6x as fast with 4 clients (2x with 16) when it started there.
//!
//! A delivery can become due behind the cursor: a retry whose delay ran out, a batch rolled
//! back, a lease released or recovered, an event whose transaction committed after a later
//! one was claimed. So the cursor is only a hint: a claim starts from the head again when the
//! last claim came back short of its batch (the backlog behind the cursor is gone) and at
//! least every [`HEAD_SCAN_EVERY`], and a claim from the cursor that finds nothing is tried
//! again from the head at once.
//!
//! A head scan costs what lies at the head, and while a long transaction holds back vacuum
//! that region only grows, and a head scan every 100 ms would take most of the claims' time. So the
//! interval is also at least [`HEAD_SCAN_COST_FACTOR`] times the last head scan's duration,
//! which keeps head scans to a bounded share of a worker's time whatever the head holds.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use tokio::time::{Duration, Instant};

/// The longest a consumer's claims go without one from the head: how late, at most, a
/// delivery that became due behind the cursor is seen while a backlog lasts.
pub(super) const HEAD_SCAN_EVERY: Duration = Duration::from_millis(100);

/// The periodic head scan waits at least this many times as long as the last one took.
pub(super) const HEAD_SCAN_COST_FACTOR: u32 = 10;

/// `event_seq` values start at 1: a claim after 0 starts at the head.
pub(super) const HEAD: i64 = 0;

/// One consumer's claim cursor, shared by its workers in one dispatcher.
#[derive(Debug)]
pub(super) struct ClaimCursor {
    /// The highest `event_seq` a full batch claimed since the last reset; [`HEAD`] after one.
    after: AtomicI64,
    /// The last claim from the head.
    head_scan: Mutex<HeadScan>,
}

/// When the last claim from the head started, and how long it took.
#[derive(Debug)]
struct HeadScan {
    started: Instant,
    took: Duration,
}

impl ClaimCursor {
    pub(super) fn new() -> Self {
        Self {
            after: AtomicI64::new(HEAD),
            head_scan: Mutex::new(HeadScan {
                started: Instant::now(),
                took: Duration::ZERO,
            }),
        }
    }

    /// Where the next claim starts: after the cursor, or at the head when it is reset or a
    /// head scan is due.
    pub(super) fn start(&self) -> i64 {
        self.start_at(Instant::now())
    }

    /// [`ClaimCursor::start`] at `now`.
    fn start_at(&self, now: Instant) -> i64 {
        let after = self.after.load(Ordering::Acquire);
        let mut last = self
            .head_scan
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let every = HEAD_SCAN_EVERY.max(last.took * HEAD_SCAN_COST_FACTOR);
        if after == HEAD || now.saturating_duration_since(last.started) >= every {
            last.started = now;
            return HEAD;
        }
        after
    }

    /// Records how long a claim from the head took: the next periodic head scan waits
    /// [`HEAD_SCAN_COST_FACTOR`] times as long, when that is longer than [`HEAD_SCAN_EVERY`].
    pub(super) fn head_scanned(&self, took: Duration) {
        self.head_scan
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .took = took;
    }

    /// Moves the cursor after a claim that asked for `asked` deliveries and got `claimed`, the
    /// highest of them `highest_seq`: past a full batch, back to the head after a short one.
    pub(super) fn claimed(&self, asked: u32, claimed: usize, highest_seq: Option<i64>) {
        match highest_seq {
            Some(seq) if claimed >= asked as usize => {
                self.after.fetch_max(seq, Ordering::AcqRel);
            }
            _ => self.after.store(HEAD, Ordering::Release),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_batches_move_the_cursor_and_a_short_one_resets_it() {
        let cursor = ClaimCursor::new();
        let now = Instant::now();
        assert_eq!(
            cursor.start_at(now),
            HEAD,
            "a new cursor starts at the head"
        );
        cursor.claimed(50, 50, Some(120));
        assert_eq!(cursor.start_at(now), 120);
        // A sibling's full batch that ended lower does not move it back.
        cursor.claimed(50, 50, Some(80));
        assert_eq!(cursor.start_at(now), 120);
        cursor.claimed(50, 49, Some(300));
        assert_eq!(
            cursor.start_at(now),
            HEAD,
            "a short batch means no backlog behind it"
        );
        cursor.claimed(50, 0, None);
        assert_eq!(cursor.start_at(now), HEAD);
    }

    #[test]
    fn the_head_is_scanned_again_after_the_interval() {
        let cursor = ClaimCursor::new();
        let now = Instant::now();
        assert_eq!(cursor.start_at(now), HEAD);
        cursor.claimed(10, 10, Some(40));
        assert_eq!(cursor.start_at(now + HEAD_SCAN_EVERY / 2), 40);
        let later = now + HEAD_SCAN_EVERY;
        assert_eq!(cursor.start_at(later), HEAD, "a head scan is due");
        assert_eq!(
            cursor.start_at(later),
            40,
            "and the next claim starts after the cursor again"
        );
    }

    #[test]
    fn a_costly_head_scan_spaces_out_the_next() {
        let cursor = ClaimCursor::new();
        let now = Instant::now();
        assert_eq!(cursor.start_at(now), HEAD);
        cursor.head_scanned(Duration::from_millis(50));
        cursor.claimed(10, 10, Some(40));
        let waited = Duration::from_millis(50) * HEAD_SCAN_COST_FACTOR;
        assert!(waited > HEAD_SCAN_EVERY);
        assert_eq!(
            cursor.start_at(now + HEAD_SCAN_EVERY),
            40,
            "the usual interval is not enough after a slow head scan"
        );
        assert_eq!(cursor.start_at(now + waited), HEAD);
        cursor.head_scanned(Duration::from_millis(1));
        assert_eq!(
            cursor.start_at(now + waited + HEAD_SCAN_EVERY),
            HEAD,
            "a cheap head scan brings the usual interval back"
        );
    }
}
