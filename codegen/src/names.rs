//! Identifier and value patterns of the contract format, shared by the format schema (what editors
//! check as people type) and the loader (which maps a pattern failure to its rule).

/// Event types: lower-case, dot-separated, at least two segments (`iu.born`).
pub const EVENT_TYPE_PATTERN: &str = r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$";
/// Consumers, producer classes, retry policies and topics: lower-case segments separated by dots;
/// segments after the first may start with a digit (`audit`, `default.transient.5x.30s.exp`).
pub const NAME_PATTERN: &str = r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$";
/// Executor classes: an executor kind, a dot, and lower-case segments separated by dots
/// (`notification.email`, `dot.pipeline.cut`).
pub const EXECUTOR_CLASS_PATTERN: &str =
    r"^(dot|sql|ai|human|external|notification|render)\.[a-z0-9_]+(\.[a-z0-9_]+)*$";
/// Schedules: lower-case snake case, at most 63 characters (`nightly_digest`); a schedule's
/// tick event is `cron.tick.<name>`.
pub const SCHEDULE_NAME_PATTERN: &str = r"^[a-z][a-z0-9_]{0,62}$";
/// Durations: a whole number and a unit (`250ms`, `30s`, `10m`, `2h`, `14d`).
pub const DURATION_PATTERN: &str = r"^[0-9]+(ms|s|m|h|d)$";
/// Semantic versions (semver.org's own expression, without a leading `v`).
pub const VERSION_PATTERN: &str = r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-((0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*))?(\+([0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*))?$";
/// Subscriptions: an event type, `@`, and a semver requirement (`iu.born@^1`).
pub const SUBSCRIPTION_PATTERN: &str = r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+@[^@\s][^@]*$";
/// Topic event patterns: an event type in which `*` stands for any run of characters.
pub const EVENT_PATTERN_PATTERN: &str = r"^[a-z0-9_.*]+$";
/// Topic keys: an envelope field or a payload field.
pub const TOPIC_KEY_PATTERN: &str = r"^(envelope\.(trace_id|correlation_id|causation_id|tenant_scope|order_key|producer_class)|payload\.[a-z_][a-z0-9_]*)$";
/// NATS subject prefixes of the relay: tokens of letters, digits, `_` and `-` separated by dots,
/// no wildcards (`evc`, `shop.events`).
pub const SUBJECT_PREFIX_PATTERN: &str = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$";
/// JetStream stream names: letters, digits, `_` and `-`, at most 64 (`EVC`).
pub const STREAM_NAME_PATTERN: &str = r"^[A-Za-z0-9_-]{1,64}$";
/// Payload field names used by `order_key` and topic filters.
pub const FIELD_PATTERN: &str = r"^[a-z_][a-z0-9_]*$";

/// What a name names, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// An event type.
    EventType,
    /// A consumer, producer class or topic.
    Name,
    /// A retry policy.
    Policy,
}

impl NameKind {
    /// The pattern names of this kind must match.
    pub fn pattern(self) -> &'static str {
        match self {
            Self::EventType => EVENT_TYPE_PATTERN,
            Self::Name | Self::Policy => NAME_PATTERN,
        }
    }
}

/// Whether `pattern` (glob with `*` for any run of characters) matches `event_type`.
pub fn glob_matches(pattern: &str, event_type: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = event_type.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(index) => rest = &rest[index + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The closest of `candidates` to `wanted`, when one is close enough to be a likely typo.
///
/// Dotted names are compared segment by segment (`order.payed` against `order.paid`), other
/// names whole. The candidate with the fewest edits (a character inserted, deleted, replaced, or
/// two neighbours swapped) wins; ties go to fewer changed segments, then to the longer prefix
/// shared with the first changed segment (typos rarely hit the start of a word), then to the
/// name in byte order. A changed segment is close enough when its edits are at most a third of
/// its length (two for short words) and fewer than the length of either side.
pub fn did_you_mean<'a>(
    wanted: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .filter_map(|candidate| closeness(wanted, candidate).map(|rank| (rank, candidate)))
        .min()
        .map(|(_, candidate)| candidate)
}

/// How far `candidate` is from `wanted`, smaller is closer: (edits, changed segments, shared
/// prefix of the first changed segment reversed); `None` when it is too far to suggest.
fn closeness(wanted: &str, candidate: &str) -> Option<(usize, usize, std::cmp::Reverse<usize>)> {
    let wanted_segments: Vec<&str> = wanted.split('.').collect();
    let candidate_segments: Vec<&str> = candidate.split('.').collect();
    let pairs: Vec<(&str, &str)> = if wanted_segments.len() == candidate_segments.len() {
        wanted_segments
            .into_iter()
            .zip(candidate_segments)
            .collect()
    } else {
        vec![(wanted, candidate)]
    };
    let (mut edits, mut changed, mut prefix) = (0, 0, None);
    for (want, have) in pairs.into_iter().filter(|(want, have)| want != have) {
        let distance = strsim::osa_distance(want, have);
        let (want_len, have_len) = (want.chars().count(), have.chars().count());
        if distance > (want_len / 3).max(2) || distance >= want_len.min(have_len) {
            return None;
        }
        edits += distance;
        changed += 1;
        prefix.get_or_insert_with(|| {
            want.chars()
                .zip(have.chars())
                .take_while(|(a, b)| a == b)
                .count()
        });
    }
    Some((edits, changed, std::cmp::Reverse(prefix.unwrap_or(0))))
}

/// A "did you mean" clause (`did you mean `x`?`) or a fallback listing the choices.
pub fn suggestion<'a>(
    wanted: &str,
    candidates: impl IntoIterator<Item = &'a str> + Clone,
) -> String {
    match did_you_mean(wanted, candidates.clone()) {
        Some(best) => format!("did you mean `{best}`?"),
        None => {
            let all: Vec<&str> = candidates.into_iter().collect();
            if all.is_empty() {
                "nothing is defined to choose from".to_owned()
            } else if all.len() <= 12 {
                format!("expected one of: {}", all.join(", "))
            } else {
                format!(
                    "expected one of: {}, ... ({} in all)",
                    all[..12].join(", "),
                    all.len()
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The executor class pattern lists exactly the executor kinds of the format: a kind added
    /// to one and not the other would make its classes fail or vanish.
    #[test]
    fn the_executor_class_pattern_names_every_executor_kind() {
        let listed: Vec<&str> = EXECUTOR_CLASS_PATTERN
            .trim_start_matches("^(")
            .split(')')
            .next()
            .unwrap_or_default()
            .split('|')
            .collect();
        let schema = serde_json::to_value(schemars::schema_for!(crate::format::ExecutorKind))
            .unwrap_or_default();
        // Documented variants are `oneOf` of consts; undocumented ones an `enum`.
        let kinds: Vec<&str> = schema["oneOf"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|variant| variant["const"].as_str())
            .chain(
                schema["enum"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(serde_json::Value::as_str),
            )
            .collect();
        assert!(!kinds.is_empty(), "{schema}");
        assert_eq!(listed, kinds);
    }

    #[test]
    fn glob_matches_prefix_suffix_and_exact() {
        assert!(glob_matches("iu.*", "iu.born"));
        assert!(!glob_matches("iu.*", "step.ready"));
        assert!(!glob_matches("*.failed", "dot.command_failed"));
        assert!(glob_matches("*failed", "dot.command_failed"));
        assert!(glob_matches("*", "anything.at_all"));
        assert!(glob_matches("step.ready", "step.ready"));
        assert!(!glob_matches("step.ready", "step.ready_now"));
        assert!(glob_matches("a.*.c*", "a.b.cd"));
        assert!(!glob_matches("ab*ba", "aba"));
    }

    #[test]
    fn did_you_mean_finds_typos_only() {
        let names = ["iu.born", "iu.edited", "step.ready"];
        assert_eq!(did_you_mean("iu.bron", names), Some("iu.born"));
        assert_eq!(did_you_mean("completely.else", names), None);
    }

    #[test]
    fn did_you_mean_ranks_by_edits_per_segment() {
        // Two edits each way: the longer shared prefix decides.
        let orders = ["order.placed", "order.paid", "order.shipped"];
        assert_eq!(did_you_mean("order.payed", orders), Some("order.paid"));
        assert_eq!(did_you_mean("order.plcaed", orders), Some("order.placed"));
        // One edit beats several, wherever the shared letters are.
        let steps = ["step.escalated", "step.failed", "step.ready"];
        assert_eq!(did_you_mean("step.eailed", steps), Some("step.failed"));
        // A changed segment count compares whole names.
        assert_eq!(did_you_mean("step.faile.d", steps), Some("step.failed"));
        assert_eq!(did_you_mean("step.failed.now.again", steps), None);
        assert_eq!(
            did_you_mean("stepfailed", ["step_failed"]),
            Some("step_failed")
        );
        // Short words are not rewritten wholesale.
        assert_eq!(did_you_mean("ab", ["cd"]), None);
        // Keys without dots.
        assert_eq!(
            did_you_mean("odering", ["ordering", "handler"]),
            Some("ordering")
        );
        assert_eq!(
            did_you_mean("additionalProperty", ["additionalProperties", "properties"]),
            Some("additionalProperties")
        );
    }
}
