//! Roots and providers: opening a root, taking one back after a restart,
//! registering and removing providers.

use subagent_core::{AgentOptions, Event, HostId, SessionId, StreamId, SubagentError};

use crate::ownership::{home_stream, TreeClaim};
use crate::state::Projections;

use super::command::{single, Decision};
use super::guards::{check_registration, new_session, registered, valid_label};

/// Records the host's own root session; on a shared log with the opening
/// host's claim on its tree (`claim`, required there).
pub(super) fn open_root(
    state: &Projections,
    acting: Option<HostId>,
    session: SessionId,
    label: String,
    agent_options: Option<AgentOptions>,
    claim: Option<TreeClaim>,
) -> Result<Decision, SubagentError> {
    new_session(state, session)?;
    valid_label(&label)?;
    if let Some(options) = &agent_options {
        options.validate()?;
    }
    if claim.as_ref().map(|claim| claim.host) != acting {
        return Err(SubagentError::BadRequest(
            "a root of a shared log is opened with its host's claim, and only there".into(),
        ));
    }
    let mut events = vec![Event::root_created_with(
        session,
        label,
        agent_options.as_ref(),
    )];
    events.extend(claim.map(acquired));
    Ok(single(StreamId::Session(session), events))
}

/// The `TreeAcquired` that records `claim`.
pub(super) fn acquired(claim: TreeClaim) -> Event {
    Event::TreeAcquired {
        host: claim.host,
        holder: claim.holder,
        fence: claim.fence,
    }
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

/// Records a well-formed registration under a name free in the acting
/// host's registry, in its home stream.
pub(super) fn register_provider(
    state: &Projections,
    acting: Option<HostId>,
    registration: Event,
) -> Result<Decision, SubagentError> {
    check_registration(state.registry(acting), &registration)?;
    Ok(single(home_stream(acting), vec![registration]))
}

/// Ends a registration of the acting host's.
pub(super) fn remove_provider(
    state: &Projections,
    acting: Option<HostId>,
    name: String,
) -> Result<Decision, SubagentError> {
    registered(state.registry(acting), &name)?;
    Ok(single(
        home_stream(acting),
        vec![Event::ProviderRemoved { name }],
    ))
}
