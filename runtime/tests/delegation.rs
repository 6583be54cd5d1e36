//! Agents delegate through the runtime's own tools: a scripted agent calls
//! `subagent`, `list_agents`, `send_message` and `subagent_control`
//! through its turn's tool port, the runtime runs each as the calling
//! session, and the log records the call, the events it caused, and the
//! result, in that order; a child started by a call names it. Every
//! refusal a call meets is an error result with its code, and records
//! nothing but the call and that result.

mod common;

use std::sync::Arc;

use common::{spec, Harness};
use serde_json::{json, Value};
use subagent_core::{
    content::plain_text, Delivery, Event, SessionId, StreamId, SubagentStopReason, ToolCallRef,
    ToolRestriction,
};
use subagent_projections::Projections;
use subagent_runtime::delegation::{self, Offered};
use subagent_runtime::providers::{InstantProvider, SpawnProvider};
use subagent_runtime::scripted::Step;
use subagent_runtime::{Script, ScriptedHost, SubagentProvider};
use subagent_store::filling::FillingLog;
use subagent_store::{EventLogExt, MemoryLog};

/// A call of tool `name` with `input`, whose result the agent says.
fn call(name: &str, input: Value) -> Step {
    Step::Call {
        name: name.into(),
        input,
    }
}

/// The events of `session`'s stream.
fn events_of(h: &Harness, session: SessionId) -> Vec<Event> {
    h.log
        .read_stream(StreamId::Session(session), 1)
        .map(|record| record.unwrap().event)
        .collect()
}

/// What `session`'s agent said, each message parsed as JSON when it is.
fn said(h: &Harness, session: SessionId) -> Vec<Value> {
    events_of(h, session)
        .into_iter()
        .filter_map(|event| match event {
            Event::AssistantMessage { content, .. } => {
                let text = plain_text(&content);
                Some(serde_json::from_str(&text).unwrap_or(Value::String(text)))
            }
            _ => None,
        })
        .collect()
}

/// A delegating agent `boss` over a `worker` that answers, and an `instant`
/// external provider.
async fn world(boss: Vec<Step>) -> Harness {
    let host = ScriptedHost::new(Script::reply("done"))
        .with("boss", Script { turns: vec![boss] })
        .with("worker", Script::reply("the worker's answer"));
    Harness::builder(host)
        .provider(Arc::new(InstantProvider))
        .open()
        .await
}

#[tokio::test]
async fn an_agent_starts_a_child_through_the_subagent_tool_and_the_child_names_the_call() {
    let h = world(vec![
        call(
            "subagent",
            json!({"provider": "spawn", "label": "worker", "prompt": "find it"}),
        ),
        call(
            "subagent_control",
            json!({"action": "wait", "timeoutSeconds": 30}),
        ),
    ])
    .await;
    let boss = h
        .start(spec("spawn", "boss", Delivery::Caller))
        .await
        .unwrap();
    let result = boss.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Completed);
    let said = said(&h, boss.child_id());
    let child: SessionId = said[0]["childId"].as_str().unwrap().parse().unwrap();
    assert_eq!(said[0]["status"], "started");
    // The wait returned the child's settled result.
    assert_eq!(said[1]["timedOut"], false, "{said:?}");
    assert_eq!(said[1]["children"][0]["childId"], json!(child));
    assert_eq!(said[1]["children"][0]["working"], false);
    assert_eq!(said[1]["children"][0]["stopReason"], "completed");
    assert_eq!(said[1]["children"][0]["output"], "the worker's answer");

    // The child's request names the call, and the call comes before the
    // child's creation in the parent's stream, its result after.
    let requested = events_of(&h, child)
        .into_iter()
        .find_map(|event| match event {
            Event::ActivationRequested {
                requested_by,
                delivery,
                ..
            } => Some((requested_by, delivery)),
            _ => None,
        });
    assert_eq!(
        requested,
        Some((
            Some(ToolCallRef {
                turn: 1,
                call_id: "call-0".into()
            }),
            Delivery::Parent
        ))
    );
    let parent = events_of(&h, boss.child_id());
    let called = parent
        .iter()
        .position(|e| matches!(e, Event::ToolCalled { call_id, name, .. } if call_id == "call-0" && name == "subagent"))
        .expect("the call is recorded");
    let cataloged = parent
        .iter()
        .position(|e| matches!(e, Event::ChildCataloged { child: id, .. } if *id == child))
        .expect("the child is cataloged");
    let returned = parent
        .iter()
        .position(|e| matches!(e, Event::ToolReturned { call_id, is_error: false, .. } if call_id == "call-0"))
        .expect("the call's result is recorded");
    assert!(called < cataloged && cataloged < returned, "{parent:?}");
    // The log's history stays admissible.
    let records: Vec<_> = h.log.read_all(1).map(Result::unwrap).collect();
    subagent_projections::HistoryCheck::history(&records).expect("an admissible history");
    h.runtime.close().await.unwrap();
}

/// The next call of a planned agent in its turn (1-based), from the
/// results of its calls so far (parsed as JSON when they are); `None` ends
/// the turn.
type Plan = Arc<dyn Fn(usize, &[Value]) -> Option<(&'static str, Value)> + Send + Sync>;

/// A host whose `boss` agent calls tools as its plan says, across turns,
/// and whose other agents play `scripts`.
struct Planned {
    plan: Plan,
    scripts: ScriptedHost,
}

/// The planned agent: its turns so far, and the results of its calls.
struct PlannedAgent {
    plan: Plan,
    turn: usize,
    results: Vec<Value>,
}

impl subagent_runtime::Agent for PlannedAgent {
    fn run_turn(
        &mut self,
        input: subagent_runtime::TurnInput,
    ) -> subagent_runtime::BoxFuture<'_, subagent_runtime::TurnEnd> {
        self.turn += 1;
        Box::pin(async move {
            while let Some((name, arguments)) = (self.plan)(self.turn, &self.results) {
                let output = input
                    .tools
                    .call(subagent_runtime::ToolCall {
                        call_id: format!("call-{}", self.results.len()),
                        name: name.to_owned(),
                        input: arguments,
                    })
                    .await;
                let text = plain_text(&output.output);
                self.results
                    .push(serde_json::from_str(&text).unwrap_or(Value::String(text)));
            }
            subagent_runtime::TurnEnd {
                stop_reason: SubagentStopReason::Completed,
                diagnostic: None,
                structured: None,
            }
        })
    }
}

impl subagent_runtime::AgentHost for Planned {
    fn create(
        &self,
        spec: subagent_runtime::AgentSpec,
    ) -> subagent_runtime::BoxFuture<
        'static,
        Result<Box<dyn subagent_runtime::Agent>, subagent_core::SubagentError>,
    > {
        if spec.label == "boss" {
            let plan = Arc::clone(&self.plan);
            return Box::pin(async move {
                Ok(Box::new(PlannedAgent {
                    plan,
                    turn: 0,
                    results: Vec::new(),
                }) as Box<dyn subagent_runtime::Agent>)
            });
        }
        self.scripts.create(spec)
    }
}

#[tokio::test]
async fn list_agents_send_message_and_the_control_tool_act_on_direct_children() {
    // Turn 1: start a slow child, wait for it past a deadline, list it
    // running. Turn 2 (a message wakes the boss): steer it, interrupt it,
    // close it, list it inactive.
    let plan: Plan = Arc::new(|turn: usize, results: &[Value]| {
        let child = || results[0]["childId"].clone();
        let call = match (turn, results.len()) {
            (1, 0) => (
                "subagent",
                json!({"provider": "spawn", "label": "slow", "prompt": "go"}),
            ),
            // By its deadline the child is still at work.
            (1, 1) => (
                "subagent_control",
                json!({"action": "wait", "child": child(), "timeoutSeconds": 1}),
            ),
            (1, 2) => ("list_agents", json!({})),
            (2, 3) => ("send_message", json!({"to": child(), "text": "hurry up"})),
            (2, 4) => (
                "subagent_control",
                json!({"action": "interrupt", "child": child()}),
            ),
            (2, 5) => (
                "subagent_control",
                json!({"action": "close", "child": child()}),
            ),
            (2, 6) => ("list_agents", json!({})),
            _ => return None,
        };
        Some(call)
    });
    let scripts = ScriptedHost::new(Script::reply("done")).with(
        "slow",
        Script {
            turns: vec![vec![Step::Say("working".into()), Step::SleepMs(60_000)]],
        },
    );
    let h = Harness::builder(Arc::new(Planned { plan, scripts }))
        .open()
        .await;
    let boss = h
        .start(spec("spawn", "boss", Delivery::Caller))
        .await
        .unwrap();
    boss.result().await.unwrap();
    let results = |h: &Harness| -> Vec<Value> {
        events_of(h, boss.child_id())
            .into_iter()
            .filter_map(|event| match event {
                Event::ToolReturned { output, .. } => {
                    let text = plain_text(&output);
                    Some(serde_json::from_str(&text).unwrap_or(Value::String(text)))
                }
                _ => None,
            })
            .collect()
    };
    let first = results(&h);
    let child = first[0]["childId"].as_str().unwrap().to_owned();
    assert_eq!(
        first[1],
        json!({"children": [{"childId": child, "label": "slow", "working": true}], "timedOut": true}),
        "{first:?}"
    );
    // Running: listed (its first turn sleeps).
    assert_eq!(
        first[2],
        json!([{"id": child, "label": "slow", "provider": "spawn", "status": "running"}]),
        "{first:?}"
    );

    h.send(boss.child_id(), "next").await.unwrap();
    common::until("the boss's second turn", || results(&h).len() >= 7).await;
    let all = results(&h);
    assert_eq!(all[3]["status"], "accepted", "{all:?}");
    assert_eq!(
        all[4],
        json!({"childId": child, "interrupted": true}),
        "{all:?}"
    );
    assert_eq!(
        all[5],
        json!({"childId": child, "status": "closed"}),
        "{all:?}"
    );
    assert_eq!(
        all[6],
        json!([{"id": child, "label": "slow", "provider": "spawn", "status": "inactive"}]),
        "closed: inactive, so still listed"
    );
    let child_id: SessionId = child.parse().unwrap();
    let child_events = events_of(&h, child_id);
    assert!(
        child_events
            .iter()
            .any(|e| matches!(e, Event::InterruptRequested { .. })),
        "{child_events:?}"
    );
    assert!(child_events
        .iter()
        .any(|e| matches!(e, Event::ActivationReleased { .. })));
    let steered = child_events.iter().any(|e| matches!(e, Event::MessageAccepted { content, .. } if plain_text(content) == "hurry up"));
    assert!(steered, "the message reached the child's inbox");
    h.runtime.close().await.unwrap();
}

#[tokio::test]
async fn every_refusal_a_call_meets_is_an_error_result_with_its_code() {
    let stranger = SessionId::new();
    let h = world(vec![
        call(
            "subagent",
            json!({"provider": "nope", "label": "x", "prompt": "go"}),
        ),
        call("subagent", json!({"provider": "spawn", "label": "x"})),
        call(
            "subagent",
            json!({"provider": "instant", "label": "x", "prompt": "go", "maxDepth": 2}),
        ),
        call(
            "subagent",
            json!({"provider": "spawn", "label": "", "prompt": "go"}),
        ),
        call(
            "send_message",
            json!({"to": stranger.to_string(), "text": "hi"}),
        ),
        call("send_message", json!({"to": "not an id", "text": "hi"})),
        call(
            "subagent_control",
            json!({"action": "close", "child": stranger.to_string()}),
        ),
        call("subagent_control", json!({"action": "interrupt"})),
        call(
            "subagent_control",
            json!({"action": "wait", "timeoutSeconds": 601}),
        ),
        call("list_agents", json!({"extra": 1})),
    ])
    .await;
    let boss = h
        .start(spec("spawn", "boss", Delivery::Caller))
        .await
        .unwrap();
    boss.result().await.unwrap();
    let said = said(&h, boss.child_id());
    let codes: Vec<String> = said
        .iter()
        .map(|text| {
            text.as_str()
                .and_then(|text| text.split_once(':'))
                .map(|(code, _)| code.to_owned())
                .unwrap_or_else(|| format!("not a refusal: {text}"))
        })
        .collect();
    assert_eq!(
        codes,
        [
            "subagent/unknown-provider",
            "gateway/bad-request",
            "subagent/capability-unsupported",
            "gateway/bad-request",
            "subagent/unauthorized",
            "gateway/bad-request",
            "subagent/unauthorized",
            "gateway/bad-request",
            "gateway/bad-request",
            "gateway/bad-request",
        ],
        "{said:?}"
    );
    // Nothing but the calls and their results: no child of the boss.
    assert!(h
        .runtime
        .projections()
        .list_children(boss.child_id())
        .is_empty());
    let results: Vec<bool> = events_of(&h, boss.child_id())
        .into_iter()
        .filter_map(|event| match event {
            Event::ToolReturned { is_error, .. } => Some(is_error),
            _ => None,
        })
        .collect();
    assert_eq!(results, vec![true; 10], "every result is an error result");
    h.runtime.close().await.unwrap();
}

/// Agents that reply `done`, but those labelled `label`, whose turn calls
/// `subagent` to start a `spawn` child labelled `child`.
fn starting(label: &str, child: &str) -> ScriptedHost {
    ScriptedHost::new(Script::reply("done")).with(
        label,
        Script {
            turns: vec![vec![call(
                "subagent",
                json!({"provider": "spawn", "label": child, "prompt": "go"}),
            )]],
        },
    )
}

#[tokio::test]
async fn a_filter_that_removes_subagent_stops_the_child_and_its_descendants_delegating() {
    let probe = common::Probe::new(starting("sealed", "grandchild"));
    let h = Harness::builder(probe.clone()).open().await;
    let mut sealed = spec("spawn", "sealed", Delivery::Caller);
    sealed.request.options.tool_filter = Some(ToolRestriction::Deny(vec!["subagent".into()]));
    let child = h.start(sealed).await.unwrap();
    child.result().await.unwrap();
    let refusal = said(&h, child.child_id())[0].as_str().unwrap().to_owned();
    assert_eq!(refusal, "tool subagent is not available to this agent");
    assert!(h
        .runtime
        .projections()
        .list_children(child.child_id())
        .is_empty());
    let refused = events_of(&h, child.child_id())
        .into_iter()
        .any(|event| matches!(event, Event::ToolReturned { refused: true, .. }));
    assert!(refused, "the call was refused by the lineage, not executed");
    // Hidden too: the child's agent was built without it, and so is a
    // grandchild the host starts below it (the lineage's one visibility).
    let offered = |session| -> Vec<String> {
        probe
            .spec_of(session)
            .tools
            .iter()
            .map(|tool| tool.name.clone())
            .collect()
    };
    assert_eq!(
        offered(child.child_id()),
        ["list_agents", "send_message", "subagent_control"]
    );
    let grandchild = common::start(
        &h.runtime,
        &child.agent(),
        spec("spawn", "grandchild", Delivery::Caller),
    )
    .await
    .unwrap();
    grandchild.result().await.unwrap();
    assert!(!offered(grandchild.child_id()).contains(&"subagent".to_owned()));
    h.runtime.close().await.unwrap();
}

#[test]
fn the_subagent_tool_says_what_the_registered_providers_take_and_nothing_more() {
    let spawn = Offered {
        name: "spawn".into(),
        capabilities: SpawnProvider.capabilities(),
        inherits_parent_context: false,
        continuable: true,
    };
    let instant = Offered {
        name: "instant".into(),
        capabilities: subagent_core::SubagentCapabilities::default(),
        inherits_parent_context: false,
        continuable: false,
    };
    let subagent = |offered: &[Offered]| {
        delegation::definitions(offered, None)
            .into_iter()
            .find(|tool| tool.name == "subagent")
    };
    // One-shot only: no option is offered, and the wording says one-shot.
    let only_instant = subagent(std::slice::from_ref(&instant)).unwrap();
    let properties = only_instant.input_schema["properties"].as_object().unwrap();
    assert_eq!(
        properties.keys().collect::<Vec<_>>(),
        ["provider", "label", "prompt"]
    );
    assert_eq!(properties["provider"]["enum"], json!(["instant"]));
    assert!(only_instant
        .description
        .contains("`instant`: a one-shot run"));
    assert!(only_instant.description.contains("takes no options"));
    // With spawn, its options appear, and the wording changes.
    let both = subagent(&[spawn.clone(), instant.clone()]).unwrap();
    let properties = both.input_schema["properties"].as_object().unwrap();
    for option in [
        "outputSchema",
        "maxDepth",
        "toolFilter",
        "persona",
        "agentOptions",
    ] {
        assert_eq!(
            properties.contains_key(option),
            option_taken(&spawn, option),
            "{option}"
        );
    }
    assert_eq!(properties["provider"]["enum"], json!(["spawn", "instant"]));
    assert!(both.description.contains("`spawn`: a continuable child"));
    assert!(both.description.contains("starts fresh"));
    // A provider whose children see the conversation says so.
    let fork = Offered {
        name: "fork".into(),
        inherits_parent_context: true,
        ..spawn
    };
    assert!(subagent(&[fork])
        .unwrap()
        .description
        .contains("the child sees this conversation's completed turns"));
    // No provider: no subagent tool, the others stay.
    assert!(subagent(&[]).is_none());
    assert_eq!(delegation::definitions(&[], None).len(), 3);
}

/// Whether `provider` takes the `subagent` option `option`.
fn option_taken(provider: &Offered, option: &str) -> bool {
    let caps = provider.capabilities;
    match option {
        "outputSchema" => caps.output_schema,
        "maxDepth" => caps.depth_limit,
        "toolFilter" => caps.tool_filter,
        "persona" => caps.persona,
        "agentOptions" => caps.agent_options,
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn a_host_turns_the_tools_off_for_a_root_s_tree() {
    let probe = common::Probe::new(starting("quiet", "x"));
    let h = Harness::builder(probe.clone()).open().await;
    h.runtime.set_delegation(h.root.session(), false).unwrap();
    let child = h
        .start(spec("spawn", "quiet", Delivery::Caller))
        .await
        .unwrap();
    child.result().await.unwrap();
    let offered: Vec<String> = probe
        .spec_of(child.child_id())
        .tools
        .iter()
        .map(|tool| tool.name.clone())
        .collect();
    assert!(
        offered.iter().all(|name| !delegation::is_delegation(name)),
        "{offered:?}"
    );
    assert_eq!(
        said(&h, child.child_id()),
        [json!("tool subagent is not available to this agent")]
    );
    assert!(h
        .runtime
        .projections()
        .list_children(child.child_id())
        .is_empty());
    // On again: a session built from then on is offered them.
    h.runtime.set_delegation(h.root.session(), true).unwrap();
    let again = h
        .start(spec("spawn", "quiet", Delivery::Caller))
        .await
        .unwrap();
    again.result().await.unwrap();
    // (Each child's completion notice wakes it to play its one turn
    // again: it goes on delegating until closed.)
    assert!(!h
        .runtime
        .projections()
        .list_children(again.child_id())
        .is_empty());
    h.runtime.close().await.unwrap();
}

// ---- a host that dies mid-delegation ----------------------------------------

/// `serve`'s agents, whose `delegate` starts an `assistant` through
/// `subagent` (call `call-0`), waits for it by the id the call returned,
/// and answers with what it said.
fn delegating_host() -> ScriptedHost {
    ScriptedHost::showcase()
}

/// Runs the delegate until its host dies right after the append holding an
/// event `dies_after` accepts (every later append fails, as after a
/// crash), and returns a copy of what the log held at that moment, the
/// root and the delegate.
async fn left_by_a_host_dead_after(
    dies_after: impl Fn(&Event) -> bool + Send + Sync + 'static,
) -> (MemoryLog, SessionId, SessionId) {
    let log = FillingLog::new();
    let h = Harness::builder(delegating_host())
        .over(log.clone())
        .open()
        .await;
    log.fill_after(dies_after);
    let delegate = h
        .start(spec("spawn", "delegate", Delivery::Caller))
        .await
        .unwrap();
    common::until("the host to die", || log.is_full()).await;
    // Through export and import, which also checks the history it left is
    // one `decide` could have produced.
    let mut exported = Vec::new();
    subagent_replay::export(&log, &mut exported).unwrap();
    let left = MemoryLog::new();
    subagent_replay::import(&left, exported.as_slice())
        .await
        .unwrap();
    (left, h.root.session(), delegate.child_id())
}

/// Where each of `events` is, by `matches`.
fn position(events: &[Event], what: &str, matches: impl Fn(&Event) -> bool) -> usize {
    events
        .iter()
        .position(matches)
        .unwrap_or_else(|| panic!("{what} missing from {events:?}"))
}

/// Opens a host over `left` (recovering it) and checks what every crash
/// must leave: the delegate's `subagent` call answered, abandoned, before its
/// turn ends; an admissible history; the tree a replay rebuilds is the
/// runtime's. Returns the delegate's events after recovery.
async fn recover(left: &MemoryLog, root: SessionId, delegate: SessionId) -> Vec<Event> {
    let (runtime, report) = Harness::builder(delegating_host())
        .over(left.clone())
        .open_runtime()
        .await;
    assert!(report.events > 0, "the recovery settles what was live");
    let events = common::events(left, delegate);
    let called = position(
        &events,
        "the call",
        |e| matches!(e, Event::ToolCalled { call_id, name, .. } if call_id == "call-0" && name == "subagent"),
    );
    let answered = position(&events, "the call's answer", |e| {
        matches!(e, Event::ToolReturned { call_id, is_error: true, output, .. }
            if call_id == "call-0" && plain_text(output).starts_with("abandoned"))
    });
    let ended = position(&events, "the turn's end", |e| {
        matches!(
            e,
            Event::TurnEnded {
                turn: 1,
                stop_reason: SubagentStopReason::Aborted
            }
        )
    });
    assert!(called < answered && answered < ended, "{events:?}");
    let records = common::records(left);
    subagent_projections::HistoryCheck::history(&records).expect("an admissible history");
    let replayed = subagent_projections::TreeView::of(&Projections::fold(&records), root);
    assert_eq!(runtime.tree(root).await.unwrap(), replayed);
    runtime.close().await.unwrap();
    events
}

#[tokio::test]
async fn a_host_dead_between_a_subagent_call_and_its_start_leaves_the_call_answered_abandoned() {
    let (left, root, delegate) = left_by_a_host_dead_after(
        |event| matches!(event, Event::ToolCalled { name, .. } if name == "subagent"),
    )
    .await;
    // The crash point: the call is durable, the start it asks for is not.
    let before = common::events(&left, delegate);
    assert!(before
        .iter()
        .any(|e| matches!(e, Event::ToolCalled { name, .. } if name == "subagent")));
    assert!(!before
        .iter()
        .any(|e| matches!(e, Event::ToolReturned { .. } | Event::ChildCataloged { .. })));

    let after = recover(&left, root, delegate).await;
    assert!(
        !after
            .iter()
            .any(|e| matches!(e, Event::ChildCataloged { .. })),
        "no child was started: {after:?}"
    );
}

#[tokio::test]
async fn a_host_dead_between_a_start_and_its_call_s_result_leaves_the_child_under_the_call() {
    let (left, root, delegate) = left_by_a_host_dead_after(|event| {
        matches!(
            event,
            Event::ActivationRequested {
                requested_by: Some(_),
                ..
            }
        )
    })
    .await;
    let after = recover(&left, root, delegate).await;
    // The child was started, under the call: the call before it in the
    // parent's transcript, the call's (abandoned) result after it.
    let called = position(
        &after,
        "the call",
        |e| matches!(e, Event::ToolCalled { call_id, .. } if call_id == "call-0"),
    );
    let cataloged = position(&after, "the child", |e| {
        matches!(e, Event::ChildCataloged { .. })
    });
    let answered = position(
        &after,
        "the call's answer",
        |e| matches!(e, Event::ToolReturned { call_id, .. } if call_id == "call-0"),
    );
    assert!(called < cataloged && cataloged < answered, "{after:?}");
    let state = Projections::fold(&common::records(&left));
    let assistant = state.list_children(delegate)[0].entry.child_id;
    assert_eq!(
        state.sessions[&assistant].requested_by,
        Some(ToolCallRef {
            turn: 1,
            call_id: "call-0".into()
        })
    );
    assert!(
        state.live_activations().is_empty(),
        "the recovery settled the child too"
    );
}

#[tokio::test]
async fn a_host_tool_named_like_a_delegation_tool_is_refused_before_the_log_is_touched() {
    let host = ScriptedHost::new(Script::reply("done")).with_tool("send_message", "sent");
    let log = MemoryLog::new();
    let refused = subagent_runtime::SubagentRuntime::open(Arc::new(log.clone()), Arc::new(host))
        .await
        .err()
        .expect("the host's tool would be hidden");
    assert_eq!(refused.code(), subagent_core::ErrorCode::BadRequest);
    assert!(refused.to_string().contains("send_message"), "{refused}");
    assert_eq!(subagent_store::EventLog::head(&log), 0, "nothing recorded");
    // Any other name opens.
    let host = ScriptedHost::new(Script::reply("done")).with_tool("send_mail", "sent");
    let (runtime, _) = subagent_runtime::SubagentRuntime::open(Arc::new(log), Arc::new(host))
        .await
        .unwrap();
    runtime.close().await.unwrap();
}
