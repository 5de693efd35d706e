//! Every compile-time diagnostic of the macros, pinned with trybuild (`.stderr` beside each
//! case). The cases read the repository's contracts: `.cargo/config.toml` sets
//! `EVC_CONTRACTS_DIR` for every crate built in this workspace. Regenerate the `.stderr` files
//! with `TRYBUILD=overwrite` and review them.
//!
//! Only failing cases live here: with no passing case trybuild runs `cargo check`, not
//! `cargo build`, on its own copy of the dependencies (in a clean CI clone that build took
//! 339 s). The valid uses are an ordinary test, `tests/valid_uses.rs`.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
}
