//! The contract set the benchmarks measure: 1,029 event types with 3 versions each, whose
//! schemas use a realistic mix of keywords (nested objects, `$defs`/`$ref`, enums, arrays,
//! formats, `oneOf` unions and `prefixItems` tuples). Version 1.`minor`.0 adds one optional
//! property per minor, so every version is compatible with the ones before it.
//!
//! Shared by the benches (`#[path]` module) and by the `bench_contract_set` example, which
//! writes the set to a directory so the release `evc` binary can be timed on it.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::Path;

/// How many event types the set holds.
pub(crate) const EVENT_TYPES: usize = 1_029;

/// How many versions each event type has (1.0.0, 1.1.0, 1.2.0).
pub(crate) const VERSIONS: usize = 3;

/// The shared part of every version's schema: everything but the optional `extra_*` fields.
const SCHEMA_HEAD: &str = r##"    schema:
      type: object
      additionalProperties: false
      required: [unit_id, state, occurred_at, total]
      $defs:
        money:
          type: object
          additionalProperties: false
          required: [amount, currency]
          properties:
            amount: { type: integer, minimum: 0, maximum: 1000000000 }
            currency: { type: string, pattern: "^[A-Z]{3}$" }
        line:
          type: object
          additionalProperties: false
          required: [sku, quantity, price]
          properties:
            sku: { type: string, minLength: 1, maxLength: 32 }
            quantity: { type: integer, minimum: 1, maximum: 999 }
            price: { $ref: "#/$defs/money" }
      properties:
        unit_id: { type: string, format: uuid, description: The unit the event is about. }
        state: { type: string, enum: [draft, active, frozen, archived] }
        occurred_at: { type: string, format: date-time }
        contact: { type: string, format: email }
        total: { $ref: "#/$defs/money" }
        lines:
          type: array
          maxItems: 50
          items: { $ref: "#/$defs/line" }
        detail:
          type: object
          additionalProperties: false
          properties:
            count: { type: integer, minimum: 0, maximum: 1000 }
            note: { type: string, maxLength: 200 }
            tags: { type: array, uniqueItems: true, items: { type: string, enum: [red, green, blue] } }
            source:
              type: object
              additionalProperties: false
              required: [system]
              properties:
                system: { type: string, enum: [web, api, batch] }
                received_at: { type: string, format: date-time }
        target:
          oneOf:
            - type: object
              additionalProperties: false
              required: [kind, user_id]
              properties:
                kind: { const: user }
                user_id: { type: string, format: uuid }
            - type: object
              additionalProperties: false
              required: [kind, group_id]
              properties:
                kind: { const: group }
                group_id: { type: string, format: uuid }
        position:
          type: array
          prefixItems:
            - { type: number, minimum: -90, maximum: 90 }
            - { type: number, minimum: -180, maximum: 180 }
          items: false
"##;

/// Writes the whole set (`evc.yaml`, retry policies, event types and one consumer) into `dir`.
pub(crate) fn write(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir.join("events"))?;
    fs::create_dir_all(dir.join("consumers"))?;
    fs::write(
        dir.join("evc.yaml"),
        "project: bench\npayload_policy:\n  denied_keys: [body_text]\n  credential_key_names: [password, token]\ndefaults:\n  retry_policy: default.retry\n  compat: full_transitive\n",
    )?;
    fs::write(
        dir.join("retry-policies.yaml"),
        "policies:\n  default.retry:\n    kind: exponential_backoff\n    base_delay: 1s\n    max_delay: 1m\n    max_attempts: 5\n",
    )?;
    let mut subscriptions = String::new();
    for index in 0..EVENT_TYPES {
        let name = event_name(index);
        fs::write(dir.join(format!("events/{name}.yaml")), event_file(index))?;
        if index % 10 == 0 {
            let _ = writeln!(subscriptions, "  - {name}@^1");
        }
    }
    fs::write(
        dir.join("consumers/bench.consumer.yaml"),
        format!(
            "consumer: bench.consumer\ndescription: Reads a tenth of the events.\nexecutor_kind: sql\nhandler: transactional\nsubscribes:\n{subscriptions}"
        ),
    )
}

/// The name of event type `index`.
fn event_name(index: usize) -> String {
    format!("bench.event_{index:04}")
}

/// The contract file of event type `index`.
fn event_file(index: usize) -> String {
    let name = event_name(index);
    let mut text = format!(
        "event: {name}\ndescription: Benchmark event {index}.\nproducer_class: bench\norder_key: unit_id\nversions:\n"
    );
    for minor in 0..VERSIONS {
        let _ = writeln!(text, "  - version: 1.{minor}.0");
        text.push_str(SCHEMA_HEAD);
        for extra in 0..minor {
            let _ = writeln!(
                text,
                "        extra_{extra}: {{ type: string, maxLength: 64 }}"
            );
        }
    }
    text
}
