//! Percent-encoding for the URI parts evc reads and writes: `$ref` fragments (JSON pointers)
//! and file paths in SARIF.

/// Whether `byte` stands as written in a URI path or fragment (RFC 3986: unreserved,
/// sub-delims, `:`, `@`, `/`); a fragment may also hold `?`.
pub(crate) fn stands_in_path(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=:@".contains(&byte)
}

/// Percent-encodes what may not stand in a URI path or fragment (spaces, `%`, `#`, `?`,
/// non-ASCII).
pub(crate) fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if stands_in_path(byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Decodes `%XX` escapes; `None` for a broken escape or bytes that are not UTF-8.
pub(crate) fn percent_decode(text: &str) -> Option<String> {
    if !text.contains('%') {
        return Some(text.to_owned());
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = text.get(index + 1..index + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips() {
        let text = "/properties/^a b/é%";
        assert_eq!(percent_encode(text), "/properties/%5Ea%20b/%C3%A9%25");
        assert_eq!(percent_decode(&percent_encode(text)).as_deref(), Some(text));
        assert_eq!(percent_decode("%zz"), None);
    }
}
