//! Typed access to the tables inside a transaction: JSON values under string keys.
//!
//! [`Reader`] reads a snapshot. [`Txn`] reads the live write transaction and stages writes in
//! an overlay that its own reads see; the writer applies the overlay only when the closure that
//! staged it succeeded.

use std::collections::BTreeMap;

use redb::{ReadTransaction, ReadableTable, WriteTransaction};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::table::{StoreError, Table};

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
    ) -> Result<Vec<(String, V)>, StoreError>;
}

/// Read access to a snapshot of the store.
#[derive(Debug)]
pub struct Reader<'a> {
    tx: &'a ReadTransaction,
}

impl<'a> Reader<'a> {
    pub(super) fn new(tx: &'a ReadTransaction) -> Self {
        Self { tx }
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
        let t = self.tx.open_table(table.def())?;
        let end = match before {
            Some(b) if b.starts_with(prefix) => b.to_string(),
            // Every key under the prefix sorts before the prefix with a character above any a
            // key holds.
            _ => format!("{prefix}\u{10ffff}"),
        };
        let mut entries = Vec::new();
        let mut last = None;
        for (read, entry) in t.range::<&str>(prefix..end.as_str())?.rev().enumerate() {
            let (k, v) = entry?;
            let key = k.value();
            if !key.starts_with(prefix) {
                break;
            }
            if entries.len() == limit || read == budget {
                return Ok(Page {
                    entries,
                    next: last,
                });
            }
            let value: V = decode(table, key, v.value())?;
            last = Some(key.to_string());
            if keep(key, &value) {
                entries.push((key.to_string(), value));
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
        let t = self.tx.open_table(table.def())?;
        get_raw(&t, key)?
            .map(|b| decode(table, key, &b))
            .transpose()
    }

    fn scan<V: DeserializeOwned>(
        &self,
        table: Table,
        prefix: &str,
    ) -> Result<Vec<(String, V)>, StoreError> {
        let t = self.tx.open_table(table.def())?;
        scan_raw(&t, prefix)?
            .into_iter()
            .map(|(k, b)| decode(table, &k, &b).map(|v| (k, v)))
            .collect()
    }
}

/// A write in progress: reads see the transaction plus this write's own staged changes.
pub struct Txn<'a> {
    tx: &'a WriteTransaction,
    staged: BTreeMap<(Table, String), Option<Vec<u8>>>,
}

impl<'a> Txn<'a> {
    pub(super) fn new(tx: &'a WriteTransaction) -> Self {
        Self {
            tx,
            staged: BTreeMap::new(),
        }
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
            None => {
                let t = self.tx.open_table(table.def())?;
                get_raw(&t, key)?
            }
        };
        raw.map(|b| decode(table, key, &b)).transpose()
    }

    fn scan<V: DeserializeOwned>(
        &self,
        table: Table,
        prefix: &str,
    ) -> Result<Vec<(String, V)>, StoreError> {
        let mut merged: BTreeMap<String, Vec<u8>> = {
            let t = self.tx.open_table(table.def())?;
            scan_raw(&t, prefix)?.into_iter().collect()
        };
        for ((t, key), value) in &self.staged {
            if *t != table || !key.starts_with(prefix) {
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

    /// Applies the staged writes to the transaction.
    pub(super) fn apply(self) -> Result<(), StoreError> {
        let mut current: Option<(Table, redb::Table<'_, &'static str, &'static [u8]>)> = None;
        for ((table, key), value) in self.staged {
            if current.as_ref().map(|(t, _)| *t) != Some(table) {
                current = Some((table, self.tx.open_table(table.def())?));
            }
            let (_, t) = current.as_mut().expect("opened just above");
            match value {
                Some(bytes) => {
                    t.insert(key.as_str(), bytes.as_slice())?;
                }
                None => {
                    t.remove(key.as_str())?;
                }
            }
        }
        Ok(())
    }
}

fn get_raw<T: ReadableTable<&'static str, &'static [u8]>>(
    t: &T,
    key: &str,
) -> Result<Option<Vec<u8>>, StoreError> {
    Ok(t.get(key)?.map(|v| v.value().to_vec()))
}

fn scan_raw<T: ReadableTable<&'static str, &'static [u8]>>(
    t: &T,
    prefix: &str,
) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
    let mut out = Vec::new();
    for entry in t.range(prefix..)? {
        let (k, v) = entry?;
        let key = k.value();
        if !key.starts_with(prefix) {
            break;
        }
        out.push((key.to_string(), v.value().to_vec()));
    }
    Ok(out)
}

fn decode<V: DeserializeOwned>(table: Table, key: &str, bytes: &[u8]) -> Result<V, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
        table,
        key: key.to_string(),
        message: e.to_string(),
    })
}
