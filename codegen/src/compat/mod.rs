//! Schema compatibility between two contract sets (`evc compat`, docs/compat.md).
//!
//! [`compare`] judges every event type of the new contracts against the base: the schema engine
//! ([`engine`]) decides whether every payload one version's writer can emit is read by another
//! version's reader ([`views`]), the versioning rules check bumps, in-place edits, removals and
//! migration policies, and each finding carries its place in the new contracts, the consumers it
//! affects and, where one exists, a witness payload checked with a JSON Schema validator
//! ([`witness`]).

pub mod engine;
pub mod git;
pub mod output;
pub mod report;
mod rules;
pub mod schema;
pub mod values;
pub mod views;
pub mod witness;

pub use report::{CompatRule, Direction, EventSummary, Finding, Report, Severity, Witness};

use serde_json::Value;

use crate::model::{ContentModel, ContractSet};
use engine::Incompatibility;
use schema::Dialect;
use values::Document;

/// Compares `head` (the proposed contracts) with `base` (the published ones). `base_label` and
/// `head_label` name the two sides in the report (`git:1a2b3c`, `dir:contracts`).
pub fn compare(
    base: &ContractSet,
    head: &ContractSet,
    base_label: &str,
    head_label: &str,
) -> Report {
    rules::compare(base, head, base_label, head_label)
}

/// How [`judge`] compares two schemas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// Compare the writer view with the reader view (evc's semantics); `false` compares the
    /// schemas as written.
    pub views: bool,
    /// Search a witness payload for each incompatibility.
    pub witnesses: bool,
    /// Whether the writer's generated payload types keep unknown fields (used with `views`).
    pub content: ContentModel,
}

/// One incompatibility and, when one was found, a payload that shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// What the engine found.
    pub incompatibility: Incompatibility,
    /// A payload valid for the writer and rejected by the reader, checked with a validator.
    pub witness: Option<Value>,
}

/// Judges a change from `old` to `new` in one direction: BACKWARD checks that readers of `new`
/// accept what writers of `old` emit, FORWARD the reverse. Schemas without `$schema` are read
/// as 2020-12 (the contract dialect). An empty result means compatible.
pub fn judge(old: &Value, new: &Value, direction: Direction, options: Options) -> Vec<Judgement> {
    judge_in(old, new, direction, options, Dialect::Draft2020)
}

/// [`judge`] with the dialect assumed for schemas that do not name one.
pub fn judge_in(
    old: &Value,
    new: &Value,
    direction: Direction,
    options: Options,
    default_dialect: Dialect,
) -> Vec<Judgement> {
    let (writer, reader) = match direction {
        Direction::Backward => (old, new),
        Direction::Forward => (new, old),
    };
    let (writer_schema, reader_schema) = if options.views {
        (
            views::writer(writer, options.content),
            views::reader(reader),
        )
    } else {
        (writer.clone(), reader.clone())
    };
    let mut writer = Document::new(writer_schema, Dialect::of(writer, default_dialect));
    let mut reader = Document::new(reader_schema, Dialect::of(reader, default_dialect));
    engine::check(&mut writer, &mut reader)
        .into_iter()
        .map(|incompatibility| {
            let witness = options
                .witnesses
                .then(|| witness::find(&mut writer, &mut reader, &incompatibility))
                .flatten();
            Judgement {
                incompatibility,
                witness,
            }
        })
        .collect()
}
