//! `evc dlq list`, `evc dlq discard` and `evc replay`: dead letters, their discard and their
//! replay, a thin shell over the [`crate::operate::Operator`] of either store (discard: only
//! PostgreSQL's `evc_runtime::Console`; docs/cli.md, "evc dlq list", "evc dlq discard" and
//! "evc replay").

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::anyhow;
use clap::{Args, Subcommand, ValueEnum};
use evc_runtime::{
    DiscardApplied, DiscardPlan, NotReplayableReason, ReplayApproval, ReplayError, ReplayPlan,
    ReplaySelection, Role, SettledDelivery, SettledStatus,
};
use uuid::Uuid;

use crate::operate::{Database, with_approver, with_operator};
use evc_codegen::printable::escape;

/// The largest `--limit`: a plan is held in memory and printed whole. 0 is refused too, since
/// it would select nothing and read as "nothing to replay".
const MAX_LIMIT: u32 = 100_000;

/// Which dead or quarantined deliveries a command takes.
#[derive(Args)]
pub(crate) struct Selection {
    /// The consumer.
    consumer: String,
    /// Only this status (default: dead and quarantined).
    #[arg(long, value_enum)]
    status: Option<StatusArg>,
    /// Only events of this type.
    #[arg(long, value_name = "TYPE")]
    event_type: Option<String>,
    /// Only this event (repeatable).
    #[arg(long = "event", value_name = "EVENT_ID")]
    events: Vec<Uuid>,
    /// At most this many deliveries, oldest first (1 to 100000).
    #[arg(
        long,
        default_value_t = evc_runtime::DEFAULT_REPLAY_LIMIT,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_LIMIT))
    )]
    limit: u32,
}

impl Selection {
    fn to_runtime(&self) -> ReplaySelection {
        let mut selection = ReplaySelection::consumer(&self.consumer)
            .event_ids(self.events.iter().copied())
            .limit(self.limit);
        if let Some(status) = self.status {
            selection = selection.statuses([status.into()]);
        }
        if let Some(event_type) = &self.event_type {
            selection = selection.event_type(event_type);
        }
        selection
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum StatusArg {
    Dead,
    Quarantined,
}

impl From<StatusArg> for SettledStatus {
    fn from(status: StatusArg) -> Self {
        match status {
            StatusArg::Dead => Self::Dead,
            StatusArg::Quarantined => Self::Quarantined,
        }
    }
}

#[derive(Subcommand)]
pub(crate) enum DlqAction {
    /// List a consumer's dead-lettered and quarantined deliveries, oldest first.
    List {
        #[command(flatten)]
        selection: Selection,
    },
    /// Discard a consumer's dead-lettered or quarantined deliveries for good: `--dry-run`
    /// prints the plan and its digest, `--propose` records it, and another person's
    /// `--apply --digest` discards them, audited.
    Discard {
        #[command(flatten)]
        selection: Selection,
        #[command(flatten)]
        plan: PlanArgs,
    },
}

/// `evc replay` settings.
#[derive(Args)]
pub(crate) struct ReplayArgs {
    #[command(flatten)]
    selection: Selection,
    #[command(flatten)]
    plan: PlanArgs,
}

/// The dry run, proposal or apply of a plan (`evc replay`, `evc dlq discard`).
#[derive(Args)]
pub(crate) struct PlanArgs {
    /// Print the plan and its digest; write nothing.
    #[arg(
        long,
        conflicts_with_all = ["apply", "propose"],
        required_unless_present_any = ["apply", "propose"]
    )]
    dry_run: bool,
    /// Record the plan as proposed by `--as`; another person applies it (two-person rule).
    #[arg(long, conflicts_with = "apply", requires = "person")]
    propose: bool,
    /// Apply the proposed plan whose digest `--digest` names; its proposer cannot.
    #[arg(
        long,
        requires_all = ["digest", "reason", "approval", "idempotency_key", "person"]
    )]
    apply: bool,
    /// The dry run's digest.
    #[arg(long)]
    digest: Option<String>,
    /// Why (1 to 500 characters).
    #[arg(long)]
    reason: Option<String>,
    /// Who or what approved it (a ticket, a change request).
    #[arg(long)]
    approval: Option<String>,
    /// Applies once; repeating it answers with the first result.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Who proposes (`--propose`) or approves (`--apply`): a login or a name, recorded.
    #[arg(long = "as", value_name = "PERSON")]
    person: Option<String>,
}

impl PlanArgs {
    fn approval(&self) -> ReplayApproval {
        ReplayApproval::new(
            self.digest.clone().unwrap_or_default(),
            self.reason.clone().unwrap_or_default(),
            self.approval.clone().unwrap_or_default(),
            self.idempotency_key.clone().unwrap_or_default(),
            self.person.clone().unwrap_or_default(),
        )
    }

    fn person(&self) -> &str {
        self.person.as_deref().unwrap_or_default()
    }
}

/// `evc dlq list | discard`.
pub(crate) fn dlq(action: &DlqAction, database: &Database) -> anyhow::Result<ExitCode> {
    let selection = match action {
        DlqAction::List { selection } => selection,
        DlqAction::Discard { selection, plan } => return discard(selection, plan, database),
    };
    let runtime = selection.to_runtime();
    let listed = with_operator(database, Role::Reader, async |operator| {
        operator.dead_letters(&runtime).await.map_err(unknown)
    })?;
    if listed.is_empty() {
        println!(
            "{}: no dead-lettered or quarantined deliveries",
            escape(&selection.consumer)
        );
    } else {
        print!("{}", deliveries_text(&listed));
    }
    Ok(ExitCode::SUCCESS)
}

fn unknown(error: evc_runtime::DispatchError) -> anyhow::Error {
    match error {
        evc_runtime::DispatchError::UnknownConsumer(name) => anyhow!(
            "consumer {} is not deployed in this database",
            escape(&name)
        ),
        other => other.into(),
    }
}

/// Turns a replay error into a terminal error: a refusal says that `what` (`proposal`,
/// `replay`, `discard`, `dry run`) was refused and nothing written; the consumer name is quoted
/// from the command line.
fn refused(what: &'static str) -> impl Fn(ReplayError) -> anyhow::Error {
    move |error| match error {
        ReplayError::Database(error) => error.into(),
        ReplayError::UnknownConsumer(name) => anyhow!(
            "consumer {} is not deployed in this database",
            escape(&name)
        ),
        refusal => anyhow!("{what} refused, nothing written: {refusal}"),
    }
}

fn deliveries_text(deliveries: &[SettledDelivery]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:36}  {:4}  {:11}  {:8}  {:16}  {:24}  settled at",
        "event", "gen", "status", "attempts", "last error", "type and version"
    );
    for d in deliveries {
        let settled = chrono::DateTime::from_timestamp_micros((d.settled_at * 1e6).round() as i64)
            .map_or_else(
                || d.settled_at.to_string(),
                |at| at.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            );
        let mut kind = format!("{} {}", escape(&d.event_type), escape(&d.version));
        if !d.version_supported() {
            kind.push_str(" (no longer accepted)");
        }
        let _ = writeln!(
            out,
            "{:36}  {:<4}  {:11}  {:<8}  {:16}  {:24}  {settled}",
            d.event_id.to_string(),
            d.generation,
            d.status.as_str(),
            d.attempts,
            escape(d.last_error_code.as_deref().unwrap_or("-")),
            kind
        );
    }
    out
}

/// `evc replay --dry-run | --propose | --apply`.
pub(crate) fn replay(args: &ReplayArgs, database: &Database) -> anyhow::Result<ExitCode> {
    let selection = args.selection.to_runtime();
    if args.plan.dry_run {
        let plan = with_operator(database, Role::Operator, async |operator| {
            operator
                .replay_plan(&selection)
                .await
                .map_err(refused("dry run"))
        })?;
        print!("{}", plan_text(&plan));
        return Ok(ExitCode::SUCCESS);
    }
    if args.plan.propose {
        let proposed = with_operator(database, Role::Operator, async |operator| {
            operator
                .propose_replay(&selection, args.plan.person())
                .await
                .map_err(refused("proposal"))
        })?;
        print!(
            "{}",
            proposed_text(
                "evc replay",
                proposed.plan_id,
                &proposed.planned_by,
                &args.selection.consumer,
                &proposed.plan.digest,
                proposed.plan.deliveries.len()
            )
        );
        return Ok(ExitCode::SUCCESS);
    }
    let approval = args.plan.approval();
    let applied = with_approver(database, async |operator| {
        operator
            .replay(&selection, &approval)
            .await
            .map_err(refused("replay"))
    })?;
    if applied.repeated {
        println!(
            "replay {} was applied before under this idempotency key ({} deliveries); nothing new",
            applied.replay_id, applied.deliveries
        );
    } else {
        println!(
            "replay {}: {} new deliveries of {}, pending",
            applied.replay_id,
            applied.deliveries,
            escape(&args.selection.consumer)
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn plan_text(plan: &ReplayPlan) -> String {
    let mut out = String::new();
    if plan.deliveries.is_empty() {
        let _ = writeln!(
            out,
            "{}: nothing to replay",
            escape(&plan.selection.consumer)
        );
        return out;
    }
    let _ = writeln!(
        out,
        "replay plan for {}: {} deliveries",
        escape(&plan.selection.consumer),
        plan.deliveries.len()
    );
    out.push_str(&deliveries_text(&plan.deliveries));
    let unsupported = plan.unsupported().count();
    if unsupported > 0 {
        let _ = writeln!(
            out,
            "{unsupported} of them carry a version the consumer no longer accepts: apply will refuse"
        );
    }
    // The payload checks against the deployed schemas (the version checks are said above).
    let invalid: Vec<_> = plan
        .not_replayable
        .iter()
        .filter(|n| {
            !matches!(
                n.reason,
                NotReplayableReason::NotSubscribed | NotReplayableReason::VersionNotAccepted
            )
        })
        .collect();
    if !invalid.is_empty() {
        let _ = writeln!(
            out,
            "{} of them cannot be replayed: apply will refuse (leave them out: --event for the others)",
            invalid.len()
        );
        for n in invalid {
            let _ = writeln!(
                out,
                "  {}  generation {}  {}",
                n.event_id,
                n.generation,
                n.reason.code()
            );
        }
    }
    let _ = writeln!(out, "digest: {}", plan.digest);
    let _ = writeln!(
        out,
        "propose with: evc replay {} --propose --as PERSON (and the same selection flags)",
        escape(&plan.selection.consumer),
    );
    out
}

/// A recorded plan (its id and planner, the consumer, digest and size) and how another
/// person applies it with `command`.
fn proposed_text(
    command: &str,
    plan_id: i64,
    planned_by: &str,
    consumer: &str,
    digest: &str,
    deliveries: usize,
) -> String {
    let consumer = escape(consumer);
    format!(
        "plan {plan_id} proposed by {}: {deliveries} deliveries of {consumer}\n\
         digest: {digest}\n\
         another person applies it with: {command} {consumer} --apply --digest {digest} --reason TEXT --approval REF --idempotency-key KEY --as PERSON (and the same selection flags)\n",
        escape(planned_by),
    )
}

/// `evc dlq discard --dry-run | --propose | --apply`.
fn discard(
    selection: &Selection,
    args: &PlanArgs,
    database: &Database,
) -> anyhow::Result<ExitCode> {
    let runtime = selection.to_runtime();
    if args.dry_run {
        let plan = with_operator(database, Role::Operator, async |operator| {
            let console = operator.console("evc dlq discard")?;
            console
                .discard_plan(&runtime)
                .await
                .map_err(refused("dry run"))
        })?;
        print!("{}", discard_plan_text(&plan));
        return Ok(ExitCode::SUCCESS);
    }
    if args.propose {
        let proposed = with_operator(database, Role::Operator, async |operator| {
            let console = operator.console("evc dlq discard")?;
            console
                .propose_discard(&runtime, args.person())
                .await
                .map_err(refused("proposal"))
        })?;
        print!(
            "{}",
            proposed_text(
                "evc dlq discard",
                proposed.plan_id,
                &proposed.planned_by,
                &selection.consumer,
                &proposed.plan.digest,
                proposed.plan.deliveries.len()
            )
        );
        return Ok(ExitCode::SUCCESS);
    }
    let approval = args.approval();
    let applied = with_approver(database, async |operator| {
        let console = operator.console("evc dlq discard")?;
        console
            .discard(&runtime, &approval)
            .await
            .map_err(refused("discard"))
    })?;
    print!("{}", discarded_text(&applied, &selection.consumer));
    Ok(ExitCode::SUCCESS)
}

fn discard_plan_text(plan: &DiscardPlan) -> String {
    let mut out = String::new();
    let consumer = escape(&plan.selection.consumer);
    if plan.deliveries.is_empty() {
        let _ = writeln!(out, "{consumer}: nothing to discard");
        return out;
    }
    let _ = writeln!(
        out,
        "discard plan for {consumer}: {} deliveries",
        plan.deliveries.len()
    );
    out.push_str(&deliveries_text(&plan.deliveries));
    let _ = writeln!(out, "digest: {}", plan.digest);
    let _ = writeln!(
        out,
        "propose with: evc dlq discard {consumer} --propose --as PERSON (and the same selection flags)"
    );
    out
}

/// What a discard did, every delivery named: a discard is never silent.
fn discarded_text(applied: &DiscardApplied, consumer: &str) -> String {
    let mut out = String::new();
    if applied.repeated {
        let _ = writeln!(
            out,
            "discard {} was applied before under this idempotency key ({} deliveries); nothing new",
            applied.discard_id,
            applied.discarded.len()
        );
    } else {
        let _ = writeln!(
            out,
            "discard {}: {} deliveries of {} discarded",
            applied.discard_id,
            applied.discarded.len(),
            escape(consumer)
        );
    }
    for d in &applied.discarded {
        let _ = writeln!(
            out,
            "  {}  generation {}  {}  {} {}",
            d.event_id,
            d.generation,
            d.status.as_str(),
            escape(&d.event_type),
            escape(&d.version)
        );
    }
    out
}
