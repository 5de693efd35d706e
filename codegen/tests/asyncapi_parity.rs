//! `evc check`'s parity between the contracts and the AsyncAPI document: none for the rendered
//! document, and drift in either direction named with a place in both files.

use std::path::Path;

use evc_codegen::emit::Layout;
use evc_codegen::emit::asyncapi::{self, parity};
use evc_codegen::{ContractSet, Diagnostic, Rule};

const DOC: &str = "asyncapi/asyncapi.yaml";

fn contracts() -> ContractSet {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts");
    ContractSet::load(dir)
        .expect("the reference contracts load")
        .contracts
}

fn rendered(set: &ContractSet) -> serde_json::Value {
    asyncapi::render_json(set).expect("renders")
}

fn yaml(doc: &serde_json::Value) -> String {
    serde_saphyr::to_string(doc).expect("serializes")
}

/// The 1-based number of the first line equal to `line`.
fn line_of(text: &str, line: &str) -> u32 {
    let index = text
        .lines()
        .position(|candidate| candidate == line)
        .unwrap_or_else(|| panic!("`{line}` is not a line of the text"));
    u32::try_from(index + 1).expect("small")
}

fn contract_line(set: &ContractSet, file: &str, line: &str) -> u32 {
    line_of(set.sources.get(file).expect("loaded").text(), line)
}

fn of_rule(drift: &[Diagnostic], rule: Rule) -> Vec<&Diagnostic> {
    drift.iter().filter(|d| d.rule == rule).collect()
}

fn show(drift: &[Diagnostic]) -> String {
    drift
        .iter()
        .map(Diagnostic::to_short_string)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_rendered_document_has_no_drift() {
    let set = contracts();
    let artifact = asyncapi::render(&set, &Layout::default()).expect("renders");
    let drift = parity(&set, DOC, &artifact.contents);
    assert!(drift.is_empty(), "{}", show(&drift));
    // Layout does not matter, only content: the same document as plain YAML has no drift.
    let drift = parity(&set, DOC, &yaml(&rendered(&set)));
    assert!(drift.is_empty(), "{}", show(&drift));
}

#[test]
fn a_removed_channel_is_missing_with_both_locations() {
    let set = contracts();
    let mut doc = rendered(&set);
    doc["channels"]
        .as_object_mut()
        .expect("channels")
        .shift_remove("iu.born");
    let text = yaml(&doc);
    let drift = parity(&set, DOC, &text);

    let missing = of_rule(&drift, Rule::AsyncApiMissingChannel);
    assert_eq!(missing.len(), 1, "{}", show(&drift));
    let missing = missing[0];
    assert_eq!(missing.location.file, DOC);
    assert_eq!(missing.location.line, line_of(&text, "channels:"));
    assert!(missing.message.contains("`iu.born`"), "{}", missing.message);
    assert_eq!(missing.related.len(), 1);
    assert_eq!(missing.related[0].location.file, "events/iu.born.yaml");
    assert_eq!(
        missing.related[0].location.line,
        contract_line(&set, "events/iu.born.yaml", "event: iu.born")
    );

    // The operations that still point at the channel are broken references; nothing else
    // drifts (no "missing operation" for a channel that is missing altogether).
    let others: Vec<_> = drift
        .iter()
        .filter(|d| d.rule != Rule::AsyncApiMissingChannel)
        .collect();
    assert!(!others.is_empty());
    assert!(
        others
            .iter()
            .all(|d| d.rule == Rule::AsyncApiBrokenReference && d.message.contains("iu.born")),
        "{}",
        show(&drift)
    );
}

#[test]
fn an_unknown_message_is_reported_with_both_locations() {
    let set = contracts();
    let mut doc = rendered(&set);
    let mut message = doc["components"]["messages"]["iu.born-v1.0.0"].clone();
    message["name"] = "iu.born-v9.0.0".into();
    message["x-evc-version"] = "9.0.0".into();
    doc["components"]["messages"]
        .as_object_mut()
        .expect("messages")
        .insert("iu.born-v9.0.0".to_owned(), message);
    doc["channels"]["iu.born"]["messages"]
        .as_object_mut()
        .expect("channel messages")
        .insert(
            "iu.born-v9.0.0".to_owned(),
            serde_json::json!({"$ref": "#/components/messages/iu.born-v9.0.0"}),
        );
    let text = yaml(&doc);
    let drift = parity(&set, DOC, &text);

    assert_eq!(drift.len(), 1, "{}", show(&drift));
    let unknown = &drift[0];
    assert_eq!(unknown.rule, Rule::AsyncApiUnknownMessage);
    assert_eq!(unknown.location.file, DOC);
    // The key of the message in the channel (six spaces: channels > iu.born > messages).
    assert_eq!(
        unknown.location.line,
        line_of(&text, "      iu.born-v9.0.0:")
    );
    assert!(unknown.message.contains("9.0.0"), "{}", unknown.message);
    assert_eq!(unknown.related[0].location.file, "events/iu.born.yaml");
    // The versions of the event type: the list after `versions:`.
    assert_eq!(
        unknown.related[0].location.line,
        contract_line(&set, "events/iu.born.yaml", "versions:") + 1
    );
}

#[test]
fn an_unknown_channel_points_at_the_closest_event_type() {
    let set = contracts();
    let mut doc = rendered(&set);
    let mut channel = doc["channels"]["iu.born"].clone();
    channel["address"] = "iu.borned".into();
    doc["channels"]
        .as_object_mut()
        .expect("channels")
        .insert("iu.borned".to_owned(), channel);
    let text = yaml(&doc);
    let drift = parity(&set, DOC, &text);

    assert_eq!(drift.len(), 1, "{}", show(&drift));
    let unknown = &drift[0];
    assert_eq!(unknown.rule, Rule::AsyncApiUnknownChannel);
    assert_eq!(unknown.location.line, line_of(&text, "  iu.borned:"));
    assert_eq!(unknown.related[0].location.file, "events/iu.born.yaml");
    assert!(
        unknown.related[0].message.contains("`iu.born`"),
        "{}",
        unknown.related[0].message
    );
}

#[test]
fn consumer_operations_are_checked_against_subscriptions() {
    let set = contracts();
    let mut doc = rendered(&set);
    let operations = doc["operations"].as_object_mut().expect("operations");
    // `worker.notification.iu` loses its operation for one event type.
    let removed = operations
        .keys()
        .find(|id| id.starts_with("worker.notification.iu-receive-"))
        .cloned()
        .expect("the consumer has operations");
    operations.shift_remove(&removed);
    let text = yaml(&doc);
    let drift = parity(&set, DOC, &text);

    let missing = of_rule(&drift, Rule::AsyncApiMissingOperation);
    assert_eq!(missing.len(), 1, "{}", show(&drift));
    let missing = missing[0];
    assert_eq!(missing.location.line, line_of(&text, "operations:"));
    assert_eq!(
        missing.related[0].location.file,
        "consumers/worker.notification.iu.yaml"
    );
    let event = removed
        .strip_prefix("worker.notification.iu-receive-")
        .expect("prefix");
    let subscription_line = set
        .sources
        .get("consumers/worker.notification.iu.yaml")
        .expect("loaded")
        .text()
        .lines()
        .position(|line| line.trim_start().starts_with(&format!("- {event}@")))
        .expect("the subscription is in the file");
    assert_eq!(
        missing.related[0].location.line as usize,
        subscription_line + 1
    );
    assert_eq!(drift.len(), 1, "{}", show(&drift));
}

#[test]
fn a_message_the_consumer_does_not_accept_is_unknown_for_its_operation() {
    let set = contracts();
    let (name, consumer) = set
        .consumers
        .iter()
        .find(|(_, consumer)| {
            consumer.subscriptions.iter().any(|subscription| {
                set.events[&subscription.event]
                    .versions
                    .iter()
                    .any(|version| !subscription.requirement.matches(&version.version))
            })
        })
        .expect("some consumer does not accept every version of some event type");
    let (index, subscription) = consumer
        .subscriptions
        .iter()
        .enumerate()
        .find(|(_, subscription)| {
            set.events[&subscription.event]
                .versions
                .iter()
                .any(|version| !subscription.requirement.matches(&version.version))
        })
        .expect("found above");
    let event = &set.events[&subscription.event];
    let rejected = event
        .versions
        .iter()
        .find(|version| !subscription.requirement.matches(&version.version))
        .expect("found above");
    let mut doc = rendered(&set);
    let id = asyncapi::receive_operation_id(name, &event.name);
    doc["operations"][&id]["messages"]
        .as_array_mut()
        .expect("messages")
        .push(serde_json::json!({"$ref": asyncapi::channel_message_ref(
            &asyncapi::channel_id(&event.name),
            &asyncapi::message_id(&event.name, &rejected.version),
        )}));
    let text = yaml(&doc);
    let drift = parity(&set, DOC, &text);

    assert_eq!(drift.len(), 1, "{}", show(&drift));
    assert_eq!(drift[0].rule, Rule::AsyncApiUnknownMessage);
    assert!(drift[0].message.contains("does not accept"));
    assert_eq!(drift[0].related[0].location.file, consumer.file);
    assert_eq!(
        drift[0].related[0].location,
        set.locate(&consumer.file, &format!("/subscribes/{index}"))
    );
}

#[test]
fn a_document_that_does_not_parse_gives_the_yaml_diagnostic() {
    let set = contracts();
    let drift = parity(&set, DOC, "channels: [\n");
    assert_eq!(drift.len(), 1);
    assert_eq!(drift[0].rule, Rule::YamlSyntax);
    assert_eq!(drift[0].location.file, DOC);
}

#[test]
fn an_empty_document_misses_everything() {
    let set = contracts();
    let drift = parity(&set, DOC, "# nothing yet\n");
    assert_eq!(
        of_rule(&drift, Rule::AsyncApiMissingChannel).len(),
        set.events.len()
    );
    assert_eq!(drift.len(), set.events.len(), "{}", show(&drift));
}
