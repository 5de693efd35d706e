//! Strings that generated code cannot carry: a character that would break or disguise
//! generated Rust, docs or SQL (see [`crate::emit::unsafe_character`]) in text that becomes
//! docs, or a NUL anywhere. Checked per file as it is parsed, so the walk runs on the loader's
//! threads and a [`crate::LoadCache`] keeps its findings with the parse.

use crate::diagnostic::{Diagnostic, Rule};
use crate::source::SourceFile;
use crate::yaml::{Node, escape_pointer_segment};

/// Reports, into `out`, every string of the file `source` parsed to `tree` that holds such a
/// character.
pub(crate) fn check(source: &SourceFile, tree: &Node, out: &mut Vec<Diagnostic>) {
    if !may_hold_unsafe_character(source.text()) {
        return;
    }
    let mut pointer = String::new();
    control_characters_in(source.path(), tree, &mut pointer, None, false, source, out);
}

/// Keys whose string values generated code carries into comments and docs.
const PROSE_KEYS: &[&str] = &["description", "title", "summary", "$comment"];

/// Whether a scalar of this YAML text could hold a character that
/// [`crate::emit::unsafe_character`] finds: one written as it is, or a double-quoted escape that
/// stands for one (`\0`, `\a`, `\b`, `\e`, `\f`, `\r`, `\v`, `\N`, `\x..`, `\u....`,
/// `\U........`). When it cannot, the walk over the file's tree is skipped: most files hold
/// only printable ASCII, which one pass over the bytes shows.
fn may_hold_unsafe_character(text: &str) -> bool {
    let bytes = text.as_bytes();
    let plain_ascii = bytes
        .iter()
        .all(|&b| (0x20..0x7f).contains(&b) || b == b'\n' || b == b'\t');
    if !plain_ascii && crate::emit::unsafe_character(text).is_some() {
        return true;
    }
    bytes.windows(2).any(|pair| {
        pair[0] == b'\\'
            && matches!(
                pair[1],
                b'0' | b'a' | b'b' | b'e' | b'f' | b'r' | b'v' | b'N' | b'x' | b'u' | b'U'
            )
    })
}

/// Reports strings that hold a character generated code cannot carry (see
/// [`crate::emit::unsafe_character`]): text that becomes Rust docs (descriptions, titles,
/// summaries, property names, `enum` and `const` values) must hold none; any other string (data
/// such as `default`, `examples` or an `x-` extension, which generated files only quote) must
/// hold no NUL, which PostgreSQL text cannot store.
/// `pointer` is the node's, a buffer extended and cut back on the way down.
fn control_characters_in(
    path: &str,
    node: &Node,
    pointer: &mut String,
    key: Option<&str>,
    data: bool,
    source: &SourceFile,
    out: &mut Vec<Diagnostic>,
) {
    use crate::yaml::Value;
    // `what` is only built for a string that holds such a character: most strings hold none.
    let check = |text: &str,
                 node: &Node,
                 prose: bool,
                 what: &dyn Fn() -> String,
                 out: &mut Vec<Diagnostic>| {
        let found = match crate::emit::unsafe_character(text) {
            Some(c) if prose || c == '\0' => c,
            _ => return,
        };
        out.push(Diagnostic::new(
            Rule::ControlCharacter,
            node.location(source),
            format!(
                "{} holds {}, which generated code and comments cannot carry safely",
                what(),
                crate::emit::describe_character(found)
            ),
            "remove the character; write line breaks as real new lines",
        ));
    };
    match &node.value {
        Value::String(text) => {
            let prose = !data
                && key.is_some_and(|key| {
                    PROSE_KEYS.contains(&key) || key == "const" || key == "enum"
                });
            let what = || format!("the value at `{}` in `{path}`", display_pointer(pointer));
            check(text, node, prose, &what, out);
        }
        Value::Seq(items) => {
            let len = pointer.len();
            for (index, item) in items.iter().enumerate() {
                use std::fmt::Write as _;
                let _ = write!(pointer, "/{index}");
                control_characters_in(path, item, pointer, key, data, source, out);
                pointer.truncate(len);
            }
        }
        Value::Map(entries) => {
            let len = pointer.len();
            for (key_node, value) in entries {
                let Some(text) = key_node.as_str() else {
                    continue;
                };
                pointer.push('/');
                pointer.push_str(&escape_pointer_segment(text));
                let property_name = !data && key == Some("properties");
                let child: &str = pointer;
                let what = || format!("the key at `{}` in `{path}`", display_pointer(child));
                check(text, key_node, property_name, &what, out);
                let data = data
                    || (!property_name
                        && (text.starts_with("x-") || text == "default" || text == "examples"));
                control_characters_in(path, value, pointer, Some(text), data, source, out);
                pointer.truncate(len);
            }
        }
        _ => {}
    }
}

/// A pointer for messages: `/` for the root, characters that are not safe to print escaped.
fn display_pointer(pointer: &str) -> String {
    if pointer.is_empty() {
        return "/".to_owned();
    }
    pointer
        .chars()
        .map(
            |c| match crate::emit::unsafe_character(c.encode_utf8(&mut [0; 4])) {
                Some(_) => c.escape_unicode().to_string(),
                None => c.to_string(),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::may_hold_unsafe_character;

    #[test]
    fn only_text_that_can_carry_an_unsafe_character_is_walked() {
        for text in [
            "a: \"bell\\a\"\n",
            "a: \"\\x07\"\n",
            "a: \"\\u202E\"\n",
            "a: \"\\0\"\n",
            "a: b\r\n",
            "a: \"ok \u{202E}\"\n",
            "a: \"\u{85}\"\n",
        ] {
            assert!(may_hold_unsafe_character(text), "{text:?}");
        }
        for text in [
            "a: b\n\tc: d\n",
            "pattern: '^\\d+\\.\\w$'\n",
            "a: \"tab\\tnew\\nquote\\\"\"\n",
            "a: caf\u{e9}\n",
        ] {
            assert!(!may_hold_unsafe_character(text), "{text:?}");
        }
    }
}
