//! `evc compat` end to end: exit codes, formats, and bases from a directory or a git revision.

mod support;

use std::path::Path;
use std::process::{Command, Output};
use support::{copy_dir, repository};

fn evc_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_evc"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("evc runs")
}

fn evc(args: &[&str]) -> Output {
    evc_in(&repository(), args)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn path(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Two copies of the repository's contracts in a temporary directory: `base` and `head`.
fn two_copies() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    copy_dir(&repository().join("contracts"), &dir.path().join("base"));
    copy_dir(&repository().join("contracts"), &dir.path().join("head"));
    dir
}

/// Narrows the enum of the published `iu.born` 1.0.0 in place.
fn edit_published_version(contracts: &Path) {
    let file = contracts.join("events/iu.born.yaml");
    let text = std::fs::read_to_string(&file).expect("iu.born");
    let edited = text.replacen(
        "enum: [draft, review, active, frozen]",
        "enum: [draft, review, active]",
        1,
    );
    assert_ne!(text, edited, "the contract has the enum to narrow");
    std::fs::write(&file, edited).expect("write");
}

#[test]
fn identical_contracts_are_compatible() {
    let dir = two_copies();
    let output = evc(&[
        "compat",
        path(&dir.path().join("head")),
        "--against-dir",
        path(&dir.path().join("base")),
        "--color",
        "never",
    ]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    let last = text.lines().last().expect("a summary line");
    assert!(last.starts_with("compatible: no findings (dir:"), "{last}");
    assert!(
        text.contains("33 event types compared; none has new versions or findings"),
        "{text}"
    );
}

#[test]
fn a_published_version_edited_in_place_exits_100() {
    let dir = two_copies();
    let head = dir.path().join("head");
    edit_published_version(&head);
    let base = dir.path().join("base");
    let args = |format: &'static str| {
        vec![
            "compat".to_owned(),
            path(&head).to_owned(),
            "--against-dir".to_owned(),
            path(&base).to_owned(),
            "--format".to_owned(),
            format.to_owned(),
            "--color".to_owned(),
            "never".to_owned(),
        ]
    };
    let run = |format: &'static str| {
        let args = args(format);
        evc(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };

    let output = run("text");
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(100), "{text}");
    assert!(
        text.contains("error[VERSION_EDITED_IN_PLACE] iu.born 1.0.0"),
        "{text}"
    );
    assert!(
        text.contains(&format!("--> {}/events/iu.born.yaml:", path(&head))),
        "{text}"
    );
    assert!(
        text.lines()
            .last()
            .expect("summary")
            .starts_with("incompatible: ")
    );

    let output = run("sarif");
    assert_eq!(output.status.code(), Some(100));
    let sarif: serde_json::Value = serde_json::from_slice(&output.stdout).expect("SARIF is JSON");
    assert_eq!(sarif["version"], "2.1.0");
    let results = sarif["runs"][0]["results"].as_array().expect("results");
    assert!(
        results
            .iter()
            .any(|result| result["ruleId"] == "VERSION_EDITED_IN_PLACE"),
        "{sarif:#}"
    );

    let output = run("json");
    assert_eq!(output.status.code(), Some(100));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(json["passed"], false);

    let output = run("github");
    assert_eq!(output.status.code(), Some(100));
    assert!(
        stdout(&output)
            .lines()
            .any(|line| line.starts_with("::error file=")
                && line.contains("VERSION_EDITED_IN_PLACE")),
        "{}",
        stdout(&output)
    );

    let output = run("junit");
    assert_eq!(output.status.code(), Some(100));
    assert!(stdout(&output).contains("<failure "), "{}", stdout(&output));
}

#[test]
fn output_writes_the_report_to_a_file() {
    let dir = two_copies();
    let report = dir.path().join("compat.sarif");
    let output = evc(&[
        "compat",
        path(&dir.path().join("head")),
        "--against-dir",
        path(&dir.path().join("base")),
        "--format",
        "sarif",
        "--output",
        path(&report),
    ]);
    assert_eq!(output.status.code(), Some(0));
    assert!(output.stdout.is_empty(), "{}", stdout(&output));
    let text = std::fs::read_to_string(&report).expect("the report was written");
    let sarif: serde_json::Value = serde_json::from_str(&text).expect("SARIF is JSON");
    assert_eq!(sarif["runs"][0]["results"], serde_json::json!([]));
}

#[test]
fn invalid_proposed_contracts_are_findings_shown_like_check() {
    let dir = two_copies();
    let head = dir.path().join("head");
    let consumer = head.join("consumers/audit.yaml");
    let text = std::fs::read_to_string(&consumer).expect("audit consumer");
    std::fs::write(&consumer, text.replace("handler:", "handlr:")).expect("write");
    let output = evc(&[
        "compat",
        path(&head),
        "--against-dir",
        path(&dir.path().join("base")),
        "--color",
        "never",
    ]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(100), "{text}");
    assert!(text.contains("UNKNOWN_KEY"), "{text}");
    assert!(text.contains("consumers/audit.yaml:"), "{text}");
    assert!(text.contains("nothing was compared"), "{text}");
}

#[test]
fn an_invalid_base_is_a_tool_failure() {
    let dir = two_copies();
    let base = dir.path().join("base");
    std::fs::remove_file(base.join("evc.yaml")).expect("remove");
    let output = evc(&[
        "compat",
        path(&dir.path().join("head")),
        "--against-dir",
        path(&base),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("the base directory"), "{stderr}");
    assert!(
        stderr.contains("cannot load the base directory"),
        "{stderr}"
    );
}

/// Runs git in `dir`, with an identity, and asserts it succeeded.
fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args([
            "-c",
            "user.name=evc tests",
            "-c",
            "user.email=evc@example.invalid",
            "-c",
            "commit.gpgsign=false",
        ])
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[test]
fn the_base_comes_from_git() {
    let repo = tempfile::tempdir().expect("temp dir");
    let root = repo.path();
    git(root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join("README.md"), "before the contracts\n").expect("write");
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "no contracts yet"]);
    copy_dir(&repository().join("contracts"), &root.join("contracts"));
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "contracts"]);
    let published = git(root, &["rev-parse", "HEAD"]);
    git(root, &["checkout", "-q", "-b", "feature"]);
    edit_published_version(&root.join("contracts"));

    // The default base is the merge-base with main: the published contracts.
    let output = evc_in(root, &["compat", "--color", "never"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(100), "{text}");
    assert!(text.contains("error[VERSION_EDITED_IN_PLACE]"), "{text}");
    assert!(
        text.contains("--> contracts/events/iu.born.yaml:"),
        "{text}"
    );
    assert!(
        text.trim_end()
            .ends_with(&format!("(dir:contracts against git:{})", &published[..12])),
        "{text}"
    );

    // Against the commit before the contracts existed, every event type is new.
    let output = evc_in(root, &["compat", "--against", "HEAD~1", "--color", "never"]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("every event type is new"), "{stderr}");

    // An unknown revision is a tool failure that names it.
    let output = evc_in(root, &["compat", "--against", "no-such-rev"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("`no-such-rev`"), "{stderr}");
}

#[test]
fn against_and_against_dir_conflict() {
    let output = evc(&["compat", "--against", "HEAD", "--against-dir", "contracts"]);
    assert_eq!(output.status.code(), Some(2));
}
