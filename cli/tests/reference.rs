//! The CLI reference (`docs/cli.md`) against the binary: every command `evc --help` lists has a
//! row in the reference's command table and a section of its own, the table lists no command
//! the binary lacks, and every long option of a command (and of its subcommands) is named in
//! that command's section.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// The command names under `Commands:` in a clap help text, without `help`.
fn commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The long options (`--name`) a help text offers, without `--help` and `--version`.
fn long_options(help: &str) -> BTreeSet<String> {
    help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|word| word.starts_with("--") && word.len() > 2)
        .filter(|word| *word != "--help" && *word != "--version")
        .map(str::to_owned)
        .collect()
}

fn help(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_evc"))
        .args(args)
        .arg("--help")
        .output()
        .expect("evc runs");
    assert!(output.status.success(), "evc {args:?} --help failed");
    String::from_utf8(output.stdout).expect("UTF-8 help")
}

/// The text of the section whose heading names `` `evc <command>` ``, up to the next heading of
/// the same or a higher level, preceded by the introduction of the section that holds it (the
/// operator commands share their `--database-url` there).
fn section(reference: &str, command: &str) -> Option<String> {
    let lines: Vec<&str> = reference.lines().collect();
    let level = |line: &str| {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        (hashes > 0 && line[hashes..].starts_with(' ')).then_some(hashes)
    };
    let heading = format!("`evc {command}`");
    let start = lines
        .iter()
        .position(|line| level(line).is_some() && line.trim_start_matches('#').trim() == heading)?;
    let own = level(lines[start])?;
    let end = lines[start + 1..]
        .iter()
        .position(|line| level(line).is_some_and(|l| l <= own))
        .map_or(lines.len(), |offset| start + 1 + offset);
    let mut text = lines[start..end].join("\n");
    if let Some(parent) = lines[..start]
        .iter()
        .rposition(|line| level(line).is_some_and(|l| l < own))
    {
        let intro_end = lines[parent + 1..]
            .iter()
            .position(|line| level(line).is_some())
            .map_or(start, |offset| parent + 1 + offset);
        text.push('\n');
        text.push_str(&lines[parent..intro_end].join("\n"));
    }
    Some(text)
}

#[test]
fn the_cli_reference_names_every_command_and_option_of_the_binary() {
    let reference =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md"))
            .expect("cli.md");
    let top = commands(&help(&[]));
    assert!(top.len() >= 10, "too few commands parsed: {top:?}");

    let table: BTreeSet<String> = reference
        .lines()
        .filter_map(|line| line.strip_prefix("| [`evc "))
        .filter_map(|rest| rest.split([' ', '`']).next())
        .map(str::to_owned)
        .collect();
    let listed: BTreeSet<String> = top.iter().cloned().collect();
    assert_eq!(
        table, listed,
        "docs/cli.md's command table against `evc --help`"
    );

    let mut missing = Vec::new();
    for command in &top {
        let Some(text) = section(&reference, command).or_else(|| {
            // `evc import asyncapi` and the like: the section names the first subcommand.
            commands(&help(&[command]))
                .first()
                .and_then(|sub| section(&reference, &format!("{command} {sub}")))
        }) else {
            missing.push(format!("no section for `evc {command}`"));
            continue;
        };
        let mut options = long_options(&help(&[command]));
        for sub in commands(&help(&[command])) {
            options.extend(long_options(&help(&[command, &sub])));
        }
        for option in options {
            let named = text.match_indices(&option).any(|(at, _)| {
                !text[at + option.len()..]
                    .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-')
            });
            if !named {
                missing.push(format!(
                    "`evc {command}`'s section does not name `{option}`"
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/cli.md lags the binary:\n{}",
        missing.join("\n")
    );
}
