//! The README's Rust snippets are excerpts of code that compiles and runs.
//!
//! Every ```` ```rust ```` block in `README.md` must follow a marker line
//! `<!-- excerpt: PATH#ANCHOR -->`, and its text must equal the lines
//! between `// ANCHOR: ANCHOR` and `// ANCHOR_END: ANCHOR` in `PATH`
//! (relative to the repository root), less their common indentation and
//! any nested anchor lines. The examples are run by `tests/examples.rs`;
//! other excerpted files are tests. `SUBAGENTS_BLESS=1` rewrites the
//! README's blocks from their sources.

use std::path::{Path, PathBuf};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the examples crate sits in the repository")
        .to_path_buf()
}

/// The lines of anchor `anchor` in `source`, dedented; `None` when the
/// anchor is absent or unterminated.
fn excerpt(source: &str, anchor: &str) -> Option<String> {
    let begin = format!("// ANCHOR: {anchor}");
    let end = format!("// ANCHOR_END: {anchor}");
    let mut lines = source.lines().skip_while(|line| line.trim() != begin);
    lines.next()?;
    let mut body = Vec::new();
    for line in lines {
        if line.trim() == end {
            let indent = body
                .iter()
                .filter(|line: &&&str| !line.trim().is_empty())
                .map(|line| line.len() - line.trim_start().len())
                .min()
                .unwrap_or(0);
            let dedented: Vec<&str> = body
                .iter()
                .map(|line| {
                    if line.len() >= indent {
                        &line[indent..]
                    } else {
                        line.trim_start()
                    }
                })
                .collect();
            return Some(dedented.join("\n"));
        }
        if !line.trim().starts_with("// ANCHOR") {
            body.push(line);
        }
    }
    None
}

/// One Rust block of the README: its marker's target, and where its text
/// sits (line indices of the first and one past the last content line).
struct Block {
    marker: Option<(String, String)>,
    opening_line: usize,
    content: std::ops::Range<usize>,
}

fn blocks(readme: &[&str]) -> Vec<Block> {
    let mut found = Vec::new();
    let mut index = 0;
    while index < readme.len() {
        if readme[index].trim() == "```rust" {
            let marker = readme[..index]
                .iter()
                .rev()
                .find(|line| !line.trim().is_empty())
                .and_then(|line| line.trim().strip_prefix("<!-- excerpt: "))
                .and_then(|rest| rest.strip_suffix(" -->"))
                .and_then(|target| target.split_once('#'))
                .map(|(path, anchor)| (path.to_owned(), anchor.to_owned()));
            let start = index + 1;
            let mut end = start;
            while end < readme.len() && readme[end].trim() != "```" {
                end += 1;
            }
            found.push(Block {
                marker,
                opening_line: index + 1,
                content: start..end,
            });
            index = end;
        }
        index += 1;
    }
    found
}

#[test]
fn every_rust_snippet_of_the_readme_is_an_excerpt_of_compiled_code() {
    let readme_path = repository().join("README.md");
    let text = std::fs::read_to_string(&readme_path).expect("README.md");
    let lines: Vec<&str> = text.lines().collect();
    let found = blocks(&lines);
    assert!(
        found.len() >= 5,
        "the README's Rust snippets were not found"
    );
    let mut problems = Vec::new();
    let mut blessed: Vec<String> = lines.iter().map(|line| (*line).to_owned()).collect();
    for block in found.iter().rev() {
        let Some((path, anchor)) = &block.marker else {
            problems.push(format!(
                "README.md:{}: a Rust block without an excerpt marker",
                block.opening_line
            ));
            continue;
        };
        let source = match std::fs::read_to_string(repository().join(path)) {
            Ok(source) => source,
            Err(error) => {
                problems.push(format!("README.md:{}: {path}: {error}", block.opening_line));
                continue;
            }
        };
        let Some(wanted) = excerpt(&source, anchor) else {
            problems.push(format!(
                "README.md:{}: {path} has no anchor {anchor}",
                block.opening_line
            ));
            continue;
        };
        let shown = lines[block.content.clone()].join("\n");
        if shown != wanted {
            problems.push(format!(
                "README.md:{}: the block differs from {path}#{anchor}; it should read:\n{wanted}",
                block.opening_line
            ));
            blessed.splice(block.content.clone(), wanted.lines().map(str::to_owned));
        }
    }
    if std::env::var_os("SUBAGENTS_BLESS").is_some() {
        let mut out = blessed.join("\n");
        out.push('\n');
        std::fs::write(&readme_path, out).expect("writing README.md");
        return;
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn an_excerpt_is_the_dedented_anchor_without_nested_markers() {
    let source = "fn main() {\n    // ANCHOR: a\n    let x = 1;\n    // ANCHOR: b\n    if x > 0 {\n        println!();\n    }\n    // ANCHOR_END: b\n    // ANCHOR_END: a\n}\n";
    assert_eq!(
        excerpt(source, "a").as_deref(),
        Some("let x = 1;\nif x > 0 {\n    println!();\n}")
    );
    assert_eq!(
        excerpt(source, "b").as_deref(),
        Some("if x > 0 {\n    println!();\n}")
    );
    assert_eq!(excerpt(source, "c"), None);
    assert_eq!(
        excerpt("// ANCHOR: open\nlet y = 2;\n", "open"),
        None,
        "unterminated"
    );
}

#[test]
fn a_block_without_a_marker_is_found_and_named() {
    let readme = [
        "text",
        "```rust",
        "let x = 1;",
        "```",
        "<!-- excerpt: a.rs#b -->",
        "",
        "```rust",
        "y",
        "```",
    ];
    let found = blocks(&readme);
    assert_eq!(found.len(), 2);
    assert!(found[0].marker.is_none());
    assert_eq!(found[0].content, 2..3);
    assert_eq!(found[1].marker, Some(("a.rs".to_owned(), "b".to_owned())));
    assert_eq!(found[1].content, 7..8);
}
