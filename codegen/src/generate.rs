//! `evc generate`: render every artifact, write the ones that changed, or report drift.
//!
//! The same code path serves the CLI, the root build script's parity check and the [`Builder`]
//! for users who generate into `OUT_DIR` from their own build script.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::emit::{self, Artifact, EmitError, Layout};
use crate::error::LoadError;
use crate::model::ContractSet;

/// Why generation failed.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// The contracts did not load.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// An emitter failed.
    #[error(transparent)]
    Emit(#[from] EmitError),
    /// A file could not be read or written.
    #[error("cannot access `{path}`")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
}

/// How a generated file differs from what is on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drift {
    /// The file does not exist.
    Missing,
    /// The file exists with other content.
    Stale,
}

/// What `write` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteReport {
    /// Files written because they were missing or different.
    pub written: Vec<PathBuf>,
    /// Files left alone because they were already up to date.
    pub unchanged: usize,
}

/// The names of migration files already present under `<root>/<crate_dir>/migrations`.
pub fn existing_migrations(root: &Path, crate_dir: &Path) -> Result<Vec<String>, GenerateError> {
    let dir = root.join(crate_dir).join("migrations");
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(GenerateError::Io { path: dir, source }),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| GenerateError::Io {
            path: dir.clone(),
            source,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".sql") {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Renders every artifact for the contracts of `set`, given what is already under `root`.
pub fn render(
    set: &ContractSet,
    root: &Path,
    layout: &Layout,
) -> Result<Vec<Artifact>, GenerateError> {
    let mut layout = layout.clone();
    layout.existing_migrations = existing_migrations(root, &layout.crate_dir)?;
    Ok(emit::render_all(set, &layout)?)
}

/// Compares artifacts with the files under `root`; returns each that differs.
pub fn drift(artifacts: &[Artifact], root: &Path) -> Result<Vec<(PathBuf, Drift)>, GenerateError> {
    let mut drifted = Vec::new();
    for artifact in artifacts {
        let path = root.join(&artifact.path);
        match fs::read(&path) {
            Ok(bytes) if bytes == artifact.contents.as_bytes() => {}
            Ok(_) => drifted.push((artifact.path.clone(), Drift::Stale)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                drifted.push((artifact.path.clone(), Drift::Missing));
            }
            Err(source) => return Err(GenerateError::Io { path, source }),
        }
    }
    Ok(drifted)
}

/// Writes the artifacts that differ from what is under `root`; leaves the others untouched.
pub fn write(artifacts: &[Artifact], root: &Path) -> Result<WriteReport, GenerateError> {
    let mut report = WriteReport::default();
    for artifact in artifacts {
        if drift(std::slice::from_ref(artifact), root)?.is_empty() {
            report.unchanged += 1;
            continue;
        }
        let path = root.join(&artifact.path);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|source| GenerateError::Io {
                path: parent.to_owned(),
                source,
            })?;
        }
        fs::write(&path, &artifact.contents).map_err(|source| GenerateError::Io {
            path: path.clone(),
            source,
        })?;
        report.written.push(artifact.path.clone());
    }
    Ok(report)
}

/// Generation from a build script, prost-build style: configure, then [`Builder::generate`]
/// into `OUT_DIR` (or any directory).
///
/// ```no_run
/// // build.rs
/// evc_codegen::generate::Builder::new("contracts")
///     .runtime_path("::evc_runtime")
///     .generate()
///     .expect("contracts generate");
/// // src/lib.rs: include!(concat!(env!("OUT_DIR"), "/evc/src/lib.rs"));
/// ```
#[derive(Debug, Clone)]
pub struct Builder {
    contracts: PathBuf,
    out_dir: Option<PathBuf>,
    layout: Layout,
}

impl Builder {
    /// A builder for the contracts in `contracts`.
    pub fn new(contracts: impl Into<PathBuf>) -> Self {
        Self {
            contracts: contracts.into(),
            out_dir: None,
            layout: Layout {
                crate_dir: PathBuf::from("evc"),
                asyncapi_file: PathBuf::from("evc/asyncapi.yaml"),
                ..Layout::default()
            },
        }
    }

    /// Where to write (default: `$OUT_DIR`).
    pub fn out_dir(&mut self, dir: impl Into<PathBuf>) -> &mut Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// The path generated code uses for runtime items (default `::evc_runtime`).
    pub fn runtime_path(&mut self, path: impl Into<String>) -> &mut Self {
        self.layout.runtime_path = path.into();
        self
    }

    /// Loads the contracts, renders and writes what changed; prints `rerun-if-changed` lines
    /// for every contract file when run by cargo.
    ///
    /// # Errors
    /// A [`GenerateError`] when the contracts are invalid or a file cannot be written.
    pub fn generate(&self) -> Result<WriteReport, GenerateError> {
        let out_dir = match &self.out_dir {
            Some(dir) => dir.clone(),
            None => std::env::var_os("OUT_DIR")
                .map(PathBuf::from)
                .ok_or_else(|| GenerateError::Io {
                    path: PathBuf::from("$OUT_DIR"),
                    source: io::Error::new(
                        io::ErrorKind::NotFound,
                        "OUT_DIR is not set; call out_dir()",
                    ),
                })?,
        };
        let loaded = ContractSet::load(&self.contracts)?;
        if std::env::var_os("CARGO").is_some() {
            println!("cargo::rerun-if-changed={}", self.contracts.display());
            for file in loaded.contracts.sources.iter() {
                println!(
                    "cargo::rerun-if-changed={}",
                    self.contracts.join(file.path()).display()
                );
            }
        }
        let artifacts = render(&loaded.contracts, &out_dir, &self.layout)?;
        write(&artifacts, &out_dir)
    }
}
