//! Start options end to end: the tool filter (hidden and refused tools),
//! agent options and model selection, the depth policy, and the cleaning of
//! diagnostics. Each rejection is checked to leave the log untouched.

mod common;

use common::{records, spec_with, start, Harness, Probe};

use std::sync::Arc;

use serde_json::json;
use subagent_core::{
    content::plain_text, AgentOptions, AgentRoute, DepthPolicy, ErrorCode, Event,
    ModelSelectionSettings, SessionId, SubagentCapabilities, SubagentError, SubagentResult,
    SubagentStopReason, ToolRestriction, MAX_SAFE_INTEGER,
};
use subagent_runtime::provider::ResolvedStartRequest;
use subagent_runtime::scripted::Step;
use subagent_runtime::BoxFuture;
use subagent_runtime::{AgentSpec, Script, ScriptedHost, SubagentProvider, SubagentRun};
use subagent_store::EventLog;

/// Every turn reads a file, tries the shell, then answers.
fn tool_script() -> Script {
    Script {
        turns: vec![vec![
            Step::Tool {
                name: "read_file".into(),
                input: json!({"path": "notes.txt"}),
                output: "the notes".into(),
            },
            Step::Tool {
                name: "shell".into(),
                input: json!({"cmd": "ls"}),
                output: "a b c".into(),
            },
            Step::Say("done".into()),
        ]],
    }
}

/// `(tool, refused, output)` of every tool call the session recorded.
fn tool_results(h: &Harness, session: SessionId) -> Vec<(String, bool, String)> {
    let events = h.events(session);
    let mut names = std::collections::HashMap::new();
    let mut results = Vec::new();
    for event in events {
        match event {
            Event::ToolCalled { call_id, name, .. } => {
                names.insert(call_id, name);
            }
            Event::ToolReturned {
                call_id,
                output,
                refused,
                is_error,
                ..
            } => {
                assert_eq!(is_error, refused, "only the refusal fails here");
                results.push((names[&call_id].clone(), refused, plain_text(&output)));
            }
            _ => {}
        }
    }
    results
}

/// The names of the tools `spec`'s agent was built with, in order.
fn tool_names(spec: &AgentSpec) -> Vec<String> {
    spec.tools.iter().map(|tool| tool.name.clone()).collect()
}

#[tokio::test]
async fn a_tool_filter_hides_restricted_tools_and_refuses_their_calls_down_the_lineage() {
    let host = ScriptedHost::new(tool_script()).with_tool("write_file", "written");
    let probe = Probe::new(host);
    let h = Harness::open(probe.clone()).await;
    assert_eq!(
        h.runtime.tools().unwrap().len(),
        3,
        "read_file, shell (scripted) and write_file"
    );

    let child = h
        .start(spec_with("spawn", "child", |options| {
            options.tool_filter = Some(ToolRestriction::Deny(vec!["shell".into()]));
        }))
        .await
        .unwrap();
    let result = child.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Completed);
    // The host's tools the filter leaves, then the runtime's delegation
    // tools, which no filter here removes.
    assert_eq!(
        tool_names(&probe.spec_of(child.child_id())),
        [
            "read_file",
            "write_file",
            "subagent",
            "list_agents",
            "send_message",
            "subagent_control"
        ]
    );
    assert_eq!(
        tool_results(&h, child.child_id()),
        [
            ("read_file".to_owned(), false, "the notes".to_owned()),
            (
                "shell".to_owned(),
                true,
                "tool shell is not available to this agent".to_owned()
            ),
        ]
    );

    // The grandchild allows `shell` for itself, but its parent cannot see it.
    let grandchild = start(
        &h.runtime,
        &child.agent(),
        spec_with("spawn", "grandchild", |options| {
            options.tool_filter = Some(ToolRestriction::Allow(vec![
                "shell".into(),
                "read_file".into(),
            ]));
        }),
    )
    .await
    .unwrap();
    grandchild.result().await.unwrap();
    assert_eq!(
        tool_names(&probe.spec_of(grandchild.child_id())),
        ["read_file"]
    );
    let refused: Vec<bool> = tool_results(&h, grandchild.child_id())
        .into_iter()
        .map(|(_, refused, _)| refused)
        .collect();
    assert_eq!(refused, [false, true]);

    // An unfiltered sibling sees and runs every tool.
    let sibling = h
        .start(spec_with("spawn", "sibling", |_| {}))
        .await
        .unwrap();
    sibling.result().await.unwrap();
    assert_eq!(
        tool_names(&probe.spec_of(sibling.child_id())).len(),
        3 + subagent_runtime::delegation::NAMES.len()
    );
    assert!(tool_results(&h, sibling.child_id())
        .iter()
        .all(|(_, refused, _)| !refused));

    let head = h.log.head();
    let err = h
        .start(spec_with("spawn", "typo", |options| {
            options.tool_filter = Some(ToolRestriction::Allow(vec!["read_flie".into()]));
        }))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::UnknownTool);
    assert_eq!(
        err.to_string(),
        "tool filter names unknown tool \"read_flie\""
    );
    assert_eq!(h.log.head(), head, "the rejection recorded nothing");
    for activation in [grandchild, child, sibling] {
        activation.dispose().await.unwrap();
    }
}

#[tokio::test]
async fn a_child_runs_with_options_merged_over_its_parents_within_the_model_selection() {
    let probe = Probe::new(ScriptedHost::new(Script::reply("ok")));
    let root_options = AgentOptions {
        provider: Some("openai".into()),
        model: Some("gpt-5".into()),
        reasoning_effort: Some("medium".into()),
        max_output_tokens: Some(4096),
    };
    let h = Harness::builder(probe.clone())
        .root_options(root_options.clone())
        .open()
        .await;
    let pick = |model: &str| {
        let model = model.to_owned();
        spec_with("spawn", "picked", move |options| {
            options.agent_options = Some(AgentOptions {
                provider: Some("anthropic".into()),
                model: Some(model),
                ..AgentOptions::default()
            });
        })
    };
    // Selection starts disabled: a route override is refused.
    assert_eq!(
        h.runtime.model_selection().unwrap(),
        ModelSelectionSettings::default()
    );
    let head = h.log.head();
    let refused = h.start(pick("opus")).await.err().unwrap();
    assert_eq!(refused.code(), ErrorCode::RouteNotAllowed);
    h.runtime
        .set_model_selection(ModelSelectionSettings {
            enabled: true,
            allowed_routes: vec![AgentRoute {
                provider: "anthropic".into(),
                model: "opus".into(),
            }],
        })
        .unwrap();
    let outside = h.start(pick("haiku")).await.err().unwrap();
    assert_eq!(outside.code(), ErrorCode::RouteNotAllowed);
    assert_eq!(h.log.head(), head, "rejections recorded nothing");

    let picked = h.start(pick("opus")).await.unwrap();
    picked.result().await.unwrap();
    let options_of = |session| {
        probe
            .spec_of(session)
            .descriptor
            .and_then(|descriptor| descriptor.agent_options)
    };
    assert_eq!(
        options_of(picked.child_id()),
        Some(AgentOptions {
            provider: Some("anthropic".into()),
            model: Some("opus".into()),
            ..root_options.clone()
        })
    );
    // Without options the child runs with the parent's, unchecked.
    let inherited = h
        .start(spec_with("spawn", "inherited", |_| {}))
        .await
        .unwrap();
    inherited.result().await.unwrap();
    assert_eq!(options_of(inherited.child_id()), Some(root_options));
    picked.dispose().await.unwrap();
    inherited.dispose().await.unwrap();
}

#[tokio::test]
async fn resolve_max_depth_reads_the_users_setting() {
    let (runtime, _) = Harness::builder(ScriptedHost::new(Script::reply("ok")))
        .open_runtime()
        .await;
    assert_eq!(runtime.resolve_max_depth(None), Ok(None));
    assert_eq!(
        runtime.resolve_max_depth(Some(DepthPolicy::Limit(4))),
        Ok(Some(4))
    );
    runtime.set_max_depth_setting(Some(2)).unwrap();
    assert_eq!(runtime.resolve_max_depth(None), Ok(Some(2)));
    assert_eq!(
        runtime.resolve_max_depth(Some(DepthPolicy::Limit(4))),
        Ok(Some(2))
    );
    assert_eq!(
        runtime.resolve_max_depth(Some(DepthPolicy::ProviderManaged)),
        Ok(None)
    );
    let err = runtime
        .set_max_depth_setting(Some(MAX_SAFE_INTEGER + 1))
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidDepth);
    assert_eq!(
        runtime.resolve_max_depth(None),
        Ok(Some(2)),
        "a rejected setting changes nothing"
    );
}

/// An external provider whose errors quote credentials and the environment.
struct LeakyProvider {
    fail_start: bool,
    leak: String,
}

struct LeakyRun(String);

impl SubagentRun for LeakyRun {
    fn result(&mut self) -> BoxFuture<'_, Result<SubagentResult, SubagentError>> {
        let leak = self.0.clone();
        Box::pin(async move {
            Ok(SubagentResult::failed(
                SubagentStopReason::Error,
                Vec::new(),
                leak,
            ))
        })
    }
    fn dispose(&mut self) -> BoxFuture<'_, Result<(), subagent_core::Diagnostic>> {
        let leak = self.0.clone();
        Box::pin(async move { Err(subagent_core::Diagnostic::new(leak)) })
    }
}

impl SubagentProvider for LeakyProvider {
    fn name(&self) -> &str {
        if self.fail_start {
            "leaky-start"
        } else {
            "leaky"
        }
    }
    fn capabilities(&self) -> SubagentCapabilities {
        SubagentCapabilities::default()
    }
    fn inherits_parent_context(&self) -> bool {
        false
    }
    fn start(
        &self,
        _request: ResolvedStartRequest,
    ) -> BoxFuture<'static, Result<Box<dyn SubagentRun>, SubagentError>> {
        let (fail, leak) = (self.fail_start, self.leak.clone());
        Box::pin(async move {
            if fail {
                Err(SubagentError::internal(leak))
            } else {
                Ok(Box::new(LeakyRun(leak)) as Box<dyn SubagentRun>)
            }
        })
    }
}

/// A value of this process's environment long enough to be redacted.
fn environment_value() -> String {
    std::env::vars()
        .map(|(_, value)| value)
        .find(|value| value.len() >= 12 && !value.contains(char::is_whitespace))
        .expect("the test environment has a long value (PATH)")
}

/// Panics unless `text` quotes none of `secrets` and shows a redaction.
fn assert_clean(text: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(!text.contains(secret), "{secret:?} leaked into {text:?}");
    }
    assert!(text.contains("[redacted]"), "{text}");
}

/// [`assert_clean`], and the diagnostic is within its size bound.
fn assert_clean_diagnostic(diagnostic: &subagent_core::Diagnostic, secrets: &[&str]) {
    assert_clean(diagnostic.as_str(), secrets);
    assert!(diagnostic.as_str().len() <= subagent_core::result::MAX_DIAGNOSTIC_BYTES);
}

#[tokio::test]
async fn provider_and_agent_errors_are_cleaned_before_they_are_recorded_or_returned() {
    let env = environment_value();
    let leak = format!(
        "auth failed: password=hunter2 Authorization: Bearer abcdef123456 env {env} {}",
        "x".repeat(5000)
    );
    let secrets = ["hunter2", "abcdef123456", env.as_str()];
    let script = Script {
        turns: vec![vec![
            Step::Tool {
                name: "read_file".into(),
                input: json!({"path": "/srv/private/plans.txt"}),
                output: "launch at dawn".into(),
            },
            Step::Fail("cannot parse /srv/private/plans.txt: launch at dawn".into()),
        ]],
    };
    let mut builder = Harness::builder(ScriptedHost::new(script));
    for fail_start in [false, true] {
        builder = builder.provider(Arc::new(LeakyProvider {
            fail_start,
            leak: leak.clone(),
        }));
    }
    let h = builder.open().await;

    // The run's result and its cleanup failure.
    let run = h.start(spec_with("leaky", "run", |_| {})).await.unwrap();
    let result = run.result().await.unwrap();
    assert_clean_diagnostic(result.diagnostic.as_ref().unwrap(), &secrets);
    let run_id = run.child_id();
    let _ = run.dispose().await;
    let cleanup = h
        .events(run_id)
        .into_iter()
        .find_map(|event| match event {
            Event::RunDisposed { cleanup_error, .. } => cleanup_error,
            _ => None,
        })
        .expect("the cleanup failure is recorded");
    assert_clean_diagnostic(&cleanup, &secrets);

    // A failed start: the recorded diagnostic and the returned error.
    let err = h
        .start(spec_with("leaky-start", "start", |_| {}))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::Internal);
    assert_clean(&err.to_string(), &secrets);
    let recorded = records(&h.log)
        .into_iter()
        .find_map(|record| match record.event {
            Event::RunStartFailed { diagnostic, .. } => Some(diagnostic),
            _ => None,
        })
        .expect("the failed start is recorded");
    assert_clean_diagnostic(&recorded, &secrets);

    // A local agent's failure quoting its tool input and the file it read.
    let local = h.start(spec_with("spawn", "local", |_| {})).await.unwrap();
    let result = local.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Error);
    assert_clean_diagnostic(
        result.diagnostic.as_ref().unwrap(),
        &["/srv/private/plans.txt", "launch at dawn"],
    );
    local.dispose().await.unwrap();
}
