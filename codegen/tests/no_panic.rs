//! No input panics the loader: property tests over arbitrary bytes and over mutations of real
//! contracts. `fuzz/` holds a cargo-fuzz target for long runs (see docs/contracts.md).

mod support;

use std::fs;
use std::path::Path;

use evc_codegen::diagnostic::render_human;
use evc_codegen::loader::parse_bytes;
use evc_codegen::printable::Snippet;
use evc_codegen::structure::FileKind;
use evc_codegen::{ContractSet, Diagnostic, LoadError, SourceFile, Sources};
use proptest::prelude::*;

const KINDS: [FileKind; 7] = FileKind::ALL;

fn reference_event() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts/events/iu.born.yaml");
    fs::read_to_string(path).expect("reference contract")
}

/// One edit of a text: replace, insert or delete at a position, with YAML-significant
/// characters over-represented.
#[derive(Debug, Clone)]
enum Edit {
    Replace(usize, char),
    Insert(usize, String),
    Delete(usize, usize),
}

fn yaml_char() -> impl Strategy<Value = char> {
    prop_oneof![
        3 => prop::sample::select(vec![':', '-', ' ', '\n', '\t', '[', ']', '{', '}', '&', '*', '!', '|', '>', '\'', '"', '#', '@', '%', ',', '?', '~', '0', '.']),
        1 => any::<char>(),
    ]
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), yaml_char()).prop_map(|(at, c)| Edit::Replace(at, c)),
        (any::<usize>(), prop::collection::vec(yaml_char(), 1..8))
            .prop_map(|(at, cs)| Edit::Insert(at, cs.into_iter().collect())),
        (any::<usize>(), 1usize..40).prop_map(|(at, n)| Edit::Delete(at, n)),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for edit in edits {
        let len = chars.len().max(1);
        match edit {
            Edit::Replace(at, c) => {
                if !chars.is_empty() {
                    chars[at % len] = *c;
                }
            }
            Edit::Insert(at, s) => {
                let at = at % (chars.len() + 1);
                chars.splice(at..at, s.chars());
            }
            Edit::Delete(at, n) => {
                let at = at % len;
                let end = (at + n).min(chars.len());
                if at < end {
                    chars.drain(at..end);
                }
            }
        }
    }
    chars.into_iter().collect()
}

/// Renders the findings of a parse with their snippets, as `evc check` does.
fn render_without_panic(parsed: &evc_codegen::loader::ParsedFile, diagnostics: &[Diagnostic]) {
    let mut sources = Sources::default();
    if let Some(source) = &parsed.source {
        sources.insert(source.clone());
    }
    let text = render_human(diagnostics, &sources, false);
    assert!(!text.contains('\u{1b}'), "raw ESC in {text}");
}

fn load_without_panic(dir: &Path) {
    match ContractSet::load(dir) {
        Ok(_) | Err(LoadError::Invalid { .. }) => {}
        Err(other) => panic!("unexpected load failure: {other}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048), kind in 0usize..5) {
        let mut diagnostics = Vec::new();
        let parsed = parse_bytes("events/x.y.yaml", bytes, KINDS[kind], &mut diagnostics);
        // Whatever the input, a file that did not parse to a typed value says why.
        prop_assert!(parsed.typed.is_some() || !diagnostics.is_empty());
        for diagnostic in &diagnostics {
            prop_assert!(diagnostic.location.line >= 1);
        }
        render_without_panic(&parsed, &diagnostics);
    }

    #[test]
    fn snippets_of_any_range_stay_inside_their_text(
        text in "(\\PC|[\n\r\t\u{1b}\u{7}]){0,300}",
        wide in 0usize..3,
        offset in 0usize..100_000,
        len in 0usize..100_000,
    ) {
        // Some cases put the range on a line far longer than a screen.
        let text = format!("{}{text}", "k: v, ".repeat(wide * 30_000));
        let snippet = Snippet::new(&SourceFile::new("t.yaml", text), offset, len);
        let (at, len) = snippet.label;
        prop_assert!(snippet.text.get(at..at + len).is_some());
        let raw_control = snippet.text.contains('\u{1b}') || snippet.text.contains('\r');
        prop_assert!(!raw_control, "raw control characters in {:?}", snippet.text);
        prop_assert!(snippet.text.lines().all(|line| line.chars().count() < 2_000));
    }

    #[test]
    fn arbitrary_yaml_shaped_text_never_panics(text in "[-:\\[\\]{}&*!|>'\" #\n\ta-z0-9.@]{0,400}", kind in 0usize..5) {
        let mut diagnostics = Vec::new();
        let parsed = parse_bytes("events/x.y.yaml", text.into_bytes(), KINDS[kind], &mut diagnostics);
        prop_assert!(parsed.typed.is_some() || !diagnostics.is_empty());
        render_without_panic(&parsed, &diagnostics);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn mutated_reference_contracts_never_panic_the_whole_load(edits in prop::collection::vec(edit(), 1..6)) {
        let contracts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/base");
        let dir = tempfile::tempdir().expect("temp dir");
        support::copy_fixture(&contracts, dir.path());
        let mutated = apply(&reference_event(), &edits);
        fs::write(dir.path().join("events/iu.born.yaml"), mutated).expect("write mutated file");
        load_without_panic(dir.path());
    }
}
