//! The root build script refuses to build when the checked-in output drifts from the contracts,
//! naming the command that fixes it. Builds a copy of the workspace with cargo (offline, in its
//! own target directory, kept between runs so only the first run compiles dependencies).

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

fn cargo_check(workspace: &Path) -> (bool, String) {
    let target = repository().join("target/nested-builds");
    let output = Command::new(env!("CARGO"))
        .args(["check", "--offline", "-p", "evc-reference"])
        .env("CARGO_TARGET_DIR", target)
        .current_dir(workspace)
        .output()
        .expect("cargo runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_build_fails_on_drift_and_names_the_fix() {
    let copy = tempfile::tempdir().expect("temp dir");
    copy_dir(&repository(), copy.path());

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
    let (ok, stderr) = cargo_check(copy.path());
    assert!(ok, "the build failed after restoring: {stderr}");
}
