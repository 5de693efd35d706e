//! Finding, reading and parsing the files of a contract directory.
//!
//! Reading is defensive, since a contract directory can come from an untrusted pull request:
//! every file and folder must resolve inside the contract directory (a symlink may point
//! elsewhere in it, never out of it), files are opened without blocking and must be regular
//! files (a FIFO or device is refused, not waited on), sizes are checked before reading, reads
//! are capped, bytes must be UTF-8, and YAML is parsed under a budget. A refused file is named
//! in a diagnostic and nothing of its content is read. Each problem becomes a diagnostic on its
//! file; the load goes on with the other files so one run reports everything.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::cache::LoadCache;
use crate::diagnostic::{Diagnostic, Rule};
use crate::error::LoadError;
use crate::format::{
    ConsumerFile, EventFile, ExecutorClassesFile, ProjectFile, RetryPoliciesFile, SchedulesFile,
    TopicsFile,
};
use crate::source::{Location, SourceFile};
use crate::structure::{self, FileKind};
use crate::yaml::{self, Node};

/// Largest contract file accepted, in bytes. Contracts are small; a bigger file is a mistake or
/// an attack and is refused without being read whole.
pub const MAX_FILE_BYTES: usize = 1024 * 1024;

/// Most contract files one load reads; the rest are reported, not read. Real contract sets have
/// tens to a few thousand files.
pub const MAX_FILES: usize = 10_000;

/// Most bytes one load reads over all its files (64 MiB); later files are reported, not read.
pub const MAX_TOTAL_BYTES: usize = 64 * 1024 * 1024;

/// The project settings file.
pub const PROJECT_FILE: &str = "evc.yaml";
/// The retry policies file.
pub const RETRY_POLICIES_FILE: &str = "retry-policies.yaml";
/// The topics file.
pub const TOPICS_FILE: &str = "topics.yaml";
/// The executor classes file.
pub const EXECUTOR_CLASSES_FILE: &str = "executor-classes.yaml";
/// The schedules file.
pub const SCHEDULES_FILE: &str = "schedules.yaml";
/// The folder of event type files.
pub const EVENTS_DIR: &str = "events";
/// The folder of consumer files.
pub const CONSUMERS_DIR: &str = "consumers";

/// A file's content in the form of its kind, once it has passed the structural checks.
#[derive(Debug, Clone)]
pub enum Typed {
    /// `evc.yaml`.
    Project(Box<ProjectFile>),
    /// An event type file.
    Event(Box<EventFile>),
    /// A consumer file.
    Consumer(Box<ConsumerFile>),
    /// `retry-policies.yaml`.
    RetryPolicies(RetryPoliciesFile),
    /// `topics.yaml`.
    Topics(TopicsFile),
    /// `executor-classes.yaml`.
    ExecutorClasses(ExecutorClassesFile),
    /// `schedules.yaml`.
    Schedules(SchedulesFile),
}

/// One contract file after reading and parsing.
#[derive(Debug, Clone)]
pub struct ParsedFile {
    /// What kind of file the path says it is.
    pub kind: FileKind,
    /// The source text, when it could be read.
    pub source: Option<SourceFile>,
    /// The YAML tree, when it parsed. Shared, as the typed content is: a [`LoadCache`] keeps
    /// the parse for a later load without copying it.
    pub tree: Option<Arc<Node>>,
    /// The typed content, when the file passed every structural check.
    pub typed: Option<Arc<Typed>>,
}

impl ParsedFile {
    fn unread(kind: FileKind) -> Self {
        Self {
            kind,
            source: None,
            tree: None,
            typed: None,
        }
    }
}

/// Everything read from a contract directory, before cross-file validation.
#[derive(Debug, Clone, Default)]
pub struct ParsedDir {
    /// Files by display path (relative, `/`-separated), in path order.
    pub files: std::collections::BTreeMap<String, ParsedFile>,
    /// Problems found so far.
    pub diagnostics: Vec<Diagnostic>,
}

/// Reads and parses every contract file under `dir`.
pub fn read_dir(dir: &Path) -> Result<ParsedDir, LoadError> {
    read_dir_with(dir, None)
}

/// [`read_dir`], taking the parse of a file whose bytes `cache` has seen from it.
pub(crate) fn read_dir_with(dir: &Path, cache: Option<&LoadCache>) -> Result<ParsedDir, LoadError> {
    let metadata = fs::metadata(dir).map_err(|source| LoadError::Io {
        path: dir.to_owned(),
        source,
    })?;
    if !metadata.is_dir() {
        return Err(LoadError::NotADirectory {
            path: dir.to_owned(),
        });
    }
    // Every file must resolve inside this; symlinks are judged by where they lead.
    let root = fs::canonicalize(dir).map_err(|source| LoadError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let mut parsed = ParsedDir::default();
    let found = discover(dir, &root, &mut parsed.diagnostics)?;
    let mut total_bytes = 0;
    let mut index = 0;
    'chunks: for chunk in found.chunks(PARSE_CHUNK) {
        for (file, diagnostics) in parse_in_parallel(&root, chunk, cache) {
            let display = &found[index].0;
            if index == MAX_FILES || total_bytes > MAX_TOTAL_BYTES {
                parsed.diagnostics.push(Diagnostic::new(
                    Rule::ContractDirTooLarge,
                    Location::file(display.as_str()),
                    format!(
                        "the contract directory holds more than {MAX_FILES} files or \
                         {MAX_TOTAL_BYTES} bytes; `{display}` and the {} files after it are not \
                         read",
                        found.len() - index - 1
                    ),
                    "split the contracts into several directories, or remove what is not a \
                     contract",
                ));
                break 'chunks;
            }
            total_bytes += file.source.as_ref().map_or(0, |source| source.text().len());
            parsed.diagnostics.extend(diagnostics);
            parsed.files.insert(display.clone(), file);
            index += 1;
        }
    }
    if !parsed.files.contains_key(PROJECT_FILE) {
        parsed.diagnostics.push(Diagnostic::new(
            Rule::MissingProjectFile,
            Location::file(PROJECT_FILE),
            format!("the contract directory has no `{PROJECT_FILE}`"),
            "create `evc.yaml` with `project:` and `payload_policy:` (see docs/contracts.md)",
        ));
    }
    Ok(parsed)
}

/// Files parsed at once, on two threads; the size limits are applied after each such chunk,
/// so at most this many files are parsed beyond them.
const PARSE_CHUNK: usize = 64;

/// Parses `files` on two threads; each file's result and its own diagnostics, in `files` order.
fn parse_in_parallel(
    root: &Path,
    files: &[(String, PathBuf, FileKind)],
    cache: Option<&LoadCache>,
) -> Vec<(ParsedFile, Vec<Diagnostic>)> {
    let parse_all = |files: &[(String, PathBuf, FileKind)]| {
        files
            .iter()
            .map(|(display, path, kind)| parse_file_in(root, display, path, *kind, cache))
            .collect::<Vec<_>>()
    };
    let (first, second) = files.split_at(files.len() / 2);
    std::thread::scope(|scope| {
        let second = scope.spawn(|| parse_all(second));
        let mut results = parse_all(first);
        match second.join() {
            Ok(rest) => results.extend(rest),
            Err(panic) => std::panic::resume_unwind(panic),
        }
        results
    })
}

/// Lists the contract files of `dir` by kind; reports files that do not belong.
fn discover(
    dir: &Path,
    root: &Path,
    diagnostics: &mut Vec<Diagnostic>,
) -> Result<Vec<(String, PathBuf, FileKind)>, LoadError> {
    let mut found = Vec::new();
    for entry in sorted_entries(dir)? {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.starts_with('.') {
            continue;
        }
        let kind = match name.as_str() {
            PROJECT_FILE => Some(FileKind::Project),
            RETRY_POLICIES_FILE => Some(FileKind::RetryPolicies),
            TOPICS_FILE => Some(FileKind::Topics),
            EXECUTOR_CLASSES_FILE => Some(FileKind::ExecutorClasses),
            SCHEDULES_FILE => Some(FileKind::Schedules),
            EVENTS_DIR | CONSUMERS_DIR if path.is_dir() && !resolves_inside(&path, root) => {
                // Listing it would echo the names of a folder elsewhere on the machine.
                diagnostics.push(ReadError::Outside.into_diagnostic(&name));
                None
            }
            EVENTS_DIR | CONSUMERS_DIR if path.is_dir() => {
                let kind = if name == EVENTS_DIR {
                    FileKind::Event
                } else {
                    FileKind::Consumer
                };
                for inner in sorted_entries(&path)? {
                    let inner_name = inner.file_name().to_string_lossy().into_owned();
                    if inner_name.starts_with('.') {
                        continue;
                    }
                    let display = format!("{name}/{inner_name}");
                    if inner_name.ends_with(".yaml") && !inner.path().is_dir() {
                        found.push((display, inner.path(), kind));
                    } else {
                        diagnostics.push(unexpected_file(&display));
                    }
                }
                None
            }
            _ => {
                if is_yaml_name(&name)
                    || path.is_dir()
                    || name == EVENTS_DIR
                    || name == CONSUMERS_DIR
                {
                    diagnostics.push(unexpected_file(&name));
                }
                None
            }
        };
        if let Some(kind) = kind {
            found.push((name, path, kind));
        }
    }
    Ok(found)
}

/// Whether `path` exists and resolves (through any symlinks) to a path under `root`, which is
/// canonical.
fn resolves_inside(path: &Path, root: &Path) -> bool {
    fs::canonicalize(path).is_ok_and(|target| target.starts_with(root))
}

fn is_yaml_name(name: &str) -> bool {
    name.ends_with(".yaml") || name.ends_with(".yml")
}

fn unexpected_file(display: &str) -> Diagnostic {
    Diagnostic::new(
        Rule::UnexpectedFile,
        Location::file(display),
        format!("`{display}` is not a contract file and is ignored"),
        "event types go in `events/<event.type>.yaml`, consumers in `consumers/<consumer>.yaml`; \
         settings in `evc.yaml`, `retry-policies.yaml`, `topics.yaml`, \
         `executor-classes.yaml` and `schedules.yaml`; move or delete it",
    )
}

fn sorted_entries(dir: &Path) -> Result<Vec<fs::DirEntry>, LoadError> {
    let io_error = |source| LoadError::Io {
        path: dir.to_owned(),
        source,
    };
    let mut entries = fs::read_dir(dir)
        .map_err(io_error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(io_error)?;
    entries.sort_by_key(fs::DirEntry::file_name);
    Ok(entries)
}

/// Reads, decodes, parses and checks one file as [`parse_bytes`] does. Problems go to
/// `diagnostics`.
/// The file is read wherever its path leads; [`read_dir`] confines files to the contract
/// directory.
pub fn parse_file(
    display: &str,
    path: &Path,
    kind: FileKind,
    diagnostics: &mut Vec<Diagnostic>,
) -> ParsedFile {
    match read_capped(path, None) {
        Ok(bytes) => parse_bytes(display, bytes, kind, diagnostics),
        Err(problem) => {
            diagnostics.push(problem.into_diagnostic(display));
            ParsedFile::unread(kind)
        }
    }
}

/// [`parse_file`] for a file that must resolve inside the canonical directory `root`; the
/// parse and its diagnostics come from `cache` when it has seen the same bytes there.
fn parse_file_in(
    root: &Path,
    display: &str,
    path: &Path,
    kind: FileKind,
    cache: Option<&LoadCache>,
) -> (ParsedFile, Vec<Diagnostic>) {
    let mut diagnostics = Vec::new();
    let bytes = match read_capped(path, Some(root)) {
        Ok(bytes) => bytes,
        Err(problem) => {
            diagnostics.push(problem.into_diagnostic(display));
            return (ParsedFile::unread(kind), diagnostics);
        }
    };
    let Some(cache) = cache else {
        let file = parse_bytes(display, bytes, kind, &mut diagnostics);
        return (file, diagnostics);
    };
    if let Some(hit) = cache.take_file(display, kind, &bytes) {
        return hit;
    }
    let file = parse_bytes(display, bytes.clone(), kind, &mut diagnostics);
    cache.remember_file(display, kind, bytes, &file, &diagnostics);
    (file, diagnostics)
}

/// Decodes, parses and structurally checks the bytes of one file, and reports strings
/// generated code cannot carry. Problems go to `diagnostics`. Any input is accepted without panicking; the fuzz target and property tests call this.
pub fn parse_bytes(
    display: &str,
    bytes: Vec<u8>,
    kind: FileKind,
    diagnostics: &mut Vec<Diagnostic>,
) -> ParsedFile {
    let mut parsed = ParsedFile::unread(kind);
    if bytes.len() > MAX_FILE_BYTES {
        diagnostics.push(
            ReadError::TooLarge {
                size: bytes.len() as u64,
                max: MAX_FILE_BYTES,
            }
            .into_diagnostic(display),
        );
        return parsed;
    }
    match decode(display, bytes) {
        Ok(source) => parse_source(&mut parsed, source, diagnostics),
        Err(diagnostic) => diagnostics.push(*diagnostic),
    }
    parsed
}

fn parse_source(parsed: &mut ParsedFile, source: SourceFile, diagnostics: &mut Vec<Diagnostic>) {
    let tree = match yaml::parse(&source) {
        Ok(Some(tree)) => tree,
        Ok(None) => {
            diagnostics.push(Diagnostic::new(
                Rule::FileEmpty,
                Location::file(source.path()),
                format!("`{}` holds no YAML document", source.path()),
                "write the contract, or delete the file",
            ));
            parsed.source = Some(source);
            return;
        }
        Err(diagnostic) => {
            diagnostics.push(*diagnostic);
            parsed.source = Some(source);
            return;
        }
    };
    crate::control_characters::check(&source, &tree, diagnostics);
    let json = tree.to_json();
    let problems = structure::check(parsed.kind, &source, &tree, &json);
    if problems.is_empty() {
        match to_typed(parsed.kind, json) {
            Ok(typed) => parsed.typed = Some(Arc::new(typed)),
            Err(error) => diagnostics.push(Diagnostic::new(
                Rule::InvalidValue,
                tree.location(&source),
                format!("the file does not fit its format: {error}"),
                "compare the file with docs/contracts.md",
            )),
        }
    }
    diagnostics.extend(problems);
    parsed.tree = Some(Arc::new(tree));
    parsed.source = Some(source);
}

fn to_typed(kind: FileKind, json: serde_json::Value) -> Result<Typed, serde_json::Error> {
    fn from<T: DeserializeOwned>(json: serde_json::Value) -> Result<T, serde_json::Error> {
        serde_json::from_value(json)
    }
    Ok(match kind {
        FileKind::Project => Typed::Project(Box::new(from(json)?)),
        FileKind::Event => Typed::Event(Box::new(from(json)?)),
        FileKind::Consumer => Typed::Consumer(Box::new(from(json)?)),
        FileKind::RetryPolicies => Typed::RetryPolicies(from(json)?),
        FileKind::Topics => Typed::Topics(from(json)?),
        FileKind::ExecutorClasses => Typed::ExecutorClasses(from(json)?),
        FileKind::Schedules => Typed::Schedules(from(json)?),
    })
}

/// Why a file was not read. None of them carries any of the file's content.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Opening, inspecting or reading the file failed (missing, a dangling symlink, a symlink
    /// loop, permissions).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The file is larger than its cap ([`MAX_FILE_BYTES`] for a contract file).
    #[error("it is {size} bytes; at most {max} bytes are read")]
    TooLarge {
        /// The file's size.
        size: u64,
        /// The cap it was read under.
        max: usize,
    },
    /// The path resolves (through a symlink) to a place outside the directory it must stay in.
    #[error("it is a symlink that leads out of the directory being read")]
    Outside,
    /// The path is a FIFO, socket or device, not a regular file.
    #[error("it is not a regular file (a FIFO, socket or device)")]
    NotRegular,
}

impl ReadError {
    fn into_diagnostic(self, display: &str) -> Diagnostic {
        match self {
            Self::Io(error) => Diagnostic::new(
                Rule::FileUnreadable,
                Location::file(display),
                format!("`{display}` cannot be read: {error}"),
                "make it a readable regular file (check permissions and symlinks), or delete it",
            ),
            Self::TooLarge { size, .. } => Diagnostic::new(
                Rule::FileTooLarge,
                Location::file(display),
                format!(
                    "`{display}` is {size} bytes; contract files may be at most {MAX_FILE_BYTES} bytes"
                ),
                "split the contract or remove what does not belong in it (payload schemas hold \
                 references, not data)",
            ),
            Self::Outside => Diagnostic::new(
                Rule::UnsafeFile,
                Location::file(display),
                format!(
                    "`{display}` is a symlink that leads outside the contract directory; it is \
                     not read"
                ),
                "replace the symlink with the file itself, or point it at a file inside the \
                 contract directory",
            ),
            Self::NotRegular => Diagnostic::new(
                Rule::UnsafeFile,
                Location::file(display),
                format!(
                    "`{display}` is not a regular file (a FIFO, socket or device); it is not read"
                ),
                "replace it with a regular file, or delete it",
            ),
        }
    }
}

/// Reads a regular file of at most [`MAX_FILE_BYTES`] bytes without blocking on it: a FIFO,
/// socket or device is refused before anything is read, and a file that grows while it is read
/// is cut off at the cap. With `inside` (a canonical directory), a path that resolves outside
/// it is refused unopened.
///
/// # Errors
/// [`ReadError`] saying why the file was not read.
pub fn read_capped(path: &Path, inside: Option<&Path>) -> Result<Vec<u8>, ReadError> {
    read_capped_to(path, inside, MAX_FILE_BYTES)
}

/// Like [`read_capped`], with a cap of `max_bytes`: an AsyncAPI document describes the whole
/// contract set and is allowed [`crate::yaml::MAX_DOCUMENT_BYTES`].
///
/// # Errors
/// [`ReadError`] saying why the file was not read.
pub fn read_capped_to(
    path: &Path,
    inside: Option<&Path>,
    max_bytes: usize,
) -> Result<Vec<u8>, ReadError> {
    let target = fs::canonicalize(path)?;
    if let Some(root) = inside
        && !target.starts_with(root)
    {
        return Err(ReadError::Outside);
    }
    let file = open_nonblocking(&target)?;
    let metadata = file.metadata()?;
    if metadata.is_dir() {
        // A mistake rather than an attack; reported like any file that cannot be read.
        return Err(ReadError::Io(std::io::Error::other("it is a folder")));
    }
    if !metadata.is_file() {
        return Err(ReadError::NotRegular);
    }
    if metadata.len() > max_bytes as u64 {
        return Err(ReadError::TooLarge {
            size: metadata.len(),
            max: max_bytes,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    // The cap holds even if the file grows between the size check and the read.
    file.take(max_bytes as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > max_bytes {
        return Err(ReadError::TooLarge {
            size: bytes.len() as u64,
            max: max_bytes,
        });
    }
    Ok(bytes)
}

/// Opens for reading without waiting: opening a FIFO with no writer would block forever.
#[cfg(unix)]
fn open_nonblocking(path: &Path) -> std::io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

#[cfg(not(unix))]
fn open_nonblocking(path: &Path) -> std::io::Result<fs::File> {
    fs::File::open(path)
}

/// Decodes UTF-8 (a leading byte-order mark is dropped), pointing at the first bad byte.
fn decode(display: &str, bytes: Vec<u8>) -> Result<SourceFile, Box<Diagnostic>> {
    match String::from_utf8(bytes) {
        Ok(text) => {
            let text = text
                .strip_prefix('\u{feff}')
                .map(str::to_owned)
                .unwrap_or(text);
            Ok(SourceFile::new(display, text))
        }
        Err(error) => {
            let valid_up_to = error.utf8_error().valid_up_to();
            let bytes = error.into_bytes();
            let prefix = String::from_utf8_lossy(&bytes[..valid_up_to]).into_owned();
            let prefix_file = SourceFile::new(display, prefix);
            let (line, column) = prefix_file.line_column(valid_up_to);
            Err(Box::new(Diagnostic::new(
                Rule::FileNotUtf8,
                Location {
                    file: display.to_owned(),
                    line,
                    column,
                    offset: 0,
                    len: 0,
                },
                format!(
                    "`{display}` is not valid UTF-8 (byte 0x{:02x} at offset {valid_up_to})",
                    bytes[valid_up_to]
                ),
                "save the file as UTF-8",
            )))
        }
    }
}
