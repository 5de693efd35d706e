//! The JSON format: the report with the verdict and the counts on top.

use serde::Serialize;

use crate::compat::report::{Report, Severity};

/// The document `--format json` prints.
#[derive(Serialize)]
struct Document<'a> {
    /// True when no finding is an error.
    passed: bool,
    errors: usize,
    warnings: usize,
    notes: usize,
    #[serde(flatten)]
    report: &'a Report,
}

pub(super) fn render(report: &Report) -> String {
    let document = Document {
        passed: report.passed(),
        errors: report.count(Severity::Error),
        warnings: report.count(Severity::Warning),
        notes: report.count(Severity::Note),
        report,
    };
    // The report holds only strings, numbers and JSON values: serializing it cannot fail.
    let mut text = serde_json::to_string_pretty(&document).unwrap_or_else(|error| {
        serde_json::json!({ "passed": false, "error": error.to_string() }).to_string()
    });
    text.push('\n');
    text
}
