//! The console in a real headless Chromium against `subagents serve` on a
//! demo log, step by step as a person would use it, each step asserted on
//! the page (not only on the server) and saved as a screenshot under
//! `<target>/tmp/console-screenshots/person/`: open the page with the
//! token, see the demo's tree, see a refused tool call marked, follow the
//! link from the tool call that started a child to that child, hold the
//! root, prompt a child with an image and see the reply arrive live, see a
//! bad time zone's message, interrupt a running child and see it settle
//! `aborted`, scrub back to an earlier position and see the earlier tree,
//! and verify the log.

mod common;

use std::path::PathBuf;

use common::serve::Serve;
use serde_json::json;
use subagent_browser::Browser;

/// Any failure of a step.
type Step = Result<(), Box<dyn std::error::Error>>;

/// Where `suite`'s screenshots go: `<target>/tmp/console-screenshots/<suite>/`.
fn shots(suite: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("console-screenshots")
        .join(suite)
}

/// A real 2x2 RGB PNG (75 bytes), as base64.
const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEklEQVR4nGP4z8DAAMIM/4EAAB/uBfsL2WiLAAAAAElFTkSuQmCC";

/// How many tree rows the page shows.
const ROWS: &str = "document.querySelectorAll('#tree .node').length";

/// The link, in the shown transcript, from a tool call to the fact-check
/// child it started (`undefined` when there is none).
const FACT_CHECK_LINK: &str = "Array.from(document.querySelectorAll('#transcript .entry[data-type=ToolCalled] .started-child')).find(link => link.textContent.includes('fact-check'))";

/// The row of the session labelled `label`.
fn row(label: &str) -> String {
    format!("#tree .node[data-label=\"{label}\"]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_watches_prompts_interrupts_and_scrubs_back_in_the_console() -> Step {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    common::demo(&data);
    // The demo's research child has a persona naming {{project}}.
    let serve = Serve::start_with(&data, &["--persona-var", "project=subagents"]);
    let token = std::fs::read_to_string(data.join("gateway.token"))
        .unwrap()
        .trim()
        .to_owned();
    let browser = Browser::start(&shots("person"), 1280, 900).await?;

    // Open the page and give it the token.
    browser.goto(&format!("{}/", serve.base)).await?;
    browser.fill("#token", &token).await?;
    browser.click("#connect").await?;
    browser
        .until("document.body.dataset.ready === 'true'", "the first tree")
        .await?;
    browser.screenshot("01-connected").await?;

    // The demo's tree: the root and its five children, with their states.
    browser
        .until(&format!("{ROWS} === 6"), "the demo's six sessions")
        .await?;
    for label in [
        "demo root",
        "research",
        "fact-check",
        "review",
        "shout",
        "digger",
    ] {
        browser
            .until(
                &format!(
                    "document.querySelector('{}') !== null",
                    row(label).replace('\'', "\\'")
                ),
                label,
            )
            .await?;
    }
    let digger_stop = browser
        .eval(&format!(
            "document.querySelector('{}').dataset.stopReason",
            row("digger")
        ))
        .await?;
    assert_eq!(digger_stop, json!("aborted"));
    browser.screenshot("02-demo-tree").await?;

    // research's refused tool call is marked in its transcript.
    browser.click(&row("research")).await?;
    browser
        .until(
            "document.querySelector('#transcript .entry.refused .badge-refused') !== null",
            "the refused tool call, marked",
        )
        .await?;
    browser.screenshot("03-refused-tool-call").await?;

    // research started fact-check through a `subagent` tool call: the call
    // in research's transcript links to the child, and the link selects it.
    browser
        .until(
            &format!("{FACT_CHECK_LINK} !== undefined"),
            "research's link to the fact-check it started",
        )
        .await?;
    let fact_check = browser
        .eval(&format!(
            "document.querySelector('{}').dataset.id",
            row("fact-check")
        ))
        .await?;
    let fact_check = fact_check.as_str().unwrap().to_owned();
    let link = browser
        .eval(&format!(
            "(link => ({{child: link.dataset.childId, turn: link.closest('.entry').dataset.turn, \
             callId: link.closest('.entry').dataset.callId}}))({FACT_CHECK_LINK})"
        ))
        .await?;
    assert_eq!(link["child"], json!(fact_check));
    let turn = link["turn"].as_str().unwrap().to_owned();
    let call_id = link["callId"].as_str().unwrap().to_owned();
    // The transcript follows its newest records: bring the call into view.
    browser
        .run(&format!(
            "const call = {FACT_CHECK_LINK}.closest('.entry'); \
             const box = document.querySelector('#transcript-entries'); \
             box.scrollTop += call.getBoundingClientRect().top - box.getBoundingClientRect().top - 8;"
        ))
        .await?;
    browser.screenshot("03a-started-child-link").await?;
    browser
        .click(&format!(
            "#transcript .started-child[data-child-id=\"{fact_check}\"]"
        ))
        .await?;
    browser
        .until(
            "document.querySelector('#tree .node.selected')?.dataset.label === 'fact-check' \
             && document.querySelector('#transcript-title').textContent === 'Transcript: fact-check' \
             && document.querySelectorAll('#transcript .entry').length > 0",
            "fact-check selected, with its transcript",
        )
        .await?;
    // Its tree row names the tool call of research's turn that started it.
    let annotation = browser
        .eval(&format!(
            "(span => span ? {{text: span.textContent, title: span.title}} : null)\
             (document.querySelector('{} .requested-by'))",
            row("fact-check")
        ))
        .await?;
    let text = annotation["text"].as_str().unwrap_or_default();
    let title = annotation["title"].as_str().unwrap_or_default();
    assert!(
        text.starts_with('\u{2190}') && text.ends_with(&format!(" of turn {turn}")),
        "{annotation}"
    );
    assert!(
        title.contains(&call_id) && title.contains("research"),
        "{annotation}"
    );
    browser.screenshot("03b-started-child-selected").await?;
    // Back to research for the steps below.
    browser.click(&row("research")).await?;
    browser
        .until(
            "document.querySelector('#tree .node.selected')?.dataset.label === 'research' \
             && document.querySelector('#transcript .entry.refused .badge-refused') !== null \
             && !document.querySelector('#transcript-status').textContent.startsWith('Loading')",
            "research selected again",
        )
        .await?;

    // Hold the root, so it is a live parent, then prompt research with an image.
    browser.click("#hold-root").await?;
    browser
        .until(
            "document.querySelector('#root-status').textContent.includes('held by this server')",
            "the root held",
        )
        .await?;
    let picture = dir.path().join("picture.png");
    {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(PNG_BASE64)
            .unwrap();
        std::fs::write(&picture, bytes).unwrap();
    }
    let replies_before = browser
        .eval("document.querySelectorAll('#transcript .entry[data-type=AssistantMessage]').length")
        .await?;
    browser
        .fill("#prompt-text", "what is in this picture?")
        .await?;
    browser
        .press("#image-input", picture.to_str().unwrap())
        .await?;
    browser
        .until(
            "document.querySelectorAll('#image-previews img.preview').length === 1",
            "the image's preview",
        )
        .await?;
    browser.screenshot("04-composing-with-an-image").await?;
    browser.click("#send").await?;
    browser
        .until(
            "document.querySelector('#composer-status').textContent.includes('Accepted')",
            "the prompt accepted",
        )
        .await?;
    browser
        .until(
            &format!(
                "document.querySelectorAll('#transcript .entry[data-type=AssistantMessage]').length > {replies_before}"
            ),
            "the reply, live",
        )
        .await?;
    browser
        .until(
            "Array.from(document.querySelectorAll('#transcript .entry[data-type=MessageAccepted] img')).some(img => img.complete && img.naturalWidth === 2)",
            "the sent image shown in the transcript, loaded from the attachment store",
        )
        .await?;
    browser.screenshot("05-image-prompt-and-reply").await?;

    // A bad time zone is refused with a readable message.
    browser.fill("#prompt-text", "and now?").await?;
    browser.fill("#time-zone", "Mars/Olympus_Mons").await?;
    browser.click("#send").await?;
    browser
        .until(
            "document.querySelector('#composer-error').textContent.toLowerCase().includes('time zone')",
            "the bad time zone's message",
        )
        .await?;
    browser.screenshot("06-bad-time-zone").await?;

    // A running child, started over HTTP, interrupted from the page.
    let root = browser
        .eval("document.querySelector('#tree .node').dataset.id")
        .await?;
    let root = root.as_str().unwrap();
    let started = reqwest::Client::new()
        .post(format!("{}/v1/roots/{root}/children", serve.base))
        .bearer_auth(&token)
        .json(&json!({
            "provider": "spawn", "label": "slow", "delivery": "parent",
            "request": {"prompt": [{"type": "text", "text": "take your time"}]},
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 201);
    browser
        .until(
            &format!(
                "document.querySelector('{}')?.dataset.state === 'running'",
                row("slow")
            ),
            "the slow child running, live",
        )
        .await?;
    browser.click(&row("slow")).await?;
    browser
        .until(
            "!document.querySelector('#interrupt').disabled",
            "interrupt enabled",
        )
        .await?;
    browser.click("#interrupt").await?;
    browser
        .until(
            &format!(
                "document.querySelector('{}')?.dataset.stopReason === 'aborted'",
                row("slow")
            ),
            "the slow child settled aborted",
        )
        .await?;
    browser.screenshot("07-interrupted").await?;

    // Back in time: an early position shows fewer sessions.
    let live_rows = browser.eval(ROWS).await?.as_u64().unwrap();
    assert_eq!(live_rows, 7);
    browser.fill("#position-number", "12").await?;
    browser
        .run("document.querySelector('#position-number').dispatchEvent(new Event('change'))")
        .await?;
    browser
        .until("document.body.dataset.position === '12'", "position 12")
        .await?;
    browser
        .until(
            &format!("{ROWS} > 0 && {ROWS} < 7"),
            "the earlier, smaller tree",
        )
        .await?;
    browser.screenshot("08-back-in-time").await?;

    // The log verifies.
    browser.click("#verify-run").await?;
    browser
        .until(
            "document.querySelector('#verify-status').classList.contains('ok')",
            "verify OK",
        )
        .await?;
    browser.screenshot("09-verified").await?;
    Ok(())
}
