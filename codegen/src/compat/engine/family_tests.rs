//! Verdicts across the keyword families of JSON Schema: unions, discriminators, tuples, open
//! and closed content, `not`, conditionals and type unions. Each case is judged BACKWARD on the
//! schemas as written (`writer = old`, `reader = new`); an incompatible case must name its rule
//! and, where the case says so, come with a witness checked by a validator.

use serde_json::{Value, json};

use crate::compat::report::{CompatRule, Direction};
use crate::compat::{Options, judge};

/// What a case expects.
enum Expect {
    /// `writer ⊆ reader` holds.
    Compatible,
    /// The rule found, and whether a witness payload must be found for it.
    Incompatible(CompatRule, Witness),
}

#[derive(Clone, Copy, PartialEq)]
enum Witness {
    Required,
    Optional,
}

use Expect::{Compatible, Incompatible};
use Witness::{Optional, Required};

fn verdict(old: &Value, new: &Value) -> Vec<(CompatRule, Option<Value>)> {
    judge(
        old,
        new,
        Direction::Backward,
        Options {
            views: false,
            witnesses: true,
            ..Options::default()
        },
    )
    .into_iter()
    .map(|judgement| (judgement.incompatibility.rule, judgement.witness))
    .collect()
}

fn assert_cases(cases: &[(&str, Value, Value, Expect)]) {
    let mut wrong = Vec::new();
    for (name, old, new, expect) in cases {
        let found = verdict(old, new);
        let ok = match expect {
            Compatible => found.is_empty(),
            Incompatible(rule, witness) => {
                found.iter().any(|(found_rule, _)| found_rule == rule)
                    && (*witness == Optional
                        || found
                            .iter()
                            .any(|(found_rule, payload)| found_rule == rule && payload.is_some()))
            }
        };
        if !ok {
            wrong.push(format!("{name}: {found:?}"));
        }
    }
    assert!(wrong.is_empty(), "wrong verdicts:\n{}", wrong.join("\n"));
}

fn tagged(tag: &str, field: &str, kind: &str) -> Value {
    json!({
        "type": "object",
        "properties": {"kind": {"const": tag}, field: {"type": kind}},
        "required": ["kind", field]
    })
}

#[test]
fn unions_grow_and_shrink() {
    let two = json!({"anyOf": [{"type": "string"}, {"type": "integer"}]});
    let three = json!({"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}]});
    let one_of_two = json!({"oneOf": [{"type": "string"}, {"type": "integer"}]});
    let one_of_three =
        json!({"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}]});
    assert_cases(&[
        ("anyOf branch added", two.clone(), three.clone(), Compatible),
        (
            "anyOf branch removed",
            three.clone(),
            two.clone(),
            Incompatible(CompatRule::AlternativeRemoved, Required),
        ),
        (
            "oneOf branch added (disjoint)",
            one_of_two.clone(),
            one_of_three.clone(),
            Compatible,
        ),
        (
            "oneOf branch removed",
            one_of_three,
            one_of_two.clone(),
            Incompatible(CompatRule::AlternativeRemoved, Required),
        ),
        (
            "oneOf branch added that overlaps an old one",
            json!({"oneOf": [{"type": "number"}, {"type": "string"}]}),
            json!({"oneOf": [{"type": "number"}, {"type": "string"}, {"type": "integer"}]}),
            Incompatible(CompatRule::AlternativeRemoved, Required),
        ),
        (
            "plain type becomes a union",
            json!({"type": "string"}),
            one_of_two.clone(),
            Compatible,
        ),
        (
            "union becomes one of its branches",
            one_of_two,
            json!({"type": "string"}),
            Incompatible(CompatRule::TypeNarrowed, Required),
        ),
        (
            "anyOf branch narrowed",
            json!({"anyOf": [{"type": "string"}, {"type": "integer", "maximum": 10}]}),
            json!({"anyOf": [{"type": "string"}, {"type": "integer", "maximum": 5}]}),
            Incompatible(CompatRule::AlternativeRemoved, Required),
        ),
        (
            "anyOf to oneOf of disjoint branches",
            two,
            json!({"oneOf": [{"type": "string"}, {"type": "integer"}]}),
            Compatible,
        ),
    ]);
}

#[test]
fn discriminated_unions() {
    let old = json!({"oneOf": [tagged("a", "x", "string"), tagged("b", "y", "integer")]});
    assert_cases(&[
        (
            "variant added",
            old.clone(),
            json!({"oneOf": [tagged("a", "x", "string"), tagged("b", "y", "integer"), tagged("c", "z", "boolean")]}),
            Compatible,
        ),
        (
            "variant removed",
            old.clone(),
            json!({"oneOf": [tagged("a", "x", "string")]}),
            Incompatible(CompatRule::AlternativeRemoved, Required),
        ),
        (
            "tag renamed",
            old.clone(),
            json!({"oneOf": [tagged("a", "x", "string"), tagged("c", "y", "integer")]}),
            Incompatible(CompatRule::AlternativeRemoved, Required),
        ),
        (
            "tag property renamed",
            old.clone(),
            json!({"oneOf": [
                {"type": "object", "properties": {"type": {"const": "a"}, "x": {"type": "string"}}, "required": ["type", "x"]},
                {"type": "object", "properties": {"type": {"const": "b"}, "y": {"type": "integer"}}, "required": ["type", "y"]}
            ]}),
            Incompatible(CompatRule::AlternativeRemoved, Required),
        ),
        (
            "variant field narrowed",
            old.clone(),
            json!({"oneOf": [tagged("a", "x", "string"), tagged("b", "y", "boolean")]}),
            Incompatible(CompatRule::AlternativeRemoved, Required),
        ),
        (
            "variants reordered",
            old.clone(),
            json!({"oneOf": [tagged("b", "y", "integer"), tagged("a", "x", "string")]}),
            Compatible,
        ),
        (
            "one variant read as the tag's type",
            tagged("a", "x", "string"),
            old,
            Compatible,
        ),
    ]);
}

#[test]
fn tuples_grow_and_shrink() {
    let pair = json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false});
    let triple = json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}], "items": false});
    let open_pair =
        json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]});
    assert_cases(&[
        (
            "closed tuple grows",
            pair.clone(),
            triple.clone(),
            Compatible,
        ),
        (
            "closed tuple shrinks",
            triple,
            pair.clone(),
            Incompatible(CompatRule::ArrayNarrowed, Required),
        ),
        (
            "closed tuple opens (items false → true)",
            pair.clone(),
            open_pair.clone(),
            Compatible,
        ),
        (
            "open tuple closes (items true → false)",
            open_pair.clone(),
            pair.clone(),
            Incompatible(CompatRule::ArrayNarrowed, Required),
        ),
        (
            "tuple position narrowed",
            pair.clone(),
            json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "string"}], "items": false}),
            Incompatible(CompatRule::TypeNarrowed, Required),
        ),
        (
            "rest items narrowed",
            json!({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "number"}}),
            json!({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "integer"}}),
            Incompatible(CompatRule::TypeNarrowed, Required),
        ),
        (
            "tuple requires more items",
            pair.clone(),
            json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false, "minItems": 2}),
            Incompatible(CompatRule::ArrayNarrowed, Required),
        ),
        (
            "open tuple grows a typed position",
            open_pair,
            json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}]}),
            Incompatible(CompatRule::TypeNarrowed, Required),
        ),
    ]);
}

#[test]
fn open_and_closed_content() {
    let open = json!({"type": "object", "properties": {"a": {"type": "string"}}});
    let closed = json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false});
    let typed = |kind: Value| json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": kind}});
    assert_cases(&[
        (
            "additionalProperties false removed",
            closed.clone(),
            open.clone(),
            Compatible,
        ),
        (
            "additionalProperties false added",
            open.clone(),
            closed.clone(),
            Incompatible(CompatRule::PropertyRejected, Required),
        ),
        (
            "additionalProperties narrowed",
            typed(json!(["string", "integer"])),
            typed(json!("string")),
            Incompatible(CompatRule::TypeNarrowed, Required),
        ),
        (
            "additionalProperties extended",
            typed(json!("string")),
            typed(json!(["string", "integer"])),
            Compatible,
        ),
        (
            "open model gets a typed property",
            open.clone(),
            json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}),
            Incompatible(CompatRule::TypeNarrowed, Required),
        ),
        (
            "closed model gets an optional property",
            closed.clone(),
            json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "additionalProperties": false}),
            Compatible,
        ),
        (
            "closed model loses a property",
            closed,
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
            Incompatible(CompatRule::PropertyRejected, Required),
        ),
        (
            "unevaluatedProperties false added",
            open.clone(),
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "unevaluatedProperties": false}),
            Incompatible(CompatRule::PropertyRejected, Required),
        ),
        (
            "patternProperties narrows names the model left open",
            open,
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "patternProperties": {"^x_": {"type": "string"}}}),
            Incompatible(CompatRule::TypeNarrowed, Required),
        ),
    ]);
}

#[test]
fn negations() {
    assert_cases(&[
        (
            "not added that excludes nothing the writer emits",
            json!({"type": "string"}),
            json!({"type": "string", "not": {"type": "integer"}}),
            Compatible,
        ),
        (
            "not added that excludes writer values",
            json!({"type": "string"}),
            json!({"type": "string", "not": {"const": "x"}}),
            Incompatible(CompatRule::NotExtended, Required),
        ),
        (
            "not narrowed (excludes less)",
            json!({"not": {"type": ["string", "integer"]}}),
            json!({"not": {"type": "string"}}),
            Compatible,
        ),
        (
            "not extended (excludes more)",
            json!({"not": {"type": "string"}}),
            json!({"not": {"type": ["string", "integer"]}}),
            Incompatible(CompatRule::NotExtended, Required),
        ),
        (
            "not of an enum shrinks",
            json!({"type": "string", "not": {"enum": ["a", "b"]}}),
            json!({"type": "string", "not": {"enum": ["a"]}}),
            Compatible,
        ),
        (
            "not of an enum grows",
            json!({"type": "string", "not": {"enum": ["a"]}}),
            json!({"type": "string", "not": {"enum": ["a", "b"]}}),
            Incompatible(CompatRule::NotExtended, Required),
        ),
        (
            "not removed",
            json!({"type": "string", "not": {"const": "x"}}),
            json!({"type": "string"}),
            Compatible,
        ),
    ]);
}

#[test]
fn conditionals() {
    let base = json!({
        "type": "object",
        "properties": {"kind": {"enum": ["a", "b"]}, "n": {"type": "integer"}},
        "required": ["kind"]
    });
    let with = |condition: Value| {
        let mut schema = base.clone();
        for (keyword, value) in condition.as_object().expect("object") {
            schema[keyword] = value.clone();
        }
        schema
    };
    let if_a = json!({"properties": {"kind": {"const": "a"}}});
    let if_a_then_n = with(json!({"if": if_a, "then": {"required": ["n"]}}));
    assert_cases(&[
        (
            "conditional added that writers may break",
            base.clone(),
            if_a_then_n.clone(),
            Incompatible(CompatRule::RequiredAdded, Required),
        ),
        (
            "conditional removed",
            if_a_then_n.clone(),
            base.clone(),
            Compatible,
        ),
        (
            "then narrowed",
            if_a_then_n.clone(),
            with(
                json!({"if": if_a, "then": {"required": ["n"], "properties": {"n": {"minimum": 5}}}}),
            ),
            Incompatible(CompatRule::NumberRangeNarrowed, Required),
        ),
        (
            "then widened",
            with(
                json!({"if": if_a, "then": {"required": ["n"], "properties": {"n": {"minimum": 5}}}}),
            ),
            if_a_then_n.clone(),
            Compatible,
        ),
        (
            "else added",
            if_a_then_n.clone(),
            with(
                json!({"if": if_a, "then": {"required": ["n"]}, "else": {"properties": {"n": {"maximum": 0}}}}),
            ),
            Incompatible(CompatRule::NumberRangeNarrowed, Required),
        ),
        (
            "if widened so then applies to more writers",
            if_a_then_n.clone(),
            with(
                json!({"if": {"properties": {"kind": {"enum": ["a", "b"]}}}, "then": {"required": ["n"]}}),
            ),
            Incompatible(CompatRule::RequiredAdded, Required),
        ),
        (
            "if narrowed so then applies to fewer writers",
            with(
                json!({"if": {"properties": {"kind": {"enum": ["a", "b"]}}}, "then": {"required": ["n"]}}),
            ),
            if_a_then_n.clone(),
            Compatible,
        ),
        (
            "writer that always meets then",
            with(json!({"required": ["kind", "n"]})),
            if_a_then_n,
            Compatible,
        ),
    ]);
}

#[test]
fn type_unions() {
    assert_cases(&[
        (
            "null added",
            json!({"type": "string"}),
            json!({"type": ["string", "null"]}),
            Compatible,
        ),
        (
            "null removed",
            json!({"type": ["string", "null"]}),
            json!({"type": "string"}),
            Incompatible(CompatRule::TypeNarrowed, Required),
        ),
        (
            "integer widened to number inside a union",
            json!({"type": ["string", "integer"]}),
            json!({"type": ["string", "number"]}),
            Compatible,
        ),
        (
            "number narrowed to integer inside a union",
            json!({"type": ["string", "number"]}),
            json!({"type": ["string", "integer"]}),
            Incompatible(CompatRule::TypeNarrowed, Required),
        ),
        (
            "bound narrowed on one member of a union",
            json!({"type": ["string", "integer"], "minimum": 0}),
            json!({"type": ["string", "integer"], "minimum": 1}),
            Incompatible(CompatRule::NumberRangeNarrowed, Required),
        ),
        (
            "type union split into anyOf",
            json!({"type": ["string", "integer"]}),
            json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}),
            Compatible,
        ),
        (
            "anyOf merged into a type union",
            json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}),
            json!({"type": ["string", "integer"]}),
            Compatible,
        ),
    ]);
}

#[test]
fn undecidable_changes_are_findings_with_a_reason() {
    // A changed regex cannot be proved contained: the finding says so and never passes.
    let found = judge(
        &json!({"type": "string", "pattern": "^[a-z]+$"}),
        &json!({"type": "string", "pattern": "^[a-z]*$"}),
        Direction::Backward,
        Options {
            views: false,
            witnesses: false,
            ..Options::default()
        },
    );
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].incompatibility.rule, CompatRule::PatternChanged);
    let found = judge(
        &json!({"type": "object"}),
        &json!({"$ref": "other.json#/x"}),
        Direction::Backward,
        Options {
            views: false,
            witnesses: false,
            ..Options::default()
        },
    );
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].incompatibility.rule, CompatRule::Unjudgeable);
    assert!(
        found[0]
            .incompatibility
            .message
            .contains("not a local JSON pointer"),
        "{}",
        found[0].incompatibility.message
    );
}
