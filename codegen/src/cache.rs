//! Reuse between loads of contract sets that share files.
//!
//! `evc compat` loads the proposed contracts and the published ones, and in a pull request most
//! files are the same on both sides. A [`LoadCache`] given to both loads parses each unchanged
//! file once and checks each unchanged payload schema once. Entries are matched on content,
//! never on a name alone: a parsed file is reused only for equal bytes, a schema check only
//! for an identical schema (key order and number spelling included) under an equal payload
//! policy and content model. What a load reports is the same with or without a cache.
//!
//! Every load keeps a copy of what it parsed and checked, and an entry serves one later load,
//! which takes it instead of copying it: the cache holds about one copy of a set's files and
//! checks until it is dropped.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use serde_json::Value as Json;

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
    checks: Mutex<HashMap<String, CachedChecks>>,
}

/// One file as an earlier load read it: its bytes, what they parsed to and what was reported.
#[derive(Debug)]
struct CachedFile {
    bytes: Vec<u8>,
    parsed: ParsedFile,
    diagnostics: Vec<Diagnostic>,
}

/// The payload schema checks of one event type file's versions, and what they depended on.
#[derive(Debug)]
struct CachedChecks {
    policy: PayloadPolicy,
    content: ContentModel,
    schemas: Vec<Json>,
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
        (entry.bytes == bytes).then_some((entry.parsed, entry.diagnostics))
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

    /// Takes the checks of `schemas` (the versions of the event type file at `display`, in
    /// order), when an earlier load checked equal schemas under an equal `policy` and `content`.
    pub(crate) fn take_checks(
        &self,
        display: &str,
        policy: &PayloadPolicy,
        content: ContentModel,
        schemas: &[&Json],
    ) -> Option<Vec<Checked>> {
        let entry = {
            let mut checks = self.checks.lock().unwrap_or_else(PoisonError::into_inner);
            checks.remove(display)
        }?;
        let same = entry.content == content
            && entry.policy == *policy
            && entry.schemas.len() == schemas.len()
            && entry
                .schemas
                .iter()
                .zip(schemas)
                .all(|(a, b)| identical(a, b));
        same.then_some(entry.checked)
    }

    /// Remembers the checks of the versions of the event type file at `display`.
    pub(crate) fn remember_checks(
        &self,
        display: &str,
        policy: &PayloadPolicy,
        content: ContentModel,
        schemas: &[&Json],
        checked: &[Checked],
    ) {
        let entry = CachedChecks {
            policy: policy.clone(),
            content,
            schemas: schemas.iter().map(|schema| (*schema).clone()).collect(),
            checked: checked.to_vec(),
        };
        let mut checks = self.checks.lock().unwrap_or_else(PoisonError::into_inner);
        checks.insert(display.to_owned(), entry);
    }
}

/// Whether `a` and `b` are the same JSON as written: objects with the same keys in the same
/// order, numbers of the same kind and bits. serde_json's `==` ignores key order (objects keep
/// it in this workspace, and the model shows it) and takes `-0.0` for `0.0`; either would hand
/// one schema's check, translated schema included, to another.
fn identical(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Object(a), Json::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|((key_a, a), (key_b, b))| key_a == key_b && identical(a, b))
        }
        (Json::Array(a), Json::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| identical(a, b))
        }
        (Json::Number(a), Json::Number(b)) => {
            a.as_i64() == b.as_i64()
                && a.as_u64() == b.as_u64()
                && a.as_f64().map(f64::to_bits) == b.as_f64().map(f64::to_bits)
        }
        _ => a == b,
    }
}
