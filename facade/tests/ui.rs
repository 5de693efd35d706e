//! Every compile-time diagnostic of the macros, pinned with trybuild (`.stderr` beside each
//! case), and the valid uses that must compile. The cases read the repository's contracts:
//! `.cargo/config.toml` sets `EVC_CONTRACTS_DIR` for every crate built in this workspace.
//! Regenerate the `.stderr` files with `TRYBUILD=overwrite` and review them.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
