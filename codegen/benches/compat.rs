//! Compares two contract sets of 1,000 event types with 3 versions each, as `evc compat` does.
//! Run: `cargo bench -p evc-codegen --bench compat`.
//!
//! The base has versions 1.0.0, 1.1.0 and 1.2.0 of every type; the head retires 1.0.0 and adds
//! 1.3.0 under `full_transitive`, so every type needs four schema judgements for the new version
//! (both directions against 1.1.0 and 1.2.0), two more for the suggested bump, and the in-place
//! comparison of the versions both sides share. Every other type narrows an enum in 1.3.0, so
//! half the types produce findings with witness searches. `load_both_and_compare` is the whole
//! of `evc compat --against-dir`: both sets loaded (at once, as the CLI does), then compared.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use evc_codegen::ContractSet;
use evc_codegen::compat;

const EVENT_TYPES: usize = 1_000;

/// Schema of version 1.`minor`.0: one more optional field per minor; `narrow` drops an enum value.
fn schema(minor: usize, narrow: bool) -> String {
    let states = if narrow {
        "[draft, active]"
    } else {
        "[draft, active, frozen]"
    };
    let mut text = format!(
        "    schema:\n      type: object\n      additionalProperties: false\n      required: [unit_id, state]\n      properties:\n        unit_id: {{ type: string, format: uuid }}\n        state: {{ type: string, enum: {states} }}\n        count: {{ type: integer, minimum: 0 }}\n"
    );
    for field in 0..minor {
        let _ = writeln!(
            text,
            "        field_{field}: {{ type: string, maxLength: 64 }}"
        );
    }
    text
}

fn write_set(dir: &Path, minors: &[usize]) {
    fs::create_dir_all(dir.join("events")).expect("events dir");
    fs::create_dir_all(dir.join("consumers")).expect("consumers dir");
    fs::write(
        dir.join("evc.yaml"),
        "project: bench\npayload_policy:\n  denied_keys: [body_text]\n  credential_key_names: [password]\ndefaults:\n  retry_policy: default.retry\n  compat: full_transitive\n",
    )
    .expect("evc.yaml");
    fs::write(
        dir.join("retry-policies.yaml"),
        "policies:\n  default.retry:\n    kind: no_retry\n    max_attempts: 1\n",
    )
    .expect("policies");
    let mut subscriptions = String::new();
    for index in 0..EVENT_TYPES {
        let name = format!("bench.event_{index:04}");
        let mut text = format!(
            "event: {name}\ndescription: Benchmark event {index}.\nproducer_class: bench\nversions:\n"
        );
        for &minor in minors {
            let _ = writeln!(text, "  - version: 1.{minor}.0");
            text.push_str(&schema(minor, minor == 3 && index % 2 == 0));
        }
        fs::write(dir.join(format!("events/{name}.yaml")), text).expect("event file");
        if index % 10 == 0 {
            let _ = writeln!(subscriptions, "  - {name}@^1.1");
        }
    }
    fs::write(
        dir.join("consumers/bench.consumer.yaml"),
        format!("consumer: bench.consumer\ndescription: Reads a tenth of the events.\nexecutor_kind: sql\nhandler: transactional\nsubscribes:\n{subscriptions}"),
    )
    .expect("consumer");
}

fn compare(c: &mut Criterion) {
    let base_dir = tempfile::tempdir().expect("temp dir");
    let head_dir = tempfile::tempdir().expect("temp dir");
    write_set(base_dir.path(), &[0, 1, 2]);
    write_set(head_dir.path(), &[1, 2, 3]);
    let base = ContractSet::load(base_dir.path())
        .expect("valid base")
        .contracts;
    let head = ContractSet::load(head_dir.path())
        .expect("valid head")
        .contracts;
    assert_eq!(base.version_count(), EVENT_TYPES * 3);
    assert_eq!(head.version_count(), EVENT_TYPES * 3);
    let report = compat::compare(&base, &head, "dir:base", "dir:head");
    let narrowed = report
        .findings
        .iter()
        .filter(|finding| finding.rule == "ENUM_NARROWED")
        .count();
    // Half the types narrow an enum; full_transitive reports it against 1.1.0 and 1.2.0.
    assert_eq!(narrowed, EVENT_TYPES);
    assert!(
        report
            .findings
            .iter()
            .all(|f| f.rule != "ENUM_NARROWED" || f.witness.is_some())
    );

    let mut group = c.benchmark_group("compat");
    group.sample_size(10);
    group.bench_function("compare_1000_event_types_x_3_versions", |b| {
        b.iter(|| compat::compare(&base, &head, "dir:base", "dir:head"));
    });
    group.bench_function("load_both_and_compare", |b| {
        // As `evc compat` does: both sides load at once.
        b.iter(|| {
            let (base, head) = std::thread::scope(|scope| {
                let head = scope.spawn(|| ContractSet::load(head_dir.path()));
                let base = ContractSet::load(base_dir.path()).expect("valid").contracts;
                let head = head.join().expect("no panic").expect("valid").contracts;
                (base, head)
            });
            compat::compare(&base, &head, "dir:base", "dir:head")
        });
    });
    group.finish();
}

criterion_group!(benches, compare);
criterion_main!(benches);
