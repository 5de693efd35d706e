//! Generated output for each fixture contract set, pinned.
//!
//! A fixture set is `fixtures/base/` with `fixtures/generate/<case>/` laid over it. The Rust
//! output is pinned as a real source file, `tests/generated/<case>.rs`, which the
//! `evc-generated-fixtures` crate compiles (so every Rust snapshot is known to build); the
//! manifest, SQL and AsyncAPI outputs are insta snapshots. Set `EVC_BLESS=1` to rewrite the Rust
//! files after reviewing a change.

mod support;

use std::fs;
use std::path::{Path, PathBuf};

use evc_codegen::ContractSet;
use evc_codegen::emit::{self, Layout};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn cases() -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = fs::read_dir(fixtures().join("generate"))
        .expect("generate fixtures")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.is_dir())
        .collect();
    cases.sort();
    cases
}

#[test]
fn every_fixture_set_generates_its_pinned_output() {
    let cases = cases();
    assert!(cases.len() >= 10, "only {} fixture sets", cases.len());
    let bless = std::env::var_os("EVC_BLESS").is_some();
    let mut stale = Vec::new();
    for case in &cases {
        let name = case
            .file_name()
            .and_then(|n| n.to_str())
            .expect("name")
            .to_owned();
        let dir = tempfile::tempdir().expect("temp dir");
        support::copy_fixture(&fixtures().join("base"), dir.path());
        support::copy_fixture(case, dir.path());
        let loaded =
            ContractSet::load(dir.path()).unwrap_or_else(|error| panic!("{name}: {error}"));
        let artifacts = emit::render_all(&loaded.contracts, &Layout::default())
            .unwrap_or_else(|error| panic!("{name}: {error}"));
        let text_of = |suffix: &str| -> String {
            artifacts
                .iter()
                .filter(|a| a.path.to_string_lossy().ends_with(suffix))
                .map(|a| format!("=== {}\n{}", a.path.display(), a.contents))
                .collect::<Vec<_>>()
                .join("\n")
        };

        let rust = artifacts
            .iter()
            .find(|a| a.path.ends_with("src/contracts.rs"))
            .expect("a Rust artifact");
        let pinned =
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/generated/{name}.rs"));
        if bless {
            fs::write(&pinned, &rust.contents).expect("write pinned Rust");
        } else if fs::read_to_string(&pinned).ok().as_deref() != Some(rust.contents.as_str()) {
            stale.push(name.clone());
        }

        insta::with_settings!({ snapshot_suffix => name.clone(), prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!("manifest", text_of("registry.json"));
            insta::assert_snapshot!("sql", text_of(".sql"));
            insta::assert_snapshot!("asyncapi", text_of(".yaml"));
        });
    }
    assert!(
        stale.is_empty(),
        "generated Rust differs from tests/generated/ for {stale:?}; review and rerun with EVC_BLESS=1"
    );
}

#[test]
fn the_compiled_fixture_crate_includes_every_case() {
    let lib = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/generated-fixtures/src/lib.rs"),
    )
    .expect("fixture crate");
    for case in cases() {
        let name = case
            .file_name()
            .and_then(|n| n.to_str())
            .expect("name")
            .to_owned();
        assert!(
            lib.contains(&format!("pub mod {name};")),
            "tests/generated-fixtures does not compile {name}"
        );
    }
}
