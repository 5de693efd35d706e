//! The GitHub Actions format: one workflow command per finding, so findings annotate the diff.
//!
//! <https://docs.github.com/en/actions/reference/workflows-and-actions/workflow-commands>

use std::fmt::Write as _;

use super::{RenderOptions, display_path, versions};
use crate::compat::report::{Report, Severity};
use crate::printable::escape;

/// Text from the contracts is escaped twice: control characters first ([`escape`], so none
/// reaches the log), then GitHub's own escaping of command data and properties.
pub(super) fn render(report: &Report, options: &RenderOptions) -> String {
    let mut out = String::new();
    for finding in &report.findings {
        let command = match finding.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "notice",
        };
        let mut properties = vec![format!(
            "file={}",
            escape_property(&escape(&display_path(finding, options)))
        )];
        if finding.location.line > 0 {
            properties.push(format!("line={}", finding.location.line));
            properties.push(format!("col={}", finding.location.column));
        }
        let mut title = format!("{} {}", finding.rule, escape(&finding.event));
        let versions = versions(finding);
        if !versions.is_empty() {
            let _ = write!(title, " {}", escape(&versions));
        }
        properties.push(format!("title={}", escape_property(&title)));
        let mut message = escape(&finding.message).into_owned();
        if !finding.fix.is_empty() {
            let _ = write!(message, " Fix: {}", escape(&finding.fix));
        }
        if !finding.consumers.is_empty() {
            let _ = write!(
                message,
                " Consumers affected: {}.",
                escape(&finding.consumers.join(", "))
            );
        }
        if let Some(witness) = &finding.witness {
            // JSON escapes C0 controls but leaves DEL, C1 and bidi controls raw.
            let payload = serde_json::to_string(&witness.payload).unwrap_or_default();
            let payload = escape(&payload);
            // The one intended line break: GitHub shows it inside the annotation.
            let _ = write!(
                message,
                "\nWitness (valid for {}, rejected by {}): {payload}",
                escape(&witness.valid_for),
                escape(&witness.rejected_by)
            );
        }
        let _ = writeln!(
            out,
            "::{command} {}::{}",
            properties.join(","),
            escape_data(&message)
        );
    }
    out
}

/// Escapes a command's message: `%`, carriage return and line feed.
pub(super) fn escape_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Escapes a command property's value: what [`escape_data`] escapes, and `:` and `,`.
pub(super) fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_follow_the_actions_toolkit() {
        assert_eq!(escape_data("100%\r\nok: a,b"), "100%25%0D%0Aok: a,b");
        assert_eq!(escape_property("100%\na: b,c"), "100%25%0Aa%3A b%2Cc");
    }
}
