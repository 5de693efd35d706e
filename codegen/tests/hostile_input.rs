//! The loader and the diagnostic renderer on hostile contract directories: files outside the
//! contracts, special files, text that would forge CI annotations or terminal sequences, lines
//! long enough to break the renderer, and numbers no JSON Schema tool can hold exactly.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use evc_codegen::diagnostic::render_human;
use evc_codegen::{ContractSet, Diagnostic, LoadError, Sources};

/// Written in files outside the contract directory; must never appear in any output.
const MARKER: &str = "evc_leak_marker_3b9c";

fn base() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let contracts = dir.path().join("contracts");
    fs::create_dir(&contracts).expect("mkdir");
    support::copy_fixture(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/base"),
        &contracts,
    );
    dir
}

fn contracts(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("contracts")
}

/// Loads `dir` on another thread, failing instead of hanging when the load blocks.
fn load(dir: &Path) -> (Vec<Diagnostic>, Sources) {
    let (sender, receiver) = mpsc::channel();
    let dir = dir.to_owned();
    std::thread::spawn(move || {
        let _ = sender.send(ContractSet::load(&dir));
    });
    let result = receiver
        .recv_timeout(Duration::from_secs(60))
        .expect("the load returns instead of blocking");
    match result {
        Ok(loaded) => (loaded.warnings, loaded.contracts.sources),
        Err(LoadError::Invalid {
            diagnostics,
            sources,
        }) => (diagnostics, sources),
        Err(other) => panic!("the load failed as a whole: {other}"),
    }
}

/// Every way the diagnostics are shown to people or tools.
fn every_rendering(diagnostics: &[Diagnostic], sources: &Sources) -> String {
    let mut all = render_human(diagnostics, sources, false);
    all.push_str(&render_human(diagnostics, sources, true));
    for diagnostic in diagnostics {
        all.push_str(&diagnostic.to_short_string());
        all.push_str(&serde_json::to_string(diagnostic).expect("JSON"));
    }
    for file in sources.iter() {
        all.push_str(file.text());
    }
    all
}

fn rule_of<'a>(diagnostics: &'a [Diagnostic], file: &str) -> Vec<&'a str> {
    diagnostics
        .iter()
        .filter(|d| d.location.file == file)
        .map(|d| d.rule.id())
        .collect()
}

#[cfg(unix)]
#[test]
fn files_resolving_outside_the_contracts_are_refused_unread() {
    let dir = base();
    let root = contracts(&dir);
    let secret = dir.path().join("secret.yaml");
    fs::write(&secret, format!("{MARKER}: 1\n")).expect("write");
    std::os::unix::fs::symlink(&secret, root.join("events/leak.event.yaml")).expect("symlink");
    // A relative link that climbs out counts the same as an absolute one.
    std::os::unix::fs::symlink("../../secret.yaml", root.join("consumers/leak.yaml"))
        .expect("symlink");
    fs::remove_file(root.join("topics.yaml")).expect("remove");
    std::os::unix::fs::symlink(&secret, root.join("topics.yaml")).expect("symlink");

    let (diagnostics, sources) = load(&root);
    for file in [
        "events/leak.event.yaml",
        "consumers/leak.yaml",
        "topics.yaml",
    ] {
        assert_eq!(
            rule_of(&diagnostics, file),
            ["UNSAFE_FILE"],
            "{diagnostics:#?}"
        );
    }
    let all = every_rendering(&diagnostics, &sources);
    assert!(!all.contains(MARKER), "{all}");
    let unsafe_file = diagnostics
        .iter()
        .find(|d| d.rule.id() == "UNSAFE_FILE")
        .expect("a finding");
    assert_eq!(
        (unsafe_file.location.line, unsafe_file.location.column),
        (1, 1)
    );
    assert!(!unsafe_file.fix.is_empty());
}

#[cfg(unix)]
#[test]
fn a_symlink_resolving_inside_the_contracts_is_read() {
    let dir = base();
    let root = contracts(&dir);
    fs::rename(
        root.join("events/job.failed.yaml"),
        root.join(".job.failed.real"),
    )
    .expect("move");
    std::os::unix::fs::symlink("../.job.failed.real", root.join("events/job.failed.yaml"))
        .expect("symlink");
    let (diagnostics, _) = load(&root);
    assert!(diagnostics.is_empty(), "{diagnostics:#?}");
}

#[cfg(unix)]
#[test]
fn a_symlink_to_a_folder_a_dangling_one_and_a_loop_are_findings() {
    let dir = base();
    let root = contracts(&dir);
    std::os::unix::fs::symlink("../consumers", root.join("events/dir.event.yaml"))
        .expect("symlink");
    std::os::unix::fs::symlink("nowhere.yaml", root.join("events/dangling.event.yaml"))
        .expect("symlink");
    std::os::unix::fs::symlink("loop.event.yaml", root.join("events/loop.event.yaml"))
        .expect("symlink");
    // A folder where a settings file belongs is a mistake, reported as unreadable.
    fs::remove_file(root.join("topics.yaml")).expect("remove");
    fs::create_dir(root.join("topics.yaml")).expect("mkdir");
    let (diagnostics, _) = load(&root);
    assert_eq!(rule_of(&diagnostics, "topics.yaml"), ["FILE_UNREADABLE"]);
    assert!(
        !rule_of(&diagnostics, "events/dir.event.yaml").is_empty(),
        "{diagnostics:#?}"
    );
    assert_eq!(
        rule_of(&diagnostics, "events/dangling.event.yaml"),
        ["FILE_UNREADABLE"]
    );
    assert_eq!(
        rule_of(&diagnostics, "events/loop.event.yaml"),
        ["FILE_UNREADABLE"]
    );
}

#[cfg(unix)]
#[test]
fn an_events_folder_linked_outside_is_refused_without_listing_it() {
    let dir = base();
    let root = contracts(&dir);
    let outside = dir.path().join("outside");
    fs::create_dir(&outside).expect("mkdir");
    fs::write(outside.join(format!("{MARKER}.yaml")), "event: a.b\n").expect("write");
    fs::remove_dir_all(root.join("events")).expect("remove");
    std::os::unix::fs::symlink(&outside, root.join("events")).expect("symlink");
    let (diagnostics, sources) = load(&root);
    assert_eq!(
        rule_of(&diagnostics, "events"),
        ["UNSAFE_FILE"],
        "{diagnostics:#?}"
    );
    let all = every_rendering(&diagnostics, &sources);
    assert!(!all.contains(MARKER), "{all}");
}

#[cfg(unix)]
#[test]
fn a_fifo_is_refused_without_blocking() {
    let dir = base();
    let root = contracts(&dir);
    let status = std::process::Command::new("mkfifo")
        .arg(root.join("events/pipe.event.yaml"))
        .status()
        .expect("mkfifo runs");
    assert!(status.success());
    let (diagnostics, _) = load(&root);
    assert_eq!(
        rule_of(&diagnostics, "events/pipe.event.yaml"),
        ["UNSAFE_FILE"],
        "{diagnostics:#?}"
    );
}

#[test]
fn rendered_diagnostics_escape_line_feeds_esc_and_bel() {
    let dir = base();
    let root = contracts(&dir);
    let file = root.join("consumers/audit.yaml");
    let original = fs::read_to_string(&file).expect("read");
    fs::write(
        &file,
        format!("{original}\"x\\n::error file=forged.yaml::forged\\e[2J\\a\": 1\n"),
    )
    .expect("write");
    let (diagnostics, sources) = load(&root);
    assert!(diagnostics.iter().any(|d| d.rule.id() == "UNKNOWN_KEY"));
    for color in [false, true] {
        let text = render_human(&diagnostics, &sources, color);
        assert!(text.contains("forged"), "{text}");
        assert!(!text.contains('\u{7}'), "{text}");
        if !color {
            assert!(!text.contains('\u{1b}'), "{text}");
        }
        assert!(
            text.lines()
                .all(|line| !line.trim_start().starts_with("::error")),
            "{text}"
        );
    }
    for diagnostic in &diagnostics {
        let short = diagnostic.to_short_string();
        assert!(
            !short.contains('\u{1b}') && !short.contains('\u{7}'),
            "{short}"
        );
        assert!(
            short
                .lines()
                .all(|line| !line.trim_start().starts_with("::error")),
            "{short}"
        );
    }
}

#[test]
fn a_finding_past_column_65535_renders_a_window_of_its_line() {
    let dir = base();
    let root = contracts(&dir);
    let file = root.join("events/job.failed.yaml");
    let original = fs::read_to_string(&file).expect("read");
    // Distinct keys, then a repeat of the first: the duplicate is found at the end.
    let mut wide = String::from("x-wide: {");
    for index in 0..8_000 {
        wide.push_str(&format!("k{index}: 1, "));
    }
    wide.push_str("k0: 1}\n");
    fs::write(&file, format!("{wide}{original}")).expect("write");
    let (diagnostics, sources) = load(&root);
    let duplicate = diagnostics
        .iter()
        .find(|d| d.rule.id() == "YAML_DUPLICATE_KEY")
        .expect("the duplicate key is found");
    assert!(duplicate.location.column > 65_535, "{duplicate:?}");
    let text = render_human(&diagnostics, &sources, false);
    assert!(text.contains('…'), "{text}");
    assert!(text.lines().all(|line| line.chars().count() < 1_000));
}

#[test]
fn integer_keywords_refuse_numbers_json_schema_tools_cannot_hold() {
    let dir = base();
    let root = contracts(&dir);
    let file = root.join("events/job.failed.yaml");
    let original = fs::read_to_string(&file).expect("read");
    let edited = original.replace(
        "error_code: {type: string}",
        "error_code: {type: string, maxLength: 1e38, minLength: 2}\n        \
         attempts: {type: integer, maximum: 9007199254740993, minimum: 0.5, multipleOf: 1.5}\n        \
         tags: {type: array, items: {type: string}, maxItems: 18446744073709551616}\n        \
         fine: {type: integer, maximum: 9007199254740992, minimum: -5, multipleOf: 2}\n        \
         ratio: {type: number, maximum: 1e300, multipleOf: 0.5}",
    );
    assert_ne!(original, edited);
    fs::write(&file, &edited).expect("write");
    let (diagnostics, _) = load(&root);
    let found: Vec<(String, u32, u32)> = diagnostics
        .iter()
        .filter(|d| d.message.contains("exactly"))
        .map(|d| (d.rule.id().to_owned(), d.location.line, d.location.column))
        .collect();
    let position = |needle: &str| {
        let offset = edited.find(needle).expect(needle);
        let line = edited[..offset].matches('\n').count() + 1;
        let column = offset - edited[..offset].rfind('\n').map_or(0, |i| i + 1) + 1;
        (line as u32, column as u32)
    };
    let mut expected: Vec<(String, u32, u32)> = [
        "maxLength: 1e38",
        "maximum: 9007199254740993",
        "minimum: 0.5",
        "multipleOf: 1.5",
        "maxItems: 18446744073709551616",
    ]
    .iter()
    .map(|needle| {
        let (line, column) = position(needle);
        ("INVALID_JSON_SCHEMA".to_owned(), line, column)
    })
    .collect();
    expected.sort();
    let mut found_sorted = found.clone();
    found_sorted.sort();
    assert_eq!(found_sorted, expected, "{diagnostics:#?}");
}

#[test]
fn a_directory_of_more_than_max_files_is_read_only_up_to_the_cap() {
    let dir = base();
    let root = contracts(&dir);
    let consumers = fs::read_dir(root.join("consumers"))
        .expect("consumers")
        .count();
    let events = fs::read_dir(root.join("events")).expect("events").count();
    let extra = evc_codegen::loader::MAX_FILES + 5 - consumers - events;
    for index in 0..extra {
        fs::write(
            root.join(format!("events/e{index:05}.many.yaml")),
            "description: x\n",
        )
        .expect("write");
    }
    let parsed = evc_codegen::loader::read_dir(&root).expect("reads");
    assert_eq!(parsed.files.len(), evc_codegen::loader::MAX_FILES);
    let capped: Vec<&Diagnostic> = parsed
        .diagnostics
        .iter()
        .filter(|d| d.rule.id() == "CONTRACT_DIR_TOO_LARGE")
        .collect();
    assert_eq!(capped.len(), 1, "{capped:#?}");
}

#[cfg(unix)]
#[test]
fn a_file_name_that_is_not_utf8_is_reported_not_panicked_on() {
    use std::os::unix::ffi::OsStrExt;
    let dir = base();
    let root = contracts(&dir);
    let name = std::ffi::OsStr::from_bytes(b"bad\xff\x1b.event.yaml");
    fs::write(root.join("events").join(name), "event: bad.event\n").expect("write");
    let (diagnostics, sources) = load(&root);
    let named: Vec<&Diagnostic> = diagnostics
        .iter()
        .filter(|d| d.location.file.starts_with("events/bad"))
        .collect();
    assert!(!named.is_empty(), "{diagnostics:#?}");
    let text = render_human(&diagnostics, &sources, false);
    assert!(
        text.contains("events/bad\u{fffd}\\u{1b}.event.yaml"),
        "{text}"
    );
}

#[test]
fn an_asyncapi_document_is_read_under_its_own_larger_cap() {
    use evc_codegen::loader::{MAX_FILE_BYTES, ReadError, read_capped, read_capped_to};
    use evc_codegen::yaml::MAX_DOCUMENT_BYTES;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("asyncapi.yaml");
    // A document for a large contract set: over a contract file's cap, under a document's.
    fs::write(&path, "x".repeat(MAX_FILE_BYTES + 1)).expect("write");
    let refused = read_capped(&path, None).expect_err("over a contract file's cap");
    assert!(
        matches!(refused, ReadError::TooLarge { max, .. } if max == MAX_FILE_BYTES),
        "{refused:?}"
    );
    let bytes = read_capped_to(&path, None, MAX_DOCUMENT_BYTES).expect("under a document's cap");
    assert_eq!(bytes.len(), MAX_FILE_BYTES + 1);
    fs::write(&path, "x".repeat(MAX_DOCUMENT_BYTES + 1)).expect("write");
    let refused = read_capped_to(&path, None, MAX_DOCUMENT_BYTES).expect_err("over the cap");
    assert!(
        refused
            .to_string()
            .contains(&MAX_DOCUMENT_BYTES.to_string()),
        "{refused}"
    );
}
