//! The versioning rules (docs/compat.md) over two contract sets: which versions are compared
//! in which direction (the event type's mode), in-place edits, bumps, removals and migration
//! policies. Schema comparisons go through [`super::judge`].

use std::collections::BTreeSet;

use semver::Version;
use serde_json::Value;

use super::report::{CompatRule, Direction, EventSummary, Finding, Report, Witness};
use super::{Judgement, Options, judge};
use crate::model::{CompatMode, ContentModel, ContractSet, EventStatus, EventType, EventVersion};
use crate::source::Location;
use crate::yaml::escape_pointer_segment;

/// Keywords that only document a schema; editing them in a published version is allowed.
const DOCS_ONLY: &[&str] = &["description", "title", "examples", "$comment"];

/// The bump a change needs, smallest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Bump {
    None,
    Patch,
    Minor,
    Major,
}

impl Bump {
    fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Patch => "patch",
            Self::Minor => "minor",
            Self::Major => "major",
        }
    }

    fn between(old: &Version, new: &Version) -> Self {
        if new.major != old.major {
            Self::Major
        } else if new.minor != old.minor {
            Self::Minor
        } else if new.patch != old.patch || new.pre != old.pre {
            Self::Patch
        } else {
            Self::None
        }
    }
}

pub(super) fn compare(
    base: &ContractSet,
    head: &ContractSet,
    base_label: &str,
    head_label: &str,
) -> Report {
    let names: Vec<&String> = base
        .events
        .keys()
        .chain(head.events.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    // Event types are judged independently: spread them over the cores, keep name order.
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(8);
    let chunk = names.len().div_ceil(threads).max(1);
    let parts: Vec<(Vec<Finding>, Vec<EventSummary>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = names
            .chunks(chunk)
            .map(|names| scope.spawn(move || compare_events(base, head, names)))
            .collect();
        workers
            .into_iter()
            .map(|worker| {
                worker
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut findings = Vec::new();
    let mut events = Vec::new();
    for (part_findings, part_events) in parts {
        findings.extend(part_findings);
        events.extend(part_events);
    }
    findings.extend(removed_executor_classes(base, head));
    findings.sort_by(|a, b| {
        (
            &a.event,
            &a.version,
            a.severity,
            a.rule,
            &a.pointer,
            &a.base_version,
        )
            .cmp(&(
                &b.event,
                &b.version,
                b.severity,
                b.rule,
                &b.pointer,
                &b.base_version,
            ))
    });
    Report {
        base: base_label.to_owned(),
        head: head_label.to_owned(),
        findings,
        events,
    }
}

/// Executor classes the head removed while the base still had them active: a class is
/// retired (`active: false`, which `evc check` allows only once no consumer names it) before it
/// is removed, so every deployment stops running it first. A finding names `executor class
/// <name>` where others name an event type (no event type has a space in its name).
fn removed_executor_classes(base: &ContractSet, head: &ContractSet) -> Vec<Finding> {
    base.executor_classes
        .values()
        .filter(|class| class.active && !head.executor_classes.contains_key(&class.name))
        .map(|class| {
            let name = &class.name;
            Finding {
                rule: CompatRule::ExecutorClassRemovedWhileActive.id(),
                severity: CompatRule::ExecutorClassRemovedWhileActive.severity(),
                event: format!("executor class {name}"),
                base_version: None,
                version: None,
                direction: None,
                pointer: None,
                // The file only: a line of the base would point into the head's file.
                location: Location::file(crate::loader::EXECUTOR_CLASSES_FILE),
                message: format!(
                    "executor class {name} was removed, but the base does not retire it \
                     (`active: false`); deployments still running it lose their class"
                ),
                fix: format!(
                    "restore {name} with `active: false`, merge that once no consumer names it, \
                     then remove it"
                ),
                consumers: base
                    .consumers
                    .values()
                    .filter(|consumer| consumer.executor_class.as_deref() == Some(name))
                    .map(|consumer| consumer.name.clone())
                    .collect(),
                witness: None,
            }
        })
        .collect()
}

/// Judges the event types `names` of either side.
fn compare_events(
    base: &ContractSet,
    head: &ContractSet,
    names: &[&String],
) -> (Vec<Finding>, Vec<EventSummary>) {
    let mut findings = Vec::new();
    let mut events = Vec::new();
    for &name in names {
        match (base.events.get(name), head.events.get(name)) {
            (Some(old), None) => {
                if old.status != EventStatus::Deprecated {
                    findings.push(Finding {
                        rule: CompatRule::EventRemovedWithoutDeprecation.id(),
                        severity: CompatRule::EventRemovedWithoutDeprecation.severity(),
                        event: name.clone(),
                        base_version: old.versions.last().map(|v| v.version.to_string()),
                        version: None,
                        direction: None,
                        pointer: None,
                        location: Location::file(old.file.clone()),
                        message: format!(
                            "event type {name} was removed, but the base does not mark it `status: deprecated`; producers and consumers built against it break"
                        ),
                        fix: format!(
                            "restore {name} with `status: deprecated`, merge that, move every producer and subscriber off it, then remove it"
                        ),
                        consumers: subscribers(base, name, None),
                        witness: None,
                    });
                }
                events.push(EventSummary {
                    event: name.clone(),
                    mode: "removed".to_owned(),
                    checked: Vec::new(),
                    suggested_bump: None,
                });
            }
            (None, Some(new)) => events.push(EventSummary {
                event: name.clone(),
                mode: mode_name(new.compat).to_owned(),
                checked: Vec::new(),
                suggested_bump: None,
            }),
            (Some(old), Some(new)) => {
                events.push(compare_event(head, old, new, &mut findings));
            }
            (None, None) => {}
        }
    }
    (findings, events)
}

fn compare_event(
    head: &ContractSet,
    old: &EventType,
    new: &EventType,
    findings: &mut Vec<Finding>,
) -> EventSummary {
    let name = &new.name;
    let mut checked = Vec::new();
    let mut suggested = None;
    let content = writer_content(old, new);

    if strength(new.compat) < strength(old.compat) {
        findings.push(finding(
            CompatRule::CompatModeWeakened,
            new,
            None,
            None,
            None,
            head.locate(&new.file, "/compat"),
            format!(
                "the compatibility mode of {name} went from {} to {}; fewer changes are checked from now on",
                mode_name(old.compat),
                mode_name(new.compat)
            ),
            format!("keep `compat: {}` unless every team that consumes {name} agreed", mode_name(old.compat)),
            Vec::new(),
        ));
    }

    // Published versions: unchanged, or removed.
    for published in &old.versions {
        match new.versions.iter().find(|v| v.version == published.version) {
            Some(current) => {
                if let Some(pointer) = first_difference(&published.schema, &current.schema, "") {
                    let location = locate_schema(head, new, current, &pointer);
                    findings.push(finding(
                        CompatRule::VersionEditedInPlace,
                        new,
                        Some(&published.version),
                        Some(&current.version),
                        Some(pointer.clone()),
                        location,
                        format!(
                            "{name} {} is published and its schema changed at #{pointer}; payloads already written and code already generated for it no longer match",
                            current.version
                        ),
                        format!(
                            "restore {name} {} as it was and put the change in a new version (the suggested bump is in the summary)",
                            current.version
                        ),
                        subscribers(head, name, Some(&current.version)),
                    ));
                }
            }
            None => {
                let consumers = subscribers(head, name, Some(&published.version));
                let rule = if consumers.is_empty() {
                    CompatRule::VersionRetired
                } else {
                    CompatRule::VersionRemoved
                };
                findings.push(finding(
                    rule,
                    new,
                    Some(&published.version),
                    None,
                    None,
                    head.locate(&new.file, "/versions"),
                    if consumers.is_empty() {
                        format!("{name} {} was removed; no consumer subscribes to it any more", published.version)
                    } else {
                        format!(
                            "{name} {} was removed while consumers still subscribe to it",
                            published.version
                        )
                    },
                    if consumers.is_empty() {
                        "make sure no producer still emits it and no stored event needs replaying with it".to_owned()
                    } else {
                        format!(
                            "restore {name} {}, or move the listed consumers to a requirement that excludes it first",
                            published.version
                        )
                    },
                    consumers,
                ));
            }
        }
    }

    // New versions, oldest first, against their predecessors.
    let added: Vec<&EventVersion> = new
        .versions
        .iter()
        .filter(|v| {
            !old.versions
                .iter()
                .any(|published| published.version == v.version)
        })
        .collect();
    for version in added {
        let later_published = old
            .versions
            .iter()
            .filter(|published| published.version.major == version.version.major)
            .find(|published| published.version > version.version);
        if let Some(later) = later_published {
            findings.push(finding(
                CompatRule::VersionOutOfOrder,
                new,
                Some(&later.version),
                Some(&version.version),
                None,
                head.locate(&new.file, &format!("{}/version", version.pointer)),
                format!(
                    "{name} {} is new but sorts below the published {}; producers emit the newest version of a major",
                    version.version, later.version
                ),
                format!("number the new version above {}", later.version),
                Vec::new(),
            ));
            continue;
        }
        let earlier: Vec<&EventVersion> = new
            .versions
            .iter()
            .filter(|v| v.version < version.version)
            .collect();
        let Some(previous) = earlier.last().copied() else {
            continue;
        };
        let actual = Bump::between(&previous.version, &version.version);
        let needed = needed_bump(new.compat, content, previous, version);
        suggested = Some(suggested.map_or(needed, |s: Bump| s.max(needed)));

        if version.version.major != previous.version.major {
            checked.push(format!(
                "{} (major bump from {})",
                version.version, previous.version
            ));
            major_bump(head, new, previous, version, needed, findings);
            continue;
        }
        let targets: Vec<&EventVersion> = if is_transitive(new.compat) {
            earlier
                .iter()
                .copied()
                .filter(|v| v.version.major == version.version.major)
                .collect()
        } else {
            vec![previous]
        };
        for target in targets {
            checked.push(format!("{} against {}", version.version, target.version));
            for direction in directions(new.compat) {
                let judgements = judge_versions(content, target, version, direction, true);
                for judgement in judgements {
                    findings.push(schema_finding(
                        head, new, target, version, direction, judgement,
                    ));
                }
            }
        }
        if needed == Bump::Minor && actual < Bump::Minor {
            findings.push(finding(
                CompatRule::BumpTooSmall,
                new,
                Some(&previous.version),
                Some(&version.version),
                None,
                head.locate(&new.file, &format!("{}/version", version.pointer)),
                format!(
                    "{name} {} changes the schema of {} but is only a {} bump",
                    version.version,
                    previous.version,
                    actual.as_str()
                ),
                format!(
                    "use {}.{}.0: a schema change needs at least a minor bump",
                    previous.version.major,
                    previous.version.minor + 1
                ),
                Vec::new(),
            ));
        } else if actual != needed {
            findings.push(bump_note(new, previous, version, needed, actual, head));
        }
    }
    EventSummary {
        event: name.clone(),
        mode: mode_name(new.compat).to_owned(),
        checked,
        suggested_bump: suggested.map(|bump| bump.as_str().to_owned()),
    }
}

/// A major bump: a new contract consumers opt into, not compared with the old major. The
/// loader already refused it unless the mode is `breaking_with_policy` with a
/// `migration_policy` (MAJOR_BUMP_NOT_ALLOWED, MISSING_MIGRATION_POLICY), since the head must
/// pass `evc check`; what is left to say is whether a smaller bump would have done.
fn major_bump(
    head: &ContractSet,
    event: &EventType,
    previous: &EventVersion,
    version: &EventVersion,
    needed: Bump,
    findings: &mut Vec<Finding>,
) {
    if needed < Bump::Major {
        findings.push(bump_note(
            event,
            previous,
            version,
            needed,
            Bump::Major,
            head,
        ));
    }
}

fn bump_note(
    event: &EventType,
    previous: &EventVersion,
    version: &EventVersion,
    needed: Bump,
    actual: Bump,
    head: &ContractSet,
) -> Finding {
    let mode = mode_name(event.compat);
    let advice = match needed {
        Bump::None | Bump::Patch => "only documentation changed: a patch bump is enough".to_owned(),
        Bump::Minor => {
            format!("the schema changed compatibly under `compat: {mode}`: a minor bump")
        }
        Bump::Major => format!(
            "the change is incompatible under `compat: {mode}`: a major bump, which needs `compat: breaking_with_policy` and a `migration_policy`"
        ),
    };
    finding(
        CompatRule::BumpSuggested,
        event,
        Some(&previous.version),
        Some(&version.version),
        None,
        head.locate(&event.file, &format!("{}/version", version.pointer)),
        format!(
            "suggested bump after {}: {} ({advice}); this is a {} bump",
            previous.version,
            needed.as_str(),
            actual.as_str()
        ),
        if actual > needed {
            format!("a {} bump would do", needed.as_str())
        } else {
            "see the errors for this version: make the change compatible, or publish it as a new major"
                .to_owned()
        },
        Vec::new(),
    )
}

/// The smallest bump from `previous` to `version`: patch for documentation only, minor when
/// compatible both ways the mode checks, major otherwise.
fn needed_bump(
    mode: CompatMode,
    content: ContentModel,
    previous: &EventVersion,
    version: &EventVersion,
) -> Bump {
    if first_difference(&previous.schema, &version.schema, "").is_none() {
        return Bump::Patch;
    }
    let mut checks = directions(mode);
    if checks.is_empty() {
        checks = vec![Direction::Backward, Direction::Forward];
    }
    let compatible = checks
        .into_iter()
        .all(|direction| judge_versions(content, previous, version, direction, false).is_empty());
    if compatible { Bump::Minor } else { Bump::Major }
}

fn judge_versions(
    content: ContentModel,
    old: &EventVersion,
    new: &EventVersion,
    direction: Direction,
    witnesses: bool,
) -> Vec<Judgement> {
    judge(
        &old.schema,
        &new.schema,
        direction,
        Options {
            views: true,
            witnesses,
            content,
        },
    )
}

/// The content model of the writers being judged: open when either side's event type is
/// open, since producers generated from either may still be emitting.
fn writer_content(old: &EventType, new: &EventType) -> ContentModel {
    if old.content == ContentModel::Open || new.content == ContentModel::Open {
        ContentModel::Open
    } else {
        ContentModel::Closed
    }
}

fn schema_finding(
    head: &ContractSet,
    event: &EventType,
    target: &EventVersion,
    version: &EventVersion,
    direction: Direction,
    judgement: Judgement,
) -> Finding {
    let item = judgement.incompatibility;
    // The pointer into the new version's schema: the reader in a backward check, the writer in
    // a forward one.
    let pointer = match direction {
        Direction::Backward => item.reader_pointer.clone(),
        Direction::Forward => item.writer_pointer.clone(),
    };
    let (writer, reader) = match direction {
        Direction::Backward => (&target.version, &version.version),
        Direction::Forward => (&version.version, &target.version),
    };
    let rule = item.rule;
    let sentence = match direction {
        Direction::Backward => format!(
            "consumers on {} must read events written as {}, but {}",
            version.version, target.version, item.message
        ),
        Direction::Forward => format!(
            "consumers still on {} must read events written as {}, but {}",
            target.version, version.version, item.message
        ),
    };
    let mut consumers = subscribers(head, &event.name, Some(&target.version));
    for consumer in subscribers(head, &event.name, Some(&version.version)) {
        if !consumers.contains(&consumer) {
            consumers.push(consumer);
        }
    }
    consumers.sort();
    Finding {
        rule: rule.id(),
        severity: rule.severity(),
        event: event.name.clone(),
        base_version: Some(target.version.to_string()),
        version: Some(version.version.to_string()),
        direction: Some(direction),
        pointer: Some(format!("#{pointer}")),
        location: locate_schema(head, event, version, &pointer),
        message: sentence,
        fix: format!(
            "{}; or, if the break is intended, publish it as a new major version under `compat: breaking_with_policy` with a `migration_policy`",
            fix_for(rule, direction)
        ),
        consumers,
        witness: judgement.witness.map(|payload| Witness {
            payload,
            valid_for: format!("writer {writer}"),
            rejected_by: format!("reader {reader}"),
        }),
    }
}

fn fix_for(rule: CompatRule, direction: Direction) -> &'static str {
    match (rule, direction) {
        (CompatRule::TypeNarrowed, _) => {
            "accept every JSON type the other version emits (list it in `type`)"
        }
        (CompatRule::RequiredAdded, Direction::Backward) => {
            "make the new property optional (leave it out of `required`)"
        }
        (CompatRule::RequiredAdded, Direction::Forward) => {
            "keep emitting the property: leave it in `properties` and `required`"
        }
        (CompatRule::PropertyRejected, _) => "allow the property again",
        (CompatRule::EnumNarrowed, _) => {
            "keep every value the other version allows in `enum`/`const`"
        }
        (CompatRule::NumberRangeNarrowed, _) => {
            "relax the bound (or multipleOf) to the other version's"
        }
        (CompatRule::StringLengthNarrowed, _) => "relax the length bound to the other version's",
        (CompatRule::PatternChanged, _) => {
            "keep the pattern as it was (evc does not prove that one regex contains another)"
        }
        (CompatRule::FormatChanged, _) => "keep the same `format`",
        (CompatRule::ArrayNarrowed | CompatRule::ObjectNarrowed, _) => {
            "relax the constraint to the other version's"
        }
        (CompatRule::AlternativeRemoved, _) => "keep every alternative the other version has",
        (CompatRule::NotExtended, _) => "do not exclude values the other version emits",
        (CompatRule::SchemaFalse, _) => "do not make the schema reject everything",
        _ => "keep this part of the schema as it was",
    }
}

#[allow(clippy::too_many_arguments)]
fn finding(
    rule: CompatRule,
    event: &EventType,
    base_version: Option<&Version>,
    version: Option<&Version>,
    pointer: Option<String>,
    location: Location,
    message: String,
    fix: String,
    consumers: Vec<String>,
) -> Finding {
    Finding {
        rule: rule.id(),
        severity: rule.severity(),
        event: event.name.clone(),
        base_version: base_version.map(Version::to_string),
        version: version.map(Version::to_string),
        direction: None,
        pointer: pointer.map(|pointer| format!("#{pointer}")),
        location,
        message,
        fix,
        consumers,
        witness: None,
    }
}

/// Where `pointer` (into `version`'s schema) sits in the contract file: the node itself, or
/// its nearest ancestor that exists (a removed keyword points at its parent).
fn locate_schema(
    head: &ContractSet,
    event: &EventType,
    version: &EventVersion,
    pointer: &str,
) -> Location {
    let base = format!("{}/schema", version.pointer);
    let mut pointer = pointer.to_owned();
    loop {
        let full = format!("{base}{pointer}");
        let found = head
            .trees
            .get(&event.file)
            .and_then(|tree| tree.pointer(&full))
            .is_some();
        if found || pointer.is_empty() {
            return head.locate(&event.file, &full);
        }
        pointer.truncate(pointer.rfind('/').unwrap_or(0));
    }
}

/// The first place two schemas differ in anything but documentation, as a JSON pointer.
fn first_difference(old: &Value, new: &Value, at: &str) -> Option<String> {
    // Equal values differ nowhere; comparing them is far cheaper than the walk, which names
    // every place it passes. Most versions of a set are unchanged between base and head.
    if old == new {
        return None;
    }
    difference_below(old, new, at)
}

fn difference_below(old: &Value, new: &Value, at: &str) -> Option<String> {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                if DOCS_ONLY.contains(&key.as_str()) && !is_schema_map_key(at) {
                    continue;
                }
                let here = format!("{at}/{}", escape_pointer_segment(key));
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => {
                        if let Some(found) = difference_below(x, y, &here) {
                            return Some(found);
                        }
                    }
                    _ => return Some(here),
                }
            }
            None
        }
        (Value::Array(a), Value::Array(b)) => {
            for (index, (x, y)) in a.iter().zip(b).enumerate() {
                if let Some(found) = difference_below(x, y, &format!("{at}/{index}")) {
                    return Some(found);
                }
            }
            (a.len() != b.len()).then(|| format!("{at}/{}", a.len().min(b.len())))
        }
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => None,
        _ => (old != new).then(|| at.to_owned()),
    }
}

/// True when the object at `at` maps names to schemas (`properties`), where `description` is a
/// property name, not documentation.
fn is_schema_map_key(at: &str) -> bool {
    let last = at.rsplit('/').next().unwrap_or_default();
    matches!(
        last,
        "properties"
            | "patternProperties"
            | "$defs"
            | "definitions"
            | "dependentSchemas"
            | "dependencies"
    )
}

fn directions(mode: CompatMode) -> Vec<Direction> {
    match mode {
        CompatMode::Backward | CompatMode::BackwardTransitive => vec![Direction::Backward],
        CompatMode::Forward | CompatMode::ForwardTransitive | CompatMode::BreakingWithPolicy => {
            vec![Direction::Forward]
        }
        CompatMode::Full | CompatMode::FullTransitive => {
            vec![Direction::Backward, Direction::Forward]
        }
        CompatMode::None => Vec::new(),
    }
}

fn is_transitive(mode: CompatMode) -> bool {
    matches!(
        mode,
        CompatMode::BackwardTransitive | CompatMode::ForwardTransitive | CompatMode::FullTransitive
    )
}

/// How much a mode checks, to tell a weakened mode: directions, then transitivity.
fn strength(mode: CompatMode) -> u8 {
    let directions = directions(mode).len() as u8;
    directions * 2 + u8::from(is_transitive(mode))
}

/// The mode as written in contracts.
pub(super) fn mode_name(mode: CompatMode) -> &'static str {
    match mode {
        CompatMode::Forward => "forward",
        CompatMode::Backward => "backward",
        CompatMode::Full => "full",
        CompatMode::ForwardTransitive => "forward_transitive",
        CompatMode::BackwardTransitive => "backward_transitive",
        CompatMode::FullTransitive => "full_transitive",
        CompatMode::None => "none",
        CompatMode::BreakingWithPolicy => "breaking_with_policy",
    }
}

/// Consumers of `set` subscribed to `event` (to `version` of it, when given), by name.
fn subscribers(set: &ContractSet, event: &str, version: Option<&Version>) -> Vec<String> {
    set.consumers
        .values()
        .filter(|consumer| {
            consumer.subscriptions.iter().any(|subscription| {
                subscription.event == event
                    && version.is_none_or(|version| subscription.requirement.matches(version))
            })
        })
        .map(|consumer| consumer.name.clone())
        .collect()
}
