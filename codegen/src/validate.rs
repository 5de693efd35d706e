//! Cross-file validation and lowering: from parsed files to a [`ContractSet`].
//!
//! Each file that passed its structural checks is lowered into the model while its values are
//! parsed (versions, requirements, durations) and its references resolved. Every problem is
//! collected; a set with any error yields no model.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use crate::cache::LoadCache;
use crate::diagnostic::{Diagnostic, Rule};
use crate::format::{
    CompatMode, ConsumerFile, EventFile, EventStatus, ExecutorClassesFile, ProjectFile,
    RetentionDef, RetryKind, RetryPoliciesFile, ScheduleDef, SchedulesFile, TopicsFile, keyword,
};
use crate::loader::{EVENTS_DIR, ParsedDir, ParsedFile, Typed};
use crate::model::{
    Consumer, ContentModel, ContractSet, CutoverGate, DispatcherSettings, EventType, EventVersion,
    EvidenceRecording, ExecutorClass, Inventory, MigrationPolicy, PayloadPolicy, Project,
    RelaySettings, Retention, RetryPolicy, Schedule, Subscription, Topic,
};
use crate::names::{self, glob_matches};
use crate::payload_schema;
use crate::source::{Location, Sources};
use crate::yaml::escape_pointer_segment;
use crate::{duration, loader};

/// The shortest dispatcher lease: the runtime renews a held lease every third of it, and a
/// renewal is a database round trip (`evc dispatch` takes no shorter lease either).
const MIN_DISPATCHER_LEASE: Duration = Duration::from_secs(1);

/// The longest consumer `handler_timeout`: one handler attempt of more than a day is a stuck
/// handler, not a slow one.
const MAX_HANDLER_TIMEOUT: Duration = Duration::from_secs(86_400);

/// Default heartbeat threshold of consumers when neither they nor `evc.yaml` set one.
const DEFAULT_HEARTBEAT_THRESHOLD: Duration = Duration::from_secs(60);

/// A catch-up's most missed slots when a schedule sets no `catch_up_limit`.
const DEFAULT_CATCH_UP_LIMIT: u32 = 100;

/// The event type prefix of every schedule's tick (`cron.tick.<schedule>`).
const TICK_EVENT_PREFIX: &str = "cron.tick.";

/// The event the dispatcher appends when a consumer's lag crosses a threshold.
const LAG_BREACH_EVENT: &str = "event_lag.breach";

/// Why `version`'s schema refuses a payload the runtime appends, of which it keeps the fields
/// the schema declares (as the runtime's own events do); `None`: accepted.
fn refusal(
    version: &EventVersion,
    mut payload: serde_json::Map<String, serde_json::Value>,
) -> Option<String> {
    if let Some(properties) = version.schema.get("properties").and_then(|p| p.as_object()) {
        payload.retain(|key, _| properties.contains_key(key));
    }
    // Formats checked, as the runtime's append checks them.
    let validator = jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&version.schema)
        .ok()?;
    let payload = serde_json::Value::Object(payload);
    validator
        .iter_errors(&payload)
        .next()
        .map(|error| error.to_string())
}

/// What a loaded set is for, which decides whether the Rust generator's own check is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// Generating, or checking what would be generated: every check.
    Generate,
    /// Only being compared against: the generator's check is left out.
    Compare,
}

/// Validates parsed files and builds the model; the model is `None` when any error was found.
/// Payload schema checks come from `cache` where it holds them, and go to it.
pub(crate) fn validate(
    dir: &Path,
    parsed: ParsedDir,
    cache: Option<&LoadCache>,
    purpose: Purpose,
) -> (Option<ContractSet>, Vec<Diagnostic>) {
    let mut checker = Checker {
        cache,
        files: &parsed.files,
        diagnostics: parsed.diagnostics.clone(),
        broken_events: BTreeSet::new(),
    };
    checker.broken_events = checker.names_in_broken_event_files();
    let project_file = checker.typed_project();
    let project = checker.project(project_file);
    let retry_policies = checker.retry_policies();
    let executor_classes = checker.executor_classes(&retry_policies);
    let events = checker.events(&project);
    let defaults = project_file.map(|file| &file.defaults);
    let consumers = checker.consumers(&events, &retry_policies, &executor_classes, defaults);
    if let Some(name) = defaults.and_then(|defaults| defaults.retry_policy.as_ref()) {
        checker.require_policy(
            loader::PROJECT_FILE,
            "/defaults/retry_policy",
            name.as_str(),
            &retry_policies,
        );
    }
    let topics = checker.topics(&events);
    let schedules = checker.schedules(&events, &project);
    checker.lag_breach_event(&events, &consumers, &project);
    checker.retention_keeps_gate_evidence(&project, &events, &consumers);
    checker.settings_the_runtime_honours(
        &project.dispatcher,
        &consumers,
        executor_classes.as_ref().unwrap_or(&BTreeMap::new()),
    );

    let mut diagnostics = checker.diagnostics;
    crate::diagnostic::sort(&mut diagnostics);
    diagnostics.dedup();
    if diagnostics.iter().any(Diagnostic::is_error) {
        return (None, diagnostics);
    }
    let mut sources = Sources::default();
    let mut trees = BTreeMap::new();
    let mut typed = Vec::with_capacity(parsed.files.len());
    for (path, file) in parsed.files {
        if let Some(source) = file.source {
            sources.insert(source);
        }
        if let Some(tree) = file.tree {
            trees.insert(path, tree);
        }
        typed.extend(file.typed);
    }
    free_in_background(typed);
    let set = ContractSet {
        dir: dir.to_owned(),
        project,
        events,
        consumers,
        retry_policies,
        topics,
        executor_classes: executor_classes.unwrap_or_default(),
        schedules,
        sources,
        trees,
        registry_digest: std::sync::OnceLock::new(),
        rust_names_checked: false,
    };
    if purpose == Purpose::Compare {
        return (Some(set), diagnostics);
    }
    let generation = rust_generation(&set);
    if !generation.is_empty() {
        diagnostics.extend(generation);
        crate::diagnostic::sort(&mut diagnostics);
        return (None, diagnostics);
    }
    (
        Some(ContractSet {
            rust_names_checked: true,
            ..set
        }),
        diagnostics,
    )
}

/// Drops `garbage` on a thread of its own. The typed files of a large set take tens of
/// milliseconds to free, and once the model is built nothing waits for them; a process that
/// exits first frees them with everything else.
fn free_in_background<T: Send + 'static>(garbage: T) {
    // Should the thread not start, the closure and what it holds are dropped here.
    let _ = std::thread::Builder::new()
        .name("evc-free".to_owned())
        .spawn(move || drop(garbage));
}

/// What keeps the Rust generator from rendering a set that passed every other check: names that
/// become one Rust name in one scope (found by the generator itself, so check and generate agree),
/// or any other refusal of the generator.
fn rust_generation(set: &ContractSet) -> Vec<Diagnostic> {
    let clashes = match crate::emit::rust::name_clashes(set) {
        Ok(clashes) => clashes,
        Err(error) => {
            return vec![Diagnostic::new(
                Rule::RustNotGeneratable,
                Location::file(loader::PROJECT_FILE),
                format!("the Rust generator cannot render these contracts: {error}"),
                "change the contract it names; please also report this as an evc bug, since \
                 `evc check` should have named the problem",
            )];
        }
    };
    let mut seen = BTreeSet::new();
    let mut diagnostics = Vec::new();
    for clash in clashes {
        let here = set.locate_key(&clash.second.file, &clash.second.pointer);
        let first = (!clash.first.file.is_empty())
            .then(|| set.locate_key(&clash.first.file, &clash.first.pointer));
        if !seen.insert((here.clone(), first.clone())) {
            continue;
        }
        let diagnostic = Diagnostic::new(
            Rule::RustNameCollision,
            here,
            format!("{clash} in the generated Rust"),
            format!(
                "rename one of them: the generator turns names into Rust by case and separators \
                 alone (`a.b_c`, `a_b.c` and `aB_c` are all `ABC`), and `{}` is taken",
                clash.name
            ),
        );
        diagnostics.push(match first {
            Some(first) => diagnostic.with_related(first, format!("{} is here", clash.first.what)),
            None => diagnostic,
        });
    }
    diagnostics
}

struct Checker<'a> {
    /// Payload schema checks of earlier loads.
    cache: Option<&'a LoadCache>,
    files: &'a BTreeMap<String, ParsedFile>,
    diagnostics: Vec<Diagnostic>,
    /// Event types whose files or versions are broken (already reported): references to them
    /// are not reported again as unknown.
    broken_events: BTreeSet<String>,
}

impl<'a> Checker<'a> {
    /// The location of the value at `pointer` in `path`.
    fn at(&self, path: &str, pointer: &str) -> Location {
        self.node_location(path, pointer, false)
    }

    /// The location of the key of the entry at `pointer` in `path` (the value's when it has
    /// no key).
    fn at_key(&self, path: &str, pointer: &str) -> Location {
        self.node_location(path, pointer, true)
    }

    fn node_location(&self, path: &str, pointer: &str, key: bool) -> Location {
        let Some(file) = self.files.get(path) else {
            return Location::file(path);
        };
        let (Some(tree), Some(source)) = (&file.tree, &file.source) else {
            return Location::file(path);
        };
        match tree.pointer_entry(pointer) {
            Some((Some(key_node), _)) if key => key_node.location(source),
            Some((_, node)) => node.location(source),
            None => Location::file(path),
        }
    }

    fn report(&mut self, rule: Rule, location: Location, message: String, fix: String) {
        self.diagnostics
            .push(Diagnostic::new(rule, location, message, fix));
    }

    fn typed_project(&self) -> Option<&'a ProjectFile> {
        match self.files.get(loader::PROJECT_FILE)?.typed.as_deref()? {
            Typed::Project(project) => Some(project.as_ref()),
            _ => None,
        }
    }

    fn project(&mut self, file: Option<&ProjectFile>) -> Project {
        let Some(file) = file else {
            return Project {
                name: String::new(),
                payload_policy: PayloadPolicy::default(),
                require_tenant_scope: false,
                require_trace_context: true,
                dispatcher: DispatcherSettings::default(),
                relay: RelaySettings::default(),
                retention: Retention::default(),
                evidence: None,
            };
        };
        let path = loader::PROJECT_FILE;
        let policy = &file.payload_policy;
        if policy.default_max_bytes > policy.hard_max_bytes {
            self.report(
                Rule::InvalidPayloadPolicy,
                self.at(path, "/payload_policy/default_max_bytes"),
                format!(
                    "`default_max_bytes` ({}) is above `hard_max_bytes` ({})",
                    policy.default_max_bytes, policy.hard_max_bytes
                ),
                "lower `default_max_bytes` or raise `hard_max_bytes`".to_owned(),
            );
        }
        let defaults = DispatcherSettings::default();
        let dispatcher = &file.dispatcher;
        let duration_or = |text: &Option<crate::format::DurationText>, default| {
            text.as_ref()
                .and_then(|text| duration::parse(text.as_str()))
                .unwrap_or(default)
        };
        let dispatcher = DispatcherSettings {
            batch_size: dispatcher.batch_size.unwrap_or(defaults.batch_size),
            lease: duration_or(&dispatcher.lease, defaults.lease),
            heartbeat: duration_or(&dispatcher.heartbeat, defaults.heartbeat),
            max_attempts: dispatcher.max_attempts.unwrap_or(defaults.max_attempts),
            backoff_ceiling: duration_or(&dispatcher.backoff_ceiling, defaults.backoff_ceiling),
        };
        if dispatcher.lease < MIN_DISPATCHER_LEASE {
            self.report(
                Rule::InvalidValue,
                self.at(path, "/dispatcher/lease"),
                format!(
                    "the dispatcher lease ({}) is shorter than {}, the shortest lease the \
                     runtime renews in time",
                    duration::format(dispatcher.lease),
                    duration::format(MIN_DISPATCHER_LEASE)
                ),
                "make `lease` at least 1s (the default is 30s)".to_owned(),
            );
        } else if dispatcher.heartbeat >= dispatcher.lease {
            self.report(
                Rule::InvalidValue,
                self.at(path, "/dispatcher/heartbeat"),
                format!(
                    "the dispatcher heartbeat ({}) must be shorter than the lease ({})",
                    duration::format(dispatcher.heartbeat),
                    duration::format(dispatcher.lease)
                ),
                "make `heartbeat` a fraction of `lease` (the default is 10s against 30s)"
                    .to_owned(),
            );
        }
        let relay = self.relay(path, &file.relay, &duration_or);
        let retention = self.retention(path, &file.retention);
        let evidence = file.evidence.as_ref().map(|def| self.evidence(path, def));
        for (pointer, text) in [
            ("/relay/lease", &file.relay.lease),
            ("/relay/duplicate_window", &file.relay.duplicate_window),
            ("/dispatcher/lease", &file.dispatcher.lease),
            ("/dispatcher/heartbeat", &file.dispatcher.heartbeat),
            (
                "/dispatcher/backoff_ceiling",
                &file.dispatcher.backoff_ceiling,
            ),
            (
                "/defaults/heartbeat_threshold",
                &file.defaults.heartbeat_threshold,
            ),
        ] {
            if let Some(text) = text {
                self.duration(path, pointer, text.as_str());
            }
        }
        Project {
            name: file.project.0.clone(),
            payload_policy: PayloadPolicy {
                denied_keys: policy.denied_keys.iter().map(|k| k.0.clone()).collect(),
                credential_key_names: policy
                    .credential_key_names
                    .iter()
                    .map(|k| k.0.clone())
                    .collect(),
                default_max_bytes: policy.default_max_bytes,
                hard_max_bytes: policy.hard_max_bytes,
                content: policy.content,
            },
            require_tenant_scope: file.envelope.require_tenant_scope,
            require_trace_context: file.envelope.require_trace_context,
            dispatcher,
            relay,
            retention,
            evidence,
        }
    }

    /// The evidence recording of `evc.yaml`, defaults applied; a snapshot kept for less than
    /// one slot, or a correlation slot longer than the window read, is reported.
    fn evidence(&mut self, path: &str, def: &crate::format::EvidenceDef) -> EvidenceRecording {
        let every = self.duration(path, "/evidence/every", def.every.as_str());
        let keep = self.duration(path, "/evidence/keep", def.keep.as_str());
        let window = def
            .window
            .as_ref()
            .map_or(EvidenceRecording::DEFAULT_WINDOW, |text| {
                self.duration(path, "/evidence/window", text.as_str())
            });
        let correlation = def
            .correlation
            .as_ref()
            .map_or(EvidenceRecording::DEFAULT_CORRELATION, |text| {
                self.duration(path, "/evidence/correlation", text.as_str())
            });
        // The format schema refuses 0 before this runs.
        let min_count = def
            .min_count
            .unwrap_or(EvidenceRecording::DEFAULT_MIN_COUNT);
        if !every.is_zero() && !keep.is_zero() && keep < every {
            self.report(
                Rule::InvalidValue,
                self.at(path, "/evidence/keep"),
                format!(
                    "snapshots are kept for {} but recorded every {}: each would be removed \
                     before the next is recorded",
                    duration::format(keep),
                    duration::format(every)
                ),
                format!("make `keep` at least {}", duration::format(every)),
            );
        }
        if !window.is_zero() && !correlation.is_zero() && window < correlation {
            self.report(
                Rule::InvalidValue,
                self.at(path, "/evidence/correlation"),
                format!(
                    "the correlation slot ({}) is longer than the window read ({})",
                    duration::format(correlation),
                    duration::format(window)
                ),
                format!("make `correlation` at most {}", duration::format(window)),
            );
        }
        EvidenceRecording {
            every,
            keep,
            window,
            correlation,
            min_count: min_count.max(1),
        }
    }

    /// The relay's settings, defaults applied; a lease too short to renew, or a duplicate
    /// window shorter than two leases, is reported: a relay stopped between a publish and its
    /// cursor's move is replaced after one lease, and its successor sends those events again,
    /// which the broker must still recognise.
    fn relay(
        &mut self,
        path: &str,
        file: &crate::format::RelayDef,
        duration_or: &dyn Fn(&Option<crate::format::DurationText>, Duration) -> Duration,
    ) -> RelaySettings {
        let defaults = RelaySettings::default();
        let relay = RelaySettings {
            subject_prefix: file
                .subject_prefix
                .as_ref()
                .map_or(defaults.subject_prefix, |prefix| prefix.0.clone()),
            stream: file
                .stream
                .as_ref()
                .map_or(defaults.stream, |stream| stream.0.clone()),
            duplicate_window: duration_or(&file.duplicate_window, defaults.duplicate_window),
            lease: duration_or(&file.lease, defaults.lease),
            partitions: file.partitions.unwrap_or(defaults.partitions),
        };
        if relay.lease < MIN_DISPATCHER_LEASE {
            self.report(
                Rule::InvalidValue,
                self.at(path, "/relay/lease"),
                format!(
                    "the relay lease ({}) is shorter than {}, the shortest lease a relay renews \
                     in time",
                    duration::format(relay.lease),
                    duration::format(MIN_DISPATCHER_LEASE)
                ),
                "make `lease` at least 1s (the default is 30s)".to_owned(),
            );
        } else if relay.duplicate_window < relay.lease.saturating_mul(2) {
            self.report(
                Rule::InvalidValue,
                self.at(path, "/relay/duplicate_window"),
                format!(
                    "the duplicate window ({}) is shorter than two relay leases ({}): a relay \
                     that takes over a stopped one's cursor sends its last events again, and \
                     the broker would store them twice",
                    duration::format(relay.duplicate_window),
                    duration::format(relay.lease.saturating_mul(2))
                ),
                format!(
                    "make `duplicate_window` at least {} or shorten `lease`",
                    duration::format(relay.lease.saturating_mul(2))
                ),
            );
        }
        relay
    }

    /// The retention periods of `evc.yaml`, each a usable duration.
    fn retention(&mut self, path: &str, def: &RetentionDef) -> Retention {
        let mut period = |key: &str, text: &Option<crate::format::DurationText>| {
            text.as_ref()
                .map(|text| self.duration(path, &format!("/retention/{key}"), text.as_str()))
        };
        Retention {
            events: period("events", &def.events),
            attempts: period("attempts", &def.attempts),
            reconciliations: period("reconciliations", &def.reconciliations),
            rejects: period("rejects", &def.rejects),
            effects: period("effects", &def.effects),
        }
    }

    /// A cut-over gate counts shadow runs over its `min_span`: the purge must not remove them
    /// sooner, or the gate could never pass.
    fn retention_keeps_gate_evidence(
        &mut self,
        project: &Project,
        events: &BTreeMap<String, EventType>,
        consumers: &BTreeMap<String, Consumer>,
    ) {
        for consumer in consumers.values() {
            let Some(gate) = &consumer.cutover_gate else {
                continue;
            };
            // A purged event takes its shadow runs with it.
            for subscription in &consumer.subscriptions {
                let Some(event) = events.get(&subscription.event) else {
                    continue;
                };
                let Some(kept) = event.retention else {
                    continue;
                };
                if gate.min_span <= kept {
                    continue;
                }
                let (file, pointer) = if !self.declares_retention(event) {
                    (loader::PROJECT_FILE.to_owned(), "/retention/events")
                } else {
                    (event.file.clone(), "/retention")
                };
                self.report(
                    Rule::InvalidValue,
                    self.at(&file, pointer),
                    format!(
                        "events of `{}` are kept for {}, shorter than the `min_span` ({}) of \
                         consumer `{}`'s cut-over gate: the purge would remove their shadow \
                         runs, the gate's evidence",
                        event.name,
                        duration::format(kept),
                        duration::format(gate.min_span),
                        consumer.name
                    ),
                    format!(
                        "keep `{}` events at least {} or shorten the gate's `min_span`",
                        event.name,
                        duration::format(gate.min_span)
                    ),
                );
            }
            let Some(kept) = project.retention.reconciliations else {
                continue;
            };
            if gate.min_span > kept {
                self.report(
                    Rule::InvalidValue,
                    self.at(loader::PROJECT_FILE, "/retention/reconciliations"),
                    format!(
                        "reconciliations are kept for {}, shorter than the `min_span` ({}) of \
                         consumer `{}`'s cut-over gate, whose evidence the purge would remove",
                        duration::format(kept),
                        duration::format(gate.min_span),
                        consumer.name
                    ),
                    format!(
                        "keep reconciliations at least {} or shorten the gate's `min_span`",
                        duration::format(gate.min_span)
                    ),
                );
            }
        }
    }

    /// Whether `event`'s own file sets `retention` (else it takes the project's).
    fn declares_retention(&self, event: &EventType) -> bool {
        matches!(
            self.files.get(&event.file).and_then(|file| file.typed.as_deref()),
            Some(Typed::Event(def)) if def.retention.is_some()
        )
    }

    /// Parses a duration the format schema already shaped; reports one that overflows or is zero.
    fn duration(&mut self, path: &str, pointer: &str, text: &str) -> Duration {
        match duration::parse(text) {
            Some(value) if value > duration::MAX_RUNTIME => {
                self.report(
                    Rule::ValueOutOfRange,
                    self.at(path, pointer),
                    format!(
                        "`{text}` is longer than the runtime can use: at most {} (1,000 years), \
                         since durations become PostgreSQL intervals added to `now()`",
                        duration::format(duration::MAX_RUNTIME)
                    ),
                    format!(
                        "write at most `{}`",
                        duration::format(duration::MAX_RUNTIME)
                    ),
                );
                value
            }
            Some(value) if !value.is_zero() => value,
            _ => {
                self.report(
                    Rule::InvalidDuration,
                    self.at(path, pointer),
                    format!("`{text}` is not a usable duration (zero or too large)"),
                    "write a positive duration such as `30s`, `10m` or `14d`".to_owned(),
                );
                Duration::ZERO
            }
        }
    }

    /// Reports settings that are each valid but that the runtime cannot honour together: a
    /// consumer's heartbeat threshold that is not longer than the dispatcher's heartbeat
    /// interval (its healthy workers would be reported silent between two heartbeats). The
    /// dispatcher's `max_attempts` and `backoff_ceiling` are ceilings over the retry policies
    /// by design, so a policy above them is not reported.
    fn settings_the_runtime_honours(
        &mut self,
        dispatcher: &DispatcherSettings,
        consumers: &BTreeMap<String, Consumer>,
        classes: &BTreeMap<String, ExecutorClass>,
    ) {
        let project = loader::PROJECT_FILE;
        for consumer in consumers.values() {
            if consumer.heartbeat_threshold.is_zero()
                || consumer.heartbeat_threshold > dispatcher.heartbeat
            {
                continue;
            }
            let own = matches!(
                self.files.get(&consumer.file).and_then(|file| file.typed.as_deref()),
                Some(Typed::Consumer(def)) if def.heartbeat_threshold.is_some()
            );
            let project_default = self
                .typed_project()
                .is_some_and(|file| file.defaults.heartbeat_threshold.is_some());
            let of_class = consumer.executor_class.as_ref().filter(|class| {
                classes
                    .get(class.as_str())
                    .is_some_and(|class| class.heartbeat_threshold.is_some())
            });
            // Where the threshold was written; the contract format's default is against the
            // heartbeat.
            let location = if own {
                self.at(&consumer.file, "/heartbeat_threshold")
            } else if let Some(class) = of_class {
                self.at(
                    loader::EXECUTOR_CLASSES_FILE,
                    &format!(
                        "/classes/{}/heartbeat_threshold",
                        escape_pointer_segment(class)
                    ),
                )
            } else if project_default {
                self.at(project, "/defaults/heartbeat_threshold")
            } else {
                self.at(project, "/dispatcher/heartbeat")
            };
            self.report(
                Rule::InvalidValue,
                location,
                format!(
                    "consumer `{}` has a heartbeat threshold ({}) that is not longer than the \
                     dispatcher heartbeat ({}): its workers would be reported silent between \
                     two heartbeats",
                    consumer.name,
                    duration::format(consumer.heartbeat_threshold),
                    duration::format(dispatcher.heartbeat)
                ),
                "make `heartbeat_threshold` a few heartbeats long (the default is 60s against \
                 a 10s heartbeat), or shorten the dispatcher `heartbeat`"
                    .to_owned(),
            );
        }
    }

    fn retry_policies(&mut self) -> BTreeMap<String, RetryPolicy> {
        let path = loader::RETRY_POLICIES_FILE;
        let Some(Typed::RetryPolicies(RetryPoliciesFile { policies })) =
            self.files.get(path).and_then(|file| file.typed.as_deref())
        else {
            return BTreeMap::new();
        };
        let mut lowered = BTreeMap::new();
        for (name, def) in policies {
            let pointer = format!("/policies/{}", escape_pointer_segment(name));
            let base_delay = def
                .base_delay
                .as_ref()
                .map(|text| self.duration(path, &format!("{pointer}/base_delay"), text.as_str()));
            let max_delay = def
                .max_delay
                .as_ref()
                .map(|text| self.duration(path, &format!("{pointer}/max_delay"), text.as_str()));
            let invalid = |this: &mut Self, key: &str, message: String, fix: &str| {
                let location = this.at(path, &format!("{pointer}{key}"));
                this.report(Rule::InvalidRetryPolicy, location, message, fix.to_owned());
            };
            if def.kind == RetryKind::NoRetry {
                if def.max_attempts != 1 {
                    invalid(
                        self,
                        "/max_attempts",
                        format!(
                            "`{name}` is `no_retry` but allows {} attempts",
                            def.max_attempts
                        ),
                        "set `max_attempts: 1`, or choose a retrying `kind`",
                    );
                }
            } else if base_delay.is_none() {
                invalid(
                    self,
                    "",
                    format!("`{name}` retries but sets no `base_delay`"),
                    "add `base_delay:` (for example `30s`)",
                );
            }
            if let (Some(base), Some(max)) = (base_delay, max_delay)
                && base > max
            {
                invalid(
                    self,
                    "/max_delay",
                    format!(
                        "`{name}` has `max_delay` ({}) below `base_delay` ({})",
                        duration::format(max),
                        duration::format(base)
                    ),
                    "raise `max_delay` or lower `base_delay`",
                );
            }
            if let Some(base) = base_delay
                && base <= duration::MAX_RUNTIME
                && max_delay.is_none()
                && let Some(longest) =
                    longest_retry_delay(def.kind, def.jitter, base, def.max_attempts)
                && longest > duration::MAX_RUNTIME
            {
                invalid_range(
                    self,
                    path,
                    &format!("{pointer}/max_attempts"),
                    format!(
                        "`{name}` has no `max_delay`, and its delay before the last of {} \
                         attempts grows beyond {}, the longest the runtime can use (delays become \
                         PostgreSQL intervals added to `now()`)",
                        def.max_attempts,
                        duration::format(duration::MAX_RUNTIME)
                    ),
                    "set `max_delay` (the longest wait between attempts), or allow fewer attempts",
                );
            }
            for (index, class) in def.retry_on.iter().enumerate() {
                if class.is_quarantined() {
                    invalid(
                        self,
                        &format!("/retry_on/{index}"),
                        format!(
                            "`{name}` retries `{}` failures, which are quarantined and never retried",
                            crate::format::keyword(class)
                        ),
                        "retry only `transient`, `permanent` or `poison` failures",
                    );
                }
            }
            lowered.insert(
                name.clone(),
                RetryPolicy {
                    name: name.clone(),
                    description: def.description.clone(),
                    kind: def.kind,
                    base_delay: base_delay.unwrap_or(Duration::ZERO),
                    max_delay,
                    max_attempts: def.max_attempts,
                    jitter: def.jitter,
                    retry_on: def.retry_on.clone(),
                },
            );
        }
        lowered
    }

    fn events(&mut self, project: &Project) -> BTreeMap<String, EventType> {
        let mut events: BTreeMap<String, EventType> = BTreeMap::new();
        let files = self.files;
        let definitions: Vec<(&String, &EventFile)> = files
            .iter()
            .filter_map(|(path, file)| match file.typed.as_deref() {
                Some(Typed::Event(def)) => Some((path, &**def)),
                _ => None,
            })
            .collect();
        let checked = check_payload_schemas(&definitions, project, self.cache);
        for ((path, def), checked) in definitions.into_iter().zip(checked) {
            let Some(event) = self.event(path, def, project, checked) else {
                continue;
            };
            if let Some(first) = events.get(&event.name) {
                let first_location = self.at(&first.file, "/event");
                let diagnostic = Diagnostic::new(
                    Rule::DuplicateEventType,
                    self.at(path, "/event"),
                    format!("the event type `{}` is defined twice", event.name),
                    format!("keep one definition; the other is in `{}`", first.file),
                )
                .with_related(first_location, "first defined here");
                self.diagnostics.push(diagnostic);
                continue;
            }
            events.insert(event.name.clone(), event);
        }
        events
    }

    /// `checked` holds the payload schema check of each version of `def`, in order.
    fn event(
        &mut self,
        path: &str,
        def: &EventFile,
        project: &Project,
        checked: Vec<payload_schema::Checked>,
    ) -> Option<EventType> {
        let mut checked = checked.into_iter();
        let name = def.event.as_str();
        let expected_path = format!("{EVENTS_DIR}/{name}.yaml");
        if path != expected_path {
            self.report(
                Rule::FileNameMismatch,
                self.at(path, "/event"),
                format!("`{path}` defines `{name}`, so it must be named `{expected_path}`"),
                format!("rename the file to `{expected_path}`, or correct `event:`"),
            );
        }
        let compat = def.compat.unwrap_or_else(|| {
            self.typed_project()
                .and_then(|p| p.defaults.compat)
                .unwrap_or(CompatMode::Forward)
        });
        let policy = &project.payload_policy;
        let content = content_model(def, policy);
        let max_payload_bytes = def.max_payload_bytes.unwrap_or(policy.default_max_bytes);
        if def.max_payload_bytes.is_some() && max_payload_bytes > policy.hard_max_bytes {
            self.report(
                Rule::PayloadCapAboveHardCap,
                self.at(path, "/max_payload_bytes"),
                format!(
                    "`max_payload_bytes` ({max_payload_bytes}) is above the hard cap ({}) of `evc.yaml`",
                    policy.hard_max_bytes
                ),
                format!(
                    "lower it to at most {}; large content belongs in storage, referenced by id",
                    policy.hard_max_bytes
                ),
            );
        }
        let mut versions: Vec<EventVersion> = Vec::new();
        let mut complete = true;
        for (index, version_def) in def.versions.iter().enumerate() {
            let pointer = format!("/versions/{index}");
            let Some(checked) = checked.next() else {
                unreachable!("one payload schema check per version");
            };
            let Ok(version) = semver::Version::parse(version_def.version.as_str()) else {
                self.report(
                    Rule::InvalidVersion,
                    self.at(path, &format!("{pointer}/version")),
                    format!("`{}` is not a semantic version", version_def.version),
                    "write MAJOR.MINOR.PATCH (`1.2.0`)".to_owned(),
                );
                complete = false;
                continue;
            };
            // Version parts are `bigint` columns of the runtime's registry tables.
            let parts = [version.major, version.minor, version.patch];
            if parts.iter().any(|part| i64::try_from(*part).is_err()) {
                self.report(
                    Rule::ValueOutOfRange,
                    self.at(path, &format!("{pointer}/version")),
                    format!(
                        "{name} {version}: a version part is above {}, the largest the registry's \
                         `bigint` columns hold",
                        i64::MAX
                    ),
                    "number versions with parts of at most 9223372036854775807".to_owned(),
                );
            }
            for problem in checked.problems {
                let location = self.at_key(path, &format!("{pointer}/schema{}", problem.pointer));
                self.report(
                    problem.rule,
                    location,
                    format!("{name} {version}: {}", problem.message),
                    problem.fix,
                );
            }
            let migration_policy = version_def
                .migration_policy
                .as_ref()
                .map(|m| MigrationPolicy {
                    producer_window: self.duration(
                        path,
                        &format!("{pointer}/migration_policy/producer_window"),
                        m.producer_window.as_str(),
                    ),
                    consumer_window: self.duration(
                        path,
                        &format!("{pointer}/migration_policy/consumer_window"),
                        m.consumer_window.as_str(),
                    ),
                    dual_write: m.dual_write.clone(),
                    rollback: m.rollback.clone(),
                });
            if !versions.is_empty() {
                self.version_step(
                    path,
                    name,
                    compat,
                    &versions,
                    &version,
                    &pointer,
                    migration_policy.is_some(),
                );
            } else if migration_policy.is_some() {
                self.report(
                    Rule::UnneededMigrationPolicy,
                    self.at_key(path, &format!("{pointer}/migration_policy")),
                    format!(
                        "{name} {version} is the first version; it has nothing to migrate from"
                    ),
                    "remove `migration_policy`".to_owned(),
                );
            }
            versions.push(EventVersion {
                version,
                description: version_def.description.clone(),
                schema: checked.schema,
                migration_policy,
                pointer,
            });
        }
        let order_key: Vec<String> = def
            .order_key
            .as_ref()
            .map(|key| key.fields().into_iter().map(|f| f.0.clone()).collect())
            .unwrap_or_default();
        for field in &order_key {
            for version in &versions {
                let required = crate::facts::required(&version.schema).contains(&field.as_str());
                if !required {
                    self.report(
                        Rule::OrderKeyNotRequired,
                        self.at(path, &order_key_pointer(def, field)),
                        format!(
                            "the order key `{field}` is not a required property of {name} {}",
                            version.version
                        ),
                        format!(
                            "add `{field}` to `properties` and `required` of version {}, or choose another order key",
                            version.version
                        ),
                    );
                }
            }
        }
        if !complete {
            // References to this type were not checked against half its versions; the version
            // error is reported, and the type is left out so nothing cascades from it.
            self.broken_events.insert(name.to_owned());
            return None;
        }
        Some(EventType {
            name: name.to_owned(),
            description: def.description.clone(),
            producer_class: def.producer_class.0.clone(),
            order_key,
            compat,
            status: def.status,
            max_payload_bytes,
            content,
            retention: match &def.retention {
                Some(text) => Some(self.duration(path, "/retention", text.as_str())),
                None => project.retention.events,
            },
            versions,
            file: path.to_owned(),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn version_step(
        &mut self,
        path: &str,
        name: &str,
        compat: CompatMode,
        earlier: &[EventVersion],
        version: &semver::Version,
        pointer: &str,
        has_migration_policy: bool,
    ) {
        let location = self.at(path, &format!("{pointer}/version"));
        // Build metadata does not order versions (semver §10): `1.0.0+b2` is `1.0.0` again.
        if let Some(same) = earlier
            .iter()
            .find(|v| v.version.cmp_precedence(version).is_eq())
        {
            let first = self.at(path, &format!("{}/version", same.pointer));
            let diagnostic = Diagnostic::new(
                Rule::DuplicateVersion,
                location,
                format!("{name} lists version {version} twice"),
                "give each version its own number; bump the new one",
            )
            .with_related(first, "first listed here");
            self.diagnostics.push(diagnostic);
            return;
        }
        let Some(previous) = earlier.last() else {
            return;
        };
        if version.cmp_precedence(&previous.version).is_lt() {
            self.report(
                Rule::VersionsOutOfOrder,
                location,
                format!("{name} {version} is listed after {}", previous.version),
                "list versions oldest first".to_owned(),
            );
            return;
        }
        let major_bump = version.major > previous.version.major;
        match (major_bump, compat, has_migration_policy) {
            (true, CompatMode::BreakingWithPolicy, false) => self.report(
                Rule::MissingMigrationPolicy,
                location,
                format!(
                    "{name} {version} is a major bump from {} without a `migration_policy`",
                    previous.version
                ),
                "add `migration_policy:` with `producer_window`, `consumer_window`, `dual_write` and `rollback`".to_owned(),
            ),
            (true, CompatMode::BreakingWithPolicy | CompatMode::None, _) => {}
            (true, mode, _) => self.report(
                Rule::MajorBumpNotAllowed,
                location,
                format!(
                    "{name} {version} is a major bump from {}, which `compat: {}` does not allow",
                    previous.version,
                    crate::format::keyword(&mode)
                ),
                "keep the change compatible under a minor version, or set `compat: breaking_with_policy` and add a `migration_policy`".to_owned(),
            ),
            (false, _, true) => self.report(
                Rule::UnneededMigrationPolicy,
                self.at_key(path, &format!("{pointer}/migration_policy")),
                format!("{name} {version} is not a major bump; its `migration_policy` is never used"),
                "remove `migration_policy`".to_owned(),
            ),
            (false, _, false) => {}
        }
    }

    /// Event type names defined by files that failed their structural checks, so references to
    /// them are not reported a second time as unknown.
    fn names_in_broken_event_files(&self) -> BTreeSet<String> {
        self.files
            .iter()
            .filter(|(_, file)| {
                file.kind == crate::structure::FileKind::Event && file.typed.is_none()
            })
            .filter_map(|(path, file)| {
                let declared = file
                    .tree
                    .as_ref()
                    .and_then(|tree| tree.get("event"))
                    .and_then(|node| node.as_str());
                let from_path = path
                    .strip_prefix("events/")
                    .and_then(|name| name.strip_suffix(".yaml"));
                declared.or(from_path).map(str::to_owned)
            })
            .collect()
    }

    /// The executor classes of `executor-classes.yaml`: `None` without the file, empty when
    /// it is broken (its structural diagnostics say why).
    fn executor_classes(
        &mut self,
        policies: &BTreeMap<String, RetryPolicy>,
    ) -> Option<BTreeMap<String, ExecutorClass>> {
        let path = loader::EXECUTOR_CLASSES_FILE;
        let file = self.files.get(path)?;
        let Some(Typed::ExecutorClasses(ExecutorClassesFile { classes })) = file.typed.as_deref()
        else {
            return Some(BTreeMap::new());
        };
        let mut lowered = BTreeMap::new();
        for (name, def) in classes {
            let pointer = format!("/classes/{}", escape_pointer_segment(name));
            if let Some(policy) = &def.retry_policy {
                self.require_policy(
                    path,
                    &format!("{pointer}/retry_policy"),
                    policy.as_str(),
                    policies,
                );
            }
            let heartbeat_threshold = def.heartbeat_threshold.as_ref().map(|text| {
                self.duration(
                    path,
                    &format!("{pointer}/heartbeat_threshold"),
                    text.as_str(),
                )
            });
            // The pattern names the kind first; a name that fails it is reported structurally.
            let Some(kind) = name
                .split_once('.')
                .and_then(|(kind, _)| serde_json::from_value(serde_json::Value::from(kind)).ok())
            else {
                continue;
            };
            lowered.insert(
                name.clone(),
                ExecutorClass {
                    name: name.clone(),
                    kind,
                    description: def.description.clone(),
                    mutating: def.mutating,
                    retry_policy: def.retry_policy.as_ref().map(|p| p.0.clone()),
                    idempotency_namespace: def.idempotency_namespace.0.clone(),
                    heartbeat_owner: def.heartbeat_owner.clone(),
                    heartbeat_threshold,
                    active: def.active,
                },
            );
        }
        Some(lowered)
    }

    fn consumers(
        &mut self,
        events: &BTreeMap<String, EventType>,
        policies: &BTreeMap<String, RetryPolicy>,
        classes: &Option<BTreeMap<String, ExecutorClass>>,
        defaults: Option<&crate::format::DefaultsDef>,
    ) -> BTreeMap<String, Consumer> {
        let mut consumers: BTreeMap<String, Consumer> = BTreeMap::new();
        let files = self.files;
        for (path, file) in files {
            let Some(Typed::Consumer(def)) = file.typed.as_deref() else {
                continue;
            };
            let consumer = self.consumer(path, def, events, policies, classes, defaults);
            if let Some(first) = consumers.get(&consumer.name) {
                let diagnostic = Diagnostic::new(
                    Rule::DuplicateConsumer,
                    self.at(path, "/consumer"),
                    format!("the consumer `{}` is defined twice", consumer.name),
                    format!("keep one definition; the other is in `{}`", first.file),
                )
                .with_related(self.at(&first.file, "/consumer"), "first defined here");
                self.diagnostics.push(diagnostic);
                continue;
            }
            consumers.insert(consumer.name.clone(), consumer);
        }
        consumers
    }

    fn consumer(
        &mut self,
        path: &str,
        def: &ConsumerFile,
        events: &BTreeMap<String, EventType>,
        policies: &BTreeMap<String, RetryPolicy>,
        classes: &Option<BTreeMap<String, ExecutorClass>>,
        defaults: Option<&crate::format::DefaultsDef>,
    ) -> Consumer {
        let name = def.consumer.as_str();
        let expected_path = format!("{}/{name}.yaml", loader::CONSUMERS_DIR);
        if path != expected_path {
            self.report(
                Rule::FileNameMismatch,
                self.at(path, "/consumer"),
                format!("`{path}` defines `{name}`, so it must be named `{expected_path}`"),
                format!("rename the file to `{expected_path}`, or correct `consumer:`"),
            );
        }
        let mut subscriptions: Vec<Subscription> = Vec::new();
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for (index, text) in def.subscribes.iter().enumerate() {
            let pointer = format!("/subscribes/{index}");
            let location = self.at(path, &pointer);
            let Some((event, requirement)) = text.as_str().split_once('@') else {
                continue;
            };
            let requirement = match semver::VersionReq::parse(requirement) {
                Ok(requirement) => requirement,
                Err(error) => {
                    self.report(
                        Rule::InvalidSubscription,
                        location,
                        format!(
                            "`{requirement}` in `{text}` is not a version requirement: {error}"
                        ),
                        "write a semver requirement such as `^1`, `>=1.2, <3` or `=2.0.0`"
                            .to_owned(),
                    );
                    continue;
                }
            };
            if let Some(first) = seen.insert(event, index) {
                let first_location = self.at(path, &format!("/subscribes/{first}"));
                let diagnostic = Diagnostic::new(
                    Rule::DuplicateSubscription,
                    location.clone(),
                    format!("`{name}` subscribes to `{event}` twice"),
                    "merge the two into one requirement (`>=1, <3`)",
                )
                .with_related(first_location, "first subscription");
                self.diagnostics.push(diagnostic);
                continue;
            }
            match events.get(event) {
                None if self.broken_events.contains(event) => {}
                None => self.report(
                    Rule::UnknownEventType,
                    location,
                    format!("`{name}` subscribes to `{event}`, which no contract defines"),
                    names::suggestion(event, events.keys().map(String::as_str)),
                ),
                Some(event_type) => {
                    let matching = event_type
                        .versions
                        .iter()
                        .any(|v| requirement.matches(&v.version));
                    if !matching {
                        let available: Vec<String> = event_type
                            .versions
                            .iter()
                            .map(|v| v.version.to_string())
                            .collect();
                        self.report(
                            Rule::VersionReqMatchesNothing,
                            location.clone(),
                            format!(
                                "`{requirement}` matches no version of `{event}` (it has {})",
                                available.join(", ")
                            ),
                            format!(
                                "subscribe to a version that exists, for example `{event}@^{}`",
                                event_type.versions.last().map_or(1, |v| v.version.major)
                            ),
                        );
                    }
                    if event_type.status == EventStatus::Deprecated {
                        self.report(
                            Rule::SubscribesToDeprecated,
                            location,
                            format!("`{name}` subscribes to `{event}`, which is deprecated"),
                            "move to its replacement and drop the subscription before the type is removed".to_owned(),
                        );
                    }
                }
            }
            subscriptions.push(Subscription {
                event: event.to_owned(),
                requirement,
            });
        }
        let class = self.executor_class(path, def, classes);
        let retry_policy = match (
            &def.retry_policy,
            class.and_then(|class| class.retry_policy.as_ref()),
            defaults.and_then(|d| d.retry_policy.as_ref()),
        ) {
            (Some(own), _, _) => {
                self.require_policy(path, "/retry_policy", own.as_str(), policies);
                own.0.clone()
            }
            (None, Some(of_class), _) => of_class.clone(),
            (None, None, Some(default)) => default.0.clone(),
            (None, None, None) if self.typed_project().is_none() => String::new(),
            // Its class did not resolve (already reported): the class may be what sets it.
            (None, None, None) if def.executor_class.is_some() && class.is_none() => String::new(),
            (None, None, None) => {
                let (message, fix) = match class {
                    Some(class) => (
                        format!(
                            "`{name}` names no `retry_policy`, and neither its executor class \
                             `{}` nor `evc.yaml` sets a default",
                            class.name
                        ),
                        format!(
                            "add `retry_policy:` to the consumer, to `{}` in `{}` or as \
                             `defaults.retry_policy` to evc.yaml",
                            class.name,
                            loader::EXECUTOR_CLASSES_FILE
                        ),
                    ),
                    None => (
                        format!("`{name}` names no `retry_policy` and `evc.yaml` sets no default"),
                        "add `retry_policy:` to the consumer or `defaults.retry_policy` to evc.yaml"
                            .to_owned(),
                    ),
                };
                self.report(Rule::MissingKey, self.at(path, ""), message, fix);
                String::new()
            }
        };
        let heartbeat_threshold = match (
            &def.heartbeat_threshold,
            class.and_then(|class| class.heartbeat_threshold),
            defaults.and_then(|d| d.heartbeat_threshold.as_ref()),
        ) {
            (Some(own), _, _) => self.duration(path, "/heartbeat_threshold", own.as_str()),
            (None, Some(of_class), _) => of_class,
            (None, None, Some(default)) => {
                duration::parse(default.as_str()).unwrap_or(DEFAULT_HEARTBEAT_THRESHOLD)
            }
            (None, None, None) => DEFAULT_HEARTBEAT_THRESHOLD,
        };
        let handler_timeout = def.handler_timeout.as_ref().map(|text| {
            let value = self.duration(path, "/handler_timeout", text.as_str());
            if value > MAX_HANDLER_TIMEOUT && value <= duration::MAX_RUNTIME {
                self.report(
                    Rule::ValueOutOfRange,
                    self.at(path, "/handler_timeout"),
                    format!(
                        "the handler timeout ({text}) is longer than {}: a handler attempt that \
                         long is not one a timeout should wait for",
                        duration::format(MAX_HANDLER_TIMEOUT)
                    ),
                    format!(
                        "write at most `{}`, or leave `handler_timeout` out for no limit",
                        duration::format(MAX_HANDLER_TIMEOUT)
                    ),
                );
            }
            value
        });
        let lag_thresholds = self.lag_thresholds(path, def, events, &subscriptions);
        let cutover_gate = def.cutover_gate.as_ref().map(|gate| CutoverGate {
            min_reconciled: gate.min_reconciled,
            min_span: gate.min_span.as_ref().map_or(Duration::ZERO, |text| {
                self.duration(path, "/cutover_gate/min_span", text.as_str())
            }),
            max_unexplained: gate.max_unexplained,
        });
        let inventory = def
            .inventory
            .as_ref()
            .map_or_else(Inventory::default, |rules| Inventory {
                max_age: rules
                    .max_age
                    .as_ref()
                    .map(|text| self.duration(path, "/inventory/max_age", text.as_str())),
                repair: rules.repair,
            });
        Consumer {
            name: name.to_owned(),
            description: def.description.clone(),
            executor_kind: def.executor_kind,
            executor_class: class.map(|class| class.name.clone()),
            subscriptions,
            retry_policy,
            handler: def.handler,
            ordering: def.ordering,
            mode: def.mode,
            heartbeat_threshold,
            handler_timeout,
            lag_thresholds,
            cutover_gate,
            inventory,
            file: path.to_owned(),
        }
    }

    /// The consumer's lag thresholds: each a duration, for a producer class of an event type
    /// it subscribes to.
    fn lag_thresholds(
        &mut self,
        path: &str,
        def: &ConsumerFile,
        events: &BTreeMap<String, EventType>,
        subscriptions: &[Subscription],
    ) -> BTreeMap<String, Duration> {
        let mut thresholds = BTreeMap::new();
        for (producer_class, text) in &def.lag_thresholds {
            let pointer = format!("/lag_thresholds/{}", escape_pointer_segment(producer_class));
            let threshold = self.duration(path, &pointer, text.as_str());
            let produces = |s: &Subscription| {
                events
                    .get(&s.event)
                    .is_some_and(|e| e.producer_class == *producer_class)
            };
            if !subscriptions.iter().any(produces) {
                let classes: BTreeSet<&str> = subscriptions
                    .iter()
                    .filter_map(|s| events.get(&s.event))
                    .map(|e| e.producer_class.as_str())
                    .collect();
                self.report(
                    Rule::InvalidValue,
                    self.at_key(path, &pointer),
                    format!(
                        "`{}` subscribes to no event of the producer class `{producer_class}`, \
                         so its lag from that class is never measured",
                        def.consumer
                    ),
                    format!(
                        "key the threshold by a producer class it receives from: {}",
                        classes
                            .iter()
                            .map(|c| format!("`{c}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
            thresholds.insert(producer_class.clone(), threshold);
        }
        thresholds
    }

    /// The class `def` names, when it exists, is active and of the consumer's kind; each way
    /// it falls short is reported. Without `executor-classes.yaml` no consumer may name one;
    /// with it, every consumer must. A broken file checks nothing.
    fn executor_class<'c>(
        &mut self,
        path: &str,
        def: &ConsumerFile,
        classes: &'c Option<BTreeMap<String, ExecutorClass>>,
    ) -> Option<&'c ExecutorClass> {
        let name = def.consumer.as_str();
        let file = loader::EXECUTOR_CLASSES_FILE;
        let broken = self
            .files
            .get(file)
            .is_some_and(|parsed| parsed.typed.is_none());
        let Some(wanted) = &def.executor_class else {
            if classes.is_some() && !broken {
                self.report(
                    Rule::MissingKey,
                    self.at(path, ""),
                    format!("`{name}` names no `executor_class`, and `{file}` registers the classes consumers run on"),
                    format!(
                        "add `executor_class:` with a class of kind `{}` from `{file}`",
                        keyword(&def.executor_kind)
                    ),
                );
            }
            return None;
        };
        let wanted = wanted.as_str();
        let location = self.at(path, "/executor_class");
        if broken {
            return None;
        }
        let Some(class) = classes.as_ref().and_then(|classes| classes.get(wanted)) else {
            let (message, fix) = match classes {
                None => (
                    format!(
                        "`{name}` names the executor class `{wanted}`, but there is no `{file}`"
                    ),
                    format!(
                        "remove `executor_class`, or define `{wanted}` under `classes:` in a new \
                         `{file}` (then every consumer names its class)"
                    ),
                ),
                Some(classes) => {
                    // Only classes the consumer could run on.
                    let candidates = classes
                        .values()
                        .filter(|class| class.active && class.kind == def.executor_kind)
                        .map(|class| class.name.as_str());
                    (
                        format!("the executor class `{wanted}` is not defined in `{file}`"),
                        match names::did_you_mean(wanted, candidates) {
                            Some(best) => format!("did you mean `{best}`?"),
                            None => format!("define `{wanted}` under `classes:` in `{file}`"),
                        },
                    )
                }
            };
            self.report(Rule::UnknownExecutorClass, location, message, fix);
            return None;
        };
        if !class.active {
            self.report(
                Rule::InactiveExecutorClass,
                location.clone(),
                format!("`{name}` runs on `{wanted}`, which is retired (`active: false`)"),
                format!(
                    "move `{name}` to an active class of kind `{}`",
                    keyword(&class.kind)
                ),
            );
        }
        if class.kind != def.executor_kind {
            self.report(
                Rule::ExecutorClassKindMismatch,
                location,
                format!(
                    "`{name}` is of kind `{}`, but `{wanted}` is a `{}` class",
                    keyword(&def.executor_kind),
                    keyword(&class.kind)
                ),
                format!(
                    "name a `{}` class, or make `executor_kind` `{}`",
                    keyword(&def.executor_kind),
                    keyword(&class.kind)
                ),
            );
        }
        Some(class)
    }

    fn require_policy(
        &mut self,
        path: &str,
        pointer: &str,
        name: &str,
        policies: &BTreeMap<String, RetryPolicy>,
    ) {
        let policies_broken = self
            .files
            .get(loader::RETRY_POLICIES_FILE)
            .is_some_and(|file| file.typed.is_none());
        if !policies.contains_key(name) && !policies_broken {
            let fix = if policies.is_empty() {
                format!(
                    "define `{name}` under `policies:` in `{}`",
                    loader::RETRY_POLICIES_FILE
                )
            } else {
                names::suggestion(name, policies.keys().map(String::as_str))
            };
            self.report(
                Rule::UnknownRetryPolicy,
                self.at(path, pointer),
                format!(
                    "the retry policy `{name}` is not defined in `{}`",
                    loader::RETRY_POLICIES_FILE
                ),
                fix,
            );
        }
    }

    /// The schedules of `schedules.yaml` (empty without it, or when it is broken): each cron
    /// expression parses as the runtime reads it, and each tick event is registered, named
    /// for its schedule, and would be accepted as the scheduler appends it.
    fn schedules(
        &mut self,
        events: &BTreeMap<String, EventType>,
        project: &Project,
    ) -> BTreeMap<String, Schedule> {
        let path = loader::SCHEDULES_FILE;
        let Some(Typed::Schedules(SchedulesFile { schedules })) =
            self.files.get(path).and_then(|file| file.typed.as_deref())
        else {
            return BTreeMap::new();
        };
        let mut lowered = BTreeMap::new();
        for (name, def) in schedules {
            let pointer = format!("/schedules/{}", escape_pointer_segment(name));
            self.cron(path, &pointer, name, &def.cron);
            self.tick_event(path, &pointer, name, def, events, project);
            lowered.insert(
                name.clone(),
                Schedule {
                    name: name.clone(),
                    description: def.description.clone(),
                    cron: def.cron.clone(),
                    event: def.event.0.clone(),
                    missed: def.missed,
                    catch_up_limit: def.catch_up_limit.unwrap_or(DEFAULT_CATCH_UP_LIMIT),
                    tenant_scope: def.tenant_scope.clone(),
                },
            );
        }
        lowered
    }

    /// Reports a cron expression the runtime would not read (it parses as the runtime's
    /// scheduler parses it: five or six fields, no year) or whose slots never come (the 30th
    /// of February).
    fn cron(&mut self, path: &str, pointer: &str, name: &str, expression: &str) {
        let location = self.at(path, &format!("{pointer}/cron"));
        let fix = "write five fields, `minute hour day-of-month month day-of-week` (`0 3 * * *`), \
                   or six with seconds first (`*/10 * * * * *`); times are UTC";
        let cron = match croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .year(croner::parser::Year::Disallowed)
            .build()
            .parse(expression)
        {
            Ok(cron) => cron,
            Err(error) => {
                self.report(
                    Rule::InvalidCron,
                    location,
                    format!("the cron expression of `{name}` does not parse: {error}"),
                    fix.to_owned(),
                );
                return;
            }
        };
        // A fixed start keeps `check` independent of the day it runs; every expression that
        // fires at all fires within the 28-year calendar cycle after it.
        let start = chrono::DateTime::from_timestamp(946_684_800, 0).unwrap_or_default();
        if cron.find_next_occurrence(&start, false).is_err() {
            self.report(
                Rule::InvalidCron,
                location,
                format!("the cron expression of `{name}` has no slot: no date matches it"),
                "check the day of the month against the month (`0 0 30 2 *` never comes)"
                    .to_owned(),
            );
        }
    }

    /// Reports a schedule whose ticks the runtime would refuse or could not append: an event
    /// not named `cron.tick.<schedule>` or not registered, a newest version whose schema
    /// refuses the tick payload, or no tenant where the envelope requires one.
    fn tick_event(
        &mut self,
        path: &str,
        pointer: &str,
        name: &str,
        def: &ScheduleDef,
        events: &BTreeMap<String, EventType>,
        project: &Project,
    ) {
        let event = def.event.as_str();
        let location = self.at(path, &format!("{pointer}/event"));
        let expected = format!("{TICK_EVENT_PREFIX}{name}");
        if event != expected {
            self.report(
                Rule::InvalidTickEvent,
                location.clone(),
                format!("`{name}` ticks `{event}`; a schedule's tick event is `{expected}`"),
                format!("name the event `{expected}` (`events/{expected}.yaml`)"),
            );
        }
        let Some(event_type) = events.get(event) else {
            if !self.broken_events.contains(event) {
                self.report(
                    Rule::UnknownEventType,
                    location,
                    format!("`{name}` ticks `{event}`, which no contract defines"),
                    format!(
                        "define `events/{event}.yaml` with a payload of `schedule` and `slot` \
                         (a date-time string)"
                    ),
                );
            }
            return;
        };
        if def.tenant_scope.as_deref() == Some("*") {
            self.report(
                Rule::InvalidValue,
                self.at(path, &format!("{pointer}/tenant_scope")),
                format!("`{name}` names the tenant `*`, which stands for every tenant"),
                "name one tenant, or leave `tenant_scope` out".to_owned(),
            );
        }
        if project.require_tenant_scope && def.tenant_scope.is_none() {
            self.report(
                Rule::InvalidTickEvent,
                self.at(path, pointer),
                format!(
                    "the ticks of `{name}` have no tenant, and `envelope.require_tenant_scope` \
                     refuses events without one"
                ),
                "set `tenant_scope:` on the schedule".to_owned(),
            );
        }
        let Some(newest) = event_type.versions.last() else {
            return;
        };
        // The payload the scheduler appends: `schedule` and `slot` (a date-time in UTC).
        let mut payload = serde_json::Map::new();
        payload.insert("schedule".into(), name.into());
        payload.insert("slot".into(), "2026-01-01T00:00:00Z".into());
        if let Some(error) = refusal(newest, payload) {
            self.report(
                Rule::InvalidTickEvent,
                location,
                format!(
                    "`{event}` {} refuses the tick `{name}` appends (`schedule` and `slot`): {error}",
                    newest.version
                ),
                "let the newest version's payload be `schedule` (a string) and `slot` (a \
                 date-time string), or a subset of them"
                    .to_owned(),
            );
        }
    }

    /// Reports lag thresholds the runtime could not act on: `event_lag.breach` not registered,
    /// its newest version refusing the breach the dispatcher appends, or an envelope that
    /// requires a tenant (a breach is about a consumer, in no tenant).
    fn lag_breach_event(
        &mut self,
        events: &BTreeMap<String, EventType>,
        consumers: &BTreeMap<String, Consumer>,
        project: &Project,
    ) {
        let Some((consumer, producer_class)) = consumers.values().find_map(|consumer| {
            let class = consumer.lag_thresholds.keys().next()?;
            Some((consumer, class))
        }) else {
            return;
        };
        let pointer = format!("/lag_thresholds/{}", escape_pointer_segment(producer_class));
        let at_threshold = self.at_key(&consumer.file, &pointer);
        let Some(event_type) = events.get(LAG_BREACH_EVENT) else {
            if !self.broken_events.contains(LAG_BREACH_EVENT) {
                self.report(
                    Rule::UnknownEventType,
                    at_threshold,
                    format!(
                        "`{}` sets a lag threshold, whose breaches append `{LAG_BREACH_EVENT}`, \
                         which no contract defines",
                        consumer.name
                    ),
                    format!(
                        "define `events/{LAG_BREACH_EVENT}.yaml` (docs/contracts.md lists its \
                         payload), or remove `lag_thresholds`"
                    ),
                );
            }
            return;
        };
        if project.require_tenant_scope {
            self.report(
                Rule::InvalidLagBreachEvent,
                at_threshold.clone(),
                format!(
                    "a breach of `{}`'s lag threshold is in no tenant, and \
                     `envelope.require_tenant_scope` refuses events without one",
                    consumer.name
                ),
                "remove `lag_thresholds`, or stop requiring a tenant scope".to_owned(),
            );
        }
        let Some(newest) = event_type.versions.last() else {
            return;
        };
        let mut payload = serde_json::Map::new();
        payload.insert("breach_id".into(), 1.into());
        payload.insert("producer_class".into(), producer_class.as_str().into());
        payload.insert("consumer_name".into(), consumer.name.as_str().into());
        payload.insert("threshold_ms".into(), 60_000.into());
        payload.insert("lag_ms".into(), 61_000.into());
        payload.insert(
            "oldest_event_id".into(),
            "01890a5d-ac96-774b-bcce-b302099a8057".into(),
        );
        payload.insert("breached_at".into(), "2026-01-01T00:00:00Z".into());
        if let Some(error) = refusal(newest, payload) {
            self.report(
                Rule::InvalidLagBreachEvent,
                self.at(&event_type.file, &format!("{}/schema", newest.pointer)),
                format!(
                    "`{LAG_BREACH_EVENT}` {} refuses the breach the dispatcher appends: {error}",
                    newest.version
                ),
                "let the newest version's payload be the breach's fields (docs/contracts.md, \
                 \"Lag breach events\"), or a subset of them"
                    .to_owned(),
            );
        }
    }

    fn topics(&mut self, events: &BTreeMap<String, EventType>) -> BTreeMap<String, Topic> {
        let path = loader::TOPICS_FILE;
        let Some(Typed::Topics(TopicsFile { topics })) =
            self.files.get(path).and_then(|file| file.typed.as_deref())
        else {
            return BTreeMap::new();
        };
        let broken_event_names = self.broken_events.clone();
        let mut lowered = BTreeMap::new();
        for (name, def) in topics {
            let pointer = format!("/topics/{}", escape_pointer_segment(name));
            let mut matched: BTreeSet<&str> = BTreeSet::new();
            for (index, pattern) in def.events.iter().enumerate() {
                let hits: Vec<&str> = events
                    .keys()
                    .map(String::as_str)
                    .filter(|event| glob_matches(pattern.as_str(), event))
                    .collect();
                let broken_hit = broken_event_names
                    .iter()
                    .any(|event| glob_matches(pattern.as_str(), event));
                if hits.is_empty() && !broken_hit {
                    self.report(
                        Rule::TopicMatchesNothing,
                        self.at(path, &format!("{pointer}/events/{index}")),
                        format!("the pattern `{pattern}` of topic `{name}` matches no event type"),
                        names::suggestion(pattern.as_str(), events.keys().map(String::as_str)),
                    );
                }
                matched.extend(hits);
            }
            let mut payload_fields: Vec<(String, String)> = Vec::new();
            if let Some(field) = def
                .key
                .as_ref()
                .and_then(|key| key.as_str().strip_prefix("payload."))
            {
                payload_fields.push((field.to_owned(), format!("{pointer}/key")));
            }
            for field in def.filter.keys() {
                payload_fields.push((
                    field.clone(),
                    format!("{pointer}/filter/{}", escape_pointer_segment(field)),
                ));
            }
            for (field, field_pointer) in payload_fields {
                let missing: Vec<String> = matched
                    .iter()
                    .flat_map(|event| events[*event].versions.iter().map(move |v| (event, v)))
                    .filter(|(_, version)| {
                        version
                            .schema
                            .pointer(&format!("/properties/{}", escape_pointer_segment(&field)))
                            .is_none()
                    })
                    .map(|(event, version)| format!("{event} {}", version.version))
                    .collect();
                if !missing.is_empty() {
                    self.report(
                        Rule::TopicFieldNotInPayload,
                        self.at_key(path, &field_pointer),
                        format!(
                            "topic `{name}` uses the payload field `{field}`, which {} lack{}",
                            missing.join(", "),
                            if missing.len() == 1 { "s" } else { "" }
                        ),
                        format!("add `{field}` to those payloads, or narrow the topic's `events`"),
                    );
                }
            }
            lowered.insert(
                name.clone(),
                Topic {
                    name: name.clone(),
                    description: def.description.clone(),
                    events: def.events.iter().map(|p| p.0.clone()).collect(),
                    key: def.key.as_ref().map(|k| k.0.clone()),
                    filter: def.filter.clone(),
                },
            );
        }
        lowered
    }
}

/// The content model of an event type: its own, else the project's.
fn content_model(def: &EventFile, policy: &PayloadPolicy) -> ContentModel {
    def.payload_policy
        .as_ref()
        .and_then(|own| own.content)
        .unwrap_or(policy.content)
}

/// The payload schema checks of every version of every event type in `definitions`, in order,
/// on two threads: they are independent of each other and of the rest of validation.
/// The checks `cache` holds for a file this load took from it, under the same policy, are
/// taken from it.
fn check_payload_schemas(
    definitions: &[(&String, &EventFile)],
    project: &Project,
    cache: Option<&LoadCache>,
) -> Vec<Vec<payload_schema::Checked>> {
    let policy = &project.payload_policy;
    let check_one = |path: &str, def: &EventFile| {
        let content = content_model(def, policy);
        if let Some(checked) = cache.and_then(|cache| cache.take_checks(path, policy, content)) {
            return checked;
        }
        let checked: Vec<_> = def
            .versions
            .iter()
            .map(|version| payload_schema::check_shared(&version.schema, policy, content))
            .collect();
        if let Some(cache) = cache {
            cache.remember_checks(path, policy, content, &checked);
        }
        checked
    };
    let check_all = |definitions: &[(&String, &EventFile)]| {
        definitions
            .iter()
            .map(|(path, def)| check_one(path, def))
            .collect::<Vec<Vec<_>>>()
    };
    let (first, second) = definitions.split_at(definitions.len() / 2);
    std::thread::scope(|scope| {
        let second = scope.spawn(|| check_all(second));
        let mut checked = check_all(first);
        match second.join() {
            Ok(rest) => checked.extend(rest),
            Err(panic) => std::panic::resume_unwind(panic),
        }
        checked
    })
}

fn invalid_range(checker: &mut Checker<'_>, path: &str, pointer: &str, message: String, fix: &str) {
    let location = checker.at(path, pointer);
    checker.report(Rule::ValueOutOfRange, location, message, fix.to_owned());
}

/// The longest delay a retry policy without `max_delay` can wait between two attempts, as the
/// runtime computes it (`evc_runtime::RetryPolicy::delay`: the nominal delay after attempt
/// `n` is `base`, `base × 2^(n-1)` or `base × F(n)`; decorrelated jitter draws up to three times
/// it); `None` for policies that never wait.
fn longest_retry_delay(
    kind: RetryKind,
    jitter: crate::format::Jitter,
    base: Duration,
    max_attempts: u32,
) -> Option<Duration> {
    // A retry follows attempts 1 to max_attempts - 1.
    let last = max_attempts.checked_sub(1).filter(|n| *n >= 1)?;
    let base = u64::try_from(base.as_millis()).unwrap_or(u64::MAX);
    let nominal = match kind {
        RetryKind::NoRetry => return None,
        RetryKind::FixedDelay => base,
        RetryKind::ExponentialBackoff => {
            base.saturating_mul(1u64.checked_shl(last - 1).unwrap_or(u64::MAX))
        }
        RetryKind::Fibonacci => {
            let (mut a, mut b) = (1u64, 1u64);
            for _ in 2..last {
                (a, b) = (b, a.saturating_add(b));
            }
            base.saturating_mul(b)
        }
    };
    let longest = match jitter {
        crate::format::Jitter::Decorrelated => nominal.saturating_mul(3),
        _ => nominal,
    };
    Some(Duration::from_millis(longest))
}

/// The pointer of one order key field: the list item when several are given.
fn order_key_pointer(def: &EventFile, field: &str) -> String {
    match &def.order_key {
        Some(crate::format::OrderKeyDef::Many(fields)) => {
            fields.iter().position(|f| f.as_str() == field).map_or_else(
                || "/order_key".to_owned(),
                |index| format!("/order_key/{index}"),
            )
        }
        _ => "/order_key".to_owned(),
    }
}
