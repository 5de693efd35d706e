//! Reading base contracts from git (`evc_codegen::compat::git`) in temporary repositories.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use evc_codegen::compat::git::{self, GitError};

/// A temporary git repository on branch `main`.
struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    fn new() -> Self {
        let repo = Self {
            dir: tempfile::tempdir().expect("temp dir"),
        };
        repo.git(&["init", "-q", "-b", "main"]);
        repo
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Runs git in the repository and returns its trimmed standard output.
    fn git(&self, args: &[&str]) -> String {
        let output = Command::new("git")
            .args([
                "-c",
                "user.name=evc tests",
                "-c",
                "user.email=evc@example.invalid",
                "-c",
                "commit.gpgsign=false",
            ])
            .arg("-C")
            .arg(self.path())
            .args(args)
            .output()
            .expect("git runs");
        assert!(
            output.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    fn write(&self, path: &str, text: &str) {
        let path = self.path().join(path);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    }

    /// Stages everything and commits; returns the commit id.
    fn commit(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }

    fn contracts(&self) -> PathBuf {
        self.path().join("contracts")
    }
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

#[test]
fn an_older_commit_gives_the_old_file_contents_in_the_same_layout() {
    let repo = Repo::new();
    repo.write("contracts/evc.yaml", "project: one\n");
    repo.write("contracts/events/iu.born.yaml", "event: iu.born # old\n");
    repo.write("README.md", "not a contract\n");
    let old = repo.commit("first");
    repo.write("contracts/events/iu.born.yaml", "event: iu.born # new\n");
    repo.write("contracts/events/iu.edited.yaml", "event: iu.edited\n");
    repo.commit("second");

    let checkout = git::checkout_contracts(&repo.contracts(), &old).expect("checkout");
    assert!(checkout.existed());
    assert_eq!(checkout.commit(), old);
    assert_eq!(checkout.short_commit(), &old[..12]);
    let dir = checkout.contracts_dir();
    assert!(dir.starts_with(checkout.root()));
    assert!(dir.ends_with("contracts"));
    assert_eq!(
        read(&dir.join("events/iu.born.yaml")),
        "event: iu.born # old\n"
    );
    assert_eq!(read(&dir.join("evc.yaml")), "project: one\n");
    assert!(!dir.join("events/iu.edited.yaml").exists());
    assert!(!checkout.root().join("README.md").exists());

    // A symbolic revision works too, and the copy goes away with the checkout.
    let previous = git::checkout_contracts(&repo.contracts(), "HEAD~1").expect("checkout");
    assert_eq!(previous.commit(), old);
    let root = previous.root().to_owned();
    drop(previous);
    assert!(!root.exists());
}

#[test]
fn a_contract_directory_deleted_from_the_work_tree_is_still_read_at_the_revision() {
    let repo = Repo::new();
    repo.write("services/a/contracts/evc.yaml", "project: a\n");
    let first = repo.commit("first");
    fs::remove_dir_all(repo.path().join("services")).expect("remove");

    let checkout = git::checkout_contracts(&repo.path().join("services/a/contracts"), &first)
        .expect("checkout");
    assert!(checkout.existed());
    assert!(checkout.contracts_dir().ends_with("services/a/contracts"));
    assert_eq!(
        read(&checkout.contracts_dir().join("evc.yaml")),
        "project: a\n"
    );
}

#[test]
fn an_unknown_revision_is_named_in_the_error() {
    let repo = Repo::new();
    repo.write("contracts/evc.yaml", "project: one\n");
    repo.commit("first");
    let error =
        git::checkout_contracts(&repo.contracts(), "no-such-branch").expect_err("unknown revision");
    assert!(
        matches!(&error, GitError::UnknownRevision { rev } if rev == "no-such-branch"),
        "{error:?}"
    );
    assert!(error.to_string().contains("`no-such-branch`"), "{error}");

    // Option-like revisions are not passed to git as options.
    let error = git::checkout_contracts(&repo.contracts(), "--all").expect_err("not a revision");
    assert!(
        matches!(error, GitError::UnknownRevision { .. }),
        "{error:?}"
    );
}

#[test]
fn a_directory_outside_any_repository_is_not_a_repository() {
    let dir = tempfile::tempdir().expect("temp dir");
    let error = git::checkout_contracts(dir.path(), "HEAD").expect_err("no repository");
    assert!(
        matches!(error, GitError::NotARepository { .. }),
        "{error:?}"
    );
    let error = git::default_base(dir.path()).expect_err("no repository");
    assert!(
        matches!(error, GitError::NotARepository { .. }),
        "{error:?}"
    );
}

#[test]
fn a_path_missing_at_the_revision_gives_an_empty_checkout() {
    let repo = Repo::new();
    repo.write("README.md", "no contracts yet\n");
    let first = repo.commit("first");
    repo.write("contracts/evc.yaml", "project: one\n");
    repo.commit("second");

    let checkout = git::checkout_contracts(&repo.contracts(), &first).expect("checkout");
    assert!(!checkout.existed());
    assert!(checkout.contracts_dir().is_dir());
    assert_eq!(
        fs::read_dir(checkout.contracts_dir())
            .expect("readable")
            .count(),
        0
    );
}

#[test]
fn default_base_is_the_merge_base_with_main_on_a_feature_branch() {
    let repo = Repo::new();
    repo.write("contracts/evc.yaml", "project: one\n");
    let fork = repo.commit("first");
    repo.git(&["checkout", "-q", "-b", "feature"]);
    repo.write("contracts/evc.yaml", "project: feature\n");
    repo.commit("on the feature");
    repo.git(&["checkout", "-q", "main"]);
    repo.write("contracts/evc.yaml", "project: main moved on\n");
    let main_tip = repo.commit("on main");
    repo.git(&["checkout", "-q", "feature"]);

    // No origin/main: main is used.
    assert_eq!(git::default_base(repo.path()).expect("a base"), fork);
    // From a subdirectory, too.
    assert_eq!(git::default_base(&repo.contracts()).expect("a base"), fork);

    // origin/main wins over main when it exists.
    repo.git(&["checkout", "-q", "-b", "feature-2", &main_tip]);
    repo.write("contracts/evc.yaml", "project: feature 2\n");
    repo.commit("second feature");
    assert_eq!(git::default_base(repo.path()).expect("a base"), main_tip);
    repo.git(&["update-ref", "refs/remotes/origin/main", &fork]);
    assert_eq!(git::default_base(repo.path()).expect("a base"), fork);
}

#[test]
fn default_base_says_what_it_tried() {
    let repo = Repo::new();
    repo.git(&["checkout", "-q", "-b", "trunk"]);
    repo.write("contracts/evc.yaml", "project: one\n");
    repo.commit("first");
    let error = git::default_base(repo.path()).expect_err("no main branch");
    let text = error.to_string();
    assert!(matches!(error, GitError::NoDefaultBase { .. }), "{error:?}");
    assert!(text.contains("`origin/main`"), "{text}");
    assert!(text.contains("`main`"), "{text}");
    assert!(text.contains("--against"), "{text}");
}

#[cfg(unix)]
#[test]
fn symlink_blobs_are_not_followed_and_oversized_blobs_are_refused_by_size() {
    let repo = Repo::new();
    let secret = repo.path().join("secret.yaml");
    repo.write("secret.yaml", "evc_leak_marker_git: 1\n");
    repo.write("contracts/evc.yaml", "project: one\n");
    std::os::unix::fs::symlink(&secret, repo.contracts().join("consumers.yaml")).expect("symlink");
    fs::create_dir_all(repo.contracts().join("events")).expect("mkdir");
    std::os::unix::fs::symlink(
        "../../secret.yaml",
        repo.contracts().join("events/a.b.yaml"),
    )
    .expect("symlink");
    let big = format!("event: big.one\n#{}\n", "x".repeat(2 * 1024 * 1024));
    repo.write("contracts/events/big.one.yaml", &big);
    let commit = repo.commit("links and a big file");

    let checkout = git::checkout_contracts(&repo.contracts(), &commit).expect("checkout");
    let dir = checkout.contracts_dir();
    // Symlink blobs are left out: nothing is created that could lead anywhere.
    assert!(fs::symlink_metadata(dir.join("events/a.b.yaml")).is_err());
    assert!(fs::symlink_metadata(dir.join("consumers.yaml")).is_err());
    // The big blob keeps its size, so the loader refuses it as too large.
    let size = fs::metadata(dir.join("events/big.one.yaml"))
        .expect("copied")
        .len();
    assert_eq!(size, big.len() as u64);
    let Err(evc_codegen::LoadError::Invalid { diagnostics, .. }) =
        evc_codegen::ContractSet::load(dir)
    else {
        panic!("the base loads with findings");
    };
    let rules: Vec<(&str, &str)> = diagnostics
        .iter()
        .map(|d| (d.location.file.as_str(), d.rule.id()))
        .filter(|(file, _)| file.starts_with("events/"))
        .collect();
    assert_eq!(rules, [("events/big.one.yaml", "FILE_TOO_LARGE")]);
    for diagnostic in &diagnostics {
        assert!(!diagnostic.to_short_string().contains("evc_leak_marker_git"));
    }
}
