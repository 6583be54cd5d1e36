//! `subagents verify` and `subagents import` against adversarial input
//! (issue 12): indexes damaged behind the log's back, impossible histories,
//! oversized lines, and an import killed midway.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use subagent_core::{Event, MessageId, MessageSource, SessionId, StreamId, MAX_EVENT_BYTES};

fn subagents(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_subagents"))
        .args(args)
        .output()
        .expect("run subagents")
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn path(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn demo_export(dir: &Path) -> (PathBuf, PathBuf) {
    let data = dir.join("data");
    let output = subagents(&["demo", "--data", path(&data)]);
    assert!(output.status.success(), "{:?}", text(&output));
    let export = dir.join("export.jsonl");
    assert!(subagents(&["export", path(&data), "--out", path(&export)])
        .status
        .success());
    (data, export)
}

const FAMILIES: [&str; 5] = ["log", "streams", "event_ids", "meta", "blobs"];

/// Applies `damage` to the closed log at `data` through RocksDB directly, as
/// a stray process or a failing disk would.
fn damage(data: &Path, damage: impl FnOnce(&rocksdb::DB)) {
    let db = rocksdb::DB::open_cf(&rocksdb::Options::default(), data, FAMILIES).unwrap();
    damage(&db);
}

fn first_key(db: &rocksdb::DB, family: &str) -> Vec<u8> {
    let family = db.cf_handle(family).unwrap();
    let (key, _) = db
        .iterator_cf(family, rocksdb::IteratorMode::Start)
        .next()
        .unwrap()
        .unwrap();
    key.to_vec()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[test]
fn verify_reports_indexes_damaged_behind_the_logs_back() {
    let dir = tempfile::tempdir().unwrap();
    let (data, _) = demo_export(dir.path());
    let ok = subagents(&["verify", path(&data)]);
    assert!(ok.status.success(), "{:?}", text(&ok));

    type Damage = fn(&rocksdb::DB);
    let cases: [(&str, Damage, &str); 5] = [
        (
            "a deleted stream entry",
            |db| {
                let key = first_key(db, "streams");
                db.delete_cf(db.cf_handle("streams").unwrap(), key).unwrap();
            },
            "streams index: no entry for version 1",
        ),
        (
            "a redirected stream entry",
            |db| {
                let key = first_key(db, "streams");
                db.put_cf(db.cf_handle("streams").unwrap(), key, 7u64.to_be_bytes())
                    .unwrap();
            },
            "points at position 7",
        ),
        (
            "an undecodable stream entry",
            |db| {
                db.put_cf(db.cf_handle("streams").unwrap(), b"garbage", b"x")
                    .unwrap();
            },
            "streams index entry does not decode",
        ),
        (
            "a deleted event-id entry",
            |db| {
                let key = first_key(db, "event_ids");
                db.delete_cf(db.cf_handle("event_ids").unwrap(), key)
                    .unwrap();
            },
            "event_ids index: no entry for event",
        ),
        (
            "an event-id entry that does not decode",
            |db| {
                let key = first_key(db, "event_ids");
                db.put_cf(db.cf_handle("event_ids").unwrap(), key, b"short")
                    .unwrap();
            },
            "does not decode",
        ),
    ];
    for (index, (name, apply, expected)) in cases.into_iter().enumerate() {
        let copy = dir.path().join(format!("copy-{index}"));
        copy_dir(&data, &copy);
        damage(&copy, apply);
        let output = subagents(&["verify", path(&copy)]);
        let (stdout, stderr) = text(&output);
        assert!(!output.status.success(), "{name}: {stdout}");
        assert!(stderr.contains("verification failed"), "{name}: {stderr}");
        assert!(
            stdout.contains(expected),
            "{name}: {expected:?} not in\n{stdout}"
        );
    }
}

#[test]
fn verify_reports_an_impossible_history_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let (data, _) = demo_export(dir.path());
    let position = {
        // A faulty writer reopens admission that no drain closed.
        let log =
            subagent_store::RocksLog::open(&data, subagent_store::RocksOptions::default()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let outcome = runtime
            .block_on(subagent_store::EventLog::append(
                &log,
                StreamId::Runtime,
                subagent_store::ExpectedVersion::Any,
                vec![subagent_core::NewEvent::new(Event::AdmissionReopened {
                    parent: SessionId::new(),
                })],
            ))
            .unwrap();
        outcome.first_position
    };
    let output = subagents(&["verify", path(&data)]);
    let (stdout, _) = text(&output);
    assert!(!output.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "replay/impossible-history: impossible history at position {position} (AdmissionReopened in runtime)"
        )),
        "{stdout}"
    );
}

fn lines_of(file: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn write_lines(file: &Path, lines: &[serde_json::Value]) {
    let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
    std::fs::write(file, text).unwrap();
}

#[test]
fn import_refuses_impossible_histories_and_oversized_lines_leaving_no_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (_, export) = demo_export(dir.path());
    let records = lines_of(&export);
    let next = records.len() as u64 + 1;
    let orphan = SessionId::new();
    let bad_lines = [
        (
            "orphan child",
            serde_json::json!({
                "position": next, "stream": StreamId::Session(orphan), "version": 1,
                "eventId": subagent_core::EventId::new(), "recordedAt": 1, "schemaVersion": 1,
                "event": Event::SessionCreated {
                    session: orphan, parent: Some(SessionId::new()), depth: 1,
                    label: "x".into(), provider: Some("spawn".into()),
                    mode: subagent_core::SessionMode::Continuable, external: false,
                    descriptor: serde_json::Value::Null,
                },
            }),
            "replay/impossible-history",
        ),
        (
            "user message into an unknown session",
            serde_json::json!({
                "position": next, "stream": StreamId::Session(orphan), "version": 1,
                "eventId": subagent_core::EventId::new(), "recordedAt": 1, "schemaVersion": 1,
                "event": Event::MessageAccepted {
                    message_id: MessageId::new(), source: MessageSource::User,
                    delivery: subagent_core::MessageDelivery::Queue, content: vec![],
                },
            }),
            "replay/impossible-history",
        ),
    ];
    for (index, (name, line, code)) in bad_lines.into_iter().enumerate() {
        let file = dir.path().join(format!("bad-{index}.jsonl"));
        let mut all = records.clone();
        all.push(line);
        write_lines(&file, &all);
        let target = dir.path().join(format!("target-{index}"));
        let output = subagents(&["import", path(&target), path(&file)]);
        let (_, stderr) = text(&output);
        assert!(!output.status.success(), "{name}");
        assert!(stderr.contains(code), "{name}: {stderr}");
        assert!(stderr.contains(&format!("line {next}")), "{name}: {stderr}");
        assert!(!target.exists(), "{name}: the target was created");
    }

    let huge = dir.path().join("huge.jsonl");
    let mut text = std::fs::read_to_string(&export).unwrap();
    text.push_str(&"x".repeat(MAX_EVENT_BYTES + 1));
    text.push('\n');
    std::fs::write(&huge, text).unwrap();
    let target = dir.path().join("target-huge");
    let output = subagents(&["import", path(&target), path(&huge)]);
    let (_, stderr) = self::text(&output);
    assert!(!output.status.success());
    assert!(stderr.contains("replay/line-too-long"), "{stderr}");
    assert!(!target.exists());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("importing"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// An export of `messages` large messages between a root and its child: a
/// file big enough that importing it takes a while.
fn large_export(file: &Path, messages: usize) {
    use subagent_projections::testing::{history, Step};
    let mut steps = vec![Step::Child {
        parent: 0,
        continuable: true,
    }];
    steps.extend(std::iter::repeat_n(Step::Message { target: 0 }, messages));
    let records = history(&steps);
    let filler = "y".repeat(16 * 1024);
    let mut out = std::io::BufWriter::new(std::fs::File::create(file).unwrap());
    for mut record in records {
        if let Event::MessageAccepted { content, .. } = &mut record.event {
            *content = vec![subagent_core::ContentBlock::text(filler.clone())];
        }
        serde_json::to_writer(&mut out, &record).unwrap();
        std::io::Write::write_all(&mut out, b"\n").unwrap();
    }
}

fn staging_dirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|entry| {
            entry
                .file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with(".data.importing-"))
        })
        .collect()
}

#[test]
fn an_import_killed_midway_leaves_no_directory_and_a_reimport_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("large.jsonl");
    large_export(&file, 3_000);
    let data = dir.path().join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_subagents"))
        .args(["import", path(&data), path(&file)])
        .spawn()
        .unwrap();
    // Wait until the import has written a few megabytes, then kill it
    // without warning.
    let deadline = Instant::now() + Duration::from_secs(60);
    let staged = loop {
        // Count what is written wherever the import writes (its staging
        // directory, or the target itself were it not atomic).
        let mut places = staging_dirs(dir.path());
        places.push(data.clone());
        let written: u64 = places
            .iter()
            .flat_map(|staging| std::fs::read_dir(staging).into_iter().flatten())
            .filter_map(|entry| entry.ok()?.metadata().ok())
            .map(|metadata| metadata.len())
            .sum();
        if written > 4 * 1024 * 1024 {
            break written;
        }
        assert!(Instant::now() < deadline, "the import never got going");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the import finished before it could be killed; make the file larger"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "killed midway");
    assert!(!data.exists(), "a killed import left a partial log");

    let started = Instant::now();
    let output = subagents(&["import", path(&data), path(&file)]);
    assert!(output.status.success(), "{:?}", text(&output));
    println!(
        "killed after {} bytes were staged; the full import of {} bytes took {:?}",
        staged,
        std::fs::metadata(&file).unwrap().len(),
        started.elapsed()
    );
    let again = dir.path().join("again.jsonl");
    assert!(subagents(&["export", path(&data), "--out", path(&again)])
        .status
        .success());
    assert_eq!(
        std::fs::read(&file).unwrap(),
        std::fs::read(&again).unwrap()
    );
    let verified = subagents(&["verify", path(&data)]);
    assert!(verified.status.success(), "{:?}", text(&verified));
}
