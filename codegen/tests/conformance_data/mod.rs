//! Where the external conformance data lives, for the tests that read it.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The folder `name` of the conformance data (`EVC_CONFORMANCE_DIR`, default
/// `<repo>/../shared/conformance`), when it holds `marker`. When it does not, the test is
/// skipped with a message, except under `CI=true`, where that is a failure.
pub(crate) fn folder(name: &str, marker: &str) -> Option<PathBuf> {
    let root = std::env::var_os("EVC_CONFORMANCE_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/conformance"),
        PathBuf::from,
    );
    let dir = root.join(name);
    if dir.join(marker).is_file() {
        return Some(dir);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "conformance data missing at {} (set EVC_CONFORMANCE_DIR)",
        dir.display()
    );
    eprintln!(
        "skipping: no conformance data at {} (set EVC_CONFORMANCE_DIR)",
        dir.display()
    );
    None
}

/// The cases of one file of Confluent's JSON Schema compatibility corpus.
#[allow(dead_code)] // Not every test that includes this module reads the corpus.
pub(crate) fn read_cases(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("corpus file readable");
    match serde_json::from_str(&without_trailing_commas(&text)).expect("corpus file parses") {
        Value::Array(cases) => cases,
        _ => panic!("{} is not an array of cases", path.display()),
    }
}

/// Drops a `,` that comes right before `}` or `]` outside strings: one corpus file has such a
/// trailing comma, which upstream's lenient parser accepts.
#[allow(dead_code)]
pub(crate) fn without_trailing_commas(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for (index, &c) in chars.iter().enumerate() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        if c == ',' {
            let next = chars[index + 1..].iter().find(|c| !c.is_whitespace());
            if matches!(next, Some('}' | ']')) {
                continue;
            }
        }
        in_string = c == '"';
        out.push(c);
    }
    out
}
