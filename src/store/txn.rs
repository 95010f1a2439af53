//! Typed access to the tables inside a transaction: JSON values under string keys, the same
//! on every backend.
//!
//! A backend provides raw reads ([`Source`]). [`Reader`] reads a snapshot through one. [`Txn`]
//! reads a write in progress and stages writes in an overlay that its own reads see; the
//! backend applies the overlay only when the closure that staged it succeeded.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::cipher::Cipher;
use super::seal;
use super::table::{StoreError, Table};

/// Raw reads of one backend's view of the store: a snapshot, or a write in progress.
pub(super) trait Source {
    /// The bytes under `key`, if any.
    fn get(&self, table: Table, key: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// Every entry whose key starts with `prefix` and sorts at or after `from` (`""`: every
    /// one), in key order: those before `from` are not even copied.
    fn scan(
        &self,
        table: Table,
        prefix: &str,
        from: &str,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError>;

    /// At most `count` entries whose key starts with `prefix` and sorts before `end`, last
    /// key first.
    fn scan_back(
        &self,
        table: Table,
        prefix: &str,
        end: &str,
        count: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError>;
}

/// The staged writes of one closure: `None` removes the key.
pub(super) type Staged = BTreeMap<(Table, String), Option<Vec<u8>>>;

/// Reading tables: implemented by a snapshot ([`Reader`]) and by a write in progress
/// ([`Txn`]), so service checks read the same way in both.
pub trait Read {
    /// The value under `key`, if any.
    fn get<V: DeserializeOwned>(&self, table: Table, key: &str) -> Result<Option<V>, StoreError>;

    /// Every entry whose key starts with `prefix`, in key order.
    fn scan<V: DeserializeOwned>(
        &self,
        table: Table,
        prefix: &str,
    ) -> Result<Vec<(String, V)>, StoreError> {
        self.scan_from(table, prefix, "")
    }

    /// Every entry whose key starts with `prefix` and sorts at or after `from`, in key order;
    /// the entries before it are not decoded.
    fn scan_from<V: DeserializeOwned>(
        &self,
        table: Table,
        prefix: &str,
        from: &str,
    ) -> Result<Vec<(String, V)>, StoreError>;
}

/// Read access to a snapshot of the store.
#[derive(Debug)]
pub struct Reader<'a> {
    src: &'a dyn Source,
    /// The key records are sealed with ([`seal`]); none in a store opened without it.
    seal: Option<Arc<Cipher>>,
}

impl<'a> Reader<'a> {
    pub(super) fn new(src: &'a dyn Source, seal: Option<Arc<Cipher>>) -> Self {
        Self { src, seal }
    }
}

impl std::fmt::Debug for dyn Source + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Source")
    }
}

/// One page of a backward scan: what was kept, newest first, and where the next page starts
/// (`None` at the end of the range).
#[derive(Debug)]
pub struct Page<V> {
    pub entries: Vec<(String, V)>,
    pub next: Option<String>,
}

impl Reader<'_> {
    /// Entries under `prefix`, last key first, from just before `before` (a key) if given: at
    /// most `limit` that `keep` accepts, reading at most `budget` entries, so no page costs
    /// more than its budget however few entries match.
    pub fn scan_back<V: DeserializeOwned>(
        &self,
        table: Table,
        prefix: &str,
        before: Option<&str>,
        limit: usize,
        budget: usize,
        mut keep: impl FnMut(&str, &V) -> bool,
    ) -> Result<Page<V>, StoreError> {
        let end = match before {
            Some(b) if b.starts_with(prefix) => b.to_string(),
            // Every key under the prefix sorts before the prefix with a character above any a
            // key holds.
            _ => format!("{prefix}\u{10ffff}"),
        };
        let rows = self
            .src
            .scan_back(table, prefix, &end, budget.saturating_add(1))?;
        let mut entries = Vec::new();
        let mut last = None;
        for (read, (key, bytes)) in rows.into_iter().enumerate() {
            if entries.len() == limit || read == budget {
                return Ok(Page {
                    entries,
                    next: last,
                });
            }
            last = Some(key.clone());
            let Some(value) = decode::<V>(self.seal.as_deref(), table, &key, &bytes)? else {
                continue;
            };
            if keep(&key, &value) {
                entries.push((key, value));
            }
        }
        Ok(Page {
            entries,
            next: None,
        })
    }
}

impl Reader<'_> {
    /// Every entry of `table` as it is stored, seal and all: for copying a store, and for
    /// tests that play someone writing to it directly; never for deciding anything.
    pub fn scan_raw(&self, table: Table) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.src.scan(table, "", "")
    }
}

impl Read for Reader<'_> {
    fn get<V: DeserializeOwned>(&self, table: Table, key: &str) -> Result<Option<V>, StoreError> {
        match self.src.get(table, key)? {
            Some(b) => decode(self.seal.as_deref(), table, key, &b),
            None => Ok(None),
        }
    }

    fn scan_from<V: DeserializeOwned>(
        &self,
        table: Table,
        prefix: &str,
        from: &str,
    ) -> Result<Vec<(String, V)>, StoreError> {
        decode_all(
            self.seal.as_deref(),
            table,
            self.src.scan(table, prefix, from)?,
        )
    }
}

/// A write in progress: reads see the transaction plus this write's own staged changes.
pub struct Txn<'a> {
    src: &'a dyn Source,
    staged: Staged,
    /// The key records are sealed with ([`seal`]); none in a store opened without it.
    seal: Option<Arc<Cipher>>,
}

impl<'a> Txn<'a> {
    pub(super) fn new(src: &'a dyn Source) -> Self {
        Self {
            src,
            staged: BTreeMap::new(),
            seal: None,
        }
    }

    /// Seals what this write puts, and reads only sealed records, with `seal` (as the store
    /// whose write runs in it says).
    pub(super) fn seal_with(&mut self, seal: Option<Arc<Cipher>>) {
        self.seal = seal;
    }

    /// What the closure staged, for the backend to apply.
    pub(super) fn into_staged(self) -> Staged {
        self.staged
    }
}

impl std::fmt::Debug for Txn<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Txn")
            .field("staged", &self.staged.len())
            .finish()
    }
}

impl Read for Txn<'_> {
    fn get<V: DeserializeOwned>(&self, table: Table, key: &str) -> Result<Option<V>, StoreError> {
        let raw = match self.staged.get(&(table, key.to_string())) {
            Some(staged) => staged.clone(),
            None => self.src.get(table, key)?,
        };
        match raw {
            Some(b) => decode(self.seal.as_deref(), table, key, &b),
            None => Ok(None),
        }
    }

    fn scan_from<V: DeserializeOwned>(
        &self,
        table: Table,
        prefix: &str,
        from: &str,
    ) -> Result<Vec<(String, V)>, StoreError> {
        decode_all(
            self.seal.as_deref(),
            table,
            self.merged(table, prefix, from)?,
        )
    }
}

impl Txn<'_> {
    /// The bytes of every entry under `prefix` at or after `from`, with this write's own.
    fn merged(
        &self,
        table: Table,
        prefix: &str,
        from: &str,
    ) -> Result<BTreeMap<String, Vec<u8>>, StoreError> {
        let mut merged: BTreeMap<String, Vec<u8>> =
            self.src.scan(table, prefix, from)?.into_iter().collect();
        for ((t, key), value) in &self.staged {
            if *t != table || !key.starts_with(prefix) || key.as_str() < from {
                continue;
            }
            match value {
                Some(bytes) => merged.insert(key.clone(), bytes.clone()),
                None => merged.remove(key),
            };
        }
        Ok(merged)
    }

    /// Every entry of `table` as it is stored, seal and all: for copying a store and sealing
    /// one, never for deciding anything.
    pub fn scan_raw(&self, table: Table) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        Ok(self.merged(table, "", "")?.into_iter().collect())
    }

    /// Stages `bytes` under `key` as they are, unsealed: for copying and sealing a store, and
    /// for tests that play someone writing to it directly (see [`Txn::scan_raw`]).
    pub fn put_raw(&mut self, table: Table, key: &str, bytes: Vec<u8>) {
        self.staged.insert((table, key.to_string()), Some(bytes));
    }
}

impl Txn<'_> {
    /// Stages `value` under `key`.
    pub fn put<V: Serialize + ?Sized>(
        &mut self,
        table: Table,
        key: &str,
        value: &V,
    ) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(value).map_err(|e| StoreError::Corrupt {
            table,
            key: key.to_string(),
            message: format!("cannot encode: {e}"),
        })?;
        let bytes = match &self.seal {
            Some(cipher) if table.sealed(key) => seal::wrap(cipher, table, key, &bytes),
            Some(_) | None => bytes,
        };
        self.staged.insert((table, key.to_string()), Some(bytes));
        Ok(())
    }

    /// Stages the removal of `key` (a no-op if it is absent).
    pub fn delete(&mut self, table: Table, key: &str) {
        self.staged.insert((table, key.to_string()), None);
    }
}

/// The record in `bytes`, read under `key` of `table`: `None` if it needs a seal this
/// installation did not give it (see [`seal::open`]).
fn decode<V: DeserializeOwned>(
    cipher: Option<&Cipher>,
    table: Table,
    key: &str,
    bytes: &[u8],
) -> Result<Option<V>, StoreError> {
    let Some(record) = seal::open(cipher, table, key, bytes) else {
        return Ok(None);
    };
    serde_json::from_slice(record)
        .map(Some)
        .map_err(|e| StoreError::Corrupt {
            table,
            key: key.to_string(),
            message: e.to_string(),
        })
}

/// The records of `entries` that may be read (see [`decode`]), in their order.
fn decode_all<V: DeserializeOwned>(
    cipher: Option<&Cipher>,
    table: Table,
    entries: impl IntoIterator<Item = (String, Vec<u8>)>,
) -> Result<Vec<(String, V)>, StoreError> {
    let mut out = Vec::new();
    for (key, bytes) in entries {
        if let Some(value) = decode(cipher, table, &key, &bytes)? {
            out.push((key, value));
        }
    }
    Ok(out)
}
