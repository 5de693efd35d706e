//! The base side of `evc compat`: the contracts of a git revision, read without network.
//!
//! Everything runs the `git` binary with [`std::process::Command`]: [`default_base`] picks the
//! revision to compare against (the merge-base of `HEAD` with `origin/main`, else with `main`),
//! and [`checkout_contracts`] copies the contract directory as it was at a revision into a
//! temporary directory, reading every file through one `git cat-file --batch` process.
//!
//! ```no_run
//! use std::path::Path;
//! use evc_codegen::compat::git;
//!
//! let base = git::default_base(Path::new("."))?;
//! let checkout = git::checkout_contracts(Path::new("contracts"), &base)?;
//! println!("base contracts of {} in {}", checkout.short_commit(), checkout.contracts_dir().display());
//! # Ok::<(), git::GitError>(())
//! ```

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

/// Why the base contracts could not be read from git.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The `git` binary could not be started.
    #[error("cannot run `git` (is it installed and on PATH?): {source}")]
    GitNotFound {
        /// The error of the spawn.
        #[source]
        source: std::io::Error,
    },
    /// The directory is not inside a git work tree.
    #[error("`{}` is not inside a git repository: {stderr}", dir.display())]
    NotARepository {
        /// The directory git was asked about.
        dir: PathBuf,
        /// What git said.
        stderr: String,
    },
    /// The revision does not name a commit of the repository.
    #[error(
        "unknown revision `{rev}`: it does not name a commit of this repository (fetch it, or pass another with --against)"
    )]
    UnknownRevision {
        /// The revision as given.
        rev: String,
    },
    /// No default base revision could be found.
    #[error("cannot find a base revision: tried {tried}; pass one with --against")]
    NoDefaultBase {
        /// What was tried and why each attempt failed.
        tried: String,
    },
    /// A git command failed.
    #[error("`{command}` failed: {stderr}")]
    Failed {
        /// The command line (`git ls-tree ...`).
        command: String,
        /// What git wrote on standard error, trimmed.
        stderr: String,
    },
    /// Reading git's output or writing the copy failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The contract directory of a revision, copied into a temporary directory that lives as long as
/// this value.
#[derive(Debug)]
pub struct BaseCheckout {
    root: tempfile::TempDir,
    contracts: PathBuf,
    commit: String,
    existed: bool,
}

impl BaseCheckout {
    /// The copy of the contract directory (an empty directory when it did not exist at the
    /// revision). Its layout below the repository root is preserved inside the temporary
    /// directory, so file paths relative to it match the head's.
    pub fn contracts_dir(&self) -> &Path {
        &self.contracts
    }

    /// The temporary directory holding the copy.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// The full commit id the revision resolved to.
    pub fn commit(&self) -> &str {
        &self.commit
    }

    /// The first 12 hex digits of the commit id, for labels (`git:1a2b3c4d5e6f`).
    pub fn short_commit(&self) -> &str {
        self.commit.get(..12).unwrap_or(&self.commit)
    }

    /// False when the contract directory did not exist at the revision: every event type of the
    /// head is then new.
    pub fn existed(&self) -> bool {
        self.existed
    }
}

/// The revision `evc compat` compares against by default: the merge-base of `HEAD` with
/// `origin/main`, or, when `origin/main` does not exist or has no merge-base with `HEAD`, with
/// `main`. Returns the full commit id.
///
/// # Errors
/// [`GitError::NotARepository`] outside a work tree, [`GitError::NoDefaultBase`] (saying what was
/// tried) when neither branch gives a merge-base, [`GitError::GitNotFound`] without git.
pub fn default_base(repo: &Path) -> Result<String, GitError> {
    let (top, _) = toplevel(repo)?;
    let mut tried = Vec::new();
    for branch in ["origin/main", "main"] {
        if resolve_commit(&top, branch)?.is_none() {
            tried.push(format!("`{branch}` (it does not exist)"));
            continue;
        }
        let output = git(&top, ["merge-base", "HEAD", branch])?;
        if output.status.success() {
            let commit = stdout_line(&output.stdout);
            if !commit.is_empty() {
                return Ok(commit);
            }
        }
        let stderr = trimmed(&output.stderr);
        tried.push(if stderr.is_empty() {
            format!("`git merge-base HEAD {branch}` (no common ancestor)")
        } else {
            format!("`git merge-base HEAD {branch}` ({stderr})")
        });
    }
    Err(GitError::NoDefaultBase {
        tried: tried.join(" and "),
    })
}

/// Copies the directory `contracts_dir` (a path in a git work tree; it need not exist any more)
/// as it was at `rev` into a temporary directory.
///
/// # Errors
/// [`GitError::NotARepository`] when `contracts_dir` is not in a work tree,
/// [`GitError::UnknownRevision`] when `rev` names no commit, [`GitError::Failed`] when a git
/// command fails, [`GitError::Io`] when the copy cannot be written.
pub fn checkout_contracts(contracts_dir: &Path, rev: &str) -> Result<BaseCheckout, GitError> {
    let (existing, missing) = existing_ancestor(contracts_dir);
    let (top, prefix) = toplevel(&existing)?;
    let mut relative = PathBuf::from(prefix.trim_end_matches('/'));
    relative.extend(missing.iter());
    let relative = normalize(&relative).ok_or_else(|| GitError::Failed {
        command: "git rev-parse --show-prefix".to_owned(),
        stderr: format!(
            "`{}` is outside the repository at `{}`",
            contracts_dir.display(),
            top.display()
        ),
    })?;
    let commit = resolve_commit(&top, rev)?.ok_or_else(|| GitError::UnknownRevision {
        rev: rev.to_owned(),
    })?;

    let blobs = list_blobs(&top, &commit, &relative)?;
    let root = tempfile::Builder::new()
        .prefix("evc-compat-base-")
        .tempdir()
        .map_err(|source| GitError::Io {
            what: "cannot create a temporary directory".to_owned(),
            source,
        })?;
    let contracts = root.path().join(&relative);
    create_dir(&contracts)?;
    let existed = !blobs.is_empty();
    if existed {
        let contents = read_blobs(&top, blobs.iter().map(|blob| blob.id.as_str()))?;
        for (blob, content) in blobs.iter().zip(contents) {
            let target = root.path().join(&blob.path);
            if let Some(parent) = target.parent() {
                create_dir(parent)?;
            }
            let write_error = |source| GitError::Io {
                what: format!("cannot write `{}`", target.display()),
                source,
            };
            match content {
                BlobContent::Bytes(bytes) => std::fs::write(&target, bytes).map_err(write_error)?,
                // A sparse file of the blob's size: the loader refuses it by its size, as it
                // would the file in a work tree, and no memory or disk holds the blob.
                BlobContent::TooLarge(size) => std::fs::File::create(&target)
                    .and_then(|file| file.set_len(size))
                    .map_err(write_error)?,
            }
        }
    }
    Ok(BaseCheckout {
        root,
        contracts,
        commit,
        existed,
    })
}

/// What `git cat-file` gave for a blob: its bytes, or only its size when it is over the loader's
/// cap (its bytes were skipped, not kept).
enum BlobContent {
    Bytes(Vec<u8>),
    TooLarge(u64),
}

/// A file of the tree at the revision: its path relative to the repository root and blob id.
struct Blob {
    path: PathBuf,
    id: String,
}

/// The work tree's top level and the prefix of `dir` inside it (`contracts/`, or empty).
fn toplevel(dir: &Path) -> Result<(PathBuf, String), GitError> {
    let output = git(dir, ["rev-parse", "--show-toplevel", "--show-prefix"])?;
    if !output.status.success() {
        return Err(GitError::NotARepository {
            dir: dir.to_owned(),
            stderr: trimmed(&output.stderr),
        });
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let mut lines = text.lines();
    let top = lines.next().unwrap_or_default();
    if top.is_empty() {
        return Err(GitError::NotARepository {
            dir: dir.to_owned(),
            stderr: "git reports no work tree (a bare repository?)".to_owned(),
        });
    }
    let prefix = lines.next().unwrap_or_default().to_owned();
    Ok((PathBuf::from(top), prefix))
}

/// The full commit id `rev` names, or `None` when it names no commit.
fn resolve_commit(top: &Path, rev: &str) -> Result<Option<String>, GitError> {
    if rev.is_empty() || rev.starts_with('-') {
        return Ok(None);
    }
    let spec = format!("{rev}^{{commit}}");
    let output = git(top, ["rev-parse", "--verify", "--quiet", spec.as_str()])?;
    let commit = stdout_line(&output.stdout);
    Ok((output.status.success() && !commit.is_empty()).then_some(commit))
}

/// Every blob below `relative` (every blob, when it is empty) in the tree of `commit`.
fn list_blobs(top: &Path, commit: &str, relative: &Path) -> Result<Vec<Blob>, GitError> {
    let mut args = vec![
        "ls-tree".to_owned(),
        "-r".to_owned(),
        "-z".to_owned(),
        "--full-tree".to_owned(),
        commit.to_owned(),
    ];
    let relative_text = relative.to_string_lossy().replace('\\', "/");
    if !relative_text.is_empty() {
        args.push("--".to_owned());
        args.push(relative_text.clone());
    }
    let output = git(top, &args)?;
    if !output.status.success() {
        return Err(GitError::Failed {
            command: format!("git {}", args.join(" ")),
            stderr: trimmed(&output.stderr),
        });
    }
    let prefix = if relative_text.is_empty() {
        String::new()
    } else {
        format!("{relative_text}/")
    };
    let mut blobs = Vec::new();
    for entry in output.stdout.split(|&byte| byte == 0) {
        // `<mode> SP <type> SP <object> TAB <path>`
        let entry = String::from_utf8_lossy(entry);
        let Some((meta, path)) = entry.split_once('\t') else {
            continue;
        };
        let mut fields = meta.split(' ');
        let (Some(mode), Some(kind), Some(id)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        // Symbolic links (120000) and submodules (commits) are not contract files.
        if kind != "blob" || mode == "120000" || !path.starts_with(&prefix) {
            continue;
        }
        let Some(path) = normalize(Path::new(path)) else {
            continue;
        };
        blobs.push(Blob {
            path,
            id: id.to_owned(),
        });
    }
    Ok(blobs)
}

/// The contents of `ids`, in order, read by one `git cat-file --batch` process. A blob over
/// [`crate::loader::MAX_FILE_BYTES`] is skipped, not held in memory.
fn read_blobs<'a>(
    top: &Path,
    ids: impl Iterator<Item = &'a str>,
) -> Result<Vec<BlobContent>, GitError> {
    let input: String = ids.map(|id| format!("{id}\n")).collect();
    let count = input.lines().count();
    let mut child = command(top, ["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_error)?;
    let io_error = |what: &str| {
        let what = what.to_owned();
        move |source| GitError::Io { what, source }
    };
    // Write from another thread so that a full stdout pipe cannot block us both.
    let mut stdin = child.stdin.take().ok_or_else(|| GitError::Failed {
        command: "git cat-file --batch".to_owned(),
        stderr: "no standard input".to_owned(),
    })?;
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let stdout = child.stdout.take().ok_or_else(|| GitError::Failed {
        command: "git cat-file --batch".to_owned(),
        stderr: "no standard output".to_owned(),
    })?;
    let mut reader = BufReader::new(stdout);
    let mut contents = Vec::with_capacity(count);
    let mut header = Vec::new();
    for _ in 0..count {
        header.clear();
        reader
            .read_until(b'\n', &mut header)
            .map_err(io_error("cannot read `git cat-file --batch` output"))?;
        // `<oid> SP <type> SP <size> LF`, or `<oid> SP missing LF`.
        let line = String::from_utf8_lossy(&header);
        let size = line
            .trim_end()
            .rsplit(' ')
            .next()
            .and_then(|size| size.parse::<usize>().ok());
        let Some(size) = size else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(GitError::Failed {
                command: "git cat-file --batch".to_owned(),
                stderr: format!("unexpected output `{}`", line.trim_end()),
            });
        };
        if size > crate::loader::MAX_FILE_BYTES {
            let skipped = std::io::copy(&mut (&mut reader).take(size as u64), &mut std::io::sink())
                .map_err(io_error("cannot read `git cat-file --batch` output"))?;
            if skipped != size as u64 {
                let _ = child.kill();
                let _ = child.wait();
                return Err(GitError::Failed {
                    command: "git cat-file --batch".to_owned(),
                    stderr: "the output ended inside a blob".to_owned(),
                });
            }
            let mut newline = [0; 1];
            reader
                .read_exact(&mut newline)
                .map_err(io_error("cannot read `git cat-file --batch` output"))?;
            contents.push(BlobContent::TooLarge(size as u64));
            continue;
        }
        let mut bytes = vec![0; size];
        reader
            .read_exact(&mut bytes)
            .map_err(io_error("cannot read `git cat-file --batch` output"))?;
        let mut newline = [0; 1];
        reader
            .read_exact(&mut newline)
            .map_err(io_error("cannot read `git cat-file --batch` output"))?;
        contents.push(BlobContent::Bytes(bytes));
    }
    drop(reader);
    let written = writer.join();
    let output = child
        .wait_with_output()
        .map_err(io_error("cannot wait for `git cat-file --batch`"))?;
    match written {
        Ok(Ok(())) => {}
        Ok(Err(source)) => {
            return Err(GitError::Io {
                what: "cannot write to `git cat-file --batch`".to_owned(),
                source,
            });
        }
        Err(_) => {
            return Err(GitError::Failed {
                command: "git cat-file --batch".to_owned(),
                stderr: "the writer thread panicked".to_owned(),
            });
        }
    }
    if !output.status.success() {
        return Err(GitError::Failed {
            command: "git cat-file --batch".to_owned(),
            stderr: trimmed(&output.stderr),
        });
    }
    Ok(contents)
}

/// `dir` split into its nearest existing ancestor and the missing components below it.
fn existing_ancestor(dir: &Path) -> (PathBuf, Vec<std::ffi::OsString>) {
    let mut existing = if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir.to_owned()
    };
    let mut missing = Vec::new();
    while !existing.is_dir() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                missing.push(name.to_owned());
                existing = if parent.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    parent.to_owned()
                };
            }
            _ => break,
        }
    }
    missing.reverse();
    (existing, missing)
}

/// `path` with `.` removed and `..` applied, or `None` when it leaves its root or is absolute.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

fn create_dir(dir: &Path) -> Result<(), GitError> {
    std::fs::create_dir_all(dir).map_err(|source| GitError::Io {
        what: format!("cannot create `{}`", dir.display()),
        source,
    })
}

fn command<I, S>(dir: &Path, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut command = Command::new("git");
    command
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    command
}

fn git<I, S>(dir: &Path, args: I) -> Result<std::process::Output, GitError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    command(dir, args).output().map_err(spawn_error)
}

fn spawn_error(source: std::io::Error) -> GitError {
    if source.kind() == std::io::ErrorKind::NotFound {
        GitError::GitNotFound { source }
    } else {
        GitError::Io {
            what: "cannot run `git`".to_owned(),
            source,
        }
    }
}

fn stdout_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn trimmed(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_keeps_relative_paths_inside_their_root() {
        assert_eq!(
            normalize(Path::new("a/./b/../c")),
            Some(PathBuf::from("a/c"))
        );
        assert_eq!(normalize(Path::new("../a")), None);
        assert_eq!(normalize(Path::new("/a")), None);
        assert_eq!(normalize(Path::new("")), Some(PathBuf::new()));
    }

    #[test]
    fn existing_ancestor_splits_off_missing_components() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (existing, missing) = existing_ancestor(&dir.path().join("x/y"));
        assert_eq!(existing, dir.path());
        assert_eq!(missing, ["x", "y"]);
    }
}
