//! [`Fault`]: what an infrastructure fault ([`SubagentError::Internal`](crate::SubagentError::Internal))
//! says, and the error that caused it.

use std::sync::Arc;

/// What an infrastructure fault ([`SubagentError::Internal`](crate::SubagentError::Internal)) says, and the
/// error that caused it when there was one.
///
/// Two faults are equal when their texts are: the cause is kept for hosts
/// that inspect it (a gateway mapping a `StoreError` to a status, a log
/// line with the whole chain), not for comparison.
#[derive(Clone, Debug)]
pub struct Fault {
    pub(super) text: String,
    pub(super) cause: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Fault {
    /// A fault described by `text` alone (no underlying error).
    #[must_use]
    pub fn from_text(text: impl Into<String>) -> Fault {
        Fault {
            text: text.into(),
            cause: None,
        }
    }

    /// The same fault, its cause kept, saying `text` instead: for a
    /// caller who may know that it failed but not why.
    #[must_use]
    pub fn with_text(self, text: impl Into<String>) -> Fault {
        Fault {
            text: text.into(),
            cause: self.cause,
        }
    }

    /// The fault's text, which names the cause's whole chain.
    #[must_use]
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The error that caused the fault, when it came from one.
    #[must_use]
    pub fn cause(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.cause.as_deref()
    }
}

impl PartialEq for Fault {
    fn eq(&self, other: &Fault) -> bool {
        self.text == other.text
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Fault {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|cause| cause as &(dyn std::error::Error + 'static))
    }
}
