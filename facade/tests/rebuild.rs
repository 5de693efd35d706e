//! Editing a contract re-runs the macros: a crate whose derived struct no longer matches stops
//! building, and builds again once the contract is reverted. Builds a temporary crate with cargo
//! (offline, in a target directory kept between runs).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

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

fn write_crate(root: &Path) {
    let facade = repository()
        .join("facade")
        .canonicalize()
        .expect("facade path");
    fs::create_dir_all(root.join("src")).expect("src");
    fs::write(
        root.join("Cargo.toml"),
        format!(
            "[package]\nname = \"evc-rebuild-probe\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
             [dependencies]\nevc = {{ path = {:?} }}\nserde = {{ version = \"1\", features = [\"derive\"] }}\n\
             uuid = {{ version = \"1\", features = [\"serde\"] }}\n\n[workspace]\n",
            facade.display().to_string()
        ),
    )
    .expect("manifest");
    fs::write(
        root.join("src/lib.rs"),
        "//! Probe.\n\n/// A failure.\n#[derive(evc::Event, serde::Serialize)]\n#[evc(event = \"job.failed\", version = \"1.0.0\")]\n\
         pub struct Failed {\n    /// The job.\n    pub job_id: uuid::Uuid,\n    /// Why.\n    pub error_code: Option<String>,\n}\n",
    )
    .expect("lib.rs");
    let contracts = root.join("contracts");
    fs::create_dir_all(contracts.join("events")).expect("events");
    fs::write(
        contracts.join("evc.yaml"),
        "project: probe\npayload_policy:\n  denied_keys: [body_text]\n  credential_key_names: [password]\n",
    )
    .expect("evc.yaml");
    fs::write(contracts.join("events/job.failed.yaml"), EVENT).expect("event");
}

fn cargo_check(root: &Path) -> (bool, String) {
    let output = Command::new(env!("CARGO"))
        .args(["check", "--offline", "--lib"])
        .env(
            "CARGO_TARGET_DIR",
            repository().join("target/nested-builds"),
        )
        // This workspace's `.cargo/config.toml` points the macros at its own contracts; the
        // probe crate must read its own.
        .env_remove("EVC_CONTRACTS_DIR")
        .current_dir(root)
        .output()
        .expect("cargo runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn editing_a_contract_breaks_and_reverting_it_fixes_the_build() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_crate(dir.path());
    let (ok, stderr) = cargo_check(dir.path());
    assert!(ok, "the probe crate does not build: {stderr}");

    let event = dir.path().join("contracts/events/job.failed.yaml");
    fs::write(
        &event,
        EVENT.replace("required: [job_id]", "required: [job_id, error_code]"),
    )
    .expect("edit");
    let (ok, stderr) = cargo_check(dir.path());
    assert!(!ok, "the build passed after the contract changed");
    assert!(
        stderr.contains("`error_code` is required and not nullable in job.failed 1.0.0"),
        "{stderr}"
    );

    fs::write(&event, EVENT).expect("revert");
    let (ok, stderr) = cargo_check(dir.path());
    assert!(ok, "the build still fails after reverting: {stderr}");
}
