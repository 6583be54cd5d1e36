//! Who decides for a tree, and with which provider registry: the
//! [`TreeOwner`] projection of `TreeAcquired`, and the registry lookups the
//! state machine and the history check share.
//!
//! A single-writer log has no owners: every tree is decided by its one
//! runtime, with the registry of the `runtime` stream. On a shared log each
//! host incarnation records its registry in its own `host-<uuid>` stream,
//! and a tree is decided by the host whose `TreeAcquired` its root's stream
//! recorded last, with that host's registry. A tree's owner therefore is a
//! fact of the log, so `verify` checks a start against the registry of the
//! host that held the tree when it was recorded, and every takeover is an
//! auditable transition.

use serde::{Deserialize, Serialize};
use subagent_core::{HostId, SessionId, StreamId, SubagentError};

use crate::state::{Projections, ProviderRecord};

/// The host of a shared log that holds a tree, as its last `TreeAcquired`
/// recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TreeOwner {
    /// The host incarnation that decides for the tree.
    pub host: HostId,
    /// The name its lease is held under.
    pub holder: String,
    /// The fencing token every append for the tree presents.
    pub fence: u64,
}

/// The claim a host of a shared log records when it takes a tree: it
/// becomes the tree's [`TreeOwner`].
pub type TreeClaim = TreeOwner;

impl Projections {
    /// The root of `session`'s tree; `None` for an unknown session.
    #[must_use]
    pub fn root_of(&self, session: SessionId) -> Option<SessionId> {
        self.lineage(session).last().map(|record| record.id)
    }

    /// The host that holds `session`'s tree; `None` when no host of a
    /// shared log took it (a single-writer log's trees).
    #[must_use]
    pub fn owner_of(&self, session: SessionId) -> Option<&TreeOwner> {
        if self.owners.is_empty() {
            return None;
        }
        self.owners.get(&self.root_of(session)?)
    }

    /// The provider registry a host decides with: the `runtime` stream's
    /// for a single-writer runtime (`None`), else the host's own.
    #[must_use]
    pub fn registry(&self, host: Option<HostId>) -> &[ProviderRecord] {
        match host {
            None => &self.providers,
            Some(host) => self.host_providers.get(&host).map_or(&[], Vec::as_slice),
        }
    }

    /// The registry of the host stream `stream` (the `runtime` stream's
    /// for it, nothing for a session stream).
    #[must_use]
    pub fn registry_of_stream(&self, stream: StreamId) -> &[ProviderRecord] {
        match stream {
            StreamId::Runtime => &self.providers,
            StreamId::Host(host) => self.registry(Some(host)),
            StreamId::Session(_) => &[],
        }
    }

    /// The registry a start below `parent` resolves its provider in: that
    /// of the host holding `parent`'s tree.
    #[must_use]
    pub fn registry_for(&self, parent: SessionId) -> &[ProviderRecord] {
        self.registry(self.owner_of(parent).map(|owner| owner.host))
    }

    pub(crate) fn registry_mut(&mut self, stream: StreamId) -> Option<&mut Vec<ProviderRecord>> {
        match stream {
            StreamId::Runtime => Some(&mut self.providers),
            StreamId::Host(host) => Some(self.host_providers.entry(host).or_default()),
            StreamId::Session(_) => None,
        }
    }
}

/// The stream a host records its host-level facts in (registrations,
/// admission cutoffs, recovery markers): `runtime` for a single-writer
/// runtime, its own `host-<uuid>` on a shared log.
#[must_use]
pub fn home_stream(host: Option<HostId>) -> StreamId {
    host.map_or(StreamId::Runtime, StreamId::Host)
}

/// The refusal of a command for a tree `acting` does not hold.
pub(crate) fn elsewhere(root: SessionId, owner: Option<&TreeOwner>) -> SubagentError {
    SubagentError::TreeElsewhere {
        root,
        holder: owner.map(|owner| owner.holder.clone()),
    }
}
