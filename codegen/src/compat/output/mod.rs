//! Renderings of a compatibility [`Report`]: for people ([`Format::Text`]), for tools
//! ([`Format::Json`]), for GitHub Actions annotations ([`Format::Github`]), for code scanning
//! ([`Format::Sarif`], SARIF 2.1.0) and for test dashboards ([`Format::Junit`]).
//!
//! Every renderer reads only the report; the same report always renders to the same text.

mod github;
mod json;
mod junit;
mod sarif;
mod text;

use super::report::{Finding, Report};

/// An output format of `evc compat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Findings, then a table of event types and a summary line, for people.
    Text,
    /// The whole report as one JSON document, with `passed` and the counts.
    Json,
    /// GitHub Actions workflow commands (`::error file=...::...`), one line per finding.
    Github,
    /// SARIF 2.1.0, for code-scanning uploads.
    Sarif,
    /// JUnit XML: one test suite and test case per event type.
    Junit,
}

impl Format {
    /// Every format, in documentation order.
    pub const ALL: &'static [Format] = &[
        Format::Text,
        Format::Json,
        Format::Github,
        Format::Sarif,
        Format::Junit,
    ];

    /// The name used on the command line (`sarif`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Json => "json",
            Self::Github => "github",
            Self::Sarif => "sarif",
            Self::Junit => "junit",
        }
    }
}

/// How to render: colors, and where the contract files are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// ANSI colors (text format only).
    pub color: bool,
    /// The path of the contract directory that finding locations are relative to, as it should
    /// be shown (`contracts`); locations are printed joined under it with `/`. `None` prints
    /// them relative to the contract directory.
    pub path_prefix: Option<String>,
}

/// Renders `report` in `format`. File paths are shown under the head's directory when the head
/// label is `dir:<path>` (see [`render_with`] to choose the prefix).
pub fn render(report: &Report, format: Format, color: bool) -> String {
    let options = RenderOptions {
        color,
        path_prefix: report.head.strip_prefix("dir:").map(str::to_owned),
    };
    render_with(report, format, &options)
}

/// Renders `report` in `format` with explicit options.
pub fn render_with(report: &Report, format: Format, options: &RenderOptions) -> String {
    match format {
        Format::Text => text::render(report, options),
        Format::Json => json::render(report),
        Format::Github => github::render(report, options),
        Format::Sarif => sarif::render(report, options),
        Format::Junit => junit::render(report, options),
    }
}

/// The path of a finding's file as shown: under the prefix, `/`-separated, without `./`.
fn display_path(finding: &Finding, options: &RenderOptions) -> String {
    let file = finding.location.file.replace('\\', "/");
    let prefix = options
        .path_prefix
        .as_deref()
        .map(|prefix| prefix.replace('\\', "/"))
        .map(|prefix| prefix.trim_end_matches('/').to_owned())
        .unwrap_or_default();
    let joined = match prefix.as_str() {
        "" | "." => file,
        prefix => format!("{prefix}/{file}"),
    };
    let mut path = joined.as_str();
    while let Some(rest) = path.strip_prefix("./") {
        path = rest;
    }
    path.to_owned()
}

/// `1.0.0 -> 1.1.0`, `1.1.0` or `1.0.0` (removed), from the finding's versions.
fn versions(finding: &Finding) -> String {
    match (&finding.base_version, &finding.version) {
        (Some(base), Some(version)) if base != version => format!("{base} -> {version}"),
        (_, Some(version)) => version.clone(),
        (Some(base), None) => base.clone(),
        (None, None) => String::new(),
    }
}

/// `1 error`, `2 errors`.
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compat::report::Severity;
    use crate::source::Location;

    fn finding(file: &str) -> Finding {
        Finding {
            rule: "BUMP_SUGGESTED",
            severity: Severity::Note,
            event: "iu.born".to_owned(),
            base_version: Some("1.0.0".to_owned()),
            version: Some("1.1.0".to_owned()),
            direction: None,
            pointer: None,
            location: Location::file(file),
            message: String::new(),
            fix: String::new(),
            consumers: Vec::new(),
            witness: None,
        }
    }

    #[test]
    fn display_paths_join_under_the_prefix() {
        let with = |prefix: Option<&str>| RenderOptions {
            color: false,
            path_prefix: prefix.map(str::to_owned),
        };
        let f = finding("events/iu.born.yaml");
        assert_eq!(display_path(&f, &with(None)), "events/iu.born.yaml");
        assert_eq!(display_path(&f, &with(Some("."))), "events/iu.born.yaml");
        assert_eq!(
            display_path(&f, &with(Some("./contracts/"))),
            "contracts/events/iu.born.yaml"
        );
        assert_eq!(
            display_path(&f, &with(Some("/abs/contracts"))),
            "/abs/contracts/events/iu.born.yaml"
        );
    }

    #[test]
    fn versions_show_the_step() {
        let mut f = finding("x");
        assert_eq!(versions(&f), "1.0.0 -> 1.1.0");
        f.version = None;
        assert_eq!(versions(&f), "1.0.0");
        f.base_version = None;
        assert_eq!(versions(&f), "");
    }
}
