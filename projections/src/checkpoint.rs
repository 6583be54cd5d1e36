//! Versioned checkpoint encoding of [`Projections`].
//!
//! A checkpoint (version 5; versions 3 and 4 had the same frame) is a binary
//! frame, integers little-endian:
//!
//! | bytes | holds |
//! |---|---|
//! | 0..8 | the magic `SAGCKPT\0` |
//! | 8..12 | the format version, `u32` |
//! | 12..16 | CRC-32C of bytes 8..12 and of every byte from 16 on, `u32` |
//! | 16..24 | the position of the state, `u64` |
//! | 24..32 | the length of the first part, `u64` |
//! | 32.. | the first part, then the second part to the end |
//!
//! The magic, the version, the checksum (its place and span) and the
//! position are fixed for every version to come; what follows byte 24 is
//! the version's own. So a checkpoint of a newer version that claims a
//! position past the head (a longer log's, lost) is told apart from one
//! that is merely newer.
//!
//! Each part is MessagePack of named fields, its names as `bin`
//! (`checkpoint_writer`; `rmp-serde` reads it): the first holds
//! the trees (sessions, roots, catalogs, owners, admission, registries), the
//! second the activity (activations, runs, inboxes). They are about the same
//! size, and [`decode`] decodes them on two threads at once, each with a
//! stack of its own, so a hostile nesting never reaches the caller's. No
//! JSON is parsed (BENCHMARKS.md, "Startup").
//!
//! Decoding checks the magic, then the checksum (so a damaged checkpoint is
//! never taken for another version), then the version, and only then
//! decodes the parts, each of which must be exactly one value. A map's
//! declared count is trusted only as far as its part's bytes could hold
//! it, and only to size the map. It refuses anything else: callers then
//! discard the checkpoint and rebuild from the log. A checkpoint is never
//! trusted beyond what it can prove about itself. A JSON checkpoint
//! (versions 1 and 2, which began with `{"checkpointVersion":`) is refused
//! as the version it names.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;

use serde::de::{DeserializeOwned, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use subagent_core::{HostId, SessionId};

use crate::activation::{ActivationState, RunState};
use crate::catalog::CatalogFact;
use crate::inbox::Inbox;
use crate::ownership::TreeOwner;
use crate::sessions::SessionRecord;
use crate::state::{Projections, ProviderRecord};
use crate::IdMap;

/// The checkpoint format this build writes and reads. Version 2 added the
/// prompt receipts of each inbox; version 3 is the binary frame above;
/// version 4 writes the parts' field and variant names as MessagePack
/// `bin`, not `str`; version 5 adds the call that started each child and
/// each running turn's open calls. A checkpoint of any other version is
/// discarded and the log refolded.
pub const CHECKPOINT_VERSION: u32 = 5;

/// The first format version written as a binary frame: versions 1 and 2
/// were JSON, so a frame naming one of them was never written.
pub const FIRST_BINARY_VERSION: u32 = 3;

/// The name projections checkpoints are stored under in the log.
pub const CHECKPOINT_NAME: &str = "projections";

/// The first eight bytes of every binary checkpoint.
pub const MAGIC: [u8; 8] = *b"SAGCKPT\0";

/// The length of the frame's header: the first part starts here.
pub const HEADER_LEN: usize = 32;

/// How deep a part may nest. A state holds content that came from events,
/// which the log decodes at most 128 deep (serde_json's limit), under
/// fewer than 16 levels of its own; deeper is not a state this crate wrote.
/// (The decoder refuses the `MAX_DEPTH`-th nested container: at most 159
/// are kept.)
const MAX_DEPTH: usize = 160;

/// The stack of each thread that decodes a part: room for [`MAX_DEPTH`]
/// levels of nesting, each of which a flattened field may decode more than
/// once, in a debug build.
const DECODER_STACK: usize = 16 * 1024 * 1024;

/// Judges a stored checkpoint against a log whose head is `head`:
/// `Ok(None)` when there is none, `Ok(Some(state))` when it can be resumed
/// from, `Err(why)` when it must be discarded.
///
/// # Errors
/// [`Unusable`]: why to discard it.
pub fn usable(stored: Option<&[u8]>, head: u64) -> Result<Option<Projections>, Unusable> {
    let Some(bytes) = stored else {
        return Ok(None);
    };
    let past_head = |position: u64| Unusable::PastHead { position, head };
    let state = match decode(bytes) {
        Ok(state) => state,
        // A binary frame of another version, older or newer (whole
        // header, checksum sound): its position is where every version
        // keeps it.
        Err(rejected @ CheckpointRejected::UnknownVersion(_)) => {
            let position = bytes
                .starts_with(&MAGIC)
                .then(|| u64::from_le_bytes(field(bytes, 16)));
            return Err(match position {
                Some(position) if position > head => past_head(position),
                _ => Unusable::Rejected(rejected),
            });
        }
        Err(rejected) => return Err(Unusable::Rejected(rejected)),
    };
    if state.position > head {
        return Err(past_head(state.position));
    }
    Ok(Some(state))
}

/// Why a stored checkpoint cannot be resumed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unusable {
    /// It does not decode as a checkpoint of this format.
    Rejected(CheckpointRejected),
    /// It claims a position past the log's head (a longer log's, lost).
    PastHead {
        /// The position it claims.
        position: u64,
        /// The log's head.
        head: u64,
    },
}

impl Unusable {
    /// The format version it was written in, when that is all that is
    /// wrong with it: not damage, only a build that writes another format
    /// (the next open rebuilds it in this one).
    #[must_use]
    pub fn other_version(&self) -> Option<u32> {
        match self {
            Unusable::Rejected(CheckpointRejected::UnknownVersion(version)) => Some(*version),
            _ => None,
        }
    }
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unusable::Rejected(rejected) => rejected.fmt(f),
            Unusable::PastHead { position, head } => {
                write!(f, "checkpoint at {position} is past the head {head}")
            }
        }
    }
}

/// Why a checkpoint was discarded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckpointRejected {
    /// It does not decode: a short or malformed frame, or a part that is
    /// not the state's MessagePack.
    Malformed(String),
    /// It is of another format version.
    UnknownVersion(u32),
    /// Its bytes are not the ones written: the checksum disagrees.
    Corrupt,
}

impl std::fmt::Display for CheckpointRejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckpointRejected::Malformed(reason) => write!(f, "malformed checkpoint: {reason}"),
            CheckpointRejected::UnknownVersion(version) => {
                write!(
                    f,
                    "checkpoint of format version {version}, which this build does not read"
                )
            }
            CheckpointRejected::Corrupt => f.write_str("checkpoint fails its checksum"),
        }
    }
}

/// The first part on its way out: the trees.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TreesOut<'a> {
    sessions: &'a IdMap<SessionId, SessionRecord>,
    roots: &'a [SessionId],
    catalogs: &'a IdMap<SessionId, Vec<CatalogFact>>,
    providers: &'a [ProviderRecord],
    host_providers: &'a BTreeMap<HostId, Vec<ProviderRecord>>,
    owners: &'a IdMap<SessionId, TreeOwner>,
    admission_closed: &'a BTreeSet<SessionId>,
}

/// The first part on its way in.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TreesIn {
    #[serde(deserialize_with = "presized")]
    sessions: IdMap<SessionId, SessionRecord>,
    roots: Vec<SessionId>,
    #[serde(deserialize_with = "presized")]
    catalogs: IdMap<SessionId, Vec<CatalogFact>>,
    providers: Vec<ProviderRecord>,
    host_providers: BTreeMap<HostId, Vec<ProviderRecord>>,
    #[serde(deserialize_with = "presized")]
    owners: IdMap<SessionId, TreeOwner>,
    admission_closed: BTreeSet<SessionId>,
}

/// The second part on its way out: the activity.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ActivityOut<'a> {
    activations: &'a IdMap<SessionId, ActivationState>,
    runs: &'a IdMap<SessionId, RunState>,
    inboxes: &'a IdMap<SessionId, Inbox>,
}

/// The second part on its way in.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ActivityIn {
    #[serde(deserialize_with = "presized")]
    activations: IdMap<SessionId, ActivationState>,
    #[serde(deserialize_with = "presized")]
    runs: IdMap<SessionId, RunState>,
    #[serde(deserialize_with = "presized")]
    inboxes: IdMap<SessionId, Inbox>,
}

/// The fewest bytes an entry of a map keyed by [`SessionId`] takes in a
/// part: the id as the writer writes it, 16 bytes as MessagePack `bin`
/// behind a two-byte header (the reader also takes an array of 16 bytes,
/// at least 19), and a value of at least one byte.
const MIN_ENCODED_ENTRY: usize = 19;

thread_local! {
    /// The length of the part being decoded on this thread, while
    /// [`part`] decodes it ([`DecodingPart`]), else 0: what bounds how
    /// many entries a map is sized for up front.
    static PART_LEN: Cell<usize> = const { Cell::new(0) };
}

/// [`PART_LEN`] set for the decoding of one part, and back to 0 when it
/// is dropped, whether the decoding succeeded or not.
struct DecodingPart;

impl DecodingPart {
    fn of_len(len: usize) -> DecodingPart {
        PART_LEN.set(len);
        DecodingPart
    }
}

impl Drop for DecodingPart {
    fn drop(&mut self) {
        PART_LEN.set(0);
    }
}

/// How many entries a map of a part of `part_len` bytes whose header
/// declares `declared` is sized for before its first entry: all of them,
/// unless the part is too short to hold that many, as a hostile header
/// can claim. So a map is allocated once, not grown by rehashing
/// (BENCHMARKS.md, "The checkpoint's maps sized once, and mimalloc"), and
/// never for more entries than its part's bytes could hold.
#[must_use]
fn presized_entries(declared: Option<usize>, part_len: usize) -> usize {
    declared.unwrap_or(0).min(part_len / MIN_ENCODED_ENTRY)
}

/// Deserializes a map of a part as serde's `HashMap` does (a repeated key
/// keeps its last value), but sized once by [`presized_entries`], where
/// serde sizes it for at most 1 MiB and grows it from there. The size is
/// only asked for: an allocation that fails leaves the map to grow as
/// serde's would, never refuses the checkpoint. Outside [`part`] (no
/// [`PART_LEN`]) a map is not sized up front.
fn presized<'de, D, V>(deserializer: D) -> Result<IdMap<SessionId, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    /// The visitor of one map.
    struct Entries<V>(PhantomData<V>);

    impl<'de, V: Deserialize<'de>> Visitor<'de> for Entries<V> {
        type Value = IdMap<SessionId, V>;

        fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
            formatter.write_str("a map keyed by session id")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Self::Value, A::Error> {
            let capacity = presized_entries(entries.size_hint(), PART_LEN.get());
            let mut map = IdMap::default();
            // Failing to reserve is not an error: the map grows instead.
            let _ = map.try_reserve(capacity);
            while let Some((key, value)) = entries.next_entry()? {
                map.insert(key, value);
            }
            Ok(map)
        }
    }

    deserializer.deserialize_map(Entries(PhantomData))
}

/// Encodes a checkpoint of `state`.
///
/// Encoding plain data into memory does not fail; if it ever did, the
/// result is empty, which [`decode`] refuses, so the log is refolded.
#[must_use]
pub fn encode(state: &Projections) -> Vec<u8> {
    // Every field is named here, so a field added to `Projections` does
    // not compile until it has a part.
    let Projections {
        position,
        sessions,
        roots,
        catalogs,
        activations,
        runs,
        inboxes,
        providers,
        host_providers,
        owners,
        admission_closed,
    } = state;
    let trees = crate::checkpoint_writer::to_vec(&TreesOut {
        sessions,
        roots,
        catalogs,
        providers,
        host_providers,
        owners,
        admission_closed,
    });
    let activity = crate::checkpoint_writer::to_vec(&ActivityOut {
        activations,
        runs,
        inboxes,
    });
    let (Ok(trees), Ok(activity)) = (trees, activity) else {
        return Vec::new();
    };
    let mut bytes = Vec::with_capacity(HEADER_LEN + trees.len() + activity.len());
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&CHECKPOINT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&[0; 4]);
    bytes.extend_from_slice(&position.to_le_bytes());
    bytes.extend_from_slice(&(trees.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&trees);
    bytes.extend_from_slice(&activity);
    let crc = checksum(&bytes).unwrap_or_default();
    bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// The CRC-32C a frame stores in bytes 12..16: of the version, and of
/// everything from byte 16 on; `None` for a frame shorter than its header.
#[must_use]
pub fn checksum(frame: &[u8]) -> Option<u32> {
    if frame.len() < HEADER_LEN {
        return None;
    }
    Some(crc32c::crc32c_append(
        crc32c::crc32c(&frame[8..12]),
        &frame[16..],
    ))
}

/// Decodes a checkpoint: the frame, then the two parts, each on a thread
/// of its own.
///
/// # Errors
/// [`CheckpointRejected`] for anything but an intact checkpoint of this version.
pub fn decode(bytes: &[u8]) -> Result<Projections, CheckpointRejected> {
    if bytes.iter().find(|byte| !byte.is_ascii_whitespace()) == Some(&b'{') {
        return Err(json_version(bytes));
    }
    let malformed = |reason: &str| CheckpointRejected::Malformed(reason.to_owned());
    if bytes.len() < HEADER_LEN {
        return Err(malformed("shorter than its header"));
    }
    if bytes[..8] != MAGIC {
        return Err(malformed("not a checkpoint (no magic)"));
    }
    if checksum(bytes) != Some(u32::from_le_bytes(field(bytes, 12))) {
        return Err(CheckpointRejected::Corrupt);
    }
    let version = u32::from_le_bytes(field(bytes, 8));
    if version < FIRST_BINARY_VERSION {
        return Err(malformed(
            "a binary frame of a version that was never binary",
        ));
    }
    if version != CHECKPOINT_VERSION {
        return Err(CheckpointRejected::UnknownVersion(version));
    }
    let position = u64::from_le_bytes(field(bytes, 16));
    let parts = &bytes[HEADER_LEN..];
    let first_len = usize::try_from(u64::from_le_bytes(field(bytes, 24)))
        .ok()
        .filter(|&len| len <= parts.len())
        .ok_or_else(|| malformed("its first part is longer than the checkpoint"))?;
    let (trees, activity) = parts.split_at(first_len);
    let (trees, activity) = std::thread::scope(|scope| {
        let first = on_own_stack(scope, || part::<TreesIn>(trees, "trees"));
        let second = on_own_stack(scope, || part::<ActivityIn>(activity, "activity"));
        (joined(first), joined(second))
    });
    let (trees, activity) = (trees?, activity?);
    Ok(Projections {
        position,
        sessions: trees.sessions,
        roots: trees.roots,
        catalogs: trees.catalogs,
        activations: activity.activations,
        runs: activity.runs,
        inboxes: activity.inboxes,
        providers: trees.providers,
        host_providers: trees.host_providers,
        owners: trees.owners,
        admission_closed: trees.admission_closed,
    })
}

/// A part's decoding on a thread of its own, or why no thread could be had.
type Decoding<'scope, T> = Result<
    std::thread::ScopedJoinHandle<'scope, Result<T, CheckpointRejected>>,
    CheckpointRejected,
>;

/// Starts `work` on a thread of `scope` with [`DECODER_STACK`]. Never on
/// the caller's stack, whose size this crate does not know: without a
/// thread, the checkpoint is refused (and the log refolded).
fn on_own_stack<'scope, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    work: impl FnOnce() -> Result<T, CheckpointRejected> + Send + 'scope,
) -> Decoding<'scope, T> {
    std::thread::Builder::new()
        .name("checkpoint-decode".into())
        .stack_size(DECODER_STACK)
        .spawn_scoped(scope, work)
        .map_err(|err| CheckpointRejected::Malformed(format!("no thread to decode it on: {err}")))
}

/// The result of a part's decoding; a panic on its thread goes on in the
/// caller.
fn joined<T>(decoding: Decoding<'_, T>) -> Result<T, CheckpointRejected> {
    decoding?
        .join()
        .unwrap_or_else(|panicked| std::panic::resume_unwind(panicked))
}

/// The `N` bytes of the header at `at` (the caller checked its length).
fn field<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&bytes[at..at + N]);
    out
}

/// Decodes one part: exactly one value, nested at most [`MAX_DEPTH`] deep,
/// its maps sized up front as far as its length allows ([`presized`]).
fn part<T: DeserializeOwned>(bytes: &[u8], name: &str) -> Result<T, CheckpointRejected> {
    let malformed =
        |reason: String| CheckpointRejected::Malformed(format!("its {name} part: {reason}"));
    let _sizing = DecodingPart::of_len(bytes.len());
    let mut input = rmp_serde::Deserializer::from_read_ref(bytes);
    input.set_max_depth(MAX_DEPTH);
    let value = T::deserialize(&mut input).map_err(|err| malformed(err.to_string()))?;
    // The part must end here: reading one more value must find no marker.
    match IgnoredAny::deserialize(&mut input) {
        Err(rmp_serde::decode::Error::InvalidMarkerRead(err))
            if err.kind() == std::io::ErrorKind::UnexpectedEof =>
        {
            Ok(value)
        }
        _ => Err(malformed("bytes after its value".to_owned())),
    }
}

/// Judges a JSON checkpoint (versions 1 and 2, which always began with
/// `{"checkpointVersion":N`) by that beginning alone, without parsing the
/// rest: refused as the version it names, or as malformed.
fn json_version(bytes: &[u8]) -> CheckpointRejected {
    let version = json_prefix(bytes).and_then(|digits| {
        std::str::from_utf8(digits)
            .ok()
            .and_then(|digits| digits.parse::<u32>().ok())
    });
    match version {
        Some(version @ (1 | 2)) => CheckpointRejected::UnknownVersion(version),
        Some(version) => CheckpointRejected::Malformed(format!(
            "JSON naming version {version}: only versions 1 and 2 were JSON"
        )),
        None => CheckpointRejected::Malformed(
            "JSON that does not begin with its checkpointVersion".to_owned(),
        ),
    }
}

/// The digits after `{"checkpointVersion":` at the start of `bytes`,
/// whitespace allowed around each token.
fn json_prefix(bytes: &[u8]) -> Option<&[u8]> {
    let token = |rest: &'_ [u8], token: &[u8]| -> Option<usize> {
        let skipped = rest.iter().take_while(|b| b.is_ascii_whitespace()).count();
        rest[skipped..]
            .starts_with(token)
            .then_some(skipped + token.len())
    };
    let mut at = 0;
    for expected in [&b"{"[..], b"\"checkpointVersion\"", b":"] {
        at += token(&bytes[at..], expected)?;
    }
    let rest = &bytes[at..];
    let rest = &rest[rest.iter().take_while(|b| b.is_ascii_whitespace()).count()..];
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    (digits > 0).then_some(&rest[..digits])
}

#[cfg(test)]
mod tests {
    use super::{presized_entries, MIN_ENCODED_ENTRY};

    #[test]
    fn a_map_is_sized_for_what_it_declares_up_to_what_its_part_can_hold() {
        assert_eq!(presized_entries(Some(1_000), 1 << 20), 1_000);
        assert_eq!(presized_entries(None, 1 << 20), 0);
        assert_eq!(presized_entries(Some(0), 1 << 20), 0);
        // A part of 19 × 10 bytes holds at most 10 entries.
        assert_eq!(presized_entries(Some(11), MIN_ENCODED_ENTRY * 10), 10);
        assert_eq!(presized_entries(Some(10), MIN_ENCODED_ENTRY * 10), 10);
        assert_eq!(presized_entries(Some(usize::MAX), MIN_ENCODED_ENTRY - 1), 0);
    }
}
