//! Watches on etcd: a server hears at once when the keys of a table go (the owner records of
//! a server whose lease ended), instead of finding out on its next look.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use etcd_client::{WatchFilterType, WatchOptions};
use tokio::sync::watch;

use super::shared::Shared;
use crate::store::table::Table;

impl Shared {
    /// Counts the deletions of `table`'s keys into `deleted`, for as long as the store is open
    /// and someone listens; watches again after a failure.
    pub(super) async fn watch_deletes(self: Arc<Self>, table: Table, deleted: watch::Sender<u64>) {
        let prefix = self.keys.of(table, "");
        loop {
            if self.closed.load(Ordering::SeqCst) || deleted.is_closed() {
                return;
            }
            let options = WatchOptions::new()
                .with_prefix()
                .with_filters([WatchFilterType::NoPut]);
            let watched = self
                .watch_client()
                .watch(prefix.clone(), Some(options))
                .await;
            let mut stream = match watched {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::debug!(error = %e, table = table.name(), "watch not started; again soon");
                    self.failover();
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            loop {
                match stream.message().await {
                    Ok(Some(response)) => {
                        if !response.events().is_empty() {
                            deleted.send_modify(|n| *n = n.wrapping_add(1));
                        }
                        if response.canceled() {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(error = %e, table = table.name(), "watch ended; again soon");
                        break;
                    }
                }
                if deleted.is_closed() {
                    return;
                }
            }
            // Whatever was deleted while no watch ran is found by the next look anyway; tell
            // the listener to look now.
            deleted.send_modify(|n| *n = n.wrapping_add(1));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
