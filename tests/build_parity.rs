//! Builds that must break when contracts and code disagree, and heal when they agree again:
//!
//! - the root build script refuses to build when the checked-in output drifts from the
//!   contracts, naming the command that fixes it;
//! - editing a contract re-runs the evc macros: a crate whose derived struct no longer matches
//!   stops building, and builds again once the contract is reverted.
//!
//! Both run in one copy of the workspace, with a probe crate added as a member, through
//! `cargo check --workspace --all-targets` in this repository's own target directory. The
//! dependencies are the slow part of a nested build; checked with the same package selection as
//! `cargo clippy --workspace --all-targets` (the CI gate that runs first), they resolve to the same
//! features, so cargo reuses the gate's dependency artifacts and checks only the copy's crates.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_owned()
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for entry in fs::read_dir(from).expect("readable") {
        let entry = entry.expect("entry");
        let name = entry.file_name();
        if name == "target" || name == ".git" {
            continue;
        }
        let target = to.join(&name);
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).expect("copy");
        }
    }
}

/// The probe's contract: one event the probe's struct derives.
const EVENT: &str = "event: job.failed
description: A job failed.
producer_class: job_runner
versions:
  - version: 1.0.0
    schema:
      type: object
      additionalProperties: false
      required: [job_id]
      properties:
        job_id: {type: string, format: uuid}
        error_code: {type: string}
";

/// Adds `probe/`, a crate with its own contracts that derives `evc::Event`, to the workspace
/// copy at `root`.
fn add_probe(root: &Path) {
    let probe = root.join("probe");
    fs::create_dir_all(probe.join("src")).expect("src");
    fs::write(
        probe.join("Cargo.toml"),
        "[package]\nname = \"evc-rebuild-probe\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         [dependencies]\nevc.workspace = true\nserde.workspace = true\n\
         uuid = { workspace = true, features = [\"serde\"] }\n",
    )
    .expect("probe manifest");
    fs::write(
        probe.join("src/lib.rs"),
        "//! Probe.\n\n/// A failure.\n#[derive(evc::Event, serde::Serialize)]\n#[evc(event = \"job.failed\", version = \"1.0.0\", contracts = \"contracts\")]\n\
         pub struct Failed {\n    /// The job.\n    pub job_id: uuid::Uuid,\n    /// Why.\n    pub error_code: Option<String>,\n}\n",
    )
    .expect("lib.rs");
    let contracts = probe.join("contracts");
    fs::create_dir_all(contracts.join("events")).expect("events");
    fs::write(
        contracts.join("evc.yaml"),
        "project: probe\npayload_policy:\n  denied_keys: [body_text]\n  credential_key_names: [password]\n",
    )
    .expect("evc.yaml");
    fs::write(contracts.join("events/job.failed.yaml"), EVENT).expect("event");

    let manifest = root.join("Cargo.toml");
    let text = fs::read_to_string(&manifest).expect("workspace manifest");
    let text = text.replacen("members = [", "members = [\"probe\", ", 1);
    fs::write(&manifest, text).expect("add the probe member");
}

/// The target directory of the `cargo test` running this test (`CARGO_TARGET_TMPDIR` is its
/// `tmp/`), so a custom `CARGO_TARGET_DIR` is honoured too.
fn target_directory() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the tmp dir sits in the target dir")
        .to_owned()
}

/// `cargo check` of the whole copy, with its output.
fn cargo_check(workspace: &Path) -> (bool, String) {
    let output = Command::new(env!("CARGO"))
        .args(["check", "--offline", "--workspace", "--all-targets"])
        // The outer `cargo test` holds no build lock while its tests run, so sharing its
        // target directory cannot deadlock; the copy's crates have their own paths and hashes.
        .env("CARGO_TARGET_DIR", target_directory())
        .current_dir(workspace)
        .output()
        .expect("cargo runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn builds_fail_on_drift_and_on_edited_contracts_and_heal_when_reverted() {
    let copy = tempfile::tempdir().expect("temp dir");
    copy_dir(&repository(), copy.path());
    add_probe(copy.path());
    let (ok, stderr) = cargo_check(copy.path());
    assert!(ok, "the workspace copy does not build: {stderr}");

    // Drift: the checked-in manifest no longer matches the contracts.
    let registry = copy.path().join("generated/registry.json");
    let text = fs::read_to_string(&registry).expect("manifest");
    fs::write(&registry, text.replacen("\"project\"", "\"projekt\"", 1)).expect("tamper");
    let (ok, stderr) = cargo_check(copy.path());
    assert!(!ok, "the build passed with a tampered manifest");
    assert!(
        stderr.contains("stale: generated/registry.json"),
        "{stderr}"
    );
    assert!(stderr.contains("run `cargo evc generate`"), "{stderr}");
    fs::write(&registry, text).expect("restore");

    // An edited contract: the derived struct no longer matches it.
    let event = copy.path().join("probe/contracts/events/job.failed.yaml");
    fs::write(
        &event,
        EVENT.replace("required: [job_id]", "required: [job_id, error_code]"),
    )
    .expect("edit");
    let (ok, stderr) = cargo_check(copy.path());
    assert!(!ok, "the build passed after the contract changed");
    assert!(
        stderr.contains("`error_code` is required and not nullable in job.failed 1.0.0"),
        "{stderr}"
    );

    fs::write(&event, EVENT).expect("revert");
    let (ok, stderr) = cargo_check(copy.path());
    assert!(
        ok,
        "the build still fails after restoring and reverting: {stderr}"
    );
}
