//! A group commit's RocksDB `WriteBatch`, written as bytes.
//!
//! RocksDB keeps a batch, and writes it to its write-ahead log, in one
//! serialized form (`WriteBatch::rep_`, `rocksdb/db/write_batch.cc`):
//!
//! ```text
//! rep       := sequence: fixed64 LE (0 here: RocksDB assigns it)
//!              count:    fixed32 LE (how many records follow)
//!              record*
//! record    := family tag, key: varstring, value: varstring
//! varstring := length: varint32, bytes
//! ```
//!
//! Through the C API, every `put_cf` is a call across the FFI that grows
//! a C++ string, keeps a save point and recounts: a commit of one event
//! made four (its record, two index entries, the head), 3.2k of its 28.4k
//! instructions (BENCHMARKS.md, "The batch written as bytes").
//! [`BatchBytes`] writes the same records into a buffer the writer reuses,
//! and RocksDB gets them in one copy ([`BatchBytes::build`],
//! `WriteBatch::from_data`).
//!
//! A family's tag (the record type `kTypeColumnFamilyValue` and the
//! family's id, which the Rust API does not expose) is not assumed: it is
//! learned from RocksDB itself, by reading what its own `put_cf` writes
//! for that family ([`FamilyTag::of`]). The tests check, for arbitrary
//! puts and for lengths of every varint width up to four bytes, that a
//! batch built here is, byte for byte, the batch RocksDB's `put_cf` calls
//! build, so a RocksDB that changed the form would fail them.

use rocksdb::{ColumnFamily, WriteBatch};

use crate::error::StoreError;

/// The sequence number and the count in front of the records.
const HEADER: usize = 12;
/// Where the count is in the header.
const COUNT_AT: usize = 8;
/// `kTypeValue`: a put into the default family, which has no id.
const TYPE_VALUE: u8 = 0x1;
/// `kTypeColumnFamilyValue`: a put into a named family, its id follows.
const TYPE_FAMILY_VALUE: u8 = 0x5;
/// The longest varint32.
const VARINT32_MAX: usize = 5;
/// The longest key RocksDB puts (`kMaxWriteBatchKeySize`): it adds eight
/// bytes of its own to every key, and a key's length is a `u32`.
pub(crate) const MAX_KEY_BYTES: u32 = u32::MAX - 8;
/// A larger buffer than this is let go after its group: twice what the
/// writer keeps of its encoded records
/// ([`RETAINED_ENCODED_BYTES`](crate::append_check::RETAINED_ENCODED_BYTES)),
/// since a batch holds those records and their index entries.
pub(crate) const RETAINED_BYTES: usize = 2 * crate::append_check::RETAINED_ENCODED_BYTES;

/// What starts a put record into one column family: its record type and,
/// for a named family, the family's id as a varint32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FamilyTag {
    bytes: [u8; 1 + VARINT32_MAX],
    len: usize,
}

impl FamilyTag {
    /// The tag RocksDB writes for a put into `family`: read from a batch
    /// of one empty put built by RocksDB's own `put_cf`.
    ///
    /// # Errors
    /// [`StoreError::Io`] when that batch is not of the form this module
    /// writes (a RocksDB whose batch form changed).
    pub(crate) fn of(family: &ColumnFamily, name: &str) -> Result<FamilyTag, StoreError> {
        let mut probe = WriteBatch::default();
        probe.put_cf(family, b"", b"");
        Self::from_probe(probe.data()).ok_or_else(|| {
            StoreError::Io(format!(
                "RocksDB's write batch for the {name} column family is not of the form \
                 this build writes: {:02x?}",
                probe.data()
            ))
        })
    }

    /// The tag of a one-record batch whose key and value are empty.
    fn from_probe(data: &[u8]) -> Option<FamilyTag> {
        let record = data.get(HEADER..)?;
        if data.get(COUNT_AT..HEADER)? != 1u32.to_le_bytes() {
            return None;
        }
        // The record ends with the two empty varstrings: two zero lengths.
        let tag = record.strip_suffix(&[0, 0])?;
        match tag {
            [TYPE_VALUE] => {}
            [TYPE_FAMILY_VALUE, id @ ..] if varint32_len(id) == Some(id.len()) => {}
            _ => return None,
        }
        let mut bytes = [0; 1 + VARINT32_MAX];
        bytes[..tag.len()].copy_from_slice(tag);
        Some(FamilyTag {
            bytes,
            len: tag.len(),
        })
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// The length of the varint32 that is all of `bytes`, or `None` when
/// `bytes` is not exactly one (seven bits a byte, the high bit set on
/// every byte but the last).
fn varint32_len(bytes: &[u8]) -> Option<usize> {
    let (last, more) = bytes.split_last()?;
    let well_formed =
        bytes.len() <= VARINT32_MAX && last & 0x80 == 0 && more.iter().all(|byte| byte & 0x80 != 0);
    well_formed.then_some(bytes.len())
}

/// A batch's serialized form, reused from group to group. Its header is
/// written with its first put, so an empty one allocates nothing.
#[derive(Default)]
pub(crate) struct BatchBytes {
    rep: Vec<u8>,
    count: u32,
}

/// How far a batch was written: what [`BatchBytes::roll_back`] returns to.
#[derive(Clone, Copy)]
pub(crate) struct Mark {
    len: usize,
    count: u32,
}

impl BatchBytes {
    /// Appends a put of `key` to `value` into the family `tag` names.
    ///
    /// # Errors
    /// [`StoreError::Io`] when the key is longer than RocksDB takes
    /// ([`MAX_KEY_BYTES`]) or the value is 4 GiB or more; nothing is
    /// appended then.
    pub(crate) fn put(
        &mut self,
        tag: &FamilyTag,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), StoreError> {
        let (key_len, value_len) = lengths(key.len(), value.len())?;
        let count = self.count.checked_add(1).ok_or_else(|| {
            StoreError::Io("more records than a RocksDB write batch counts".into())
        })?;
        self.start();
        self.rep
            .reserve(tag.len + 2 * VARINT32_MAX + key.len() + value.len());
        self.rep.extend_from_slice(tag.as_bytes());
        put_varint32(&mut self.rep, key_len);
        self.rep.extend_from_slice(key);
        put_varint32(&mut self.rep, value_len);
        self.rep.extend_from_slice(value);
        self.count = count;
        Ok(())
    }

    /// How far the batch is written now.
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            len: self.rep.len(),
            count: self.count,
        }
    }

    /// Takes back every put made since `mark`.
    pub(crate) fn roll_back(&mut self, mark: Mark) {
        self.rep.truncate(mark.len);
        self.count = mark.count;
    }

    /// The puts written so far, as a RocksDB batch (one copy of the bytes).
    pub(crate) fn build(&mut self) -> WriteBatch {
        self.start();
        self.rep[COUNT_AT..HEADER].copy_from_slice(&self.count.to_le_bytes());
        WriteBatch::from_data(&self.rep)
    }

    /// Empties the batch for the next group, letting a large buffer go.
    pub(crate) fn clear(&mut self) {
        if self.rep.capacity() > RETAINED_BYTES {
            self.rep = Vec::new();
        }
        self.rep.clear();
        self.count = 0;
    }

    /// Writes the header, zeroed, into an empty buffer.
    fn start(&mut self) {
        if self.rep.is_empty() {
            self.rep.resize(HEADER, 0);
        }
    }

    /// Whether no put was written since the last [`clear`](Self::clear).
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0 && self.rep.len() <= HEADER
    }

    /// The buffer's capacity, for the tests of what a group leaves behind.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.rep.capacity()
    }
}

/// The lengths of a put's key and value as RocksDB stores them, or the
/// refusal of a key longer than [`MAX_KEY_BYTES`] or a value of 4 GiB or
/// more.
fn lengths(key: usize, value: usize) -> Result<(u32, u32), StoreError> {
    let too_large = |what: &str, len: usize| {
        StoreError::Io(format!(
            "a {what} of {len} bytes is larger than a RocksDB write batch holds"
        ))
    };
    let key_len = u32::try_from(key)
        .ok()
        .filter(|&len| len <= MAX_KEY_BYTES)
        .ok_or_else(|| too_large("key", key))?;
    let value_len = u32::try_from(value).map_err(|_| too_large("value", value))?;
    Ok((key_len, value_len))
}

/// Appends `value` as a varint32: seven bits a byte, low bits first.
fn put_varint32(out: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        // Truncation intended: the low seven bits, with the high bit set.
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    // Below 0x80 here, so it fits.
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rocksdb::{Options, DB};

    use crate::rocks::keys;

    fn open(dir: &std::path::Path) -> DB {
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        DB::open_cf(&options, dir, keys::ALL_FAMILIES).unwrap()
    }

    fn tags(db: &DB) -> Vec<(&ColumnFamily, FamilyTag)> {
        keys::ALL_FAMILIES
            .iter()
            .map(|name| {
                let family = db.cf_handle(name).unwrap();
                (family, FamilyTag::of(family, name).unwrap())
            })
            .collect()
    }

    /// The same puts, through RocksDB's `put_cf` and through
    /// [`BatchBytes`], give the same bytes.
    fn assert_same_batch(db: &DB, puts: &[(usize, Vec<u8>, Vec<u8>)]) {
        let tags = tags(db);
        let mut theirs = WriteBatch::default();
        let mut ours = BatchBytes::default();
        for (family, key, value) in puts {
            let (handle, tag) = &tags[family % tags.len()];
            theirs.put_cf(*handle, key, value);
            ours.put(tag, key, value).unwrap();
        }
        assert_eq!(ours.build().data(), theirs.data());
        assert_eq!(ours.build().len(), puts.len());
    }

    #[test]
    fn each_family_has_its_own_tag_and_none_is_the_default_one() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        let tags: Vec<FamilyTag> = tags(&db).into_iter().map(|(_, tag)| tag).collect();
        for (index, tag) in tags.iter().enumerate() {
            assert_eq!(tag.as_bytes()[0], TYPE_FAMILY_VALUE, "{tag:?}");
            assert!(!tags[index + 1..].contains(tag), "{tag:?} is shared");
        }
        let default = db.cf_handle("default").unwrap();
        assert_eq!(
            FamilyTag::of(default, "default").unwrap().as_bytes(),
            [TYPE_VALUE]
        );
    }

    #[test]
    fn lengths_across_every_varint_width_are_written_as_rocksdb_writes_them() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        let lengths = [0, 1, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152];
        let puts: Vec<_> = lengths
            .iter()
            .enumerate()
            .map(|(index, &len)| (index, vec![7; len % 300], vec![index as u8; len]))
            .collect();
        assert_same_batch(&db, &puts);
        // A value whose length needs five varint bytes.
        let mut out = Vec::new();
        put_varint32(&mut out, u32::MAX);
        assert_eq!(out, [0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert_eq!(varint32_len(&out), Some(5));
    }

    #[test]
    fn a_batch_written_as_bytes_lands_as_its_puts_do() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        let tags = tags(&db);
        let mut batch = BatchBytes::default();
        batch.put(&tags[0].1, b"k1", b"v1").unwrap();
        let mark = batch.mark();
        batch.put(&tags[1].1, b"gone", b"rolled back").unwrap();
        batch.roll_back(mark);
        batch.put(&tags[2].1, b"k3", b"v3").unwrap();
        db.write(batch.build()).unwrap();
        assert_eq!(db.get_cf(tags[0].0, b"k1").unwrap().unwrap(), b"v1");
        assert_eq!(db.get_cf(tags[1].0, b"gone").unwrap(), None);
        assert_eq!(db.get_cf(tags[2].0, b"k3").unwrap().unwrap(), b"v3");
        batch.clear();
        assert!(batch.is_empty());
        assert_eq!(batch.build().data(), WriteBatch::default().data());
        db.write(batch.build()).unwrap();
        // A mark taken before the first put, before the header, rolls back
        // to an empty batch that takes puts again.
        let mut fresh = BatchBytes::default();
        let before = fresh.mark();
        fresh.put(&tags[0].1, b"k4", b"gone").unwrap();
        fresh.roll_back(before);
        fresh.put(&tags[0].1, b"k4", b"v4").unwrap();
        let mut theirs = WriteBatch::default();
        theirs.put_cf(tags[0].0, b"k4", b"v4");
        assert_eq!(fresh.build().data(), theirs.data());
        // A large group's buffer is let go.
        batch
            .put(&tags[0].1, b"big", &vec![0; RETAINED_BYTES + 1])
            .unwrap();
        batch.clear();
        assert!(batch.is_empty() && batch.capacity() <= RETAINED_BYTES);
    }

    #[test]
    fn only_what_rocksdb_takes_is_put() {
        let max_key = MAX_KEY_BYTES as usize;
        let max_value = u32::MAX as usize;
        assert_eq!(
            lengths(max_key, max_value).unwrap(),
            (MAX_KEY_BYTES, u32::MAX)
        );
        for (key, value, refused) in [
            (max_key + 1, 0, "a key of 4294967288 bytes"),
            (u32::MAX as usize + 1, 0, "a key of 4294967296 bytes"),
            (0, max_value + 1, "a value of 4294967296 bytes"),
        ] {
            match lengths(key, value) {
                Err(StoreError::Io(message)) => assert!(message.starts_with(refused), "{message}"),
                other => panic!("{key}, {value}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_probe_not_of_the_known_form_is_refused() {
        let header = |count: u32| {
            let mut rep = vec![0; HEADER];
            rep[COUNT_AT..].copy_from_slice(&count.to_le_bytes());
            rep
        };
        let with = |count: u32, record: &[u8]| [header(count), record.to_vec()].concat();
        assert!(FamilyTag::from_probe(&with(1, &[TYPE_FAMILY_VALUE, 3, 0, 0])).is_some());
        assert!(FamilyTag::from_probe(&with(1, &[TYPE_VALUE, 0, 0])).is_some());
        for refused in [
            with(2, &[TYPE_FAMILY_VALUE, 3, 0, 0]),    // two records
            with(1, &[TYPE_FAMILY_VALUE, 0x83, 0, 0]), // an unfinished varint
            with(1, &[TYPE_FAMILY_VALUE, 0, 0]),       // no id
            with(
                1,
                &[TYPE_FAMILY_VALUE, 0x81, 0x81, 0x81, 0x81, 0x81, 1, 0, 0],
            ), // a six-byte id
            with(1, &[TYPE_VALUE, 3, 0, 0]),           // an id for the default family
            with(1, &[0x2, 3, 0, 0]),                  // another record type
            with(1, &[TYPE_FAMILY_VALUE, 3, 1, 0]),    // a key
            header(1),
            vec![0; 4],
        ] {
            assert_eq!(FamilyTag::from_probe(&refused), None, "{refused:02x?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn any_puts_are_written_as_rocksdb_writes_them(
            puts in proptest::collection::vec(
                (0usize..8, proptest::collection::vec(any::<u8>(), 0..70),
                 proptest::collection::vec(any::<u8>(), 0..400)),
                0..12,
            )
        ) {
            let dir = tempfile::tempdir().unwrap();
            let db = open(dir.path());
            assert_same_batch(&db, &puts);
        }
    }
}
