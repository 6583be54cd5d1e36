//! A demo whose log cannot grow (the file-size limit stands in for a full
//! disk) fails with the cause: the store's file and OS error, never a bare
//! timeout, an aggregate without it, or a hang.

mod common;

use common::text;

#[cfg(target_os = "linux")]
#[test]
fn a_demo_whose_log_cannot_grow_names_the_file_and_the_os_error() {
    let binary = env!("CARGO_BIN_EXE_subagents");
    // Limits (512-byte blocks) that let the log open but stop it in the
    // middle of the demo, at different steps (which step depends on how
    // the appends were grouped into commits). Before, 88 timed out waiting
    // for review to resume, 96 ended as "4 branches failed", and 100 hung
    // in a runtime call that never returned.
    for blocks in [80, 88, 96, 100, 104] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let data = data.to_str().unwrap();
        // An ignored SIGXFSZ stays ignored across exec, so a write past the
        // limit fails with EFBIG instead of killing the process.
        let script =
            format!("trap '' XFSZ; ulimit -f {blocks}; exec '{binary}' demo --data '{data}'");
        let output = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        let (stdout, stderr) = text(&output);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{blocks}: {stdout}\n{stderr}"
        );
        let error = stderr
            .lines()
            .find(|line| line.starts_with("error: "))
            .unwrap_or_else(|| panic!("{blocks}: no error line in {stderr}"));
        assert!(!error.contains("timed out"), "{blocks}: {error}");
        assert!(error.contains("File too large"), "{blocks}: {error}");
        assert!(
            error.contains(&format!("While appending to file: {data}/")),
            "{blocks}: {error}"
        );
    }
}
