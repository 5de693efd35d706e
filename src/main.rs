//! The repository's own user of evc. Its build script refuses to build when `contracts/` is
//! invalid; later it runs the reference contracts end to end on the runtime.

fn main() {
    println!(
        "evc reference project: contracts checked at build time ({}).",
        env!("EVC_CONTRACT_SUMMARY")
    );
}
