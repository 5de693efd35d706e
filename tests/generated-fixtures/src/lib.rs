//! Compiles the pinned generated Rust of every fixture in `codegen/tests/fixtures/generate/`;
//! `codegen/tests/generate_fixtures.rs` keeps the files equal to what the generator renders.

/// The `all_of_merge` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/all_of_merge.rs"]
pub mod all_of_merge;

/// The `base` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/base.rs"]
pub mod base;

/// The `consumer_modes` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/consumer_modes.rs"]
pub mod consumer_modes;

/// The `defs_and_refs` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/defs_and_refs.rs"]
pub mod defs_and_refs;

/// The `deprecated_and_composite_key` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/deprecated_and_composite_key.rs"]
pub mod deprecated_and_composite_key;

/// The `enums_and_consts` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/enums_and_consts.rs"]
pub mod enums_and_consts;

/// The `integer_narrowing` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/integer_narrowing.rs"]
pub mod integer_narrowing;

/// The `keyword_field_names` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/keyword_field_names.rs"]
pub mod keyword_field_names;

/// The `multi_major` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/multi_major.rs"]
pub mod multi_major;

/// The `nested_objects` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/nested_objects.rs"]
pub mod nested_objects;

/// The `nullable_and_optional` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/nullable_and_optional.rs"]
pub mod nullable_and_optional;

/// The `open_objects` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/open_objects.rs"]
pub mod open_objects;

/// The `refs_anywhere` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/refs_anywhere.rs"]
pub mod refs_anywhere;

/// The `reserved_names` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/reserved_names.rs"]
pub mod reserved_names;

/// The `root_shapes` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/root_shapes.rs"]
pub mod root_shapes;

/// The `runtime_only_keywords` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/runtime_only_keywords.rs"]
pub mod runtime_only_keywords;

/// The `tagged_unions` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/tagged_unions.rs"]
pub mod tagged_unions;

/// The `tuples` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/tuples.rs"]
pub mod tuples;

/// The `untagged_unions` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/untagged_unions.rs"]
pub mod untagged_unions;

/// The `value_enums` fixture set.
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
#[path = "../../../codegen/tests/generated/value_enums.rs"]
pub mod value_enums;

/// The contract sets `codegen/tests/generate_property.rs` drew and `evc check` accepted; built
/// only by that test (the `property` feature, with `EVC_PROPERTY_CASES` naming the file).
#[cfg(feature = "property")]
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
pub mod property {
    include!(env!("EVC_PROPERTY_CASES"));
}

/// One state of the contracts of `codegen/tests/source_compat.rs`, which compiles a producer
/// (the `evolution` test target) against it; built only by that test (the `evolution` feature,
/// with `EVC_EVOLUTION_CONTRACTS` naming the file).
#[cfg(feature = "evolution")]
#[rustfmt::skip]
#[deny(warnings, missing_docs)]
#[allow(clippy::all)]
pub mod evolution {
    include!(env!("EVC_EVOLUTION_CONTRACTS"));
}
