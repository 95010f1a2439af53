//! The servers of the installation, as `GET /v3/servers` shows them.

use std::collections::BTreeMap;

use super::error::ServiceError;
use crate::model::server::{Owner, ServerRecord, ServerView};
use crate::store::{Read, Store, Table};

/// Every server that is up, by name, with how many runs each owns.
pub async fn list(store: &Store) -> Result<Vec<ServerView>, ServiceError> {
    store
        .read(|r| {
            let mut owned: BTreeMap<String, usize> = BTreeMap::new();
            for (_, owner) in r.scan::<Owner>(Table::Owners, "")? {
                *owned.entry(owner.server).or_default() += 1;
            }
            Ok(r.scan::<ServerRecord>(Table::Servers, "")?
                .into_iter()
                .map(|(_, record)| ServerView {
                    runs: owned.get(&record.name).copied().unwrap_or(0),
                    record,
                })
                .collect())
        })
        .await
}
