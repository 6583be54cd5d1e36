//! The test agent's session store: what it remembers of a session (label,
//! turns played, transcript) and its persistence as one JSON file per
//! session, `<dir>/<session id>.json`, written atomically.

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What the agent remembers of one session; the JSON of its file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionRecord {
    /// The label from `session/new`'s `_meta`, which picks the script.
    pub(crate) label: Option<String>,
    /// Turns started so far (the next prompt plays turn `turns_done + 1`).
    pub(crate) turns_done: usize,
    /// The conversation, replayed on `session/load`.
    pub(crate) transcript: Vec<Entry>,
}

/// One message of a transcript.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// Who said it.
    pub(crate) role: Role,
    /// What was said.
    pub(crate) text: String,
}

/// The speaker of a transcript entry (`user` or `assistant`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Role {
    /// The client's prompt.
    User,
    /// The agent's reply.
    Assistant,
}

/// Where sessions are persisted: a directory, or nowhere (sessions then live
/// only as long as the process).
#[derive(Clone, Debug)]
pub(crate) struct SessionStore {
    dir: Option<PathBuf>,
}

impl SessionStore {
    /// A store in `dir`, or one that persists nothing.
    pub(crate) fn new(dir: Option<PathBuf>) -> Self {
        SessionStore { dir }
    }

    /// Whether sessions are persisted (so `session/load` can work).
    pub(crate) fn persists(&self) -> bool {
        self.dir.is_some()
    }

    /// The file of session `id`; none without a directory, or when `id` is
    /// not a plain file name (a client-supplied id never escapes the
    /// directory).
    fn path(&self, id: &str) -> Option<PathBuf> {
        let dir = self.dir.as_deref()?;
        let plain = !id.is_empty()
            && !id.starts_with('.')
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        plain.then(|| dir.join(format!("{id}.json")))
    }

    /// Whether a file for session `id` exists.
    pub(crate) fn exists(&self, id: &str) -> bool {
        self.path(id).is_some_and(|path| path.exists())
    }

    /// Writes session `id` (a temporary file renamed over the old one, so a
    /// reader never sees half a record). Does nothing without a directory.
    ///
    /// # Errors
    /// The IO or encoding failure.
    pub(crate) fn save(&self, id: &str, record: &SessionRecord) -> io::Result<()> {
        let Some(dir) = self.dir.as_deref() else {
            return Ok(());
        };
        let path = self.path(id).ok_or_else(|| bad_id(id))?;
        let json = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
        let temp = dir.join(format!(".{id}.json.{}.tmp", std::process::id()));
        write_synced(&temp, &json)?;
        fs::rename(&temp, path).inspect_err(|_| {
            let _ = fs::remove_file(&temp);
        })
    }

    /// Reads session `id`: `None` when there is no such session (no
    /// directory, an impossible id, or no file).
    ///
    /// # Errors
    /// The IO failure, or `InvalidData` for a file that is not a record.
    pub(crate) fn load(&self, id: &str) -> io::Result<Option<SessionRecord>> {
        let Some(path) = self.path(id) else {
            return Ok(None);
        };
        let text = match fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(err),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))
    }
}

fn bad_id(id: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("session id {id:?} is not a plain file name"),
    )
}

fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_odd_ids_are_unknown() {
        let dir = std::env::temp_dir().join(format!("acp-test-agent-store-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("a temp dir");
        let store = SessionStore::new(Some(dir.clone()));
        let record = SessionRecord {
            label: Some("research".into()),
            turns_done: 2,
            transcript: vec![
                Entry {
                    role: Role::User,
                    text: "hi".into(),
                },
                Entry {
                    role: Role::Assistant,
                    text: "hello".into(),
                },
            ],
        };
        store.save("test-1-1", &record).expect("saved");
        assert!(store.exists("test-1-1"));
        assert_eq!(store.load("test-1-1").expect("read"), Some(record));
        assert_eq!(store.load("test-9-9").expect("read"), None);
        assert_eq!(store.load("../etc/passwd").expect("read"), None);
        assert!(store.save("../x", &SessionRecord::default()).is_err());
        let _ = fs::remove_dir_all(&dir);
    }
}
