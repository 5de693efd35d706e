//! Importing AsyncAPI 3.0 documents: the six official examples and evc's own document.
//!
//! Each official example is imported, the contract files are written to a temporary directory
//! and loaded, and the document rendered from them must validate against the official schema,
//! pass the cross-object checks, and have the same channels, operations and messages as the
//! original. "The same", with names normalized by the import:
//!
//! - **channels**: each original channel maps (through [`Imported::channels`]) to the event types
//!   its messages became; the rendered document's channel addresses are exactly the union of
//!   those event types. A channel with several kinds of message and no `x-evc-version` becomes
//!   one event type (and so one channel) per kind.
//! - **messages**: for each original channel, the rendered channels of its event types hold as
//!   many messages in all as the original channel held.
//! - **operations**, compared by action and channel address: every original operation appears as
//!   the same action on the rendered channel of each event type of its messages; the rendered
//!   document has no other `receive` operation, and its only other `send` operations are those
//!   of event types no original operation sends (evc declares a producer for every event type).
//!
//! Conformance data is read from `EVC_CONFORMANCE_DIR` (default `<repo>/../shared/conformance`).
//! When it is absent the tests fail under `CI=true` and are skipped with a note otherwise.

mod conformance_data;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use evc_codegen::ContractSet;
use evc_codegen::emit::Layout;
use evc_codegen::emit::asyncapi::{self, check_document};
use evc_codegen::import::asyncapi::{Imported, import};
use evc_codegen::model::ContentModel;

const EXAMPLES: &[&str] = &[
    "adeo-kafka-request-reply-asyncapi.yml",
    "gitter-streaming-asyncapi.yml",
    "operation-security-asyncapi.yml",
    "simple-asyncapi.yml",
    "streetlights-kafka-asyncapi.yml",
    "streetlights-mqtt-asyncapi.yml",
];

fn conformance_dir() -> Option<PathBuf> {
    conformance_data::folder("asyncapi", "3.0.0-without-id.json")
}

fn official_validator(dir: &Path) -> jsonschema::Validator {
    let text = std::fs::read_to_string(dir.join("3.0.0-without-id.json")).expect("schema readable");
    let schema: serde_json::Value = serde_json::from_str(&text).expect("schema is JSON");
    jsonschema::draft7::options()
        .should_validate_formats(true)
        .build(&schema)
        .expect("the official schema compiles")
}

fn yaml_to_json(path: &str, text: &str) -> serde_json::Value {
    let file = evc_codegen::SourceFile::new(path, text);
    evc_codegen::yaml::parse(&file)
        .unwrap_or_else(|error| panic!("{path} parses: {}", error.to_short_string()))
        .expect("not empty")
        .to_json()
}

/// Writes the imported files to a fresh directory and loads them.
fn load(imported: &Imported, what: &str) -> (tempfile::TempDir, ContractSet) {
    let dir = tempfile::tempdir().expect("temporary directory");
    for file in &imported.files {
        let path = dir.path().join(&file.path);
        std::fs::create_dir_all(path.parent().expect("has a parent")).expect("create folder");
        std::fs::write(&path, &file.contents).expect("write contract file");
    }
    let loaded = match ContractSet::load(dir.path()) {
        Ok(loaded) => loaded,
        Err(evc_codegen::LoadError::Invalid { diagnostics, .. }) => panic!(
            "{what}: the imported contracts do not load:\n{}\n\nfiles:\n{}",
            diagnostics
                .iter()
                .map(evc_codegen::Diagnostic::to_short_string)
                .collect::<Vec<_>>()
                .join("\n"),
            imported
                .files
                .iter()
                .map(|file| format!("--- {}\n{}", file.path.display(), file.contents))
                .collect::<String>()
        ),
        Err(other) => panic!("{what}: {other}"),
    };
    (dir, loaded.contracts)
}

fn object(value: &serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    value.as_object().cloned().unwrap_or_default()
}

/// The channel id an operation refers to.
fn channel_of(operation: &serde_json::Value) -> String {
    operation["channel"]["$ref"]
        .as_str()
        .and_then(|reference| reference.strip_prefix("#/channels/"))
        .expect("operations refer to root channels")
        .to_owned()
}

/// Checks the round trip of one example, as described in the module documentation.
fn round_trip(dir: &Path, validator: &jsonschema::Validator, name: &str) -> Imported {
    let text = std::fs::read_to_string(dir.join("examples").join(name)).expect("example readable");
    let original = yaml_to_json(name, &text);
    let imported = import(&text).unwrap_or_else(|error| panic!("{name}: {error}"));
    let (_dir, set) = load(&imported, name);
    let artifact = asyncapi::render(&set, &Layout::default()).expect("renders");
    let rendered = yaml_to_json("asyncapi.yaml", &artifact.contents);

    let errors: Vec<String> = validator
        .iter_errors(&rendered)
        .map(|error| format!("{}: {error}", error.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{name}: schema errors: {errors:#?}");
    let problems = check_document(&rendered);
    assert!(
        problems.is_empty(),
        "{name}: cross-object problems: {problems:#?}"
    );
    assert!(
        asyncapi::parity(&set, "asyncapi.yaml", &artifact.contents).is_empty(),
        "{name}: the re-rendered document drifts from its contracts"
    );

    // Channels: original channel id -> event types (= rendered channel addresses).
    let rendered_channels = object(&rendered["channels"]);
    let address_of: BTreeMap<String, String> = rendered_channels
        .iter()
        .map(|(id, channel)| {
            (
                id.clone(),
                channel["address"].as_str().expect("address").to_owned(),
            )
        })
        .collect();
    let rendered_addresses: BTreeSet<&String> = address_of.values().collect();
    let mut expected_addresses = BTreeSet::new();
    let original_channels = object(&original["channels"]);
    assert_eq!(
        imported.channels.len(),
        original_channels.len(),
        "{name}: every channel is imported"
    );
    for channel in &imported.channels {
        let events: BTreeSet<&String> = channel.messages.iter().map(|m| &m.event).collect();
        assert!(
            !events.is_empty(),
            "{name}: channel {} maps to nothing",
            channel.id
        );
        expected_addresses.extend(events.iter().copied());
        let original_count = object(&original_channels[&channel.id]["messages"]).len();
        let rendered_count: usize = rendered_channels
            .values()
            .filter(|rendered| {
                rendered["address"]
                    .as_str()
                    .is_some_and(|address| events.iter().any(|event| *event == address))
            })
            .map(|rendered| object(&rendered["messages"]).len())
            .sum();
        assert_eq!(
            rendered_count, original_count,
            "{name}: messages of channel {}",
            channel.id
        );
    }
    assert_eq!(
        rendered_addresses, expected_addresses,
        "{name}: channels by address"
    );

    // Operations by (action, channel address).
    let rendered_operations: BTreeSet<(String, String)> = object(&rendered["operations"])
        .values()
        .map(|operation| {
            (
                operation["action"].as_str().expect("action").to_owned(),
                address_of[&channel_of(operation)].clone(),
            )
        })
        .collect();
    let mut expected_operations = BTreeSet::new();
    let mut sent = BTreeSet::new();
    assert_eq!(
        imported.operations.len(),
        object(&original["operations"]).len(),
        "{name}: every operation is imported"
    );
    for operation in &imported.operations {
        assert!(
            !operation.events.is_empty(),
            "{name}: {} maps to nothing",
            operation.id
        );
        for event in &operation.events {
            expected_operations.insert((operation.action.clone(), event.clone()));
            if operation.action == "send" {
                sent.insert(event.clone());
            }
        }
    }
    for event in &expected_addresses {
        if !sent.contains(*event) {
            expected_operations.insert(("send".to_owned(), (*event).clone()));
        }
    }
    assert_eq!(
        rendered_operations, expected_operations,
        "{name}: operations by action and channel"
    );
    imported
}

#[test]
fn the_official_examples_import_load_and_render_back() {
    let Some(dir) = conformance_dir() else {
        return;
    };
    let validator = official_validator(&dir);
    for name in EXAMPLES {
        let original = yaml_to_json(
            name,
            &std::fs::read_to_string(dir.join("examples").join(name)).expect("readable"),
        );
        let errors: Vec<String> = validator
            .iter_errors(&original)
            .map(|error| error.to_string())
            .collect();
        assert!(errors.is_empty(), "{name} is a valid example: {errors:?}");
        assert_eq!(
            check_document(&original),
            [],
            "{name} passes the cross-object checks"
        );
        let imported = round_trip(&dir, &validator, name);
        eprintln!(
            "{name}: {} files, {} unsupported, {} adapted",
            imported.files.len(),
            imported.unsupported.len(),
            imported.adapted.len()
        );
    }
}

#[test]
fn nothing_unsupported_is_dropped_silently() {
    let Some(dir) = conformance_dir() else {
        return;
    };
    let read = |name: &str| {
        let text = std::fs::read_to_string(dir.join("examples").join(name)).expect("readable");
        import(&text).unwrap_or_else(|error| panic!("{name}: {error}"))
    };
    let has = |imported: &Imported, prefix: &str| {
        imported
            .unsupported
            .iter()
            .any(|note| note.starts_with(prefix))
    };

    let kafka = read("streetlights-kafka-asyncapi.yml");
    for pointer in [
        "/servers: ",
        "/channels/lightingMeasured/parameters: ",
        "/operations/turnOn/traits: ",
        "/components/messages/lightMeasured/traits: ",
        "/components/securitySchemes: ",
        "/components/operationTraits: ",
        "/components/messageTraits: ",
        "/info/license: ",
    ] {
        assert!(
            has(&kafka, pointer),
            "{pointer} in {:#?}",
            kafka.unsupported
        );
    }
    assert!(
        kafka
            .channels
            .iter()
            .any(|channel| channel.messages[0].event
                == "smartylighting.streetlights.1.0.event.lighting.measured"),
        "{:#?}",
        kafka.channels
    );

    let adeo = read("adeo-kafka-request-reply-asyncapi.yml");
    for pointer in [
        "/operations/receiveACostingRequest/reply: ",
        "/operations/receiveACostingRequest/bindings: ",
        "/components/messages/costingRequestV1/correlationId: ",
        "/components/messages/costingRequestV1/headers: ",
        "/components/messages/costingRequestV1/payload: ",
        "/components/correlationIds: ",
    ] {
        assert!(has(&adeo, pointer), "{pointer} in {:#?}", adeo.unsupported);
    }
    // The schemas only the headers used are reported as unused, not lost.
    assert!(
        has(&adeo, "/components/schemas/RequestId: "),
        "{:#?}",
        adeo.unsupported
    );

    let security = read("operation-security-asyncapi.yml");
    assert!(has(&security, "/operations/sendAuthRevoke/security: "));
    assert!(
        security
            .adapted
            .iter()
            .any(|note| note.contains("eiasToken") && note.contains("credential_key_names")),
        "{:#?}",
        security.adapted
    );

    let gitter = read("gitter-streaming-asyncapi.yml");
    assert!(has(&gitter, "/id: "));
    // The heartbeat's payload is a string, not an object: kept, but its `"\r\n"` cannot become
    // Rust docs, so its enum is reported and kept as an annotation.
    assert!(has(
        &gitter,
        "/components/messages/heartbeat/payload/schema/enum: "
    ));
    let heartbeat = gitter
        .files
        .iter()
        .find(|file| file.path == Path::new("events/gitter_streaming_api.rooms.heartbeat.yaml"))
        .expect("the heartbeat event file");
    let heartbeat = yaml_to_json("heartbeat.yaml", &heartbeat.contents);
    assert_eq!(
        heartbeat["versions"][0]["schema"],
        serde_json::json!({"type": "string", "x-enum": ["\r\n"]})
    );
    let events: BTreeSet<&str> = gitter.channels[0]
        .messages
        .iter()
        .map(|message| message.event.as_str())
        .collect();
    assert_eq!(
        events,
        BTreeSet::from([
            "gitter_streaming_api.rooms.chat_message",
            "gitter_streaming_api.rooms.heartbeat"
        ])
    );
}

#[test]
fn evc_documents_import_to_contracts_that_render_the_same_document() {
    let contracts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts");
    let set = ContractSet::load(contracts).expect("loads").contracts;
    let first = asyncapi::render(&set, &Layout::default()).expect("renders");
    let imported = import(&first.contents).expect("imports");
    assert_eq!(imported.unsupported, Vec::<String>::new());
    let (_dir, reloaded) = load(&imported, "evc's own document");
    let second = asyncapi::render(&reloaded, &Layout::default()).expect("renders");
    assert_eq!(first.contents, second.contents);
}

/// Executor classes come back only where the contracts they make load: a consumer naming a
/// class the document does not define loses it (with a note), and classes that not every
/// consumer names are not imported at all (with a note); either way the contracts load.
#[test]
fn executor_classes_import_only_where_the_contracts_load() {
    let contracts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts");
    let set = ContractSet::load(contracts).expect("loads").contracts;
    let rendered = asyncapi::render(&set, &Layout::default()).expect("renders");
    let document = yaml_to_json("asyncapi.yaml", &rendered.contents);

    let (_dir, reloaded) = load(
        &import(&serde_json::to_string(&document).expect("json")).expect("imports"),
        "the whole document",
    );
    assert_eq!(reloaded.executor_classes, set.executor_classes);

    // The receive operations of `audit` name a class the document does not define.
    let mut unknown = document.clone();
    for operation in unknown["operations"]
        .as_object_mut()
        .expect("operations")
        .values_mut()
        .filter(|operation| operation["x-evc-consumer"] == "audit")
    {
        operation["x-evc-executor-class"] = serde_json::json!("sql.nowhere");
    }
    let imported = import(&serde_json::to_string(&unknown).expect("json")).expect("imports");
    assert!(
        imported
            .unsupported
            .iter()
            .any(|note| note.contains("`sql.nowhere` is not an active `sql` executor class")),
        "{:?}",
        imported.unsupported
    );
    assert!(
        imported
            .adapted
            .iter()
            .any(|note| note.contains("not every consumer names an executor class")),
        "{:?}",
        imported.adapted
    );
    let (_dir, reloaded) = load(&imported, "a consumer with an unknown class");
    assert!(reloaded.executor_classes.is_empty());
    assert!(
        reloaded
            .consumers
            .values()
            .all(|consumer| consumer.executor_class.is_none())
    );
}

/// A discriminated union, a tuple and an integer enum in a closed payload, and an open object in
/// another: the contracts load and hold the schemas as the document wrote them.
const KEPT_AS_WRITTEN: &str = r"
asyncapi: 3.0.0
info: {title: Shop, version: 1.0.0}
channels:
  orderPlaced:
    address: shop/order/placed
    messages:
      placed:
        payload:
          schemaFormat: application/schema+json;version=draft-2020-12
          schema:
            type: object
            additionalProperties: false
            required: [order_id, line, priority]
            properties:
              order_id: {type: string, format: uuid}
              line:
                oneOf:
                  - type: object
                    additionalProperties: false
                    required: [kind, sku]
                    properties:
                      kind: {const: product}
                      sku: {type: string}
                  - type: object
                    additionalProperties: false
                    required: [kind, hours]
                    properties:
                      kind: {const: service}
                      hours: {type: integer, minimum: 1}
              position:
                type: array
                prefixItems: [{type: number}, {type: number}]
                items: false
              priority: {type: integer, enum: [1, 2, 3]}
  orderAnnotated:
    address: shop/order/annotated
    messages:
      annotated:
        payload:
          type: object
          required: [order_id]
          properties:
            order_id: {type: string}
            labels: {type: object}
";

#[test]
fn unions_tuples_enums_and_open_objects_import_as_written() {
    let original = yaml_to_json("kept.yaml", KEPT_AS_WRITTEN);
    let imported = import(KEPT_AS_WRITTEN).expect("imports");
    let dir = tempfile::tempdir().expect("temporary directory");
    for file in &imported.files {
        let path = dir.path().join(&file.path);
        std::fs::create_dir_all(path.parent().expect("has a parent")).expect("create folder");
        std::fs::write(&path, &file.contents).expect("write contract file");
    }
    let set = ContractSet::load(dir.path())
        .unwrap_or_else(|error| panic!("the imported contracts do not load: {error}"))
        .contracts;
    assert_eq!(imported.unsupported, Vec::<String>::new());

    let file = |path: &str| {
        imported
            .files
            .iter()
            .find(|file| file.path == Path::new(path))
            .map(|file| file.contents.as_str())
            .unwrap_or_else(|| panic!("{path} is written"))
    };
    let written_schema =
        |path: &str| yaml_to_json(path, file(path))["versions"][0]["schema"].clone();
    let placed = &original["channels"]["orderPlaced"]["messages"]["placed"]["payload"]["schema"];
    let annotated = &original["channels"]["orderAnnotated"]["messages"]["annotated"]["payload"];
    assert_eq!(&written_schema("events/shop.order.placed.yaml"), placed);
    assert_eq!(
        &written_schema("events/shop.order.annotated.yaml"),
        annotated
    );
    assert_eq!(&*set.events["shop.order.placed"].versions[0].schema, placed);
    assert_eq!(
        set.events["shop.order.placed"].content,
        ContentModel::Closed
    );
    assert_eq!(
        &*set.events["shop.order.annotated"].versions[0].schema,
        annotated
    );
    assert_eq!(
        set.events["shop.order.annotated"].content,
        ContentModel::Open
    );

    // Only the open event type says so; the project keeps the closed default.
    assert!(
        file("events/shop.order.annotated.yaml").contains("payload_policy:\n  content: open\n"),
        "{}",
        file("events/shop.order.annotated.yaml")
    );
    assert!(!file("events/shop.order.placed.yaml").contains("payload_policy"));
    assert!(
        !file("evc.yaml").contains("content"),
        "{}",
        file("evc.yaml")
    );
    // Nothing about the payloads was adapted.
    assert!(
        !imported
            .adapted
            .iter()
            .any(|note| note.contains("/payload")),
        "{:#?}",
        imported.adapted
    );
}
