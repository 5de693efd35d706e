//! Macro overhead: build time of a crate with 200 structs deriving `evc::Event` (plus serde)
//! against the same structs with serde derives only, measured in the same run and reported as a
//! ratio. Run: `cargo bench -p evc --bench macro_overhead` (a few minutes; needs the crates in
//! the local registry cache, builds offline).
//!
//! Each round touches `src/lib.rs` and rebuilds the crate alone (dependencies stay built in a
//! shared target directory), alternating the two crates so a drifting machine affects both.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const STRUCTS: usize = 200;
const ROUNDS: usize = 7;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn write_crate(root: &Path, name: &str, with_evc: bool) {
    let facade = repository()
        .join("facade")
        .canonicalize()
        .expect("facade path");
    fs::create_dir_all(root.join("src")).expect("src");
    fs::write(
        root.join("Cargo.toml"),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
             [dependencies]\nevc = {{ path = {:?} }}\nserde = {{ version = \"1\", features = [\"derive\"] }}\n\
             uuid = {{ version = \"1\", features = [\"serde\"] }}\n\n[workspace]\n",
            facade.display().to_string()
        ),
    )
    .expect("manifest");
    let mut lib = String::from("#![allow(dead_code)]\n");
    for index in 0..STRUCTS {
        let derive = if with_evc {
            format!(
                "#[derive(evc::Event, serde::Serialize, serde::Deserialize)]\n#[evc(event = \"bench.event_{index:03}\", version = \"1.0.0\")]\n"
            )
        } else {
            "#[derive(serde::Serialize, serde::Deserialize)]\n".to_owned()
        };
        let _ = write!(
            lib,
            "{derive}pub struct Event{index:03} {{\n    pub unit_id: uuid::Uuid,\n    pub state: String,\n    pub count: u32,\n    pub note: Option<String>,\n}}\n\n"
        );
    }
    fs::write(root.join("src/lib.rs"), lib).expect("lib.rs");
    let events = root.join("contracts/events");
    fs::create_dir_all(&events).expect("events");
    fs::write(
        root.join("contracts/evc.yaml"),
        "project: bench\npayload_policy:\n  denied_keys: [body_text]\n  credential_key_names: [password]\n",
    )
    .expect("evc.yaml");
    for index in 0..STRUCTS {
        fs::write(
            events.join(format!("bench.event_{index:03}.yaml")),
            format!(
                "event: bench.event_{index:03}\ndescription: Benchmark event.\nproducer_class: bench\nversions:\n  - version: 1.0.0\n    schema:\n      type: object\n      additionalProperties: false\n      required: [unit_id, state, count]\n      properties:\n        unit_id: {{type: string, format: uuid}}\n        state: {{type: string}}\n        count: {{type: integer, minimum: 0}}\n        note: {{type: string}}\n"
            ),
        )
        .expect("event");
    }
}

fn build(root: &Path, target: &Path) -> Duration {
    let lib = root.join("src/lib.rs");
    let text = fs::read_to_string(&lib).expect("lib.rs");
    fs::write(&lib, text).expect("touch");
    let started = Instant::now();
    let status = Command::new(env!("CARGO"))
        .args(["build", "--offline", "--quiet", "--lib"])
        .env("CARGO_TARGET_DIR", target)
        .env_remove("EVC_CONTRACTS_DIR")
        .current_dir(root)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building {} failed", root.display());
    started.elapsed()
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let target = repository().join("target/macro-overhead");
    let evc_crate = dir.path().join("with_evc");
    let serde_crate = dir.path().join("serde_only");
    write_crate(&evc_crate, "bench_with_evc", true);
    write_crate(&serde_crate, "bench_serde_only", false);
    // Warm up: dependencies, and the first build of each crate.
    build(&evc_crate, &target);
    build(&serde_crate, &target);
    let mut with_evc = Vec::new();
    let mut serde_only = Vec::new();
    let mut ratios = Vec::new();
    for _ in 0..ROUNDS {
        let a = build(&evc_crate, &target);
        let b = build(&serde_crate, &target);
        ratios.push(a.as_secs_f64() / b.as_secs_f64());
        with_evc.push(a);
        serde_only.push(b);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "macro_overhead: {STRUCTS} structs, {ROUNDS} rounds: evc+serde median {:.2?}, serde only median {:.2?}, \
         ratio median {:.2} (min {:.2}, max {:.2})",
        median(with_evc),
        median(serde_only),
        ratios[ratios.len() / 2],
        ratios[0],
        ratios[ratios.len() - 1]
    );
}
