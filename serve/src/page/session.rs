//! A signed-in browser's session: a cookie holding the caller's token digest, when it was
//! issued, and an HMAC of both under a key the process draws at start. A session ends after
//! [`SESSION_LIFETIME`], when the process restarts (a new key), or when the token leaves the
//! tokens file; the cookie never holds the token, and a digest without the key opens nothing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::auth::{Principal, Tokens, digest_hex};

/// How long a session lasts.
pub(crate) const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// How long a form post's answer waits for its page.
pub(crate) const NOTICE_LIFETIME: Duration = Duration::from_secs(60);

/// The key sessions are signed with, drawn from the operating system at start.
pub(crate) struct SessionKey([u8; 32]);

impl SessionKey {
    /// A key from the operating system's random source.
    ///
    /// # Panics
    /// When the operating system has no random source: a server that cannot sign sessions
    /// must not start.
    pub(crate) fn draw() -> Self {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).expect("the operating system's random source");
        Self(key)
    }

    /// The cookie value of a session for `token`, issued now.
    pub(crate) fn issue(&self, token: &str) -> String {
        let issued = now_secs();
        let digest = digest_hex(token);
        format!("{digest}.{issued}.{}", self.sign(&digest, issued))
    }

    /// The caller of the session `value`, if it is signed by this key, not expired, and its
    /// token is still known.
    pub(crate) fn open<'t>(&self, value: &str, tokens: &'t Tokens) -> Option<&'t Principal> {
        let mut parts = value.split('.');
        let (digest, issued, tag) = (parts.next()?, parts.next()?, parts.next()?);
        let issued: u64 = issued.parse().ok()?;
        if parts.next().is_some()
            || now_secs().saturating_sub(issued) > SESSION_LIFETIME.as_secs()
            || !self.verify(digest, issued, tag)
        {
            return None;
        }
        tokens.principal_by_digest(digest)
    }

    /// A cookie value carrying `notice` to the page of `consumer` a form's post redirects
    /// to, signed so that only this process's posts put text on its pages, for that page
    /// only, for [`NOTICE_LIFETIME`].
    pub(crate) fn seal(&self, consumer: &str, notice: &str) -> String {
        let issued = now_secs();
        let hex = encode_hex(notice.as_bytes());
        let tag = encode_hex(
            &self
                .notice_mac(consumer, issued, &hex)
                .finalize()
                .into_bytes(),
        );
        format!("{hex}.{issued}.{tag}")
    }

    /// The notice of a cookie value [`Self::seal`] wrote with this key for `consumer`, unless
    /// it is older than [`NOTICE_LIFETIME`].
    pub(crate) fn unseal(&self, consumer: &str, value: &str) -> Option<String> {
        let mut parts = value.split('.');
        let (hex, issued, tag) = (parts.next()?, parts.next()?, parts.next()?);
        let issued: u64 = issued.parse().ok()?;
        if parts.next().is_some() || now_secs().saturating_sub(issued) > NOTICE_LIFETIME.as_secs() {
            return None;
        }
        self.notice_mac(consumer, issued, hex)
            .verify_slice(&decode_hex(tag)?)
            .ok()?;
        String::from_utf8(decode_hex(hex)?).ok()
    }

    /// The MAC of a notice, under a key of its own derived from the session key, so that no
    /// notice's tag is ever a session's.
    fn notice_mac(&self, consumer: &str, issued: u64, hex: &str) -> Hmac<Sha256> {
        let mut derive = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        derive.update(b"evc notice key");
        let key = derive.finalize().into_bytes();
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        mac.update(consumer.as_bytes());
        mac.update(b"\n");
        mac.update(issued.to_string().as_bytes());
        mac.update(b"\n");
        mac.update(hex.as_bytes());
        mac
    }

    fn mac(&self, digest: &str, issued: u64) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        mac.update(digest.as_bytes());
        mac.update(b".");
        mac.update(issued.to_string().as_bytes());
        mac
    }

    fn sign(&self, digest: &str, issued: u64) -> String {
        encode_hex(&self.mac(digest, issued).finalize().into_bytes())
    }

    fn verify(&self, digest: &str, issued: u64, tag: &str) -> bool {
        let Some(tag) = decode_hex(tag) else {
            return false;
        };
        self.mac(digest, issued).verify_slice(&tag).is_ok()
    }
}

fn encode_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    hex.as_bytes()
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef01234567";

    #[test]
    fn a_session_opens_only_with_its_key_and_its_token() {
        let tokens = Tokens::parse(&format!("reader ada {TOKEN}")).expect("valid");
        let key = SessionKey::draw();
        let cookie = key.issue(TOKEN);
        assert!(!cookie.contains(TOKEN));
        assert_eq!(
            key.open(&cookie, &tokens).map(|p| p.name.as_str()),
            Some("ada")
        );
        // Another process's key, a bare digest, a changed time or tag open nothing.
        assert_eq!(SessionKey::draw().open(&cookie, &tokens), None);
        assert_eq!(key.open(&digest_hex(TOKEN), &tokens), None);
        let parts: Vec<&str> = cookie.split('.').collect();
        let later = format!(
            "{}.{}.{}",
            parts[0],
            parts[1].parse::<u64>().unwrap_or(0) + 1,
            parts[2]
        );
        assert_eq!(key.open(&later, &tokens), None);
        assert_eq!(key.open(&format!("{cookie}0"), &tokens), None);
        // An expired session opens nothing.
        let old = now_secs() - SESSION_LIFETIME.as_secs() - 1;
        let digest = digest_hex(TOKEN);
        let expired = format!("{digest}.{old}.{}", key.sign(&digest, old));
        assert_eq!(key.open(&expired, &tokens), None);
        // A token removed from the file ends its sessions.
        let others = Tokens::parse(&format!("reader bob {TOKEN}x")).expect("valid");
        assert_eq!(key.open(&cookie, &others), None);
    }

    #[test]
    fn a_notice_opens_only_on_its_page_with_its_key_while_fresh() {
        let key = SessionKey::draw();
        let notice = "Refused: a plan; with \"quotes\" and ünïcode";
        let sealed = key.seal("audit", notice);
        assert!(
            sealed
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b.is_ascii_digit() || b == b'.'),
            "a cookie-safe value: {sealed}"
        );
        assert_eq!(key.unseal("audit", &sealed).as_deref(), Some(notice));
        assert_eq!(
            key.unseal("billing", &sealed),
            None,
            "another consumer's page"
        );
        assert_eq!(SessionKey::draw().unseal("audit", &sealed), None);
        let parts: Vec<&str> = sealed.split('.').collect();
        assert_eq!(
            key.unseal(
                "audit",
                &format!("{}00.{}.{}", parts[0], parts[1], parts[2])
            ),
            None
        );
        assert_eq!(key.unseal("audit", parts[0]), None);
        // A stale notice, even well signed, is not shown.
        let old = now_secs() - NOTICE_LIFETIME.as_secs() - 1;
        let tag = encode_hex(
            &key.notice_mac("audit", old, parts[0])
                .finalize()
                .into_bytes(),
        );
        assert_eq!(
            key.unseal("audit", &format!("{}.{old}.{tag}", parts[0])),
            None
        );
        // A notice's value does not open as a session, whatever token holds that digest.
        let tokens = Tokens::parse(&format!("reader ada {TOKEN}")).expect("valid");
        assert_eq!(key.open(&sealed, &tokens), None);
        let as_session = format!("{}.{}.{}", digest_hex(TOKEN), parts[1], parts[2]);
        assert_eq!(key.open(&as_session, &tokens), None);
    }
}
