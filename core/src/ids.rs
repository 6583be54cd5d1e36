//! Identities: the UUID v7 newtypes that name sessions, messages, runs and events.
//!
//! Every id serializes as its canonical hyphenated string, so logs and
//! published contracts read the same. New ids are UUID v7 (time-ordered), which
//! keeps RocksDB keys that embed them roughly append-ordered.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::SubagentError;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
            /// A fresh, time-ordered (UUID v7) id.
            #[must_use]
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }

            /// Wraps an existing UUID (any version) without checking it.
            #[must_use]
            pub const fn from_uuid(uuid: Uuid) -> Self {
                Self(uuid)
            }

            /// The underlying UUID.
            #[must_use]
            pub const fn as_uuid(&self) -> &Uuid {
                &self.0
            }

            /// The canonical string form on the stack: what `Display`
            /// writes, without the formatter.
            #[must_use]
            pub fn text(&self) -> IdText {
                IdText::of(&self.0)
            }

            /// Parses the canonical string form.
            ///
            /// # Errors
            /// `gateway/bad-request` when `text` is empty or not a UUID.
            pub fn parse(text: &str) -> Result<Self, SubagentError> {
                if text.is_empty() {
                    return Err(SubagentError::BadRequest(format!("empty {}", $what)));
                }
                Uuid::parse_str(text)
                    .map(Self)
                    .map_err(|_| SubagentError::BadRequest(format!("malformed {}: {text:?}", $what)))
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }

        impl FromStr for $name {
            type Err = SubagentError;
            fn from_str(text: &str) -> Result<Self, Self::Err> {
                Self::parse(text)
            }
        }
    };
}

/// An id's canonical string form (hyphenated, lower case), held on the
/// stack: for hot paths that hand an id to a span or a buffer as text,
/// where `Display` would go through the formatter.
#[derive(Clone, Copy)]
pub struct IdText([u8; uuid::fmt::Hyphenated::LENGTH]);

impl IdText {
    /// `id`'s text.
    #[must_use]
    pub fn of(id: &Uuid) -> IdText {
        let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
        id.hyphenated().encode_lower(&mut text);
        IdText(text)
    }

    /// The text, ASCII by construction.
    #[must_use]
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// The text's bytes, without the UTF-8 check `as_str` makes: what a
    /// writer of bytes wants.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for IdText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

uuid_id!(
    /// The durable identity of a session: a root agent, a continuable child, or
    /// an external one-shot child. Stable across activations.
    SessionId,
    "session id"
);
uuid_id!(
    /// The identity of one message accepted into a session's inbox.
    MessageId,
    "message id"
);
uuid_id!(
    /// Identifies one published run (a one-shot run or a continuable
    /// activation epoch) across its `subagent/start` and `subagent/end` pair.
    SubagentRunId,
    "run id"
);
uuid_id!(
    /// The identity of one appended event; re-appending it is idempotent.
    EventId,
    "event id"
);
uuid_id!(
    /// One incarnation of a host runtime on a shared log: the name of its
    /// `host-<uuid>` stream, where its provider registry and admission
    /// cutoffs are recorded. A host that restarts is a new incarnation
    /// with an empty registry.
    HostId,
    "host id"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ids_text_is_what_display_writes() {
        for uuid in [
            Uuid::nil(),
            Uuid::max(),
            Uuid::now_v7(),
            Uuid::from_u128(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210),
        ] {
            let id = SessionId::from_uuid(uuid);
            assert_eq!(id.text().as_str(), id.to_string());
            assert_eq!(id.text().as_bytes(), id.to_string().as_bytes());
            assert_eq!(format!("{:?}", id.text()), uuid.to_string());
        }
    }

    #[test]
    fn ids_serialize_as_plain_strings_and_round_trip() {
        let id = SessionId::new();
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, format!("\"{id}\""));
        let back: SessionId = serde_json::from_str(&json).unwrap();
        assert_eq!(back, id);
    }

    #[test]
    fn new_ids_are_version_7_and_time_ordered() {
        let first = MessageId::new();
        let second = MessageId::new();
        assert_eq!(first.as_uuid().get_version_num(), 7);
        assert!(first < second);
    }

    #[test]
    fn parse_rejects_empty_and_malformed_text_with_bad_request() {
        for text in ["", "not-a-uuid", "1234"] {
            let err = SessionId::parse(text).unwrap_err();
            assert_eq!(err.code().as_str(), "gateway/bad-request", "{text:?}");
        }
    }
}
