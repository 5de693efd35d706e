//! Build-time parity: refuses to build when `contracts/` is invalid, or when `generated/` or
//! `asyncapi/` differ from what the contracts generate. Renders in memory; writes nothing
//! outside `OUT_DIR`.

use std::path::Path;

use evc_codegen::emit::Layout;
use evc_codegen::generate::{self, Drift};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for watched in ["contracts", "generated", "asyncapi"] {
        println!("cargo::rerun-if-changed={}", root.join(watched).display());
    }
    let loaded = match evc_codegen::ContractSet::load(root.join("contracts")) {
        Ok(loaded) => loaded,
        Err(error) => {
            if let evc_codegen::LoadError::Invalid { diagnostics, .. } = &error {
                for diagnostic in diagnostics.iter().filter(|d| d.is_error()) {
                    println!(
                        "cargo::warning={}",
                        diagnostic.to_short_string().replace('\n', " ")
                    );
                }
            }
            println!(
                "cargo::error=contracts/ is invalid ({error}); run `cargo evc check` to see every problem"
            );
            return;
        }
    };
    let set = &loaded.contracts;
    let drifted = generate::render(set, root, &Layout::default())
        .and_then(|artifacts| generate::drift(&artifacts, root));
    match drifted {
        Ok(drifted) if drifted.is_empty() => {}
        Ok(drifted) => {
            for (path, drift) in &drifted {
                let what = match drift {
                    Drift::Missing => "missing",
                    Drift::Stale => "stale",
                };
                println!("cargo::warning={what}: {}", path.display());
            }
            println!(
                "cargo::error={} generated file(s) differ from contracts/; run `cargo evc generate`",
                drifted.len()
            );
            return;
        }
        Err(error) => {
            println!("cargo::error=cannot render the contracts: {error}");
            return;
        }
    }
    println!(
        "cargo::rustc-env=EVC_CONTRACT_SUMMARY={} event types, {} versions, {} consumers",
        set.events.len(),
        set.version_count(),
        set.consumers.len()
    );
}
