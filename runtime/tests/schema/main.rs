//! The stores' own schemas, tested from the inside: these tests write and read the
//! runtime's tables by hand, as an application bug, a non-owner role or a corrupted mirror
//! would, to prove what the schema itself guarantees (ledger triggers, constraints, row
//! versions written in one transaction, migrations that keep every row). They are the only
//! tests that name the store's tables; every other test goes through store methods
//! (`tests/store_boundary.rs` enforces it).

#[path = "../support/mod.rs"]
mod support;

mod append_only;
mod claim_plans;
mod consumer_roles;
mod lifecycle;
mod migrations;
mod per_key_claims;
mod registry_parity;
mod roles;
mod settled;
mod sqlite_migrations;
mod tenants;
mod trace_index;
