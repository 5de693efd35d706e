//! The operator surface both stores answer ([`Operate`]): dead letters, replay from
//! dead-letter or quarantine, pause and resume (docs/runtime.md, "Replay", "Pause, resume and
//! modes"), with the store-independent types they use. A replay's plan digest is computed here,
//! from the same inputs in the same order on every store, so one selection over the same dead
//! set gives the same digest shape on PostgreSQL and SQLite; the approval checks and the
//! replayability checks are here too, so both stores refuse the same way.
//!
//! PostgreSQL checks against the registry the database deploys (its mirror); SQLite against the
//! static registry (the store owns its file, and the compiled registry is its only authority).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::future::Future;
use std::time::SystemTime;

use uuid::Uuid;

use crate::append::sha256_hex;
use crate::registry::ConsumerMode;
use crate::store::retention::{PurgeError, RetentionPurge};
use crate::store::{CutoverReport, DispatchError, Store};

/// The operator surface of a store: dead letters, replay (a dry run's plan, then apply under an
/// approval), pause and resume. Implemented by [`crate::PgStore`] and [`crate::SqliteStore`]
/// with the same semantics (docs/runtime.md, "Stores").
pub trait Operate: Store {
    /// The dead and quarantined deliveries `selection` takes, oldest event first (`evc dlq
    /// list`).
    ///
    /// # Errors
    /// [`DispatchError::UnknownConsumer`] or [`DispatchError::Database`].
    fn dead_letters(
        &self,
        selection: &ReplaySelection,
    ) -> impl Future<Output = Result<Vec<SettledDelivery>, DispatchError>> + Send;

    /// A replay's dry run: the deliveries `selection` would replay, those that cannot be
    /// replayed and why, and the plan's digest. Nothing is written.
    ///
    /// # Errors
    /// [`ReplayError::UnknownConsumer`] or [`ReplayError::Database`].
    fn replay_plan(
        &self,
        selection: &ReplaySelection,
    ) -> impl Future<Output = Result<ReplayPlan, ReplayError>> + Send;

    /// Records `selection`'s plan as proposed by `planned_by`: the first half of the
    /// two-person rule. Only a plan recorded this way can be applied, and only by another
    /// person ([`Operate::replay`]). Refused, nothing written, when the plan is empty or
    /// holds a delivery apply would refuse.
    ///
    /// # Errors
    /// Every [`ReplayError`] but [`ReplayError::Database`] names a refusal.
    fn propose_replay(
        &self,
        selection: &ReplaySelection,
        planned_by: &str,
    ) -> impl Future<Output = Result<Proposed<ReplayPlan>, ReplayError>> + Send;

    /// Applies a replay in one transaction: the approval's fields are checked, a key applied
    /// before answers with its first result (`repeated: true`, nothing created), the plan is
    /// taken again and must have the approval's digest, a person other than the approver must
    /// have proposed that very plan ([`Operate::propose_replay`]), and every planned event must
    /// still be replayable. Then each planned delivery becomes `replayed` and its next
    /// generation is written `pending`, due now, with no attempt counted; the replay, its
    /// items, its plan and its approver are recorded. On any refusal nothing is written.
    ///
    /// # Errors
    /// Every [`ReplayError`] but [`ReplayError::Database`] names a refusal.
    fn replay(
        &self,
        selection: &ReplaySelection,
        approval: &ReplayApproval,
    ) -> impl Future<Output = Result<ReplayApplied, ReplayError>> + Send;

    /// Pauses `consumer`: from its next claim on, no dispatcher claims its deliveries.
    /// Deliveries already leased run to their end. `change` (who and why) is recorded with
    /// the change, in the same transaction ([`Operate::state_changes`]).
    ///
    /// # Errors
    /// [`DispatchError::InvalidChange`], [`DispatchError::UnknownConsumer`] or
    /// [`DispatchError::Database`].
    fn pause(
        &self,
        consumer: &str,
        change: &StateChange,
    ) -> impl Future<Output = Result<ConsumerState, DispatchError>> + Send;

    /// Resumes a paused `consumer`; its waiting deliveries are claimed in order again.
    /// Recorded like [`Operate::pause`].
    ///
    /// # Errors
    /// [`DispatchError::InvalidChange`], [`DispatchError::UnknownConsumer`] or
    /// [`DispatchError::Database`].
    fn resume(
        &self,
        consumer: &str,
        change: &StateChange,
    ) -> impl Future<Output = Result<ConsumerState, DispatchError>> + Send;

    /// Overrides the mode of `consumer` (`off` claims nothing, like a pause; `shadow` shadows
    /// its next claims). Recorded like [`Operate::pause`]. A mode applies to every tenant:
    /// in a session of one tenant it is refused ([`DispatchError::TenantScoped`]). A move to
    /// `live` of a consumer that is not live and whose contract declares a cut-over gate is
    /// refused until the gate passes ([`Operate::cutover_report`]); nothing is written then.
    ///
    /// # Errors
    /// [`DispatchError::InvalidChange`], [`DispatchError::UnknownConsumer`],
    /// [`DispatchError::TenantScoped`], [`DispatchError::CutoverRefused`] or
    /// [`DispatchError::Database`].
    fn set_mode(
        &self,
        consumer: &str,
        mode: ConsumerMode,
        change: &StateChange,
    ) -> impl Future<Output = Result<ConsumerState, DispatchError>> + Send;

    /// What `consumer`'s shadow runs since it last entered shadow mode show against its
    /// cut-over gate: how many were compared with the legacy path's outcome, matched,
    /// differed (explained or not), the span they cover, and why the gate does not pass yet.
    /// Reads every shadow run of the window.
    ///
    /// # Errors
    /// [`DispatchError::UnknownConsumer`] or [`DispatchError::Database`].
    fn cutover_report(
        &self,
        consumer: &str,
    ) -> impl Future<Output = Result<CutoverReport, DispatchError>> + Send;

    /// Records that `change.by` explains, for `change.reason`, the difference between
    /// `consumer`'s shadow run of `event_id` and the legacy outcome of that event: the gate
    /// no longer counts it as unexplained. Refused ([`DispatchError::InvalidChange`]) when the
    /// two do not differ (or one of them is missing), and nothing is written.
    ///
    /// # Errors
    /// [`DispatchError::InvalidChange`], [`DispatchError::UnknownConsumer`] or
    /// [`DispatchError::Database`].
    fn explain_difference(
        &self,
        consumer: &str,
        event_id: Uuid,
        change: &StateChange,
    ) -> impl Future<Output = Result<CutoverReport, DispatchError>> + Send;

    /// The newest `limit` recorded changes of `consumer`'s operator state, newest first: who
    /// paused, resumed or set a mode, when and why.
    ///
    /// # Errors
    /// [`DispatchError::UnknownConsumer`] or [`DispatchError::Database`].
    fn state_changes(
        &self,
        consumer: &str,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<StateChangeRecord>, DispatchError>> + Send;

    /// The operator state of `consumer` (the contract's mode, unpaused, revision 0, while no
    /// operator changed it).
    ///
    /// # Errors
    /// [`DispatchError::UnknownConsumer`] or [`DispatchError::Database`].
    fn consumer_state(
        &self,
        consumer: &str,
    ) -> impl Future<Output = Result<ConsumerState, DispatchError>> + Send;

    /// The oldest `limit` applied replays, oldest first, each with the deliveries it
    /// superseded: the audit of who approved what and why. A refused replay writes none.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn replays(
        &self,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<ReplayRecord>, DispatchError>> + Send;

    /// Records the inventory of `consumer` as of now (at most `limit` events) as proposed by
    /// `planned_by`: the first half of the two-person rule, as [`Operate::propose_replay`].
    /// Refused, nothing written, when it lists no event.
    ///
    /// # Errors
    /// Every [`ReplayError`] but [`ReplayError::Database`] names a refusal.
    fn propose_inventory(
        &self,
        consumer: &str,
        limit: u32,
        planned_by: &str,
    ) -> impl Future<Output = Result<Proposed<crate::InventoryReport>, ReplayError>> + Send;

    /// Applies the inventory of `consumer` (as of now, at most `limit` events) in one
    /// transaction, as [`Operate::replay`] applies a replay: the approval's fields are checked,
    /// a key applied before answers with its first result, the inventory is taken again and
    /// must have the approval's digest, a person other than the approver must have proposed
    /// it ([`Operate::propose_inventory`]), and the consumer must not be live. Then each safe
    /// and repaired event gets a `pending` delivery to the consumer (a repaired one is
    /// conformed to its target version when claimed), each quarantined one a `quarantined`
    /// delivery, and the inventory is recorded with every event's class, reason and payload
    /// digests. An expired event gets no delivery and is left out of later inventories. On
    /// any refusal nothing is written.
    ///
    /// # Errors
    /// Every [`ReplayError`] but [`ReplayError::Database`] names a refusal.
    fn apply_inventory(
        &self,
        consumer: &str,
        limit: u32,
        approval: &ReplayApproval,
    ) -> impl Future<Output = Result<crate::InventoryApplied, ReplayError>> + Send;

    /// The inventory of `consumer` as of `as_of` (docs/runtime.md, "Inventory"): the events
    /// of the types it subscribes to that have no delivery to it, oldest first, at most
    /// `limit` (1 to [`crate::MAX_INVENTORY_EVENTS`]), each classified safe, repair,
    /// quarantine or expire by its contract's inventory rules against the store's registry.
    /// In a session of one tenant, that tenant's events alone. Nothing is written.
    ///
    /// # Errors
    /// [`DispatchError::UnknownConsumer`] or [`DispatchError::Database`].
    fn inventory(
        &self,
        consumer: &str,
        as_of: SystemTime,
        limit: u32,
    ) -> impl Future<Output = Result<crate::InventoryReport, DispatchError>> + Send;

    /// Removes the rows the store's registry's retention expires as of `as_of`
    /// ([`crate::RetentionDescriptor`]; docs/runtime.md, "Retention"): settled events per type
    /// with their delivery rows, attempts, reconciliations and replay items; attempts of
    /// deliveries no longer open; reconciliations; rejects; idempotency records whose event is
    /// gone, past their horizon. A delivery still open keeps its event and attempts. One
    /// transaction, which records `actor` and `reason` with the counts (`evc_purges`). With
    /// `apply` false it counts the same rows and removes nothing (`purge_id` is `None`).
    /// Refused in a session of one tenant: retention is every tenant's.
    ///
    /// # Errors
    /// [`PurgeError`]; nothing is removed then.
    fn purge_expired(
        &self,
        as_of: SystemTime,
        reason: &str,
        actor: &str,
        apply: bool,
    ) -> impl Future<Output = Result<RetentionPurge, PurgeError>> + Send;
}

/// Who changes a consumer's operator state and why ([`Operate::pause`], [`Operate::resume`],
/// [`Operate::set_mode`]): a person's login and a reason of 1 to 500 characters, recorded with
/// the change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StateChange {
    /// The person making the change.
    pub by: String,
    /// Why.
    pub reason: String,
}

impl StateChange {
    /// A change made by `by` for `reason`.
    pub fn new(by: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            by: by.into(),
            reason: reason.into(),
        }
    }
}

/// One recorded change of a consumer's operator state ([`Operate::state_changes`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StateChangeRecord {
    /// The record's id, growing with each change.
    pub id: i64,
    /// The consumer.
    pub consumer: String,
    /// `pause`, `resume` or `mode`.
    pub change: String,
    /// The mode set (`mode` changes only).
    pub mode: Option<ConsumerMode>,
    /// The tenant the change was for (`None`: every tenant).
    pub tenant_scope: Option<String>,
    /// Who made it.
    pub by: String,
    /// Why.
    pub reason: String,
    /// When, in epoch seconds of the store's clock.
    pub at: f64,
}

/// What a change of a consumer's operator state does, as `evc_state_changes.change` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    /// Stop claiming.
    Pause,
    /// Claim again.
    Resume,
    /// Override the contract's mode.
    Mode(ConsumerMode),
}

impl Transition {
    /// The record's `change` column.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::Mode(_) => "mode",
        }
    }

    /// The pause it sets, if any (`evc_consumer_state.paused`).
    pub(crate) fn paused(self) -> Option<bool> {
        match self {
            Self::Pause => Some(true),
            Self::Resume => Some(false),
            Self::Mode(_) => None,
        }
    }

    /// The mode it sets, if any.
    pub(crate) fn mode(self) -> Option<ConsumerMode> {
        match self {
            Self::Mode(mode) => Some(mode),
            Self::Pause | Self::Resume => None,
        }
    }
}

/// Checks a state change's person and reason; the messages name the field.
pub(crate) fn check_change(change: &StateChange) -> Result<(), DispatchError> {
    let refused = |why: String| Err(DispatchError::InvalidChange(why));
    match check_person("operator", &change.by) {
        Ok(()) => {}
        Err(ReplayError::PersonMissing { .. }) => {
            return refused("the person changing a consumer's state must be named".to_owned());
        }
        Err(error) => return refused(error.to_string()),
    }
    let chars = change.reason.chars().count();
    if change.reason.trim().is_empty() {
        return refused(format!(
            "a reason is required (1 to {MAX_REPLAY_REASON_CHARS} characters)"
        ));
    }
    if chars > MAX_REPLAY_REASON_CHARS {
        return refused(format!(
            "the reason has {chars} characters; at most {MAX_REPLAY_REASON_CHARS} are allowed"
        ));
    }
    if change
        .reason
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\t'))
    {
        return refused("the reason has control characters".to_owned());
    }
    Ok(())
}

/// Longest replay reason, in characters.
pub const MAX_REPLAY_REASON_CHARS: usize = 500;

/// Longest approval reference, idempotency key and person name, in characters: a ticket, a
/// change id or a login, not a document.
pub const MAX_REPLAY_REF_CHARS: usize = 200;

/// Most deliveries one replay plan takes when the selection names no limit.
pub const DEFAULT_REPLAY_LIMIT: u32 = 1_000;

/// A settled status a replay starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SettledStatus {
    /// Dead-lettered: retries exhausted, or a permanent or poison failure.
    Dead,
    /// Quarantined: a scope, schema or integrity failure.
    Quarantined,
}

impl SettledStatus {
    /// The status as the database stores it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dead => "dead",
            Self::Quarantined => "quarantined",
        }
    }

    /// The status a `status` column value names (`None`: not a settled status).
    pub(crate) fn parse(status: &str) -> Option<Self> {
        match status {
            "dead" => Some(Self::Dead),
            "quarantined" => Some(Self::Quarantined),
            _ => None,
        }
    }
}

/// Which settled deliveries of one consumer a replay (or a dead-letter listing) takes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplaySelection {
    /// The consumer.
    pub consumer: String,
    /// The statuses taken (both by default).
    pub statuses: Vec<SettledStatus>,
    /// Only events of this type.
    pub event_type: Option<String>,
    /// Only these events (empty: any).
    pub event_ids: Vec<Uuid>,
    /// At most this many deliveries, oldest first.
    pub limit: u32,
}

impl ReplaySelection {
    /// Every dead or quarantined delivery of `consumer`, up to [`DEFAULT_REPLAY_LIMIT`].
    pub fn consumer(consumer: impl Into<String>) -> Self {
        Self {
            consumer: consumer.into(),
            statuses: vec![SettledStatus::Dead, SettledStatus::Quarantined],
            event_type: None,
            event_ids: Vec::new(),
            limit: DEFAULT_REPLAY_LIMIT,
        }
    }

    /// Only deliveries in `statuses`.
    pub fn statuses(mut self, statuses: impl IntoIterator<Item = SettledStatus>) -> Self {
        self.statuses = statuses.into_iter().collect();
        self
    }

    /// Only events of `event_type`.
    pub fn event_type(mut self, event_type: impl Into<String>) -> Self {
        self.event_type = Some(event_type.into());
        self
    }

    /// Only the events `ids`.
    pub fn event_ids(mut self, ids: impl IntoIterator<Item = Uuid>) -> Self {
        self.event_ids = ids.into_iter().collect();
        self
    }

    /// At most `limit` deliveries.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }
}

/// A dead or quarantined delivery: what `evc dlq list` shows and a replay plan holds.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SettledDelivery {
    /// The event.
    pub event_id: Uuid,
    /// The consumer.
    pub consumer: String,
    /// 0 for the delivery the append wrote; one more for each replay since.
    pub generation: i32,
    /// Dead or quarantined.
    pub status: SettledStatus,
    /// Attempts made.
    pub attempts: i32,
    /// The last attempt's error code (never a message).
    pub last_error_code: Option<String>,
    /// When it settled, epoch seconds.
    pub settled_at: f64,
    /// The event type.
    pub event_type: String,
    /// The version the event was produced with.
    pub version: String,
    /// The requirement under which the deployed registry subscribes the consumer to the type
    /// (`None`: no longer subscribed).
    pub requirement: Option<String>,
}

impl SettledDelivery {
    /// Whether the deployed registry's consumer still accepts this event's version.
    pub fn version_supported(&self) -> bool {
        self.requirement
            .as_deref()
            .is_some_and(|requirement| crate::registry::accepts(requirement, &self.version))
    }
}

/// Why a planned delivery cannot be replayed (checked against the deployed registry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NotReplayableReason {
    /// The consumer is no longer subscribed to the event's type.
    NotSubscribed,
    /// The consumer's requirement no longer accepts the event's version.
    VersionNotAccepted,
    /// The deployed registry holds no schema for the event's version.
    VersionNotDeployed,
    /// The deployed schema of the event's version does not compile.
    SchemaUnusable,
    /// The payload does not validate against the deployed schema of its version.
    SchemaInvalid,
}

impl NotReplayableReason {
    /// The reason code (`schema_invalid`, ...), as dry runs print it.
    pub fn code(self) -> &'static str {
        match self {
            Self::NotSubscribed => "not_subscribed",
            Self::VersionNotAccepted => "version_not_accepted",
            Self::VersionNotDeployed => "version_not_deployed",
            Self::SchemaUnusable => "schema_unusable",
            Self::SchemaInvalid => "schema_invalid",
        }
    }
}

impl std::fmt::Display for NotReplayableReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

/// A planned delivery that cannot be replayed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NotReplayable {
    /// The event.
    pub event_id: Uuid,
    /// The delivery's generation.
    pub generation: i32,
    /// Why.
    pub reason: NotReplayableReason,
}

/// A dry run's answer: the deliveries a replay would supersede, and the digest apply must
/// present.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ReplayPlan {
    /// The selection planned.
    pub selection: ReplaySelection,
    /// The deliveries, oldest event first.
    pub deliveries: Vec<SettledDelivery>,
    /// SHA-256 (hex) of the consumer and of each delivery's event, generation, status and
    /// version, in order: any change to what would be replayed changes it.
    pub digest: String,
    /// The planned deliveries that cannot be replayed, in plan order. Apply refuses the whole
    /// plan while any is listed: narrow the selection (event ids, type) to leave them out.
    pub not_replayable: Vec<NotReplayable>,
}

impl ReplayPlan {
    /// The deliveries whose version the consumer no longer accepts (apply refuses them).
    pub fn unsupported(&self) -> impl Iterator<Item = &SettledDelivery> {
        self.deliveries.iter().filter(|d| !d.version_supported())
    }

    /// Why the delivery of `event_id` at `generation` cannot be replayed, if it cannot.
    pub fn not_replayable_reason(
        &self,
        event_id: Uuid,
        generation: i32,
    ) -> Option<NotReplayableReason> {
        self.not_replayable
            .iter()
            .find(|n| n.event_id == event_id && n.generation == generation)
            .map(|n| n.reason)
    }
}

/// What apply needs besides the selection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayApproval {
    /// The dry run's digest.
    pub digest: String,
    /// Why, 1 to 500 characters.
    pub reason: String,
    /// Who or what approved it (a ticket, a change request).
    pub approval_ref: String,
    /// The same key applies once; repeating it answers with the first result.
    pub idempotency_key: String,
    /// The person who approves and applies it: not the one who proposed the plan.
    pub approved_by: String,
    /// The person who requested a replay, as `dlq_replay.scheduled` names them
    /// (`requested_by_id`); `None`: an id derived from the database role (docs/runtime.md,
    /// "Lifecycle events"). Not stored in `evc_replays`.
    pub requested_by: Option<Uuid>,
}

impl ReplayApproval {
    /// An approval of the plan with `digest`, by `approved_by`.
    pub fn new(
        digest: impl Into<String>,
        reason: impl Into<String>,
        approval_ref: impl Into<String>,
        idempotency_key: impl Into<String>,
        approved_by: impl Into<String>,
    ) -> Self {
        Self {
            digest: digest.into(),
            reason: reason.into(),
            approval_ref: approval_ref.into(),
            idempotency_key: idempotency_key.into(),
            approved_by: approved_by.into(),
            requested_by: None,
        }
    }

    /// The person who requested the replay, for its `dlq_replay.scheduled` event.
    pub fn requested_by(mut self, person: Uuid) -> Self {
        self.requested_by = Some(person);
        self
    }
}

/// A plan recorded as proposed ([`Operate::propose_replay`], [`crate::Console::propose_discard`]):
/// what another person may approve.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Proposed<P> {
    /// The recorded plan's id (`evc_plans.id`).
    pub plan_id: i64,
    /// Who proposed it.
    pub planned_by: String,
    /// The plan, with the digest an approval presents.
    pub plan: P,
}

/// Logs a plan just recorded as proposed and returns it, with the planner's name as checked
/// by [`check_person`]. `kind` is `replay` or `discard`.
pub(crate) fn proposed<P>(
    kind: &'static str,
    plan_id: i64,
    consumer: &str,
    deliveries: usize,
    planned_by: &str,
    plan: P,
) -> Proposed<P> {
    tracing::info!(plan_id, kind, consumer, deliveries, "plan proposed");
    Proposed {
        plan_id,
        planned_by: planned_by.trim_matches(' ').to_owned(),
        plan,
    }
}

/// What apply did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayApplied {
    /// The replay's id (`evc_replays.id`; the new deliveries' `replay_id`).
    pub replay_id: i64,
    /// New deliveries created (by the first apply, when repeated).
    pub deliveries: u64,
    /// Whether the idempotency key had been applied before: nothing new was created.
    pub repeated: bool,
}

/// Why a replay or a discard was refused. Nothing was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The consumer is not deployed (not in the database's registry mirror).
    #[error("consumer {0} is not deployed in this database")]
    UnknownConsumer(String),
    /// The digest presented is not the current plan's: the dead-letter set changed since the
    /// dry run, or the selection differs.
    #[error(
        "plan digest {presented} does not match the current plan {current}; run the dry run again"
    )]
    DigestMismatch {
        /// The digest presented.
        presented: String,
        /// The current plan's digest.
        current: String,
    },
    /// No reason was given.
    #[error("a reason is required (1 to {MAX_REPLAY_REASON_CHARS} characters)")]
    ReasonMissing,
    /// The reason is too long.
    #[error("the reason has {chars} characters; at most {MAX_REPLAY_REASON_CHARS} are allowed")]
    ReasonTooLong {
        /// Its length in characters.
        chars: usize,
    },
    /// No approval reference was given.
    #[error("an approval reference is required")]
    ApprovalMissing,
    /// No idempotency key was given.
    #[error("an idempotency key is required")]
    IdempotencyKeyMissing,
    /// The person who proposes or approves was not named.
    #[error("the {role} must be named (who proposes a plan and who approves it are recorded)")]
    PersonMissing {
        /// `planner` or `approver`.
        role: &'static str,
    },
    /// A person's name is not a login: printable ASCII with single spaces between words. Look-
    /// alike letters, invisible characters and doubled spaces would let one person pass as two.
    #[error(
        "the {role} must be a login or a name in printable ASCII, words separated by single spaces"
    )]
    PersonNotALogin {
        /// `planner` or `approver`.
        role: &'static str,
    },
    /// The approval reference, the idempotency key or a person's name is longer than
    /// [`MAX_REPLAY_REF_CHARS`].
    #[error("the {field} has {chars} characters; at most {MAX_REPLAY_REF_CHARS} are allowed")]
    RefTooLong {
        /// `approval reference`, `idempotency key`, `planner` or `approver`.
        field: &'static str,
        /// Its length in characters.
        chars: usize,
    },
    /// A field has control characters: they are kept for audit and shown to other operators
    /// (the reason may have line breaks and tabs).
    #[error("the {field} has control characters")]
    ControlCharacters {
        /// `reason`, `approval reference`, `idempotency key`, `planner` or `approver`.
        field: &'static str,
    },
    /// No one proposed the plan the approval names: apply takes only a recorded plan.
    #[error(
        "no one proposed a plan with digest {digest}; another person records it first (evc replay --propose, evc dlq discard --propose, evc inventory --propose)"
    )]
    PlanNotProposed {
        /// The digest presented.
        digest: String,
    },
    /// Every plan of the digest proposed by someone else than the approver was applied
    /// already: a plan is one decision, applied once. Apply a new proposal.
    #[error(
        "plan {plan_id} was applied already; propose the plan again to apply it again (evc replay --propose, evc dlq discard --propose, evc inventory --propose)"
    )]
    PlanApplied {
        /// The plan applied last (`evc_plans.id`).
        plan_id: i64,
    },
    /// The approver is the only person who proposed the plan: the two-person rule needs a
    /// second person.
    #[error(
        "{person} proposed this plan and cannot also approve it; another person must apply it (two-person rule)"
    )]
    SamePerson {
        /// The approver, who proposed it.
        person: String,
    },
    /// The idempotency key was applied before for the same consumer, to another plan (keys
    /// are scoped per consumer; a discard's keys are apart from replays').
    #[error("idempotency key {key} was applied to another plan (digest {digest})")]
    IdempotencyKeyReused {
        /// The key.
        key: String,
        /// The digest it was applied with.
        digest: String,
    },
    /// The idempotency key was applied before to the same plan, but with another reason or
    /// approval reference: that is another decision, which needs its own key. Answering it
    /// with the first result would record an approval that was never applied.
    #[error(
        "idempotency key {key} was applied with another {field}; a new decision needs a new key"
    )]
    IdempotencyKeyConflict {
        /// The key.
        key: String,
        /// `reason`, `approval reference` or `approver`.
        field: &'static str,
    },
    /// The plan is empty: nothing is dead or quarantined under the selection.
    #[error("nothing to replay: no dead or quarantined delivery matches")]
    NothingToReplay,
    /// A discard's plan is empty: nothing is dead or quarantined under the selection.
    #[error("nothing to discard: no dead or quarantined delivery matches")]
    NothingToDiscard,
    /// An inventory lists no event: the consumer has received every event of its types.
    #[error("nothing to apply: the inventory of {0} lists no event")]
    NothingToInventory(String),
    /// The events an inventory listed changed while it was applied (a purge removed one), or
    /// this login may not write every delivery it needs: nothing was written.
    #[error(
        "the inventory of {0} could not be applied as listed (its events changed meanwhile, or this login may not write all its deliveries); nothing was written: take it again"
    )]
    InventoryChanged(String),
    /// The consumer is live: an inventory is applied before it goes live (while it is `off`
    /// or in `shadow`), or its older events would be delivered after newer ones.
    #[error(
        "consumer {0} is live: apply its inventory before it goes live (while off or in shadow)"
    )]
    ConsumerLive(String),
    /// The consumer no longer accepts the version of a planned event.
    #[error(
        "consumer {consumer} no longer accepts {event_type} {version} (event {event_id}; {})",
        requirement.as_deref().map_or_else(|| "no longer subscribed".to_owned(), |r| format!("accepts {r}"))
    )]
    UnsupportedVersion {
        /// The event.
        event_id: Uuid,
        /// The consumer.
        consumer: String,
        /// The event type.
        event_type: String,
        /// The event's version.
        version: String,
        /// What the consumer accepts now (`None`: not subscribed any more).
        requirement: Option<String>,
    },
    /// A planned event's payload does not pass the deployed schema of its version (or no
    /// usable schema is deployed for it). The payload itself is never reported.
    #[error("event {event_id} ({event_type} {version}) cannot be replayed to {consumer}: {reason}")]
    NotReplayable {
        /// The event.
        event_id: Uuid,
        /// The consumer.
        consumer: String,
        /// The event type.
        event_type: String,
        /// The event's version.
        version: String,
        /// Why.
        reason: NotReplayableReason,
    },
    /// The database failed.
    #[error("outbox database error: {0}")]
    Database(#[from] sqlx::Error),
}

/// An applied replay as its audit rows keep it ([`Operate::replays`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ReplayRecord {
    /// The replay's id ([`ReplayApplied::replay_id`]; the new deliveries'
    /// [`crate::DeliveryRecord::replay_id`]).
    pub replay_id: i64,
    /// The digest of the plan it applied.
    pub plan_digest: String,
    /// The operator's reason.
    pub reason: String,
    /// The approval reference.
    pub approval_ref: String,
    /// The idempotency key it was applied under.
    pub idempotency_key: String,
    /// The recorded plan it applied (`None`: applied before plans were recorded).
    pub plan_id: Option<i64>,
    /// Who proposed that plan (`None`: applied before plans were recorded).
    pub planned_by: Option<String>,
    /// Who approved and applied it (`None`: applied before approvers were recorded).
    pub approved_by: Option<String>,
    /// New deliveries it created.
    pub deliveries: u64,
    /// When it was applied, in epoch seconds of the store's clock.
    pub applied_at: f64,
    /// The deliveries it superseded, by event id.
    pub items: Vec<ReplayItem>,
}

/// A delivery a replay superseded ([`ReplayRecord::items`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayItem {
    /// The event.
    pub event_id: Uuid,
    /// The consumer.
    pub consumer: String,
    /// The generation replayed (the replay wrote the next one).
    pub generation: i32,
    /// The status it left.
    pub replayed_from: SettledStatus,
    /// The event's version.
    pub version: String,
}

/// A consumer's operator state.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerState {
    /// The consumer.
    pub consumer: String,
    /// Whether it is paused (claims nothing).
    pub paused: bool,
    /// Its mode: the operator's override, else the contract's.
    pub mode: ConsumerMode,
    /// Grows on every change; 0 while the operator never changed the consumer.
    pub revision: i64,
}

/// What a plan's digest approves: a replay's digest never applies a discard, nor the reverse.
#[derive(Clone, Copy)]
pub(crate) enum PlanKind {
    /// A replay's plan.
    Replay,
    /// A discard's plan (PostgreSQL only).
    Discard,
    /// An inventory's plan ([`crate::InventoryReport::digest`]; SQLite keeps them apart).
    Inventory,
}

impl PlanKind {
    /// The kind as `evc_plans.kind` stores it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Replay => "replay",
            Self::Discard => "discard",
            Self::Inventory => "inventory",
        }
    }
}

/// SHA-256 (hex) of the plan's kind, consumer and each delivery's event, generation, status,
/// type and version, in order.
pub(crate) fn plan_digest(
    kind: PlanKind,
    selection: &ReplaySelection,
    deliveries: &[SettledDelivery],
) -> String {
    let tag = match kind {
        PlanKind::Replay => "evc-replay-plan/1",
        PlanKind::Discard => "evc-discard-plan/1",
        PlanKind::Inventory => "evc-inventory-plan/1",
    };
    let mut canonical = format!("{tag}\n{}\n", selection.consumer);
    for d in deliveries {
        let _ = writeln!(
            canonical,
            "{} {} {} {} {}",
            d.event_id,
            d.generation,
            d.status.as_str(),
            d.event_type,
            d.version
        );
    }
    sha256_hex(canonical.as_bytes())
}

/// Checks the approval's fields before anything is read.
pub(crate) fn check_approval(approval: &ReplayApproval) -> Result<(), ReplayError> {
    let chars = approval.reason.chars().count();
    if approval.reason.trim().is_empty() {
        return Err(ReplayError::ReasonMissing);
    }
    if chars > MAX_REPLAY_REASON_CHARS {
        return Err(ReplayError::ReasonTooLong { chars });
    }
    if approval.approval_ref.trim().is_empty() {
        return Err(ReplayError::ApprovalMissing);
    }
    if approval.idempotency_key.trim().is_empty() {
        return Err(ReplayError::IdempotencyKeyMissing);
    }
    if approval
        .reason
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\t'))
    {
        return Err(ReplayError::ControlCharacters { field: "reason" });
    }
    for (field, text) in [
        ("approval reference", &approval.approval_ref),
        ("idempotency key", &approval.idempotency_key),
    ] {
        check_ref(field, text)?;
    }
    check_person("approver", &approval.approved_by)
}

/// Checks a person's name: present, at most [`MAX_REPLAY_REF_CHARS`] characters, and a login:
/// printable ASCII, words separated by single spaces (surrounding spaces are trimmed). So no
/// two spellings of one name differ by anything but ASCII case, which [`same_person`] and the
/// stores' triggers ignore. `role` is `planner` or `approver`.
pub(crate) fn check_person(role: &'static str, name: &str) -> Result<(), ReplayError> {
    let name = name.trim_matches(' ');
    if name.is_empty() {
        return Err(ReplayError::PersonMissing { role });
    }
    check_ref(role, name)?;
    let login = name.chars().all(|c| c.is_ascii_graphic() || c == ' ') && !name.contains("  ");
    if !login {
        return Err(ReplayError::PersonNotALogin { role });
    }
    Ok(())
}

fn check_ref(field: &'static str, text: &str) -> Result<(), ReplayError> {
    if text.chars().any(char::is_control) {
        return Err(ReplayError::ControlCharacters { field });
    }
    let chars = text.chars().count();
    if chars > MAX_REPLAY_REF_CHARS {
        return Err(ReplayError::RefTooLong { field, chars });
    }
    Ok(())
}

/// Whether two names (checked by [`check_person`]) are the same person's: equal once trimmed,
/// ignoring ASCII case, so `Alice` cannot approve what `alice ` proposed. The stores' triggers
/// compare the same way.
pub(crate) fn same_person(a: &str, b: &str) -> bool {
    a.trim_matches(' ')
        .eq_ignore_ascii_case(b.trim_matches(' '))
}

/// A recorded plan of an approval's consumer and digest, as the stores read it.
pub(crate) struct Proposal {
    /// `evc_plans.id`.
    pub(crate) id: i64,
    /// Who proposed it.
    pub(crate) planned_by: String,
    /// Whether an apply took it already: a plan is applied once.
    pub(crate) applied: bool,
}

/// The id of the recorded plan an approval applies: of the `proposals` of its consumer and
/// digest (oldest first), the oldest not applied yet and proposed by someone else than the
/// approver. A plan is one decision: once applied, it is not applied again.
pub(crate) fn proposal_for(
    proposals: &[Proposal],
    approval: &ReplayApproval,
) -> Result<i64, ReplayError> {
    let others = || {
        proposals
            .iter()
            .filter(|proposal| !same_person(&proposal.planned_by, &approval.approved_by))
    };
    if let Some(proposal) = others().find(|proposal| !proposal.applied) {
        return Ok(proposal.id);
    }
    if let Some(applied) = others().next_back() {
        return Err(ReplayError::PlanApplied {
            plan_id: applied.id,
        });
    }
    if proposals.is_empty() {
        return Err(ReplayError::PlanNotProposed {
            digest: approval.digest.clone(),
        });
    }
    Err(ReplayError::SamePerson {
        person: approval.approved_by.trim().to_owned(),
    })
}

/// What an earlier apply under the same idempotency key recorded.
pub(crate) struct EarlierApply<'a> {
    /// Its plan digest.
    pub(crate) digest: &'a str,
    /// Its reason.
    pub(crate) reason: &'a str,
    /// Its approval reference.
    pub(crate) approval_ref: &'a str,
    /// Its approver (`None`: applied before approvers were recorded).
    pub(crate) approved_by: Option<&'a str>,
}

/// Whether `approval` repeats the `earlier` apply of its key: the same plan, reason, approval
/// reference and approver. Anything else is refused; a repeat answers with the first result.
pub(crate) fn check_repeat(
    approval: &ReplayApproval,
    earlier: &EarlierApply<'_>,
) -> Result<(), ReplayError> {
    let key = || approval.idempotency_key.clone();
    if earlier.digest != approval.digest {
        return Err(ReplayError::IdempotencyKeyReused {
            key: key(),
            digest: earlier.digest.to_owned(),
        });
    }
    if earlier.reason != approval.reason {
        return Err(ReplayError::IdempotencyKeyConflict {
            key: key(),
            field: "reason",
        });
    }
    if earlier.approval_ref != approval.approval_ref {
        return Err(ReplayError::IdempotencyKeyConflict {
            key: key(),
            field: "approval reference",
        });
    }
    if earlier
        .approved_by
        .is_some_and(|earlier| !same_person(earlier, &approval.approved_by))
    {
        return Err(ReplayError::IdempotencyKeyConflict {
            key: key(),
            field: "approver",
        });
    }
    Ok(())
}

/// A deployed schema's validator, as the append path builds them; `None` when it does not
/// compile.
pub(crate) fn compile(schema: &str) -> Option<jsonschema::Validator> {
    let schema: serde_json::Value = serde_json::from_str(schema).ok()?;
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema)
        .ok()
}

/// Each event's stored payload and the schema text of its version, as the store deploys it
/// (`None`: that version is not deployed), by event id.
pub(crate) type StoredPayloads = HashMap<Uuid, (String, Option<String>)>;

/// The deliveries of `deliveries` that cannot be replayed: each event's version must still be
/// accepted by the consumer, and its payload (in `stored`) must validate against its version's
/// deployed schema (formats on, as at append).
pub(crate) fn refusals(
    deliveries: &[SettledDelivery],
    stored: &StoredPayloads,
) -> Vec<NotReplayable> {
    // One validator per deployed schema text (a plan holds few versions).
    let mut validators: HashMap<String, Option<jsonschema::Validator>> = HashMap::new();
    let mut refused = Vec::new();
    for d in deliveries {
        let reason = if d.requirement.is_none() {
            Some(NotReplayableReason::NotSubscribed)
        } else if !d.version_supported() {
            Some(NotReplayableReason::VersionNotAccepted)
        } else {
            match stored.get(&d.event_id) {
                Some((payload, Some(schema))) => {
                    let validator = validators
                        .entry(schema.clone())
                        .or_insert_with(|| compile(schema));
                    match validator {
                        None => Some(NotReplayableReason::SchemaUnusable),
                        Some(validator) => {
                            let valid = serde_json::from_str::<serde_json::Value>(payload)
                                .is_ok_and(|payload| validator.is_valid(&payload));
                            (!valid).then_some(NotReplayableReason::SchemaInvalid)
                        }
                    }
                }
                _ => Some(NotReplayableReason::VersionNotDeployed),
            }
        };
        if let Some(reason) = reason {
            refused.push(NotReplayable {
                event_id: d.event_id,
                generation: d.generation,
                reason,
            });
        }
    }
    refused
}

/// A replay plan of `selection` over `deliveries` (its refusals not yet known).
pub(crate) fn plan_of(selection: &ReplaySelection, deliveries: Vec<SettledDelivery>) -> ReplayPlan {
    ReplayPlan {
        selection: selection.clone(),
        digest: plan_digest(PlanKind::Replay, selection, &deliveries),
        deliveries,
        not_replayable: Vec::new(),
    }
}

/// The refusals of apply that need only the re-taken plan, in the order both stores check them:
/// the digest, an empty plan, a version the consumer no longer accepts.
pub(crate) fn check_plan(plan: &ReplayPlan, approval: &ReplayApproval) -> Result<(), ReplayError> {
    if plan.digest != approval.digest {
        return Err(ReplayError::DigestMismatch {
            presented: approval.digest.clone(),
            current: plan.digest.clone(),
        });
    }
    check_contents(plan)
}

/// Whether `plan` (its refusals known) may be proposed: what apply would refuse is refused
/// here, before anyone is asked to approve it.
pub(crate) fn check_proposable(plan: &ReplayPlan) -> Result<(), ReplayError> {
    check_contents(plan)?;
    refusal(plan, &plan.not_replayable)
}

/// An empty plan, or one with a version the consumer no longer accepts, is refused.
fn check_contents(plan: &ReplayPlan) -> Result<(), ReplayError> {
    if plan.deliveries.is_empty() {
        return Err(ReplayError::NothingToReplay);
    }
    if let Some(d) = plan.unsupported().next() {
        return Err(ReplayError::UnsupportedVersion {
            event_id: d.event_id,
            consumer: d.consumer.clone(),
            event_type: d.event_type.clone(),
            version: d.version.clone(),
            requirement: d.requirement.clone(),
        });
    }
    Ok(())
}

/// Apply's refusal of the first planned delivery in `refused`, if any.
pub(crate) fn refusal(plan: &ReplayPlan, refused: &[NotReplayable]) -> Result<(), ReplayError> {
    let Some(refused) = refused.first() else {
        return Ok(());
    };
    let d = plan
        .deliveries
        .iter()
        .find(|d| d.event_id == refused.event_id && d.generation == refused.generation);
    Err(ReplayError::NotReplayable {
        event_id: refused.event_id,
        consumer: plan.selection.consumer.clone(),
        event_type: d.map(|d| d.event_type.clone()).unwrap_or_default(),
        version: d.map(|d| d.version.clone()).unwrap_or_default(),
        reason: refused.reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(version: &str, requirement: Option<&str>) -> SettledDelivery {
        SettledDelivery {
            event_id: Uuid::nil(),
            consumer: "c".to_owned(),
            generation: 0,
            status: SettledStatus::Dead,
            attempts: 3,
            last_error_code: None,
            settled_at: 0.0,
            event_type: "t".to_owned(),
            version: version.to_owned(),
            requirement: requirement.map(str::to_owned),
        }
    }

    #[test]
    fn versions_are_checked_against_the_deployed_requirement() {
        assert!(delivery("1.2.0", Some("^1")).version_supported());
        assert!(delivery("2.0.0", Some(">=1, <3")).version_supported());
        assert!(!delivery("1.2.0", Some("^2")).version_supported());
        assert!(!delivery("1.2.0", None).version_supported());
    }

    #[test]
    fn the_digest_covers_every_planned_field() {
        let selection = ReplaySelection::consumer("c");
        let base = plan_of(&selection, vec![delivery("1.0.0", Some("^1"))]).digest;
        let mut other = delivery("1.0.0", Some("^1"));
        other.generation = 1;
        assert_ne!(plan_of(&selection, vec![other]).digest, base);
        let mut other = delivery("1.0.0", Some("^1"));
        other.status = SettledStatus::Quarantined;
        assert_ne!(plan_of(&selection, vec![other]).digest, base);
        assert_ne!(
            plan_of(&selection, vec![delivery("1.0.1", Some("^1"))]).digest,
            base
        );
        assert_ne!(plan_of(&selection, Vec::new()).digest, base);
        assert_eq!(
            plan_of(&selection, vec![delivery("1.0.0", Some("^1"))]).digest,
            base
        );
    }

    #[test]
    fn approvals_are_checked_before_anything_is_read() {
        let ok = ReplayApproval::new("d", "fixed the bug", "CHG-1", "k", "bob");
        assert!(check_approval(&ok).is_ok());
        let mut a = ok.clone();
        a.reason = "  ".to_owned();
        assert!(matches!(
            check_approval(&a),
            Err(ReplayError::ReasonMissing)
        ));
        a.reason = "é".repeat(500);
        assert!(check_approval(&a).is_ok());
        a.reason = "é".repeat(501);
        assert!(matches!(
            check_approval(&a),
            Err(ReplayError::ReasonTooLong { chars: 501 })
        ));
        let mut a = ok.clone();
        a.approval_ref.clear();
        assert!(matches!(
            check_approval(&a),
            Err(ReplayError::ApprovalMissing)
        ));
        let mut a = ok.clone();
        a.idempotency_key.clear();
        assert!(matches!(
            check_approval(&a),
            Err(ReplayError::IdempotencyKeyMissing)
        ));
        let mut a = ok.clone();
        a.approved_by = " ".to_owned();
        assert!(matches!(
            check_approval(&a),
            Err(ReplayError::PersonMissing { role: "approver" })
        ));
        let mut a = ok;
        a.approved_by = "bob\u{1b}[2J".to_owned();
        assert!(matches!(
            check_approval(&a),
            Err(ReplayError::ControlCharacters { field: "approver" })
        ));
        // One person must not pass as two: invisible characters, look-alike letters and
        // doubled spaces are refused.
        for name in ["alice\u{200b}", "\u{430}lice", "alice  smith", "José"] {
            let mut a = ReplayApproval::new("d", "fixed", "CHG-1", "k", name);
            a.approved_by = name.to_owned();
            assert!(
                matches!(
                    check_approval(&a),
                    Err(ReplayError::PersonNotALogin { role: "approver" })
                ),
                "{name:?}"
            );
        }
        assert!(check_person("planner", " alice.smith@example.com ").is_ok());
        assert!(check_person("planner", "Alice Smith").is_ok());
    }

    #[test]
    fn only_another_person_applies_a_proposed_plan() {
        let approval = ReplayApproval::new("d", "fixed the bug", "CHG-1", "k", " Alice");
        assert!(matches!(
            proposal_for(&[], &approval),
            Err(ReplayError::PlanNotProposed { digest }) if digest == "d"
        ));
        let plan = |id, planned_by: &str, applied| Proposal {
            id,
            planned_by: planned_by.to_owned(),
            applied,
        };
        // The same name in another case or with spaces is the same person.
        let mine = [plan(1, "alice ", false), plan(2, "ALICE", false)];
        assert!(matches!(
            proposal_for(&mine, &approval),
            Err(ReplayError::SamePerson { person }) if person == "Alice"
        ));
        let both = [
            plan(1, "alice", false),
            plan(2, "bob", false),
            plan(3, "carol", false),
        ];
        assert_eq!(proposal_for(&both, &approval).ok(), Some(2));
    }

    #[test]
    fn a_plan_is_applied_once() {
        let approval = ReplayApproval::new("d", "fixed the bug", "CHG-1", "k", "alice");
        let plan = |id, planned_by: &str, applied| Proposal {
            id,
            planned_by: planned_by.to_owned(),
            applied,
        };
        let later = [plan(1, "bob", true), plan(2, "carol", false)];
        assert_eq!(proposal_for(&later, &approval).ok(), Some(2));
        let used = [
            plan(1, "bob", true),
            plan(2, "alice", false),
            plan(3, "carol", true),
        ];
        assert!(matches!(
            proposal_for(&used, &approval),
            Err(ReplayError::PlanApplied { plan_id: 3 })
        ));
    }

    #[test]
    fn a_repeat_by_another_approver_is_another_decision() {
        let approval = ReplayApproval::new("d", "fixed the bug", "CHG-1", "k", "bob");
        let mut earlier = EarlierApply {
            digest: "d",
            reason: "fixed the bug",
            approval_ref: "CHG-1",
            approved_by: Some("Bob"),
        };
        assert!(check_repeat(&approval, &earlier).is_ok());
        earlier.approved_by = Some("carol");
        assert!(matches!(
            check_repeat(&approval, &earlier),
            Err(ReplayError::IdempotencyKeyConflict {
                field: "approver",
                ..
            })
        ));
        // A replay applied before approvers were recorded has none to compare.
        earlier.approved_by = None;
        assert!(check_repeat(&approval, &earlier).is_ok());
    }
}
