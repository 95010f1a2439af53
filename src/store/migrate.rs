//! Migrations that need the installation's key, run by a server at start-up before anything
//! else reads the store: a store of schema version 2 holds records without seals
//! (`store::seal`); [`seal_installation`] seals them all and bumps the version in one write,
//! once, and refuses a store that says version 2 but already holds sealed records (its
//! version was set back by someone). Run ends move under their namespace in the same write.

use std::sync::Arc;

use super::cipher::Cipher;
use super::seal::{sealed_by, wrap};
use super::table::{SCHEMA_KEY, SCHEMA_VERSION, SEALED_SINCE, StoreError, Table};
use super::{Read, Store, Txn};

/// Why an installation's records could not be sealed.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "{store} says schema version {found} (records not yet sealed) but holds {table}/{key} sealed by this installation: its version was set back by someone writing to the store directly; restore the store from a backup"
    )]
    SetBack {
        store: String,
        found: u64,
        table: &'static str,
        key: String,
    },
}

/// What sealing an installation did: records sealed, and records left out (deleted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sealing {
    pub sealed: usize,
    pub dropped: Vec<(&'static str, String)>,
}

/// Seals every record of an installation whose store is older than [`SEALED_SINCE`], in one
/// write that also sets the schema version, so it happens once and seals only what was there
/// before it. `upgrade` says what each record is to be sealed as, or that it is deleted
/// instead (one the older version already refused, say a token record it did not sign). Run
/// at start-up with the installation's key, on the store not yet [`Store::sealed`], before
/// anything else reads it.
pub async fn seal_installation<U>(
    store: &Store,
    cipher: &Arc<Cipher>,
    upgrade: U,
) -> Result<Sealing, SealError>
where
    U: Fn(&Txn, &Cipher, Table, &str, Vec<u8>) -> Option<Vec<u8>> + Send + Sync + 'static,
{
    // Most starts find the store sealed: a read says so, with no write.
    let version: Option<u64> = store.read(|r| r.get(Table::Meta, SCHEMA_KEY)).await?;
    if version.unwrap_or(SCHEMA_VERSION) >= SEALED_SINCE {
        return Ok(Sealing::default());
    }
    let cipher = Arc::clone(cipher);
    let describe = store.describe();
    store
        .write(move |tx| {
            let found: u64 = tx.get(Table::Meta, SCHEMA_KEY)?.unwrap_or(SCHEMA_VERSION);
            if found >= SEALED_SINCE {
                return Ok(Sealing::default());
            }
            let mut done = Sealing::default();
            for table in Table::ALL {
                for (key, bytes) in tx.scan_raw(table)? {
                    if !table.sealed(&key) {
                        continue;
                    }
                    if sealed_by(&cipher, table, &key, &bytes) {
                        return Err(SealError::SetBack {
                            store: describe.clone(),
                            found,
                            table: table.name(),
                            key,
                        });
                    }
                    if let Some(bytes) = upgrade(tx, &cipher, table, &key, bytes) {
                        let key = match moved(table, &key, &bytes) {
                            Some(new) => {
                                tx.delete(table, &key);
                                new
                            }
                            None => key,
                        };
                        tx.put_raw(table, &key, wrap(&cipher, table, &key, &bytes));
                        done.sealed += 1;
                    } else {
                        tx.delete(table, &key);
                        done.dropped.push((table.name(), key));
                    }
                }
            }
            tx.put(Table::Meta, SCHEMA_KEY, &SEALED_SINCE)?;
            Ok(done)
        })
        .await
}

/// The key a record of a schema 2 store moves to in schema 3, if it moves: run ends go under
/// their namespace (`store::ends::key`).
fn moved(table: Table, key: &str, bytes: &[u8]) -> Option<String> {
    if table != Table::RunEnds || key.contains('/') {
        return None;
    }
    let end: crate::model::schedule::RunEnd = serde_json::from_slice(bytes).ok()?;
    Some(super::ends::key(&end.run.namespace, key))
}
