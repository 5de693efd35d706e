//! Content digests: SHA-256 over canonical JSON, written as lower-case hex.

use sha2::{Digest, Sha256};

/// The SHA-256 of `text`, in lower-case hex.
pub fn sha256_hex(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

/// `bytes` in lower-case hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The digest of a JSON value in canonical form (keys sorted, no whitespace), so the digest of a
/// schema does not depend on how its YAML was laid out.
pub fn json_digest(value: &serde_json::Value) -> String {
    // Hashed as it is written: the canonical text of a registry is tens of megabytes.
    let mut hasher = Hashing(Sha256::new());
    write_canonical(value, &mut hasher);
    hex(&hasher.0.finalize())
}

/// JSON text with object keys sorted at every level and no whitespace.
pub fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    // serde_json writes UTF-8 only.
    String::from_utf8(out).expect("JSON text is UTF-8")
}

/// A SHA-256 computation that canonical JSON is written into.
struct Hashing(Sha256);

impl std::io::Write for Hashing {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes the canonical JSON of `value` to `out`.
fn write_canonical(value: &serde_json::Value, out: &mut impl std::io::Write) {
    // Writing to a buffer or a hasher cannot fail, nor can serializing a string or a number.
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            // Keys of a map are unique, so an unstable sort orders them the one way.
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let _ = out.write_all(b"{");
            for (index, (key, value)) in entries.into_iter().enumerate() {
                if index > 0 {
                    let _ = out.write_all(b",");
                }
                let _ = serde_json::to_writer(&mut *out, key);
                let _ = out.write_all(b":");
                write_canonical(value, out);
            }
            let _ = out.write_all(b"}");
        }
        serde_json::Value::Array(items) => {
            let _ = out.write_all(b"[");
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    let _ = out.write_all(b",");
                }
                write_canonical(item, out);
            }
            let _ = out.write_all(b"]");
        }
        leaf => {
            let _ = serde_json::to_writer(&mut *out, leaf);
        }
    }
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
    fn the_digest_is_that_of_the_canonical_text() {
        let value = json!({
            "b": [1, 2.5, "x\"\u{e9}", null, true, -1e300, u64::MAX],
            "k\"\n": {"d": {}, "c": []},
            "a": false,
        });
        let text = canonical_json(&value);
        assert_eq!(
            text,
            r#"{"a":false,"b":[1,2.5,"x\"é",null,true,-1e+300,18446744073709551615],"k\"\n":{"c":[],"d":{}}}"#
        );
        assert_eq!(json_digest(&value), sha256_hex(&text));
    }

    #[test]
    fn sha256_matches_the_standard_vector() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
