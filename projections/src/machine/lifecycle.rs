//! The life of a continuable child's activation: start (the session, its
//! catalog entry and its first activation), prepare, publish, settle,
//! release, fail and abandon, and the settlement notice a parent-delivered
//! result sends.

use serde_json::{json, Value};
use subagent_core::{
    effective_agent_options, AbandonReason, AgentOptions, ContentBlock, Delivery, Diagnostic,
    Event, MessageDelivery, MessageId, MessageSource, SessionId, StreamId, SubagentDescriptor,
    SubagentError, SubagentResult, SubagentRunId, SubagentStopReason,
};

use crate::activation::LiveActivation;
use crate::state::Projections;

use super::command::{push_to, single, Decision, StartChild};
use super::guards::{
    abandonable_live, child_depth, child_mode, live, registered, requested_live, requesting_turn,
    start_parent, unpublished_live, unsettled_live, unused_child_id, valid_label,
};

pub(super) fn start_child(
    state: &Projections,
    start: StartChild,
) -> Result<Decision, SubagentError> {
    let parent = start_parent(state, start.parent)?;
    let provider = registered(state.registry_for(start.parent), &start.provider)?;
    provider
        .capabilities
        .check(&provider.name, &start.options)?;
    if let Some(schema) = &start.options.output_schema {
        subagent_core::schema::assert_object_json_schema(schema)?;
    }
    if let Some(persona) = &start.options.persona {
        subagent_core::persona::validate(persona, &start.settings.persona_variables)?;
    }
    if let Some(filter) = &start.options.tool_filter {
        filter.check_names(&start.settings.tools)?;
    }
    if let Some(requested) = &start.options.agent_options {
        requested.validate()?;
    }
    // Local children inherit the parent's options; an external provider
    // owns its runtime defaults. Route defaults sit between.
    let agent_options = effective_agent_options(
        start.options.agent_options.as_ref(),
        provider.route_defaults.as_ref(),
        provider
            .continuable
            .then_some(parent.agent_options.as_ref())
            .flatten(),
    );
    if let Some(requested) = &start.options.agent_options {
        start
            .settings
            .model_selection
            .check(requested, &agent_options)?;
    }
    let depth = child_depth(parent, start.options.max_depth)?;
    if let Some(call) = &start.requested_by {
        requesting_turn(state, start.parent, call)?;
    }
    unused_child_id(state, start.child)?;
    valid_label(&start.label)?;
    let (mode, external) = child_mode(provider);
    let descriptor = SubagentDescriptor {
        version: subagent_core::DESCRIPTOR_VERSION,
        provider: provider.name.clone(),
        mode,
        inherits_parent_context: provider.inherits_parent_context,
        agent_options: (agent_options != AgentOptions::default()).then_some(agent_options),
        tool_filter: start.options.tool_filter.clone(),
        persona: start.options.persona.clone(),
        max_depth: start.options.max_depth,
    };
    let created = Event::SessionCreated {
        session: start.child,
        parent: Some(start.parent),
        depth,
        label: start.label.clone(),
        provider: Some(provider.name.clone()),
        mode,
        external,
        descriptor: serde_json::to_value(&descriptor).unwrap_or_else(|_| json!(null)),
    };
    let mut child_events = vec![created];
    if external {
        child_events.push(Event::RunRequested {
            run_id: start.run_id,
            provider: provider.name.clone(),
            delivery: start.delivery,
            requested_by: start.requested_by,
        });
    } else {
        child_events.push(Event::ActivationRequested {
            epoch: 1,
            delivery: start.delivery,
            output_schema: start.options.output_schema.clone(),
            requested_by: start.requested_by,
        });
    }
    Ok(vec![
        (
            StreamId::Session(start.parent),
            vec![Event::ChildCataloged {
                child: start.child,
                label: start.label,
                provider: provider.name.clone(),
                mode,
                external,
            }],
        ),
        (StreamId::Session(start.child), child_events),
    ])
}

/// Records the provider's creation inputs and (first activation only) the
/// delegated prompt, which ends the caller's cancellation window.
pub(super) fn prepare(
    state: &Projections,
    child: SessionId,
    epoch: u64,
    prompt: Option<(MessageId, Vec<ContentBlock>)>,
    seed: Option<Vec<Value>>,
    seed_source: Option<(SessionId, u64)>,
) -> Result<Decision, SubagentError> {
    requested_live(state, child, epoch)?;
    let mut events = Vec::new();
    let seeded_events = seed.as_ref().map_or(0, |events| events.len() as u64);
    if let (Some(events_to_seed), Some((source, through_version))) = (seed, seed_source) {
        events.push(Event::HistorySeeded {
            source,
            through_version,
            events: events_to_seed,
        });
    }
    events.push(Event::ActivationPrepared {
        epoch,
        seeded_events,
    });
    if let Some((message_id, content)) = prompt {
        let parent = state
            .sessions
            .get(&child)
            .and_then(|record| record.parent)
            .unwrap_or(child);
        events.push(Event::MessageAccepted {
            message_id,
            source: MessageSource::Delegation {
                parent_session_id: parent,
            },
            delivery: MessageDelivery::Queue,
            content,
        });
    }
    Ok(single(StreamId::Session(child), events))
}

/// Records that the activation's agent is live.
pub(super) fn publish(
    state: &Projections,
    child: SessionId,
    epoch: u64,
    run_id: SubagentRunId,
) -> Result<Decision, SubagentError> {
    unpublished_live(state, child, epoch)?;
    Ok(single(
        StreamId::Session(child),
        vec![Event::ActivationPublished { epoch, run_id }],
    ))
}

/// Records an unsettled activation's result (and its notice).
pub(super) fn settle_activation(
    state: &Projections,
    child: SessionId,
    epoch: u64,
    result: SubagentResult,
) -> Result<Decision, SubagentError> {
    let live = unsettled_live(state, child, epoch)?;
    Ok(settle(state, child, live, result))
}

/// Releases a live activation: its running turn ends with the stop reason
/// of `unsettled` (the result an unsettled epoch settles with), an unsettled
/// epoch settles with it (and notifies as any settlement), and
/// `ActivationReleased` records `cleanup_error`.
fn release_live(
    state: &Projections,
    child: SessionId,
    live: &LiveActivation,
    unsettled: SubagentResult,
    cleanup_error: Option<Diagnostic>,
) -> Decision {
    let mut decision = Vec::new();
    if let Some(turn) = state.activations.get(&child).and_then(|a| a.running_turn) {
        push_to(
            &mut decision,
            StreamId::Session(child),
            super::turns::turn_ending(
                state,
                child,
                turn,
                unsettled.stop_reason.clone(),
                super::turns::ENDED_FIRST,
            ),
        );
    }
    if !live.settled {
        for (stream, events) in settle(state, child, live, unsettled) {
            push_to(&mut decision, stream, events);
        }
    }
    push_to(
        &mut decision,
        StreamId::Session(child),
        vec![Event::ActivationReleased {
            epoch: live.epoch,
            cleanup_error,
        }],
    );
    decision
}

/// Releases a live activation (dispose): its running turn ends `aborted`,
/// an unsettled one settles `aborted`, then it is released.
pub(super) fn release(
    state: &Projections,
    child: SessionId,
    epoch: u64,
    cleanup_error: Option<Diagnostic>,
) -> Result<Decision, SubagentError> {
    let live = live(state, child, epoch)?;
    let aborted = SubagentResult::failed(
        SubagentStopReason::Aborted,
        Vec::new(),
        "disposed before it settled",
    );
    Ok(release_live(state, child, live, aborted, cleanup_error))
}

/// Records a failed agent or driver ([`super::Command::FailActivation`]):
/// the running turn ends `error`, an unsettled epoch settles `error` with
/// `diagnostic` (a settled one keeps its result and records the diagnostic
/// beside it), and the activation is released.
pub(super) fn fail(
    state: &Projections,
    child: SessionId,
    epoch: u64,
    diagnostic: Diagnostic,
) -> Result<Decision, SubagentError> {
    let live = live(state, child, epoch)?;
    let cleanup_error = live.settled.then(|| diagnostic.clone());
    let failed = SubagentResult {
        output: Vec::new(),
        structured: None,
        diagnostic: Some(diagnostic),
        stop_reason: SubagentStopReason::Error,
    };
    Ok(release_live(state, child, live, failed, cleanup_error))
}

/// Records an activation that ended before publication.
pub(super) fn abandon(
    state: &Projections,
    child: SessionId,
    epoch: u64,
    reason: AbandonReason,
) -> Result<Decision, SubagentError> {
    abandonable_live(state, child, epoch)?;
    Ok(single(
        StreamId::Session(child),
        vec![Event::ActivationAbandoned { epoch, reason }],
    ))
}

/// The one-line, status-only account of how a child ended. Never the child's
/// words: a settlement notice is the runtime speaking.
#[must_use]
pub fn settlement_summary(label: &str, result: &SubagentResult) -> String {
    format!("subagent {label:?} finished: {}", result.stop_reason)
}

pub(super) fn settle(
    state: &Projections,
    child: SessionId,
    live: &LiveActivation,
    result: SubagentResult,
) -> Decision {
    let mut decision = Vec::new();
    let notice = (live.delivery == Delivery::Parent)
        .then(|| state.sessions.get(&child))
        .flatten()
        .and_then(|record| record.parent.map(|parent| (parent, record.label.clone())));
    let summary = notice
        .as_ref()
        .map(|(_, label)| settlement_summary(label, &result));
    decision.push((
        StreamId::Session(child),
        vec![Event::ActivationSettled {
            epoch: live.epoch,
            result,
        }],
    ));
    if let (Some((parent, _)), Some(summary)) = (notice, summary) {
        decision.push((
            StreamId::Session(parent),
            vec![Event::MessageAccepted {
                message_id: settlement_notice_id(child, live.epoch),
                source: MessageSource::SubagentSettled {
                    summary: summary.clone(),
                    sender_session_id: child,
                },
                delivery: MessageDelivery::Queue,
                content: vec![ContentBlock::text(summary)],
            }],
        ));
    }
    decision
}

/// The deterministic id of the settlement notice of `child`'s `epoch`, so a
/// retried decision dedupes instead of notifying twice.
#[must_use]
pub fn settlement_notice_id(child: SessionId, epoch: u64) -> MessageId {
    MessageId::from_uuid(uuid::Uuid::from_u128(
        child.as_uuid().as_u128() ^ u128::from(epoch).rotate_left(64) ^ 0x5e77_1ed0,
    ))
}
