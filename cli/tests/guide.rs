//! docs/guide.md, run: every `sh` block of the guide, in order, against a copy of
//! `examples/shop` and a real PostgreSQL, with the CLI installed by the guide's own
//! `cargo install --path cli`. And `examples/shop/generated` is what its contracts generate.
//!
//! What the test changes, and only this: `cargo install` gets `--debug --locked --offline
//! --root <temp>` (a debug build into a temporary directory, not `~/.cargo/bin`); the database
//! name `shop_dev` becomes a fresh name per run (dropped at the end); the shop's dependency on
//! `evc` points at this checkout; and between `cp -r contracts ...` and `evc compat` the test
//! makes the contract edit the guide describes in prose. Everything builds in the target
//! directory of the `cargo test` running this test (which holds no build lock while its tests
//! run), so the install reuses a debug build of the CLI that `cargo evc check` made, and the
//! shop (with the workspace's dev profile) reuses those dependency builds whose features are
//! the same in both (the workspace enables more features on many shared crates).

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::{copy_dir, repository};

const GUIDE_DATABASE: &str = "shop_dev";

/// The guide's `sh` blocks, in order.
fn sh_blocks(guide: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in guide.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), text) => {
                block.push_str(text);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|value| value.eq_ignore_ascii_case("true"))
}

/// Whether PostgreSQL and its client tools are here; outside CI a missing piece skips.
fn postgres_ready() -> bool {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://root@localhost/test".to_owned());
    let probe = Command::new("psql")
        .args([url.as_str(), "-qAtc", "SELECT 1"])
        .output();
    let tools = Command::new("createdb").arg("--version").output();
    match (probe, tools) {
        (Ok(probe), Ok(tools)) if probe.status.success() && tools.status.success() => true,
        (probe, _) => {
            let why = match probe {
                Ok(output) => String::from_utf8_lossy(&output.stderr).trim().to_owned(),
                Err(error) => format!("psql/createdb not runnable: {error}"),
            };
            assert!(
                !ci(),
                "CI=true and PostgreSQL at {url} is not usable: {why}"
            );
            eprintln!("skipped: PostgreSQL at {url} is not usable ({why}); set DATABASE_URL");
            false
        }
    }
}

/// Drops the guide's database when the test ends, also on failure.
struct DropDatabase(String);

impl Drop for DropDatabase {
    fn drop(&mut self) {
        let _ = Command::new("dropdb")
            .args(["--if-exists", "--force", &self.0])
            .status();
    }
}

/// The target directory of the `cargo test` running this test (`CARGO_TARGET_TMPDIR` is its
/// `tmp/`), so a custom `CARGO_TARGET_DIR` is honoured too.
fn target_directory() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the tmp dir sits in the target dir")
        .to_owned()
}

/// The contract edit of the guide's last section: `order.paid` 1.1.0 with an optional
/// `receipt_email`.
fn add_optional_field(contracts: &Path) {
    let path = contracts.join("events/order.paid.yaml");
    let text = fs::read_to_string(&path).expect("order.paid.yaml");
    let versions = text.find("versions:\n").expect("a versions list") + "versions:\n".len();
    let first = &text[versions..];
    let mut minor = first.replacen("version: 1.0.0", "version: 1.1.0", 1);
    minor = minor.replacen(
        "description: Initial version.",
        "description: Adds the optional receipt address.",
        1,
    );
    minor.push_str(
        "        receipt_email:\n          type: string\n          maxLength: 254\n          \
         description: Where the receipt went.\n",
    );
    fs::write(&path, format!("{text}{minor}")).expect("write order.paid.yaml");
}

/// A value as bash expands it (`$(whoami)`), for the blocks after the one that exported it.
fn expand(value: &str, env: &BTreeMap<String, String>) -> String {
    run(&format!("printf '%s' {value}"), Path::new("."), env)
}

fn run(block: &str, dir: &Path, env: &BTreeMap<String, String>) -> String {
    let output = Command::new("bash")
        .args(["-euo", "pipefail", "-c", block])
        .current_dir(dir)
        .envs(env)
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the guide's block failed ({}):\n{block}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn every_command_of_the_guide_runs() {
    if !postgres_ready() {
        return;
    }
    let repo = repository().canonicalize().expect("repository");
    let guide = fs::read_to_string(repo.join("docs/guide.md")).expect("docs/guide.md");
    let blocks = sh_blocks(&guide);
    assert!(blocks.len() >= 6, "the guide lost its commands: {blocks:?}");

    let temp = tempfile::tempdir().expect("temp dir");
    let install_root = temp.path().join("cargo-home");
    let app = temp.path().join("shop");
    fs::create_dir_all(&app).expect("app dir");
    let shop = repo.join("examples/shop");
    copy_dir(&shop.join("contracts"), &app.join("contracts"));
    copy_dir(&shop.join("src"), &app.join("src"));
    fs::copy(shop.join("Cargo.lock"), app.join("Cargo.lock")).expect("Cargo.lock");
    let manifest = fs::read_to_string(shop.join("Cargo.toml")).expect("shop Cargo.toml");
    let facade = repo.join("facade");
    let pointed = manifest.replace(
        "evc = { path = \"../../facade\" }",
        &format!("evc = {{ path = {:?} }}", facade.display().to_string()),
    );
    assert_ne!(pointed, manifest, "the shop's evc dependency moved");
    fs::write(app.join("Cargo.toml"), pointed).expect("Cargo.toml");

    let database = format!("evc_guide_{}", std::process::id());
    let _drop = DropDatabase(database.clone());
    let mut env = BTreeMap::new();
    let path = std::env::var("PATH").unwrap_or_default();
    env.insert(
        "PATH".to_owned(),
        format!("{}:{path}", install_root.join("bin").display()),
    );
    env.insert(
        "CARGO_TARGET_DIR".to_owned(),
        target_directory().display().to_string(),
    );
    // A database URL of the caller's must not leak into the guide's commands.
    env.insert("DATABASE_URL".to_owned(), String::new());

    let mut outputs = Vec::new();
    for block in &blocks {
        let block = block.replace(GUIDE_DATABASE, &database);
        if block.trim() == "cargo install --path cli" {
            let install = format!(
                "cargo install --path cli --debug --locked --offline --root {:?}",
                install_root.display().to_string()
            );
            run(&install, &repo, &env);
            continue;
        }
        if block.contains("evc compat") {
            add_optional_field(&app.join("contracts"));
        }
        for line in block.lines() {
            if let Some((name, value)) = line
                .strip_prefix("export ")
                .and_then(|rest| rest.split_once('='))
            {
                env.insert(name.to_owned(), expand(value, &env));
            }
        }
        outputs.push(run(&block, &app, &env));
    }
    let all = outputs.concat();
    assert!(all.contains("ok: 3 event types"), "{all}");
    assert!(
        all.contains("payments: 3"),
        "the shop did not finish: {all}"
    );
    assert!(app.join("generated/Cargo.toml").is_file());
    assert!(
        fs::read_to_string(app.join("generated/src/contracts.rs"))
            .expect("generated code")
            .contains("with_receipt_email"),
        "the new optional field has no setter"
    );
}

#[test]
fn the_shop_example_is_generated_from_its_contracts() {
    let shop: PathBuf = repository().join("examples/shop");
    let output = Command::new(env!("CARGO_BIN_EXE_evc"))
        .args(["generate", "--check", "contracts"])
        .current_dir(&shop)
        .output()
        .expect("evc runs");
    assert!(
        output.status.success(),
        "examples/shop/generated is stale; run `evc generate` in examples/shop:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The shop's lock file holds what its manifests and evc's ask for today: a team that copies the
/// example builds it with `--locked`, which refuses a lock file that needs an update.
#[test]
fn the_shop_lock_file_is_current() {
    let shop: PathBuf = repository().join("examples/shop");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["tree", "--locked", "--offline", "--depth", "0"])
        .current_dir(&shop)
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "`cargo tree --locked --offline` failed in examples/shop (a stale Cargo.lock: run \
         `cargo tree --offline` there; or a crate missing from the local cache):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
