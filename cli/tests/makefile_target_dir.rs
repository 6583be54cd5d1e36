//! `make own-target-dir`, which every cargo step of the Makefile runs
//! first: when the shared target directory was last built from another
//! checkout, this checkout's files are touched (so cargo, which names a
//! workspace's crates by their paths inside it, rebuilds them instead of
//! linking the other checkout's), and the directory remembers this
//! checkout; the same checkout again touches nothing.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

/// A git checkout at `dir` holding the project's Makefile and one source.
fn checkout(dir: &Path) {
    std::fs::create_dir_all(dir.join("core/src")).unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../Makefile"),
        dir.join("Makefile"),
    )
    .unwrap();
    std::fs::write(dir.join("core/src/lib.rs"), "// a source\n").unwrap();
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .status()
            .expect("git runs");
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "checkout"]);
}

/// Runs `make own-target-dir` in `dir` against `target`; its stdout.
fn guard(dir: &Path, target: &Path) -> String {
    let output = Command::new("make")
        .args(["-s", "own-target-dir"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target)
        .output()
        .expect("make runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn modified(file: &Path) -> SystemTime {
    std::fs::metadata(file).unwrap().modified().unwrap()
}

/// Sets `file`'s modification time an hour back.
fn age(file: &Path) {
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(file)
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
}

#[test]
fn another_checkouts_build_makes_this_one_touch_its_files() {
    let root = tempfile::tempdir().unwrap();
    let (one, two, target) = (
        root.path().join("one"),
        root.path().join("two"),
        root.path().join("target"),
    );
    checkout(&one);
    checkout(&two);
    let source = one.join("core/src/lib.rs");

    // A first build from `one`: remembered.
    guard(&one, &target);
    assert_eq!(
        std::fs::read_to_string(target.join(".checkout"))
            .unwrap()
            .trim(),
        one.to_str().unwrap()
    );

    // Built from `one` again: nothing is touched.
    age(&source);
    let before = modified(&source);
    assert_eq!(guard(&one, &target), "");
    assert_eq!(
        modified(&source),
        before,
        "the same checkout touches nothing"
    );

    // `two` builds; then `one` again: its files are touched, and it says so.
    assert!(guard(&two, &target).contains("last built from"));
    let said = guard(&one, &target);
    assert!(said.contains(two.to_str().unwrap()), "{said}");
    assert!(
        modified(&source) > before,
        "the checkout's sources are touched"
    );
    assert_eq!(
        std::fs::read_to_string(target.join(".checkout"))
            .unwrap()
            .trim(),
        one.to_str().unwrap()
    );
}
