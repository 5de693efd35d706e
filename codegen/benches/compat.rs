//! `evc compat --against-dir`: the benchmark contract set (1,029 event types x 3 versions, see
//! `support/contract_set.rs`) compared with a copy of itself. The head loads, then the base with the
//! same cache, as the CLI does; then every version is judged against the others under
//! `full_transitive`.
//! Run: `cargo bench -p evc-codegen --bench compat`.

#[path = "support/contract_set.rs"]
mod contract_set;

use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use evc_codegen::compat;
use evc_codegen::{ContractSet, LoadCache};

/// Both sets, loaded as `evc compat` loads them: the base reuses what the head's load parsed
/// and checked of the files they share.
fn load_both(base: &Path, head: &Path) -> (ContractSet, ContractSet) {
    let cache = LoadCache::new();
    let head = ContractSet::load_with(head, &cache)
        .expect("valid")
        .contracts;
    let base = ContractSet::load_base_with(base, &cache)
        .expect("valid")
        .contracts;
    (base, head)
}

fn compare(c: &mut Criterion) {
    let base_dir = tempfile::tempdir().expect("temp dir");
    let head_dir = tempfile::tempdir().expect("temp dir");
    contract_set::write(base_dir.path()).expect("writes the base");
    contract_set::write(head_dir.path()).expect("writes the head");
    let (base, head) = load_both(base_dir.path(), head_dir.path());
    assert_eq!(
        head.version_count(),
        contract_set::EVENT_TYPES * contract_set::VERSIONS
    );
    let report = compat::compare(&base, &head, "dir:base", "dir:head");
    // Every version is compatible with the ones before it.
    assert!(
        report
            .findings
            .iter()
            .all(|finding| finding.severity != compat::Severity::Error),
        "the set is compatible with itself"
    );

    let mut group = c.benchmark_group("compat");
    group.sample_size(10);
    group.bench_function("compare_1029_event_types_x_3_versions", |b| {
        b.iter(|| compat::compare(&base, &head, "dir:base", "dir:head"));
    });
    group.bench_function("load_both_and_compare", |b| {
        b.iter(|| {
            let (base, head) = load_both(base_dir.path(), head_dir.path());
            compat::compare(&base, &head, "dir:base", "dir:head")
        });
    });
    group.finish();
}

criterion_group!(benches, compare);
criterion_main!(benches);
