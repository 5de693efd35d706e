//! Round trip through the generated types: for every registered event version, instances valid
//! under the contract schema deserialize into the generated type, serialize back, and still
//! validate; instances that break the payload's shape are refused by the type.

use evc_generated::REGISTRY;
use evc_generated::payloads::Event;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};

/// A strategy producing instances of `schema` (the subset of JSON Schema payloads use).
fn instances(schema: &Value, root: &Value) -> BoxedStrategy<Value> {
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let target = root
            .pointer(reference.trim_start_matches('#'))
            .expect("references resolve")
            .clone();
        return instances(&target, root);
    }
    if let Some(constant) = schema.get("const") {
        return Just(constant.clone()).boxed();
    }
    if let Some(Value::Array(values)) = schema.get("enum") {
        return prop::sample::select(values.clone()).boxed();
    }
    let (kind, nullable) = match schema.get("type") {
        Some(Value::String(kind)) => (kind.clone(), false),
        Some(Value::Array(kinds)) => (
            kinds
                .iter()
                .filter_map(Value::as_str)
                .find(|k| *k != "null")
                .unwrap_or("null")
                .to_owned(),
            kinds.iter().any(|k| k == "null"),
        ),
        _ => ("object".to_owned(), false),
    };
    let base = match kind.as_str() {
        "object" => object(schema, root),
        "string" => string(schema),
        "integer" => {
            let min = schema
                .get("minimum")
                .and_then(Value::as_i64)
                .unwrap_or(-1_000_000);
            let max = schema
                .get("maximum")
                .and_then(Value::as_i64)
                .unwrap_or(1_000_000);
            (min..=max).prop_map(Value::from).boxed()
        }
        "number" => {
            let min = schema
                .get("minimum")
                .and_then(Value::as_f64)
                .unwrap_or(-1.0e6);
            let max = schema
                .get("maximum")
                .and_then(Value::as_f64)
                .unwrap_or(1.0e6);
            (min..=max).prop_map(|n| json!(n)).boxed()
        }
        "boolean" => any::<bool>().prop_map(Value::Bool).boxed(),
        "array" => {
            let items = schema
                .get("items")
                .cloned()
                .unwrap_or(json!({"type": "string"}));
            let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
            let max = schema
                .get("maxItems")
                .and_then(Value::as_u64)
                .unwrap_or(min as u64 + 3) as usize;
            prop::collection::vec(instances(&items, root), min..=max)
                .prop_map(Value::Array)
                .boxed()
        }
        "null" => Just(Value::Null).boxed(),
        other => panic!("no instance strategy for type {other}"),
    };
    if nullable {
        prop_oneof![Just(Value::Null), base].boxed()
    } else {
        base
    }
}

fn object(schema: &Value, root: &Value) -> BoxedStrategy<Value> {
    let required: Vec<String> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let mut fields: Vec<BoxedStrategy<Option<(String, Value)>>> = Vec::new();
    for (name, property) in schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let name = name.clone();
        let values = instances(property, root);
        if required.contains(&name) {
            fields.push(values.prop_map(move |v| Some((name.clone(), v))).boxed());
        } else {
            fields.push(prop::option::of(values.prop_map(move |v| (name.clone(), v))).boxed());
        }
    }
    fields
        .prop_map(|pairs| Value::Object(pairs.into_iter().flatten().collect::<Map<_, _>>()))
        .boxed()
}

fn string(schema: &Value) -> BoxedStrategy<Value> {
    let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
    let max = schema
        .get("maxLength")
        .and_then(Value::as_u64)
        .unwrap_or(24) as usize;
    match schema.get("format").and_then(Value::as_str) {
        Some("uuid") => any::<[u8; 16]>()
            .prop_map(|b| {
                let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
                json!(format!(
                    "{}-{}-{}-{}-{}",
                    &hex[..8],
                    &hex[8..12],
                    &hex[12..16],
                    &hex[16..20],
                    &hex[20..]
                ))
            })
            .boxed(),
        Some("date-time") => (
            1970u32..2100,
            1u32..=12,
            1u32..=28,
            0u32..24,
            0u32..60,
            0u32..60,
            prop::option::of(-12i32..=12),
        )
            .prop_map(|(y, mo, d, h, mi, s, offset)| {
                let zone = offset.map_or("Z".to_owned(), |o| {
                    format!("{}{:02}:00", if o < 0 { '-' } else { '+' }, o.abs())
                });
                json!(format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{zone}"))
            })
            .boxed(),
        _ => {
            let pattern = schema
                .get("pattern")
                .and_then(Value::as_str)
                .map(|p| p.trim_start_matches('^').trim_end_matches('$').to_owned())
                .unwrap_or_else(|| format!("[a-zA-Z0-9 _.-]{{{min},{max}}}"));
            proptest::string::string_regex(&pattern)
                .expect("pattern is a valid regex")
                .prop_filter("length within bounds", move |s| {
                    (min..=max).contains(&s.chars().count())
                })
                .prop_map(Value::String)
                .boxed()
        }
    }
}

fn validator(schema: &Value) -> jsonschema::Validator {
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(schema)
        .expect("registered schemas compile")
}

#[test]
fn valid_instances_survive_the_generated_types() {
    let mut checked = 0;
    for event in REGISTRY.events {
        for version in event.versions {
            let schema: Value = serde_json::from_str(version.schema).expect("schema JSON");
            let validator = validator(&schema);
            let mut runner = TestRunner::new(Config {
                cases: 48,
                ..Config::default()
            });
            runner
                .run(&instances(&schema, &schema), |instance| {
                    prop_assert!(
                        validator.is_valid(&instance),
                        "generator made an invalid instance {instance}"
                    );
                    let decoded = Event::from_json(event.name, version.major, instance.clone())
                        .map_err(|e| {
                            TestCaseError::fail(format!(
                                "{} {}: {e}: {instance}",
                                event.name, version.version
                            ))
                        })?;
                    let encoded = serde_json::to_value(&decoded).expect("serializes");
                    prop_assert!(
                        validator.is_valid(&encoded),
                        "{} {}: re-encoded {encoded} is invalid",
                        event.name,
                        version.version
                    );
                    Ok(())
                })
                .unwrap_or_else(|failure| panic!("{failure}"));
            checked += 1;
        }
    }
    assert_eq!(
        checked,
        REGISTRY
            .events
            .iter()
            .map(|e| e.versions.len())
            .sum::<usize>()
    );
}

#[test]
fn shape_breaking_instances_are_refused_by_the_types() {
    for event in REGISTRY.events {
        for version in event.versions {
            let schema: Value = serde_json::from_str(version.schema).expect("schema JSON");
            let mut runner = TestRunner::new(Config {
                cases: 16,
                ..Config::default()
            });
            let required: Vec<String> = schema["required"]
                .as_array()
                .map(|r| {
                    r.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            runner
                .run(&instances(&schema, &schema), |instance| {
                    let decode = |value: Value| Event::from_json(event.name, version.major, value);
                    // Readers are open (docs/compat.md): an unknown key is ignored, and
                    // writing the payload again emits only the contract's fields.
                    let mut unknown = instance.clone();
                    unknown["zz_not_in_contract"] = json!("x");
                    let tolerated = decode(unknown);
                    prop_assert!(
                        tolerated.is_ok(),
                        "{}: unknown key refused: {:?}",
                        event.name,
                        tolerated.err()
                    );
                    prop_assert_eq!(
                        tolerated
                            .ok()
                            .and_then(|decoded| serde_json::to_value(&decoded).ok()),
                        decode(instance.clone())
                            .ok()
                            .and_then(|decoded| serde_json::to_value(&decoded).ok())
                    );
                    for field in &required {
                        let mut missing = instance.clone();
                        missing.as_object_mut().expect("object").remove(field);
                        prop_assert!(
                            decode(missing).is_err(),
                            "{}: missing `{field}` accepted",
                            event.name
                        );
                        let mut wrong = instance.clone();
                        wrong[field.as_str()] = json!({"wrong": ["type"]});
                        prop_assert!(
                            decode(wrong).is_err(),
                            "{}: `{field}` of the wrong type accepted",
                            event.name
                        );
                    }
                    Ok(())
                })
                .unwrap_or_else(|failure| panic!("{failure}"));
        }
    }
}

#[test]
fn unregistered_types_and_majors_are_refused() {
    assert!(Event::from_json("iu.bron", 1, json!({})).is_err());
    assert!(Event::from_json("iu.born", 9, json!({})).is_err());
}
