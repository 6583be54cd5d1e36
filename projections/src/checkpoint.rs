//! Versioned checkpoint encoding of [`Projections`].
//!
//! A checkpoint (version 3) is a binary frame, integers little-endian:
//!
//! | bytes | holds |
//! |---|---|
//! | 0..8 | the magic `SAGCKPT\0` |
//! | 8..12 | the format version, `u32` |
//! | 12..16 | CRC-32C of every byte from 16 on, `u32` |
//! | 16..24 | the position of the state, `u64` |
//! | 24..32 | the length of the first part, `u64` |
//! | 32.. | the first part, then the second part to the end |
//!
//! Each part is MessagePack of named fields (`rmp-serde`): the first holds
//! the trees (sessions, roots, catalogs, owners, admission, registries), the
//! second the activity (activations, runs, inboxes). They are about the same
//! size, so [`decode`] decodes them on two threads at once. No JSON is
//! parsed: a 1M-event log's state decodes in a fraction of the time its
//! JSON took (BENCHMARKS.md, "Startup").
//!
//! Decoding judges the version before anything else, checks the checksum
//! before it decodes a part, and refuses anything else: callers then discard
//! the checkpoint and rebuild from the log. A checkpoint is never trusted
//! beyond what it can prove about itself. A JSON checkpoint (versions 1 and
//! 2, which began with `{`) is refused as the version it names.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use subagent_core::{HostId, SessionId};

use crate::activation::{ActivationState, RunState};
use crate::catalog::CatalogFact;
use crate::inbox::Inbox;
use crate::ownership::TreeOwner;
use crate::sessions::SessionRecord;
use crate::state::{Projections, ProviderRecord};

/// The checkpoint format this build writes and reads. Version 2 added the
/// prompt receipts of each inbox; version 3 is the binary frame above. A
/// checkpoint of any other version is discarded and the log refolded.
pub const CHECKPOINT_VERSION: u32 = 3;

/// The name projections checkpoints are stored under in the log.
pub const CHECKPOINT_NAME: &str = "projections";

/// The first eight bytes of every binary checkpoint.
pub const MAGIC: [u8; 8] = *b"SAGCKPT\0";

/// The length of the frame's header: the first part starts here.
pub const HEADER_LEN: usize = 32;

/// How deep a part may nest. A state holds content that came from events,
/// which the log decodes at most 128 deep (serde_json's limit), under a
/// few levels of its own; deeper is not a state this crate wrote, and
/// would only spend the stack.
const MAX_DEPTH: usize = 256;

/// The stack of the thread that decodes the second part: room for
/// [`MAX_DEPTH`] levels of nesting with any decoder's frames.
const DECODER_STACK: usize = 16 * 1024 * 1024;

/// Below this many bytes of parts, both are decoded on the caller's thread
/// (a thread costs more than it saves).
const PARALLEL_FROM: usize = 256 * 1024;

/// Judges a stored checkpoint against a log whose head is `head`:
/// `Ok(None)` when there is none, `Ok(Some(state))` when it can be resumed
/// from, `Err(reason)` when it must be discarded (it does not decode, is of
/// another version, fails its checksum, or claims a position past the head).
///
/// # Errors
/// The reason to discard it.
pub fn usable(stored: Option<&[u8]>, head: u64) -> Result<Option<Projections>, String> {
    let Some(bytes) = stored else {
        return Ok(None);
    };
    let state = decode(bytes).map_err(|rejected| rejected.to_string())?;
    if state.position > head {
        return Err(format!(
            "checkpoint at {} is past the head {head}",
            state.position
        ));
    }
    Ok(Some(state))
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
                write!(f, "unknown checkpoint version {version}")
            }
            CheckpointRejected::Corrupt => f.write_str("checkpoint fails its checksum"),
        }
    }
}

/// The first part on its way out: the trees.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TreesOut<'a> {
    sessions: &'a HashMap<SessionId, SessionRecord>,
    roots: &'a [SessionId],
    catalogs: &'a HashMap<SessionId, Vec<CatalogFact>>,
    providers: &'a [ProviderRecord],
    host_providers: &'a BTreeMap<HostId, Vec<ProviderRecord>>,
    owners: &'a HashMap<SessionId, TreeOwner>,
    admission_closed: &'a BTreeSet<SessionId>,
}

/// The first part on its way in.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TreesIn {
    sessions: HashMap<SessionId, SessionRecord>,
    roots: Vec<SessionId>,
    catalogs: HashMap<SessionId, Vec<CatalogFact>>,
    providers: Vec<ProviderRecord>,
    host_providers: BTreeMap<HostId, Vec<ProviderRecord>>,
    owners: HashMap<SessionId, TreeOwner>,
    admission_closed: BTreeSet<SessionId>,
}

/// The second part on its way out: the activity.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ActivityOut<'a> {
    activations: &'a HashMap<SessionId, ActivationState>,
    runs: &'a HashMap<SessionId, RunState>,
    inboxes: &'a HashMap<SessionId, Inbox>,
}

/// The second part on its way in.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ActivityIn {
    activations: HashMap<SessionId, ActivationState>,
    runs: HashMap<SessionId, RunState>,
    inboxes: HashMap<SessionId, Inbox>,
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
    let trees = rmp_serde::to_vec_named(&TreesOut {
        sessions,
        roots,
        catalogs,
        providers,
        host_providers,
        owners,
        admission_closed,
    });
    let activity = rmp_serde::to_vec_named(&ActivityOut {
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
    let crc = crc32c::crc32c(&bytes[16..]);
    bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// Decodes a checkpoint: the version first, then the checksum, then the
/// two parts (on two threads when they are large).
///
/// # Errors
/// [`CheckpointRejected`] for anything but an intact checkpoint of this version.
pub fn decode(bytes: &[u8]) -> Result<Projections, CheckpointRejected> {
    if bytes.first() == Some(&b'{') {
        return Err(json_version(bytes));
    }
    let malformed = |reason: &str| CheckpointRejected::Malformed(reason.to_owned());
    if bytes.len() < HEADER_LEN {
        return Err(malformed("shorter than its header"));
    }
    if bytes[..8] != MAGIC {
        return Err(malformed("not a checkpoint (no magic)"));
    }
    let version = u32::from_le_bytes(field(bytes, 8));
    if version != CHECKPOINT_VERSION {
        return Err(CheckpointRejected::UnknownVersion(version));
    }
    if crc32c::crc32c(&bytes[16..]) != u32::from_le_bytes(field(bytes, 12)) {
        return Err(CheckpointRejected::Corrupt);
    }
    let position = u64::from_le_bytes(field(bytes, 16));
    let parts = &bytes[HEADER_LEN..];
    let first_len = usize::try_from(u64::from_le_bytes(field(bytes, 24)))
        .ok()
        .filter(|&len| len <= parts.len())
        .ok_or_else(|| malformed("its first part is longer than the checkpoint"))?;
    let (trees, activity) = parts.split_at(first_len);
    let (trees, activity) = if parts.len() < PARALLEL_FROM {
        (
            part::<TreesIn>(trees, "trees"),
            part::<ActivityIn>(activity, "activity"),
        )
    } else {
        std::thread::scope(|scope| {
            let second = std::thread::Builder::new()
                .name("checkpoint-decode".into())
                .stack_size(DECODER_STACK)
                .spawn_scoped(scope, || part::<ActivityIn>(activity, "activity"));
            let first = part::<TreesIn>(trees, "trees");
            let second = match second {
                Ok(thread) => thread
                    .join()
                    .unwrap_or_else(|panicked| std::panic::resume_unwind(panicked)),
                // No thread to be had: decode it here.
                Err(_) => part::<ActivityIn>(activity, "activity"),
            };
            (first, second)
        })
    };
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

/// The `N` bytes of the header at `at` (the caller checked its length).
fn field<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&bytes[at..at + N]);
    out
}

/// Decodes one part, nested at most [`MAX_DEPTH`] deep.
fn part<T: DeserializeOwned>(bytes: &[u8], name: &str) -> Result<T, CheckpointRejected> {
    let mut input = rmp_serde::Deserializer::from_read_ref(bytes);
    input.set_max_depth(MAX_DEPTH);
    T::deserialize(&mut input)
        .map_err(|err| CheckpointRejected::Malformed(format!("its {name} part: {err}")))
}

/// Judges a JSON checkpoint (versions 1 and 2): refused as the version it
/// names, or as malformed when it names none.
fn json_version(bytes: &[u8]) -> CheckpointRejected {
    #[derive(Deserialize)]
    struct Header {
        #[serde(rename = "checkpointVersion")]
        version: u32,
    }
    match serde_json::from_slice::<Header>(bytes) {
        Ok(header) if header.version == CHECKPOINT_VERSION => CheckpointRejected::Malformed(
            format!("version {CHECKPOINT_VERSION} is binary, not JSON"),
        ),
        Ok(header) => CheckpointRejected::UnknownVersion(header.version),
        Err(err) => CheckpointRejected::Malformed(err.to_string()),
    }
}
