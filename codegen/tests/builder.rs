//! The build-script builder writes the same artifacts as `evc generate`, only when they change.

use std::path::Path;

use evc_codegen::generate::Builder;

#[test]
fn builder_generates_into_its_out_dir_and_then_writes_nothing() {
    let contracts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts");
    let out = tempfile::tempdir().expect("temp dir");
    let mut builder = Builder::new(&contracts);
    builder.out_dir(out.path()).runtime_path("::evc");

    let first = builder.generate().expect("generates");
    let written: Vec<String> = first
        .written
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        written.contains(&"evc/src/contracts.rs".to_owned()),
        "{written:?}"
    );
    assert!(
        written.contains(&"evc/registry.json".to_owned()),
        "{written:?}"
    );
    assert!(
        written.contains(&"evc/asyncapi.yaml".to_owned()),
        "{written:?}"
    );

    let repository_items = std::fs::read_to_string(contracts.join("../generated/src/contracts.rs"))
        .expect("checked-in items");
    let built_items =
        std::fs::read_to_string(out.path().join("evc/src/contracts.rs")).expect("built items");
    assert_eq!(
        built_items, repository_items,
        "the builder and `evc generate` differ"
    );

    let second = builder.generate().expect("generates again");
    assert!(second.written.is_empty(), "{:?}", second.written);
    assert_eq!(second.unchanged, first.written.len());
}

#[test]
fn builder_refuses_invalid_contracts() {
    let out = tempfile::tempdir().expect("temp dir");
    let error = Builder::new("/nonexistent/contracts")
        .out_dir(out.path())
        .generate()
        .expect_err("no contracts");
    assert!(
        error.to_string().contains("/nonexistent/contracts"),
        "{error}"
    );
}

#[test]
fn generate_writes_the_crate_manifest_only_when_it_is_missing() {
    let contracts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts");
    let loaded = evc_codegen::ContractSet::load(&contracts).expect("contracts load");
    let root = tempfile::tempdir().expect("temp dir");
    let layout = evc_codegen::emit::Layout::default();
    let manifest = Path::new("generated/Cargo.toml");

    let fresh =
        evc_codegen::generate::render(&loaded.contracts, root.path(), &layout).expect("renders");
    let written = fresh
        .iter()
        .find(|artifact| artifact.path == manifest)
        .expect("a fresh layout gets a manifest");
    assert!(
        written.contents.contains("name = \"evc-reference-events\"")
            && written.contents.contains("evc.workspace = true"),
        "{}",
        written.contents
    );

    // The application's own manifest is never rewritten.
    std::fs::create_dir_all(root.path().join("generated")).expect("mkdir");
    std::fs::write(root.path().join(manifest), "[package]\nname = \"mine\"\n").expect("write");
    let again =
        evc_codegen::generate::render(&loaded.contracts, root.path(), &layout).expect("renders");
    assert!(again.iter().all(|artifact| artifact.path != manifest));
}
