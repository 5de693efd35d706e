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
//! last claim without a stretch came back short of its batch (the backlog behind the cursor is
//! gone) and at least every [`HEAD_SCAN_EVERY`], and a claim from the cursor that finds
//! nothing is tried again from the head at once, or after the sibling claim opening the cursor
//! (one whose stretch held nothing first from its start without the stretch's end: a head scan
//! may have taken the stretch's rows).
//!
//! Sibling workers whose claims are under way at the same time would all start after the same
//! cursor, and each would walk past the rows the others are locking (`SKIP LOCKED`): every row
//! walked past costs a tuple lock tried in PostgreSQL's shared lock table. So each claim from
//! the cursor is handed its own stretch of `event_seq`, from where the previous one's ends, and
//! claims nothing beyond it: claims from stretches never meet. A stretch is 7/8 of the fewest
//! `event_seq` values a batch needed in any of the last [`SPANS`] claims from the cursor: a
//! full batch's span, or, for a claim whose stretch held fewer deliveries than a batch, the
//! part of the stretch it covered scaled up to a batch. A stretch too short only makes its claim smaller
//! (by an eighth where the deliveries are dense); one too long leaves deliveries behind the
//! cursor, for a claim from the head, so the estimate leans short. A full batch that ends
//! before its stretch does gives the rest back when no later stretch was handed out, so a lone
//! worker never leaves anything behind. In `pgbench` (claim 100 with `FOR UPDATE SKIP LOCKED`,
//! delete them, commit), claims in stretches of exactly a batch drained 1.5x to 1.7x as fast
//! as claims after a shared cursor with 16 clients, and as fast with 4.
//!
//! Claims that start together on a cursor at the head (a dispatcher starting on a backlog, or
//! waking to a burst after it ran dry) would all claim from the head, and the n-th would walk
//! past the n - 1 batches the others lock: with 64 workers and batches of 500, a million tuple
//! locks tried before the first stretch is known. So one claim at a time opens the cursor:
//! while it is under way the sibling claims wait for it ([`ClaimCursor::start`]), for
//! [`HEAD_SCAN_EVERY`] or twice the last head scan, at most [`OPENING_WAIT_MAX`], and its full
//! batch, claimed while they wait, is the one claim from the head that counts for the stretch.
//!
//! A head scan costs what lies at the head, and while a long transaction holds back vacuum
//! that region only grows, and a head scan every 100 ms would take most of the claims' time.
//! So the interval is also at least [`HEAD_SCAN_COST_FACTOR`] times the last head scan's
//! duration, which keeps head scans to a bounded share of a worker's time whatever the head
//! holds.

use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tokio::time::{Duration, Instant};

/// The longest a consumer's claims go without one from the head: how late, at most, a
/// delivery that became due behind the cursor is seen while a backlog lasts.
pub(super) const HEAD_SCAN_EVERY: Duration = Duration::from_millis(100);

/// The longest a claim waits for the one opening the cursor, however slow the last head scan.
const OPENING_WAIT_MAX: Duration = Duration::from_secs(1);

/// The periodic head scan waits at least this many times as long as the last one took.
pub(super) const HEAD_SCAN_COST_FACTOR: u32 = 10;

/// `event_seq` values start at 1: a claim after 0 starts at the head.
const HEAD: i64 = 0;

/// The end of a claim that was handed no stretch: it may claim any `event_seq` after its start.
const UNBOUNDED: i64 = i64::MAX;

/// How many recent claims from the cursor the stretch is estimated from.
const SPANS: usize = 8;

/// Where one claim starts: after `after` (the head when it is 0), and where the stretch of
/// `event_seq` it was handed ends, `end`: it claims nothing beyond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ClaimStart {
    /// The claim takes deliveries with a higher `event_seq`.
    pub(super) after: i64,
    /// And none with a higher `event_seq` than this ([`i64::MAX`] when no stretch was handed).
    pub(super) end: i64,
    /// Which opening of the cursor this claim is (they are numbered from 1); 0 for any other.
    opening: u64,
}

impl ClaimStart {
    /// A claim from the head.
    pub(super) const HEAD: Self = Self {
        after: HEAD,
        end: UNBOUNDED,
        opening: 0,
    };

    /// Whether the claim starts at the head.
    pub(super) fn is_head(self) -> bool {
        self.after == HEAD
    }

    /// Whether the claim was handed a stretch and stops at its end.
    pub(super) fn is_bounded(self) -> bool {
        self.end != UNBOUNDED
    }

    /// The same start without the end of its stretch.
    pub(super) fn unbounded(self) -> Self {
        Self {
            end: UNBOUNDED,
            ..self
        }
    }
}

/// What a claim does next ([`ClaimCursor::start_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Claim from this start.
    Claim(ClaimStart),
    /// Wait, at most this long, for the claim that opens the cursor, then ask again.
    Wait(Duration),
}

/// One consumer's claim cursor, shared by its workers in one dispatcher.
#[derive(Debug)]
pub(super) struct ClaimCursor {
    state: Mutex<State>,
    /// Told when the claim that opens the cursor is done.
    opened: Notify,
}

#[derive(Debug)]
struct State {
    /// The highest `event_seq` a full batch, or a claim that used up its stretch, claimed
    /// since the last reset; [`HEAD`] after one.
    after: i64,
    /// Where the stretch handed to the latest claim from the cursor ends.
    handed_out: i64,
    /// How many `event_seq` values a batch needed in the last claims from the cursor (0: none
    /// yet), the next one written at `spans[next_span]`.
    spans: [i64; SPANS],
    next_span: usize,
    /// When the last claim from the head started, and how long it took.
    head_scan_started: Instant,
    head_scan_took: Duration,
    /// When the claim that opens the cursor (from the head, while it is at the head) started,
    /// and its number, while it is under way.
    opening: Option<(Instant, u64)>,
    /// How many claims have opened the cursor.
    openings: u64,
}

impl State {
    /// The stretch handed to each claim: 7/8 of the fewest `event_seq` values a batch needed
    /// in a recent claim from the cursor, at least 1; 0 before there is one.
    fn stretch(&self) -> i64 {
        let fewest = self.spans.iter().copied().filter(|&span| span > 0).min();
        fewest.map_or(0, |span| (span - span / 8).max(1))
    }

    fn record_span(&mut self, span: i64) {
        let at = self.next_span;
        self.spans[at] = span.max(1);
        self.next_span = (at + 1) % SPANS;
    }

    fn reset(&mut self) {
        self.after = HEAD;
        self.handed_out = HEAD;
    }
}

impl ClaimCursor {
    pub(super) fn new() -> Self {
        Self {
            state: Mutex::new(State {
                after: HEAD,
                handed_out: HEAD,
                spans: [0; SPANS],
                next_span: 0,
                head_scan_started: Instant::now(),
                head_scan_took: Duration::ZERO,
                opening: None,
                openings: 0,
            }),
            opened: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a claim is opening the cursor: a claim starting now would wait for it.
    pub(super) fn is_opening(&self) -> bool {
        let state = self.state();
        state.after == HEAD && state.opening.is_some()
    }

    /// Where the next claim starts ([`ClaimCursor::start_at`]), after waiting for the claim
    /// that opens the cursor when one is under way.
    pub(super) async fn start(&self) -> ClaimStart {
        loop {
            // Enabled before the cursor is read, so an opening that ends in between wakes it.
            let opened = self.opened.notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            match self.start_at(Instant::now()) {
                Next::Claim(start) => return start,
                Next::Wait(most) => {
                    // Past `most` the opening claim is taken for failed: this one opens.
                    let _ = tokio::time::timeout(most, opened).await;
                }
            }
        }
    }

    /// What the claim starting at `now` does: at the head, the cursor is reset, it opens the
    /// cursor, unless another claim is opening it (then it waits for that one, see the module
    /// docs); at the head too when a head scan is due; else from where the stretch handed to
    /// the previous claim from the cursor ends (or after the cursor, when that is further),
    /// handed the stretch after it (none before a claim measured one).
    fn start_at(&self, now: Instant) -> Next {
        let mut state = self.state();
        if state.after == HEAD {
            if let Some((began, _)) = state.opening {
                let most = (state.head_scan_took * 2).clamp(HEAD_SCAN_EVERY, OPENING_WAIT_MAX);
                let waited = now.saturating_duration_since(began);
                if waited < most {
                    return Next::Wait(most - waited);
                }
            }
            state.openings += 1;
            state.opening = Some((now, state.openings));
            state.head_scan_started = now;
            return Next::Claim(ClaimStart {
                opening: state.openings,
                ..ClaimStart::HEAD
            });
        }
        let every = HEAD_SCAN_EVERY.max(state.head_scan_took * HEAD_SCAN_COST_FACTOR);
        if now.saturating_duration_since(state.head_scan_started) >= every {
            state.head_scan_started = now;
            return Next::Claim(ClaimStart::HEAD);
        }
        let after = state.handed_out.max(state.after);
        let stretch = state.stretch();
        if stretch == 0 {
            return Next::Claim(ClaimStart {
                after,
                end: UNBOUNDED,
                opening: 0,
            });
        }
        // Below `UNBOUNDED`, which marks a claim without a stretch.
        state.handed_out = after.saturating_add(stretch).min(UNBOUNDED - 1);
        Next::Claim(ClaimStart {
            after,
            end: state.handed_out,
            opening: 0,
        })
    }

    /// Records how long a claim from the head took: the next periodic head scan waits
    /// [`HEAD_SCAN_COST_FACTOR`] times as long, when that is longer than [`HEAD_SCAN_EVERY`].
    pub(super) fn head_scanned(&self, took: Duration) {
        self.state().head_scan_took = took;
    }

    /// Moves the cursor after a claim from `start` that asked for `asked` deliveries and got
    /// `claimed`, spanning `seqs` (lowest and highest `event_seq`): past a full batch, and past
    /// a short one from a stretch (the stretch held no more); back to the head after a short
    /// one without a stretch. A claim from the cursor, or the one that opened it, also counts
    /// for the stretch, and a full batch that ended before its stretch did gives the rest of
    /// the stretch to the next claim, unless a later stretch was handed out meanwhile. The
    /// claims waiting for the opening one go on.
    pub(super) fn claimed(
        &self,
        start: ClaimStart,
        asked: u32,
        claimed: usize,
        seqs: Option<(i64, i64)>,
    ) {
        let opened = self.moved(start, asked, claimed, seqs);
        if opened {
            self.opened.notify_waiters();
        }
    }

    /// [`ClaimCursor::claimed`] without waking anyone; returns whether the claim opened the
    /// cursor.
    fn moved(
        &self,
        start: ClaimStart,
        asked: u32,
        claimed: usize,
        seqs: Option<(i64, i64)>,
    ) -> bool {
        let mut state = self.state();
        // Only the opening under way: a head scan, or an opening whose wait ran out and was
        // taken over, reports without ending it.
        let opened = start.opening != 0
            && state
                .opening
                .is_some_and(|(_, opening)| opening == start.opening);
        if opened {
            state.opening = None;
        }
        let Some((lowest, highest)) = seqs else {
            state.reset();
            return opened;
        };
        let asked = i64::from(asked.max(1));
        let claimed = i64::try_from(claimed).unwrap_or(i64::MAX);
        let full = claimed >= asked;
        // Short without a stretch: the backlog it was skipping to is gone. Short from a
        // stretch: the stretch held no more.
        let moves_on = full || (start.is_bounded() && claimed > 0);
        if !moves_on {
            state.reset();
            return opened;
        }
        state.after = state.after.max(highest);
        // A claim from the head walks past what the others hold, so its span says little;
        // the opening one ran alone.
        if start.is_head() && !opened {
            return false;
        }
        let span = if full {
            highest.saturating_sub(lowest).saturating_add(1)
        } else {
            // `claimed` deliveries up to `highest`: a batch needs that many values times
            // `asked / claimed`. Only the part up to `highest` counts, where the backlog may
            // end inside the stretch.
            let covered = highest.saturating_sub(start.after);
            let scaled = i128::from(covered) * i128::from(asked) / i128::from(claimed);
            i64::try_from(scaled).unwrap_or(i64::MAX)
        };
        state.record_span(span);
        // The rest of the stretch goes to the next claim unless a later stretch was handed
        // out: deliveries appended after this claim's snapshot may lie there.
        if highest < start.end && state.handed_out == start.end {
            state.handed_out = highest;
        }
        opened
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The start of the next claim at `now`, which must not have to wait.
    fn begin(cursor: &ClaimCursor, now: Instant) -> ClaimStart {
        match cursor.start_at(now) {
            Next::Claim(start) => start,
            Next::Wait(most) => panic!("the claim waits up to {most:?} for the opening one"),
        }
    }

    /// The `after` of the next claim at `now`.
    fn next(cursor: &ClaimCursor, now: Instant) -> i64 {
        begin(cursor, now).after
    }

    /// A claim from `after` without a stretch.
    fn from(after: i64) -> ClaimStart {
        ClaimStart {
            after,
            end: UNBOUNDED,
            opening: 0,
        }
    }

    /// A claim from `after` handed the stretch up to `end`.
    fn stretch(after: i64, end: i64) -> ClaimStart {
        ClaimStart {
            after,
            end,
            opening: 0,
        }
    }

    /// A cursor after 200 whose one claim from it took a batch of 100 from 100 values: the
    /// next stretches are 88 long.
    fn dense_cursor() -> ClaimCursor {
        let cursor = ClaimCursor::new();
        cursor.claimed(ClaimStart::HEAD, 100, 100, Some((1, 100)));
        cursor.claimed(from(100), 100, 100, Some((101, 200)));
        cursor
    }

    #[test]
    fn full_batches_move_the_cursor_and_a_short_one_resets_it() {
        let cursor = ClaimCursor::new();
        let now = Instant::now();
        let opening = begin(&cursor, now);
        assert!(opening.is_head(), "a new cursor starts at the head");
        cursor.claimed(opening, 50, 50, Some((71, 120)));
        assert_eq!(
            begin(&cursor, now),
            stretch(120, 164),
            "the batch that opened the cursor measured the stretch: 7/8 of 50"
        );
        // A sibling's full batch that ended lower does not move it back.
        cursor.claimed(ClaimStart::HEAD, 50, 50, Some((31, 80)));
        assert_eq!(cursor.state().after, 120);
        assert_eq!(begin(&cursor, now), stretch(164, 208));
        cursor.claimed(ClaimStart::HEAD, 50, 49, Some((200, 300)));
        let opening = begin(&cursor, now);
        assert!(
            opening.is_head(),
            "a short batch means no backlog behind it"
        );
        cursor.claimed(opening, 50, 0, None);
        assert!(begin(&cursor, now).is_head());
    }

    #[test]
    fn claims_under_way_are_handed_consecutive_stretches() {
        let cursor = ClaimCursor::new();
        let now = Instant::now();
        cursor.claimed(ClaimStart::HEAD, 100, 100, Some((1, 100)));
        // No full batch from the cursor yet: every claim starts after the cursor.
        assert_eq!(begin(&cursor, now), from(100));
        assert_eq!(begin(&cursor, now), from(100));
        cursor.claimed(from(100), 100, 100, Some((101, 260)));
        // A span of 160: stretches of 140 (7/8 of it), one after the other while the claims
        // are under way.
        let [a, b, c] = [(); 3].map(|()| begin(&cursor, now));
        assert_eq!(
            [a, b, c],
            [stretch(260, 400), stretch(400, 540), stretch(540, 680)]
        );
        // A narrower batch shortens the stretch; a wider one from the head does not count.
        cursor.claimed(a, 100, 100, Some((261, 340)));
        cursor.claimed(ClaimStart::HEAD, 100, 100, Some((7, 100)));
        assert_eq!(
            begin(&cursor, now),
            stretch(680, 750),
            "7/8 of the fewest, 80"
        );
        // A claim from the cursor that found nothing resets it.
        cursor.claimed(b, 100, 0, None);
        let opening = begin(&cursor, now);
        assert!(opening.is_head(), "a reset starts at the head");
        cursor.claimed(opening, 100, 100, Some((11, 110)));
        assert_eq!(
            next(&cursor, now),
            110,
            "and forgets the stretches handed out before it"
        );
        cursor.claimed(from(110), 100, 99, Some((111, 300)));
        assert!(
            begin(&cursor, now).is_head(),
            "a short batch without a stretch resets it too"
        );
    }

    #[test]
    fn a_stretch_that_held_less_than_a_batch_moves_on_and_lengthens_the_stretch() {
        let cursor = dense_cursor();
        let now = Instant::now();
        let [a, b] = [(); 2].map(|()| begin(&cursor, now));
        assert_eq!([a, b], [stretch(200, 288), stretch(288, 376)]);
        // The stretch held 40 up to 288: a batch needs 220 values there.
        cursor.claimed(a, 100, 40, Some((203, 288)));
        assert_eq!(
            begin(&cursor, now),
            stretch(376, 464),
            "the next starts after the stretches handed out, the fewest span still 100"
        );
        for _ in 0..SPANS {
            let start = begin(&cursor, now);
            // A later stretch handed out meanwhile: nothing is given back.
            let _later = begin(&cursor, now);
            cursor.claimed(start, 100, 40, Some((start.after + 1, start.end)));
        }
        let longer = begin(&cursor, now);
        assert_eq!(
            longer.end - longer.after,
            193,
            "7/8 of 220, once no recent batch needed fewer"
        );
    }

    #[test]
    fn a_claim_where_the_backlog_ends_gives_the_rest_back_and_counts_what_it_covered() {
        let cursor = dense_cursor();
        let now = Instant::now();
        let tail = begin(&cursor, now);
        assert_eq!(tail, stretch(200, 288));
        // The backlog ends at 210: ten deliveries, as dense as before.
        cursor.claimed(tail, 100, 10, Some((201, 210)));
        assert_eq!(
            begin(&cursor, now),
            stretch(210, 298),
            "events appended since may lie after 210: the next claim starts there"
        );
        for _ in 0..SPANS {
            let start = begin(&cursor, now);
            cursor.claimed(start, 100, 10, Some((start.after + 1, start.after + 10)));
        }
        let next = begin(&cursor, now);
        assert_eq!(
            next.end - next.after,
            88,
            "claims at the backlog's end do not lengthen the stretch"
        );
    }

    #[test]
    fn a_batch_that_ends_inside_its_stretch_gives_the_rest_back() {
        let cursor = ClaimCursor::new();
        let now = Instant::now();
        cursor.claimed(ClaimStart::HEAD, 10, 10, Some((1, 10)));
        let first = begin(&cursor, now);
        cursor.claimed(first, 10, 10, Some((11, 90)));
        let lone = begin(&cursor, now);
        assert_eq!(lone, stretch(90, 160));
        cursor.claimed(lone, 10, 10, Some((91, 120)));
        assert_eq!(
            begin(&cursor, now),
            stretch(120, 147),
            "nothing handed out since: the rest comes back"
        );
        let [a, b] = [(); 2].map(|()| begin(&cursor, now));
        cursor.claimed(a, 10, 10, Some((a.after + 1, a.after + 10)));
        assert_eq!(
            next(&cursor, now),
            b.end,
            "a later stretch was handed out: the next starts after it"
        );
    }

    /// One consumer's deliveries and the claims under way, for the cursor alone: a claim takes
    /// the lowest pending `event_seq` values after its start that no claim under way holds.
    struct Backlog {
        pending: BTreeSet<i64>,
        held: BTreeSet<i64>,
        /// Rows claims walked past because another claim held them.
        walked_past: usize,
    }

    impl Backlog {
        /// `rows` deliveries, the gap between two of them drawn from `gaps`.
        fn new(rows: usize, gaps: std::ops::RangeInclusive<i64>, seed: u64) -> Self {
            let mut random = fastrand::Rng::with_seed(seed);
            let mut seq = 0;
            let pending = (0..rows)
                .map(|_| {
                    seq += random.i64(gaps.clone());
                    seq
                })
                .collect();
            Self {
                pending,
                held: BTreeSet::new(),
                walked_past: 0,
            }
        }

        /// Up to `batch` rows of `start`'s stretch, lowest first.
        fn claim(&mut self, start: ClaimStart, batch: usize) -> Vec<i64> {
            let mut taken = Vec::new();
            for &seq in self.pending.range(start.after + 1..=start.end) {
                if taken.len() == batch {
                    break;
                }
                if self.held.contains(&seq) {
                    self.walked_past += 1;
                } else {
                    taken.push(seq);
                }
            }
            self.held.extend(&taken);
            taken
        }

        fn settle(&mut self, rows: &[i64]) {
            for seq in rows {
                self.pending.remove(seq);
                self.held.remove(seq);
            }
        }

        /// Pending rows no claim holds, below `seq`: left behind the cursor.
        fn behind(&self, seq: i64) -> usize {
            self.pending
                .range(..=seq)
                .filter(|seq| !self.held.contains(seq))
                .count()
        }
    }

    /// Drains `backlog` with `claims` claims of `batch` under way at once (started together,
    /// settled in turn), from the cursor (no periodic head scan is due) until a claim from it
    /// finds nothing. Returns the most rows ever left behind a claim's start.
    fn drain(backlog: &mut Backlog, claims: usize, batch: usize) -> usize {
        let cursor = ClaimCursor::new();
        let now = Instant::now();
        // The claims start together on a new cursor: one opens it, the others wait for it.
        let opening = begin(&cursor, now);
        assert!(opening.is_head());
        for _ in 1..claims {
            assert!(
                matches!(cursor.start_at(now), Next::Wait(_)),
                "a sibling waits for the claim that opens the cursor"
            );
        }
        let first = backlog.claim(opening, batch);
        backlog.settle(&first);
        let seqs = first.first().copied().zip(first.last().copied());
        cursor.claimed(opening, batch as u32, first.len(), seqs);
        let mut most_behind = 0;
        loop {
            let round: Vec<(ClaimStart, Vec<i64>)> = (0..claims)
                .map(|_| {
                    let start = begin(&cursor, now);
                    assert!(!start.is_head(), "no head scan is due");
                    most_behind = most_behind.max(backlog.behind(start.after));
                    (start, backlog.claim(start, batch))
                })
                .collect();
            for (start, rows) in &round {
                let seqs = rows.first().copied().zip(rows.last().copied());
                if !rows.is_empty() {
                    cursor.claimed(*start, batch as u32, rows.len(), seqs);
                }
                backlog.settle(rows);
            }
            if round.iter().any(|(_, rows)| rows.is_empty()) {
                return most_behind;
            }
        }
    }

    #[test]
    fn a_lone_worker_leaves_nothing_behind_however_the_deliveries_are_spread() {
        for seed in 1..=20 {
            let mut backlog = Backlog::new(20_000, 1..=9, seed);
            assert_eq!(drain(&mut backlog, 1, 100), 0, "seed {seed}");
            assert_eq!(backlog.walked_past, 0, "seed {seed}");
            assert!(
                backlog.pending.is_empty(),
                "seed {seed}: drained to the end"
            );
        }
    }

    #[test]
    fn claims_under_way_never_walk_past_each_other() {
        for gaps in [1..=1, 1..=9] {
            let mut backlog = Backlog::new(100_000, gaps.clone(), 7);
            let behind = drain(&mut backlog, 8, 100);
            // The batch that opened the cursor, claimed alone, measured the first stretch.
            assert_eq!(backlog.walked_past, 0, "gaps {gaps:?}");
            if gaps == (1..=1) {
                assert_eq!(behind, 0, "dense: nothing behind");
                assert!(backlog.pending.is_empty(), "dense: drained to the end");
            }
        }
        // The same rounds after one shared cursor: the n-th claim of a round walks past the
        // n - 1 batches before it, 2,800 rows a round.
        let mut shared = Backlog::new(100_000, 1..=1, 7);
        let mut after = HEAD;
        while !shared.pending.is_empty() {
            let round: Vec<Vec<i64>> = (0..8).map(|_| shared.claim(from(after), 100)).collect();
            for rows in &round {
                after = after.max(rows.last().copied().unwrap_or(HEAD));
                shared.settle(rows);
            }
        }
        assert_eq!(shared.walked_past, 2_800 * 125);
    }

    #[test]
    fn unevenly_spread_claims_under_way_leave_little_behind() {
        for seed in 1..=20 {
            let mut backlog = Backlog::new(50_000, 1..=9, seed);
            let most_behind = drain(&mut backlog, 8, 100);
            assert!(most_behind < 100, "seed {seed}: {most_behind} rows behind");
        }
    }

    #[test]
    fn the_head_is_scanned_again_after_the_interval() {
        let cursor = ClaimCursor::new();
        let now = Instant::now();
        let opening = begin(&cursor, now);
        assert!(opening.is_head());
        cursor.claimed(opening, 10, 10, Some((31, 40)));
        assert_eq!(next(&cursor, now + HEAD_SCAN_EVERY / 2), 40);
        let later = now + HEAD_SCAN_EVERY;
        assert!(begin(&cursor, later).is_head(), "a head scan is due");
        assert_eq!(
            next(&cursor, later),
            49,
            "and the next claim starts after the stretch handed out before it"
        );
    }

    #[test]
    fn a_costly_head_scan_spaces_out_the_next() {
        let cursor = ClaimCursor::new();
        let now = Instant::now();
        assert!(begin(&cursor, now).is_head());
        cursor.head_scanned(Duration::from_millis(50));
        cursor.claimed(ClaimStart::HEAD, 10, 10, Some((31, 40)));
        let waited = Duration::from_millis(50) * HEAD_SCAN_COST_FACTOR;
        assert!(waited > HEAD_SCAN_EVERY);
        assert_eq!(
            next(&cursor, now + HEAD_SCAN_EVERY),
            40,
            "the usual interval is not enough after a slow head scan"
        );
        assert!(begin(&cursor, now + waited).is_head());
        cursor.head_scanned(Duration::from_millis(1));
        assert!(
            begin(&cursor, now + waited + HEAD_SCAN_EVERY).is_head(),
            "a cheap head scan brings the usual interval back"
        );
    }

    #[test]
    fn claims_wait_for_the_one_that_opens_the_cursor() {
        let cursor = ClaimCursor::new();
        let now = Instant::now();
        let opening = begin(&cursor, now);
        assert!(opening.is_head());
        assert_eq!(cursor.start_at(now), Next::Wait(HEAD_SCAN_EVERY));
        let later = now + HEAD_SCAN_EVERY / 4;
        assert_eq!(
            cursor.start_at(later),
            Next::Wait(HEAD_SCAN_EVERY - HEAD_SCAN_EVERY / 4)
        );
        cursor.claimed(opening, 100, 100, Some((11, 110)));
        assert_eq!(
            begin(&cursor, later),
            stretch(110, 198),
            "then stretches, 7/8 of the opening batch's span"
        );

        // An opening claim that found nothing leaves the cursor at the head: the next opens it.
        let cursor = ClaimCursor::new();
        let opening = begin(&cursor, now);
        cursor.claimed(opening, 100, 0, None);
        assert!(begin(&cursor, now).is_head());

        // One that never reports (its claim failed) holds the others up for a while only.
        let cursor = ClaimCursor::new();
        let failed = begin(&cursor, now);
        assert!(matches!(cursor.start_at(now), Next::Wait(_)));
        let taken_over = begin(&cursor, now + HEAD_SCAN_EVERY);
        assert!(
            taken_over.is_head(),
            "after the wait a sibling opens the cursor itself"
        );
        // Reports of other claims from the head do not end the opening under way.
        cursor.claimed(failed, 100, 100, Some((1, 100)));
        cursor.claimed(ClaimStart::HEAD, 100, 100, Some((201, 300)));
        assert!(cursor.state().opening.is_some());
        assert_eq!(cursor.state().stretch(), 0, "nor count for the stretch");
        cursor.claimed(taken_over, 100, 100, Some((101, 200)));
        assert!(cursor.state().opening.is_none());
        assert_eq!(cursor.state().stretch(), 88);
    }

    #[test]
    fn the_wait_for_the_opening_claim_follows_the_last_head_scan() {
        let cursor = ClaimCursor::new();
        let now = Instant::now();
        cursor.head_scanned(Duration::from_millis(300));
        begin(&cursor, now);
        assert_eq!(cursor.start_at(now), Next::Wait(Duration::from_millis(600)));
        cursor.head_scanned(Duration::from_secs(5));
        assert_eq!(cursor.start_at(now), Next::Wait(OPENING_WAIT_MAX));
        cursor.head_scanned(Duration::ZERO);
        assert_eq!(cursor.start_at(now), Next::Wait(HEAD_SCAN_EVERY));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_claim_goes_on_when_the_opening_one_reports() {
        let cursor = ClaimCursor::new();
        let opening = cursor.start().await;
        assert!(opening.is_head());
        let began = Instant::now();
        let waiting = async {
            let start = cursor.start().await;
            (start, began.elapsed())
        };
        let reporting = async {
            tokio::time::sleep(HEAD_SCAN_EVERY / 4).await;
            cursor.claimed(opening, 100, 100, Some((1, 100)));
        };
        let ((start, waited), ()) = tokio::join!(waiting, reporting);
        assert_eq!(start, stretch(100, 188));
        assert_eq!(waited, HEAD_SCAN_EVERY / 4, "woken by the report");

        let cursor = ClaimCursor::new();
        assert!(cursor.start().await.is_head());
        let began = Instant::now();
        assert!(cursor.start().await.is_head(), "no report: it opens");
        assert_eq!(began.elapsed(), HEAD_SCAN_EVERY);
    }
}
