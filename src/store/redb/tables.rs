//! redb's tables as the store's: each [`Table`] one redb table of string keys and JSON bytes,
//! read through a [`Source`] in a read or write transaction, written by [`apply`].

use redb::{ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};

use crate::store::table::{StoreError, Table};
use crate::store::txn::{Source, Staged};

impl From<redb::Error> for StoreError {
    fn from(e: redb::Error) -> Self {
        StoreError::Storage(e.to_string())
    }
}

macro_rules! storage_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                StoreError::Storage(e.to_string())
            }
        }
    )*};
}
storage_errors!(
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

pub(super) fn def(table: Table) -> TableDefinition<'static, &'static str, &'static [u8]> {
    TableDefinition::new(table.name())
}

/// A read transaction as a [`Source`].
pub(super) struct Snapshot<'a>(pub(super) &'a ReadTransaction);

/// The writer's transaction as a [`Source`]: it shows the writes of the closures before this
/// one in the same commit.
pub(super) struct Live<'a>(pub(super) &'a WriteTransaction);

/// Both transactions read their tables the same way.
macro_rules! source {
    ($($t:ident),*) => {$(
        impl Source for $t<'_> {
            fn get(&self, table: Table, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
                get_raw(&self.0.open_table(def(table))?, key)
            }

            fn scan(
                &self,
                table: Table,
                prefix: &str,
                from: &str,
            ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
                scan_raw(&self.0.open_table(def(table))?, prefix, from)
            }

            fn scan_back(
                &self,
                table: Table,
                prefix: &str,
                end: &str,
                count: usize,
            ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
                scan_back_raw(&self.0.open_table(def(table))?, prefix, end, count)
            }
        }
    )*};
}
source!(Snapshot, Live);

/// Applies one closure's staged writes to the writer's transaction.
pub(super) fn apply(tx: &WriteTransaction, staged: Staged) -> Result<(), StoreError> {
    let mut current: Option<(Table, redb::Table<'_, &'static str, &'static [u8]>)> = None;
    for ((table, key), value) in staged {
        if current.as_ref().map(|(t, _)| *t) != Some(table) {
            current = Some((table, tx.open_table(def(table))?));
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

fn get_raw<T: ReadableTable<&'static str, &'static [u8]>>(
    t: &T,
    key: &str,
) -> Result<Option<Vec<u8>>, StoreError> {
    Ok(t.get(key)?.map(|v| v.value().to_vec()))
}

fn scan_raw<T: ReadableTable<&'static str, &'static [u8]>>(
    t: &T,
    prefix: &str,
    from: &str,
) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
    let mut out = Vec::new();
    for entry in t.range(prefix.max(from)..)? {
        let (k, v) = entry?;
        let key = k.value();
        if !key.starts_with(prefix) {
            break;
        }
        out.push((key.to_string(), v.value().to_vec()));
    }
    Ok(out)
}

fn scan_back_raw<T: ReadableTable<&'static str, &'static [u8]>>(
    t: &T,
    prefix: &str,
    end: &str,
    count: usize,
) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
    let mut out = Vec::new();
    for entry in t.range::<&str>(prefix..end)?.rev() {
        if out.len() == count {
            break;
        }
        let (k, v) = entry?;
        let key = k.value();
        if !key.starts_with(prefix) {
            break;
        }
        out.push((key.to_string(), v.value().to_vec()));
    }
    Ok(out)
}
