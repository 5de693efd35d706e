//! Soundness of the compatibility engine: whenever it says a change is compatible, no payload
//! that the writer accepts is rejected by the reader.
//!
//! Schemas come from a small grammar that covers the keywords the engine judges (types, enums,
//! bounds, formats, patterns, objects open and closed, tuples, arrays, `anyOf`/`oneOf`/`allOf`/
//! `not`, `$ref`); the new schema is the old one with keywords deleted or values changed, or an
//! independent one. Payloads are random values from the same vocabulary plus the engine's own
//! samples. Both verdicts are checked with the `jsonschema` validator, formats on.

use evc_codegen::compat::{Direction, Options, judge, views, witness};
use evc_codegen::model::ContentModel;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};

fn leaf() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(json!({})),
        Just(json!({"type": "null"})),
        Just(json!({"type": "boolean"})),
        (
            prop::option::of(-2i64..3),
            prop::option::of(-1i64..4),
            prop::option::of(1i64..3)
        )
            .prop_map(|(min, max, multiple)| {
                let mut map = Map::new();
                map.insert("type".into(), json!("integer"));
                if let Some(min) = min {
                    map.insert("minimum".into(), json!(min));
                }
                if let Some(max) = max {
                    map.insert("exclusiveMaximum".into(), json!(max));
                }
                if let Some(multiple) = multiple {
                    map.insert("multipleOf".into(), json!(multiple));
                }
                Value::Object(map)
            }),
        (
            prop::option::of(-1.5f64..1.5),
            prop::option::of(0.0f64..2.0)
        )
            .prop_map(|(min, max)| {
                let mut map = Map::new();
                map.insert("type".into(), json!("number"));
                if let Some(min) = min {
                    map.insert("exclusiveMinimum".into(), json!((min * 2.0).round() / 2.0));
                }
                if let Some(max) = max {
                    map.insert("maximum".into(), json!((max * 2.0).round() / 2.0));
                }
                Value::Object(map)
            }),
        (
            prop::option::of(0u64..3),
            prop::option::of(1u64..5),
            prop::option::of(prop_oneof![Just("uuid"), Just("date")]),
            prop::option::of(prop_oneof![Just("^a"), Just("b$")]),
        )
            .prop_map(|(min, max, format, pattern)| {
                let mut map = Map::new();
                map.insert("type".into(), json!("string"));
                if let Some(min) = min {
                    map.insert("minLength".into(), json!(min));
                }
                if let Some(max) = max {
                    map.insert("maxLength".into(), json!(max));
                }
                if let Some(format) = format {
                    map.insert("format".into(), json!(format));
                }
                if let Some(pattern) = pattern {
                    map.insert("pattern".into(), json!(pattern));
                }
                Value::Object(map)
            }),
        prop::sample::subsequence(
            vec![json!("a"), json!("b"), json!(1), json!(null), json!(true)],
            1..4
        )
        .prop_map(|values| json!({"enum": values})),
        prop_oneof![Just(json!("a")), Just(json!(2))].prop_map(|value| json!({"const": value})),
        Just(json!({"type": ["string", "integer"]})),
        Just(json!({"$ref": "#/$defs/id"})),
    ]
    .boxed()
}

fn schema() -> BoxedStrategy<Value> {
    leaf()
        .prop_recursive(3, 24, 3, |inner| {
            prop_oneof![
                (
                    prop::option::of(inner.clone()),
                    prop::option::of(inner.clone()),
                    prop::sample::subsequence(vec!["a", "b"], 0..=2),
                    prop_oneof![
                        Just(None),
                        Just(Some(json!(false))),
                        inner.clone().prop_map(Some)
                    ],
                )
                    .prop_map(|(a, b, required, additional)| {
                        let mut properties = Map::new();
                        if let Some(a) = a {
                            properties.insert("a".into(), a);
                        }
                        if let Some(b) = b {
                            properties.insert("b".into(), b);
                        }
                        let mut map = Map::new();
                        map.insert("type".into(), json!("object"));
                        map.insert("properties".into(), Value::Object(properties));
                        map.insert("required".into(), json!(required));
                        if let Some(additional) = additional {
                            map.insert("additionalProperties".into(), additional);
                        }
                        Value::Object(map)
                    }),
                (
                    inner.clone(),
                    prop::option::of(0u64..2),
                    prop::option::of(1u64..3),
                    any::<bool>()
                )
                    .prop_map(|(items, min, max, unique)| {
                        let mut map = Map::new();
                        map.insert("type".into(), json!("array"));
                        map.insert("items".into(), items);
                        if let Some(min) = min {
                            map.insert("minItems".into(), json!(min));
                        }
                        if let Some(max) = max {
                            map.insert("maxItems".into(), json!(max));
                        }
                        if unique {
                            map.insert("uniqueItems".into(), json!(true));
                        }
                        Value::Object(map)
                    }),
                (inner.clone(), inner.clone()).prop_map(|(first, second)| json!({
                    "type": "array", "prefixItems": [first], "items": second
                })),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| json!({"anyOf": [a, b]})),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| json!({"oneOf": [a, b]})),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| json!({"allOf": [a, b]})),
                inner.clone().prop_map(|a| json!({"not": a})),
                (
                    inner.clone(),
                    inner.clone(),
                    prop::option::of(inner.clone())
                )
                    .prop_map(|(condition, then, otherwise)| {
                        let mut map = Map::new();
                        map.insert("if".into(), condition);
                        map.insert("then".into(), then);
                        if let Some(otherwise) = otherwise {
                            map.insert("else".into(), otherwise);
                        }
                        Value::Object(map)
                    }),
            ]
        })
        .prop_map(|mut schema| {
            if let Value::Object(map) = &mut schema {
                map.insert(
                    "$defs".into(),
                    json!({"id": {"type": "string", "format": "uuid"}}),
                );
            }
            schema
        })
        .boxed()
}

/// Deletes keywords (when the next choice says so) and tweaks numbers, walking the schema.
fn mutate(schema: &Value, choices: &mut impl Iterator<Item = u8>) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out = Map::new();
            for (keyword, value) in map {
                if keyword == "$defs" {
                    out.insert(keyword.clone(), value.clone());
                    continue;
                }
                let choice = choices.next().unwrap_or(0);
                match choice % 8 {
                    0 => continue,
                    1 if value.is_number() => {
                        let number =
                            value.as_f64().unwrap_or(0.0) + if choice > 128 { 1.0 } else { -1.0 };
                        out.insert(keyword.clone(), json!(number.max(0.0)));
                    }
                    _ => {
                        out.insert(keyword.clone(), mutate(value, choices));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            let mut out: Vec<Value> = items.iter().map(|item| mutate(item, choices)).collect();
            if choices.next().unwrap_or(0).is_multiple_of(5) && out.len() > 1 {
                out.pop();
            }
            Value::Array(out)
        }
        other => other.clone(),
    }
}

fn value() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..5).prop_map(|n| json!(n)),
        prop_oneof![Just(json!(0.5)), Just(json!(-1.5)), Just(json!(1.0))],
        prop_oneof![
            Just(json!("")),
            Just(json!("a")),
            Just(json!("ab")),
            Just(json!("bab")),
            Just(json!("aaaaaa")),
            Just(json!("2026-01-31")),
            Just(json!("0190c0de-0000-7000-8000-000000000001")),
        ],
    ];
    leaf.prop_recursive(3, 16, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("a".to_owned()),
                    Just("b".to_owned()),
                    Just("c".to_owned())
                ],
                inner,
                0..3
            )
            .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
    .boxed()
}

/// A tiny deterministic generator, so payloads follow the writer's shape.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const POOL: &[&str] = &[
    "",
    "a",
    "ab",
    "bab",
    "aaaaaa",
    "2026-01-31",
    "0190c0de-0000-7000-8000-000000000001",
];

/// A payload shaped by `schema` (often, not always, valid for it).
fn shaped(schema: &Value, root: &Value, rng: &mut Rng, depth: usize) -> Value {
    let Value::Object(map) = schema else {
        return json!(POOL[rng.below(POOL.len())]);
    };
    if depth > 4 {
        return Value::Null;
    }
    if let Some(target) = map
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|reference| root.pointer(reference.trim_start_matches('#')))
    {
        return shaped(target, root, rng, depth + 1);
    }
    if let Some(Value::Array(values)) = map.get("enum")
        && !values.is_empty()
        && rng.below(4) != 0
    {
        return values[rng.below(values.len())].clone();
    }
    if let Some(value) = map.get("const")
        && rng.below(4) != 0
    {
        return value.clone();
    }
    for keyword in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(members)) = map.get(keyword)
            && !members.is_empty()
        {
            return shaped(&members[rng.below(members.len())], root, rng, depth + 1);
        }
    }
    let types: Vec<&str> = match map.get("type") {
        Some(Value::String(name)) => vec![name.as_str()],
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
        _ => vec![
            "null", "boolean", "object", "array", "integer", "number", "string",
        ],
    };
    match types[rng.below(types.len())] {
        "object" => {
            let mut out = Map::new();
            let required: Vec<&str> = map
                .get("required")
                .and_then(Value::as_array)
                .map(|names| names.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if let Some(Value::Object(properties)) = map.get("properties") {
                for (name, property) in properties {
                    if required.contains(&name.as_str()) || rng.below(2) == 0 {
                        out.insert(name.clone(), shaped(property, root, rng, depth + 1));
                    }
                }
            }
            for name in required {
                if !out.contains_key(name) {
                    out.insert(name.to_owned(), shaped(&json!({}), root, rng, depth + 1));
                }
            }
            if rng.below(4) == 0 {
                let extra = map
                    .get("additionalProperties")
                    .cloned()
                    .unwrap_or(json!({}));
                out.insert("c".to_owned(), shaped(&extra, root, rng, depth + 1));
            }
            Value::Object(out)
        }
        "array" => {
            let mut out = Vec::new();
            if let Some(Value::Array(prefix)) = map.get("prefixItems") {
                for item in prefix {
                    out.push(shaped(item, root, rng, depth + 1));
                }
            }
            let items = map.get("items").cloned().unwrap_or(json!({}));
            for _ in 0..rng.below(4) {
                out.push(shaped(&items, root, rng, depth + 1));
            }
            Value::Array(out)
        }
        "integer" => json!(rng.below(9) as i64 - 4),
        "number" => {
            [json!(0.5), json!(-1.5), json!(1.0), json!(2), json!(-3)][rng.below(5)].clone()
        }
        "string" => json!(POOL[rng.below(POOL.len())]),
        "boolean" => json!(rng.below(2) == 0),
        _ => Value::Null,
    }
}

fn validator(schema: &Value) -> Option<jsonschema::Validator> {
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(schema)
        .ok()
}

#[test]
fn compatible_verdicts_have_no_counterexample() {
    let mut runner = TestRunner::new(Config {
        cases: 768,
        ..Config::default()
    });
    let pair = (
        schema(),
        prop::collection::vec(any::<u8>(), 64),
        prop::option::weighted(0.2, schema()),
    );
    let compatible_pairs = std::cell::Cell::new(0usize);
    runner
        .run(
            &(pair, prop::collection::vec(value(), 16), any::<bool>(), any::<u64>()),
            |((old, choices, independent), payloads, use_views, seed)| {
                let new = independent.unwrap_or_else(|| mutate(&old, &mut choices.into_iter()));
                // Both payload-content settings, chosen by the seed.
                let content = if seed & 2 == 0 { ContentModel::Closed } else { ContentModel::Open };
                let options = Options { views: use_views, witnesses: false, content };
                if !judge(&old, &new, Direction::Backward, options).is_empty() {
                    return Ok(());
                }
                let (writer, reader) = if use_views {
                    (views::writer(&old, content), views::reader(&new))
                } else {
                    (old.clone(), new.clone())
                };
                let (Some(writer_check), Some(reader_check)) = (validator(&writer), validator(&reader)) else {
                    return Ok(());
                };
                compatible_pairs.set(compatible_pairs.get() + 1);
                let mut tries = payloads;
                tries.push(witness::sample(&writer, &writer));
                let mut rng = Rng(seed | 1);
                for _ in 0..48 {
                    tries.push(shaped(&writer, &writer, &mut rng, 0));
                }
                for payload in tries {
                    prop_assert!(
                        !writer_check.is_valid(&payload) || reader_check.is_valid(&payload),
                        "judged compatible, but {payload} is valid for the writer and rejected by the reader\nwriter: {writer}\nreader: {reader}"
                    );
                }
                Ok(())
            },
        )
        .unwrap_or_else(|failure| panic!("{failure}"));
    let compatible_pairs = compatible_pairs.get();
    println!("{compatible_pairs} compatible pairs checked against random payloads");
    assert!(
        compatible_pairs > 100,
        "too few compatible pairs ({compatible_pairs}) to say anything"
    );
}
