//! Contract source files and the positions inside them.
//!
//! Every diagnostic points into a [`SourceFile`]; [`Sources`] keeps all files of one load so a
//! renderer can show the offending line.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

/// One contract file as read from disk, with a line index for position lookups.
#[derive(Debug, Clone)]
pub struct SourceFile {
    path: String,
    text: Arc<str>,
    line_starts: Vec<usize>,
}

impl SourceFile {
    /// Creates a source file; `path` is the display path, relative to the contract directory.
    pub fn new(path: impl Into<String>, text: impl Into<Arc<str>>) -> Self {
        let text = text.into();
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(index, _)| index + 1))
            .collect();
        Self {
            path: path.into(),
            text,
            line_starts,
        }
    }

    /// The display path, relative to the contract directory, `/`-separated.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The whole text of the file.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The 1-based line and column (in characters) of a byte offset.
    pub fn line_column(&self, offset: usize) -> (u32, u32) {
        let offset = offset.min(self.text.len());
        let line_index = match self.line_starts.binary_search(&offset) {
            Ok(index) => index,
            Err(index) => index - 1,
        };
        let line_start = self.line_starts[line_index];
        let column = self
            .text
            .get(line_start..offset)
            .map_or(offset - line_start, |prefix| prefix.chars().count());
        (to_u32(line_index + 1), to_u32(column + 1))
    }

    /// The byte offset of a 1-based line and character column, clamped to the file.
    pub fn offset_of(&self, line: u32, column: u32) -> usize {
        let Some(&line_start) = self.line_starts.get((line as usize).saturating_sub(1)) else {
            return self.text.len();
        };
        let line_text = &self.text[line_start..];
        let line_text = line_text.split('\n').next().unwrap_or_default();
        let byte_in_line = line_text
            .char_indices()
            .nth((column as usize).saturating_sub(1))
            .map_or(line_text.len(), |(index, _)| index);
        line_start + byte_in_line
    }

    /// A location covering `len` bytes from `offset`.
    pub fn location(&self, offset: usize, len: usize) -> Location {
        let (line, column) = self.line_column(offset);
        Location {
            file: self.path.clone(),
            line,
            column,
            offset,
            len,
        }
    }
}

fn to_u32(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// A place in a contract file: file, 1-based line and column, and the byte range it covers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Location {
    /// Path of the file, relative to the contract directory.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, counted in characters.
    pub column: u32,
    /// Byte offset of the start of the range.
    #[serde(skip)]
    pub offset: usize,
    /// Length of the range in bytes.
    #[serde(skip)]
    pub len: usize,
}

impl Location {
    /// A location naming a whole file (line 1, column 1), for problems that have no finer place.
    pub fn file(path: impl Into<String>) -> Self {
        Self {
            file: path.into(),
            line: 1,
            column: 1,
            offset: 0,
            len: 0,
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// Every source file of one load, by display path.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    files: BTreeMap<String, SourceFile>,
}

impl Sources {
    /// Adds a file, replacing one with the same path.
    pub fn insert(&mut self, file: SourceFile) {
        self.files.insert(file.path.clone(), file);
    }

    /// The file with this display path, if it was read.
    pub fn get(&self, path: &str) -> Option<&SourceFile> {
        self.files.get(path)
    }

    /// All files, ordered by path.
    pub fn iter(&self) -> impl Iterator<Item = &SourceFile> {
        self.files.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_counts_characters_not_bytes() {
        let file = SourceFile::new("a.yaml", "a: 1\nkey: 'héllo' x\n");
        let offset = file.text().find('x').expect("x is in the text");
        assert_eq!(file.line_column(offset), (2, 14));
        assert_eq!(file.offset_of(2, 14), offset);
        assert_eq!(file.line_column(0), (1, 1));
    }

    #[test]
    fn offset_of_clamps_past_the_end() {
        let file = SourceFile::new("a.yaml", "a: 1\n");
        assert_eq!(file.offset_of(9, 1), 5);
        assert_eq!(file.offset_of(1, 99), 4);
    }
}
