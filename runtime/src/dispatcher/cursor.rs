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
//! Sibling workers whose claims are under way at the same time would all start after the same
//! cursor, and each would walk past the rows the others are locking (`SKIP LOCKED`). So each
//! claim from the cursor is handed its own stretch: it starts where the previous one's stretch
//! ends, and a stretch is as many `event_seq` values as the last full batch from the cursor
//! spanned ([`ClaimCursor::claimed`]). Where a consumer's deliveries are dense in `event_seq`
//! the stretches match the batches and no claim walks past another's rows; where they are not,
//! a stretch too short overlaps the next (the rows are skipped as before) and one too long
//! leaves deliveries behind the cursor, for the next claim from the head. In `pgbench` (claim
//! 100 with `FOR UPDATE SKIP LOCKED`, delete them, commit), handing out stretches drained 1.5x
//! to 1.7x as fast as a shared cursor with 16 clients, and as fast with 4.
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
    /// Where the stretch handed to the latest claim from the cursor ends: the next one starts
    /// there, or after [`ClaimCursor::after`] when that is further.
    handed_out: AtomicI64,
    /// How many `event_seq` values the last full batch claimed from the cursor spanned.
    stretch: AtomicI64,
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
            handed_out: AtomicI64::new(HEAD),
            stretch: AtomicI64::new(0),
            head_scan: Mutex::new(HeadScan {
                started: Instant::now(),
                took: Duration::ZERO,
            }),
        }
    }

    /// Where the next claim starts: at the head when the cursor is reset or a head scan is
    /// due, else at the end of the stretch handed to the previous claim from the cursor (or
    /// after the cursor, when that is further), handing this claim the stretch after it.
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
        drop(last);
        let stretch = self.stretch.load(Ordering::Acquire);
        let previous = self
            .handed_out
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |end| {
                Some(end.max(after).saturating_add(stretch))
            })
            .unwrap_or_else(|end| end);
        previous.max(after)
    }

    /// Back to the head: the next claim starts there, and the stretches handed out are
    /// forgotten.
    pub(super) fn reset(&self) {
        self.after.store(HEAD, Ordering::Release);
        self.handed_out.store(HEAD, Ordering::Release);
    }

    /// Records how long a claim from the head took: the next periodic head scan waits
    /// [`HEAD_SCAN_COST_FACTOR`] times as long, when that is longer than [`HEAD_SCAN_EVERY`].
    pub(super) fn head_scanned(&self, took: Duration) {
        self.head_scan
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .took = took;
    }

    /// Moves the cursor after a claim that started at `start`, asked for `asked` deliveries
    /// and got `claimed`, spanning `seqs` (lowest and highest `event_seq`): past a full
    /// batch, back to the head after a short one. A full batch from the cursor also sets the
    /// stretch later claims are handed.
    pub(super) fn claimed(&self, start: i64, asked: u32, claimed: usize, seqs: Option<(i64, i64)>) {
        match seqs {
            Some((lowest, highest)) if claimed >= asked as usize => {
                self.after.fetch_max(highest, Ordering::AcqRel);
                if start != HEAD {
                    self.stretch
                        .store(highest.saturating_sub(lowest) + 1, Ordering::Release);
                }
            }
            _ => self.reset(),
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
        cursor.claimed(HEAD, 50, 50, Some((71, 120)));
        assert_eq!(cursor.start_at(now), 120);
        // A sibling's full batch that ended lower does not move it back.
        cursor.claimed(HEAD, 50, 50, Some((31, 80)));
        assert_eq!(cursor.start_at(now), 120);
        cursor.claimed(HEAD, 50, 49, Some((200, 300)));
        assert_eq!(
            cursor.start_at(now),
            HEAD,
            "a short batch means no backlog behind it"
        );
        cursor.claimed(HEAD, 50, 0, None);
        assert_eq!(cursor.start_at(now), HEAD);
    }

    #[test]
    fn claims_from_the_cursor_are_handed_consecutive_stretches() {
        let cursor = ClaimCursor::new();
        let now = Instant::now();
        assert_eq!(cursor.start_at(now), HEAD);
        cursor.claimed(HEAD, 100, 100, Some((1, 100)));
        // No full batch from the cursor yet: no stretch, every claim starts after the cursor.
        assert_eq!(cursor.start_at(now), 100);
        assert_eq!(cursor.start_at(now), 100);
        cursor.claimed(100, 100, 100, Some((101, 200)));
        // Three claims under way at once: each starts where the one before's stretch ends.
        assert_eq!(cursor.start_at(now), 200);
        assert_eq!(cursor.start_at(now), 300);
        assert_eq!(cursor.start_at(now), 400);
        // Deliveries spaced out in `event_seq`: the stretch follows the last full batch.
        cursor.claimed(200, 100, 100, Some((201, 450)));
        assert_eq!(cursor.start_at(now), 500);
        assert_eq!(cursor.start_at(now), 750);
        // A full batch from the head that spans more does not set the stretch.
        cursor.claimed(HEAD, 100, 100, Some((7, 1_100)));
        assert_eq!(
            cursor.start_at(now),
            1_100,
            "after the cursor, further than handed out"
        );
        assert_eq!(cursor.start_at(now), 1_350);
        cursor.reset();
        assert_eq!(cursor.start_at(now), HEAD, "a reset starts at the head");
        cursor.claimed(HEAD, 100, 100, Some((11, 110)));
        assert_eq!(
            cursor.start_at(now),
            110,
            "and forgets the stretches handed out before it"
        );
        cursor.claimed(110, 100, 99, Some((111, 300)));
        assert_eq!(cursor.start_at(now), HEAD, "a short batch resets it too");
    }

    #[test]
    fn the_head_is_scanned_again_after_the_interval() {
        let cursor = ClaimCursor::new();
        let now = Instant::now();
        assert_eq!(cursor.start_at(now), HEAD);
        cursor.claimed(HEAD, 10, 10, Some((31, 40)));
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
        cursor.claimed(HEAD, 10, 10, Some((31, 40)));
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
