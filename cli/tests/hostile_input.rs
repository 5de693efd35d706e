//! The contract tools run on pull-request heads in CI, so a contract directory is hostile input.
//! Each test here is an attack on the whole binary: reading files outside the contracts, hanging
//! on a FIFO or an endless device, forging CI annotations or terminal sequences, and panicking
//! the diagnostic renderer. Every run has a hard time limit so a hang fails instead of blocking.

mod support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{copy_dir, repository};

/// Generous: a healthy run takes well under a second; this only turns a hang into a failure.
const HARD_LIMIT: Duration = Duration::from_secs(60);

/// Written in files outside the contract directory; must never appear in any output.
const MARKER: &str = "evc_leak_marker_7d1e";

/// Runs `evc` in `cwd`, killing it (and failing the test) if it outlives [`HARD_LIMIT`].
fn evc_in(cwd: &Path, args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_evc"))
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("evc starts");
    // Drain both pipes on threads so a full pipe cannot stall the child.
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr.read_to_end(&mut bytes);
        bytes
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > HARD_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`evc {}` did not finish within {HARD_LIMIT:?}",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

fn evc(args: &[&str]) -> Output {
    evc_in(&repository(), args)
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn path(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// A small valid contract set (the library's base fixture) at `dir/name`.
fn contracts(dir: &Path, name: &str) -> PathBuf {
    let target = dir.join(name);
    copy_dir(&repository().join("codegen/tests/fixtures/base"), &target);
    target
}

/// A file outside the contract directory holding the marker, shaped so that a loader that read
/// it would echo it (an unknown key).
fn secret_file(dir: &Path) -> PathBuf {
    let secret = dir.join("secret.yaml");
    std::fs::write(&secret, format!("{MARKER}: {MARKER}_value\n")).expect("write secret");
    secret
}

fn assert_no_marker(output: &Output) {
    let all = text(output);
    assert!(!all.contains(MARKER), "the outside file leaked:\n{all}");
}

/// No line of the output could be taken for a workflow command, and no raw ESC or BEL byte
/// reaches the terminal.
fn assert_no_forgery(output: &Output) {
    for bytes in [&output.stdout, &output.stderr] {
        assert!(
            !bytes.contains(&0x1b) && !bytes.contains(&0x07),
            "raw ESC or BEL in the output:\n{}",
            String::from_utf8_lossy(bytes)
        );
        let text = String::from_utf8_lossy(bytes);
        for line in text.lines() {
            assert!(
                !line.trim_start().starts_with("::error file=forged"),
                "a forged workflow command:\n{text}"
            );
        }
    }
}

fn assert_no_panic(output: &Output) {
    let all = text(output);
    assert_ne!(output.status.code(), Some(101), "{all}");
    assert!(!all.contains("panicked"), "{all}");
}

#[cfg(unix)]
#[test]
fn symlinks_out_of_the_contracts_are_refused_and_never_echoed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let secret = secret_file(dir.path());
    let head = contracts(dir.path(), "head");
    std::os::unix::fs::symlink(&secret, head.join("events/leak.event.yaml")).expect("symlink");
    std::os::unix::fs::symlink(&secret, head.join("consumers/leak.yaml")).expect("symlink");
    std::fs::remove_file(head.join("evc.yaml")).expect("remove evc.yaml");
    std::os::unix::fs::symlink(&secret, head.join("evc.yaml")).expect("symlink");

    for format in ["text", "json"] {
        let output = evc(&["check", path(&head), "--format", format, "--color", "never"]);
        assert_eq!(output.status.code(), Some(100), "{}", text(&output));
        assert_no_marker(&output);
        let stdout = String::from_utf8_lossy(&output.stdout);
        for file in ["evc.yaml", "events/leak.event.yaml", "consumers/leak.yaml"] {
            assert!(
                stdout.contains(file) && stdout.contains("UNSAFE_FILE"),
                "{file} is not named as unsafe:\n{stdout}"
            );
        }
    }

    // `generate` and both sides of `compat` share the loader.
    let output = evc(&["generate", path(&head), "--check"]);
    assert_eq!(output.status.code(), Some(100), "{}", text(&output));
    assert_no_marker(&output);
    let base = contracts(dir.path(), "base");
    let output = evc(&["compat", path(&head), "--against-dir", path(&base)]);
    assert_eq!(output.status.code(), Some(100), "{}", text(&output));
    assert_no_marker(&output);
    let output = evc(&["compat", path(&base), "--against-dir", path(&head)]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert_no_marker(&output);
    assert!(text(&output).contains("UNSAFE_FILE"), "{}", text(&output));
}

#[cfg(unix)]
#[test]
fn a_symlinked_events_folder_outside_the_contracts_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).expect("mkdir");
    std::fs::write(outside.join(format!("{MARKER}.yaml")), "event: x\n").expect("write");
    let head = contracts(dir.path(), "head");
    std::fs::remove_dir_all(head.join("events")).expect("remove events");
    std::os::unix::fs::symlink(&outside, head.join("events")).expect("symlink");

    let output = evc(&["check", path(&head), "--color", "never"]);
    assert_eq!(output.status.code(), Some(100), "{}", text(&output));
    assert_no_marker(&output);
    assert!(text(&output).contains("UNSAFE_FILE"), "{}", text(&output));
}

#[cfg(unix)]
#[test]
fn a_fifo_in_the_contracts_does_not_hang_check() {
    let dir = tempfile::tempdir().expect("temp dir");
    let head = contracts(dir.path(), "head");
    let status = Command::new("mkfifo")
        .arg(head.join("events/pipe.event.yaml"))
        .status()
        .expect("mkfifo runs");
    assert!(status.success());

    let output = evc(&["check", path(&head), "--color", "never"]);
    assert_eq!(output.status.code(), Some(100), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("events/pipe.event.yaml"), "{stdout}");
    assert!(stdout.contains("UNSAFE_FILE"), "{stdout}");
}

/// A YAML key holding a line feed with a workflow command after it, ESC and BEL.
const HOSTILE_KEY: &str = r#""x\n::error file=forged.yaml,line=1::forged\e[2J\a""#;

#[test]
fn keys_cannot_forge_annotations_or_terminal_sequences_in_check() {
    let dir = tempfile::tempdir().expect("temp dir");
    let head = contracts(dir.path(), "head");
    let file = head.join("consumers/audit.yaml");
    let original = std::fs::read_to_string(&file).expect("read");
    std::fs::write(&file, format!("{original}{HOSTILE_KEY}: 1\n")).expect("write");

    let output = evc(&["check", path(&head), "--color", "never"]);
    assert_eq!(output.status.code(), Some(100), "{}", text(&output));
    assert!(text(&output).contains("UNKNOWN_KEY"), "{}", text(&output));
    assert_no_forgery(&output);

    // JSON keeps the key exactly, escaped by the JSON encoder.
    let output = evc(&["check", path(&head), "--format", "json"]);
    assert_no_forgery(&output);
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let messages: Vec<&str> = document["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .filter_map(|d| d["message"].as_str())
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("x\n::error file=forged.yaml,line=1::forged\u{1b}[2J\u{7}")),
        "{messages:?}"
    );
}

#[test]
fn file_names_cannot_forge_annotations_or_terminal_sequences() {
    let dir = tempfile::tempdir().expect("temp dir");
    let head = contracts(dir.path(), "head");
    let name = "x\n::error file=forged.yaml::forged\u{1b}[2J\u{7}.yaml";
    std::fs::write(head.join("events").join(name), "event: x.y\n").expect("write");
    std::fs::write(head.join(name), "a: 1\n").expect("write");

    let output = evc(&["check", path(&head), "--color", "never"]);
    assert_eq!(output.status.code(), Some(100), "{}", text(&output));
    assert_no_forgery(&output);
    let output = evc(&["generate", path(&head), "--check"]);
    assert_eq!(output.status.code(), Some(100), "{}", text(&output));
    assert_no_forgery(&output);
}

/// `iu.born`-like event whose published 1.0.0 is edited in place in the head: the new
/// required property's name appears in the compat findings.
fn compat_pair_with_hostile_property(dir: &Path) -> (PathBuf, PathBuf) {
    let base = contracts(dir, "base");
    let head = contracts(dir, "head");
    let file = head.join("events/job.failed.yaml");
    let original = std::fs::read_to_string(&file).expect("read");
    let edited = original
        .replace(
            "required: [job_id]",
            &format!("required: [job_id, {HOSTILE_KEY}]"),
        )
        .replace(
            "        error_code: {type: string}",
            &format!(
                "        error_code: {{type: string}}\n        {HOSTILE_KEY}: {{type: string}}"
            ),
        );
    assert_ne!(original, edited);
    std::fs::write(&file, edited).expect("write");
    (base, head)
}

#[test]
fn property_names_cannot_forge_annotations_in_compat() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (base, head) = compat_pair_with_hostile_property(dir.path());
    for format in ["text", "github", "junit"] {
        let output = evc(&[
            "compat",
            path(&head),
            "--against-dir",
            path(&base),
            "--format",
            format,
            "--color",
            "never",
        ]);
        assert_eq!(output.status.code(), Some(100), "{}", text(&output));
        assert!(text(&output).contains("forged"), "{}", text(&output));
        assert_no_forgery(&output);
        if format == "github" {
            // A control character in a property name is refused at load (CONTROL_CHARACTER),
            // and the load report quotes it escaped: no line is a workflow command but ours.
            let stdout = String::from_utf8_lossy(&output.stdout);
            for line in stdout
                .lines()
                .filter(|line| line.trim_start().starts_with("::"))
            {
                assert!(
                    line.starts_with("::error file=")
                        || line.starts_with("::warning file=")
                        || line.starts_with("::notice file="),
                    "{line}"
                );
                assert!(!line.starts_with("::error file=forged"), "{line}");
            }
        }
    }
}

/// An event file whose one long line puts a finding past column 65,535.
fn long_line_contracts(dir: &Path, name: &str) -> PathBuf {
    let head = contracts(dir, name);
    // Distinct keys, then a repeat of the first: the duplicate is found at the end.
    let mut long = String::from("event: job.failed\ndescription: A job failed.\nx-wide: {");
    for index in 0..8_000 {
        long.push_str(&format!("k{index}: 1, "));
    }
    long.push_str("k0: 1}\n");
    let file = head.join("events/job.failed.yaml");
    let original = std::fs::read_to_string(&file).expect("read");
    std::fs::write(
        &file,
        original.replacen("event: job.failed\ndescription: A job failed.\n", &long, 1),
    )
    .expect("write");
    head
}

#[test]
fn a_finding_past_column_65535_does_not_panic_any_command() {
    let dir = tempfile::tempdir().expect("temp dir");
    let head = long_line_contracts(dir.path(), "head");
    let base = contracts(dir.path(), "base");
    for args in [
        vec!["check", path(&head), "--color", "never"],
        vec!["check", path(&head), "--color", "always"],
        vec!["generate", path(&head), "--check"],
        vec![
            "compat",
            path(&head),
            "--against-dir",
            path(&base),
            "--color",
            "never",
        ],
    ] {
        let output = evc(&args);
        assert_no_panic(&output);
        assert_eq!(
            output.status.code(),
            Some(100),
            "{args:?}: {}",
            text(&output)
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains("YAML_DUPLICATE_KEY"), "{args:?}: {stdout}");
        assert!(stdout.contains('…'), "the line is not cut: {args:?}");
        assert!(
            stdout.lines().all(|line| line.chars().count() < 1_000),
            "{args:?}: a line is longer than a screen"
        );
    }
}

#[test]
fn import_refuses_an_endless_device_without_reading_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("out");
    let output = evc(&["import", "asyncapi", "/dev/zero", "--out", path(&out)]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert!(
        text(&output).contains("not a regular file"),
        "{}",
        text(&output)
    );
}

#[cfg(unix)]
#[test]
fn import_refuses_a_fifo_and_an_oversized_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fifo = dir.path().join("doc.yaml");
    let status = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(status.success());
    let out = dir.path().join("out");
    let output = evc(&["import", "asyncapi", path(&fifo), "--out", path(&out)]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert!(
        text(&output).contains("not a regular file"),
        "{}",
        text(&output)
    );

    let big = dir.path().join("big.yaml");
    let file = std::fs::File::create(&big).expect("create");
    file.set_len(64 * 1024 * 1024).expect("sparse file");
    let output = evc(&["import", "asyncapi", path(&big), "--out", path(&out)]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert!(text(&output).contains("bytes"), "{}", text(&output));
}

#[test]
fn import_messages_escape_what_the_document_says() {
    let dir = tempfile::tempdir().expect("temp dir");
    let doc = dir.path().join("doc.yaml");
    std::fs::write(
        &doc,
        format!("asyncapi: 3.0.0\ninfo: {{title: t, version: 1.0.0}}\nchannels:\n  {HOSTILE_KEY}: {{address: a}}\n"),
    )
    .expect("write");
    let output = evc(&[
        "import",
        "asyncapi",
        path(&doc),
        "--out",
        path(&dir.path().join("out")),
    ]);
    assert!(text(&output).contains("forged"), "{}", text(&output));
    assert_no_forgery(&output);
}

#[cfg(unix)]
#[test]
fn an_asyncapi_document_symlinked_outside_the_repository_is_not_read() {
    let dir = tempfile::tempdir().expect("temp dir");
    let secret = secret_file(dir.path());
    let root = dir.path().join("repo");
    let head = contracts(&root, "contracts");
    std::fs::create_dir_all(root.join("asyncapi")).expect("mkdir");
    std::os::unix::fs::symlink(&secret, root.join("asyncapi/asyncapi.yaml")).expect("symlink");
    let output = evc(&["check", path(&head), "--color", "never"]);
    assert_no_marker(&output);
    assert_ne!(output.status.code(), Some(0), "{}", text(&output));
}
