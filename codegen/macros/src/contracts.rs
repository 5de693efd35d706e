//! Loading contracts from a macro: the directory, a per-process cache, and file tracking.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use evc_codegen::{ContractSet, LoadError};
use proc_macro2::TokenStream;
use quote::quote;

/// Environment variable that overrides where the contracts are.
pub(crate) const CONTRACTS_ENV: &str = "EVC_CONTRACTS_DIR";

/// The contract directory: the attribute's path (relative to the crate), else
/// `$EVC_CONTRACTS_DIR`, else `<crate>/contracts`.
pub(crate) fn directory(attribute: Option<&str>) -> PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(PathBuf::new, PathBuf::from);
    match (attribute, std::env::var_os(CONTRACTS_ENV)) {
        (Some(path), _) => manifest.join(path),
        (None, Some(dir)) => manifest.join(dir),
        (None, None) => manifest.join("contracts"),
    }
}

type Cached = Arc<Result<ContractSet, String>>;

/// Loads the contracts of `dir`, once per directory per compiler process.
pub(crate) fn load(dir: &Path) -> Cached {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, Cached>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    let mut cache = match cache.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    cache
        .entry(dir.to_owned())
        .or_insert_with(|| {
            Arc::new(ContractSet::load(dir).map(|loaded| loaded.contracts).map_err(|error| {
                let detail = match &error {
                    LoadError::Invalid { diagnostics, .. } => diagnostics
                        .iter()
                        .filter(|d| d.is_error())
                        .take(3)
                        .map(|d| format!("\n  {}", d.to_short_string().lines().next().unwrap_or_default()))
                        .collect::<String>(),
                    _ => String::new(),
                };
                format!(
                    "cannot load the contracts in `{}`: {error}{detail}\nrun `evc check {}` to see every problem",
                    dir.display(),
                    dir.display()
                )
            }))
        })
        .clone()
}

/// `include_bytes!` of every contract file, so cargo rebuilds the crate when one changes
/// (proc macros have no stable way to declare the files they read).
///
/// Emitted by the first expansion that reads `dir` in this compiler process (one process
/// compiles one crate): once per crate is enough for cargo's dependency tracking, and 200
/// derives times 200 files would cost more than the checks themselves.
pub(crate) fn tracking(dir: &Path, set: Option<&ContractSet>) -> TokenStream {
    static TRACKED: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    let mut tracked = match TRACKED.get_or_init(Mutex::default).lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    if set.is_none() || !tracked.insert(dir.to_owned()) {
        return TokenStream::new();
    }
    let mut files: Vec<String> = match set {
        Some(set) => set
            .sources
            .iter()
            .map(|file| dir.join(file.path()).display().to_string())
            .collect(),
        None => Vec::new(),
    };
    files.sort();
    quote! {
        const _: () = {
            #(const _: &[u8] = include_bytes!(#files);)*
        };
    }
}
