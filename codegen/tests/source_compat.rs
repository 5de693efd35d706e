//! Source compatibility of the generated Rust across a minor version (docs/codegen.md,
//! "Building a payload").
//!
//! `fixtures/evolution/` holds two states of one contract: `order.placed` up to 1.1.0, and the
//! same with a 1.2.0 that only adds optional properties (at the top, inside a required nested
//! object, and a new optional object). The same producer source, which builds 1.1.0 payloads
//! with the generated constructors and setters, must compile against the Rust generated from
//! both states; a producer that uses a struct literal must not compile even against 1.1.0, the
//! shape it was written for, because that literal is what a new field would break. Each
//! producer is compiled (and its test run: the payload serializes the same under both states)
//! as the `evolution` test target of `tests/generated-fixtures` against the
//! state in the crate's `evolution` module (`support/fixture_crate.rs`).

mod support;

#[path = "support/fixture_crate.rs"]
mod fixture_crate;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use evc_codegen::ContractSet;
use evc_codegen::compat;
use evc_codegen::emit::{self, Layout};

const OLD: &str = "1.1.0";
const NEW: &str = "1.2.0";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The base fixture with `evolution/<state>/` laid over it.
fn load(state: &str) -> ContractSet {
    let dir = tempfile::tempdir().expect("temp dir");
    support::copy_fixture(&fixtures().join("base"), dir.path());
    support::copy_fixture(&fixtures().join("evolution").join(state), dir.path());
    ContractSet::load(dir.path())
        .unwrap_or_else(|error| panic!("{state}: {error}"))
        .contracts
}

/// The generated Rust items of `state`.
fn rust_of(state: &str) -> String {
    let artifacts =
        emit::render_all(&load(state), &Layout::default()).expect("the contracts generate");
    artifacts
        .into_iter()
        .find(|artifact| artifact.path.ends_with("src/contracts.rs"))
        .expect("the Rust items")
        .contents
}

/// Compiles `fixtures/evolution/<producer>` against the Rust of `state` and runs its tests.
/// `test` names the files' folder, so tests running at once never write a file another one's
/// build reads.
fn compile_and_run(test: &str, state: &str, producer: &str) -> Output {
    let contracts = fixture_crate::workspace_root()
        .join("target/evc-evolution")
        .join(test)
        .join(format!("{state}.rs"));
    fs::create_dir_all(contracts.parent().expect("a parent")).expect("create the folder");
    fs::write(&contracts, rust_of(state)).expect("write the generated Rust");
    let producer = fixtures().join("evolution").join(producer);
    fixture_crate::cargo_test(
        "evolution",
        &["--test", "evolution"],
        &[
            ("EVC_EVOLUTION_CONTRACTS", &contracts),
            ("EVC_EVOLUTION_PRODUCER", &producer),
        ],
    )
}

#[test]
fn the_new_version_is_a_compatible_minor_change() {
    let report = compat::compare(&load(OLD), &load(NEW), OLD, NEW);
    assert!(report.passed(), "{report:#?}");
    let summary = report
        .events
        .iter()
        .find(|summary| summary.event == "order.placed")
        .expect("order.placed is compared");
    assert_eq!(summary.mode, "full");
    assert_eq!(
        summary.suggested_bump.as_deref(),
        Some("minor"),
        "{report:#?}"
    );
}

#[test]
fn the_new_version_adds_fields_to_the_generated_structs() {
    let old = rust_of(OLD);
    let new = rust_of(NEW);
    for added in [
        "pub gift_wrap: ::std::option::Option<bool>",
        "pub region: ::std::option::Option<::std::string::String>",
        "pub delivery: ::std::option::Option<OrderPlacedV1Delivery>",
        "pub struct OrderPlacedV1Delivery",
    ] {
        assert!(!old.contains(added), "{OLD} already has `{added}`");
        assert!(new.contains(added), "{NEW} lacks `{added}`");
    }
}

#[test]
fn one_producer_compiles_against_the_old_and_the_new_version() {
    for state in [OLD, NEW] {
        let output = compile_and_run("producer", state, "producer.rs");
        assert!(
            output.status.success(),
            "producer.rs does not compile or its test fails against the Rust of {state}:\n{}\n{}",
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        );
    }
}

#[test]
fn a_struct_literal_of_a_generated_payload_does_not_compile() {
    let output = compile_and_run("literal", OLD, "literal_producer.rs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "a struct literal of a generated payload compiled"
    );
    // E0639: "cannot create non-exhaustive struct using struct expression", for both structs;
    // no field is missing (E0063), so `non_exhaustive` is the only reason.
    assert_eq!(stderr.matches("error[E0639]").count(), 2, "{stderr}");
    assert!(!stderr.contains("E0063"), "{stderr}");
}
