//! evc-codegen: the core of evc.
//!
//! One loader turns a contract directory into a validated [`ContractSet`]:
//! `parse` (YAML with spans, [`yaml`]) → `structure` (each file against the format schema,
//! [`structure`]) → `validate` (values, references and policies across files) → the model
//! ([`model`]). Every emitter and check downstream reads the model, never YAML.
//!
//! ```no_run
//! let loaded = evc_codegen::ContractSet::load("contracts")?;
//! println!("{} event types", loaded.contracts.events.len());
//! # Ok::<(), evc_codegen::LoadError>(())
//! ```

mod cache;
pub mod compat;
mod control_characters;
pub mod diagnostic;
pub mod digest;
pub mod duration;
pub mod emit;
mod error;
pub mod format;
pub mod generate;
pub mod import;
pub mod loader;
pub mod model;
pub mod names;
pub mod naming;
pub mod payload_schema;
pub mod printable;
pub mod source;
pub mod structure;
mod uri;
mod validate;
pub mod yaml;

use std::path::Path;

pub use cache::LoadCache;
pub use diagnostic::{Diagnostic, Rule, Severity};
/// Schema facts the macros ask (properties, required set, JSON types, agreeing Rust types).
pub use emit::rust::facts;
pub use error::LoadError;
pub use model::ContractSet;
pub use source::{Location, SourceFile, Sources};

/// A valid contract set and the warnings found while loading it.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The validated model.
    pub contracts: ContractSet,
    /// Findings that do not make the set invalid.
    pub warnings: Vec<Diagnostic>,
}

impl ContractSet {
    /// Loads and validates the contract directory `dir`, reporting every problem at once.
    ///
    /// # Errors
    /// [`LoadError::Invalid`] with all diagnostics when the contracts have errors;
    /// [`LoadError::Io`] or [`LoadError::NotADirectory`] when `dir` cannot be read at all.
    pub fn load(dir: impl AsRef<Path>) -> Result<Loaded, LoadError> {
        Self::load_inner(dir.as_ref(), None, validate::Purpose::Generate)
    }

    /// [`ContractSet::load`], taking from `cache` the parse of every file and the check of every
    /// payload schema an earlier load with the same cache saw unchanged, and leaving this
    /// load's own in it for the next. The result is the same as without a cache.
    ///
    /// # Errors
    /// As [`ContractSet::load`].
    pub fn load_with(dir: impl AsRef<Path>, cache: &LoadCache) -> Result<Loaded, LoadError> {
        Self::load_inner(dir.as_ref(), Some(cache), validate::Purpose::Generate)
    }

    /// [`ContractSet::load_with`] for the base side of a comparison (the published contracts):
    /// such a set is compared, never generated, so the Rust generator's own check (names that
    /// would become one Rust name) is not made. Names the head shares with the base are checked
    /// when the head loads; a clash only the base has is not the proposed change's to fix.
    ///
    /// # Errors
    /// As [`ContractSet::load`].
    pub fn load_base_with(dir: impl AsRef<Path>, cache: &LoadCache) -> Result<Loaded, LoadError> {
        Self::load_inner(dir.as_ref(), Some(cache), validate::Purpose::Compare)
    }

    fn load_inner(
        dir: &Path,
        cache: Option<&LoadCache>,
        purpose: validate::Purpose,
    ) -> Result<Loaded, LoadError> {
        let parsed = loader::read_dir_with(dir, cache)?;
        let sources = parsed
            .files
            .values()
            .filter_map(|file| file.source.clone())
            .fold(Sources::default(), |mut sources, file| {
                sources.insert(file);
                sources
            });
        match validate::validate(dir, parsed, cache, purpose) {
            (Some(contracts), warnings) => Ok(Loaded {
                contracts,
                warnings,
            }),
            (None, diagnostics) => Err(LoadError::Invalid {
                diagnostics,
                sources,
            }),
        }
    }
}
