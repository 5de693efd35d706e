//! The store boundary: SQL against the runtime's tables lives in the stores
//! (`runtime/src/store/`), next to the schemas they depend on (`runtime/migrations/`), so a
//! change to a table is a change to one crate. The stores' schema tests
//! (`runtime/tests/schema/`) are part of it: they attack the tables by hand to prove what the
//! schema guarantees. This test reads every other `.rs` file of the repository and fails,
//! naming file and line, where it writes a query that names a runtime table.
//!
//! What counts as a query: an upper-case SQL keyword that takes a table (`FROM`, `INTO`,
//! `UPDATE`, `JOIN`, `TABLE`, `TRUNCATE`) followed by the name of a table either store's
//! migrations create, or a string literal that is exactly such a name (a table handed to a
//! helper that builds the SQL). Comment lines (`//`) are prose, not queries; generated files
//! (first line `// @generated`) and `target/` directories are not read.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Where the runtime's SQL belongs: the stores, and the stores' schema tests.
const STORE: &[&str] = &["runtime/src/store/", "runtime/tests/schema/"];

/// The stores' migrations, which say which tables are the runtime's.
const SCHEMAS: &[&str] = &["runtime/migrations/postgres", "runtime/migrations/sqlite"];

/// Upper-case SQL keywords followed by a table name.
const TABLE_KEYWORDS: &[&str] = &["FROM", "INTO", "UPDATE", "JOIN", "TABLE", "TRUNCATE"];

#[test]
fn runtime_tables_are_queried_only_in_the_store() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut tables = BTreeSet::new();
    for schema in SCHEMAS {
        let found = runtime_tables(&root.join(schema))?;
        for table in ["events", "deliveries", "delivery_attempts"] {
            let table = format!("evc_{table}");
            assert!(found.contains(&table), "{table} not found in {schema}");
        }
        tables.extend(found);
    }

    let mut files = Vec::new();
    rust_files(root, &mut files)?;
    let mut outside = Vec::new();
    for path in files {
        let relative = path
            .strip_prefix(root)?
            .to_string_lossy()
            .replace('\\', "/");
        if STORE.iter().any(|store| relative.starts_with(store)) {
            continue;
        }
        let text = fs::read_to_string(&path)?;
        if text.starts_with("// @generated") {
            continue;
        }
        for (line, table) in queries(&text, &tables) {
            outside.push(format!("{relative}:{line}: {table}"));
        }
    }
    assert!(
        outside.is_empty(),
        "SQL naming runtime tables outside the store (add a store method with its statement in \
         runtime/src/store/):\n  {}",
        outside.join("\n  ")
    );
    Ok(())
}

#[test]
fn the_scan_finds_queries_and_ignores_prose() {
    // Made-up tables, so this file does not name runtime tables itself.
    let tables: BTreeSet<String> = ["evc_widgets", "evc_gadgets"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    let text = "\
let a = \"SELECT count(*) FROM evc_widgets\";
// DELETE FROM evc_widgets in a comment is prose
/// so is UPDATE evc_gadgets in a doc comment
let b = \"SELECT 1 FROM\n    evc_gadgets d JOIN evc_widgets e USING (event_id)\";
let c = \"LISTEN evc_gadgets\"; let d = \"from evc_widgets\"; let e = \"FROM evc_widgetsx\";
let f = \"TRUNCATE evc_widgets\"; let g = \"UPDATE ONLY evc_gadgets SET\";
let h = count(&pool, \"evc_widgets\"); let i = \"evc_widgets_idx\";
// count(&pool, \"evc_gadgets\") in a comment is prose
";
    assert_eq!(
        queries(text, &tables),
        [
            (1, "evc_widgets".to_owned()),
            (5, "evc_gadgets".to_owned()),
            (5, "evc_widgets".to_owned()),
            (7, "evc_gadgets".to_owned()),
            (7, "evc_widgets".to_owned()),
            (8, "evc_widgets".to_owned()),
        ]
    );
}

/// The tables the runtime's migration templates in `dir` create (`CREATE [UNLOGGED] TABLE
/// [IF NOT EXISTS] name`).
fn runtime_tables(dir: &Path) -> Result<BTreeSet<String>, Box<dyn std::error::Error>> {
    let mut tables = BTreeSet::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_none_or(|ext| ext != "sql") {
            continue;
        }
        let text = fs::read_to_string(&path)?;
        let words: Vec<&str> = text.split_whitespace().collect();
        for (i, window) in words.windows(2).enumerate() {
            if window != ["CREATE", "TABLE"] && window != ["CREATE", "UNLOGGED"] {
                continue;
            }
            let mut rest = words[i + 1..].iter().copied();
            let mut name = rest.next();
            while let Some(word) = name
                && ["UNLOGGED", "TABLE", "IF", "NOT", "EXISTS"].contains(&word)
            {
                name = rest.next();
            }
            if let Some(name) = name {
                let name = name.trim_end_matches(['(', ';']);
                if name.starts_with("evc_") {
                    tables.insert(name.to_owned());
                }
            }
        }
    }
    Ok(tables)
}

/// The `.rs` files under `dir`, outside `target/` and `.git/`.
fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            if entry.file_name() != "target" && entry.file_name() != ".git" {
                rust_files(&path, files)?;
            }
        } else if kind.is_file() && path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    Ok(())
}

/// Each query in `text` that names one of `tables`: its line (from 1) and the table. A keyword
/// and its table may sit on different lines (a statement split over a string's lines); comment
/// lines are skipped.
fn queries(text: &str, tables: &BTreeSet<String>) -> Vec<(usize, String)> {
    let words: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .flat_map(|(index, line)| {
            line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|word| !word.is_empty())
                .map(move |word| (index + 1, word))
        })
        .collect();
    let mut found = Vec::new();
    for (i, (_, word)) in words.iter().enumerate() {
        if !TABLE_KEYWORDS.contains(word) {
            continue;
        }
        let mut next = words[i + 1..].iter();
        let mut table = next.next();
        if table.is_some_and(|(_, word)| *word == "ONLY") {
            table = next.next();
        }
        if let Some((line, table)) = table
            && tables.contains(*table)
        {
            found.push((*line, (*table).to_owned()));
        }
    }
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        for table in tables {
            if line.contains(&format!("\"{table}\"")) {
                found.push((index + 1, table.clone()));
            }
        }
    }
    found.sort();
    found
}
