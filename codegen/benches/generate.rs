//! `evc generate --check`: loads the benchmark contract set (1,029 event types x 3 versions, see
//! `support/contract_set.rs`), renders every artifact (Rust, manifest, SQL, AsyncAPI) and
//! compares them with the files on disk. Run: `cargo bench -p evc-codegen --bench generate`.

#[path = "support/contract_set.rs"]
mod contract_set;

use criterion::{Criterion, criterion_group, criterion_main};
use evc_codegen::ContractSet;
use evc_codegen::emit::{self, Layout};
use evc_codegen::generate;

fn generate(c: &mut Criterion) {
    let root = tempfile::tempdir().expect("temp dir");
    let contracts = root.path().join("contracts");
    contract_set::write(&contracts).expect("writes the set");
    let layout = Layout::default();
    let set = ContractSet::load(&contracts).expect("valid").contracts;
    assert_eq!(
        set.version_count(),
        contract_set::EVENT_TYPES * contract_set::VERSIONS
    );
    let artifacts = generate::render(&set, root.path(), &layout).expect("renders");
    generate::write(&artifacts, root.path()).expect("writes");
    let bytes: usize = artifacts.iter().map(|a| a.contents.len()).sum();
    println!(
        "{} artifacts, {bytes} bytes for {} event types",
        artifacts.len(),
        contract_set::EVENT_TYPES
    );
    let mut group = c.benchmark_group("generate");
    group.sample_size(10);
    group.bench_function("render_all_1029_event_types_x_3_versions", |b| {
        b.iter(|| emit::render_all(&set, &layout).expect("renders"));
    });
    group.bench_function("load_render_and_compare", |b| {
        // As `evc generate --check` does.
        b.iter(|| {
            let set = ContractSet::load(&contracts).expect("valid").contracts;
            let artifacts = generate::render(&set, root.path(), &layout).expect("renders");
            let drift = generate::drift(&artifacts, root.path()).expect("reads");
            assert!(drift.is_empty(), "the files are up to date");
        });
    });
    group.finish();
}

criterion_group!(benches, generate);
criterion_main!(benches);
