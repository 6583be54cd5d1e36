//! The README's `curl` session, run as it is written against a `serve`
//! this test starts (only the token file's path and the port are
//! substituted), checking what the README says it shows: the tree, the
//! prompt's receipt and the reply on the event stream, the interrupt, and
//! a child an agent started under the call that started it.

use std::process::Command;

mod common;

use common::serve::Serve;

/// The shell block after the `<!-- curl-session -->` marker.
fn session_block() -> String {
    let readme = include_str!("../../README.md");
    let after = readme
        .split("<!-- curl-session -->")
        .nth(1)
        .expect("the README marks its curl session");
    let body = after
        .split_once("```sh\n")
        .expect("a sh block follows the marker")
        .1;
    body.split_once("```").expect("the block ends").0.to_owned()
}

#[test]
fn the_readme_curl_session_runs_and_shows_the_reply_and_the_interrupt() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("subagents-data");
    let serve = Serve::start(&data);
    let address = serve.base.trim_start_matches("http://").to_owned();
    let script = session_block().replace("127.0.0.1:7878", &address);
    // The block waits for what it shows (a turn under way, the aborted
    // turn's end on the stream); the watchdog fails it, instead of
    // hanging, if one never comes.
    let output = Command::new("timeout")
        .args(["120", "bash", "-euo", "pipefail", "-c", &script])
        .current_dir(dir.path())
        .output()
        .expect("bash runs");
    drop(serve);
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{printed}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        printed.contains(r#"{"label":"helper","depth":1}"#),
        "{printed}"
    );
    assert!(printed.contains(r#"{"messageId":"#), "{printed}");
    assert!(printed.contains(r#"{"interrupted":true}"#), "{printed}");
    assert!(printed.contains("the same image is back"), "{printed}");
    // The child an agent started, under the call that started it.
    assert!(
        printed.contains(
            r#"{"label":"assistant","depth":2,"requestedBy":{"turn":1,"callId":"call-0"}}"#
        ),
        "{printed}"
    );
    let events = std::fs::read_to_string(dir.path().join("events.txt")).unwrap();
    // The prompt's message, then the reply of the turn it ran in the same
    // child's stream; the interrupt of the slow child and its aborted turn.
    let frames: Vec<&str> = events.split("\n\n").collect();
    let prompted = frames
        .iter()
        .position(|frame| frame.contains("\"requestId\":\"first-question\""))
        .expect("the prompt's message is on the stream");
    let stream = frames[prompted]
        .split("\"stream\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a record names its stream");
    assert!(
        frames[prompted..]
            .iter()
            .any(|frame| frame.contains("event: AssistantMessage")
                && frame.contains(&format!("\"stream\":\"{stream}\""))),
        "{events}"
    );
    let picture = frames
        .iter()
        .find(|frame| frame.contains("\"requestId\":\"a-picture\""))
        .expect("the image prompt's message is on the stream");
    assert!(picture.contains("\"attachment\":\"sha256:"), "{picture}");
    assert!(
        !picture.contains("iVBORw0KGgo"),
        "the event names the image, not its bytes: {picture}"
    );
    assert!(events.contains("event: InterruptRequested"), "{events}");
    assert!(events.contains("\"stopReason\":\"aborted\""), "{events}");
}
