//! The text format: findings by severity, a table of event types, a summary line.

use std::fmt::Write as _;

use super::{RenderOptions, count, display_path, versions};
use crate::compat::report::{Finding, Report, Severity};
use crate::printable::escape;

const RESET: &str = "\u{1b}[0m";
const BOLD: &str = "\u{1b}[1m";
const DIM: &str = "\u{1b}[2m";
const RED: &str = "\u{1b}[1;31m";
const YELLOW: &str = "\u{1b}[1;33m";
const CYAN: &str = "\u{1b}[1;36m";
const GREEN: &str = "\u{1b}[1;32m";

/// Wraps text in an ANSI style when colors are on.
struct Paint {
    on: bool,
}

impl Paint {
    fn paint(&self, style: &str, text: &str) -> String {
        if self.on {
            format!("{style}{text}{RESET}")
        } else {
            text.to_owned()
        }
    }
}

pub(super) fn render(report: &Report, options: &RenderOptions) -> String {
    let paint = Paint { on: options.color };
    let mut out = String::new();
    for severity in [Severity::Error, Severity::Warning, Severity::Note] {
        for finding in report.findings.iter().filter(|f| f.severity == severity) {
            write_finding(&mut out, finding, options, &paint);
        }
    }
    write_table(&mut out, report, &paint);
    let (errors, warnings, notes) = (
        report.count(Severity::Error),
        report.count(Severity::Warning),
        report.count(Severity::Note),
    );
    let compared = format!("{} against {}", escape(&report.head), escape(&report.base));
    let verdict = if report.findings.is_empty() {
        format!("{}: no findings", paint.paint(GREEN, "compatible"))
    } else if report.passed() {
        format!(
            "{}: {}, {}, {}",
            paint.paint(GREEN, "compatible"),
            count(errors, "error"),
            count(warnings, "warning"),
            count(notes, "note")
        )
    } else {
        format!(
            "{}: {}, {}, {}",
            paint.paint(RED, "incompatible"),
            count(errors, "error"),
            count(warnings, "warning"),
            count(notes, "note")
        )
    };
    let _ = writeln!(out, "{verdict} ({compared})");
    out
}

fn write_finding(out: &mut String, finding: &Finding, options: &RenderOptions, paint: &Paint) {
    let style = match finding.severity {
        Severity::Error => RED,
        Severity::Warning => YELLOW,
        Severity::Note => CYAN,
    };
    let mut head = format!(
        "{}{}",
        paint.paint(style, finding.severity.as_str()),
        paint.paint(BOLD, &format!("[{}]", finding.rule))
    );
    head.push(' ');
    head.push_str(&escape(&finding.event));
    let versions = versions(finding);
    if !versions.is_empty() {
        head.push(' ');
        head.push_str(&escape(&versions));
    }
    if let Some(direction) = finding.direction {
        let _ = write!(head, " ({})", direction.as_str());
    }
    let _ = writeln!(out, "{head}: {}", escape(&finding.message));

    let mut place = escape(&display_path(finding, options)).into_owned();
    if finding.location.line > 0 {
        let _ = write!(
            place,
            ":{}:{}",
            finding.location.line, finding.location.column
        );
    }
    if let Some(pointer) = &finding.pointer {
        let _ = write!(place, " ({})", escape(pointer));
    }
    let _ = writeln!(out, "  {} {place}", paint.paint(DIM, "-->"));
    if !finding.fix.is_empty() {
        let _ = writeln!(
            out,
            "  {} {}",
            paint.paint(BOLD, "fix:"),
            escape(&finding.fix)
        );
    }
    if !finding.consumers.is_empty() {
        let _ = writeln!(
            out,
            "  {} {}",
            paint.paint(BOLD, "consumers:"),
            escape(&finding.consumers.join(", "))
        );
    }
    if let Some(witness) = &finding.witness {
        // JSON escapes C0 controls but leaves DEL, C1 and bidi controls raw.
        let payload = serde_json::to_string(&witness.payload).unwrap_or_default();
        let payload = escape(&payload);
        let _ = writeln!(
            out,
            "  {} {payload} (valid for {}, rejected by {})",
            paint.paint(BOLD, "witness:"),
            escape(&witness.valid_for),
            escape(&witness.rejected_by)
        );
    }
    out.push('\n');
}

/// The table of event types that have new versions, a suggested bump or findings; the others
/// are counted below it.
fn write_table(out: &mut String, report: &Report, paint: &Paint) {
    if report.events.is_empty() {
        return;
    }
    let header = ["event", "mode", "checked", "suggested bump"];
    let shown: Vec<_> = report
        .events
        .iter()
        .filter(|event| {
            !event.checked.is_empty()
                || event.suggested_bump.is_some()
                || report.findings.iter().any(|f| f.event == event.event)
        })
        .collect();
    let hidden = report.events.len() - shown.len();
    if shown.is_empty() {
        let _ = writeln!(
            out,
            "{} compared; none has new versions or findings\n",
            count(hidden, "event type")
        );
        return;
    }
    let rows: Vec<[String; 4]> = shown
        .iter()
        .map(|event| {
            [
                escape(&event.event).into_owned(),
                escape(&event.mode).into_owned(),
                if event.checked.is_empty() {
                    "-".to_owned()
                } else {
                    escape(&event.checked.join(", ")).into_owned()
                },
                event
                    .suggested_bump
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), |bump| escape(bump).into_owned()),
            ]
        })
        .collect();
    let mut widths = header.map(|cell| cell.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 4]| {
        let mut text = String::new();
        for (index, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if index + 1 == cells.len() {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<width$}  ");
            }
        }
        text
    };
    let _ = writeln!(out, "{}", paint.paint(BOLD, &line(header)));
    for row in &rows {
        let _ = writeln!(
            out,
            "{}",
            line([
                row[0].as_str(),
                row[1].as_str(),
                row[2].as_str(),
                row[3].as_str()
            ])
        );
    }
    if hidden > 0 {
        let _ = writeln!(
            out,
            "(and {} without new versions or findings)",
            count(hidden, "event type")
        );
    }
    out.push('\n');
}
