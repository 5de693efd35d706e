//! Conformance with Confluent Schema Registry's JSON Schema compatibility cases.
//!
//! Every case of `confluent-json-schema-diff/` in the conformance folder is judged BACKWARD
//! (`update_schema` must read what `original_schema` wrote), once with evc's writer/reader views
//! (the verdict `evc compat` gives) and once on the schemas as written. Agreement is printed per
//! file. Every disagreement of the views verdict must be listed, with its reason, in the table
//! of `docs/compat.md`; a listed case that agrees again fails the test too, so the table stays
//! true. Goal: at least 90% agreement.
//!
//! The data is read from `EVC_CONFORMANCE_DIR` (default `<repo>/../shared/conformance`); when it
//! is absent the test says so and passes, except under `CI=true`.

mod conformance_data;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use evc_codegen::compat::schema::Dialect;
use evc_codegen::compat::{Direction, Options, judge_in};
use evc_codegen::model::ContentModel;
use serde_json::Value;

const FILES: &[(&str, Dialect)] = &[
    ("diff-schema-examples.json", Dialect::Draft7),
    ("diff-combined-schema-examples.json", Dialect::Draft7),
    ("diff-schema-examples-2020-12.json", Dialect::Draft2020),
    (
        "diff-combined-schema-examples-2020-12.json",
        Dialect::Draft2020,
    ),
];

/// The heading of the docs section that lists the engine-level disagreements.
const DOCS_SECTION: &str = "## Conformance with Confluent Schema Registry";

fn corpus_dir() -> Option<PathBuf> {
    conformance_data::folder("confluent-json-schema-diff", FILES[0].0)
}

fn compatible(case: &Value, views: bool, dialect: Dialect) -> bool {
    judge_in(
        &case["original_schema"],
        &case["update_schema"],
        Direction::Backward,
        Options {
            views,
            witnesses: false,
            content: ContentModel::Closed,
        },
        dialect,
    )
    .is_empty()
}

/// `(file, index)` pairs the docs list as intended disagreements.
fn documented() -> BTreeSet<(String, usize)> {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/compat.md");
    let text = std::fs::read_to_string(&docs).expect("docs/compat.md readable");
    // The section's own table: the CLI test lists its disagreements in a subsection.
    text.lines()
        .skip_while(|line| line.trim() != DOCS_SECTION)
        .skip(1)
        .take_while(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            // Rows of the disagreement table: | file | case | description | evc | Confluent | reason |
            if cells.len() != 8 {
                return None;
            }
            let file = cells.get(1)?.trim_matches('`');
            let index = cells.get(2)?.parse().ok()?;
            file.ends_with(".json").then(|| (file.to_owned(), index))
        })
        .collect()
}

#[test]
fn confluent_corpus_agreement() {
    let Some(dir) = corpus_dir() else {
        return;
    };
    let mut disagreements = BTreeSet::new();
    let (mut total, mut agree_views, mut agree_plain) = (0, 0, 0);
    for (file, dialect) in FILES {
        let cases = conformance_data::read_cases(&dir.join(file));
        let (mut views_ok, mut plain_ok) = (0, 0);
        for (index, case) in cases.iter().enumerate() {
            let expected = case["compatible"].as_bool().expect("compatible is a bool");
            let with_views = compatible(case, true, *dialect);
            let as_written = compatible(case, false, *dialect);
            if with_views == expected {
                views_ok += 1;
            } else {
                println!(
                    "  disagree {file} #{index} {:?}: evc {with_views}, confluent {expected}, changes {}",
                    case["description"].as_str().unwrap_or_default(),
                    case["changes"]
                );
                disagreements.insert(((*file).to_owned(), index));
            }
            if as_written == expected {
                plain_ok += 1;
            }
        }
        println!(
            "{file}: {views_ok}/{} agree with views, {plain_ok}/{} on the schemas as written",
            cases.len(),
            cases.len()
        );
        total += cases.len();
        agree_views += views_ok;
        agree_plain += plain_ok;
    }
    let percent = |n: usize| 100.0 * n as f64 / total as f64;
    println!(
        "total: {agree_views}/{total} ({:.1}%) with views, {agree_plain}/{total} ({:.1}%) as written",
        percent(agree_views),
        percent(agree_plain)
    );
    let listed = documented();
    let unexplained: Vec<_> = disagreements.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&disagreements).collect();
    assert!(
        unexplained.is_empty(),
        "disagreements not listed in docs/compat.md: {unexplained:?}"
    );
    assert!(
        stale.is_empty(),
        "docs/compat.md lists cases that now agree: {stale:?}"
    );
    assert!(
        percent(agree_views) >= 90.0,
        "agreement {:.1}% is below the 90% goal",
        percent(agree_views)
    );
}

/// The loader takes a 2020-12 schema as it is, without building its translation, when
/// `unchanged_in_2020_12` says the translation would change nothing: on every schema of the
/// corpus, in whichever draft it says, that answer must match the translation itself.
#[test]
fn the_translation_shortcut_agrees_with_the_translation() {
    use evc_codegen::payload_schema::draft::{Draft, to_2020_12, unchanged_in_2020_12};

    let Some(dir) = corpus_dir() else {
        return;
    };
    let (mut taken_as_is, mut translated) = (0, 0);
    for (file, _) in FILES {
        for case in conformance_data::read_cases(&dir.join(file)) {
            for schema in [&case["original_schema"], &case["update_schema"]] {
                let Ok(draft) = Draft::of(schema) else {
                    continue;
                };
                let translation = to_2020_12(schema, draft);
                if unchanged_in_2020_12(schema, draft) {
                    assert_eq!(
                        &translation, schema,
                        "{file}: taken as it is, but translates"
                    );
                    taken_as_is += 1;
                } else {
                    translated += 1;
                }
            }
        }
    }
    println!("{taken_as_is} schemas taken as they are, {translated} translated");
    assert!(taken_as_is > 0 && translated > 0);
}
