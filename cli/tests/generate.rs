//! `evc generate`: fresh output on a clean checkout, only changed files written, drift reported
//! with the command that fixes it.

mod support;

use std::fs;
use std::path::Path;
use std::process::{Command, Output};
use support::{copy_dir, repository};

fn evc(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_evc"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("evc runs")
}

/// A temporary root holding copies of the contracts and of everything generated from them.
fn generated_copy() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("temp dir");
    for dir in ["contracts", "generated", "asyncapi"] {
        copy_dir(&repository().join(dir), &root.path().join(dir));
    }
    root
}

#[test]
fn the_checked_in_output_is_fresh() {
    let output = evc(&["generate", "--check"], &repository());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.starts_with("ok: "), "{stdout}");
}

#[test]
fn generate_on_fresh_output_writes_nothing() {
    let root = generated_copy();
    let before = fs::metadata(root.path().join("generated/src/contracts.rs"))
        .and_then(|m| m.modified())
        .expect("mtime");
    let output = evc(&["generate"], root.path());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("ok: 0 files changed"), "{stdout}");
    let after = fs::metadata(root.path().join("generated/src/contracts.rs"))
        .and_then(|m| m.modified())
        .expect("mtime");
    assert_eq!(before, after, "an unchanged file was rewritten");
}

#[test]
fn tampered_outputs_are_named_and_regenerated() {
    let root = generated_copy();
    let contracts_rs = root.path().join("generated/src/contracts.rs");
    let text = fs::read_to_string(&contracts_rs).expect("generated items");
    fs::write(
        &contracts_rs,
        text.replacen("pub struct", "pub(crate) struct", 1),
    )
    .expect("tamper");
    let asyncapi = root.path().join("asyncapi/asyncapi.yaml");
    fs::write(&asyncapi, "asyncapi: 3.0.0\n").expect("tamper");
    fs::remove_file(root.path().join("generated/registry.json")).expect("remove");

    let output = evc(&["generate", "--check"], root.path());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(100), "{stdout}");
    assert!(
        stdout.contains("stale: generated/src/contracts.rs"),
        "{stdout}"
    );
    assert!(stdout.contains("stale: asyncapi/asyncapi.yaml"), "{stdout}");
    assert!(
        stdout.contains("missing: generated/registry.json"),
        "{stdout}"
    );
    assert!(stdout.contains("run `evc generate`"), "{stdout}");

    let output = evc(&["generate"], root.path());
    assert_eq!(output.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("ok: 3 files changed"), "{stdout}");
    assert_eq!(
        evc(&["generate", "--check"], root.path()).status.code(),
        Some(0)
    );
}

#[test]
fn invalid_contracts_generate_nothing() {
    let root = generated_copy();
    let event = root.path().join("contracts/events/iu.born.yaml");
    let text = fs::read_to_string(&event).expect("event");
    fs::write(&event, text.replace("producer_class:", "producer_klass:")).expect("break");
    let output = evc(&["generate"], root.path());
    assert_eq!(output.status.code(), Some(100));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("UNKNOWN_KEY"), "{stdout}");
    assert!(stdout.contains("nothing was generated"), "{stdout}");
}
