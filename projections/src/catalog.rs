//! The parent-owned catalog: every `ChildCataloged` of a parent's stream, in
//! parent event order. Membership at creation only, never status.

use serde::{Deserialize, Serialize};
use subagent_core::{SessionId, SessionMode};

/// One raw catalog fact, as recorded in the parent's stream. Its interpreted
/// mode (which may be `unknown`) is computed when listing, from the child's
/// session record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogFact {
    /// The child.
    pub child: SessionId,
    /// Creation label.
    pub label: String,
    /// Creating provider.
    pub provider: String,
    /// Mode recorded at creation.
    pub mode: SessionMode,
    /// External one-shot execution.
    pub external: bool,
}
