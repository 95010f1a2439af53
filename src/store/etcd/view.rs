//! One closure's view of etcd: every read at one revision (the first read pins it), the keys
//! and ranges it read (what its commit compares), and the first failure, if etcd could not be
//! reached.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use etcd_client::{GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse};

use super::cache::{Entry, Snapshot};
use super::shared::{Shared, Trip, prefix_end};
use crate::store::table::{StoreError, Table};
use crate::store::txn::Source;

/// Largest answer etcd may send for one read.
pub(super) const MAX_RESPONSE: usize = 64 << 20;

/// Keys fetched per request of a scan.
const PAGE: i64 = 256;

/// The first byte of a value kept in chunks: never the first byte of JSON.
pub(super) const CHUNKED: u8 = 0;

/// Where a large value's chunks are: their generation and count, and the value's length.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct Pointer {
    pub(super) generation: String,
    pub(super) chunks: usize,
    pub(super) len: usize,
}

/// What a closure read, for its commit to compare.
#[derive(Debug, Default)]
pub(super) struct ReadSet {
    /// Each key read on its own, as it was then.
    pub(super) keys: BTreeMap<Vec<u8>, KeyRead>,
    /// Each table scanned, and the prefixes scanned in it.
    pub(super) ranges: BTreeMap<Table, BTreeSet<String>>,
}

/// A key as a closure read it.
#[derive(Debug, Clone, Copy)]
pub(super) struct KeyRead {
    pub(super) table: Table,
    /// Its mod revision (0: absent).
    pub(super) revision: i64,
    /// Absent, or stored whole: writing it leaves no chunks to drop.
    pub(super) whole: bool,
}

/// A closure's view of etcd.
pub(super) struct View<'a> {
    shared: &'a Shared,
    /// The copy in memory this view reads the copied tables from, at its revision; `None`:
    /// every read asks etcd.
    snapshot: Option<Snapshot>,
    /// What its reads count as: a read of its own, or a write closure's.
    trip: Trip,
    revision: RefCell<i64>,
    reads: RefCell<ReadSet>,
    failure: RefCell<Option<StoreError>>,
    /// A view read on the caller's own thread ([`View::inline`]), which must not wait on
    /// etcd; and whether a read needed more than the copy holds (the closure's outcome is then
    /// dropped, and it runs again on a view that may ask etcd).
    inline: bool,
    bailed: std::cell::Cell<bool>,
}

/// Most entries a scan of an inline view returns (forward or backward): a larger one runs off
/// the caller's thread.
const INLINE_ENTRIES: usize = 512;

impl<'a> View<'a> {
    /// A view for a read.
    pub(super) fn new(shared: &'a Shared) -> Self {
        Self::counted(shared, Trip::Read)
    }

    /// A view for a write closure.
    pub(super) fn for_write(shared: &'a Shared) -> Self {
        Self::counted(shared, Trip::WriteRead)
    }

    /// A view that reads the copy in memory `snapshot` (and the logs from etcd at its
    /// revision), its reads counted as `trip`.
    pub(super) fn cached(shared: &'a Shared, snapshot: Snapshot, trip: Trip) -> Self {
        let view = Self::counted(shared, trip);
        *view.revision.borrow_mut() = snapshot.revision;
        View {
            snapshot: Some(snapshot),
            ..view
        }
    }

    /// A view of the copy `snapshot` for a read on the caller's own thread: it never waits on
    /// etcd. A read it cannot answer from the copy (a log not held, a chunked value, a large
    /// scan) fails and marks it [`View::bailed`].
    pub(super) fn inline(shared: &'a Shared, snapshot: Snapshot) -> Self {
        View {
            inline: true,
            ..Self::cached(shared, snapshot, Trip::Read)
        }
    }

    /// Whether a read of this inline view needed more than the copy.
    pub(super) fn bailed(&self) -> bool {
        self.bailed.get()
    }

    /// Fails a read an inline view cannot answer.
    fn bail(&self) -> StoreError {
        self.bailed.set(true);
        StoreError::Storage("this read needs etcd; it runs again off the caller's thread".into())
    }

    /// A view for a read of etcd itself at `revision` (etcd's when the read began).
    pub(super) fn at(shared: &'a Shared, revision: i64) -> Self {
        let view = Self::counted(shared, Trip::Read);
        *view.revision.borrow_mut() = revision;
        view
    }

    /// The copy it reads, for a read of `table` from `from` up to `to` (empty: all under
    /// `from`), if the copy holds that.
    fn copy_of(&self, table: Table, from: &str, to: &str) -> Option<&Snapshot> {
        self.snapshot.as_ref().filter(|s| s.holds(table, from, to))
    }

    fn counted(shared: &'a Shared, trip: Trip) -> Self {
        Self {
            shared,
            snapshot: None,
            trip,
            revision: RefCell::new(0),
            reads: RefCell::new(ReadSet::default()),
            failure: RefCell::new(None),
            inline: false,
            bailed: std::cell::Cell::new(false),
        }
    }

    /// The revision the reads saw (0 if there were none).
    pub(super) fn revision(&self) -> i64 {
        *self.revision.borrow()
    }

    pub(super) fn reads(&self) -> std::cell::Ref<'_, ReadSet> {
        self.reads.borrow()
    }

    /// The first failure to reach etcd, if any: the closure's outcome cannot be trusted.
    pub(super) fn failure(&self) -> Option<StoreError> {
        self.failure.borrow().clone()
    }

    /// One range request at the pinned revision. The first pins it, and reads `~pending` at
    /// the same revision: a write larger than a transaction being applied is finished first
    /// (see [`super::intent`]), so no view sees one half applied.
    fn range(&self, key: Vec<u8>, options: GetOptions) -> Result<Vec<KeyValue>, StoreError> {
        if let Some(e) = self.failure() {
            return Err(e);
        }
        if self.inline {
            return Err(self.bail());
        }
        if self.revision() != 0 {
            let options = options.with_revision(self.revision());
            let mut kv = self.shared.kv();
            self.shared.trip(self.trip);
            let answer = self
                .shared
                .handle
                .block_on(async move { kv.get(key, Some(options)).await });
            return match answer {
                Ok(mut response) => Ok(response.take_kvs()),
                Err(e) => Err(self.fail(&e)),
            };
        }
        loop {
            let txn = Txn::new().and_then([
                TxnOp::get(key.clone(), Some(options.clone())),
                self.shared.get_pending(),
            ]);
            let mut kv = self.shared.kv();
            self.shared.trip(self.trip);
            let answer = self
                .shared
                .handle
                .block_on(async move { kv.txn(txn).await });
            let response = match answer {
                Ok(response) => response,
                Err(e) => return Err(self.fail(&e)),
            };
            let revision = response.header().map_or(0, |h| h.revision());
            let mut answers = response.op_responses().into_iter();
            let (Some(TxnOpResponse::Get(mut found)), Some(TxnOpResponse::Get(pending))) =
                (answers.next(), answers.next())
            else {
                return Err(StoreError::Storage(
                    "etcd answered a read with something else".into(),
                ));
            };
            if pending.kvs().is_empty() {
                *self.revision.borrow_mut() = revision;
                return Ok(found.take_kvs());
            }
            if let Err(e) = self.shared.finish_pending() {
                *self.failure.borrow_mut() = Some(e.clone());
                return Err(e);
            }
        }
    }

    /// Keeps the first failure to reach etcd.
    fn fail(&self, e: &etcd_client::Error) -> StoreError {
        let e = self.shared.unavailable(e);
        *self.failure.borrow_mut() = Some(e.clone());
        e
    }

    /// The value as stored: itself, or put together from its chunks.
    fn value(&self, table: Table, key: &str, stored: &[u8]) -> Result<Vec<u8>, StoreError> {
        if stored.first() != Some(&CHUNKED) {
            return Ok(stored.to_vec());
        }
        let corrupt = |message: String| StoreError::Corrupt {
            table,
            key: key.to_string(),
            message,
        };
        let pointer: Pointer =
            serde_json::from_slice(&stored[1..]).map_err(|e| corrupt(e.to_string()))?;
        let mut base = self.shared.keys.chunks(table, key);
        base.push(0);
        base.extend_from_slice(pointer.generation.as_bytes());
        base.push(0);
        let mut value = Vec::with_capacity(pointer.len.min(MAX_RESPONSE));
        let mut chunks = 0;
        let end = prefix_end(&base);
        self.pages(base, end, |kv| {
            value.extend_from_slice(kv.value());
            chunks += 1;
        })?;
        if chunks != pointer.chunks || value.len() != pointer.len {
            return Err(corrupt(format!(
                "{chunks} of its {} chunks ({} of {} bytes) are in etcd",
                pointer.chunks,
                value.len(),
                pointer.len
            )));
        }
        Ok(value)
    }

    /// Every key from `from` up to `end` (etcd keys, `end` excluded), a page at a time, in
    /// key order.
    fn pages(
        &self,
        mut from: Vec<u8>,
        end: Vec<u8>,
        mut each: impl FnMut(&KeyValue),
    ) -> Result<(), StoreError> {
        loop {
            let kvs = self.range(
                from.clone(),
                GetOptions::new().with_range(end.clone()).with_limit(PAGE),
            )?;
            for kv in &kvs {
                each(kv);
            }
            match kvs.last() {
                Some(last) if kvs.len() as i64 == PAGE => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => return Ok(()),
            }
        }
    }

    /// Records that the closure scanned `prefix` of `table`, for its commit to compare.
    fn note_range(&self, table: Table, prefix: &str) {
        self.reads
            .borrow_mut()
            .ranges
            .entry(table)
            .or_default()
            .insert(prefix.to_string());
    }

    fn table_key(&self, table: Table, kv: &KeyValue) -> Result<String, StoreError> {
        let start = self.shared.keys.table_start(table);
        kv.key()
            .get(start..)
            .and_then(|k| std::str::from_utf8(k).ok())
            .map(str::to_string)
            .ok_or_else(|| StoreError::Storage("etcd returned a key outside its range".into()))
    }
}

impl View<'_> {
    /// Notes key `etcd_key` of `table` read, as `found` (its stored value and mod revision).
    fn note_key(&self, table: Table, etcd_key: Vec<u8>, found: Option<(&[u8], i64)>) {
        let read = KeyRead {
            table,
            revision: found.map_or(0, |(_, revision)| revision),
            whole: found.is_none_or(|(value, _)| value.first() != Some(&CHUNKED)),
        };
        self.reads.borrow_mut().keys.insert(etcd_key, read);
    }

    /// Entries of the copy as `(table key, stored value)`.
    fn read_copy(
        &self,
        table: Table,
        entries: Vec<(Vec<u8>, Entry)>,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let start = self.shared.keys.table_start(table);
        entries
            .into_iter()
            .map(|(k, e)| {
                let key = k
                    .get(start..)
                    .and_then(|k| std::str::from_utf8(k).ok())
                    .map(str::to_string)
                    .ok_or_else(|| StoreError::Storage("a copied key outside its table".into()))?;
                let value = self.value(table, &key, &e.value)?;
                Ok((key, value))
            })
            .collect()
    }
}

impl Source for View<'_> {
    fn get(&self, table: Table, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let etcd_key = self.shared.keys.of(table, key);
        if let Some(copy) = self.copy_of(table, key, "") {
            let found = copy.get(&etcd_key).cloned();
            self.note_key(
                table,
                etcd_key,
                found.as_ref().map(|e| (e.value.as_slice(), e.mod_revision)),
            );
            return found.map(|e| self.value(table, key, &e.value)).transpose();
        }
        let kvs = self.range(etcd_key.clone(), GetOptions::new())?;
        let found = kvs.first();
        self.note_key(
            table,
            etcd_key,
            found.map(|kv| (kv.value(), KeyValue::mod_revision(kv))),
        );
        found
            .map(|kv| self.value(table, key, kv.value()))
            .transpose()
    }

    fn scan(
        &self,
        table: Table,
        prefix: &str,
        from: &str,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        // What the commit compares is the whole prefix: the keys before `from` are as read.
        self.note_range(table, prefix);
        let start = self.shared.keys.of(table, prefix.max(from));
        let end = prefix_end(&self.shared.keys.of(table, prefix));
        if start >= end {
            return Ok(Vec::new());
        }
        if let Some(copy) = self.copy_of(table, prefix, "") {
            let entries = copy.range(&start, &end);
            if self.inline && entries.len() > INLINE_ENTRIES {
                return Err(self.bail());
            }
            return self.read_copy(table, entries);
        }
        let mut raw = Vec::new();
        let mut bad = None;
        self.pages(start, end, |kv| match self.table_key(table, kv) {
            Ok(key) => raw.push((key, kv.value().to_vec())),
            Err(e) => bad = Some(e),
        })?;
        if let Some(e) = bad {
            return Err(e);
        }
        raw.into_iter()
            .map(|(key, stored)| {
                let value = self.value(table, &key, &stored)?;
                Ok((key, value))
            })
            .collect()
    }

    fn scan_back(
        &self,
        table: Table,
        prefix: &str,
        end: &str,
        count: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.note_range(table, prefix);
        if let Some(copy) = self.copy_of(table, prefix, end) {
            let from = self.shared.keys.of(table, prefix);
            let to = self.shared.keys.of(table, end);
            let entries = copy.range_back(&from, &to, count);
            if self.inline && entries.len() > INLINE_ENTRIES {
                return Err(self.bail());
            }
            return self.read_copy(table, entries);
        }
        let options = GetOptions::new()
            .with_range(self.shared.keys.of(table, end))
            .with_sort(SortTarget::Key, SortOrder::Descend)
            .with_limit(i64::try_from(count).unwrap_or(i64::MAX));
        let kvs = self.range(self.shared.keys.of(table, prefix), options)?;
        kvs.iter()
            .map(|kv| {
                let key = self.table_key(table, kv)?;
                let value = self.value(table, &key, kv.value())?;
                Ok((key, value))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_after_its_last_key() {
        assert_eq!(prefix_end(b"/ebb/runs/"), b"/ebb/runs0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }
}
