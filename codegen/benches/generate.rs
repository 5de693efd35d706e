//! Renders every artifact (Rust, manifest, SQL, AsyncAPI) for 1,000 event types with 3 versions
//! each. Run: `cargo bench -p evc-codegen --bench generate`.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use evc_codegen::ContractSet;
use evc_codegen::emit::{self, Layout};

const EVENT_TYPES: usize = 1_000;

fn write_contract_set(dir: &Path) {
    fs::create_dir_all(dir.join("events")).expect("events dir");
    fs::create_dir_all(dir.join("consumers")).expect("consumers dir");
    fs::write(
        dir.join("evc.yaml"),
        "project: bench\npayload_policy:\n  denied_keys: [body_text]\n  credential_key_names: [password, token]\ndefaults:\n  retry_policy: default.retry\n",
    )
    .expect("evc.yaml");
    fs::write(
        dir.join("retry-policies.yaml"),
        "policies:\n  default.retry:\n    kind: fixed_delay\n    base_delay: 1s\n    max_attempts: 3\n",
    )
    .expect("policies");
    let mut subscriptions = String::new();
    for index in 0..EVENT_TYPES {
        let name = format!("bench.event_{index:04}");
        let mut text = format!(
            "event: {name}\ndescription: Benchmark event {index}.\nproducer_class: bench\norder_key: unit_id\nversions:\n"
        );
        for minor in 0..3 {
            let _ = write!(
                text,
                "  - version: 1.{minor}.0\n    schema:\n      type: object\n      additionalProperties: false\n      required: [unit_id, state]\n      properties:\n        unit_id: {{ type: string, format: uuid }}\n        state: {{ type: string, enum: [draft, active, frozen] }}\n        detail:\n          type: object\n          additionalProperties: false\n          properties:\n            count: {{ type: integer, minimum: 0, maximum: 1000 }}\n"
            );
            for extra in 0..minor {
                let _ = writeln!(
                    text,
                    "        extra_{extra}: {{ type: string, maxLength: 64 }}"
                );
            }
        }
        fs::write(dir.join(format!("events/{name}.yaml")), text).expect("event file");
        if index % 10 == 0 {
            let _ = writeln!(subscriptions, "  - {name}@^1");
        }
    }
    fs::write(
        dir.join("consumers/bench.consumer.yaml"),
        format!("consumer: bench.consumer\ndescription: Reads a tenth of the events.\nexecutor_kind: sql\nhandler: transactional\nsubscribes:\n{subscriptions}"),
    )
    .expect("consumer");
}

fn generate(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    write_contract_set(dir.path());
    let set = ContractSet::load(dir.path()).expect("valid").contracts;
    let layout = Layout::default();
    let artifacts = emit::render_all(&set, &layout).expect("renders");
    let bytes: usize = artifacts.iter().map(|a| a.contents.len()).sum();
    println!(
        "{} artifacts, {bytes} bytes for {EVENT_TYPES} event types",
        artifacts.len()
    );
    let mut group = c.benchmark_group("generate");
    group.sample_size(10);
    group.bench_function("render_all_1000_event_types_x_3_versions", |b| {
        b.iter(|| emit::render_all(&set, &layout).expect("renders"));
    });
    group.bench_function("rust_only", |b| {
        b.iter(|| emit::rust::render(&set, &layout).expect("renders"));
    });
    group.bench_function("asyncapi_only", |b| {
        b.iter(|| emit::asyncapi::render(&set, &layout).expect("renders"));
    });
    group.bench_function("sql_and_manifest_only", |b| {
        b.iter(|| {
            emit::sql::render(&set, &layout).expect("renders");
            emit::manifest::render(&set, &layout).expect("renders")
        });
    });
    group.bench_function("load_and_render_1000_event_types_x_3_versions", |b| {
        b.iter(|| {
            let set = ContractSet::load(dir.path()).expect("valid").contracts;
            emit::render_all(&set, &layout).expect("renders")
        });
    });
    group.finish();
}

criterion_group!(benches, generate);
criterion_main!(benches);
