//! Refuses to build the reference project when `contracts/` is invalid, naming the command that
//! shows every problem.

use std::path::Path;

fn main() {
    let contracts = Path::new(env!("CARGO_MANIFEST_DIR")).join("contracts");
    println!("cargo::rerun-if-changed={}", contracts.display());
    match evc_codegen::ContractSet::load(&contracts) {
        Ok(loaded) => {
            let set = &loaded.contracts;
            println!(
                "cargo::rustc-env=EVC_CONTRACT_SUMMARY={} event types, {} versions, {} consumers",
                set.events.len(),
                set.version_count(),
                set.consumers.len()
            );
        }
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
        }
    }
}
