//! Copying an installation from one store to another (`ebb store copy`), with every server of
//! both stopped: from a redb file to etcd when an installation grows to several servers, or
//! between etcd prefixes.
//!
//! Every table is copied as it is, seals and all (a seal covers a record's table and key, not
//! where the store is), a few records per write, except the tables of who is up now (servers
//! and run owners: the servers that start on the target claim the runs anew). The target takes
//! the source's schema version last, so a copy of a store whose records are not yet sealed is
//! sealed by the first server that opens it. A target that holds anything is refused unless forced, and then emptied first.
//! The counts of every table are compared at the end.

use std::collections::BTreeMap;

use super::{SCHEMA_KEY, SPLIT_WRITES, Store, StoreError, Table};
use crate::store::Read;

/// Why a copy did not happen or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "{target} already holds an installation ({records} records); pass --force to replace it"
    )]
    NotEmpty { target: String, records: usize },
    #[error(
        "table {table}: {source_count} records in the source but {target_count} in the target after copying"
    )]
    Mismatch {
        table: &'static str,
        source_count: usize,
        target_count: usize,
    },
}

/// How many records of each table were copied.
pub type Copied = BTreeMap<&'static str, usize>;

/// Copies every record of `from` into `to`; see the module's documentation.
pub async fn copy(from: &Store, to: &Store, force: bool) -> Result<Copied, CopyError> {
    let existing = count(to).await?;
    let records: usize = existing.values().sum();
    if records > 0 {
        if !force {
            return Err(CopyError::NotEmpty {
                target: to.describe(),
                records,
            });
        }
        for table in copied_tables() {
            empty(to, table).await?;
        }
    }
    let mut copied = Copied::new();
    for table in copied_tables() {
        let entries = from.read(move |r| r.scan_raw(table)).await?;
        let entries: Vec<(String, Vec<u8>)> = entries
            .into_iter()
            .filter(|(key, _)| !is_own(table, key))
            .collect();
        for part in entries.chunks(SPLIT_WRITES) {
            let part = part.to_vec();
            to.write(move |tx| {
                for (key, bytes) in &part {
                    tx.put_raw(table, key, bytes.clone());
                }
                Ok::<_, StoreError>(())
            })
            .await?;
        }
        copied.insert(table.name(), entries.len());
    }
    let version: Option<u64> = from.read(|r| r.get(Table::Meta, SCHEMA_KEY)).await?;
    if let Some(version) = version {
        to.write(move |tx| tx.put(Table::Meta, SCHEMA_KEY, &version))
            .await?;
    }
    let landed = count(to).await?;
    for (table, source_count) in &copied {
        let target_count = landed.get(table).copied().unwrap_or(0);
        if target_count != *source_count {
            return Err(CopyError::Mismatch {
                table,
                source_count: *source_count,
                target_count,
            });
        }
    }
    Ok(copied)
}

/// The tables a copy carries over: all but the live ones.
fn copied_tables() -> impl Iterator<Item = Table> {
    Table::ALL.into_iter().filter(|t| !t.is_live())
}

/// A record every store keeps of its own: its schema version.
fn is_own(table: Table, key: &str) -> bool {
    table == Table::Meta && key == SCHEMA_KEY
}

/// The records of each table, not counting the store's own.
async fn count(store: &Store) -> Result<Copied, StoreError> {
    store
        .read(|r| {
            let mut counts = Copied::new();
            for table in copied_tables() {
                let n = r
                    .scan_raw(table)?
                    .iter()
                    .filter(|(key, _)| !is_own(table, key))
                    .count();
                counts.insert(table.name(), n);
            }
            Ok(counts)
        })
        .await
}

/// Deletes every record of `table` but the store's own, a few per write.
async fn empty(store: &Store, table: Table) -> Result<(), StoreError> {
    let mut keys = store.keys_under(table, "").await?;
    keys.retain(|k| !is_own(table, k));
    store.delete_in_batches(table, &keys).await
}
