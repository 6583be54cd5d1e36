//! Key and value layouts of the RocksDB column families.
//!
//! | family      | key                                   | value                                   |
//! |-------------|---------------------------------------|-----------------------------------------|
//! | `log`       | position, u64 big-endian              | encoded record (`crate::record`)         |
//! | `streams`   | stream name, `0x00`, version u64 BE   | position u64 BE                          |
//! | `event_ids` | event id, 16 bytes                    | position u64 BE, version u64 BE, stream  |
//! | `meta`      | `head`, `format`, `checkpoint/<name>` | u64 BE, u64 BE, checkpoint bytes         |
//! | `blobs`     | SHA-256 of the value, 32 bytes        | attachment bytes                         |
//!
//! Big-endian integers make RocksDB's bytewise order the numeric order, so a
//! forward iterator walks positions and versions in order.

use subagent_core::{EventId, StreamId, STREAM_NAME_MAX};

use crate::append_check::IdLocation;

pub(crate) const CF_LOG: &str = "log";
pub(crate) const CF_STREAMS: &str = "streams";
pub(crate) const CF_EVENT_IDS: &str = "event_ids";
pub(crate) const CF_META: &str = "meta";
pub(crate) const CF_BLOBS: &str = "blobs";
pub(crate) const ALL_FAMILIES: [&str; 5] = [CF_LOG, CF_STREAMS, CF_EVENT_IDS, CF_META, CF_BLOBS];

/// `meta` key of the last durable position (written in every group commit).
pub(crate) const META_HEAD: &[u8] = b"head";
/// `meta` key of the on-disk format version.
pub(crate) const META_FORMAT: &[u8] = b"format";
/// The on-disk format of a RocksDB log directory this build writes and
/// reads (its `meta` column family records it; another is refused with
/// [`StoreError::UnsupportedFormat`](crate::StoreError::UnsupportedFormat)).
pub const FORMAT_VERSION: u64 = 1;

/// `meta` key of the projection checkpoint called `name`.
pub(crate) fn checkpoint_key(name: &str) -> Vec<u8> {
    format!("checkpoint/{name}").into_bytes()
}

pub(crate) fn position_key(position: u64) -> [u8; 8] {
    position.to_be_bytes()
}

pub(crate) fn decode_u64(bytes: &[u8]) -> Option<u64> {
    bytes.try_into().ok().map(u64::from_be_bytes)
}

/// The prefix shared by every key of `stream` in the `streams` family.
pub(crate) fn stream_prefix(stream: &StreamId) -> Vec<u8> {
    let name = stream.name();
    let mut key = Vec::with_capacity(name.as_bytes().len() + 1);
    key.extend_from_slice(name.as_bytes());
    key.push(0);
    key
}

/// The `streams` key of `stream` at `version`, built on the stack: one is
/// written for every appended event.
pub(crate) fn stream_key(stream: &StreamId, version: u64) -> StackBytes<{ STREAM_NAME_MAX + 9 }> {
    let mut key = StackBytes::new();
    key.extend(stream.name().as_bytes());
    key.extend(&[0]);
    key.extend(&version.to_be_bytes());
    key
}

/// Up to `N` bytes on the stack: a key or value whose longest form is
/// known, so the append path builds it without an allocation.
pub(crate) struct StackBytes<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> StackBytes<N> {
    fn new() -> Self {
        StackBytes {
            bytes: [0; N],
            len: 0,
        }
    }

    /// Appends `more`. Callers size `N` for their longest form; more than
    /// `N` bytes is a bug of this module, caught by the tests below.
    fn extend(&mut self, more: &[u8]) {
        let end = self.len + more.len();
        self.bytes[self.len..end].copy_from_slice(more);
        self.len = end;
    }
}

impl<const N: usize> AsRef<[u8]> for StackBytes<N> {
    fn as_ref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl<const N: usize> std::ops::Deref for StackBytes<N> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_ref()
    }
}

/// The stream and version of a `streams` key; `None` when it does not decode.
pub(crate) fn decode_stream_key(key: &[u8]) -> Option<(StreamId, u64)> {
    let split = key.len().checked_sub(9)?;
    let (name, rest) = key.split_at(split);
    if rest[0] != 0 {
        return None;
    }
    let stream = std::str::from_utf8(name).ok()?.parse().ok()?;
    Some((stream, decode_u64(&rest[1..])?))
}

pub(crate) fn event_id_key(id: &EventId) -> [u8; 16] {
    *id.as_uuid().as_bytes()
}

/// The event id of an `event_ids` key; `None` when it does not decode.
pub(crate) fn decode_event_id_key(key: &[u8]) -> Option<EventId> {
    let bytes: [u8; 16] = key.try_into().ok()?;
    Some(EventId::from_uuid(uuid::Uuid::from_bytes(bytes)))
}

/// The `event_ids` value of `location`, built on the stack.
pub(crate) fn encode_location(location: &IdLocation) -> StackBytes<{ 16 + STREAM_NAME_MAX }> {
    let mut value = StackBytes::new();
    value.extend(&location.position.to_be_bytes());
    value.extend(&location.version.to_be_bytes());
    value.extend(location.stream.name().as_bytes());
    value
}

pub(crate) fn decode_location(bytes: &[u8]) -> Option<IdLocation> {
    let position = decode_u64(bytes.get(..8)?)?;
    let version = decode_u64(bytes.get(8..16)?)?;
    let stream = std::str::from_utf8(bytes.get(16..)?).ok()?.parse().ok()?;
    Some(IdLocation {
        stream,
        position,
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use subagent_core::SessionId;

    #[test]
    fn stream_keys_sort_by_version_within_a_stream() {
        let stream = StreamId::Session(SessionId::new());
        assert!(*stream_key(&stream, 2) < *stream_key(&stream, 256));
        assert!(stream_key(&stream, 256).starts_with(&stream_prefix(&stream)));
        assert!(!stream_key(&StreamId::Runtime, 1).starts_with(&stream_prefix(&stream)));
    }

    #[test]
    fn the_longest_keys_fit_on_the_stack_and_lay_out_as_documented() {
        let session = SessionId::new();
        let stream = StreamId::Session(session);
        let name = format!("session-{}", session.as_uuid());
        assert_eq!(
            name.len(),
            STREAM_NAME_MAX,
            "a session's name is the longest"
        );
        let key = stream_key(&stream, 0x0102_0304_0506_0708);
        let mut expected = name.clone().into_bytes();
        expected.push(0);
        expected.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&*key, expected.as_slice());
        let location = IdLocation {
            stream,
            position: u64::MAX,
            version: 3,
        };
        let value = encode_location(&location);
        assert_eq!(value.len(), 16 + STREAM_NAME_MAX);
        assert_eq!(&value[..8], &u64::MAX.to_be_bytes());
        assert_eq!(&value[8..16], &3u64.to_be_bytes());
        assert_eq!(&value[16..], name.as_bytes());
        let runtime = stream_key(&StreamId::Runtime, 1);
        assert_eq!(&*runtime, b"runtime\0\0\0\0\0\0\0\0\x01");
    }

    #[test]
    fn index_keys_decode_back_and_garbage_is_refused() {
        let stream = StreamId::Session(SessionId::new());
        assert_eq!(
            decode_stream_key(&stream_key(&stream, 7)),
            Some((stream, 7))
        );
        assert_eq!(
            decode_stream_key(&stream_key(&StreamId::Runtime, u64::MAX)),
            Some((StreamId::Runtime, u64::MAX))
        );
        assert_eq!(decode_stream_key(b"short"), None);
        assert_eq!(decode_stream_key(b"runtime\x01\0\0\0\0\0\0\0\x01"), None);
        let id = EventId::new();
        assert_eq!(decode_event_id_key(&event_id_key(&id)), Some(id));
        assert_eq!(decode_event_id_key(b"0123456789abcde"), None);
    }

    #[test]
    fn locations_round_trip_and_garbage_is_refused() {
        let location = IdLocation {
            stream: StreamId::Session(SessionId::new()),
            position: 9,
            version: 4,
        };
        assert_eq!(decode_location(&encode_location(&location)), Some(location));
        assert_eq!(decode_location(b"short"), None);
    }
}
