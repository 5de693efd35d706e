//! The payload policy applied at append time: deny-listed keys, credential-shaped keys and
//! values, size caps.
//!
//! The policy is `payload_policy` of the project file (`evc.yaml`), which the generated registry
//! carries ([`PayloadPolicy::from_registry`]); the store takes it from there unless the
//! application overrides it. The deployment adds its [`DigestKey`], which keys the digests of
//! refused payloads.

use std::fmt::Write as _;

use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;

use crate::registry::Registry;

/// The payload policy: which keys a payload may never carry, which key names and values look
/// like credentials, and the hard size cap.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PayloadPolicy {
    /// Keys refused anywhere in a payload, compared by name parts (`bodyText` is `body_text`)
    /// or by the parts joined (`BODYTEXT` is `bodytext`).
    pub denied_keys: Vec<String>,
    /// Credential-shaped names: a key that contains one as whole, adjacent parts, or whose
    /// adjacent parts joined spell it, is refused (`refresh_token` contains `token`, `apikey`
    /// and `APIKey` spell `api_key`; `tokenizer` does not contain `token`).
    pub credential_key_names: Vec<String>,
    /// The cap of every payload in bytes, whatever its event type's own cap says.
    pub hard_max_bytes: u32,
    /// The deployment's key for the digest a reject row keeps (HMAC-SHA256 of the canonical
    /// payload). Without one, reject rows keep no digest.
    pub digest_key: Option<DigestKey>,
}

impl PayloadPolicy {
    /// The policy the contracts declare: `payload_policy` of `evc.yaml`, as the generated
    /// registry carries it. No digest key; add the deployment's with
    /// [`PayloadPolicy::with_digest_key`].
    pub fn from_registry(registry: &Registry) -> Self {
        let declared = &registry.payload_policy;
        Self::new(
            declared.denied_keys.iter().copied(),
            declared.credential_key_names.iter().copied(),
            declared.hard_max_bytes,
        )
    }

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
            digest_key: None,
        }
    }

    /// The policy with the deployment's digest key: refused payloads are recorded with their
    /// HMAC-SHA256 under this key.
    #[must_use]
    pub fn with_digest_key(mut self, key: DigestKey) -> Self {
        self.digest_key = Some(key);
        self
    }

    /// `payload` as a person may be shown it: the value of every deny-listed or
    /// credential-named key, every string value shaped like a credential, and every key shaped
    /// like one (numbered, to stay distinct) become [`REDACTED`]. An append refuses such
    /// payloads, so this hides what was stored before the policy named it.
    pub fn redact(&self, payload: &Value) -> Value {
        self.compile().redact(payload)
    }

    /// The policy compiled for fast checks: names split into parts once.
    pub(crate) fn compile(&self) -> CompiledPolicy {
        CompiledPolicy {
            denied: self
                .denied_keys
                .iter()
                .map(|key| (key.clone(), name_parts(key).concat()))
                .filter(|(_, joined)| !joined.is_empty())
                .collect(),
            credential: self
                .credential_key_names
                .iter()
                .map(|key| (key.clone(), name_parts(key).concat()))
                .filter(|(_, joined)| !joined.is_empty())
                .collect(),
            hard_max_bytes: self.hard_max_bytes,
            digest_key: self.digest_key.clone(),
        }
    }
}

/// The deployment's secret for the digests of refused payloads: a reject row keeps
/// HMAC-SHA256(key, canonical payload), which matches a payload a holder of the key presents
/// but, unlike a bare SHA-256, cannot be reversed by hashing guesses (a refused `{"pin":"1234"}`
/// is one of 10,000 candidates). Every process of a deployment must use the same key for its
/// digests to compare.
///
/// Neither `Debug` nor any error shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct DigestKey(Vec<u8>);

/// Why a digest key was not accepted. Never shows the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DigestKeyError {
    /// The key is shorter than [`DigestKey::MIN_BYTES`].
    #[error("the digest key has {bytes} bytes; it needs at least {min}", min = DigestKey::MIN_BYTES)]
    TooShort {
        /// The key's length in bytes.
        bytes: usize,
    },
    /// The environment variable is set but not UTF-8 text.
    #[error("{} is not UTF-8 text", DigestKey::ENV)]
    NotText,
}

impl DigestKey {
    /// The shortest key accepted: 32 bytes, the output size of SHA-256 (`openssl rand -hex 32`
    /// prints 64).
    pub const MIN_BYTES: usize = 32;

    /// The environment variable [`DigestKey::from_env`] reads.
    pub const ENV: &'static str = "EVC_DIGEST_KEY";

    /// A key of `bytes`.
    ///
    /// # Errors
    /// [`DigestKeyError::TooShort`] below [`DigestKey::MIN_BYTES`] bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, DigestKeyError> {
        let bytes = bytes.into();
        if bytes.len() < Self::MIN_BYTES {
            return Err(DigestKeyError::TooShort { bytes: bytes.len() });
        }
        Ok(Self(bytes))
    }

    /// The key in `EVC_DIGEST_KEY` (its text, as bytes), or `None` when the variable is unset.
    ///
    /// # Errors
    /// [`DigestKeyError::TooShort`] or [`DigestKeyError::NotText`] when it is set but unusable.
    pub fn from_env() -> Result<Option<Self>, DigestKeyError> {
        match std::env::var(Self::ENV) {
            Ok(text) => Self::new(text).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(DigestKeyError::NotText),
        }
    }

    /// HMAC-SHA256 of `bytes` under the key, lower-case hex.
    pub fn digest_hex(&self, bytes: &[u8]) -> String {
        // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.0) else {
            return String::new();
        };
        mac.update(bytes);
        let mut out = String::with_capacity(64);
        for byte in mac.finalize().into_bytes() {
            let _ = write!(out, "{byte:02x}");
        }
        out
    }
}

impl std::fmt::Debug for DigestKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DigestKey(..)")
    }
}

/// What a payload walk found first, by class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finding {
    /// A deny-listed key at `pointer`, a spelling of `entry`.
    DeniedKey { pointer: String, entry: String },
    /// A credential-shaped key at `pointer`, containing `name`.
    CredentialKey { pointer: String, name: String },
    /// A string value, or a key, at `pointer` shaped like a credential.
    CredentialValue {
        pointer: String,
        shape: CredentialShape,
    },
}

/// The policy with each name's parts joined (`api_key` is `apikey`): a key is compared by its
/// own parts, joined.
#[derive(Debug, Clone)]
pub(crate) struct CompiledPolicy {
    denied: Vec<(String, String)>,
    credential: Vec<(String, String)>,
    pub(crate) hard_max_bytes: u32,
    pub(crate) digest_key: Option<DigestKey>,
}

/// What [`PayloadPolicy::redact`] puts in place of a hidden value.
pub const REDACTED: &str = "[redacted]";

impl CompiledPolicy {
    fn redact(&self, value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut hidden_keys = 0;
                let mut out = serde_json::Map::with_capacity(map.len());
                for (key, child) in map {
                    let parts = name_parts(key);
                    let joined = parts.concat();
                    let hidden = self.denied.iter().any(|(_, denied)| *denied == joined)
                        || self.credential_name(&parts).is_some();
                    let key = if credential_shape(key).is_some() {
                        hidden_keys += 1;
                        format!("{REDACTED} {hidden_keys}")
                    } else {
                        key.clone()
                    };
                    let child = if hidden {
                        Value::String(REDACTED.to_owned())
                    } else {
                        self.redact(child)
                    };
                    out.insert(key, child);
                }
                Value::Object(out)
            }
            Value::Array(items) => {
                Value::Array(items.iter().map(|item| self.redact(item)).collect())
            }
            Value::String(text) if credential_shape(text).is_some() => {
                Value::String(REDACTED.to_owned())
            }
            other => other.clone(),
        }
    }

    /// The first finding of the highest class in `payload`: any deny-listed key first, then any
    /// credential-shaped key (or name/value pair), then any credential-shaped string value or
    /// key, each in document order.
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
                    // A key can itself be a credential (a map keyed by tokens): it is reported,
                    // and it never appears in a pointer, which errors show.
                    let key_shape = credential_shape(key);
                    if key_shape.is_some() {
                        pointer.push_str("/*");
                    } else {
                        push_pointer(pointer, key);
                    }
                    let parts = name_parts(key);
                    let key_joined = parts.concat();
                    if let Some((entry, _)) =
                        self.denied.iter().find(|(_, joined)| key_joined == *joined)
                    {
                        found.denied = Some(Finding::DeniedKey {
                            pointer: pointer.clone(),
                            entry: entry.clone(),
                        });
                        return;
                    }
                    if found.credential_key.is_none()
                        && let Some(name) = self.credential_name(&parts)
                    {
                        found.credential_key = Some(Finding::CredentialKey {
                            pointer: pointer.clone(),
                            name: name.to_owned(),
                        });
                    }
                    if found.credential_value.is_none()
                        && let Some(shape) = key_shape
                    {
                        found.credential_value = Some(Finding::CredentialValue {
                            pointer: pointer.clone(),
                            shape,
                        });
                    }
                    self.walk(child, pointer, found);
                    pointer.truncate(length);
                }
                if found.credential_key.is_none() && map.len() > 1 {
                    found.credential_key = self.named_value(map, pointer);
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

    /// The credential name a key of `parts` spells: adjacent parts that, joined, are a
    /// credential name joined (`api`, `key` and `apikey` both spell `api_key`).
    fn credential_name(&self, parts: &[String]) -> Option<&str> {
        self.credential
            .iter()
            .find_map(|(name, joined)| spells(parts, joined).then_some(name.as_str()))
    }

    /// A credential carried as a name/value pair of one object (`{"name": "DB_PASSWORD",
    /// "value": "..."}`, as environment lists, header lists and parameter stores write them):
    /// a member named `name`, `key`, `field`, `header`, `param`, `parameter` or `variable`
    /// (last part) whose string value is a credential-shaped identifier, beside a non-empty
    /// member named `value` (last part). Reported at the value member.
    fn named_value(&self, map: &serde_json::Map<String, Value>, pointer: &str) -> Option<Finding> {
        let last_part = |key: &str| name_parts(key).pop().unwrap_or_default();
        let name = map.iter().find_map(|(key, value)| {
            let text = value.as_str()?;
            let naming = matches!(
                last_part(key).as_str(),
                "name" | "key" | "field" | "header" | "param" | "parameter" | "variable"
            );
            let identifier =
                !text.is_empty() && text.len() <= 128 && !text.chars().any(char::is_whitespace);
            if naming && identifier {
                self.credential_name(&name_parts(text))
            } else {
                None
            }
        })?;
        let (key, _) = map.iter().find(|(key, value)| {
            last_part(key) == "value"
                && match value {
                    Value::String(text) => !text.is_empty(),
                    Value::Number(_) | Value::Array(_) | Value::Object(_) => true,
                    Value::Null | Value::Bool(_) => false,
                }
        })?;
        let mut at = pointer.to_owned();
        if credential_shape(key).is_some() {
            at.push_str("/*");
        } else {
            push_pointer(&mut at, key);
        }
        Some(Finding::CredentialKey {
            pointer: at,
            name: name.to_owned(),
        })
    }
}

/// Whether adjacent `parts`, joined, are `joined` (`["x", "api", "key"]` spells `apikey`).
fn spells(parts: &[String], joined: &str) -> bool {
    (0..parts.len()).any(|start| {
        let mut length = 0;
        for part in &parts[start..] {
            if !joined[length..].starts_with(part.as_str()) {
                return false;
            }
            length += part.len();
            if length == joined.len() {
                return true;
            }
        }
        false
    })
}

/// `pointer` with every segment that is a credential replaced by `*`, so an error that names a
/// location never shows a credential used as an object key. Segments are unescaped (RFC 6901)
/// before they are checked.
pub(crate) fn redact_pointer(pointer: &str) -> String {
    pointer
        .split('/')
        .enumerate()
        .map(|(index, segment)| {
            let unescaped = segment.replace("~1", "/").replace("~0", "~");
            if index > 0 && credential_shape(&unescaped).is_some() {
                "*"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
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
    /// An AWS access key id (`AKIA` or `ASIA` and 16 upper-case letters or digits).
    AwsAccessKeyId,
    /// An AWS secret access key: 40 base64 characters after a `name=` / `name:` or near the
    /// word `secret` or `aws`.
    AwsSecretAccessKey,
    /// A GitHub token (`ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_`, `github_pat_`).
    GitHubToken,
    /// A Slack token (`xoxb-`, `xoxp-`, `xoxa-`, `xoxs-`, `xapp-`).
    SlackToken,
    /// HTTP basic credentials (`Basic <base64 of user:password>`).
    BasicAuth,
}

impl CredentialShape {
    /// A stable name of the shape (`jwt`, `pem_block`, `bearer_token`, `connection_string`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Jwt => "jwt",
            Self::PemBlock => "pem_block",
            Self::BearerToken => "bearer_token",
            Self::ConnectionString => "connection_string",
            Self::AwsAccessKeyId => "aws_access_key_id",
            Self::AwsSecretAccessKey => "aws_secret_access_key",
            Self::GitHubToken => "github_token",
            Self::SlackToken => "slack_token",
            Self::BasicAuth => "basic_auth",
        }
    }
}

impl std::fmt::Display for CredentialShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The credential `text` contains, if any: a JWT, a PEM block, a bearer token, a URL with a
/// password, an AWS access key id or secret access key, a GitHub or Slack token or HTTP basic
/// credentials, anywhere in the text.
pub fn credential_shape(text: &str) -> Option<CredentialShape> {
    // Every shape is ASCII; lower-casing ASCII keeps byte offsets.
    let lower = text.to_ascii_lowercase();
    if contains_jwt(text) {
        Some(CredentialShape::Jwt)
    } else if contains_pem(&lower) {
        Some(CredentialShape::PemBlock)
    } else if contains_bearer(text, &lower) {
        Some(CredentialShape::BearerToken)
    } else if contains_url_password(text) {
        Some(CredentialShape::ConnectionString)
    } else if contains_aws_access_key_id(text) {
        Some(CredentialShape::AwsAccessKeyId)
    } else if contains_aws_secret_access_key(text, &lower) {
        Some(CredentialShape::AwsSecretAccessKey)
    } else if contains_github_token(text) {
        Some(CredentialShape::GitHubToken)
    } else if contains_slack_token(text) {
        Some(CredentialShape::SlackToken)
    } else if contains_basic_auth(text, &lower) {
        Some(CredentialShape::BasicAuth)
    } else {
        None
    }
}

/// Byte offsets of `needle` in `haystack` that no ASCII letter or digit precedes.
fn word_starts<'a>(haystack: &'a str, needle: &'a str) -> impl Iterator<Item = usize> + 'a {
    let bytes = haystack.as_bytes();
    haystack
        .match_indices(needle)
        .map(|(start, _)| start)
        .filter(move |&start| start == 0 || !bytes[start - 1].is_ascii_alphanumeric())
}

/// The length of the run of bytes from `start` that `accept` takes.
fn run(bytes: &[u8], start: usize, accept: impl Fn(u8) -> bool) -> usize {
    bytes[start..].iter().take_while(|&&b| accept(b)).count()
}

/// The longest token body a prefix-anchored shape looks at. Bodies of one shape can overlap
/// (`xoxb-xoxb-...` has a prefix every five bytes, all inside one run), so an unbounded run
/// per prefix would make the scan quadratic in the text.
const TOKEN_BODY_MAX: usize = 256;

/// [`run`], counting at most [`TOKEN_BODY_MAX`] bytes.
fn bounded_run(bytes: &[u8], start: usize, accept: impl Fn(u8) -> bool) -> usize {
    let end = bytes.len().min(start + TOKEN_BODY_MAX);
    run(&bytes[..end], start, accept)
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

/// `-----BEGIN <LABEL>-----` in any case (`lower` is the text lower-cased), the label letters,
/// digits and spaces.
fn contains_pem(lower: &str) -> bool {
    lower.match_indices("-----begin ").any(|(start, found)| {
        let rest = &lower[start + found.len()..];
        let label_end = rest
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == ' '))
            .unwrap_or(rest.len());
        label_end > 0 && rest[label_end..].starts_with("-----")
    })
}

/// `Bearer` (any case) then spaces and a token68 (RFC 7235) of at least 16 characters with at
/// least one digit; `bearer of news` is not a token.
fn contains_bearer(text: &str, lower: &str) -> bool {
    let bytes = text.as_bytes();
    word_starts(lower, "bearer").any(|start| {
        let mut position = start + "bearer".len();
        let spaces = run(bytes, position, |b| b == b' ' || b == b'\t');
        if spaces == 0 {
            return false;
        }
        position += spaces;
        let token = run(bytes, position, |b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/')
        });
        let token = &bytes[position..position + token];
        token.len() >= 16 && token.iter().any(u8::is_ascii_digit)
    })
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

/// `AKIA` (a long-term key) or `ASIA` (a temporary one) and exactly 16 upper-case letters or
/// digits, not inside a longer word.
fn contains_aws_access_key_id(text: &str) -> bool {
    let bytes = text.as_bytes();
    ["AKIA", "ASIA"].iter().any(|prefix| {
        word_starts(text, prefix).any(|start| {
            let body = start + prefix.len();
            let length = run(bytes, body, |b| {
                b.is_ascii_uppercase() || b.is_ascii_digit()
            });
            length == 16
                && bytes
                    .get(body + length)
                    .is_none_or(|b| !b.is_ascii_alphanumeric())
        })
    })
}

fn is_base64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'+' || b == b'/'
}

/// An AWS secret access key: a run of exactly 40 base64 characters with an upper-case letter, a
/// lower-case letter and a digit (a random key has all three; a hex digest has no upper-case or
/// no lower-case letter), and a context that says it is a key: `name=`, `name:` (quotes and
/// spaces allowed) right before it, or `secret` or `aws` among the 64 bytes before it. A bare
/// 40-character string is not flagged: without a context it is as likely an id or a path.
fn contains_aws_secret_access_key(text: &str, lower: &str) -> bool {
    let bytes = text.as_bytes();
    let mut position = 0;
    while position < bytes.len() {
        let length = run(bytes, position, is_base64);
        if length == 0 {
            position += 1;
            continue;
        }
        let start = position;
        position += length;
        let padded = bytes.get(position) == Some(&b'=');
        if length != 40 || padded {
            continue;
        }
        let candidate = &bytes[start..position];
        let mixed = candidate.iter().any(u8::is_ascii_uppercase)
            && candidate.iter().any(u8::is_ascii_lowercase)
            && candidate.iter().any(u8::is_ascii_digit);
        if mixed && (after_assignment(bytes, start) || near_key_word(lower, start)) {
            return true;
        }
    }
    false
}

/// Whether `=` or `:` after a name (letters, digits, `_`, `-`, `.`) comes right before `start`,
/// quotes and spaces aside: `key=VALUE`, `key: "VALUE"`.
fn after_assignment(bytes: &[u8], start: usize) -> bool {
    let skip = |b: u8| matches!(b, b' ' | b'\t' | b'"' | b'\'');
    let mut position = start;
    while position > 0 && skip(bytes[position - 1]) {
        position -= 1;
    }
    if position == 0 || !matches!(bytes[position - 1], b'=' | b':') {
        return false;
    }
    position -= 1;
    while position > 0 && skip(bytes[position - 1]) {
        position -= 1;
    }
    position > 0
        && (bytes[position - 1].is_ascii_alphanumeric()
            || matches!(bytes[position - 1], b'_' | b'-' | b'.'))
}

/// Whether a word starting with `secret` or `aws` (`aws_secret`, `AWS`, `secrets`; not `laws`)
/// occurs among the 64 bytes of `lower` before `start`.
fn near_key_word(lower: &str, start: usize) -> bool {
    let bytes = lower.as_bytes();
    let from = start.saturating_sub(64);
    ["secret", "aws"].iter().any(|word| {
        (from..start.saturating_sub(word.len() - 1)).any(|at| {
            bytes[at..].starts_with(word.as_bytes())
                && (at == 0 || !bytes[at - 1].is_ascii_alphabetic())
        })
    })
}

/// A GitHub token: `ghp_`, `gho_`, `ghu_`, `ghs_` or `ghr_` and at least 30 letters or digits
/// (the current format has 36), or `github_pat_` and at least 22 letters, digits or `_`.
fn contains_github_token(text: &str) -> bool {
    let bytes = text.as_bytes();
    let classic = ["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]
        .iter()
        .any(|prefix| {
            word_starts(text, prefix)
                .any(|start| run(bytes, start + prefix.len(), |b| b.is_ascii_alphanumeric()) >= 30)
        });
    classic
        || word_starts(text, "github_pat_").any(|start| {
            bounded_run(bytes, start + "github_pat_".len(), |b| {
                b.is_ascii_alphanumeric() || b == b'_'
            }) >= 22
        })
}

/// A Slack token: `xoxb-`, `xoxp-`, `xoxa-`, `xoxs-` or `xapp-` and at least 10 letters,
/// digits or `-`, a digit among them.
fn contains_slack_token(text: &str) -> bool {
    let bytes = text.as_bytes();
    ["xoxb-", "xoxp-", "xoxa-", "xoxs-", "xapp-"]
        .iter()
        .any(|prefix| {
            word_starts(text, prefix).any(|start| {
                let body = start + prefix.len();
                let length = bounded_run(bytes, body, |b| b.is_ascii_alphanumeric() || b == b'-');
                length >= 10 && bytes[body..body + length].iter().any(u8::is_ascii_digit)
            })
        })
}

/// `Basic` (any case), spaces, then base64 that decodes to printable `user:password` text
/// (RFC 7617). `basic training` does not decode; `Basic YWJj` decodes to `abc`, no colon.
fn contains_basic_auth(text: &str, lower: &str) -> bool {
    use base64::Engine as _;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let bytes = text.as_bytes();
    word_starts(lower, "basic").any(|start| {
        let mut position = start + "basic".len();
        let spaces = run(bytes, position, |b| b == b' ' || b == b'\t');
        if spaces == 0 {
            return false;
        }
        position += spaces;
        let length = run(bytes, position, is_base64);
        let padding = run(bytes, position + length, |b| b == b'=').min(2);
        let Ok(decoded) = LENIENT.decode(&bytes[position..position + length + padding]) else {
            return false;
        };
        std::str::from_utf8(&decoded).is_ok_and(|credentials| {
            credentials.len() >= 2
                && credentials.contains(':')
                && !credentials.chars().any(char::is_control)
        })
    })
}

/// The reference project's policy (`contracts/evc.yaml`), for unit tests.
#[cfg(test)]
impl PayloadPolicy {
    pub(crate) fn reference() -> Self {
        Self::new(
            ["body_text", "instruction_text", "payload_blob", "iu_body"],
            [
                "password",
                "passwd",
                "pwd",
                "token",
                "api_key",
                "secret",
                "credential",
                "authorization",
                "private_key",
            ],
            65_536,
        )
    }
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
    fn redaction_hides_named_and_shaped_credentials_and_keeps_the_rest() {
        let policy = PayloadPolicy::new(["body_text"], ["password", "token"], 65_536);
        let payload = serde_json::json!({
            "unit_id": "u-1",
            "bodyText": "the letter",
            "owner": {"DB_PASSWORD": "hunter2", "name": "ada"},
            "links": ["https://example.org", "postgres://app:s3cret@db/prod"],
            "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB": 1,
            "count": 3,
        });
        assert_eq!(
            policy.redact(&payload),
            serde_json::json!({
                "unit_id": "u-1",
                "bodyText": REDACTED,
                "owner": {"DB_PASSWORD": REDACTED, "name": "ada"},
                "links": ["https://example.org", REDACTED],
                "[redacted] 1": 1,
                "count": 3,
            })
        );
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
        let policy = PayloadPolicy::reference().compile();
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

    #[test]
    fn cloud_and_service_tokens_are_credentials() {
        let cases = [
            ("AKIAIOSFODNN7EXAMPLE", CredentialShape::AwsAccessKeyId),
            (
                "key id ASIAY34FZKBOKMUTVV7A, region eu-west-1",
                CredentialShape::AwsAccessKeyId,
            ),
            (
                "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                CredentialShape::AwsSecretAccessKey,
            ),
            (
                "secret: \"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\"",
                CredentialShape::AwsSecretAccessKey,
            ),
            (
                "sk=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                CredentialShape::AwsSecretAccessKey,
            ),
            (
                "AWS wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                CredentialShape::AwsSecretAccessKey,
            ),
            (
                "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
                CredentialShape::GitHubToken,
            ),
            (
                "token gho_16C7e42F292c6912E7710c838347Ae178B4a used",
                CredentialShape::GitHubToken,
            ),
            (
                "ghu_16C7e42F292c6912E7710c838347Ae178B4a",
                CredentialShape::GitHubToken,
            ),
            (
                "ghs_16C7e42F292c6912E7710c838347Ae178B4a",
                CredentialShape::GitHubToken,
            ),
            (
                "ghr_16C7e42F292c6912E7710c838347Ae178B4a",
                CredentialShape::GitHubToken,
            ),
            (
                "github_pat_11ABCDEFG0123456789abc_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVW",
                CredentialShape::GitHubToken,
            ),
            (
                "xoxb-2620512345-4212345678901-AbCdEfGhIjKlMnOpQrStUvWx",
                CredentialShape::SlackToken,
            ),
            (
                "xoxp-1234567890-1234567890-abcdef",
                CredentialShape::SlackToken,
            ),
            (
                "xoxa-2-1234567890-abcdefABCDEF",
                CredentialShape::SlackToken,
            ),
            (
                "xoxs-1234567890-1234567890-abcdef",
                CredentialShape::SlackToken,
            ),
            (
                "xapp-1-A0123456789-1234567890-abcdef0123",
                CredentialShape::SlackToken,
            ),
            // "user:pass"
            (
                "Authorization: Basic dXNlcjpwYXNz",
                CredentialShape::BasicAuth,
            ),
            // "aladdin:opensesame"
            ("basic YWxhZGRpbjpvcGVuc2VzYW1l", CredentialShape::BasicAuth),
            (
                "-----begin private key-----\nMIIEvQIBADANBg\n-----end private key-----",
                CredentialShape::PemBlock,
            ),
            ("-----Begin Rsa Private Key-----", CredentialShape::PemBlock),
        ];
        for (text, shape) in cases {
            assert_eq!(credential_shape(text), Some(shape), "{text}");
        }
    }

    #[test]
    fn near_misses_of_token_shapes_are_not_credentials() {
        let cases = [
            // A SHA-1 digest and a git commit id: 40 hex characters.
            "da39a3ee5e6b4b0d3255bfef95601890afd80709",
            "commit=da39a3ee5e6b4b0d3255bfef95601890afd80709",
            "DA39A3EE5E6B4B0D3255BFEF95601890AFD80709",
            // 40 base64 characters with no key name or `name=` before them.
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "the path is wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY today",
            "she draws wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            // Too short, too long or not bounded for an access key id.
            "AKIA1234",
            "AKIAIOSFODNN7EXAMPLEXX",
            "XAKIAIOSFODNN7EXAMPLE",
            "AKIAiosfodnn7example",
            "ghp_short",
            "the ghp_ prefix",
            "xoxb-",
            "xoxb-team",
            "basic training",
            "Basic auth is supported",
            "basic information about the unit",
            "Basic plan: 10 seats",
            "basic YWJj",
            "-----begin-----",
            "passage",
            "keyboard",
            "bypass",
        ];
        for text in cases {
            assert_eq!(credential_shape(text), None, "{text}");
        }
    }

    #[test]
    fn credential_key_names_match_in_any_case_and_separator() {
        let policy = PayloadPolicy::reference().compile();
        for key in [
            "passwd",
            "pwd",
            "user_pwd",
            "private_key",
            "privateKey",
            "PRIVATE-KEY",
            "apikey",
            "apiKey",
            "api_key",
            "api-key",
            "API_KEY",
            "API-KEY",
            "APIKey",
            "x-api-key",
            "X-Api-Key",
            "partnerApiKey",
            "aws_secret_access_key",
            "client_secret",
        ] {
            let payload = json!({"a": {key: "x"}});
            assert!(
                matches!(policy.scan(&payload), Some(Finding::CredentialKey { .. })),
                "{key}"
            );
        }
        for key in [
            "passage",
            "keyboard",
            "bypass",
            "compass",
            "tokenizer",
            "secretary_id",
            "api_version_key",
            "key",
            "api",
            "private",
            "public_key",
            "keyId",
        ] {
            assert_eq!(policy.scan(&json!({key: "x"})), None, "{key}");
        }
    }

    #[test]
    fn credentials_are_found_at_any_depth_and_in_array_elements() {
        let policy = PayloadPolicy::reference().compile();
        let mut deep = json!({"apiKey": "x"});
        for _ in 0..100 {
            deep = json!({"next": deep});
        }
        assert!(matches!(
            policy.scan(&deep),
            Some(Finding::CredentialKey { .. })
        ));
        let mut deep = json!(["AKIAIOSFODNN7EXAMPLE"]);
        for _ in 0..100 {
            deep = json!([1, deep]);
        }
        assert!(matches!(
            policy.scan(&deep),
            Some(Finding::CredentialValue {
                shape: CredentialShape::AwsAccessKeyId,
                ..
            })
        ));
    }

    #[test]
    fn unicode_escaped_credentials_are_scanned_decoded() {
        let policy = PayloadPolicy::reference().compile();
        let payload: Value =
            serde_json::from_str(r#"{"note": "\u0041KIAIOSFODNN7EXAMPLE", "p\u0077d": 1}"#)
                .expect("valid JSON");
        assert_eq!(payload["note"], "AKIAIOSFODNN7EXAMPLE");
        assert_eq!(
            policy.scan(&payload),
            Some(Finding::CredentialKey {
                pointer: "/pwd".into(),
                name: "pwd".into()
            })
        );
        let payload: Value =
            serde_json::from_str(r#"{"note": "\u0041KIAIOSFODNN7EXAMPLE"}"#).expect("valid JSON");
        assert!(matches!(
            policy.scan(&payload),
            Some(Finding::CredentialValue {
                shape: CredentialShape::AwsAccessKeyId,
                ..
            })
        ));
    }

    #[test]
    fn a_key_that_is_a_credential_is_found_and_kept_out_of_pointers() {
        let policy = PayloadPolicy::reference().compile();
        let payload = json!({"sessions": {JWT: {"user": "u1"}}});
        let found = policy.scan(&payload);
        assert_eq!(
            found,
            Some(Finding::CredentialValue {
                pointer: "/sessions/*".into(),
                shape: CredentialShape::Jwt
            })
        );
        // A later finding under a credential-shaped key does not show the key either.
        let payload =
            json!({"by_token": {"ghp_16C7e42F292c6912E7710c838347Ae178B4a": {"body_text": "x"}}});
        assert_eq!(
            policy.scan(&payload),
            Some(Finding::DeniedKey {
                pointer: "/by_token/*/body_text".into(),
                entry: "body_text".into()
            })
        );
    }

    #[test]
    fn digest_keys_are_hmac_sha256_and_never_shown() {
        // RFC 4231, test case 6 (a key longer than SHA-256's block).
        let key = DigestKey::new(vec![0xaa; 131]).expect("long enough");
        assert_eq!(
            key.digest_hex(b"Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
        let secret = "k".repeat(31);
        let error = DigestKey::new(secret.clone()).expect_err("too short");
        assert_eq!(error, DigestKeyError::TooShort { bytes: 31 });
        assert!(!format!("{error} {error:?}").contains(&secret));
        let secret = "s3cret-".repeat(5);
        let key = DigestKey::new(secret.clone()).expect("long enough");
        let policy = PayloadPolicy::reference().with_digest_key(key.clone());
        assert!(!format!("{key:?} {policy:?}").contains("s3cret"));
    }

    #[test]
    fn pointers_lose_credential_segments_only() {
        assert_eq!(redact_pointer(""), "");
        assert_eq!(redact_pointer("/a/0/b~1c"), "/a/0/b~1c");
        assert_eq!(
            redact_pointer(&format!("/sessions/{JWT}/n")),
            "/sessions/*/n"
        );
        // A segment is unescaped before it is checked: `~1` is the key's `/`.
        assert_eq!(
            redact_pointer("/k/aws_secret=wJalrXUtnFEMI~1K7MDENG~1bPxRfiCYEXAMPLEKEY"),
            "/k/*"
        );
    }

    #[test]
    fn a_credential_named_by_a_sibling_field_is_found() {
        let policy = PayloadPolicy::reference().compile();
        for payload in [
            json!({"env": [{"name": "DB_PASSWORD", "value": "hunter2"}]}),
            json!({"headers": [{"key": "X-Api-Key", "value": "abc123"}]}),
            json!({"params": [{"Name": "aws_secret_access_key", "Value": "abc"}]}),
        ] {
            assert!(
                matches!(policy.scan(&payload), Some(Finding::CredentialKey { .. })),
                "{payload}"
            );
        }
        for payload in [
            json!({"env": [{"name": "DB_HOST", "value": "db.internal"}]}),
            json!({"field": "password", "error": "too short"}),
            json!({"name": "password reset", "value": 3}),
            json!({"name": "password", "value": ""}),
        ] {
            assert_eq!(policy.scan(&payload), None, "{payload}");
        }
    }
}
