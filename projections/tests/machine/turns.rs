//! Turns of a published activation (`machine/turns.rs`): steering claims
//! pending messages for the running turn only; the first turn end settles the
//! epoch, with a capture valid against the requested schema or else `error`;
//! a tool call needs a running turn of its number, and is let through,
//! refused when the lineage restricts it, or failed when no host tool has its
//! name.

use subagent_core::{
    ContentBlock, Delivery, Event, MessageId, OutOfOrder, StartOptions, SubagentError,
    SubagentRunId, SubagentStopReason, ToolRestriction,
};
use subagent_projections::machine::{Command, TurnOutput};

use crate::world::{send, start, types, with_options, World};

#[test]
fn steering_claims_pending_messages_for_the_running_turn_only() {
    let mut world = World::new();
    let root = world.root();
    let child = world.start(root, "spawn", Delivery::Parent);
    world.run(Command::PublishActivation {
        child,
        epoch: 1,
        run_id: SubagentRunId::new(),
    });
    assert_eq!(
        world.refuse(Command::ClaimSteering { session: child }),
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::NoTurnRunning
        },
        "no turn is running"
    );
    world.run(Command::BeginTurn { session: child });
    assert!(
        world
            .run(Command::ClaimSteering { session: child })
            .is_empty(),
        "nothing pending: nothing recorded"
    );
    world.run(send(root, child));
    let recorded = world.run(Command::ClaimSteering { session: child });
    assert!(matches!(&recorded[0].1, Event::MessagesClaimed { ids, turn: 1 } if ids.len() == 1));
    assert!(world.state.pending_messages(child).is_empty());
}

#[test]
fn the_first_turn_end_settles_with_a_valid_capture_or_an_error() {
    let mut world = World::new();
    world.register_capable("schema");
    let root = world.root();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"]
    });
    let end_first_turn = |world: &mut World, structured: Option<serde_json::Value>| {
        let mut request = start(root, "schema", Delivery::Caller);
        request.options.output_schema = Some(schema.clone());
        let child = request.child;
        world.run(Command::StartChild(request));
        world.run(Command::PrepareActivation {
            child,
            epoch: 1,
            prompt: Some((MessageId::new(), vec![ContentBlock::text("go")])),
            seed: None,
            seed_source: None,
        });
        world.run(Command::PublishActivation {
            child,
            epoch: 1,
            run_id: SubagentRunId::new(),
        });
        world.run(Command::BeginTurn { session: child });
        let recorded = world.run(Command::EndTurn {
            session: child,
            stop_reason: SubagentStopReason::Completed,
            output: TurnOutput {
                assistant: vec![vec![ContentBlock::text("here")]],
                structured,
                diagnostic: None,
            },
        });
        recorded
            .into_iter()
            .find_map(|(_, event)| match event {
                Event::ActivationSettled { result, .. } => Some(result),
                _ => None,
            })
            .expect("the first turn end settles")
    };
    let valid = end_first_turn(&mut world, Some(serde_json::json!({"answer": "42"})));
    assert_eq!(valid.stop_reason, SubagentStopReason::Completed);
    assert_eq!(valid.structured, Some(serde_json::json!({"answer": "42"})));
    assert_eq!(valid.output, vec![ContentBlock::text("here")]);

    let missing = end_first_turn(&mut world, None);
    assert_eq!(missing.stop_reason, SubagentStopReason::Error);
    assert_eq!(missing.structured, None);
    assert!(missing.diagnostic.is_some(), "{missing:?}");

    let wrong = end_first_turn(&mut world, Some(serde_json::json!({"answer": 42})));
    assert_eq!(wrong.stop_reason, SubagentStopReason::Error);
    assert_eq!(wrong.structured, None);
}

#[test]
fn decide_answers_tool_calls_refusing_what_the_lineage_restricts() {
    let mut world = World::new();
    let root = world.root();
    let parent = with_options(
        root,
        "spawn",
        StartOptions {
            tool_filter: Some(ToolRestriction::Deny(vec!["shell".into()])),
            ..StartOptions::default()
        },
    );
    let child = parent.child;
    world.run(Command::StartChild(parent));
    world.run(Command::PrepareActivation {
        child,
        epoch: 1,
        prompt: Some((MessageId::new(), vec![ContentBlock::text("go")])),
        seed: None,
        seed_source: None,
    });
    world.run(Command::PublishActivation {
        child,
        epoch: 1,
        run_id: SubagentRunId::new(),
    });
    let call = |name: &str, known: bool| Command::CallTool {
        session: child,
        turn: 1,
        call_id: format!("call-{name}"),
        name: name.into(),
        input: serde_json::json!({"path": "x"}),
        known,
    };
    // No turn is running yet.
    assert_eq!(
        world.refuse(call("read_file", true)),
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::NoTurnRunning
        }
    );
    world.run(Command::BeginTurn { session: child });

    // Permitted and known: only the call, the instruction to execute.
    let recorded = world.run(call("read_file", true));
    assert_eq!(types(&recorded), vec!["ToolCalled"]);

    // Restricted down the lineage: the call and its refusal, together.
    let recorded = world.run(call("shell", true));
    assert_eq!(types(&recorded), vec!["ToolCalled", "ToolReturned"]);
    assert!(matches!(
        &recorded[1].1,
        Event::ToolReturned { call_id, is_error: true, refused: true, output, .. }
            if call_id == "call-shell"
                && subagent_core::content::plain_text(output) == "tool shell is not available to this agent"
    ));

    // Permitted but not a host tool: fails, not refused.
    let recorded = world.run(call("teleport", false));
    assert!(matches!(
        &recorded[1].1,
        Event::ToolReturned { is_error: true, refused: false, output, .. }
            if subagent_core::content::plain_text(output) == "unknown tool teleport"
    ));

    // A call naming another turn is out of order.
    let mut other_turn = call("read_file", true);
    if let Command::CallTool { turn, .. } = &mut other_turn {
        *turn = 2;
    }
    assert_eq!(
        world.refuse(other_turn),
        SubagentError::OutOfOrder {
            session: child,
            reason: OutOfOrder::OtherTurn {
                entry: 2,
                running: 1
            }
        }
    );
}
