//! Typed access to the tables inside a transaction: JSON values under string keys, the same
//! on every backend.
//!
//! A backend provides raw reads ([`Source`]). [`Reader`] reads a snapshot through one. [`Txn`]
//! reads a write in progress and stages writes in an overlay that its own reads see; the
//! backend applies the overlay only when the closure that staged it succeeded.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;

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
}

impl<'a> Reader<'a> {
    pub(super) fn new(src: &'a dyn Source) -> Self {
        Self { src }
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
            let value: V = decode(table, &key, &bytes)?;
            last = Some(key.clone());
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

impl Read for Reader<'_> {
    fn get<V: DeserializeOwned>(&self, table: Table, key: &str) -> Result<Option<V>, StoreError> {
        self.src
            .get(table, key)?
            .map(|b| decode(table, key, &b))
            .transpose()
    }

    fn scan_from<V: DeserializeOwned>(
        &self,
        table: Table,
        prefix: &str,
        from: &str,
    ) -> Result<Vec<(String, V)>, StoreError> {
        self.src
            .scan(table, prefix, from)?
            .into_iter()
            .map(|(k, b)| decode(table, &k, &b).map(|v| (k, v)))
            .collect()
    }
}

/// A write in progress: reads see the transaction plus this write's own staged changes.
pub struct Txn<'a> {
    src: &'a dyn Source,
    staged: Staged,
}

impl<'a> Txn<'a> {
    pub(super) fn new(src: &'a dyn Source) -> Self {
        Self {
            src,
            staged: BTreeMap::new(),
        }
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
        raw.map(|b| decode(table, key, &b)).transpose()
    }

    fn scan_from<V: DeserializeOwned>(
        &self,
        table: Table,
        prefix: &str,
        from: &str,
    ) -> Result<Vec<(String, V)>, StoreError> {
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
        merged
            .into_iter()
            .map(|(k, b)| decode(table, &k, &b).map(|v| (k, v)))
            .collect()
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
        self.staged.insert((table, key.to_string()), Some(bytes));
        Ok(())
    }

    /// Stages the removal of `key` (a no-op if it is absent).
    pub fn delete(&mut self, table: Table, key: &str) {
        self.staged.insert((table, key.to_string()), None);
    }
}

fn decode<V: DeserializeOwned>(table: Table, key: &str, bytes: &[u8]) -> Result<V, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
        table,
        key: key.to_string(),
        message: e.to_string(),
    })
}
