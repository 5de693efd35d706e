//! Diagnostics: every problem found in a contract set, with its rule, place, sentence and fix.

use std::fmt::Write as _;

use serde::Serialize;

use crate::printable::{Snippet, escape};
use crate::source::{Location, Sources};

/// How bad a finding is. Errors fail `evc check`; warnings are reported and do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The contract set is invalid.
    Error,
    /// Valid, but probably not what the author wants.
    Warning,
}

impl Severity {
    /// The lower-case name used in text and JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Warning => "warning",
        }
    }
}

macro_rules! rules {
    ($( $(#[$doc:meta])* $variant:ident = $id:literal, $severity:ident; )*) => {
        /// Every rule `evc check` applies. `docs/rules.md` explains each with a bad example and
        /// its fix.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Rule {
            $( $(#[$doc])* $variant, )*
        }

        impl Rule {
            /// All rules, in documentation order.
            pub const ALL: &'static [Rule] = &[$(Rule::$variant,)*];

            /// The stable SCREAMING_SNAKE identifier of the rule.
            pub fn id(self) -> &'static str {
                match self { $( Rule::$variant => $id, )* }
            }

            /// The severity findings of this rule carry.
            pub fn severity(self) -> Severity {
                match self { $( Rule::$variant => Severity::$severity, )* }
            }
        }
    };
}

rules! {
    /// A contract file could not be read (permissions, a symlink loop, a directory in its place).
    FileUnreadable = "FILE_UNREADABLE", Error;
    /// A contract file is larger than the loader accepts.
    FileTooLarge = "FILE_TOO_LARGE", Error;
    /// A contract file is not valid UTF-8.
    FileNotUtf8 = "FILE_NOT_UTF8", Error;
    /// A contract file holds no YAML document.
    FileEmpty = "FILE_EMPTY", Error;
    /// A contract file or folder that is not read: a symlink leading outside the contract
    /// directory, or a FIFO, socket or device instead of a regular file.
    UnsafeFile = "UNSAFE_FILE", Error;
    /// The contract directory holds more files or bytes than one load reads.
    ContractDirTooLarge = "CONTRACT_DIR_TOO_LARGE", Error;
    /// A file in the contract directory that the loader does not know what to do with.
    UnexpectedFile = "UNEXPECTED_FILE", Warning;
    /// The contract directory has no `evc.yaml`.
    MissingProjectFile = "MISSING_PROJECT_FILE", Error;
    /// The YAML does not parse.
    YamlSyntax = "YAML_SYNTAX", Error;
    /// A mapping repeats a key.
    YamlDuplicateKey = "YAML_DUPLICATE_KEY", Error;
    /// The YAML exceeds a safety limit (nesting depth, aliases, node count).
    YamlLimitExceeded = "YAML_LIMIT_EXCEEDED", Error;
    /// A mapping key is not a string.
    YamlNonStringKey = "YAML_NON_STRING_KEY", Error;
    /// A key the contract format does not define.
    UnknownKey = "UNKNOWN_KEY", Error;
    /// A key the contract format requires is absent.
    MissingKey = "MISSING_KEY", Error;
    /// A value has the wrong YAML type (a list where a string belongs, and so on).
    WrongType = "WRONG_TYPE", Error;
    /// A value is outside what the key accepts (an enum, a range, a minimum length).
    InvalidValue = "INVALID_VALUE", Error;
    /// A name (event type, consumer, retry policy, topic) is not a valid identifier.
    InvalidIdentifier = "INVALID_IDENTIFIER", Error;
    /// A duration is not written as a number and a unit (`30s`, `10m`, `14d`).
    InvalidDuration = "INVALID_DURATION", Error;
    /// A version is not a semantic version (`1.2.0`).
    InvalidVersion = "INVALID_VERSION", Error;
    /// A subscription is not written `event.type@requirement`, or its requirement is invalid.
    InvalidSubscription = "INVALID_SUBSCRIPTION", Error;
    /// An event file's name does not match the event type it defines.
    FileNameMismatch = "FILE_NAME_MISMATCH", Error;
    /// Two files define the same event type.
    DuplicateEventType = "DUPLICATE_EVENT_TYPE", Error;
    /// Two files define the same consumer.
    DuplicateConsumer = "DUPLICATE_CONSUMER", Error;
    /// An event type lists the same version twice.
    DuplicateVersion = "DUPLICATE_VERSION", Error;
    /// An event type's versions are not in ascending order.
    VersionsOutOfOrder = "VERSIONS_OUT_OF_ORDER", Error;
    /// A payload schema is not a valid JSON Schema document of the draft it is written in, or
    /// names a draft evc does not read.
    InvalidJsonSchema = "INVALID_JSON_SCHEMA", Error;
    /// A payload schema uses a keyword JSON Schema 2020-12 does not define (a typo such as
    /// `requried` would otherwise be ignored).
    UnknownSchemaKeyword = "UNKNOWN_SCHEMA_KEYWORD", Error;
    /// A payload schema uses a `format` JSON Schema 2020-12 does not define; it is not checked.
    UnknownSchemaFormat = "UNKNOWN_SCHEMA_FORMAT", Warning;
    /// Under closed content, an object in a payload schema accepts keys it does not list.
    OpenPayloadObject = "OPEN_PAYLOAD_OBJECT", Error;
    /// A payload schema allows a key on the payload policy's deny-list.
    DeniedKeyInSchema = "DENIED_KEY_IN_SCHEMA", Error;
    /// A payload schema allows a key whose name looks like a credential.
    CredentialKeyInSchema = "CREDENTIAL_KEY_IN_SCHEMA", Error;
    /// An `order_key` field that is not a required property of every version.
    OrderKeyNotRequired = "ORDER_KEY_NOT_REQUIRED", Error;
    /// A `max_payload_bytes` above the payload policy's hard cap.
    PayloadCapAboveHardCap = "PAYLOAD_CAP_ABOVE_HARD_CAP", Error;
    /// A major version bump under a compatibility mode that forbids one.
    MajorBumpNotAllowed = "MAJOR_BUMP_NOT_ALLOWED", Error;
    /// A major version bump under `breaking_with_policy` without a `migration_policy`.
    MissingMigrationPolicy = "MISSING_MIGRATION_POLICY", Error;
    /// A `migration_policy` on a version that is not a major bump.
    UnneededMigrationPolicy = "UNNEEDED_MIGRATION_POLICY", Warning;
    /// A subscription to an event type no contract defines.
    UnknownEventType = "UNKNOWN_EVENT_TYPE", Error;
    /// A subscription whose version requirement matches no version of the event type.
    VersionReqMatchesNothing = "VERSION_REQ_MATCHES_NOTHING", Error;
    /// A consumer subscribes to the same event type twice.
    DuplicateSubscription = "DUPLICATE_SUBSCRIPTION", Error;
    /// A subscription to a deprecated event type.
    SubscribesToDeprecated = "SUBSCRIBES_TO_DEPRECATED", Warning;
    /// A reference to a retry policy that `retry-policies.yaml` does not define.
    UnknownRetryPolicy = "UNKNOWN_RETRY_POLICY", Error;
    /// A retry policy whose settings contradict each other.
    InvalidRetryPolicy = "INVALID_RETRY_POLICY", Error;
    /// A consumer's `executor_class` that `executor-classes.yaml` does not define.
    UnknownExecutorClass = "UNKNOWN_EXECUTOR_CLASS", Error;
    /// A consumer names an executor class that is retired (`active: false`).
    InactiveExecutorClass = "INACTIVE_EXECUTOR_CLASS", Error;
    /// A consumer's `executor_class` is of another kind than its `executor_kind`.
    ExecutorClassKindMismatch = "EXECUTOR_CLASS_KIND_MISMATCH", Error;
    /// A schedule's cron expression does not parse.
    InvalidCron = "INVALID_CRON", Error;
    /// A schedule's ticks would be refused: its event is not `cron.tick.<schedule>`, its
    /// newest version refuses the tick payload, or it has no tenant where the envelope
    /// requires one.
    InvalidTickEvent = "INVALID_TICK_EVENT", Error;
    /// Lag thresholds are set and `event_lag.breach` refuses the breach the dispatcher
    /// appends, or the envelope requires a tenant a breach cannot have.
    InvalidLagBreachEvent = "INVALID_LAG_BREACH_EVENT", Error;
    /// A payload policy whose settings contradict each other.
    InvalidPayloadPolicy = "INVALID_PAYLOAD_POLICY", Error;
    /// A topic event pattern that matches no event type.
    TopicMatchesNothing = "TOPIC_MATCHES_NOTHING", Error;
    /// A topic key or filter names a payload field that a matched event type does not have.
    TopicFieldNotInPayload = "TOPIC_FIELD_NOT_IN_PAYLOAD", Error;
    /// Two contract names become one Rust name in one scope of the generated crate.
    RustNameCollision = "RUST_NAME_COLLISION", Error;
    /// The Rust generator cannot render the contracts for a reason no other rule names.
    RustNotGeneratable = "RUST_NOT_GENERATABLE", Error;
    /// A cycle of `$ref`s that never reaches a schema, or recursion through a non-object.
    RefCycle = "REF_CYCLE", Error;
    /// A control or bidirectional-formatting character in contract text.
    ControlCharacter = "CONTROL_CHARACTER", Error;
    /// A number or duration beyond what the runtime's columns and intervals hold.
    ValueOutOfRange = "VALUE_OUT_OF_RANGE", Error;
    /// The AsyncAPI document has no channel for an event type of the registry.
    AsyncApiMissingChannel = "ASYNCAPI_MISSING_CHANNEL", Error;
    /// The AsyncAPI document lacks a message for a version of an event type, in its channel or in
    /// an operation that should list it.
    AsyncApiMissingMessage = "ASYNCAPI_MISSING_MESSAGE", Error;
    /// The AsyncAPI document lacks the `send` operation of an event type or the `receive`
    /// operation of a consumer's subscription.
    AsyncApiMissingOperation = "ASYNCAPI_MISSING_OPERATION", Error;
    /// The AsyncAPI document has a channel for an event type the registry does not define.
    AsyncApiUnknownChannel = "ASYNCAPI_UNKNOWN_CHANNEL", Error;
    /// The AsyncAPI document has a message (in a channel or an operation) for a version the
    /// registry does not define, or one the operation's consumer does not accept.
    AsyncApiUnknownMessage = "ASYNCAPI_UNKNOWN_MESSAGE", Error;
    /// The AsyncAPI document has an operation for a producer class, consumer or subscription the
    /// registry does not define.
    AsyncApiUnknownOperation = "ASYNCAPI_UNKNOWN_OPERATION", Error;
    /// A reference in the AsyncAPI document points at nothing, or an operation refers to a
    /// channel or message it may not (the cross-object rules the AsyncAPI schema misses).
    AsyncApiBrokenReference = "ASYNCAPI_BROKEN_REFERENCE", Error;
}

/// Another place that helps explain a diagnostic (the first definition of a duplicate, say).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Related {
    /// Where.
    #[serde(flatten)]
    pub location: Location,
    /// What is there.
    pub message: String,
}

/// One problem in a contract set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// The rule that found it.
    #[serde(serialize_with = "serialize_rule")]
    pub rule: Rule,
    /// Error or warning.
    pub severity: Severity,
    /// Where it is.
    #[serde(flatten)]
    pub location: Location,
    /// One sentence saying what is wrong.
    pub message: String,
    /// What to do about it.
    pub fix: String,
    /// Other places involved.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub related: Vec<Related>,
}

fn serialize_rule<S: serde::Serializer>(rule: &Rule, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(rule.id())
}

impl Diagnostic {
    /// A diagnostic with the rule's own severity.
    pub fn new(
        rule: Rule,
        location: Location,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            rule,
            severity: rule.severity(),
            location,
            message: message.into(),
            fix: fix.into(),
            related: Vec::new(),
        }
    }

    /// Adds a related place.
    pub fn with_related(mut self, location: Location, message: impl Into<String>) -> Self {
        self.related.push(Related {
            location,
            message: message.into(),
        });
        self
    }

    /// Whether this diagnostic fails a check.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// The compact, one-finding-per-block text form used in logs and snapshots. Control
    /// characters from the contracts are escaped ([`crate::printable::escape`]).
    pub fn to_short_string(&self) -> String {
        let mut out = format!(
            "{}: {}[{}]: {}\n  fix: {}",
            escape(&self.location.to_string()),
            self.severity.as_str(),
            self.rule.id(),
            escape(&self.message),
            escape(&self.fix)
        );
        for related in &self.related {
            let _ = write!(
                out,
                "\n  see: {}: {}",
                escape(&related.location.to_string()),
                escape(&related.message)
            );
        }
        out
    }
}

/// Sorts diagnostics by file, position and rule, so output is stable whatever the load order.
pub fn sort(diagnostics: &mut [Diagnostic]) {
    diagnostics.sort_by(|a, b| {
        (
            &a.location.file,
            a.location.line,
            a.location.column,
            a.rule,
            &a.message,
        )
            .cmp(&(
                &b.location.file,
                b.location.line,
                b.location.column,
                b.rule,
                &b.message,
            ))
    });
}

/// Renders diagnostics for people, with source snippets, through miette. Text from the
/// contracts (messages, file names, source lines) is escaped, and a long source line is cut to
/// a window around the finding ([`Snippet`]).
pub fn render_human(diagnostics: &[Diagnostic], sources: &Sources, color: bool) -> String {
    let theme = if color {
        miette::GraphicalTheme::unicode()
    } else {
        miette::GraphicalTheme::unicode_nocolor()
    };
    let handler = miette::GraphicalReportHandler::new_themed(theme)
        .with_width(100)
        .with_context_lines(1);
    let mut out = String::new();
    for diagnostic in diagnostics {
        let report = MietteReport::new(diagnostic, sources);
        if handler.render_report(&mut out, &report).is_err() {
            out.push_str(&diagnostic.to_short_string());
        }
        out.push('\n');
    }
    out
}

/// Adapts a [`Diagnostic`] to miette's reporting traits.
#[derive(Debug)]
struct MietteReport {
    heading: String,
    code: String,
    /// `None` for related places, which miette then shows as advice.
    severity: Option<Severity>,
    fix: String,
    source: Option<SnippetSource>,
    labels: Vec<miette::LabeledSpan>,
    related: Vec<MietteReport>,
}

impl MietteReport {
    fn new(diagnostic: &Diagnostic, sources: &Sources) -> Self {
        let (source, labels) = snippet(sources, &diagnostic.location, diagnostic.rule.id());
        let related = diagnostic
            .related
            .iter()
            .map(|related| {
                let (source, labels) = snippet(sources, &related.location, &related.message);
                Self {
                    heading: escape(&format!("{}: {}", related.location, related.message))
                        .into_owned(),
                    code: String::new(),
                    severity: None,
                    fix: String::new(),
                    labels,
                    source,
                    related: Vec::new(),
                }
            })
            .collect();
        Self {
            heading: escape(&format!("{}: {}", diagnostic.location, diagnostic.message))
                .into_owned(),
            code: diagnostic.rule.id().to_owned(),
            severity: Some(diagnostic.severity),
            fix: escape(&diagnostic.fix).into_owned(),
            source,
            labels,
            related,
        }
    }
}

/// The excerpt of the file `location` points into, when it was read, and its one label.
fn snippet(
    sources: &Sources,
    location: &Location,
    label: &str,
) -> (Option<SnippetSource>, Vec<miette::LabeledSpan>) {
    let Some(file) = sources.get(&location.file) else {
        return (None, Vec::new());
    };
    let snippet = Snippet::new(file, location.offset, location.len);
    let labels = vec![miette::LabeledSpan::new_primary_with_span(
        Some(escape(label).into_owned()),
        snippet.label,
    )];
    let source = SnippetSource {
        name: escape(file.path()).into_owned(),
        snippet,
        line: location.line.saturating_sub(1) as usize,
        column: location.column.saturating_sub(1) as usize,
    };
    (Some(source), labels)
}

/// A [`Snippet`] as miette's source: whatever span miette asks for, it gets the whole excerpt,
/// numbered with the file's own line numbers. Asked without context lines (for the heading's
/// `file:line:col`), it answers with the finding's own line and column (0-based).
#[derive(Debug)]
struct SnippetSource {
    name: String,
    snippet: Snippet,
    line: usize,
    column: usize,
}

impl miette::SourceCode for SnippetSource {
    fn read_span<'a>(
        &'a self,
        _span: &miette::SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn miette::SpanContents<'a> + 'a>, miette::MietteError> {
        let text = &self.snippet.text;
        let (line, column) = if context_lines_before == 0 && context_lines_after == 0 {
            (self.line, self.column)
        } else {
            (self.snippet.first_line, 0)
        };
        Ok(Box::new(miette::MietteSpanContents::new_named(
            self.name.clone(),
            text.as_bytes(),
            (0, text.len()).into(),
            line,
            column,
            self.snippet.line_count,
        )))
    }
}

impl std::fmt::Display for MietteReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.heading)
    }
}

impl std::error::Error for MietteReport {}

impl miette::Diagnostic for MietteReport {
    fn code<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        (!self.code.is_empty()).then(|| Box::new(&self.code) as Box<dyn std::fmt::Display>)
    }

    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.severity {
            Some(Severity::Error) => miette::Severity::Error,
            Some(Severity::Warning) => miette::Severity::Warning,
            None => miette::Severity::Advice,
        })
    }

    fn help<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        (!self.fix.is_empty()).then(|| Box::new(&self.fix) as Box<dyn std::fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.source
            .as_ref()
            .map(|source| source as &dyn miette::SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = miette::LabeledSpan> + '_>> {
        (!self.labels.is_empty()).then(|| {
            Box::new(self.labels.iter().cloned()) as Box<dyn Iterator<Item = miette::LabeledSpan>>
        })
    }

    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn miette::Diagnostic> + 'a>> {
        (!self.related.is_empty()).then(|| {
            Box::new(self.related.iter().map(|r| r as &dyn miette::Diagnostic))
                as Box<dyn Iterator<Item = &'a dyn miette::Diagnostic>>
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_ids_are_unique_screaming_snake() {
        let mut seen = std::collections::BTreeSet::new();
        for rule in Rule::ALL {
            let id = rule.id();
            assert!(seen.insert(id), "duplicate rule id {id}");
            assert!(
                id.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'),
                "{id} is not SCREAMING_SNAKE"
            );
        }
    }

    #[test]
    fn short_form_names_place_rule_and_fix() {
        let diagnostic = Diagnostic::new(
            Rule::UnknownKey,
            Location {
                file: "events/a.b.yaml".into(),
                line: 3,
                column: 5,
                offset: 0,
                len: 0,
            },
            "unknown key `x`",
            "remove it",
        );
        assert_eq!(
            diagnostic.to_short_string(),
            "events/a.b.yaml:3:5: error[UNKNOWN_KEY]: unknown key `x`\n  fix: remove it"
        );
    }
}
