//! Payloads of every keyword family of `codegen/tests/fixtures/generate/` read into their
//! generated type and write back as the same JSON value; the instances are checked valid
//! against the contract's schema first, so the types accept what the schema accepts. Shapes
//! the type can tell apart from valid ones fail to read.

use evc::Registry;
use evc::serde::Serialize;
use evc::serde::de::DeserializeOwned;
use evc_generated_fixtures::{
    all_of_merge, open_objects, refs_anywhere, root_shapes, runtime_only_keywords, tagged_unions,
    tuples, untagged_unions, value_enums,
};
use serde_json::{Value, json};

/// The schema of the only version of `event` in `registry`.
fn schema(registry: &Registry, event: &str) -> Value {
    let descriptor = registry
        .events
        .iter()
        .find(|e| e.name == event)
        .unwrap_or_else(|| panic!("{event} is registered"));
    serde_json::from_str(descriptor.versions[0].schema).expect("schema is JSON")
}

/// Asserts `instance` is valid for `event`, reads into `T` and writes back unchanged.
fn round_trips<T: DeserializeOwned + Serialize>(registry: &Registry, event: &str, instance: Value) {
    let validator = jsonschema::draft202012::options()
        .build(&schema(registry, event))
        .expect("schema compiles");
    assert!(
        validator.is_valid(&instance),
        "{event}: the test instance is not valid: {instance}"
    );
    let typed: T = serde_json::from_value(instance.clone())
        .unwrap_or_else(|error| panic!("{event}: {instance} does not read: {error}"));
    let written = serde_json::to_value(&typed).expect("writes");
    assert_eq!(written, instance, "{event}: the payload changed on the way");
}

/// Asserts `instance` is invalid for `event` and does not read into `T`.
fn refused<T: DeserializeOwned>(registry: &Registry, event: &str, instance: Value) {
    let validator = jsonschema::draft202012::options()
        .build(&schema(registry, event))
        .expect("schema compiles");
    assert!(
        !validator.is_valid(&instance),
        "{event}: the refused instance is valid: {instance}"
    );
    assert!(
        serde_json::from_value::<T>(instance.clone()).is_err(),
        "{event}: {instance} reads although the type can refuse it"
    );
}

const CANVAS: &str = "6f9c1a52-3f0e-4d7e-9a53-0c6d8e2b4a10";

#[test]
fn tagged_unions_read_by_their_tag() {
    use tagged_unions::payloads::ShapeDrawnV1 as T;
    let r = &tagged_unions::REGISTRY;
    let e = "shape.drawn";
    round_trips::<T>(
        r,
        e,
        json!({"canvas_id": CANVAS, "shape": {"kind": "circle", "radius": 1.5}}),
    );
    round_trips::<T>(
        r,
        e,
        json!({"canvas_id": CANVAS, "shape": {"kind": "rect", "width": 2, "height": 3}}),
    );
    round_trips::<T>(r, e, json!({"canvas_id": CANVAS, "shape": {"kind": "dot"}}));
    round_trips::<T>(
        r,
        e,
        json!({"canvas_id": CANVAS, "shape": {"kind": "dot"}, "previous": {"kind": "blob", "size": 4}}),
    );
    round_trips::<T>(
        r,
        e,
        json!({"canvas_id": CANVAS, "shape": {"kind": "dot"}, "previous": {"kind": "circle", "radius": 2.0, "colour": "red"}}),
    );
    refused::<T>(
        r,
        e,
        json!({"canvas_id": CANVAS, "shape": {"kind": "hexagon"}}),
    );
    refused::<T>(
        r,
        e,
        json!({"canvas_id": CANVAS, "shape": {"kind": "rect", "width": 2}}),
    );
}

#[test]
fn untagged_unions_keep_each_json_type() {
    use untagged_unions::payloads::ReadingTakenV1 as T;
    let r = &untagged_unions::REGISTRY;
    let e = "reading.taken";
    round_trips::<T>(r, e, json!({"sensor": "s-1", "value": 2.5, "label": null}));
    round_trips::<T>(r, e, json!({"sensor": 17, "value": 3, "label": "kitchen"}));
    round_trips::<T>(r, e, json!({"sensor": 17, "value": true, "label": 4}));
    round_trips::<T>(
        r,
        e,
        json!({"sensor": 17, "value": [1.5, 2.5], "label": null}),
    );
    round_trips::<T>(
        r,
        e,
        json!({"sensor": 1, "value": 1, "label": null, "position": {"lat": 1.5, "lon": 2.5}}),
    );
    round_trips::<T>(
        r,
        e,
        json!({"sensor": 1, "value": 1, "label": null, "position": "home"}),
    );
    refused::<T>(r, e, json!({"sensor": true, "value": 1, "label": null}));
    refused::<T>(r, e, json!({"sensor": 1, "value": "high", "label": null}));
}

#[test]
fn all_of_parts_merge_into_one_struct() {
    use all_of_merge::payloads::AccountOpenedV1 as T;
    let r = &all_of_merge::REGISTRY;
    let e = "account.opened";
    round_trips::<T>(r, e, json!({"account_id": CANVAS, "opened_by": "ops"}));
    round_trips::<T>(
        r,
        e,
        json!({"account_id": CANVAS, "opened_by": "ops", "note": "n", "code": "ABC",
               "owner": {"name": "Ada", "city": "London", "title": "Countess"}}),
    );
    refused::<T>(r, e, json!({"account_id": CANVAS}));
}

#[test]
fn prefix_items_are_tuples_when_their_length_is_fixed() {
    use tuples::payloads::PointPlottedV1 as T;
    let r = &tuples::REGISTRY;
    let e = "point.plotted";
    let valid = json!({"at": [1.5, 2.5, "a"], "range": [1, 2], "tags": ["x", "y", "z"],
                       "trail": ["walk", 3, {"any": "thing"}]});
    round_trips::<T>(r, e, valid);
    round_trips::<T>(
        r,
        e,
        json!({"at": [1.5, 2.5, "a"], "range": [1, 2], "tags": [], "trail": []}),
    );
    refused::<T>(
        r,
        e,
        json!({"at": [1.5, 2.5], "range": [1, 2], "tags": [], "trail": []}),
    );
    refused::<T>(
        r,
        e,
        json!({"at": [1.5, 2.5, "a"], "range": [1, 2, 3], "tags": [], "trail": []}),
    );
}

#[test]
fn value_enums_write_the_exact_json_value() {
    use value_enums::payloads::DialTurnedV1 as T;
    let r = &value_enums::REGISTRY;
    let e = "dial.turned";
    for setting in [json!(0.5), json!("auto"), json!(false), json!(null)] {
        round_trips::<T>(
            r,
            e,
            json!({"level": -1, "armed": true, "setting": setting, "schema_version": 2,
                   "shape": {"kind": "fixed"}}),
        );
    }
    round_trips::<T>(
        r,
        e,
        json!({"level": 3, "armed": true, "setting": "auto", "schema_version": 2}),
    );
    refused::<T>(
        r,
        e,
        json!({"level": 4, "armed": true, "setting": "auto", "schema_version": 2}),
    );
    refused::<T>(
        r,
        e,
        json!({"level": 1, "armed": false, "setting": "auto", "schema_version": 2}),
    );
    refused::<T>(
        r,
        e,
        json!({"level": 1, "armed": true, "setting": 0.7, "schema_version": 2}),
    );
}

#[test]
fn references_anywhere_and_recursion_through_enums() {
    use refs_anywhere::payloads::TreeGrownV1 as T;
    let r = &refs_anywhere::REGISTRY;
    let e = "tree.grown";
    let tree = json!({"children": ["a", {"children": ["b", {"children": []}]}]});
    round_trips::<T>(r, e, json!({"root": tree, "home": {"street": "Main"}}));
    round_trips::<T>(
        r,
        e,
        json!({"root": "leaf", "home": {"street": "Main"}, "work": {"street": "Side"},
               "parent": {"root": "up", "home": {"street": "Old"}}}),
    );
    refused::<T>(r, e, json!({"root": 3, "home": {"street": "Main"}}));
}

#[test]
fn open_objects_keep_unknown_keys() {
    use open_objects::payloads::ProfileUpdatedV1 as T;
    let r = &open_objects::REGISTRY;
    let e = "profile.updated";
    round_trips::<T>(
        r,
        e,
        json!({"profile_id": CANVAS, "extra": "listed", "nickname": "Al", "age": 3,
               "scores": {"math": 3}, "settings": {"theme": "dark", "beta": true},
               "anything": {"a": [1, {"b": null}]}}),
    );
    refused::<T>(r, e, json!({"profile_id": CANVAS, "scores": {"math": "A"}}));
    refused::<T>(
        r,
        e,
        json!({"profile_id": CANVAS, "settings": {"theme": "dark", "beta": 1}}),
    );
}

#[test]
fn constraints_only_keywords_keep_the_base_type() {
    use runtime_only_keywords::payloads::OrderCheckedV1 as T;
    let r = &runtime_only_keywords::REGISTRY;
    let e = "order.checked";
    round_trips::<T>(
        r,
        e,
        json!({"code": "ABC", "items": [1, 12], "discount": 55.0, "email": "a@b.c"}),
    );
    round_trips::<T>(r, e, json!({"code": "XYZ", "items": [10], "phone": "123"}));
    refused::<T>(r, e, json!({"code": 5, "items": [10], "phone": "123"}));
}

#[test]
fn any_root_is_the_payload_type() {
    let r = &root_shapes::REGISTRY;
    use root_shapes::payloads::{DoorMovedV1, LampLitV1, NoteClearedV1, TallyCountedV1};
    round_trips::<NoteClearedV1>(r, "note.cleared", json!({"note_id": "n1"}));
    round_trips::<NoteClearedV1>(r, "note.cleared", json!(null));
    refused::<NoteClearedV1>(r, "note.cleared", json!({"note": "n1"}));
    round_trips::<TallyCountedV1>(r, "tally.counted", json!({"apples": 3, "pears": 0}));
    refused::<TallyCountedV1>(r, "tally.counted", json!({"apples": "three"}));
    round_trips::<DoorMovedV1>(
        r,
        "door.moved",
        json!({"action": "opened", "door_id": "d1", "angle": 90}),
    );
    round_trips::<DoorMovedV1>(
        r,
        "door.moved",
        json!({"action": "closed", "door_id": "d1"}),
    );
    refused::<DoorMovedV1>(
        r,
        "door.moved",
        json!({"action": "slammed", "door_id": "d1"}),
    );
    // The order key of a payload that is not a struct is read from its JSON form.
    let closed: DoorMovedV1 =
        serde_json::from_value(json!({"action": "closed", "door_id": "d1"})).expect("reads");
    assert_eq!(
        evc::RegisteredEvent::order_key(&closed).as_deref(),
        Some("closed")
    );
    round_trips::<LampLitV1>(r, "lamp.lit", json!({"lamp_id": "l1", "lumens": 800}));
    refused::<LampLitV1>(r, "lamp.lit", json!({"lumens": 800}));
}
