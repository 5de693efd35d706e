//! Retry schedules: what the dispatcher does after a failed attempt, and how long it waits.
//!
//! [`RetryPolicy`] is the checked form of a [`RetryPolicyDescriptor`]. After attempt `n` (from 1)
//! fails, [`RetryPolicy::decide`] answers by failure class:
//!
//! | Class | Decision |
//! | --- | --- |
//! | [`FailureClass::Transient`] | retry after [`RetryPolicy::delay`] while `n < max_attempts`, the kind is not `no_retry` and `transient` is in `retry_on`; else dead |
//! | [`FailureClass::Permanent`], [`FailureClass::Poison`] | dead |
//! | [`FailureClass::Scope`], [`FailureClass::Schema`], [`FailureClass::Integrity`] | quarantined (never retried) |
//!
//! The nominal delay before attempt `n + 1`, by kind (`base` = `base_delay_ms`):
//!
//! | Kind | Delay after attempt `n` |
//! | --- | --- |
//! | `fixed_delay` | `base` |
//! | `exponential_backoff` | `base × 2^(n-1)` |
//! | `fibonacci` | `base × F(n)` with `F(1) = F(2) = 1`, `F(3) = 2`, ... |
//! | `no_retry` | never retried |
//!
//! then capped by `max_delay_ms` (arithmetic saturates), then jittered with a [`fastrand::Rng`]
//! (seedable, so tests are deterministic):
//!
//! | Jitter | Delay drawn from |
//! | --- | --- |
//! | `none` | exactly `d` |
//! | `full` | `[0, d]` |
//! | `equal` | `[d/2, d]` |
//! | `decorrelated` | `[base, min(cap, 3d)]` (or `d` when `3d < base`) |
//!
//! Decorrelated jitter usually grows from the previous *drawn* delay; the store keeps no drawn
//! delay, so the nominal delay `d` of the attempt stands in for it, which keeps the schedule
//! stateless and bounded by the cap.

use std::time::Duration;

use crate::handler::FailureClass;
use crate::registry::{DispatcherDescriptor, RetryPolicyDescriptor};

/// How the nominal delay grows with the attempt number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryKind {
    /// `base × 2^(n-1)`.
    ExponentialBackoff,
    /// `base`.
    FixedDelay,
    /// `base × F(n)`.
    Fibonacci,
    /// Never retried.
    NoRetry,
}

impl RetryKind {
    /// The kind called `name` in the contract format.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "exponential_backoff" => Self::ExponentialBackoff,
            "fixed_delay" => Self::FixedDelay,
            "fibonacci" => Self::Fibonacci,
            "no_retry" => Self::NoRetry,
            _ => return None,
        })
    }
}

/// How a nominal delay is randomised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// The nominal delay.
    None,
    /// Uniform in `[0, d]`.
    Full,
    /// Uniform in `[d/2, d]`.
    Equal,
    /// Uniform in `[base, min(cap, 3d)]`.
    Decorrelated,
}

impl Jitter {
    /// The jitter called `name` in the contract format.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "none" => Self::None,
            "full" => Self::Full,
            "equal" => Self::Equal,
            "decorrelated" => Self::Decorrelated,
            _ => return None,
        })
    }
}

/// What happens to a delivery after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Back to `pending`, due again after the delay.
    Retry(Duration),
    /// Dead-lettered (`dead`).
    Dead,
    /// Quarantined (`quarantined`), never retried.
    Quarantine,
}

/// A retry policy descriptor that names an unknown kind, jitter or failure class.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("retry policy {policy}: unknown {what} `{value}`")]
pub struct RetryPolicyError {
    /// The policy's name.
    pub policy: String,
    /// `kind`, `jitter` or `retry_on`.
    pub what: &'static str,
    /// The unknown value.
    pub value: String,
}

/// A checked retry policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The policy's name.
    pub name: String,
    /// How the delay grows.
    pub kind: RetryKind,
    /// The first delay in milliseconds.
    pub base_delay_ms: u64,
    /// The longest delay in milliseconds, if capped.
    pub max_delay_ms: Option<u64>,
    /// Attempts in all (the first included).
    pub max_attempts: u32,
    /// How delays are randomised.
    pub jitter: Jitter,
    /// The failure classes retried.
    pub retry_on: Vec<FailureClass>,
}

impl RetryPolicy {
    /// Checks a registry descriptor.
    ///
    /// # Errors
    /// [`RetryPolicyError`] naming an unknown kind, jitter or failure class.
    pub fn from_descriptor(descriptor: &RetryPolicyDescriptor) -> Result<Self, RetryPolicyError> {
        let unknown = |what, value: &str| RetryPolicyError {
            policy: descriptor.name.to_owned(),
            what,
            value: value.to_owned(),
        };
        let kind =
            RetryKind::parse(descriptor.kind).ok_or_else(|| unknown("kind", descriptor.kind))?;
        let jitter =
            Jitter::parse(descriptor.jitter).ok_or_else(|| unknown("jitter", descriptor.jitter))?;
        let retry_on = descriptor
            .retry_on
            .iter()
            .map(|class| FailureClass::parse(class).ok_or_else(|| unknown("retry_on", class)))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            name: descriptor.name.to_owned(),
            kind,
            base_delay_ms: descriptor.base_delay_ms,
            max_delay_ms: descriptor.max_delay_ms,
            max_attempts: descriptor.max_attempts,
            jitter,
            retry_on,
        })
    }

    /// The policy within the project's dispatcher ceilings (`dispatcher.max_attempts` and
    /// `dispatcher.backoff_ceiling` of `evc.yaml`): at most that many attempts, no delay longer
    /// than the ceiling.
    #[must_use]
    pub fn within(mut self, dispatcher: &DispatcherDescriptor) -> Self {
        self.max_attempts = self.max_attempts.min(dispatcher.max_attempts);
        let ceiling = dispatcher.backoff_ceiling_ms;
        self.max_delay_ms = Some(self.max_delay_ms.map_or(ceiling, |own| own.min(ceiling)));
        self
    }

    /// The nominal delay in milliseconds after attempt `attempt` (from 1) failed, capped, before
    /// jitter. `no_retry` has no delay (0).
    pub fn nominal_delay_ms(&self, attempt: u32) -> u64 {
        let n = attempt.max(1);
        let base = self.base_delay_ms;
        let delay = match self.kind {
            RetryKind::FixedDelay => base,
            RetryKind::ExponentialBackoff => {
                let factor = 1u64.checked_shl(n - 1).unwrap_or(u64::MAX);
                base.saturating_mul(factor)
            }
            RetryKind::Fibonacci => base.saturating_mul(fibonacci(n)),
            RetryKind::NoRetry => 0,
        };
        match self.max_delay_ms {
            Some(cap) => delay.min(cap),
            None => delay,
        }
    }

    /// The jittered delay after attempt `attempt` (from 1) failed.
    pub fn delay(&self, attempt: u32, rng: &mut fastrand::Rng) -> Duration {
        let nominal = self.nominal_delay_ms(attempt);
        let ms = match self.jitter {
            Jitter::None => nominal,
            Jitter::Full => rng.u64(0..=nominal),
            Jitter::Equal => rng.u64(nominal / 2..=nominal),
            Jitter::Decorrelated => {
                let high = nominal.saturating_mul(3);
                let high = self.max_delay_ms.map_or(high, |cap| high.min(cap));
                if high < self.base_delay_ms {
                    nominal
                } else {
                    rng.u64(self.base_delay_ms..=high)
                }
            }
        };
        Duration::from_millis(ms)
    }

    /// What follows when attempt `attempt` (from 1) failed with `class`.
    pub fn decide(
        &self,
        class: FailureClass,
        attempt: u32,
        rng: &mut fastrand::Rng,
    ) -> RetryDecision {
        match class {
            FailureClass::Scope | FailureClass::Schema | FailureClass::Integrity => {
                RetryDecision::Quarantine
            }
            FailureClass::Permanent | FailureClass::Poison => RetryDecision::Dead,
            FailureClass::Transient => {
                if self.kind != RetryKind::NoRetry
                    && attempt < self.max_attempts
                    && self.retry_on.contains(&class)
                {
                    RetryDecision::Retry(self.delay(attempt, rng))
                } else {
                    RetryDecision::Dead
                }
            }
        }
    }
}

/// `F(n)` with `F(1) = F(2) = 1`, saturating.
fn fibonacci(n: u32) -> u64 {
    let (mut a, mut b) = (1u64, 1u64);
    for _ in 2..n {
        (a, b) = (b, a.saturating_add(b));
    }
    if n <= 2 { 1 } else { b }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(
        kind: &'static str,
        base: u64,
        cap: Option<u64>,
        jitter: &'static str,
    ) -> RetryPolicy {
        RetryPolicy::from_descriptor(&RetryPolicyDescriptor {
            name: "p",
            kind,
            base_delay_ms: base,
            max_delay_ms: cap,
            max_attempts: 5,
            jitter,
            retry_on: &["transient"],
        })
        .expect("valid policy")
    }

    fn nominal(policy: &RetryPolicy) -> Vec<u64> {
        (1..=8).map(|n| policy.nominal_delay_ms(n)).collect()
    }

    #[test]
    fn dispatcher_ceilings_bound_a_policy() {
        let ceilings = DispatcherDescriptor {
            max_attempts: 3,
            backoff_ceiling_ms: 500,
            ..DispatcherDescriptor::FORMAT_DEFAULTS
        };
        let bounded = policy("exponential_backoff", 100, None, "none").within(&ceilings);
        assert_eq!(bounded.max_attempts, 3);
        assert_eq!(nominal(&bounded), [100, 200, 400, 500, 500, 500, 500, 500]);
        // A policy already inside the ceilings keeps its own limits.
        let inside = policy("fixed_delay", 200, Some(300), "none").within(&ceilings);
        assert_eq!((inside.max_attempts, inside.max_delay_ms), (3, Some(300)));
        let loose = DispatcherDescriptor::FORMAT_DEFAULTS;
        let own = policy("fixed_delay", 200, Some(300), "none").within(&loose);
        assert_eq!((own.max_attempts, own.max_delay_ms), (5, Some(300)));
    }

    #[test]
    fn nominal_delays_by_kind() {
        assert_eq!(nominal(&policy("fixed_delay", 200, None, "none")), [200; 8]);
        assert_eq!(
            nominal(&policy("exponential_backoff", 100, None, "none")),
            [100, 200, 400, 800, 1600, 3200, 6400, 12800]
        );
        assert_eq!(
            nominal(&policy("fibonacci", 100, None, "none")),
            [100, 100, 200, 300, 500, 800, 1300, 2100]
        );
        assert_eq!(nominal(&policy("no_retry", 100, None, "none")), [0; 8]);
    }

    #[test]
    fn delays_are_capped_and_saturate() {
        let exp = policy("exponential_backoff", 100, Some(1000), "none");
        assert_eq!(nominal(&exp), [100, 200, 400, 800, 1000, 1000, 1000, 1000]);
        assert_eq!(exp.nominal_delay_ms(200), 1000);
        let uncapped = policy("exponential_backoff", u64::MAX / 2, None, "none");
        assert_eq!(uncapped.nominal_delay_ms(100), u64::MAX);
        let fib = policy("fibonacci", 10, Some(250), "none");
        assert_eq!(fib.nominal_delay_ms(1000), 250);
        let fixed = policy("fixed_delay", 5000, Some(1000), "none");
        assert_eq!(fixed.nominal_delay_ms(1), 1000);
    }

    #[test]
    fn jitter_stays_within_its_bounds() {
        let mut rng = fastrand::Rng::with_seed(7);
        for attempt in 1..=6 {
            let full = policy("exponential_backoff", 100, Some(2000), "full");
            let equal = policy("exponential_backoff", 100, Some(2000), "equal");
            let decorrelated = policy("exponential_backoff", 100, Some(2000), "decorrelated");
            let d = full.nominal_delay_ms(attempt);
            let (mut low_full, mut high_full) = (u64::MAX, 0);
            for _ in 0..2_000 {
                let f = u64::try_from(full.delay(attempt, &mut rng).as_millis()).unwrap_or(0);
                assert!(f <= d, "full {f} > {d}");
                low_full = low_full.min(f);
                high_full = high_full.max(f);
                let e = u64::try_from(equal.delay(attempt, &mut rng).as_millis()).unwrap_or(0);
                assert!(
                    (d / 2..=d).contains(&e),
                    "equal {e} outside [{}, {d}]",
                    d / 2
                );
                let c =
                    u64::try_from(decorrelated.delay(attempt, &mut rng).as_millis()).unwrap_or(0);
                assert!(
                    (100..=(3 * d).min(2000)).contains(&c),
                    "decorrelated {c} outside [100, {}]",
                    (3 * d).min(2000)
                );
            }
            // The draws spread over the range, not one point.
            assert!(
                low_full < d / 4 && high_full > d * 3 / 4,
                "{low_full}..{high_full} of {d}"
            );
        }
        let none = policy("fixed_delay", 200, None, "none");
        assert_eq!(none.delay(3, &mut rng), Duration::from_millis(200));
    }

    #[test]
    fn seeded_jitter_repeats() {
        let p = policy("exponential_backoff", 100, Some(10_000), "full");
        let draw = |seed| {
            let mut rng = fastrand::Rng::with_seed(seed);
            (1..=5).map(|n| p.delay(n, &mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(draw(42), draw(42));
        assert_ne!(draw(42), draw(43));
    }

    #[test]
    fn decisions_by_class() {
        let mut rng = fastrand::Rng::with_seed(1);
        let p = policy("fixed_delay", 200, None, "none");
        let retry = RetryDecision::Retry(Duration::from_millis(200));
        assert_eq!(p.decide(FailureClass::Transient, 1, &mut rng), retry);
        assert_eq!(p.decide(FailureClass::Transient, 4, &mut rng), retry);
        assert_eq!(
            p.decide(FailureClass::Transient, 5, &mut rng),
            RetryDecision::Dead
        );
        for class in [FailureClass::Permanent, FailureClass::Poison] {
            assert_eq!(p.decide(class, 1, &mut rng), RetryDecision::Dead);
        }
        for class in [
            FailureClass::Scope,
            FailureClass::Schema,
            FailureClass::Integrity,
        ] {
            assert_eq!(p.decide(class, 1, &mut rng), RetryDecision::Quarantine);
        }
        let no_retry = policy("no_retry", 0, None, "none");
        assert_eq!(
            no_retry.decide(FailureClass::Transient, 1, &mut rng),
            RetryDecision::Dead
        );
        let not_transient = RetryPolicy {
            retry_on: Vec::new(),
            ..p
        };
        assert_eq!(
            not_transient.decide(FailureClass::Transient, 1, &mut rng),
            RetryDecision::Dead
        );
    }

    #[test]
    fn unknown_names_are_refused() {
        let descriptor = RetryPolicyDescriptor {
            name: "p",
            kind: "linear",
            base_delay_ms: 1,
            max_delay_ms: None,
            max_attempts: 1,
            jitter: "none",
            retry_on: &[],
        };
        let error = RetryPolicy::from_descriptor(&descriptor).expect_err("unknown kind");
        assert_eq!(error.what, "kind");
        let error = RetryPolicy::from_descriptor(&RetryPolicyDescriptor {
            kind: "fixed_delay",
            retry_on: &["flaky"],
            ..descriptor
        })
        .expect_err("unknown class");
        assert_eq!(
            error.to_string(),
            "retry policy p: unknown retry_on `flaky`"
        );
    }
}
