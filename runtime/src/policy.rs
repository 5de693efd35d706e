//! The payload policy applied at append time: deny-listed keys, credential-shaped keys and
//! values, size caps.
//!
//! The policy mirrors `payload_policy` of the project file (`contracts/evc.yaml`). The static
//! registry does not carry it yet, so it is a runtime configuration value whose
//! [`Default`] is the reference policy; keep it in step with the project file.

use serde_json::Value;

/// The payload policy: which keys a payload may never carry, which key names and values look
/// like credentials, and the hard size cap.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PayloadPolicy {
    /// Keys refused anywhere in a payload, compared by name parts (`bodyText` is `body_text`).
    pub denied_keys: Vec<String>,
    /// Credential-shaped names: a key that contains one as whole, adjacent parts is refused
    /// (`refresh_token` contains `token`; `tokenizer` does not).
    pub credential_key_names: Vec<String>,
    /// The cap of every payload in bytes, whatever its event type's own cap says.
    pub hard_max_bytes: u32,
}

impl Default for PayloadPolicy {
    /// The reference policy of `contracts/evc.yaml`.
    fn default() -> Self {
        Self {
            denied_keys: ["body_text", "instruction_text", "payload_blob", "iu_body"]
                .map(String::from)
                .to_vec(),
            credential_key_names: [
                "password",
                "token",
                "api_key",
                "secret",
                "credential",
                "authorization",
            ]
            .map(String::from)
            .to_vec(),
            hard_max_bytes: 65_536,
        }
    }
}

impl PayloadPolicy {
    /// A policy with the given lists and hard cap.
    pub fn new(
        denied_keys: impl IntoIterator<Item = impl Into<String>>,
        credential_key_names: impl IntoIterator<Item = impl Into<String>>,
        hard_max_bytes: u32,
    ) -> Self {
        Self {
            denied_keys: denied_keys.into_iter().map(Into::into).collect(),
            credential_key_names: credential_key_names.into_iter().map(Into::into).collect(),
            hard_max_bytes,
        }
    }

    /// The policy compiled for fast checks: names split into parts once.
    pub(crate) fn compile(&self) -> CompiledPolicy {
        CompiledPolicy {
            denied: self
                .denied_keys
                .iter()
                .map(|key| (key.clone(), name_parts(key)))
                .collect(),
            credential: self
                .credential_key_names
                .iter()
                .map(|key| (key.clone(), name_parts(key)))
                .filter(|(_, parts)| !parts.is_empty())
                .collect(),
            hard_max_bytes: self.hard_max_bytes,
        }
    }
}

/// What a payload walk found first, by class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finding {
    /// A deny-listed key at `pointer`, a spelling of `entry`.
    DeniedKey { pointer: String, entry: String },
    /// A credential-shaped key at `pointer`, containing `name`.
    CredentialKey { pointer: String, name: String },
    /// A string value at `pointer` shaped like a credential.
    CredentialValue {
        pointer: String,
        shape: CredentialShape,
    },
}

/// The policy with its names split into parts.
#[derive(Debug, Clone)]
pub(crate) struct CompiledPolicy {
    denied: Vec<(String, Vec<String>)>,
    credential: Vec<(String, Vec<String>)>,
    pub(crate) hard_max_bytes: u32,
}

impl CompiledPolicy {
    /// The first finding of the highest class in `payload`: any deny-listed key first, then any
    /// credential-shaped key, then any credential-shaped string value, each in document order.
    pub(crate) fn scan(&self, payload: &Value) -> Option<Finding> {
        let mut found = Found::default();
        let mut pointer = String::new();
        self.walk(payload, &mut pointer, &mut found);
        found
            .denied
            .or(found.credential_key)
            .or(found.credential_value)
    }

    fn walk(&self, value: &Value, pointer: &mut String, found: &mut Found) {
        if found.denied.is_some() {
            return;
        }
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    let length = pointer.len();
                    push_pointer(pointer, key);
                    let parts = name_parts(key);
                    if let Some((entry, _)) = self.denied.iter().find(|(_, p)| *p == parts) {
                        found.denied = Some(Finding::DeniedKey {
                            pointer: pointer.clone(),
                            entry: entry.clone(),
                        });
                        return;
                    }
                    if found.credential_key.is_none()
                        && let Some((name, _)) = self.credential.iter().find(|(_, p)| {
                            parts.windows(p.len()).any(|window| window == p.as_slice())
                        })
                    {
                        found.credential_key = Some(Finding::CredentialKey {
                            pointer: pointer.clone(),
                            name: name.clone(),
                        });
                    }
                    self.walk(child, pointer, found);
                    pointer.truncate(length);
                }
            }
            Value::Array(items) => {
                for (index, child) in items.iter().enumerate() {
                    let length = pointer.len();
                    pointer.push('/');
                    pointer.push_str(&index.to_string());
                    self.walk(child, pointer, found);
                    pointer.truncate(length);
                }
            }
            Value::String(text) => {
                if found.credential_value.is_none()
                    && let Some(shape) = credential_shape(text)
                {
                    found.credential_value = Some(Finding::CredentialValue {
                        pointer: pointer.clone(),
                        shape,
                    });
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
}

#[derive(Default)]
struct Found {
    denied: Option<Finding>,
    credential_key: Option<Finding>,
    credential_value: Option<Finding>,
}

/// Appends `/key` to a JSON pointer, escaping `~` and `/` (RFC 6901).
fn push_pointer(pointer: &mut String, key: &str) {
    pointer.push('/');
    for c in key.chars() {
        match c {
            '~' => pointer.push_str("~0"),
            '/' => pointer.push_str("~1"),
            c => pointer.push(c),
        }
    }
}

/// Splits a key into lower-case parts at `_`, `-`, `.`, spaces and camelCase boundaries; a run
/// of upper-case letters stays one part (`APIKey` is `apikey`). The same rule as the contract
/// checks of evc-codegen (docs/contracts.md, "Credential-shaped names").
pub(crate) fn name_parts(key: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for c in key.chars() {
        if matches!(c, '_' | '-' | '.' | ' ') {
            if !current.is_empty() {
                parts.push(std::mem::take(&mut current));
            }
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower && !current.is_empty() {
            parts.push(std::mem::take(&mut current));
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        parts.push(current);
    }
    parts
}

/// The kind of credential a string value looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CredentialShape {
    /// A JSON Web Token: `eyJ...` followed by two more base64url segments.
    Jwt,
    /// A PEM block (`-----BEGIN PRIVATE KEY-----`).
    PemBlock,
    /// An HTTP bearer token (`Bearer abc123...`).
    BearerToken,
    /// A URL that carries a password (`postgres://user:pass@host/db`, `redis://:pass@host`).
    ConnectionString,
}

impl CredentialShape {
    /// A stable name of the shape (`jwt`, `pem_block`, `bearer_token`, `connection_string`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Jwt => "jwt",
            Self::PemBlock => "pem_block",
            Self::BearerToken => "bearer_token",
            Self::ConnectionString => "connection_string",
        }
    }
}

impl std::fmt::Display for CredentialShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The credential `text` contains, if any: a JWT, a PEM block, a bearer token or a URL with a
/// password, anywhere in the text.
pub fn credential_shape(text: &str) -> Option<CredentialShape> {
    if contains_jwt(text) {
        Some(CredentialShape::Jwt)
    } else if contains_pem(text) {
        Some(CredentialShape::PemBlock)
    } else if contains_bearer(text) {
        Some(CredentialShape::BearerToken)
    } else if contains_url_password(text) {
        Some(CredentialShape::ConnectionString)
    } else {
        None
    }
}

fn is_base64url(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// `eyJ` (base64 of `{"`) opening three dot-separated base64url segments, the first two at
/// least 10 characters long (a JWT header alone is about 20), the signature possibly empty
/// (`alg: none`).
fn contains_jwt(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(offset) = text[from..].find("eyJ") {
        let start = from + offset;
        from = start + 3;
        if start > 0 && is_base64url(bytes[start - 1]) {
            continue;
        }
        let mut position = start;
        let mut segments = [0_usize; 3];
        let mut complete = true;
        for (index, segment) in segments.iter_mut().enumerate() {
            let begin = position;
            while position < bytes.len() && is_base64url(bytes[position]) {
                position += 1;
            }
            *segment = position - begin;
            if index < 2 {
                if position < bytes.len() && bytes[position] == b'.' {
                    position += 1;
                } else {
                    complete = false;
                    break;
                }
            }
        }
        if complete && segments[0] >= 10 && segments[1] >= 10 {
            return true;
        }
    }
    false
}

/// `-----BEGIN <LABEL>-----`, the label upper-case letters and spaces.
fn contains_pem(text: &str) -> bool {
    let mut from = 0;
    while let Some(offset) = text[from..].find("-----BEGIN ") {
        let start = from + offset + "-----BEGIN ".len();
        from = start;
        let rest = &text[start..];
        let label_end = rest
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == ' '))
            .unwrap_or(rest.len());
        if label_end > 0 && rest[label_end..].starts_with("-----") {
            return true;
        }
    }
    false
}

/// `Bearer` (any case) then spaces and a token68 (RFC 7235) of at least 16 characters with at
/// least one digit; `bearer of news` is not a token.
fn contains_bearer(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(offset) = lower[from..].find("bearer") {
        let start = from + offset;
        from = start + "bearer".len();
        if start > 0 && bytes[start - 1].is_ascii_alphanumeric() {
            continue;
        }
        let mut position = from;
        let spaces = position;
        while position < bytes.len() && (bytes[position] == b' ' || bytes[position] == b'\t') {
            position += 1;
        }
        if position == spaces {
            continue;
        }
        let token_start = position;
        while position < bytes.len()
            && (bytes[position].is_ascii_alphanumeric()
                || matches!(bytes[position], b'-' | b'.' | b'_' | b'~' | b'+' | b'/'))
        {
            position += 1;
        }
        while position < bytes.len() && bytes[position] == b'=' {
            position += 1;
        }
        let token = &bytes[token_start..position];
        if token.len() >= 16 && token.iter().any(u8::is_ascii_digit) {
            return true;
        }
    }
    false
}

/// `scheme://user:password@host` or `scheme://:password@host`: a URL whose authority holds a
/// user-info part with a non-empty password.
fn contains_url_password(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(offset) = text[from..].find("://") {
        let separator = from + offset;
        from = separator + 3;
        // A scheme: a letter, then letters, digits, `+`, `-` or `.`.
        let mut scheme_start = separator;
        while scheme_start > 0
            && (bytes[scheme_start - 1].is_ascii_alphanumeric()
                || matches!(bytes[scheme_start - 1], b'+' | b'-' | b'.'))
        {
            scheme_start -= 1;
        }
        if scheme_start == separator || !bytes[scheme_start].is_ascii_alphabetic() {
            continue;
        }
        let authority_start = separator + 3;
        let authority_end = text[authority_start..]
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
            .map_or(text.len(), |end| authority_start + end);
        let authority = &text[authority_start..authority_end];
        if let Some(at) = authority.rfind('@') {
            let user_info = &authority[..at];
            if let Some(colon) = user_info.find(':')
                && colon + 1 < user_info.len()
                && at + 1 < authority.len()
            {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.\
                       dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";

    #[test]
    fn credential_values_are_found_anywhere_in_a_string() {
        let cases = [
            (JWT.to_owned(), CredentialShape::Jwt),
            (format!("token was {JWT} yesterday"), CredentialShape::Jwt),
            (
                "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----".to_owned(),
                CredentialShape::PemBlock,
            ),
            (
                "-----BEGIN RSA PRIVATE KEY-----".to_owned(),
                CredentialShape::PemBlock,
            ),
            (
                "Authorization: Bearer 3f9a8b7c6d5e4f3a2b1c".to_owned(),
                CredentialShape::BearerToken,
            ),
            (
                "bearer abcDEF0123456789xyz==".to_owned(),
                CredentialShape::BearerToken,
            ),
            (
                "postgres://app:s3cr3t@db.internal:5432/prod".to_owned(),
                CredentialShape::ConnectionString,
            ),
            (
                "amqp://guest:guest@rabbit/vhost".to_owned(),
                CredentialShape::ConnectionString,
            ),
            (
                "redis://:hunter2@cache:6379".to_owned(),
                CredentialShape::ConnectionString,
            ),
            (
                "see https://user:pw@example.com for details".to_owned(),
                CredentialShape::ConnectionString,
            ),
        ];
        for (text, shape) in cases {
            assert_eq!(credential_shape(&text), Some(shape), "{text}");
        }
    }

    #[test]
    fn ordinary_values_are_not_credentials() {
        let cases = [
            "01890a5d-ac96-774b-bcce-b302099a8057",
            "2024-05-01T12:30:00Z",
            "2024-05-01",
            "The unit was born and its axes are resolved.",
            "The bearer of this note may pass; tokens are handed out at the door.",
            "Bearer of bad news",
            "postgres://db.internal:5432/prod",
            "postgres://app@db.internal/prod",
            "https://example.com/path?user=a:b@c",
            "mailto:someone@example.com",
            "someone@example.com",
            "eyJhbGciOiJIUzI1NiJ9",
            "-----BEGIN-----",
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "review.v3",
            "",
        ];
        for text in cases {
            assert_eq!(credential_shape(text), None, "{text}");
        }
    }

    #[test]
    fn names_split_into_parts_like_the_contract_checks() {
        assert_eq!(name_parts("partnerApiKey"), ["partner", "api", "key"]);
        assert_eq!(name_parts("DB_PASSWORD"), ["db", "password"]);
        assert_eq!(name_parts("APIKey"), ["apikey"]);
        assert_eq!(name_parts("_body_text"), ["body", "text"]);
    }

    #[test]
    fn scan_reports_denied_keys_before_credentials_with_pointers() {
        let policy = PayloadPolicy::default().compile();
        let payload = json!({
            "db_password": "x",
            "meta": {"notes": [{"bodyText": "hello"}]},
        });
        assert_eq!(
            policy.scan(&payload),
            Some(Finding::DeniedKey {
                pointer: "/meta/notes/0/bodyText".into(),
                entry: "body_text".into()
            })
        );
        let payload = json!({"a/b": {"refresh_token": 1}, "c": JWT});
        assert_eq!(
            policy.scan(&payload),
            Some(Finding::CredentialKey {
                pointer: "/a~1b/refresh_token".into(),
                name: "token".into()
            })
        );
        let payload = json!({"tokenizer": "x", "secretary_id": "y", "c": [JWT]});
        assert_eq!(
            policy.scan(&payload),
            Some(Finding::CredentialValue {
                pointer: "/c/0".into(),
                shape: CredentialShape::Jwt
            })
        );
        let payload = json!({"body_text_id": "x", "api_version_key": 2, "text": "hello"});
        assert_eq!(policy.scan(&payload), None);
    }
}
