//! Walks up the session tree: a session's lineage (itself, then each
//! ancestor up to its root) and what it implies (the tool restrictions that
//! apply). Every walk up the tree in the workspace goes through here.

use subagent_core::{SessionId, ToolRestriction};

use crate::sessions::SessionRecord;
use crate::state::Projections;

impl Projections {
    /// `session`'s record, then its parent's, and so on up to its root;
    /// nothing for an unknown session. Every walk up the tree goes through
    /// here. It takes at most as many steps as there are sessions, so even
    /// a parent cycle (which no admissible history holds) ends.
    pub fn lineage(&self, session: SessionId) -> impl Iterator<Item = &SessionRecord> + '_ {
        std::iter::successors(self.sessions.get(&session), |record| {
            record.parent.and_then(|parent| self.sessions.get(&parent))
        })
        .take(self.sessions.len())
    }

    /// `session`'s ancestors, nearest first: [`Self::lineage`] without
    /// `session` itself.
    pub fn ancestors(&self, session: SessionId) -> impl Iterator<Item = &SessionRecord> + '_ {
        self.lineage(session).skip(1)
    }

    /// The tool restrictions that apply to `session`: its own, then each
    /// ancestor's. A tool is visible and executable only when every one of
    /// them permits it ([`ToolRestriction::permits_in`]).
    #[must_use]
    pub fn tool_lineage(&self, session: SessionId) -> Vec<&ToolRestriction> {
        self.lineage(session)
            .filter_map(|record| {
                record
                    .descriptor
                    .as_ref()
                    .and_then(|descriptor| descriptor.tool_filter.as_ref())
            })
            .collect()
    }
}
