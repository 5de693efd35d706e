//! Helpers shared by this crate's integration tests.

use std::fs;
use std::path::Path;

/// Files in fixture folders that steer a test and are not contract files.
const CONTROL_FILES: &[&str] = &["EXPECT", "REMOVE", "README"];

/// Copies a fixture folder into `to`, over what is there, leaving out control files.
pub(crate) fn copy_fixture(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).expect("fixture folder is readable") {
        let entry = entry.expect("fixture entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            fs::create_dir_all(&target).expect("create fixture folder");
            copy_fixture(&entry.path(), &target);
        } else if !CONTROL_FILES.iter().any(|name| entry.file_name() == *name) {
            fs::copy(entry.path(), &target).expect("copy fixture file");
        }
    }
}
