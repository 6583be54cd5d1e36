//! The binary against damaged and foreign directories (issue 12): the
//! inspection commands never change a log, a damaged log is refused with its
//! cause and left as it was, and `demo` and `import` never create a new log
//! over the remains of one; a path that is not UTF-8 is kept as its bytes.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

fn subagents(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_subagents"))
        .args(args)
        .output()
        .expect("run subagents")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Every file of a directory with its bytes and modification time.
fn snapshot(dir: &Path) -> BTreeMap<String, (Vec<u8>, std::time::SystemTime)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let modified = entry.metadata().unwrap().modified().unwrap();
            (name, (std::fs::read(entry.path()).unwrap(), modified))
        })
        .collect()
}

/// The newest write-ahead log of a log directory (RocksDB numbers them;
/// the demo's are all of one width).
fn newest_wal(data: &Path) -> std::path::PathBuf {
    std::fs::read_dir(data)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .max()
        .expect("a write-ahead log")
}

fn demo(data: &Path) {
    let output = subagents(&["demo", "--data", data.to_str().unwrap()]);
    assert!(output.status.success(), "demo failed: {}", stderr(&output));
}

#[test]
fn inspection_commands_leave_the_directory_exactly_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    demo(&data);
    let before = snapshot(&data);
    let data = data.to_str().unwrap();
    let export = dir.path().join("export.jsonl");
    let export = export.to_str().unwrap();
    for _ in 0..3 {
        for args in [
            vec!["log", data],
            vec!["tree", data],
            vec!["replay", data, "--json"],
            vec!["diff", data, "--from", "1"],
            vec!["verify", data],
            vec!["export", data, "--out", export],
        ] {
            let output = subagents(&args);
            assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        }
    }
    let after = snapshot(Path::new(data));
    let names = |map: &BTreeMap<String, _>| map.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&before), names(&after), "files were added or removed");
    for (name, (bytes, modified)) in &before {
        let (bytes_after, modified_after) = &after[name];
        assert!(bytes == bytes_after, "{name} changed");
        assert_eq!(modified, modified_after, "{name} was rewritten");
    }
}

#[test]
fn inspection_works_while_a_writer_holds_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    demo(&data);
    // Hold the log open for writing in this process, as a live host would.
    let _held = subagent_store::RocksLog::open(&data, subagent_store::RocksOptions::default())
        .expect("open for writing");
    let output = subagents(&["verify", data.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let output = subagents(&["demo", "--data", data.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("locked"), "{}", stderr(&output));
}

#[test]
fn a_flipped_write_ahead_log_byte_is_reported_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    demo(&data);
    let wal = newest_wal(&data);
    let mut bytes = std::fs::read(&wal).unwrap();
    assert!(bytes.len() > 64, "the demo's WAL holds records");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    std::fs::write(&wal, &bytes).unwrap();
    let before = snapshot(&data);
    let data_text = data.to_str().unwrap();
    for args in [
        vec!["verify", data_text],
        vec!["log", data_text],
        vec!["demo", "--data", data_text],
    ] {
        let output = subagents(&args);
        assert!(!output.status.success(), "{args:?} accepted a damaged WAL");
        let message = stderr(&output);
        assert!(message.contains("is damaged"), "{args:?}: {message}");
        assert!(!message.contains("locked"), "{args:?}: {message}");
    }
    let after = snapshot(&data);
    let data_only = |map: &BTreeMap<String, (Vec<u8>, std::time::SystemTime)>| {
        map.iter()
            .filter(|(name, _)| name.as_str() != subagent_store::rocks::LOCK_FILE)
            .map(|(name, (bytes, _))| (name.clone(), bytes.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    assert!(
        data_only(&before) == data_only(&after),
        "the damaged log was changed"
    );
}

#[test]
fn a_directory_of_table_files_without_current_is_refused_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    demo(&data);
    std::fs::remove_file(data.join("CURRENT")).unwrap();
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "log") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let before = snapshot(&data);
    let export = dir.path().join("empty.jsonl");
    std::fs::write(&export, b"").unwrap();
    for args in [
        vec!["demo", "--data", data.to_str().unwrap()],
        vec!["import", data.to_str().unwrap(), export.to_str().unwrap()],
        vec!["verify", data.to_str().unwrap()],
    ] {
        let output = subagents(&args);
        assert!(!output.status.success(), "{args:?} accepted the remains");
        let message = stderr(&output);
        // Import refuses any non-empty directory before looking inside.
        let expected = if args[0] == "import" {
            "is not empty"
        } else {
            "no CURRENT"
        };
        assert!(message.contains(expected), "{args:?}: {message}");
    }
    let after = snapshot(&data);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
}

#[test]
fn a_flipped_table_file_byte_is_not_reported_as_a_lock() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    demo(&data);
    // A second demo run flushes the first run's WAL into table files.
    demo(&data);
    let mut damaged = 0;
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "sst") {
            let mut bytes = std::fs::read(&path).unwrap();
            // The footer: the last 53 bytes hold the magic number and handles.
            let at = bytes.len() - 10;
            bytes[at] ^= 0x01;
            std::fs::write(&path, &bytes).unwrap();
            damaged += 1;
        }
    }
    assert!(damaged > 0, "the log has table files");
    let output = subagents(&["verify", data.to_str().unwrap()]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(!message.contains("locked"), "{message}");
    assert!(
        message.contains(".sst"),
        "the damaged file is named: {message}"
    );
}

/// A write torn at the end of the newest write-ahead log (what a killed
/// host can leave) is dropped, and the commands say so on stderr; the
/// inspection commands still change nothing.
#[test]
fn a_torn_last_write_is_noted_and_everything_before_it_read() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    demo(&data);
    let wal = newest_wal(&data);
    let bytes = std::fs::read(&wal).unwrap();
    std::fs::write(&wal, &bytes[..bytes.len() - 3]).unwrap();
    let before = snapshot(&data);
    let data_text = data.to_str().unwrap();
    for args in [vec!["verify", data_text], vec!["log", data_text]] {
        let output = subagents(&args);
        let message = stderr(&output);
        assert!(output.status.success(), "{args:?}: {message}");
        assert!(
            message.contains(&format!(
                "note: the write-ahead log {} ends in an incomplete write",
                wal.display()
            )),
            "{args:?}: {message}"
        );
    }
    let verified = String::from_utf8_lossy(&subagents(&["verify", data_text]).stdout).into_owned();
    assert!(verified.contains("OK"), "{verified}");
    let after = snapshot(&data);
    assert!(
        before.keys().eq(after.keys())
            && before
                .iter()
                .all(|(name, (bytes, _))| &after[name].0 == bytes),
        "an inspection changed the log"
    );
    // A writable open recovers it: the next command finds it whole.
    let output = subagents(&["demo", "--data", data_text]);
    assert!(output.status.success(), "demo: {}", stderr(&output));
    assert!(stderr(&output).contains("note: the write-ahead log"));
    let output = subagents(&["verify", data_text]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        !stderr(&output).contains("incomplete write"),
        "{}",
        stderr(&output)
    );
}

/// Flips one byte in the middle of the log's write-ahead file.
fn damage_the_wal(data: &Path) {
    let wal = newest_wal(data);
    let mut bytes = std::fs::read(&wal).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&wal, bytes).unwrap();
}

#[test]
fn a_damaged_log_points_to_salvage_which_copies_its_prefix_and_names_the_loss() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    demo(&data);
    damage_the_wal(&data);
    let damaged = snapshot(&data);
    let source = data.to_str().unwrap();

    let refused = subagents(&["verify", source]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains(&format!("`subagents salvage {source} NEW_DIR`")),
        "{}",
        stderr(&refused)
    );

    let copy = dir.path().join("copy");
    let left = dir.path().join("left.jsonl");
    let salvaged = subagents(&[
        "salvage",
        source,
        copy.to_str().unwrap(),
        "--dropped",
        left.to_str().unwrap(),
    ]);
    assert!(salvaged.status.success(), "{}", stderr(&salvaged));
    let report = String::from_utf8_lossy(&salvaged.stdout).into_owned();
    let kept: u64 = report
        .strip_prefix("salvaged ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{report}"));
    assert!(kept > 0, "{report}");
    assert!(report.contains("lost "), "{report}");
    assert!(
        report.contains(&format!("written to {}", left.display())),
        "{report}"
    );
    let verified = subagents(&["verify", copy.to_str().unwrap()]);
    assert!(verified.status.success(), "{}", stderr(&verified));
    assert!(
        String::from_utf8_lossy(&verified.stdout).contains(&format!("verified {kept} events")),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );
    // Every line left behind is a record past the prefix.
    for line in std::fs::read_to_string(&left).unwrap().lines() {
        let record: subagent_core::RecordedEvent = serde_json::from_str(line).unwrap();
        assert!(record.position > kept);
    }
    assert_eq!(
        snapshot(&data),
        damaged,
        "the damaged log is never written to"
    );

    // The same report as JSON, for scripts.
    let json = subagents(&[
        "salvage",
        source,
        dir.path().join("again").to_str().unwrap(),
        "--json",
    ]);
    assert!(json.status.success(), "{}", stderr(&json));
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["prefix"]["kept"], kept);
    assert_eq!(
        value["lost"].as_u64().unwrap(),
        value["lastKnown"].as_u64().unwrap() - kept
    );
}

#[test]
fn salvage_refuses_what_it_must_and_leaves_no_file_behind() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    demo(&data);
    let source = data.to_str().unwrap();

    // An existing --dropped file is never overwritten.
    let existing = dir.path().join("existing.jsonl");
    std::fs::write(&existing, b"keep").unwrap();
    let copy = dir.path().join("copy");
    let refused = subagents(&[
        "salvage",
        source,
        copy.to_str().unwrap(),
        "--dropped",
        existing.to_str().unwrap(),
    ]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("existing.jsonl"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep");
    assert!(!copy.exists());

    // A non-empty target is refused, and the --dropped file this run made
    // is removed again.
    let target = dir.path().join("full");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("mine"), b"x").unwrap();
    let left = dir.path().join("left.jsonl");
    let refused = subagents(&[
        "salvage",
        source,
        target.to_str().unwrap(),
        "--dropped",
        left.to_str().unwrap(),
    ]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("replay/directory-not-empty"),
        "{}",
        stderr(&refused)
    );
    assert!(!left.exists(), "a failed salvage leaves no --dropped file");

    // A directory that holds no log.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let refused = subagents(&["salvage", empty.to_str().unwrap(), copy.to_str().unwrap()]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("store/not-a-log"),
        "{}",
        stderr(&refused)
    );
    assert!(!copy.exists());
}

/// `subagents` with OS-string arguments (a path that is not UTF-8).
fn subagents_os(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_subagents"))
        .args(args)
        .output()
        .expect("run subagents")
}

#[test]
fn a_directory_whose_name_is_not_utf8_is_the_same_log_to_every_command() {
    use std::ffi::{OsStr, OsString};
    use std::os::unix::ffi::OsStrExt as _;
    let dir = tempfile::tempdir().unwrap();
    let mut name = OsString::from("log-");
    name.push(OsStr::from_bytes(b"\xff\xfe"));
    let data = dir.path().join(&name);
    let data = data.as_os_str();
    let output = subagents_os(&[OsStr::new("demo"), OsStr::new("--data"), data]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .any(|written| written == name),
        "the demo wrote to the path as given, byte for byte"
    );
    for command in ["verify", "tree", "log", "replay"] {
        let output = subagents_os(&[OsStr::new(command), data]);
        assert!(output.status.success(), "{command}: {}", stderr(&output));
        assert!(!output.stdout.is_empty(), "{command} printed nothing");
    }
    let verified = subagents_os(&[OsStr::new("verify"), data]);
    assert!(
        String::from_utf8_lossy(&verified.stdout).contains("OK: the history is admissible"),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );
    // A `--store` that is not UTF-8 is no URL: one clear refusal.
    let refused = subagents_os(&[OsStr::new("demo"), OsStr::new("--store"), data]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        stderr(&refused).contains("a postgres:// URL is UTF-8 text"),
        "{}",
        stderr(&refused)
    );
}
