//! Compiles generated Rust as part of `tests/generated-fixtures`, whose features include files
//! named by environment variables (`property`, `evolution`).
//!
//! Compiling one crate per case outside the workspace would build every dependency again with
//! other features; this builds what `cargo test --workspace` builds, in the workspace's own
//! target directory, so dependencies keep the features (dev features included) they were built
//! with and only the fixture crate and its dependents are compiled.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root (the parent of this crate).
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_owned()
}

/// `cargo test --workspace` with the fixture crate's `feature` on, `env` set and `args` after
/// cargo's own (`--no-run` to only build, `--test NAME` to build and run one target); rustc's
/// messages are in the short format on stderr.
pub(crate) fn cargo_test(feature: &str, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let feature = format!("evc-generated-fixtures/{feature}");
    let mut command = Command::new(cargo);
    command
        .current_dir(workspace_root())
        .args([
            "test",
            "--offline",
            "--quiet",
            "-j",
            "2",
            "--workspace",
            "--features",
            &feature,
            "--message-format",
            "short",
        ])
        .args(args);
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("run cargo")
}
