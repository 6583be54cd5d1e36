//! Live agent handles ([`LiveAgent`]) and the host's roots: opening one,
//! taking one back after a restart, closing one, and checking a handle.

use subagent_core::{AgentOptions, SessionId, SubagentError};
use subagent_projections::Command;
use tracing::Instrument;

use super::{lock, SubagentRuntime};

/// An opaque live agent handle: the authority to delegate from a session.
/// Issued for host roots by [`SubagentRuntime::open_root`] and for published
/// local children by [`SubagentActivation::agent`](crate::SubagentActivation::agent);
/// refused once the root is closed or the child's activation is disposed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LiveAgent {
    pub(crate) session: SessionId,
}

impl LiveAgent {
    pub(crate) fn new(session: SessionId) -> Self {
        LiveAgent { session }
    }

    /// The session this handle speaks for.
    #[must_use]
    pub fn session(&self) -> SessionId {
        self.session
    }
}

impl SubagentRuntime {
    /// Records a new host root session and returns its live handle. To take
    /// an existing root back (after a restart), use
    /// [`reopen_root`](Self::reopen_root).
    ///
    /// # Errors
    /// `subagent/closed`; `gateway/internal` on storage failure.
    pub async fn open_root(&self, label: &str) -> Result<LiveAgent, SubagentError> {
        self.open_root_with(label, None).await
    }

    /// [`open_root`](Self::open_root) for a root agent running with
    /// `agent_options`, which its local children inherit (a start's own
    /// options and a provider's route defaults merge over them).
    ///
    /// # Errors
    /// `subagent/closed`; `gateway/bad-request` for malformed options;
    /// `gateway/internal` on storage failure.
    pub async fn open_root_with(
        &self,
        label: &str,
        agent_options: Option<AgentOptions>,
    ) -> Result<LiveAgent, SubagentError> {
        self.ensure_open()?;
        let session = SessionId::new();
        // On a shared log, the new tree's lease first: its first append
        // presents the lease's fence.
        let claim = self.claim_new_root(session).await?;
        // Recorded in the root's own span, which every activation of its
        // tree is parented on (its trace is the tree's one trace).
        self.inner
            .engine
            .commit(Command::OpenRoot {
                session,
                label: label.to_owned(),
                agent_options,
                claim,
            })
            .instrument(crate::telemetry::create_agent_span(session, label))
            .await?;
        lock(&self.inner.roots).insert(session);
        Ok(LiveAgent { session })
    }

    /// Takes an existing root session back: after a restart, the host
    /// re-opens the root it had and, through the returned handle, messages,
    /// drains, lists and waits for the children that root delegated to
    /// (an inactive child is cold-resumed by a message, as always).
    ///
    /// The log is the authority: `session` must be recorded as a root. Its
    /// options and catalog are the durable ones. A root is held by one
    /// handle holder at a time: within this runtime, a root already held
    /// (opened or reopened, and not closed since) is refused; across
    /// processes, the log's directory lock already keeps a second runtime
    /// off the same log. Holding is not recorded (ARCHITECTURE.md says why).
    ///
    /// # Errors
    /// `subagent/closed`; `subagent/parent-unavailable` for a session the log
    /// does not know; `subagent/unauthorized` for a child session (its
    /// authority comes from its own activation); `subagent/root-held` when
    /// this runtime already holds it.
    pub async fn reopen_root(&self, session: SessionId) -> Result<LiveAgent, SubagentError> {
        self.ensure_open()?;
        if self.shared().is_some() {
            // Checked before the take, so an unknown or child session
            // takes no lease.
            self.inner
                .engine
                .commit(Command::ReopenRoot { session })
                .await?;
            self.take_tree(session).await?;
        }
        self.inner
            .engine
            .commit(Command::ReopenRoot { session })
            .await?;
        if !lock(&self.inner.roots).insert(session) {
            return Err(SubagentError::RootHeld(session));
        }
        Ok(LiveAgent { session })
    }

    /// Closes a root: its handle is refused from now on, and a drain's
    /// admission cutoff below it ends. It can be taken back with
    /// [`reopen_root`](Self::reopen_root).
    ///
    /// # Errors
    /// `subagent/unauthorized` when `root` is not a root this runtime holds
    /// (a child's handle, or a root already closed); `subagent/closed`;
    /// `gateway/internal` on storage failure.
    pub async fn close_root(&self, root: &LiveAgent) -> Result<(), SubagentError> {
        self.ensure_open()?;
        if !lock(&self.inner.roots).remove(&root.session) {
            return Err(SubagentError::Unauthorized(format!(
                "{} is not a root this runtime holds",
                root.session
            )));
        }
        self.inner
            .engine
            .commit(Command::ReopenAdmission {
                parent: root.session,
            })
            .await?;
        Ok(())
    }

    /// Whether `session` has a live agent here: a root held open, or a
    /// child whose driver runs and was not told to stop.
    pub(crate) fn is_live(&self, session: SessionId) -> bool {
        lock(&self.inner.roots).contains(&session)
            || lock(&self.inner.drivers)
                .get(&session)
                .is_some_and(|driver| !driver.stop.is_cancelled())
    }

    /// The roots this runtime holds open, in id order.
    pub(crate) fn held_roots(&self) -> Vec<SessionId> {
        let mut roots: Vec<SessionId> = lock(&self.inner.roots).iter().copied().collect();
        roots.sort();
        roots
    }

    /// Whether `agent` may act here: `subagent/closed` once closed;
    /// `subagent/tree-elsewhere` when another host of a shared log holds
    /// the agent's tree (naming the holder once the log says who took it);
    /// else `subagent/unauthorized` when it is not live here.
    pub(crate) fn authorize(&self, agent: &LiveAgent) -> Result<(), SubagentError> {
        self.ensure_open()?;
        if self.is_live(agent.session) {
            return Ok(());
        }
        self.refuse_tree_elsewhere(agent.session)?;
        Err(SubagentError::Unauthorized(format!(
            "no live agent {}",
            agent.session
        )))
    }

    /// `subagent/tree-elsewhere` when `session`'s tree is held by another
    /// host of a shared log (naming the holder once the log says who took
    /// it); `Ok` otherwise, including for an unknown session and on a
    /// single-writer log. A gateway asks this before it answers that it
    /// does not hold a root.
    ///
    /// # Errors
    /// `subagent/tree-elsewhere`.
    pub fn refuse_tree_elsewhere(&self, session: SessionId) -> Result<(), SubagentError> {
        let state = self.inner.engine.state();
        let Some(root) = state.root_of(session) else {
            return Ok(());
        };
        let holder = state.owner_of(session).map(|owner| owner.holder.as_str());
        match self.tree_elsewhere(root, holder) {
            Some(elsewhere) => Err(elsewhere),
            None => Ok(()),
        }
    }
}
