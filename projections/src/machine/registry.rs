//! Roots and providers: opening a root, taking one back after a restart,
//! registering and removing providers.

use subagent_core::{AgentOptions, Event, SessionId, StreamId, SubagentError};

use crate::state::Projections;

use super::command::{single, Decision};
use super::guards::{check_registration, new_session, registered};

/// Records the host's own root session.
pub(super) fn open_root(
    state: &Projections,
    session: SessionId,
    label: String,
    agent_options: Option<AgentOptions>,
) -> Result<Decision, SubagentError> {
    new_session(state, session)?;
    if let Some(options) = &agent_options {
        options.validate()?;
    }
    Ok(single(
        StreamId::Session(session),
        vec![Event::root_created_with(
            session,
            label,
            agent_options.as_ref(),
        )],
    ))
}

/// Checks that `session` is a root a host may take back; records nothing.
pub(super) fn reopen_root(
    state: &Projections,
    session: SessionId,
) -> Result<Decision, SubagentError> {
    let record = state.sessions.get(&session).ok_or_else(|| {
        SubagentError::ParentUnavailable(format!("unknown root session {session}"))
    })?;
    if record.parent.is_some() {
        return Err(SubagentError::Unauthorized(format!(
            "{session} is a child session; only a root is held by the host"
        )));
    }
    Ok(Vec::new())
}

/// Records a well-formed registration under a free name.
pub(super) fn register_provider(
    state: &Projections,
    registration: Event,
) -> Result<Decision, SubagentError> {
    check_registration(state, &registration)?;
    Ok(single(StreamId::Runtime, vec![registration]))
}

/// Ends a registered provider's registration.
pub(super) fn remove_provider(
    state: &Projections,
    name: String,
) -> Result<Decision, SubagentError> {
    registered(state, &name)?;
    Ok(single(
        StreamId::Runtime,
        vec![Event::ProviderRemoved { name }],
    ))
}
