//! Who calls: bearer tokens mapped to a principal and a role, read from a tokens file.
//!
//! The file holds one caller per line, `ROLE NAME TOKEN [tenant=ID] [topics=NAME,...]` (blank
//! lines and `#` comments ignored). `topics=` limits the realtime topics the caller may
//! subscribe to (all, without it); `tenant=` binds the caller to one tenant: it is sent that
//! tenant's events only, and may use the realtime gateway and nothing else (the rest of the
//! API answers for every tenant the server sees). Only the SHA-256 of each token is kept in
//! memory, and no error repeats a token.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use crate::AppState;
use crate::error::ApiError;

/// Shortest token accepted: a guessable token is no authentication.
const MIN_TOKEN_CHARS: usize = 24;

/// Longest caller name: the store records people's names up to this length.
const MAX_NAME_CHARS: usize = 200;

/// What a caller may do. A reader reads; an operator also pauses, resumes and plans replays; an
/// approver also approves them. Neither an operator nor an approver can do the other's job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Reads everything but payloads.
    Reader,
    /// Reads; pauses, resumes and plans replays.
    Operator,
    /// Reads; approves replays another person planned.
    Approver,
}

impl Role {
    /// The role's name in a tokens file.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Reader => "reader",
            Self::Operator => "operator",
            Self::Approver => "approver",
        }
    }

    /// Whether a caller with this role may do what `needed` may.
    pub fn allows(self, needed: Role) -> bool {
        needed == Role::Reader || self == needed
    }

    fn parse(word: &str) -> Option<Self> {
        [Self::Reader, Self::Operator, Self::Approver]
            .into_iter()
            .find(|role| role.as_str() == word)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The caller's name, as audit rows record it.
    pub name: String,
    /// What the caller may do.
    pub role: Role,
    /// The one tenant whose events the caller may receive (`None`: every tenant the server
    /// sees). A caller bound to a tenant may use the realtime gateway only.
    pub tenant: Option<String>,
    /// The realtime topics the caller may subscribe to (`None`: all of them).
    pub topics: Option<BTreeSet<String>>,
}

impl Principal {
    /// A caller with `role`, for every tenant and topic.
    pub fn new(name: impl Into<String>, role: Role) -> Self {
        Self {
            name: name.into(),
            role,
            tenant: None,
            topics: None,
        }
    }

    /// Whether the caller may subscribe to the topic `name`.
    pub fn may_read_topic(&self, name: &str) -> bool {
        self.topics
            .as_ref()
            .is_none_or(|topics| topics.contains(name))
    }

    /// `Ok` when the caller's role allows what `first` or `second` may do, else 403 (naming
    /// `second`).
    pub(crate) fn require_either(&self, first: Role, second: Role) -> Result<(), ApiError> {
        self.require(first).or_else(|_| self.require(second))
    }

    /// `Ok` when the caller's role allows what `needed` may do, else 403.
    pub(crate) fn require(&self, needed: Role) -> Result<(), ApiError> {
        if self.role.allows(needed) {
            Ok(())
        } else {
            Err(ApiError::Forbidden {
                role: self.role,
                needed,
            })
        }
    }
}

/// A tokens file that cannot be used. No message repeats a word of the file: a line whose words
/// are out of order would otherwise print its token.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokensError {
    /// A line is not `ROLE NAME TOKEN` and options.
    #[error("line {line}: expected `ROLE NAME TOKEN [tenant=ID] [topics=NAME,...]`")]
    Shape {
        /// The line, from 1.
        line: usize,
    },
    /// A word after the token is not `tenant=ID` or `topics=NAME,...` (each at most once, with
    /// a value).
    #[error(
        "line {line}: after the token, only `tenant=ID` and `topics=NAME,...` may follow, \
         once each, with a value"
    )]
    UnknownOption {
        /// The line, from 1.
        line: usize,
    },
    /// A line's first word is not a role.
    #[error("line {line}: the first word is not a role (reader, operator or approver)")]
    UnknownRole {
        /// The line, from 1.
        line: usize,
    },
    /// A line's second word is not a login: printable ASCII, at most 200 characters (as the
    /// store records people).
    #[error(
        "line {line}: the second word is not a login (printable ASCII, at most 200 characters)"
    )]
    NotALogin {
        /// The line, from 1.
        line: usize,
    },
    /// A token is too short to be a secret, or has characters an HTTP header cannot carry.
    #[error("line {line}: the token must be at least {MIN_TOKEN_CHARS} printable ASCII characters")]
    WeakToken {
        /// The line, from 1.
        line: usize,
    },
    /// Two lines hold the same token.
    #[error("line {line}: the token is already given to another line")]
    DuplicateToken {
        /// The line, from 1.
        line: usize,
    },
    /// The file grants nobody anything.
    #[error("the tokens file names no caller")]
    Empty,
}

/// The callers the service knows, by the SHA-256 of their token. Its `Debug` counts them and
/// shows no digest: the digests name the callers' web sessions.
#[derive(Default, Clone)]
pub struct Tokens {
    by_digest: HashMap<String, Principal>,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokens")
            .field("callers", &self.by_digest.len())
            .finish_non_exhaustive()
    }
}

impl Tokens {
    /// Reads a tokens file's text: one `ROLE NAME TOKEN` per line.
    ///
    /// # Errors
    /// [`TokensError`], naming the line.
    pub fn parse(text: &str) -> Result<Self, TokensError> {
        let mut tokens = Self::default();
        for (index, line) in text.lines().enumerate() {
            let line_number = index + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let [role, name, token, ref options @ ..] = words[..] else {
                return Err(TokensError::Shape { line: line_number });
            };
            let line = line_number;
            let role = Role::parse(role).ok_or(TokensError::UnknownRole { line })?;
            if name.chars().count() > MAX_NAME_CHARS || !name.chars().all(|c| c.is_ascii_graphic())
            {
                return Err(TokensError::NotALogin { line });
            }
            if token.len() < MIN_TOKEN_CHARS || !token.chars().all(|c| c.is_ascii_graphic()) {
                return Err(TokensError::WeakToken { line });
            }
            let mut principal = Principal::new(name, role);
            for option in options {
                let unknown = TokensError::UnknownOption { line };
                match option.split_once('=') {
                    Some(("tenant", value)) if !value.is_empty() && principal.tenant.is_none() => {
                        principal.tenant = Some(value.to_owned());
                    }
                    Some(("topics", value)) if !value.is_empty() && principal.topics.is_none() => {
                        let topics: BTreeSet<String> =
                            value.split(',').map(str::to_owned).collect();
                        if topics.contains("") {
                            return Err(unknown);
                        }
                        principal.topics = Some(topics);
                    }
                    _ => return Err(unknown),
                }
            }
            if tokens
                .by_digest
                .insert(digest_hex(token), principal)
                .is_some()
            {
                return Err(TokensError::DuplicateToken { line });
            }
        }
        if tokens.by_digest.is_empty() {
            return Err(TokensError::Empty);
        }
        Ok(tokens)
    }

    /// The caller `token` names, if any.
    pub fn principal(&self, token: &str) -> Option<&Principal> {
        self.by_digest.get(&digest_hex(token))
    }

    /// The caller whose token has the SHA-256 `hex` (a session cookie's value), if any.
    pub(crate) fn principal_by_digest(&self, hex: &str) -> Option<&Principal> {
        self.by_digest.get(hex)
    }
}

pub(crate) fn digest_hex(token: &str) -> String {
    evc_runtime::sha256_hex(token.as_bytes())
}

/// The caller of a request: its `Authorization: Bearer` token must name a known principal,
/// else the request is answered 401 before the handler runs; a caller bound to a tenant is
/// answered 403 (it may use the realtime gateway only).
pub(crate) struct Caller(pub(crate) Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Subscriber(principal) = Subscriber::from_request_parts(parts, state).await?;
        if principal.tenant.is_some() {
            return Err(ApiError::NotPermitted(
                "a token bound to a tenant may use the realtime gateway only".to_owned(),
            ));
        }
        Ok(Self(principal))
    }
}

/// The caller of a realtime gateway route: any known principal, bound to a tenant or not;
/// 401 otherwise.
pub(crate) struct Subscriber(pub(crate) Principal);

impl FromRequestParts<AppState> for Subscriber {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| {
                let (scheme, token) = value.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .ok_or(ApiError::Unauthorized)?;
        state
            .tokens
            .principal(token)
            .cloned()
            .map(Self)
            .ok_or(ApiError::Unauthorized)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef01234567";

    #[test]
    fn a_tokens_file_maps_tokens_to_principals() {
        let tokens = Tokens::parse(&format!(
            "# callers\n\nreader ada {TOKEN}\noperator bob {TOKEN}x\n"
        ))
        .expect("valid");
        assert_eq!(
            tokens.principal(TOKEN),
            Some(&Principal::new("ada", Role::Reader))
        );
        assert_eq!(
            tokens.principal(&format!("{TOKEN}x")).map(|p| p.role),
            Some(Role::Operator)
        );
        assert_eq!(tokens.principal("nobody-has-this-token-at-all"), None);
    }

    #[test]
    fn a_line_may_bind_its_caller_to_a_tenant_and_topics() {
        let tokens = Tokens::parse(&format!(
            "reader ada {TOKEN} topics=iu.unit,trace tenant=acme\nreader bob {TOKEN}x\n"
        ))
        .expect("valid");
        let ada = tokens.principal(TOKEN).expect("ada");
        assert_eq!(ada.tenant.as_deref(), Some("acme"));
        assert!(ada.may_read_topic("trace") && ada.may_read_topic("iu.unit"));
        assert!(!ada.may_read_topic("workflow.run"));
        let bob = tokens.principal(&format!("{TOKEN}x")).expect("bob");
        assert!(bob.may_read_topic("workflow.run") && bob.tenant.is_none());
    }

    #[test]
    fn a_bad_tokens_file_names_the_line_and_never_a_word_of_it() {
        let cases = [
            ("reader ada\n".to_owned(), TokensError::Shape { line: 1 }),
            (
                format!("\nroot ada {TOKEN}"),
                TokensError::UnknownRole { line: 2 },
            ),
            // Words out of order: the token first, or second.
            (
                format!("{TOKEN} operator bob"),
                TokensError::UnknownRole { line: 1 },
            ),
            (
                format!("operator {TOKEN} bob"),
                TokensError::WeakToken { line: 1 },
            ),
            (
                format!("operator bob {TOKEN}x\nreader {TOKEN} {TOKEN}x"),
                TokensError::DuplicateToken { line: 2 },
            ),
            (
                "reader ada short-secret".to_owned(),
                TokensError::WeakToken { line: 1 },
            ),
            (
                format!("reader ada {TOKEN}\u{e9}"),
                TokensError::WeakToken { line: 1 },
            ),
            (
                format!("reader \u{430}da {TOKEN}"),
                TokensError::NotALogin { line: 1 },
            ),
            (
                format!("reader {} {TOKEN}", "a".repeat(201)),
                TokensError::NotALogin { line: 1 },
            ),
            (
                format!("reader ada {TOKEN}\napprover eve {TOKEN}"),
                TokensError::DuplicateToken { line: 2 },
            ),
            (
                format!("reader ada {TOKEN} {TOKEN}x"),
                TokensError::UnknownOption { line: 1 },
            ),
            (
                format!("reader ada {TOKEN} tenant=a tenant=b"),
                TokensError::UnknownOption { line: 1 },
            ),
            (
                format!("reader ada {TOKEN} topics=a,,b"),
                TokensError::UnknownOption { line: 1 },
            ),
            (
                format!("reader ada {TOKEN} tenant="),
                TokensError::UnknownOption { line: 1 },
            ),
            ("# nobody\n".to_owned(), TokensError::Empty),
        ];
        for (text, expected) in cases {
            let error = Tokens::parse(&text).expect_err(&text);
            let message = error.to_string();
            // The option names themselves are the message's own words.
            let secret_or_name = |w: &&str| {
                w.len() > 3 && Role::parse(w).is_none() && !matches!(*w, "tenant=" | "topics=")
            };
            for word in text.split_whitespace().filter(secret_or_name) {
                assert!(!message.contains(word), "{message:?} repeats {word:?}");
            }
            assert_eq!(error, expected, "{text}");
        }
    }

    #[test]
    fn roles_allow_reading_and_only_their_own_job() {
        for role in [Role::Reader, Role::Operator, Role::Approver] {
            assert!(role.allows(Role::Reader));
        }
        assert!(Role::Operator.allows(Role::Operator));
        assert!(!Role::Operator.allows(Role::Approver));
        assert!(!Role::Approver.allows(Role::Operator));
        assert!(!Role::Reader.allows(Role::Operator));
    }
}
