//! Text from the command line, a configuration file or the database, made safe to print: a
//! consumer name or an error code with an escape sequence in it must not drive the terminal of
//! the operator who reads it.

use std::borrow::Cow;

/// `text` with its control characters, newlines included, written as Rust escapes (`\u{1b}`,
/// `\n`), and with the bidirectional overrides that make a terminal show text in another order
/// than it is (`\u{202e}`) escaped too. Other text is unchanged.
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

/// [`printable`], but newlines and tabs stay: for a whole message of several lines.
pub(crate) fn printable_lines(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

fn escape(text: &str, keep_lines: bool) -> Cow<'_, str> {
    let unsafe_char = |c: char| {
        (c.is_control() && !(keep_lines && matches!(c, '\n' | '\t')))
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_other_text_is_kept() {
        assert_eq!(printable("worker.sql.aggregate"), "worker.sql.aggregate");
        assert_eq!(printable("ünïcode \"quotes\" \\"), "ünïcode \"quotes\" \\");
        assert_eq!(
            printable("a\u{1b}[31mb\nc\u{7}\u{0}\u{9b}"),
            "a\\u{1b}[31mb\\nc\\u{7}\\0\\u{9b}"
        );
        assert_eq!(printable("x\u{202e}gnp.exe"), "x\\u{202e}gnp.exe");
        assert_eq!(printable_lines("one\ntwo\t\u{1b}"), "one\ntwo\t\\u{1b}");
        // Escaping twice changes nothing more.
        let once = printable("a\u{1b}b").into_owned();
        assert_eq!(printable(&once), once);
    }
}
