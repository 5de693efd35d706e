//! Text from contract files made safe to print.
//!
//! Keys, values and file names reach terminals and CI logs inside diagnostics. A line feed there
//! could start a forged GitHub workflow command (`::error file=...`), and ESC or BEL could drive
//! the terminal. [`escape`] is the one function every human-readable renderer passes such text
//! through; [`Snippet`] is the source excerpt shown under a diagnostic, escaped the same way and
//! cut to a window around the finding so no line of it is longer than a screen.

use std::borrow::Cow;
use std::fmt::Write as _;

use crate::source::SourceFile;

/// Characters of a line shown in full in a snippet; a longer line is cut to a window of this
/// many characters around the finding.
pub const SNIPPET_WIDTH: usize = 120;
/// Characters shown before the finding's column when a long line is cut.
const SNIPPET_LEAD: usize = 40;
/// The mark where a snippet line was cut.
const ELLIPSIS: char = '…';

/// Whether `c` must not reach a terminal or log as it is: control characters (C0, DEL, C1),
/// the Unicode line and paragraph separators, and the bidirectional formatting characters that
/// reorder what a reader sees.
fn is_unprintable(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every unprintable character written as an escape: `\n`, `\r`, `\t`, or
/// `\u{1b}`. Borrowed when nothing needed escaping.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unprintable) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        push_escaped(&mut out, c);
    }
    Cow::Owned(out)
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if is_unprintable(c) => {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
        c => out.push(c),
    }
}

/// A few lines of a source file around a finding, escaped and cut for display: the finding's
/// line with one line of context on each side. The text starts at line `first_line` (0-based)
/// of the file, and `label` is the finding's byte range inside the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snippet {
    /// The lines, `\n`-separated, escaped and cut.
    pub text: String,
    /// The 0-based line number of the snippet's first line in its file.
    pub first_line: usize,
    /// How many lines the snippet holds.
    pub line_count: usize,
    /// The byte offset and length of the finding inside [`Snippet::text`].
    pub label: (usize, usize),
}

impl Snippet {
    /// The excerpt of `file` around the byte range `offset..offset + len`. A range past the end
    /// or inside a character is clamped; a range over several lines is shown on its first line.
    pub fn new(file: &SourceFile, offset: usize, len: usize) -> Self {
        let text = file.text();
        let offset = floor_char_boundary(text, offset.min(text.len()));
        let line_start = text[..offset].rfind('\n').map_or(0, |index| index + 1);
        let line_end = text[offset..]
            .find('\n')
            .map_or(text.len(), |index| offset + index);
        let label_end = floor_char_boundary(text, offset.saturating_add(len).min(line_end));
        // The file's line index, not a count of line feeds: a file with many findings would
        // otherwise be scanned from the top for each.
        let line_index = (file.line_column(offset).0 as usize).saturating_sub(1);

        // The finding's column and width in characters decide the window; context lines share
        // it so the columns line up.
        let line = &text[line_start..line_end];
        let column = text[line_start..offset].chars().count();
        let label_chars = text[offset..label_end].chars().count();
        let window_start = if line.chars().count() > SNIPPET_WIDTH {
            column.saturating_sub(SNIPPET_LEAD)
        } else {
            0
        };

        let mut out = String::new();
        let mut first_line = line_index;
        if line_start > 0 {
            let previous_start = text[..line_start - 1]
                .rfind('\n')
                .map_or(0, |index| index + 1);
            render_line(
                &mut out,
                &text[previous_start..line_start - 1],
                window_start,
                None,
            );
            out.push('\n');
            first_line -= 1;
        }
        let mut label = (0, 0);
        render_line(
            &mut out,
            line,
            window_start,
            Some((column, label_chars, &mut label)),
        );
        let mut line_count = line_index + 1 - first_line;
        if line_end < text.len() {
            let next_start = line_end + 1;
            let next_end = text[next_start..]
                .find('\n')
                .map_or(text.len(), |index| next_start + index);
            if next_start < text.len() {
                out.push('\n');
                render_line(&mut out, &text[next_start..next_end], window_start, None);
                line_count += 1;
            }
        }
        Self {
            text: out,
            first_line,
            line_count,
            label,
        }
    }
}

/// Appends `line` (without its line feed), escaped, showing [`SNIPPET_WIDTH`] characters from
/// character `start` when it is longer than that. With `label`, also records where the
/// characters `column..column + width` landed in `out`, clamped to what is shown.
fn render_line(
    out: &mut String,
    line: &str,
    start: usize,
    label: Option<(usize, usize, &mut (usize, usize))>,
) {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let total = line.chars().count();
    let (start, end) = if total > SNIPPET_WIDTH {
        (start.min(total), (start + SNIPPET_WIDTH).min(total))
    } else {
        (0, total)
    };
    if start > 0 {
        out.push(ELLIPSIS);
    }
    let (column, width, slot) = match label {
        Some((column, width, slot)) => (column, width, Some(slot)),
        None => (usize::MAX, 0, None),
    };
    let mut label_start = None;
    let mut label_end = None;
    for (index, c) in line.chars().enumerate().take(end).skip(start) {
        if index == column {
            label_start = Some(out.len());
        }
        push_escaped(out, c);
        if index + 1 == column + width {
            label_end = Some(out.len());
        }
    }
    let at_end = out.len();
    if end < total {
        out.push(ELLIPSIS);
    }
    if let Some(slot) = slot {
        let begin = label_start.unwrap_or(at_end);
        let finish = if width == 0 {
            begin
        } else {
            label_end.unwrap_or(at_end).max(begin)
        };
        *slot = (begin, finish - begin);
    }
}

fn floor_char_boundary(text: &str, mut index: usize) -> usize {
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_writes_control_and_bidi_characters_as_escapes() {
        assert_eq!(escape("plain `key`"), Cow::Borrowed("plain `key`"));
        assert_eq!(
            escape("a\n::error file=x::y\u{1b}[31m\u{7}\r\t\u{202e}\u{85}"),
            "a\\n::error file=x::y\\u{1b}[31m\\u{7}\\r\\t\\u{202e}\\u{85}"
        );
    }

    #[test]
    fn a_short_line_is_shown_whole_with_its_neighbours() {
        let text = "a: 1\nbb: 2\nc: 3\n";
        let offset = text.find("bb").expect("bb");
        let snippet = Snippet::new(&SourceFile::new("t", text), offset, 2);
        assert_eq!(snippet.text, "a: 1\nbb: 2\nc: 3");
        assert_eq!((snippet.first_line, snippet.line_count), (0, 3));
        let (at, len) = snippet.label;
        assert_eq!(&snippet.text[at..at + len], "bb");
    }

    #[test]
    fn a_long_line_is_cut_around_the_finding() {
        let text = format!("k: {{{}zz: 1}}\n", "a: 1, ".repeat(20_000));
        let offset = text.find("zz").expect("zz");
        let snippet = Snippet::new(&SourceFile::new("t", text.as_str()), offset, 2);
        assert!(snippet.text.starts_with(ELLIPSIS), "{}", snippet.text);
        assert!(snippet.text.chars().count() <= SNIPPET_WIDTH + 2);
        let (at, len) = snippet.label;
        assert_eq!(&snippet.text[at..at + len], "zz");
        assert_eq!((snippet.first_line, snippet.line_count), (0, 1));
    }

    #[test]
    fn escapes_in_the_source_move_the_label_with_them() {
        let text = "\u{1b}[2J\u{7}: x\nbad: 1\n";
        let snippet = Snippet::new(&SourceFile::new("t", text), 0, 4);
        assert!(!snippet.text.contains('\u{1b}') && !snippet.text.contains('\u{7}'));
        let (at, len) = snippet.label;
        assert_eq!(&snippet.text[at..at + len], "\\u{1b}[2J");
    }

    #[test]
    fn ranges_past_the_end_or_over_lines_are_clamped() {
        let file = SourceFile::new("t", "é: 1\nb: [1,\n  2]");
        let snippet = Snippet::new(&file, 1, 1000);
        assert_eq!(snippet.label, (0, "é: 1".len()));
        let snippet = Snippet::new(&file, 10_000, 3);
        assert_eq!(snippet.label.1, 0);
        assert_eq!(snippet.first_line, 1);
    }
}
