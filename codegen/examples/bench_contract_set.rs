//! Writes the benchmarks' contract set (1,029 event types x 3 versions) into a directory, to time
//! the `evc` binary on it: `cargo run --release -p evc-codegen --example bench_contract_set -- DIR`.

#[path = "../benches/support/contract_set.rs"]
mod contract_set;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: bench_contract_set DIR");
        return ExitCode::FAILURE;
    };
    match contract_set::write(&dir) {
        Ok(()) => {
            println!(
                "wrote {} event types x {} versions into {}",
                contract_set::EVENT_TYPES,
                contract_set::VERSIONS,
                dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("cannot write {}: {error}", dir.display());
            ExitCode::FAILURE
        }
    }
}
