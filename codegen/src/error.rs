//! Errors of the evc-codegen library.

use std::path::PathBuf;

use crate::diagnostic::Diagnostic;
use crate::source::Sources;

/// Why a contract set could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The contract directory (or one of its folders) could not be read at all.
    #[error("cannot read `{path}`")]
    Io {
        /// The path that failed.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The path given as the contract directory is not a directory.
    #[error("`{path}` is not a directory")]
    NotADirectory {
        /// The path given.
        path: PathBuf,
    },
    /// The contracts were read but are invalid.
    #[error("{} problem(s) in the contracts", diagnostics.iter().filter(|d| d.is_error()).count())]
    Invalid {
        /// Every finding, errors and warnings, sorted by place.
        diagnostics: Vec<Diagnostic>,
        /// The files read, to render snippets.
        sources: Sources,
    },
}
