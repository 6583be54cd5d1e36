//! Spans, exported through `tracing-opentelemetry` to the SDK's in-memory
//! exporter: one trace per root, shaped like the delegation tree, with the
//! GenAI names and attributes; and the same tree rebuilt from the log alone
//! (`subagent_replay::spans`).
//!
//! One test in its own binary: the subscriber is process-global (the
//! runtime's tasks run on every worker thread).

mod common;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::SpanData;
use serde_json::json;
use subagent_core::telemetry::{attr, span};
use subagent_core::{Delivery, Event, SessionId, SubagentActivationSpec, SubagentStopReason};
use subagent_replay::{spans, SpanKind};
use subagent_runtime::scripted::Step;
use subagent_runtime::{
    AgentHost, AgentSpec, BoxFuture, LiveAgent, Script, ScriptedHost, SubagentRuntime, ToolCall,
    ToolDefinition, ToolOutput,
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use common::{records, string_attr, Harness};

/// A scripted host whose `delegate` tool starts a child of the calling
/// session (labelled by the call's `label` input): delegation from inside
/// a turn, as a real agent does it.
struct DelegatingHost {
    scripted: ScriptedHost,
    runtime: OnceLock<SubagentRuntime>,
    /// The live agents the test has handed over, by session: the
    /// `delegate` call waits for its caller's, which the test inserts only
    /// once `start_activation` returned (the turn may already be running).
    agents: tokio::sync::watch::Sender<HashMap<SessionId, LiveAgent>>,
}

impl AgentHost for DelegatingHost {
    fn create(
        &self,
        spec: AgentSpec,
    ) -> BoxFuture<'static, Result<Box<dyn subagent_runtime::Agent>, subagent_core::SubagentError>>
    {
        self.scripted.create(spec)
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        let mut tools = self.scripted.tools();
        tools.push(ToolDefinition::new("delegate", "start a child"));
        tools
    }

    fn execute_tool(
        &self,
        session: SessionId,
        call: ToolCall,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, ToolOutput> {
        if call.name != "delegate" {
            return self.scripted.execute_tool(session, call, cancel);
        }
        let runtime = self.runtime.get().cloned();
        let mut agents = self.agents.subscribe();
        let label = call.input["label"].as_str().unwrap_or("unnamed").to_owned();
        Box::pin(async move {
            let Some(runtime) = runtime else {
                return ToolOutput::error("no runtime yet");
            };
            let agent = match agents
                .wait_for(|agents| agents.contains_key(&session))
                .await
            {
                Ok(agents) => agents[&session].clone(),
                Err(_) => return ToolOutput::error("no live agent for the caller"),
            };
            let spec =
                SubagentActivationSpec::with_text_prompt("spawn", &label, "dig", Delivery::Parent);
            match runtime.start_activation(&agent, spec, cancel).await {
                Ok(child) => ToolOutput {
                    output: vec![subagent_core::ContentBlock::text(
                        child.child_id().to_string(),
                    )],
                    is_error: false,
                    refused: false,
                },
                Err(err) => ToolOutput::error(err.to_string()),
            }
        })
    }
}

/// The names of the spans [`TracedInstant`]'s steps open.
const PROVIDER_STEPS: [&str; 3] = ["provider.start", "provider.result", "provider.dispose"];

/// An external provider whose runs complete at once, each step (start,
/// result, dispose) opening a span of its own, as a host's instrumented
/// client would: they must nest under the run's span.
struct TracedInstant;

struct TracedInstantRun;

impl subagent_runtime::SubagentRun for TracedInstantRun {
    fn result(
        &mut self,
    ) -> BoxFuture<'_, Result<subagent_core::SubagentResult, subagent_core::SubagentError>> {
        Box::pin(async {
            let _step = tracing::info_span!("provider.result").entered();
            Ok(subagent_core::SubagentResult::completed(vec![
                subagent_core::ContentBlock::text("done"),
            ]))
        })
    }

    fn dispose(&mut self) -> BoxFuture<'_, Result<(), subagent_core::Diagnostic>> {
        Box::pin(async {
            let _step = tracing::info_span!("provider.dispose").entered();
            Ok(())
        })
    }
}

impl subagent_runtime::SubagentProvider for TracedInstant {
    fn name(&self) -> &str {
        "traced-instant"
    }
    fn capabilities(&self) -> subagent_core::SubagentCapabilities {
        subagent_core::SubagentCapabilities::default()
    }
    fn inherits_parent_context(&self) -> bool {
        false
    }
    fn start(
        &self,
        _request: subagent_runtime::provider::ResolvedStartRequest,
    ) -> BoxFuture<
        'static,
        Result<Box<dyn subagent_runtime::SubagentRun>, subagent_core::SubagentError>,
    > {
        Box::pin(async {
            let _step = tracing::info_span!("provider.start").entered();
            Ok(Box::new(TracedInstantRun) as Box<dyn subagent_runtime::SubagentRun>)
        })
    }
}

fn say(text: &str) -> Script {
    Script {
        turns: vec![vec![Step::Say(text.into())]],
    }
}

fn agent_id(span: &SpanData) -> Option<String> {
    string_attr(span, attr::AGENT_ID)
}

/// The nearest ancestor of `span` (itself excluded) that is an activation
/// or a root's creation: which session the tree nests it under.
fn owning_session<'a>(
    span: &SpanData,
    by_id: &'a HashMap<SpanId, &'a SpanData>,
) -> Option<&'a SpanData> {
    let mut parent = span.parent_span_id;
    for _ in 0..by_id.len() {
        let up = by_id.get(&parent)?;
        if up.name.starts_with(span::ACTIVATION) || up.name.starts_with(span::CREATE_AGENT) {
            return Some(up);
        }
        parent = up.parent_span_id;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_exports_one_trace_per_root_shaped_like_its_tree() {
    let (exporter, provider) = common::export_in_memory();

    // "lead" delegates to "digger" from inside its turn; the host starts
    // "late" below lead itself; "broken" fails; a second root has "solo".
    let scripted = ScriptedHost::new(say("done"))
        .with(
            "lead",
            Script {
                turns: vec![
                    vec![
                        Step::Say("delegating".into()),
                        Step::Tool {
                            name: "delegate".into(),
                            input: json!({"label": "digger"}),
                            output: String::new(),
                        },
                        Step::Tool {
                            name: "read_file".into(),
                            input: json!({"path": "notes"}),
                            output: "the notes".into(),
                        },
                        Step::Say("delegated".into()),
                    ],
                    // Digger's settlement notice may land while lead's first
                    // turn runs, and then lead takes a second turn to read it:
                    // one that delegates nothing (a script's last turn repeats).
                    vec![Step::Say("noted".into())],
                ],
            },
        )
        .with(
            "broken",
            Script {
                turns: vec![vec![Step::Fail("the model is down".into())]],
            },
        );
    let host = Arc::new(DelegatingHost {
        scripted,
        runtime: OnceLock::new(),
        agents: tokio::sync::watch::Sender::new(HashMap::new()),
    });
    let h = Harness::open(Arc::clone(&host)).await;
    let _ = host.runtime.set(h.runtime.clone());
    let second_root = h.runtime.open_root("second").await.unwrap();

    let start = |parent: LiveAgent, label: &'static str| {
        let runtime = h.runtime.clone();
        async move {
            runtime
                .start_activation(
                    &parent,
                    SubagentActivationSpec::with_text_prompt(
                        "spawn",
                        label,
                        "go",
                        Delivery::Caller,
                    ),
                    CancellationToken::new(),
                )
                .await
                .unwrap()
        }
    };
    let lead = start(h.root.clone(), "lead").await;
    host.agents.send_modify(|agents| {
        agents.insert(lead.child_id(), lead.agent());
    });
    let late = start(lead.agent(), "late").await;
    let broken = start(h.root.clone(), "broken").await;
    let solo = start(second_root.clone(), "solo").await;
    for activation in [&lead, &late, &solo] {
        let result = activation.result().await.unwrap();
        assert_eq!(result.stop_reason, SubagentStopReason::Completed);
    }
    let failed = broken.result().await.unwrap();
    assert_eq!(failed.stop_reason, SubagentStopReason::Error);
    // The grandchild lead's tool started settles too.
    let digger_of = |state: &subagent_projections::Projections| {
        state
            .sessions
            .values()
            .find(|record| record.label == "digger")
            .map(|record| record.id)
    };
    common::until("lead's tool to start digger, and digger to settle", || {
        let state = h.fold();
        digger_of(&state).is_some_and(|digger| {
            state
                .activations
                .get(&digger)
                .is_some_and(|a| a.last_result.is_some())
        })
    })
    .await;
    let digger = digger_of(&h.fold()).unwrap();
    // An external run below the root, started and disposed by the host,
    // whose provider it registers while serving a request of its own: a
    // span in a trace of its own, outside every tree.
    h.runtime
        .register_provider(Arc::new(TracedInstant))
        .instrument(tracing::info_span!(parent: None, "host.request"))
        .await
        .unwrap();
    let run = h
        .runtime
        .start_activation(
            &h.root,
            SubagentActivationSpec::with_text_prompt(
                "traced-instant",
                "outside",
                "go",
                Delivery::Caller,
            ),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        run.result().await.unwrap().stop_reason,
        SubagentStopReason::Completed
    );
    run.dispose().await.unwrap();
    common::until("the run to be disposed", || {
        h.fold()
            .runs
            .get(&run.child_id())
            .is_some_and(|record| record.phase == subagent_projections::RunPhase::Disposed)
    })
    .await;
    // Disposing ends the activations, and with them their spans.
    h.runtime.close().await.unwrap();
    provider.force_flush().unwrap();
    let exported = exporter.get_finished_spans().unwrap();

    let by_id: HashMap<SpanId, &SpanData> = exported
        .iter()
        .map(|span| (span.span_context.span_id(), span))
        .collect();
    let of_session = |session: SessionId, name: &str| -> Vec<&SpanData> {
        exported
            .iter()
            .filter(|s| s.name.starts_with(name) && agent_id(s) == Some(session.to_string()))
            .collect()
    };
    let root_span = of_session(h.root.session(), span::CREATE_AGENT);
    let second_span = of_session(second_root.session(), span::CREATE_AGENT);
    assert_eq!(root_span.len(), 1, "one create_agent span per root");
    assert_eq!(second_span.len(), 1);
    let (trace_one, trace_two): (TraceId, TraceId) = (
        root_span[0].span_context.trace_id(),
        second_span[0].span_context.trace_id(),
    );
    assert_ne!(trace_one, trace_two, "each root has a trace of its own");
    assert_eq!(
        root_span[0].name,
        format!("{} {}", span::CREATE_AGENT, common::ROOT_LABEL)
    );

    // The project's layer (`subagent_runtime::otel`) adds no attribute of
    // its own: no code location, target or thread, no busy and idle times.
    for span_data in &exported {
        let added: Vec<&str> = span_data
            .attributes
            .iter()
            .map(|kv| kv.key.as_str())
            .filter(|key| subagent_runtime::otel::added_by_layer_defaults(key))
            .collect();
        assert!(added.is_empty(), "{} carries {added:?}", span_data.name);
    }

    // Every runtime span of a tree is in its root's trace.
    for span_data in &exported {
        if let Some(conversation) = string_attr(span_data, attr::CONVERSATION_ID) {
            let expected = if conversation == second_root.session().to_string() {
                trace_two
            } else {
                assert_eq!(conversation, h.root.session().to_string());
                trace_one
            };
            assert_eq!(
                span_data.span_context.trace_id(),
                expected,
                "{}",
                span_data.name
            );
        }
    }

    // Shaped like the tree: each child's activation nests under its
    // parent session's span.
    let tree = [
        (lead.child_id(), h.root.session(), "lead"),
        (late.child_id(), lead.child_id(), "late"),
        (digger, lead.child_id(), "digger"),
        (broken.child_id(), h.root.session(), "broken"),
        (solo.child_id(), second_root.session(), "solo"),
    ];
    for (child, parent, label) in tree {
        let activations = of_session(child, span::ACTIVATION);
        assert_eq!(activations.len(), 1, "{label}: one activation span");
        let activation = activations[0];
        assert_eq!(activation.name, format!("{} {label}", span::ACTIVATION));
        assert_eq!(
            string_attr(activation, attr::AGENT_NAME).as_deref(),
            Some(label)
        );
        assert_eq!(
            string_attr(activation, attr::PARENT_ID),
            Some(parent.to_string())
        );
        let owner =
            owning_session(activation, &by_id).unwrap_or_else(|| panic!("{label} is nested"));
        assert_eq!(
            agent_id(owner),
            Some(parent.to_string()),
            "{label} nests under its parent"
        );
        // Each turn is a child of its activation.
        let turns = of_session(child, span::INVOKE_AGENT);
        assert!(!turns.is_empty(), "{label} ran a turn");
        let mut numbers: Vec<String> = turns
            .iter()
            .filter_map(|turn| string_attr(turn, attr::TURN))
            .collect();
        numbers.sort();
        let expected: Vec<String> = (1..=turns.len()).map(|n| n.to_string()).collect();
        assert_eq!(numbers, expected, "{label}: each turn numbered once");
        for turn in turns {
            assert_eq!(turn.parent_span_id, activation.span_context.span_id());
            assert_eq!(turn.name, format!("{} {label}", span::INVOKE_AGENT));
            assert_eq!(
                string_attr(turn, attr::OPERATION_NAME).as_deref(),
                Some(span::INVOKE_AGENT)
            );
        }
    }

    // The grandchild lead's tool started is a child of lead's turn (the
    // tool call's span is kept as a link), and the host-started one of
    // lead's activation, which was idle by then or not: either way under lead.
    let lead_turn = *of_session(lead.child_id(), span::INVOKE_AGENT)
        .iter()
        .find(|turn| string_attr(turn, attr::TURN).as_deref() == Some("1"))
        .expect("lead's first turn");
    let digger_span = of_session(digger, span::ACTIVATION)[0];
    assert_eq!(digger_span.parent_span_id, lead_turn.span_context.span_id());
    let tools: Vec<&SpanData> = exported
        .iter()
        .filter(|s| s.name.starts_with(span::EXECUTE_TOOL))
        .collect();
    let delegate = tools
        .iter()
        .find(|s| string_attr(s, attr::TOOL_NAME).as_deref() == Some("delegate"))
        .expect("the delegate call has a span");
    assert_eq!(delegate.name, "execute_tool delegate");
    assert_eq!(delegate.parent_span_id, lead_turn.span_context.span_id());
    assert_eq!(
        string_attr(delegate, attr::OPERATION_NAME).as_deref(),
        Some(span::EXECUTE_TOOL)
    );
    assert!(string_attr(delegate, attr::TOOL_CALL_ID).is_some());
    assert!(
        digger_span
            .links
            .iter()
            .any(|link| link.span_context.span_id() == delegate.span_context.span_id()),
        "digger links the call that started it"
    );
    assert!(tools
        .iter()
        .any(|s| string_attr(s, attr::TOOL_NAME).as_deref() == Some("read_file")));

    // The run's span nests under the root's; the provider's own steps and
    // the run's commands (issued with the run's span, not entered around
    // them) are its children; its request names it.
    let run_spans = of_session(run.child_id(), span::RUN);
    assert_eq!(run_spans.len(), 1, "one run span");
    let run_span = run_spans[0];
    assert_eq!(run_span.name, format!("{} outside", span::RUN));
    assert_eq!(run_span.parent_span_id, root_span[0].span_context.span_id());
    assert_eq!(
        string_attr(run_span, attr::PROVIDER).as_deref(),
        Some("traced-instant")
    );
    for step in PROVIDER_STEPS {
        let steps: Vec<&SpanData> = exported.iter().filter(|s| s.name == step).collect();
        assert_eq!(steps.len(), 1, "{step}");
        assert_eq!(
            steps[0].parent_span_id,
            run_span.span_context.span_id(),
            "{step} runs in the run's span"
        );
    }
    for command in ["start_run", "settle_run", "dispose_run"] {
        let issued: Vec<&SpanData> = exported
            .iter()
            .filter(|s| {
                s.name == span::COMMAND
                    && string_attr(s, attr::COMMAND).as_deref() == Some(command)
                    && s.parent_span_id == run_span.span_context.span_id()
            })
            .collect();
        assert_eq!(issued.len(), 1, "{command} is issued in the run's span");
    }
    let run_records: Vec<_> = records(&h.log)
        .into_iter()
        .filter(|record| record.stream == subagent_core::StreamId::Session(run.child_id()))
        .collect();
    // The request names the run's span; the events recorded in it after
    // keep no trace context of their own: the log names the span once.
    let recorded = |type_name: &str| {
        run_records
            .iter()
            .find(|record| record.event.type_name() == type_name)
            .unwrap_or_else(|| panic!("the run recorded {type_name}"))
    };
    let requested = recorded("RunRequested")
        .trace
        .expect("RunRequested keeps the run's span");
    assert_eq!(
        SpanId::from_bytes(requested.span_id),
        run_span.span_context.span_id(),
        "RunRequested names the run's span"
    );
    for type_name in ["RunStarted", "RunSettled", "RunDisposed"] {
        assert_eq!(recorded(type_name).trace, None, "{type_name} keeps a trace");
    }
    // The provider's registration was recorded in the host's request, a
    // span no event of the log names: it keeps that span's context.
    let host_request = exported
        .iter()
        .find(|s| s.name == "host.request")
        .expect("the host's request was exported");
    let registered = records(&h.log)
        .into_iter()
        .find(|record| {
            matches!(&record.event, Event::ProviderRegistered { name, .. } if name == "traced-instant")
        })
        .expect("the provider's registration was recorded");
    let kept = registered
        .trace
        .expect("an event recorded outside every tree keeps its span");
    assert_eq!(
        SpanId::from_bytes(kept.span_id),
        host_request.span_context.span_id()
    );

    // A failure names its type on the turn and on the activation.
    let broken_activation = of_session(broken.child_id(), span::ACTIVATION)[0];
    let broken_turn = of_session(broken.child_id(), span::INVOKE_AGENT)[0];
    assert_eq!(
        string_attr(broken_turn, attr::ERROR_TYPE).as_deref(),
        Some("error")
    );
    assert_eq!(
        string_attr(broken_activation, attr::ERROR_TYPE).as_deref(),
        Some("error")
    );
    assert_eq!(string_attr(lead_turn, attr::ERROR_TYPE), None);

    // Commands and appends are spans too, inside the tree's spans.
    let commands: Vec<&SpanData> = exported
        .iter()
        .filter(|s| s.name == span::COMMAND)
        .collect();
    assert!(commands
        .iter()
        .any(
            |s| string_attr(s, attr::COMMAND).as_deref() == Some("begin_turn")
                && s.span_context.trace_id() == trace_one
        ));
    assert!(exported.iter().any(|s| s.name == span::APPEND
        && by_id
            .get(&s.parent_span_id)
            .is_some_and(|p| p.name == span::COMMAND)));
    let delivered: Vec<&SpanData> = exported
        .iter()
        .filter(|s| s.name == span::DELIVER_MESSAGE)
        .collect();
    assert!(delivered.is_empty(), "no message was sent in this run");

    // The log alone rebuilds the same tree of spans.
    let log_records = records(&h.log);
    let rebuilt = spans(&log_records);
    let kinds = |kind: fn(&SpanKind) -> bool| rebuilt.iter().filter(|s| kind(&s.kind)).count();
    assert_eq!(kinds(|k| *k == SpanKind::Root), 2);
    let rebuilt_activations: Vec<(SessionId, SpanKind, u64)> = rebuilt
        .iter()
        .filter(|s| matches!(s.kind, SpanKind::Activation { .. }))
        .map(|s| (s.session, s.kind, s.position))
        .collect();
    assert_eq!(
        rebuilt_activations.len(),
        tree.len(),
        "{rebuilt_activations:?}\n{}",
        log_records
            .iter()
            .map(|r| format!("{} {} {}", r.position, r.stream, r.event.type_name()))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(kinds(|k| *k == SpanKind::Tool) >= 2);
    for span_record in &rebuilt {
        let id = SpanId::from_bytes(span_record.context.span_id);
        let exported_span = by_id
            .get(&id)
            .unwrap_or_else(|| panic!("rebuilt span {:?} was exported", span_record.kind));
        assert_eq!(
            exported_span.span_context.trace_id().to_bytes(),
            span_record.context.trace_id
        );
        let parent = span_record.parent_span_id.map(SpanId::from_bytes);
        let exported_parent = (exported_span.parent_span_id != SpanId::INVALID)
            .then_some(exported_span.parent_span_id);
        assert_eq!(
            parent, exported_parent,
            "{:?} of {}",
            span_record.kind, span_record.session
        );
    }
    // Every event that names a span keeps its trace context, and no other
    // event keeps a span of its own tree's trace: the event that began
    // that span names it. (Every event here was recorded in some span.)
    let mut state = subagent_projections::Projections::new();
    let mut kept_elsewhere = 0;
    for record in &log_records {
        let name = record.event.type_name();
        if record.event.named_span().is_some() {
            assert!(record.trace.is_some(), "{name} has no trace");
        } else if let Some(trace) = record.trace {
            let session = match &record.event {
                Event::SessionCreated {
                    parent: Some(parent),
                    ..
                } => Some(*parent),
                _ => record.stream.session(),
            };
            let tree = session.and_then(|session| state.tree_trace(session));
            assert_ne!(
                tree.map(|tree| tree.trace_id),
                Some(trace.trace_id),
                "{name} at {} keeps a span of its own tree",
                record.position
            );
            kept_elsewhere += 1;
        }
        state.apply(record);
    }
    assert!(
        kept_elsewhere >= 1,
        "the registration keeps the host's span"
    );
}
