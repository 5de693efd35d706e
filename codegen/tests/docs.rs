//! The docs name every rule the checker applies, and no rule it does not.

use std::collections::BTreeSet;
use std::path::Path;

use evc_codegen::Rule;

#[test]
fn rules_md_has_a_section_per_rule_in_table_order() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/rules.md");
    let text = std::fs::read_to_string(path).expect("docs/rules.md exists");
    let documented: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("## "))
        .map(str::trim)
        .filter(|heading| {
            heading
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        })
        .collect();
    let expected: Vec<&str> = Rule::ALL.iter().map(|rule| rule.id()).collect();
    let missing: BTreeSet<_> = expected
        .iter()
        .filter(|id| !documented.contains(id))
        .collect();
    let unknown: BTreeSet<_> = documented
        .iter()
        .filter(|id| !expected.contains(id))
        .collect();
    assert!(missing.is_empty(), "docs/rules.md lacks {missing:?}");
    assert!(
        unknown.is_empty(),
        "docs/rules.md documents unknown rules {unknown:?}"
    );
    assert_eq!(
        documented, expected,
        "docs/rules.md sections are not in rule-table order"
    );
}

#[test]
fn compat_md_has_a_section_per_compat_rule_in_table_order() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/compat.md");
    let text = std::fs::read_to_string(path).expect("docs/compat.md exists");
    let documented: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("### "))
        .map(str::trim)
        .collect();
    let expected: Vec<&str> = evc_codegen::compat::CompatRule::ALL
        .iter()
        .map(|rule| rule.id())
        .collect();
    assert_eq!(
        documented, expected,
        "docs/compat.md must have one `### RULE_ID` section per compat rule, in table order"
    );
}

/// docs/codegen.md names every kind of migration file `evc generate` writes for the reference
/// contracts: each runtime step, the registry file and the settings file (numbers as `NNNN`, the digest as
/// `<digest>`).
#[test]
fn codegen_md_lists_every_migration_step() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("docs/codegen.md")).expect("docs/codegen.md");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root.join("generated/migrations")).expect("migrations") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        let (number, rest) = name.split_at(4);
        let pattern = if number == "0001" {
            name.clone()
        } else if rest.starts_with("_evc_registry_") {
            "NNNN_evc_registry_<digest>.sql".to_owned()
        } else if rest.starts_with("_evc_settings_") {
            "NNNN_evc_settings_<digest>.sql".to_owned()
        } else {
            format!("NNNN{rest}")
        };
        if !text.contains(&format!("`generated/migrations/{pattern}`")) {
            missing.push(pattern);
        }
    }
    assert!(
        missing.is_empty(),
        "docs/codegen.md does not list {missing:?}"
    );
}
