//! `make own-target-dir`, which every cargo step of the Makefile runs
//! first: when the shared target directory was last built from another
//! checkout, this checkout's files are touched (so cargo, which names a
//! workspace's crates by their paths inside it, rebuilds them instead of
//! linking the other checkout's), and the directory remembers this
//! checkout; the same checkout again touches nothing. `make
//! own-fuzz-target-dir`, which `make fuzz` runs first, does the same for
//! the fuzz builds' directory, which remembers its own checkout.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

/// A checkout at `dir` holding the project's Makefile and one source: a
/// git checkout when `git` is set, else a plain folder (an unpacked
/// tarball).
fn checkout(dir: &Path, git: bool) {
    std::fs::create_dir_all(dir.join("core/src")).unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../Makefile"),
        dir.join("Makefile"),
    )
    .unwrap();
    std::fs::write(dir.join("core/src/lib.rs"), "// a source\n").unwrap();
    if !git {
        return;
    }
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args(args)
            .current_dir(dir)
            // The user's and the system's settings (signing, hooks) stay out.
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
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
    guard_with(dir, "own-target-dir", "CARGO_TARGET_DIR", target)
}

/// Runs `make <rule>` in `dir` with `variable` naming `target`; its
/// stdout. An outer make's flags (`make unit` runs this test) stay out: a
/// variable given on its command line would beat `variable` here.
fn guard_with(dir: &Path, rule: &str, variable: &str, target: &Path) -> String {
    let output = Command::new("make")
        .args(["-s", rule])
        .current_dir(dir)
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .env_remove("MAKELEVEL")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("FUZZ_TARGET_DIR")
        .env(variable, target)
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

/// The directory's record of the checkout it was last built from.
fn last_built_from(target: &Path) -> String {
    std::fs::read_to_string(target.join(".checkout"))
        .unwrap()
        .trim_end_matches('\n')
        .to_owned()
}

#[test]
fn another_checkouts_build_makes_this_one_touch_its_files() {
    let root = tempfile::tempdir().unwrap();
    // A git checkout, and a plain folder whose path has a space.
    let (one, two, target) = (
        root.path().join("one"),
        root.path().join("two x"),
        root.path().join("target dir"),
    );
    checkout(&one, true);
    checkout(&two, false);
    let (source, other) = (one.join("core/src/lib.rs"), two.join("core/src/lib.rs"));

    // A first build from `one`: its files are touched, and it is remembered.
    age(&source);
    let aged = modified(&source);
    assert!(guard(&one, &target).contains("names no checkout yet"));
    assert!(modified(&source) > aged);
    assert_eq!(last_built_from(&target), one.to_str().unwrap());

    // Built from `one` again: nothing is touched, nothing said.
    age(&source);
    let before = modified(&source);
    assert_eq!(guard(&one, &target), "");
    assert_eq!(
        modified(&source),
        before,
        "the same checkout touches nothing"
    );

    // The plain folder builds: its files are touched too.
    age(&other);
    let other_before = modified(&other);
    assert!(guard(&two, &target).contains(one.to_str().unwrap()));
    assert!(
        modified(&other) > other_before,
        "a plain folder's files are touched"
    );
    assert_eq!(last_built_from(&target), two.to_str().unwrap());

    // Then `one` again: its files are touched, and it says from where.
    let said = guard(&one, &target);
    assert!(said.contains(two.to_str().unwrap()), "{said}");
    assert!(
        modified(&source) > before,
        "the checkout's sources are touched"
    );
    assert_eq!(last_built_from(&target), one.to_str().unwrap());
}

#[test]
fn the_fuzz_directory_is_guarded_on_its_own() {
    let root = tempfile::tempdir().unwrap();
    let (one, two) = (root.path().join("one"), root.path().join("two"));
    let (target, fuzz) = (root.path().join("target"), root.path().join("fuzz target"));
    checkout(&one, true);
    checkout(&two, true);
    let source = one.join("core/src/lib.rs");
    let fuzz_guard = |dir: &Path| guard_with(dir, "own-fuzz-target-dir", "FUZZ_TARGET_DIR", &fuzz);

    // `one` builds both; then `two` builds only the fuzz targets.
    guard(&one, &target);
    fuzz_guard(&one);
    assert_eq!(last_built_from(&fuzz), one.to_str().unwrap());
    assert!(fuzz_guard(&two).contains(one.to_str().unwrap()));
    assert_eq!(last_built_from(&fuzz), two.to_str().unwrap());

    // `one`'s main directory is still its own: nothing touched there.
    age(&source);
    let before = modified(&source);
    assert_eq!(guard(&one, &target), "");
    assert_eq!(modified(&source), before);

    // Its fuzz directory is not: `one` touches its files before fuzzing.
    let said = fuzz_guard(&one);
    assert!(said.contains(two.to_str().unwrap()), "{said}");
    assert!(
        modified(&source) > before,
        "the checkout's sources are touched"
    );
    assert_eq!(last_built_from(&fuzz), one.to_str().unwrap());
    assert_eq!(last_built_from(&target), one.to_str().unwrap());
}
