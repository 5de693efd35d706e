//! `evc check`: loads and validates the benchmark contract set (1,029 event types x 3 versions,
//! see `support/contract_set.rs`). Run: `cargo bench -p evc-codegen --bench load`.

#[path = "support/contract_set.rs"]
mod contract_set;

use criterion::{Criterion, criterion_group, criterion_main};
use evc_codegen::ContractSet;

fn load(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    contract_set::write(dir.path()).expect("writes the set");
    let loaded = ContractSet::load(dir.path()).expect("the generated set is valid");
    assert_eq!(loaded.contracts.events.len(), contract_set::EVENT_TYPES);
    assert_eq!(
        loaded.contracts.version_count(),
        contract_set::EVENT_TYPES * contract_set::VERSIONS
    );
    let mut group = c.benchmark_group("check");
    group.sample_size(10);
    group.bench_function("load_1029_event_types_x_3_versions", |b| {
        b.iter(|| ContractSet::load(dir.path()).expect("valid"));
    });
    group.finish();
}

criterion_group!(benches, load);
criterion_main!(benches);
