//! What `evc compat` finds: rules, findings and the report that every output format renders.

use serde::Serialize;

use crate::source::Location;

/// How bad a compatibility finding is. Errors make `evc compat` exit 100; warnings and notes are
/// reported and do not fail the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The change must not merge as it is.
    Error,
    /// Probably a mistake, or a change reviewers should see.
    Warning,
    /// Advice (the version bump to use, say).
    Note,
}

impl Severity {
    /// The lower-case name used in every output format.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Warning => "warning",
            Self::Note => "note",
        }
    }
}

macro_rules! compat_rules {
    ($( $(#[$doc:meta])* $variant:ident = $id:literal, $severity:ident, $summary:literal; )*) => {
        /// Every rule `evc compat` applies. `docs/compat.md` explains each one.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum CompatRule {
            $( $(#[$doc])* $variant, )*
        }

        impl CompatRule {
            /// All rules, in documentation order.
            pub const ALL: &'static [CompatRule] = &[$(CompatRule::$variant,)*];

            /// The stable SCREAMING_SNAKE identifier.
            pub fn id(self) -> &'static str {
                match self { $( CompatRule::$variant => $id, )* }
            }

            /// The severity findings of this rule carry.
            pub fn severity(self) -> Severity {
                match self { $( CompatRule::$variant => Severity::$severity, )* }
            }

            /// One sentence saying what the rule guards (SARIF `shortDescription`, docs).
            pub fn summary(self) -> &'static str {
                match self { $( CompatRule::$variant => $summary, )* }
            }
        }
    };
}

compat_rules! {
    // Schema changes the engine finds (reader cannot read what a writer emits).
    /// The reader accepts fewer JSON types than the writer emits.
    TypeNarrowed = "TYPE_NARROWED", Error,
        "The reader accepts fewer JSON types than the writer can emit.";
    /// The reader requires a property the writer may omit.
    RequiredAdded = "REQUIRED_ADDED", Error,
        "The reader requires a property the writer may leave out.";
    /// The reader rejects a property the writer may emit.
    PropertyRejected = "PROPERTY_REJECTED", Error,
        "The reader rejects a property the writer may emit.";
    /// The reader allows fewer values (enum or const) than the writer emits.
    EnumNarrowed = "ENUM_NARROWED", Error,
        "The reader allows fewer enum or const values than the writer can emit.";
    /// A numeric bound or multipleOf of the reader is tighter than the writer's.
    NumberRangeNarrowed = "NUMBER_RANGE_NARROWED", Error,
        "A numeric bound (minimum, maximum, exclusive bounds, multipleOf) of the reader is tighter.";
    /// A string length bound of the reader is tighter than the writer's.
    StringLengthNarrowed = "STRING_LENGTH_NARROWED", Error,
        "A string length bound of the reader is tighter than the writer's.";
    /// The reader's pattern differs from the writer's (regex inclusion is not decided).
    PatternChanged = "PATTERN_CHANGED", Error,
        "The reader's pattern is new or differs from the writer's.";
    /// The reader's format differs from the writer's.
    FormatChanged = "FORMAT_CHANGED", Error,
        "The reader checks a format the writer does not guarantee.";
    /// An array bound or uniqueness of the reader is tighter than the writer's.
    ArrayNarrowed = "ARRAY_NARROWED", Error,
        "An array constraint of the reader (length, uniqueItems, contains) is tighter.";
    /// An object-size or dependency constraint of the reader is tighter than the writer's.
    ObjectNarrowed = "OBJECT_NARROWED", Error,
        "An object constraint of the reader (property count, names, dependencies) is tighter.";
    /// No alternative of the reader's anyOf/oneOf accepts some of the writer's values.
    AlternativeRemoved = "ALTERNATIVE_REMOVED", Error,
        "No alternative of the reader's anyOf/oneOf accepts some values the writer emits.";
    /// The reader's `not` excludes values the writer emits.
    NotExtended = "NOT_EXTENDED", Error,
        "The reader's `not` excludes values the writer can emit.";
    /// The reader rejects every value (false schema or contradictory constraints).
    SchemaFalse = "SCHEMA_FALSE", Error,
        "The reader rejects every value where the writer emits some.";
    /// The engine cannot decide the change, so it fails closed.
    Unjudgeable = "UNJUDGEABLE_CHANGE", Error,
        "The change cannot be judged (an external $ref, a changed conditional, an unknown keyword), so it counts as incompatible.";
    // Versioning rules.
    /// A published version's schema was edited in place.
    VersionEditedInPlace = "VERSION_EDITED_IN_PLACE", Error,
        "A published version's schema changed; published versions are immutable.";
    /// A published version was removed while consumers still accept it.
    VersionRemoved = "VERSION_REMOVED", Error,
        "A published version was removed while a consumer still subscribes to it.";
    /// A published version was removed; no consumer subscribes to it any more.
    VersionRetired = "VERSION_RETIRED", Warning,
        "A published version was removed; no consumer subscribes to it any more.";
    /// A new version is not above every published version of its major.
    VersionOutOfOrder = "VERSION_OUT_OF_ORDER", Error,
        "A new version sorts below a published version of the same major.";
    /// A schema change came with a bump smaller than the change needs.
    BumpTooSmall = "BUMP_TOO_SMALL", Error,
        "The version bump is smaller than the schema change needs.";
    /// The suggested version bump for a new version.
    BumpSuggested = "BUMP_SUGGESTED", Note,
        "The smallest version bump the change needs.";
    /// An event type was removed without being deprecated first.
    EventRemovedWithoutDeprecation = "EVENT_REMOVED_WITHOUT_DEPRECATION", Error,
        "An event type was removed without `status: deprecated` in the base.";
    /// An executor class was removed without being retired first.
    ExecutorClassRemovedWhileActive = "EXECUTOR_CLASS_REMOVED_WHILE_ACTIVE", Error,
        "An executor class was removed without `active: false` in the base.";
    /// An event type's compatibility mode became weaker.
    CompatModeWeakened = "COMPAT_MODE_WEAKENED", Warning,
        "The event type's compatibility mode now checks less than before.";
}

/// Which direction of a compatibility check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Old writer, new reader: consumers on the new version read events of the old one.
    Backward,
    /// New writer, old reader: consumers on the old version read events of the new one.
    Forward,
}

impl Direction {
    /// The lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Backward => "backward",
            Self::Forward => "forward",
        }
    }
}

/// A payload that shows an incompatibility: valid for `valid_for`, rejected by `rejected_by`.
/// Both verdicts were checked with a JSON Schema validator (formats on).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Witness {
    /// The payload.
    pub payload: serde_json::Value,
    /// Which side accepts it (`writer 1.0.0`).
    pub valid_for: String,
    /// Which side rejects it (`reader 1.1.0`).
    pub rejected_by: String,
}

/// One compatibility finding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The rule id (`REQUIRED_ADDED`).
    pub rule: &'static str,
    /// Severity.
    pub severity: Severity,
    /// The event type.
    pub event: String,
    /// The version in the base revision the finding compares against, if any.
    pub base_version: Option<String>,
    /// The version in the new contracts, if any.
    pub version: Option<String>,
    /// Which check failed, for schema findings.
    pub direction: Option<Direction>,
    /// JSON pointer into the new version's schema (`#/properties/state/enum`), if any.
    pub pointer: Option<String>,
    /// Where in the new contracts (or the base file, for removals) the finding points.
    pub location: Location,
    /// What is wrong, in one or two sentences.
    pub message: String,
    /// How to fix it.
    pub fix: String,
    /// Consumers whose subscriptions match a version involved.
    pub consumers: Vec<String>,
    /// A payload that demonstrates the incompatibility, when one was found and checked.
    pub witness: Option<Witness>,
}

/// The verdict on one event type.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventSummary {
    /// The event type.
    pub event: String,
    /// Its compatibility mode in the new contracts (`backward`), or `removed`.
    pub mode: String,
    /// Versions compared (new ones and the ones they were checked against).
    pub checked: Vec<String>,
    /// The smallest bump the change needs (`none`, `patch`, `minor`, `major`), when a version
    /// was added.
    pub suggested_bump: Option<String>,
}

/// Everything `evc compat` found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// What the base is (`git:abc123`, `dir:../old/contracts`).
    pub base: String,
    /// What is compared against it (`dir:contracts`).
    pub head: String,
    /// Findings, ordered by event, version, rule and pointer.
    pub findings: Vec<Finding>,
    /// Per event type, in name order: every event type of either side.
    pub events: Vec<EventSummary>,
}

impl Report {
    /// True when no finding is an error: `evc compat` exits 0.
    pub fn passed(&self) -> bool {
        !self
            .findings
            .iter()
            .any(|finding| finding.severity == Severity::Error)
    }

    /// Number of findings of `severity`.
    pub fn count(&self, severity: Severity) -> usize {
        self.findings
            .iter()
            .filter(|finding| finding.severity == severity)
            .count()
    }
}
