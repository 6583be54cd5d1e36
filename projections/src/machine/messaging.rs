//! Messages between adjacent agents, interrupts and the drain's admission
//! cutoff: who may message whom and how a message travels (cold-resuming
//! an absent child), who may interrupt, and where admission is closed.

use subagent_core::{
    ContentBlock, Delivery, Event, InterruptAuthority, MessageDelivery, MessageId, MessageSource,
    OutOfOrder, SessionId, StreamId, SubagentError,
};

use crate::activation::{LiveActivation, RunPhase};
use crate::inbox::prompt_digest;
use crate::sessions::SessionRecord;
use crate::state::Projections;

use super::command::{single, Decision};
use super::guards::out_of_order;

pub(super) fn send_message(
    state: &Projections,
    sender: SessionId,
    target: SessionId,
    message_id: MessageId,
    content: Vec<ContentBlock>,
    delivery: MessageDelivery,
) -> Result<Decision, SubagentError> {
    let route = route_message(state, sender, target)?;
    let source = MessageSource::AgentMessage {
        sender_session_id: sender,
    };
    Ok(accept(route, target, message_id, source, delivery, content))
}

/// The events of a message accepted into `target`'s inbox, followed by the
/// new activation's request when `route` cold-resumes it.
fn accept(
    route: Route,
    target: SessionId,
    message_id: MessageId,
    source: MessageSource,
    delivery: MessageDelivery,
    content: Vec<ContentBlock>,
) -> Decision {
    let mut events = vec![Event::MessageAccepted {
        message_id,
        source,
        delivery,
        content,
    }];
    if let Some(epoch) = route.resume_epoch {
        events.push(Event::ActivationRequested {
            epoch,
            delivery: Delivery::Parent,
            output_schema: None,
            requested_by: None,
        });
    }
    single(StreamId::Session(target), events)
}

/// The spec's `prompt`: a browser-authored message to `child` through its
/// direct parent. A retry of an accepted request records nothing (the
/// runtime answers it with [`prompt_receipt`]); the same request id with
/// another body is refused.
#[allow(clippy::too_many_arguments)] // One command's fields, passed through.
pub(super) fn prompt(
    state: &Projections,
    parent: SessionId,
    child: SessionId,
    request_id: String,
    zone: Option<String>,
    message_id: MessageId,
    content: Vec<ContentBlock>,
    delivery: MessageDelivery,
) -> Result<Decision, SubagentError> {
    let digest = prompt_digest(delivery, zone.as_deref(), &content);
    if prompt_receipt(state, parent, child, &request_id, &digest)?.is_some() {
        return Ok(Vec::new());
    }
    let route = route_prompt(state, parent, child, &request_id)?;
    let source = MessageSource::Browser { request_id, zone };
    Ok(accept(route, child, message_id, source, delivery, content))
}

/// The receipt of the prompt `child` accepted under `request_id` through
/// `parent`, if any: its message id when `digest` ([`prompt_digest`])
/// matches what it carried. `None` when `parent` is not `child`'s direct
/// parent: a retry answers only the address that made the request (and
/// `decide` then refuses the address).
///
/// # Errors
/// `gateway/bad-request` when the id was used for another body.
pub fn prompt_receipt(
    state: &Projections,
    parent: SessionId,
    child: SessionId,
    request_id: &str,
    digest: &[u8; 32],
) -> Result<Option<MessageId>, SubagentError> {
    let is_parent = state
        .sessions
        .get(&child)
        .is_some_and(|record| record.parent == Some(parent));
    let first = state
        .inboxes
        .get(&child)
        .and_then(|inbox| inbox.prompts.get(request_id));
    let Some(first) = first.filter(|_| is_parent) else {
        return Ok(None);
    };
    if first.digest != *digest {
        return Err(SubagentError::BadRequest(format!(
            "requestId {request_id:?} was already used for another prompt to {child}"
        )));
    }
    Ok(Some(first.message_id))
}

/// Whether a new prompt under `request_id` may travel from `parent` to
/// `child` now, and how: `parent` must be `child`'s direct parent, the
/// request id unused, and the message deliverable ([`route_message`]).
pub(crate) fn route_prompt(
    state: &Projections,
    parent: SessionId,
    child: SessionId,
    request_id: &str,
) -> Result<Route, SubagentError> {
    let is_parent = state
        .sessions
        .get(&child)
        .is_some_and(|record| record.parent == Some(parent));
    if !is_parent {
        return Err(SubagentError::Unauthorized(format!(
            "{parent} is not the direct parent of {child}"
        )));
    }
    if state
        .inboxes
        .get(&child)
        .is_some_and(|inbox| inbox.prompts.contains_key(request_id))
    {
        return Err(SubagentError::BadRequest(format!(
            "requestId {request_id:?} was already used for a prompt to {child}"
        )));
    }
    route_message(state, parent, child)
}

pub(super) fn interrupt(
    state: &Projections,
    target: SessionId,
    authority: &InterruptAuthority,
) -> Result<Decision, SubagentError> {
    let Some(record) = state.sessions.get(&target) else {
        return Ok(Vec::new());
    };
    if !interrupt_authorized(state, record, authority) {
        return Err(SubagentError::Unauthorized(format!(
            "the authority does not own {target}"
        )));
    }
    if !runs_live_work(state, target) {
        return Ok(Vec::new());
    }
    Ok(single(
        StreamId::Session(target),
        vec![Event::InterruptRequested {
            target,
            authority: authority.clone(),
        }],
    ))
}

/// A drain closes admission below `parent` (nothing when already closed),
/// recorded in the deciding host's `home` stream.
pub(super) fn close_admission(state: &Projections, home: StreamId, parent: SessionId) -> Decision {
    if state.admission_closed.contains(&parent) {
        return Vec::new();
    }
    single(home, vec![Event::AdmissionClosed { parent }])
}

/// `parent` left the registry: its cutoff ends (nothing when open),
/// recorded in the deciding host's `home` stream.
pub(super) fn reopen_admission(state: &Projections, home: StreamId, parent: SessionId) -> Decision {
    if !state.admission_closed.contains(&parent) {
        return Vec::new();
    }
    single(home, vec![Event::AdmissionReopened { parent }])
}

/// Whether admission is closed below `session` or any of its ancestors.
pub(crate) fn admission_closed_above(state: &Projections, session: SessionId) -> Option<SessionId> {
    state
        .lineage(session)
        .map(|record| record.id)
        .find(|id| state.admission_closed.contains(id))
}

/// How an accepted agent message travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Route {
    /// The target is the sender's direct child (else its direct parent).
    pub(crate) to_child: bool,
    /// The epoch a cold resume of the target requests, when it has no live
    /// activation.
    pub(crate) resume_epoch: Option<u64>,
}

/// Whether `sender` may message `target` now, and how the message travels.
pub(crate) fn route_message(
    state: &Projections,
    sender: SessionId,
    target: SessionId,
) -> Result<Route, SubagentError> {
    let sender_record = state
        .sessions
        .get(&sender)
        .ok_or_else(|| SubagentError::Unauthorized(format!("unknown sender {sender}")))?;
    let target_record = state
        .sessions
        .get(&target)
        .ok_or_else(|| SubagentError::Unauthorized(format!("unknown target {target}")))?;
    let to_child = target_record.parent == Some(sender);
    let to_parent = sender_record.parent == Some(target);
    if !to_child && !to_parent {
        return Err(SubagentError::Unauthorized(format!(
            "{sender} and {target} are not adjacent"
        )));
    }
    if target_record.external {
        return Err(SubagentError::NotResumable(format!(
            "{target} is an external execution and accepts no follow-ups"
        )));
    }
    if !target_record.is_resumable() {
        return Err(SubagentError::NotResumable(format!(
            "{target} cannot be interpreted by this version"
        )));
    }
    let activation = state.activations.get(&target);
    let live = activation.and_then(|a| a.live.as_ref());
    if live.is_some_and(LiveActivation::captures_structured_output) {
        return Err(SubagentError::DeliveryUnavailable(format!(
            "{target} is capturing structured output; its input is closed"
        )));
    }
    // A child with no live activation is cold-resumed; a root's inbox is read
    // by its host.
    let resume_epoch = if cold_resumes(state, sender, target) {
        if let Some(closed) = admission_closed_above(state, sender) {
            return Err(SubagentError::AdmissionClosed { below: closed });
        }
        let epoch = activation
            .map_or(0, |a| a.epoch)
            .checked_add(1)
            .ok_or_else(|| out_of_order(target, OutOfOrder::Exhausted("activation epoch")))?;
        Some(epoch)
    } else {
        None
    };
    Ok(Route {
        to_child,
        resume_epoch,
    })
}

/// Whether a message from `sender` to `target` cold-resumes it: `target`
/// is `sender`'s direct child and has no live activation. The one statement
/// of the rule: `route_message` applies it, and the runtime asks it to
/// reserve capacity before it sends.
#[must_use]
pub fn cold_resumes(state: &Projections, sender: SessionId, target: SessionId) -> bool {
    state
        .sessions
        .get(&target)
        .is_some_and(|record| record.parent == Some(sender))
        && state
            .activations
            .get(&target)
            .is_none_or(|activation| activation.live.is_none())
}

/// Whether `authority` may interrupt `target`: its direct parent as a
/// user, or a live ancestor.
pub(crate) fn interrupt_authorized(
    state: &Projections,
    target: &SessionRecord,
    authority: &InterruptAuthority,
) -> bool {
    match authority {
        InterruptAuthority::User { parent_session_id } => target.parent == Some(*parent_session_id),
        InterruptAuthority::Ancestor { agent_session_id } => state
            .ancestors(target.id)
            .any(|ancestor| ancestor.id == *agent_session_id),
    }
}

/// Whether `target` has work an interrupt stops: a running turn of a live
/// activation, or a started external run.
pub(crate) fn runs_live_work(state: &Projections, target: SessionId) -> bool {
    state
        .activations
        .get(&target)
        .is_some_and(|a| a.live.is_some() && a.running_turn.is_some())
        || state
            .runs
            .get(&target)
            .is_some_and(|run| run.phase == RunPhase::Started)
}
