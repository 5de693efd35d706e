//! The cut-over gate of shadow mode (docs/runtime.md, "Cut-over gate"): what a consumer's
//! shadow runs must show before an operator may move it to `live`.
//!
//! While a consumer runs in shadow mode, its handler's intended effects are kept per delivery
//! (`evc_reconciliations`), and the legacy path that still does the work records the outcome
//! it produced for the same event ([`crate::Store::record_legacy_outcome`]). Both sides go
//! through one normaliser ([`normalise`]) and are compared per event; an operator may explain
//! a difference ([`crate::Operate::explain_difference`]). The store reads the shadow runs
//! since the consumer last entered shadow mode and this module turns them into a
//! [`CutoverReport`], the same way on every store.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;
use uuid::Uuid;

use crate::registry::{ConsumerDescriptor, ConsumerMode, CutoverGateDescriptor, Registry};
use crate::store::DispatchError;
use crate::store::Intent;

/// The status report counts a gated consumer's shadow runs and compared runs up to this, or
/// up to its gate's `min_reconciled` when that is more ([`count_cap`]).
pub const COUNTED_RUNS: u32 = 100_000;

/// Most differences a report lists (the counts cover all of them).
pub const MAX_LISTED_DIFFERENCES: usize = 50;

/// Most effects one legacy outcome may name.
pub const MAX_LEGACY_EFFECTS: usize = 1_000;

/// Longest effect key or outcome digest of a legacy outcome, in characters.
pub const MAX_LEGACY_TEXT_CHARS: usize = 500;

impl Intent {
    /// An effect under `effect_key` whose outcome has digest `outcome_digest`, as a handler
    /// presents it to [`crate::Store::record_effect`].
    pub fn new(effect_key: impl Into<String>, outcome_digest: impl Into<String>) -> Self {
        Self {
            effect_key: effect_key.into(),
            outcome_digest: outcome_digest.into(),
        }
    }

    /// An effect under `effect_key` whose outcome is the JSON value `outcome`: its digest is
    /// the SHA-256 of the value's canonical JSON (keys sorted, no whitespace), so the legacy
    /// path and the new handler that describe one outcome with equal JSON present one digest.
    pub fn of_outcome(effect_key: impl Into<String>, outcome: &Value) -> Self {
        Self::new(
            effect_key,
            crate::sha256_hex(crate::canonical_json(outcome).as_bytes()),
        )
    }
}

/// The one normaliser both sides of a comparison go through: effects by key, each with the
/// outcome digest it was first presented with (a live run records the first and skips the
/// repeats), the digest trimmed and in lower case. The order effects were presented in does
/// not count.
pub fn normalise(intents: &[Intent]) -> BTreeMap<&str, String> {
    let mut effects = BTreeMap::new();
    for intent in intents {
        effects
            .entry(intent.effect_key.as_str())
            .or_insert_with(|| intent.outcome_digest.trim().to_ascii_lowercase());
    }
    effects
}

/// How one shadow run differs from the legacy outcome of the same event.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Difference {
    /// The event.
    pub event_id: Uuid,
    /// Effects the legacy path produced that the shadow handler did not intend, by key.
    pub missing_in_shadow: Vec<String>,
    /// Effects the shadow handler intended that the legacy path did not produce, by key.
    pub missing_in_legacy: Vec<String>,
    /// Effects both have under one key, with different outcome digests.
    pub differing: Vec<String>,
    /// Whether an operator explained it.
    pub explained: bool,
}

/// `None` when the shadow run's intents and the legacy outcome normalise to the same effects;
/// otherwise how they differ.
pub fn compare(event_id: Uuid, shadow: &[Intent], legacy: &[Intent]) -> Option<Difference> {
    let shadow = normalise(shadow);
    let legacy = normalise(legacy);
    let mut difference = Difference {
        event_id,
        missing_in_shadow: Vec::new(),
        missing_in_legacy: Vec::new(),
        differing: Vec::new(),
        explained: false,
    };
    for (key, digest) in &legacy {
        match shadow.get(key) {
            None => difference.missing_in_shadow.push((*key).to_owned()),
            Some(intended) if intended != digest => difference.differing.push((*key).to_owned()),
            Some(_) => {}
        }
    }
    for key in shadow.keys() {
        if !legacy.contains_key(key) {
            difference.missing_in_legacy.push((*key).to_owned());
        }
    }
    let same = difference.missing_in_shadow.is_empty()
        && difference.missing_in_legacy.is_empty()
        && difference.differing.is_empty();
    (!same).then_some(difference)
}

/// What a cut-over gate asks for, as a report was judged against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct CutoverTerms {
    /// Compared shadow deliveries it needs.
    pub min_reconciled: u32,
    /// How long they must span, first to newest, in milliseconds.
    pub min_span_ms: u64,
    /// Unexplained differences it lets pass.
    pub max_unexplained: u32,
}

impl CutoverTerms {
    /// The span the gate needs, in the units contracts write durations in (`3d`).
    pub fn min_span_text(&self) -> String {
        #[allow(clippy::cast_precision_loss)]
        span_text(self.min_span_ms as f64 / 1_000.0)
    }
}

impl From<&CutoverGateDescriptor> for CutoverTerms {
    fn from(gate: &CutoverGateDescriptor) -> Self {
        Self {
            min_reconciled: gate.min_reconciled,
            min_span_ms: gate.min_span_ms,
            max_unexplained: gate.max_unexplained,
        }
    }
}

/// A gated consumer's progress, as the status report shows it: counts every reading role may
/// see (no intents, so no judgement of differences; [`crate::Operate::cutover_report`] judges).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct GateProgress {
    /// The consumer.
    pub consumer: String,
    /// Its gate.
    pub gate: CutoverTerms,
    /// When an operator last moved it to shadow (epoch seconds); `None`: every run counts.
    pub since: Option<f64>,
    /// Deliveries run in shadow mode since (counted up to [`COUNTED_RUNS`], or the gate's
    /// `min_reconciled` when that is more).
    pub shadow_runs: u64,
    /// Of those, the ones with a legacy outcome to compare with (counted as far).
    pub compared: u64,
}

/// What a consumer's shadow runs since it last entered shadow mode show, against its gate
/// ([`crate::Operate::cutover_report`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CutoverReport {
    /// The consumer.
    pub consumer: String,
    /// Its gate; `None`: its contract declares none, and a move to `live` is not gated.
    pub gate: Option<CutoverTerms>,
    /// When it last entered shadow mode (an operator's move, epoch seconds of the store's
    /// clock); `None`: no operator moved it there, and every shadow run counts.
    pub since: Option<f64>,
    /// Deliveries its handler ran in shadow mode since (the newest generation of each).
    pub shadow_runs: u64,
    /// Of those, the ones compared: the legacy path recorded an outcome for the event.
    pub reconciled: u64,
    /// Compared runs whose effects were the legacy outcome's.
    pub matched: u64,
    /// Compared runs that differed and that an operator explained.
    pub explained: u64,
    /// Compared runs that differed, unexplained.
    pub unexplained: u64,
    /// Seconds from the first to the newest compared run.
    pub span_seconds: f64,
    /// The differences, unexplained first, oldest first, at most [`MAX_LISTED_DIFFERENCES`].
    pub differences: Vec<Difference>,
    /// Why the gate does not pass yet, one sentence each; empty when it passes.
    pub shortfalls: Vec<String>,
}

impl CutoverReport {
    /// Whether a move to `live` may go ahead: no gate, or a gate with no shortfall.
    pub fn passed(&self) -> bool {
        self.shortfalls.is_empty()
    }

    /// The compared runs' span in the units contracts write durations in (`1d 2h`).
    pub fn span_text(&self) -> String {
        span_text(self.span_seconds)
    }
}

/// Whether a move to `live` from `current` is judged by the gate: from `shadow`, and from
/// `off` when the mode before it was `shadow` (the newest mode other than `off` an operator
/// set, `last_active`, else the contract's, `declared`), so a detour through `off` does not
/// skip the gate while a live consumer switched off for a while goes back without evidence.
pub(in crate::store) fn gated(
    current: ConsumerMode,
    last_active: Option<ConsumerMode>,
    declared: ConsumerMode,
) -> bool {
    match current {
        ConsumerMode::Live => false,
        ConsumerMode::Shadow => true,
        ConsumerMode::Off => last_active.unwrap_or(declared) == ConsumerMode::Shadow,
    }
}

/// The gate `registry` declares for `consumer` ([`DispatchError::UnknownConsumer`] when it
/// has no such consumer).
pub(in crate::store) fn terms_of(
    registry: &Registry,
    consumer: &str,
) -> Result<Option<CutoverTerms>, DispatchError> {
    registry
        .consumer(consumer)
        .ok_or_else(|| DispatchError::UnknownConsumer(consumer.to_owned()))?;
    Ok(registry.cutover_gate(consumer).map(CutoverTerms::from))
}

/// The checks of a legacy outcome before the store reads anything: the consumer is
/// registered and the outcome can be recorded as it is. Returns the consumer.
pub(in crate::store) fn legacy_consumer<'r>(
    registry: &'r Registry,
    consumer: &str,
    outcome: &[Intent],
) -> Result<&'r ConsumerDescriptor, DispatchError> {
    let descriptor = registry
        .consumer(consumer)
        .ok_or_else(|| DispatchError::UnknownConsumer(consumer.to_owned()))?;
    if let Some(refusal) = check_outcome(outcome) {
        return Err(DispatchError::InvalidOutcome(refusal));
    }
    Ok(descriptor)
}

/// The legacy outcome as the stores keep it, once `event` (type and version, as the session
/// sees it) is one `consumer` receives: [`DispatchError::NotDelivered`] otherwise.
pub(in crate::store) fn legacy_row(
    consumer: &ConsumerDescriptor,
    event_id: Uuid,
    event: Option<(String, String)>,
    outcome: &[Intent],
) -> Result<String, DispatchError> {
    let receives = event.is_some_and(|(event_type, version)| {
        consumer
            .subscriptions
            .iter()
            .any(|s| s.event == event_type && s.versions.contains(&version.as_str()))
    });
    if !receives {
        return Err(DispatchError::NotDelivered {
            consumer: consumer.name.to_owned(),
            event_id,
        });
    }
    serde_json::to_string(outcome)
        .map_err(|error| DispatchError::Database(sqlx::Error::Encode(Box::new(error))))
}

/// How far the status report counts the runs of a consumer with `gate`.
pub(in crate::store) fn count_cap(gate: CutoverTerms) -> i64 {
    i64::from(gate.min_reconciled.max(COUNTED_RUNS))
}

/// A gate's progress from the store's counts (since, shadow runs, compared).
pub(in crate::store) fn progress(
    consumer: &str,
    gate: CutoverTerms,
    (since, shadow_runs, compared): (Option<f64>, i64, i64),
) -> GateProgress {
    GateProgress {
        consumer: consumer.to_owned(),
        gate,
        since,
        shadow_runs: u64::try_from(shadow_runs).unwrap_or(0),
        compared: u64::try_from(compared).unwrap_or(0),
    }
}

/// Why an event's difference cannot be explained: it has none in the window, or it was
/// explained in it already. `None` when it can.
pub(in crate::store) fn unexplainable(
    consumer: &str,
    event_id: Uuid,
    run: &CutoverReport,
) -> Option<String> {
    if run.matched + run.explained + run.unexplained == 0 {
        return Some(no_difference(consumer, event_id, run));
    }
    if run.matched > 0 {
        return Some(format!(
            "consumer {consumer}'s shadow run of event {event_id} matches the legacy outcome: \
             there is no difference to explain"
        ));
    }
    if run.explained > 0 {
        return Some(format!(
            "the difference of consumer {consumer}'s shadow run of event {event_id} is \
             explained already"
        ));
    }
    None
}

/// One shadow run as a store reads it for a gate: the intents of the newest generation of one
/// event's delivery, the legacy outcome of the event if one was recorded, and whether an
/// operator explained a difference.
#[derive(Debug)]
pub(in crate::store) struct ShadowRun {
    pub(in crate::store) event_id: Uuid,
    pub(in crate::store) intended: Vec<Intent>,
    pub(in crate::store) legacy: Option<Vec<Intent>>,
    pub(in crate::store) explained: bool,
    /// Epoch seconds.
    pub(in crate::store) recorded_at: f64,
}

impl ShadowRun {
    /// A run from a store's row: the intents and the legacy outcome as JSON lists.
    ///
    /// # Errors
    /// When either list is not a list of effects (a row written by hand).
    pub(in crate::store) fn of_row(
        event_id: Uuid,
        intended: &str,
        legacy: Option<&str>,
        explained: bool,
        recorded_at: f64,
    ) -> Result<Self, sqlx::Error> {
        Ok(Self {
            event_id,
            intended: intents_of(intended)?,
            legacy: legacy.map(intents_of).transpose()?,
            explained,
            recorded_at,
        })
    }
}

/// The report of `consumer`'s `runs` (since `since`) against `gate`.
pub(in crate::store) fn report(
    consumer: &str,
    gate: Option<CutoverTerms>,
    since: Option<f64>,
    runs: &[ShadowRun],
) -> CutoverReport {
    let mut report = CutoverReport {
        consumer: consumer.to_owned(),
        gate,
        since,
        shadow_runs: runs.len() as u64,
        reconciled: 0,
        matched: 0,
        explained: 0,
        unexplained: 0,
        span_seconds: 0.0,
        differences: Vec::new(),
        shortfalls: Vec::new(),
    };
    let mut first: Option<f64> = None;
    let mut newest: Option<f64> = None;
    let mut differences = Vec::new();
    for run in runs {
        let Some(legacy) = &run.legacy else {
            continue;
        };
        report.reconciled += 1;
        first = Some(first.map_or(run.recorded_at, |f| f.min(run.recorded_at)));
        newest = Some(newest.map_or(run.recorded_at, |n| n.max(run.recorded_at)));
        match compare(run.event_id, &run.intended, legacy) {
            None => report.matched += 1,
            Some(mut difference) => {
                difference.explained = run.explained;
                if run.explained {
                    report.explained += 1;
                } else {
                    report.unexplained += 1;
                }
                differences.push((run.recorded_at, difference));
            }
        }
    }
    report.span_seconds = match (first, newest) {
        (Some(first), Some(newest)) => (newest - first).max(0.0),
        _ => 0.0,
    };
    differences.sort_by(|a, b| a.1.explained.cmp(&b.1.explained).then(a.0.total_cmp(&b.0)));
    report.differences = differences
        .into_iter()
        .take(MAX_LISTED_DIFFERENCES)
        .map(|(_, difference)| difference)
        .collect();
    if let Some(gate) = gate {
        report.shortfalls = shortfalls(&report, &gate);
    }
    report
}

fn shortfalls(report: &CutoverReport, gate: &CutoverTerms) -> Vec<String> {
    let mut shortfalls = Vec::new();
    if report.reconciled < u64::from(gate.min_reconciled) {
        let mut text = format!(
            "{} of the {} compared deliveries the gate needs",
            report.reconciled, gate.min_reconciled
        );
        let waiting = report.shadow_runs - report.reconciled;
        if waiting > 0 {
            let _ = write!(
                text,
                " ({waiting} shadow run(s) wait for the legacy path's outcome)"
            );
        }
        shortfalls.push(text);
    }
    #[allow(clippy::cast_precision_loss)]
    let min_span = gate.min_span_ms as f64 / 1_000.0;
    if report.span_seconds < min_span {
        shortfalls.push(format!(
            "the compared deliveries span {}, the gate needs {}",
            span_text(report.span_seconds),
            span_text(min_span)
        ));
    }
    if report.unexplained > u64::from(gate.max_unexplained) {
        shortfalls.push(format!(
            "{} unexplained difference(s), the gate lets {} pass (explain each with `evc \
             consumer explain`)",
            report.unexplained, gate.max_unexplained
        ));
    }
    shortfalls
}

/// Whole seconds in the units contracts write durations in (`3d 2h`, `0s`).
fn span_text(seconds: f64) -> String {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let mut rest = seconds.max(0.0).floor() as u64;
    let mut parts = Vec::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if rest >= size {
            parts.push(format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    if parts.is_empty() {
        "0s".to_owned()
    } else {
        parts.join(" ")
    }
}

/// The intents of a JSON list as the stores keep them (`[{"effect_key", "outcome_digest"}]`).
///
/// # Errors
/// When the text is not such a list (a row written by hand).
fn intents_of(text: &str) -> Result<Vec<Intent>, sqlx::Error> {
    serde_json::from_str(text).map_err(|_| {
        sqlx::Error::Decode("a shadow run or legacy outcome is not a list of effects".into())
    })
}

/// Why a legacy outcome cannot be recorded as it is: too many effects, an empty or too long
/// key or digest. `None` when it can.
fn check_outcome(outcome: &[Intent]) -> Option<String> {
    if outcome.len() > MAX_LEGACY_EFFECTS {
        return Some(format!(
            "a legacy outcome names {} effects; at most {MAX_LEGACY_EFFECTS} are allowed",
            outcome.len()
        ));
    }
    for intent in outcome {
        for (what, text) in [
            ("effect key", &intent.effect_key),
            ("outcome digest", &intent.outcome_digest),
        ] {
            let chars = text.chars().count();
            if text.trim().is_empty() || chars > MAX_LEGACY_TEXT_CHARS {
                return Some(format!(
                    "a legacy outcome's {what} must have 1 to {MAX_LEGACY_TEXT_CHARS} \
                     characters, not blank (it has {chars})"
                ));
            }
        }
    }
    None
}

/// Why an event has nothing to explain: no shadow run since the consumer entered shadow mode,
/// or no legacy outcome to compare it with.
fn no_difference(consumer: &str, event_id: Uuid, run: &CutoverReport) -> String {
    if run.shadow_runs == 0 {
        format!(
            "consumer {consumer} has no shadow run of event {event_id} since it entered shadow \
             mode: there is no difference to explain"
        )
    } else {
        format!(
            "no legacy outcome was recorded for event {event_id} and consumer {consumer}: \
             there is no difference to explain"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent(key: &str, digest: &str) -> Intent {
        Intent::new(key, digest)
    }

    #[test]
    fn the_normaliser_ignores_order_case_and_repeats() {
        let shadow = [intent("b", "AB"), intent("a", "01"), intent("b", "ff")];
        let legacy = [intent("a", " 01"), intent("b", "ab")];
        assert_eq!(normalise(&shadow), normalise(&legacy));
        assert_eq!(compare(Uuid::nil(), &shadow, &legacy), None);
    }

    #[test]
    fn differences_name_the_keys_on_each_side() {
        let shadow = [intent("a", "01"), intent("b", "02"), intent("c", "03")];
        let legacy = [intent("a", "01"), intent("b", "99"), intent("d", "04")];
        let difference = compare(Uuid::nil(), &shadow, &legacy).expect("they differ");
        assert_eq!(difference.missing_in_shadow, ["d"]);
        assert_eq!(difference.missing_in_legacy, ["c"]);
        assert_eq!(difference.differing, ["b"]);
    }

    #[test]
    fn equal_json_outcomes_have_one_digest() {
        let a = Intent::of_outcome("k", &serde_json::json!({"to": "x", "n": 1}));
        let b = Intent::of_outcome("k", &serde_json::json!({"n": 1, "to": "x"}));
        assert_eq!(a, b);
        assert_ne!(
            a,
            Intent::of_outcome("k", &serde_json::json!({"n": 2, "to": "x"}))
        );
    }

    fn run(at: f64, legacy: Option<&[Intent]>, intended: &[Intent], explained: bool) -> ShadowRun {
        ShadowRun {
            event_id: Uuid::now_v7(),
            intended: intended.to_vec(),
            legacy: legacy.map(<[Intent]>::to_vec),
            explained,
            recorded_at: at,
        }
    }

    #[test]
    fn a_gate_counts_compared_runs_their_span_and_unexplained_differences() {
        let gate = CutoverTerms {
            min_reconciled: 3,
            min_span_ms: 10_000,
            max_unexplained: 0,
        };
        let same = [intent("k", "01")];
        let other = [intent("k", "02")];
        let runs = [
            run(100.0, Some(&same), &same, false),
            run(104.0, None, &same, false),
            run(105.0, Some(&other), &same, false),
        ];
        let report = report("c", Some(gate), None, &runs);
        assert_eq!(
            (report.shadow_runs, report.reconciled, report.matched),
            (3, 2, 1)
        );
        assert_eq!((report.explained, report.unexplained), (0, 1));
        assert!((report.span_seconds - 5.0).abs() < f64::EPSILON);
        assert_eq!(report.shortfalls.len(), 3, "{:?}", report.shortfalls);
        assert!(!report.passed());

        let runs = [
            run(100.0, Some(&same), &same, false),
            run(104.0, Some(&same), &same, false),
            run(110.0, Some(&other), &same, true),
        ];
        let report = report_of(gate, &runs);
        assert!(report.passed(), "{:?}", report.shortfalls);
        assert_eq!(report.differences.len(), 1);
        assert!(report.differences[0].explained);
    }

    fn report_of(gate: CutoverTerms, runs: &[ShadowRun]) -> CutoverReport {
        report("c", Some(gate), None, runs)
    }

    #[test]
    fn a_move_to_live_is_gated_from_shadow_and_from_off_after_shadow() {
        use ConsumerMode::{Live, Off, Shadow};
        assert!(!gated(Live, None, Shadow));
        assert!(gated(Shadow, None, Live));
        assert!(gated(Off, None, Shadow));
        assert!(gated(Off, Some(Shadow), Live));
        assert!(!gated(Off, Some(Live), Shadow));
        assert!(!gated(Off, None, Live));
    }

    #[test]
    fn the_status_counts_at_least_as_far_as_the_gate_needs() {
        let gate = |min_reconciled| CutoverTerms {
            min_reconciled,
            min_span_ms: 0,
            max_unexplained: 0,
        };
        assert_eq!(count_cap(gate(30)), i64::from(COUNTED_RUNS));
        assert_eq!(count_cap(gate(250_000)), 250_000);
    }

    #[test]
    fn spans_read_like_contract_durations() {
        assert_eq!(span_text(0.4), "0s");
        assert_eq!(span_text(90.0), "1m 30s");
        assert_eq!(span_text(3.0 * 86_400.0 + 7_200.0), "3d 2h");
    }

    #[test]
    fn without_a_gate_a_report_passes() {
        let other = [intent("k", "02")];
        let runs = [run(1.0, Some(&other), &[], false)];
        let report = report("c", None, None, &runs);
        assert_eq!(report.unexplained, 1);
        assert!(report.passed());
    }

    #[test]
    fn outcomes_that_cannot_be_recorded_are_refused() {
        assert!(check_outcome(&[intent("k", "01")]).is_none());
        assert!(check_outcome(&[intent(" ", "01")]).is_some());
        assert!(check_outcome(&[intent("k", &"0".repeat(501))]).is_some());
        let many: Vec<Intent> = (0..=MAX_LEGACY_EFFECTS)
            .map(|n| intent(&n.to_string(), "01"))
            .collect();
        assert!(check_outcome(&many).is_some());
    }
}
