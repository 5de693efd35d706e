//! Compiles the pinned generated Rust of every fixture in `codegen/tests/fixtures/generate/`;
//! `codegen/tests/generate_fixtures.rs` keeps the files equal to what the generator renders.

#[path = "../../../codegen/tests/generated/base.rs"]
pub mod base;
#[path = "../../../codegen/tests/generated/consumer_modes.rs"]
pub mod consumer_modes;
#[path = "../../../codegen/tests/generated/defs_and_refs.rs"]
pub mod defs_and_refs;
#[path = "../../../codegen/tests/generated/deprecated_and_composite_key.rs"]
pub mod deprecated_and_composite_key;
#[path = "../../../codegen/tests/generated/enums_and_consts.rs"]
pub mod enums_and_consts;
#[path = "../../../codegen/tests/generated/integer_narrowing.rs"]
pub mod integer_narrowing;
#[path = "../../../codegen/tests/generated/keyword_field_names.rs"]
pub mod keyword_field_names;
#[path = "../../../codegen/tests/generated/multi_major.rs"]
pub mod multi_major;
#[path = "../../../codegen/tests/generated/nested_objects.rs"]
pub mod nested_objects;
#[path = "../../../codegen/tests/generated/nullable_and_optional.rs"]
pub mod nullable_and_optional;
