//! Reuse between loads of contract sets that share files.
//!
//! `evc compat` loads the proposed contracts and the published ones, and in a pull request most
//! files are the same on both sides. A [`LoadCache`] given to both loads parses each unchanged
//! file once and checks each unchanged payload schema once. Entries are matched on content,
//! never on a name alone: a parsed file is reused only for equal bytes, and the payload schema
//! checks of an event type file only when the file itself was reused (equal bytes, so the
//! schemas exactly as written) and the payload policy and content model are equal. What a load
//! reports is the same with or without a cache.
//!
//! Every load shares what it parsed and checked with the cache (parsed trees, typed files and
//! checked schemas are behind `Arc`s, so sharing copies none of them), and an entry serves one
//! later load, which takes it.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use crate::diagnostic::Diagnostic;
use crate::format::ContentModel;
use crate::loader::ParsedFile;
use crate::model::PayloadPolicy;
use crate::payload_schema::Checked;
use crate::structure::FileKind;

/// Parsed files and payload schema checks of an earlier load, for the next load of a set that
/// shares files with it. Safe to use from several threads; give one to the loads of one command.
#[derive(Debug, Default)]
pub struct LoadCache {
    files: Mutex<HashMap<(String, FileKind), CachedFile>>,
    /// Display paths of the files a load took from `files`, until its validation asks for
    /// their checks.
    reused: Mutex<HashSet<String>>,
    checks: Mutex<HashMap<String, CachedChecks>>,
}

/// One file as an earlier load read it: its bytes, what they parsed to and what was reported.
#[derive(Debug)]
struct CachedFile {
    bytes: Vec<u8>,
    parsed: ParsedFile,
    diagnostics: Vec<Diagnostic>,
}

/// The payload schema checks of one event type file's versions, and the settings of other
/// files they depended on.
#[derive(Debug)]
struct CachedChecks {
    policy: PayloadPolicy,
    content: ContentModel,
    checked: Vec<Checked>,
}

impl LoadCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the parse of the file at `display` of `kind`, when an earlier load parsed the
    /// same `bytes` there.
    pub(crate) fn take_file(
        &self,
        display: &str,
        kind: FileKind,
        bytes: &[u8],
    ) -> Option<(ParsedFile, Vec<Diagnostic>)> {
        let entry = {
            let mut files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
            files.remove(&(display.to_owned(), kind))
        }?;
        if entry.bytes != bytes {
            return None;
        }
        let mut reused = self.reused.lock().unwrap_or_else(PoisonError::into_inner);
        reused.insert(display.to_owned());
        Some((entry.parsed, entry.diagnostics))
    }

    /// Remembers what `bytes` at `display` of `kind` parsed to.
    pub(crate) fn remember_file(
        &self,
        display: &str,
        kind: FileKind,
        bytes: Vec<u8>,
        parsed: &ParsedFile,
        diagnostics: &[Diagnostic],
    ) {
        let entry = CachedFile {
            bytes,
            parsed: parsed.clone(),
            diagnostics: diagnostics.to_vec(),
        };
        let mut files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        files.insert((display.to_owned(), kind), entry);
    }

    /// Takes the checks of the versions of the event type file at `display`, when this load
    /// took that file from the cache and an earlier load checked it under an equal `policy`
    /// and `content`.
    pub(crate) fn take_checks(
        &self,
        display: &str,
        policy: &PayloadPolicy,
        content: ContentModel,
    ) -> Option<Vec<Checked>> {
        let reused = {
            let mut reused = self.reused.lock().unwrap_or_else(PoisonError::into_inner);
            reused.remove(display)
        };
        let entry = {
            let mut checks = self.checks.lock().unwrap_or_else(PoisonError::into_inner);
            checks.remove(display)
        }?;
        (reused && entry.content == content && entry.policy == *policy).then_some(entry.checked)
    }

    /// Remembers the checks of the versions of the event type file at `display`.
    pub(crate) fn remember_checks(
        &self,
        display: &str,
        policy: &PayloadPolicy,
        content: ContentModel,
        checked: &[Checked],
    ) {
        let entry = CachedChecks {
            policy: policy.clone(),
            content,
            checked: checked.to_vec(),
        };
        let mut checks = self.checks.lock().unwrap_or_else(PoisonError::into_inner);
        checks.insert(display.to_owned(), entry);
    }
}
