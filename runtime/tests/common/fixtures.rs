//! What several test files share: the standard start spec and its prompt,
//! text content, and the delegation setup of the activation tests (the
//! scripts by label and the `spawn`, `fork` and two `process` providers).

use std::sync::Arc;

use subagent_core::{ContentBlock, Delivery, StartOptions, SubagentActivationSpec};
use subagent_runtime::providers::{ForkProvider, ProcessProvider};
use subagent_runtime::scripted::Step;
use subagent_runtime::{Script, ScriptedHost};

use super::harness::{Harness, HarnessBuilder};

/// The prompt of every [`spec`]: the `process` provider of [`delegation`]
/// answers it upper-cased.
pub(crate) const PROMPT: &str = "hello world";

/// A start of a child labelled `label` through `provider`, prompted with
/// [`PROMPT`], its result delivered per `delivery`.
pub(crate) fn spec(provider: &str, label: &str, delivery: Delivery) -> SubagentActivationSpec {
    SubagentActivationSpec::with_text_prompt(provider, label, PROMPT, delivery)
}

/// [`spec`] with caller delivery and its start options changed by `change`.
pub(crate) fn spec_with(
    provider: &str,
    label: &str,
    change: impl FnOnce(&mut StartOptions),
) -> SubagentActivationSpec {
    let mut spec = spec(provider, label, Delivery::Caller);
    change(&mut spec.request.options);
    spec
}

/// One text block.
pub(crate) fn text(content: &str) -> Vec<ContentBlock> {
    vec![ContentBlock::text(content)]
}

/// The scripts of the activation tests, by label: `research` reads a file
/// and answers "the answer is 42"; `slow` says "started" then sleeps a
/// minute; `failing` fails ("model unavailable"); `refusing` refuses;
/// `ceiling` hits the output token ceiling; any other label answers
/// "default answer".
pub(crate) fn delegation_host() -> ScriptedHost {
    ScriptedHost::new(Script::reply("default answer"))
        .with(
            "research",
            Script {
                turns: vec![vec![
                    Step::Say("looking".into()),
                    Step::Tool {
                        name: "read_file".into(),
                        input: serde_json::json!({"path": "a"}),
                        output: "x".into(),
                    },
                    Step::Say("the answer is 42".into()),
                ]],
            },
        )
        .with(
            "slow",
            Script {
                turns: vec![vec![
                    Step::Say("started".into()),
                    Step::SleepMs(60_000),
                    Step::Say("never".into()),
                ]],
            },
        )
        .with(
            "failing",
            Script {
                turns: vec![vec![Step::Fail("model unavailable".into())]],
            },
        )
        .with(
            "refusing",
            Script {
                turns: vec![vec![Step::Refuse("I will not".into())]],
            },
        )
        .with(
            "ceiling",
            Script {
                turns: vec![vec![Step::MaxTokens("partial".into())]],
            },
        )
}

/// A harness over [`delegation_host`] with, in this order, the `spawn`,
/// `fork`, `process` (`tr a-z A-Z`: the prompt upper-cased) and `exit3`
/// (prints "partial", exits 3) providers registered.
pub(crate) fn delegation() -> HarnessBuilder {
    Harness::builder(delegation_host())
        .provider(Arc::new(ForkProvider))
        .provider(Arc::new(ProcessProvider::new(
            "process",
            "sh",
            &["-c", "tr a-z A-Z"],
        )))
        .provider(Arc::new(ProcessProvider::new(
            "exit3",
            "sh",
            &["-c", "echo partial; exit 3"],
        )))
}
