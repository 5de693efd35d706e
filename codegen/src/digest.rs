//! Content digests: SHA-256 over canonical JSON, written as lower-case hex.

use sha2::{Digest, Sha256};

/// The SHA-256 of `text`, in lower-case hex.
pub fn sha256_hex(text: &str) -> String {
    let hash = Sha256::digest(text.as_bytes());
    hash.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The digest of a JSON value in canonical form (keys sorted, no whitespace), so the digest of a
/// schema does not depend on how its YAML was laid out.
pub fn json_digest(value: &serde_json::Value) -> String {
    sha256_hex(&canonical_json(value))
}

/// JSON text with object keys sorted at every level and no whitespace.
pub fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

/// Appends [`canonical_json`] of `value` to `out`, one buffer for the whole document.
fn write_canonical(value: &serde_json::Value, out: &mut String) {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (index, (key, value)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_leaf(&serde_json::Value::String(key.clone()), out);
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        serde_json::Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        leaf => write_leaf(leaf, out),
    }
}

/// A string, number, boolean or null as JSON text.
fn write_leaf(leaf: &serde_json::Value, out: &mut String) {
    use std::fmt::Write as _;
    // Writing to a String cannot fail.
    let _ = write!(out, "{leaf}");
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn key_order_does_not_change_the_digest() {
        let a = json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {}}});
        let b = json!({"properties": {"b": {}, "a": {"type": "string"}}, "type": "object"});
        assert_eq!(json_digest(&a), json_digest(&b));
        assert_ne!(json_digest(&a), json_digest(&json!({"type": "object"})));
    }

    #[test]
    fn sha256_matches_the_standard_vector() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
