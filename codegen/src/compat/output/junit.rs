//! The JUnit XML format, for CI dashboards: one test suite with one test case per event type;
//! each error finding is a `<failure>`, warnings and notes go to `<system-out>`.

use std::fmt::Write as _;

use super::{RenderOptions, display_path, versions};
use crate::compat::report::{Finding, Report, Severity};
use crate::printable::escape as printable;

pub(super) fn render(report: &Report, options: &RenderOptions) -> String {
    // Event types in report order, then any that only findings name.
    let mut events: Vec<&str> = report.events.iter().map(|e| e.event.as_str()).collect();
    for finding in &report.findings {
        if !events.contains(&finding.event.as_str()) {
            events.push(&finding.event);
        }
    }
    let failed = |event: &str| {
        report
            .findings
            .iter()
            .any(|f| f.event == event && f.severity == Severity::Error)
    };
    let failures = events.iter().filter(|event| failed(event)).count();

    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"evc compat\" tests=\"{}\" failures=\"{failures}\" errors=\"0\">",
        events.len()
    );
    for event in &events {
        let findings: Vec<&Finding> = report
            .findings
            .iter()
            .filter(|f| f.event == *event)
            .collect();
        let summary = report.events.iter().find(|e| e.event == *event);
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"1\" failures=\"{}\" errors=\"0\" skipped=\"0\">",
            escape(event),
            usize::from(failed(event))
        );
        if let Some(summary) = summary {
            out.push_str("    <properties>\n");
            let mut property = |name: &str, value: &str| {
                let _ = writeln!(
                    out,
                    "      <property name=\"{}\" value=\"{}\"/>",
                    escape(name),
                    escape(value)
                );
            };
            property("mode", &summary.mode);
            property("checked", &summary.checked.join(", "));
            if let Some(bump) = &summary.suggested_bump {
                property("suggested_bump", bump);
            }
            out.push_str("    </properties>\n");
        }
        let _ = write!(
            out,
            "    <testcase name=\"{}\" classname=\"evc.compat\"",
            escape(event)
        );
        if findings.is_empty() {
            out.push_str("/>\n");
        } else {
            out.push_str(">\n");
            for finding in findings.iter().filter(|f| f.severity == Severity::Error) {
                let _ = writeln!(
                    out,
                    "      <failure message=\"{}\" type=\"{}\">{}</failure>",
                    escape(&headline(finding)),
                    escape(finding.rule),
                    escape_text(&details(finding, options))
                );
            }
            let others: Vec<String> = findings
                .iter()
                .filter(|f| f.severity != Severity::Error)
                .map(|finding| {
                    format!(
                        "{}[{}] {}\n{}",
                        finding.severity.as_str(),
                        finding.rule,
                        headline(finding),
                        details(finding, options)
                    )
                })
                .collect();
            if !others.is_empty() {
                let _ = writeln!(
                    out,
                    "      <system-out>{}</system-out>",
                    escape_text(&others.join("\n\n"))
                );
            }
            out.push_str("    </testcase>\n");
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

/// `iu.born 1.0.0 -> 1.1.0 (backward): message`. Text from the contracts has its control
/// characters written as escapes (the XML keeps line breaks, which CI logs would show).
fn headline(finding: &Finding) -> String {
    let mut text = printable(&finding.event).into_owned();
    let versions = versions(finding);
    if !versions.is_empty() {
        let _ = write!(text, " {versions}");
    }
    if let Some(direction) = finding.direction {
        let _ = write!(text, " ({})", direction.as_str());
    }
    let _ = write!(text, ": {}", printable(&finding.message));
    text
}

/// The location, fix, consumers and witness, one per line.
fn details(finding: &Finding, options: &RenderOptions) -> String {
    let mut text = format!("at {}", printable(&display_path(finding, options)));
    if finding.location.line > 0 {
        let _ = write!(
            text,
            ":{}:{}",
            finding.location.line, finding.location.column
        );
    }
    if let Some(pointer) = &finding.pointer {
        let _ = write!(text, " ({})", printable(pointer));
    }
    if !finding.fix.is_empty() {
        let _ = write!(text, "\nfix: {}", printable(&finding.fix));
    }
    if !finding.consumers.is_empty() {
        let _ = write!(
            text,
            "\nconsumers: {}",
            printable(&finding.consumers.join(", "))
        );
    }
    if let Some(witness) = &finding.witness {
        let payload = serde_json::to_string(&witness.payload).unwrap_or_default();
        let _ = write!(
            text,
            "\nwitness: {payload} (valid for {}, rejected by {})",
            witness.valid_for, witness.rejected_by
        );
    }
    text
}

/// Escapes an attribute value: the five predefined entities, line breaks and tabs as character
/// references (attribute normalization would turn them into spaces), and characters XML 1.0
/// forbids replaced by U+FFFD.
pub(super) fn escape(text: &str) -> String {
    escape_with(text, true)
}

/// Escapes element content like [`escape`], but keeps line breaks and tabs as they are.
pub(super) fn escape_text(text: &str) -> String {
    escape_with(text, false)
}

fn escape_with(text: &str, attribute: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' if attribute => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' if attribute => out.push_str("&#9;"),
            '\n' | '\t' => out.push(ch),
            '\u{0}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}' => out.push('\u{fffd}'),
            ch => out.push(ch),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_text_keeps_line_breaks() {
        assert_eq!(escape_text("a\n\tb&"), "a\n\tb&amp;");
    }

    #[test]
    fn escape_covers_entities_and_forbidden_characters() {
        assert_eq!(
            escape("a<b & \"c\" 'd'>\n\u{1}"),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;&#10;\u{fffd}"
        );
    }
}
