//! The console on a 10,000-session tree in a real headless Chromium
//! against `subagents serve`, each step asserted on the page and saved as a
//! screenshot under `<target>/tmp/console-screenshots/scale/`:
//! - the whole tree loads, yet the DOM holds only the rows in view;
//! - the keyboard walks it: Down, End (to the last session), Left to the
//!   parent and Left again to collapse it, Right to expand it;
//! - a child started live appears, and the rows already shown are patched
//!   in place rather than rebuilt;
//! - a narrow window shows it without a horizontal scroll bar.

mod common;

use std::path::PathBuf;

use common::serve::Serve;
use serde_json::json;
use subagent_browser::Browser;
use subagent_core::{SessionId, SessionMode};
use subagent_projections::testing::HistoryBuilder;

/// Any failure of a step.
type Step = Result<(), Box<dyn std::error::Error>>;

/// Continuable children of the root, each with `GRANDCHILDREN` one-shot
/// children: 1 + 99 + 9,900 = 10,000 sessions.
const CHILDREN: u64 = 99;
const GRANDCHILDREN: u64 = 100;
const SESSIONS: u64 = 1 + CHILDREN + CHILDREN * GRANDCHILDREN;

/// How many tree rows are in the DOM.
const ROWS: &str = "document.querySelectorAll('#tree .node').length";

/// WebDriver's key codes.
const DOWN: &str = "\u{E015}";
const LEFT: &str = "\u{E012}";
const RIGHT: &str = "\u{E014}";
const END: &str = "\u{E010}";

/// The row of the session labelled `label`.
fn row(label: &str) -> String {
    format!("#tree .node[data-label=\"{label}\"]")
}

/// Whether the row labelled `label` is in the DOM, as a page expression.
fn shown(label: &str) -> String {
    format!("document.querySelector('{}') !== null", row(label))
}

/// The label of the selected row, as a page expression.
const SELECTED: &str = "document.querySelector('#tree .node.selected')?.dataset.label";

/// A log in `dir` with the 10,000-session tree; returns its root.
fn big_tree(dir: &std::path::Path) -> SessionId {
    let mut history = HistoryBuilder::new();
    let root = history.root("big");
    for child in 0..CHILDREN {
        let parent = history.child(
            root,
            1,
            &format!("c{child}"),
            SessionMode::Continuable,
            false,
        );
        for grandchild in 0..GRANDCHILDREN {
            history.child(
                parent,
                2,
                &format!("g{child}-{grandchild}"),
                SessionMode::OneShot,
                false,
            );
        }
    }
    common::write_history(dir, &history);
    root
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_thousand_session_tree_stays_usable() -> Step {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    // The log is written with blocking appends, off the async workers.
    let root = tokio::task::block_in_place(|| big_tree(&data));
    let serve = Serve::start(&data);
    let token = std::fs::read_to_string(data.join("gateway.token"))?
        .trim()
        .to_owned();
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("console-screenshots")
        .join("scale");
    let browser = Browser::start(&shots, 1280, 900).await?;

    // The whole tree loads; only the rows in view are in the DOM.
    browser.goto(&format!("{}/", serve.base)).await?;
    browser.fill("#token", &token).await?;
    browser.click("#connect").await?;
    browser
        .until_within(
            &format!("document.body.dataset.sessions === '{SESSIONS}'"),
            "the 10,000-session tree",
            std::time::Duration::from_secs(60),
        )
        .await?;
    let rows = browser.eval(ROWS).await?.as_u64().unwrap_or(0);
    assert!(
        (10..=120).contains(&rows),
        "{rows} rows in the DOM for {SESSIONS} sessions: the tree is not virtualized"
    );
    browser.until(&shown("c0"), "the first child's row").await?;
    assert_eq!(browser.eval(&shown("g98-99")).await?, json!(false));
    browser.screenshot("01-ten-thousand-sessions").await?;

    // The keyboard walks it.
    browser.click(&row("big")).await?;
    browser.press(&row("big"), DOWN).await?;
    browser
        .until(
            &format!("{SELECTED} === 'c0'"),
            "Down selects the first child",
        )
        .await?;
    browser.press(&row("c0"), END).await?;
    browser
        .until(
            &format!("{SELECTED} === 'g98-99'"),
            "End selects the last session",
        )
        .await?;
    let in_view = browser
        .eval(&format!(
            "(() => {{ const r = document.querySelector('{}').getBoundingClientRect(); \
             const t = document.querySelector('#tree').getBoundingClientRect(); \
             return r.top >= t.top && r.bottom <= t.bottom; }})()",
            row("g98-99")
        ))
        .await?;
    assert_eq!(
        in_view,
        json!(true),
        "End scrolls the last session into view"
    );
    let rows = browser.eval(ROWS).await?.as_u64().unwrap_or(0);
    assert!(rows <= 120, "{rows} rows in the DOM at the end of the tree");
    browser.screenshot("02-end-of-the-tree").await?;
    browser.press(&row("g98-99"), LEFT).await?;
    browser
        .until(&format!("{SELECTED} === 'c98'"), "Left selects the parent")
        .await?;
    browser.press(&row("c98"), LEFT).await?;
    browser
        .until(
            &format!(
                "document.querySelector('{}').getAttribute('aria-expanded') === 'false' && !({})",
                row("c98"),
                shown("g98-99")
            ),
            "Left collapses the parent",
        )
        .await?;
    browser.screenshot("03-collapsed").await?;
    browser.press(&row("c98"), RIGHT).await?;
    browser
        .until(
            &format!(
                "document.querySelector('{}').getAttribute('aria-expanded') === 'true'",
                row("c98")
            ),
            "Right expands it again",
        )
        .await?;

    // A live child appears; the rows on screen are patched, not rebuilt.
    browser
        .run(&format!(
            "document.querySelector('{}').dataset.marker = 'kept'",
            row("c98")
        ))
        .await?;
    let held = reqwest::Client::new()
        .post(format!("{}/v1/roots/{root}/reopen", serve.base))
        .bearer_auth(&token)
        .send()
        .await?;
    assert!(held.status().is_success(), "reopen: {}", held.status());
    let started = reqwest::Client::new()
        .post(format!("{}/v1/roots/{root}/children", serve.base))
        .bearer_auth(&token)
        .json(&json!({
            "provider": "spawn", "label": "late", "delivery": "parent",
            "request": {"prompt": [{"type": "text", "text": "hello"}]},
        }))
        .send()
        .await?;
    assert_eq!(started.status(), 201);
    browser
        .until(
            &format!("document.body.dataset.sessions === '{}'", SESSIONS + 1),
            "the live child in the tree",
        )
        .await?;
    assert_eq!(
        browser
            .eval(&format!(
                "document.querySelector('{}').dataset.marker",
                row("c98")
            ))
            .await?,
        json!("kept"),
        "the row on screen was rebuilt rather than patched"
    );
    browser.press(&row("c98"), END).await?;
    browser
        .until(
            &format!("{SELECTED} === 'late' && {}", shown("late")),
            "End reaches the live child",
        )
        .await?;
    browser.screenshot("04-live-child").await?;

    // A narrow window: no horizontal scroll bar, the tree still shown.
    browser.resize(420, 860).await?;
    browser
        .until(
            "document.documentElement.scrollWidth <= document.documentElement.clientWidth",
            "no horizontal overflow at 420 px",
        )
        .await?;
    assert_eq!(browser.eval(&shown("late")).await?, json!(true));
    browser.screenshot("05-narrow-window").await?;
    Ok(())
}
