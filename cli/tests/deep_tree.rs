//! A 20,000-deep chain of sessions through the real `tree` and `replay`:
//! one line a session, the indentation bounded (deep lines show their
//! depth), and no stack overflow. Checks the output's structure, not time.

mod common;

use common::{chain_log, subagents, text};

/// Guide columns the tree draws at most (`render::DRAWN_LEVELS`).
const DRAWN_LEVELS: usize = 32;

#[test]
fn a_20000_deep_chain_draws_one_line_a_session_with_bounded_indentation() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("chain");
    let root = chain_log(&data, 20_000);
    let data = data.to_str().unwrap();

    let output = subagents(&["tree", data]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 20_001);
    assert_eq!(lines[0], format!("root  [inactive]  {root}"));
    let gap = " ".repeat(4 * DRAWN_LEVELS);
    assert!(lines[1].starts_with("└── c1  ["), "{}", lines[1]);
    assert!(
        lines[33].starts_with(&format!("{gap}└── c33  [")),
        "{}",
        lines[33]
    );
    assert!(
        lines[34].starts_with(&format!("{gap}[depth 34] └── c34  [")),
        "{}",
        lines[34]
    );
    let last = lines.last().unwrap();
    assert!(
        last.starts_with(&format!(
            "{gap}[depth 20000] └── c20000  [continuable · spawn · inactive]  "
        )),
        "{last}"
    );
    let widest = lines.iter().map(|l| l.chars().count()).max().unwrap();
    assert!(widest < 250, "indentation is bounded: {widest} characters");

    // The summary draws the same tree.
    let (summary, _) = text(&subagents(&["replay", data]));
    assert!(summary.contains(&format!("{gap}[depth 20000] └── c20000  [")));
    assert!(summary.starts_with("state at position 40001\nsessions: 20001 (1 roots)\n"));
}
