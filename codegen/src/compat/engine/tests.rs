//! Unit tests of the engine on small schemas.

use serde_json::json;

use super::*;

fn judge(writer: Value, reader: Value) -> Vec<CompatRule> {
    let mut writer = Document::new(writer, Dialect::Draft2020);
    let mut reader = Document::new(reader, Dialect::Draft2020);
    check(&mut writer, &mut reader)
        .into_iter()
        .map(|item| item.rule)
        .collect()
}

#[test]
fn identical_schemas_are_compatible() {
    let schema =
        json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]});
    assert!(judge(schema.clone(), schema).is_empty());
}

#[test]
fn widening_passes_and_narrowing_fails() {
    assert!(judge(json!({"type": "integer"}), json!({"type": "number"})).is_empty());
    assert_eq!(
        judge(json!({"type": "number"}), json!({"type": "integer"})),
        [CompatRule::TypeNarrowed]
    );
    assert!(
        judge(
            json!({"enum": ["a", "b"]}),
            json!({"enum": ["a", "b", "c"]})
        )
        .is_empty()
    );
    assert_eq!(
        judge(json!({"enum": ["a", "b"]}), json!({"enum": ["a"]})),
        [CompatRule::EnumNarrowed]
    );
    assert_eq!(
        judge(
            json!({"type": "string", "maxLength": 9}),
            json!({"type": "string", "maxLength": 5})
        ),
        [CompatRule::StringLengthNarrowed]
    );
}

#[test]
fn required_and_closed_objects() {
    let writer = json!({"type": "object", "properties": {"a": {}}, "additionalProperties": false});
    let reader = json!({"type": "object", "properties": {"a": {}, "b": {}}, "required": ["b"]});
    assert_eq!(judge(writer.clone(), reader), [CompatRule::RequiredAdded]);
    let closed_reader = json!({"type": "object", "properties": {}, "additionalProperties": false});
    assert_eq!(judge(writer, closed_reader), [CompatRule::PropertyRejected]);
}

#[test]
fn recursive_references_terminate() {
    let tree = json!({
        "$defs": {"node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
        "$ref": "#/$defs/node"
    });
    assert!(judge(tree.clone(), tree).is_empty());
}

#[test]
fn unions_are_matched_per_type() {
    assert!(
        judge(
            json!({"type": ["string", "integer"]}),
            json!({"anyOf": [{"type": "integer"}, {"type": "string"}]})
        )
        .is_empty()
    );
    assert_eq!(
        judge(
            json!({"oneOf": [{"type": "number"}, {"type": "string"}]}),
            json!({"oneOf": [{"type": "string"}]})
        ),
        [CompatRule::AlternativeRemoved]
    );
}

#[test]
fn changed_patterns_fail_closed() {
    assert_eq!(
        judge(
            json!({"type": "string", "pattern": "^a"}),
            json!({"type": "string", "pattern": "^a|b"})
        ),
        [CompatRule::PatternChanged]
    );
}

#[test]
fn conditionals_split_the_writer_and_fail_closed_otherwise() {
    let conditional = json!({
        "type": "object",
        "properties": {"kind": {"enum": ["a", "b"]}, "n": {"type": "integer"}},
        "if": {"properties": {"kind": {"const": "a"}}},
        "then": {"required": ["n"]}
    });
    assert!(judge(conditional.clone(), conditional.clone()).is_empty());
    // A writer that always satisfies `then` fits the reader whatever `if` says.
    let always_n = json!({"type": "object", "required": ["n"],
        "properties": {"kind": {"enum": ["a", "b"]}, "n": {"type": "integer"}}});
    assert!(judge(always_n, conditional.clone()).is_empty());
    let sometimes_n = json!({"type": "object",
        "properties": {"kind": {"enum": ["a", "b"]}, "n": {"type": "integer"}}});
    // A writer split on the reader's `if`: where `kind` is "a", `n` may be missing.
    assert_eq!(
        judge(sometimes_n, conditional.clone()),
        [CompatRule::RequiredAdded]
    );
    // A reader `else` over writer values evc cannot separate from its `if` is undecided.
    let with_else = json!({
        "type": "object",
        "if": {"properties": {"kind": {"pattern": "^a"}}},
        "then": {"required": ["n"]},
        "else": {"required": ["m"]}
    });
    assert_eq!(
        judge(json!({"type": "object", "required": ["n"]}), with_else),
        [CompatRule::Unjudgeable]
    );
}

#[test]
fn one_and_one_point_zero_are_one_value_in_a_condition() {
    // The reader's `if` holds for 1 (`enum [1]` and `const 1.0` name the same number), so its
    // `then` refuses the 1 the writer may emit (the writer's own `if` never holds).
    let writer = json!({"type": "array", "items": {
        "if": {"allOf": [{"enum": [1]}, {"const": 2}]}, "then": {"type": "string"}}});
    let reader = json!({"items": {
        "if": {"allOf": [{"enum": [1]}, {"const": 1.0}]}, "then": {"type": "string"}}});
    assert!(!judge(writer, reader).is_empty());
}

#[test]
fn negations_need_disjointness() {
    assert!(
        judge(
            json!({"type": "string"}),
            json!({"not": {"type": "number"}})
        )
        .is_empty()
    );
    assert!(
        judge(
            json!({"not": {"type": "number"}}),
            json!({"not": {"type": "integer"}})
        )
        .is_empty()
    );
    assert_eq!(
        judge(
            json!({"type": "number"}),
            json!({"not": {"type": "integer"}})
        ),
        [CompatRule::NotExtended]
    );
}

#[test]
fn draft7_tuples_compare_position_by_position() {
    let mut writer = Document::new(
        json!({"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": false}),
        Dialect::Draft7,
    );
    let mut reader = Document::new(
        json!({"type": "array", "items": [{"type": "string"}], "additionalItems": {"type": "number"}}),
        Dialect::Draft7,
    );
    assert!(check(&mut writer, &mut reader).is_empty());
    let mut narrower = Document::new(
        json!({"type": "array", "items": [{"type": "string"}], "additionalItems": {"type": "string"}}),
        Dialect::Draft7,
    );
    let rules: Vec<CompatRule> = check(&mut writer, &mut narrower)
        .into_iter()
        .map(|i| i.rule)
        .collect();
    assert_eq!(rules, [CompatRule::TypeNarrowed]);
}

#[test]
fn unknown_reader_keywords_fail_closed() {
    assert_eq!(
        judge(
            json!({"type": "string"}),
            json!({"type": "string", "x-evc": 1, "madeUp": 2})
        ),
        [CompatRule::Unjudgeable]
    );
}
