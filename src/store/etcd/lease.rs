//! This server's etcd lease: taken when the server joins the installation, refreshed every
//! third of its time to live, and told as ended (0) when etcd says it is gone.
//!
//! Only etcd decides that a lease ended: while etcd cannot be reached the lease is kept as it
//! is (an etcd without a leader expires nothing, and a new leader gives every lease its full
//! time again), and every write for a run stays fenced on it meanwhile.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use etcd_client::Error;

use super::shared::Shared;
use crate::store::table::StoreError;

impl Shared {
    /// Takes a lease of `ttl` and keeps it alive until it ends or the store closes.
    pub(super) async fn take_lease(self: Arc<Self>, ttl: Duration) -> Result<i64, StoreError> {
        let seconds = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let granted = self
            .lease_client()
            .grant(seconds, None)
            .await
            .map_err(|e| self.unavailable(&e))?;
        let id = granted.id();
        self.lease.send_replace(id);
        tokio::spawn(Arc::clone(&self).keep(id, ttl));
        Ok(id)
    }

    async fn keep(self: Arc<Self>, id: i64, ttl: Duration) {
        let every = (ttl / 3).max(Duration::from_millis(100));
        loop {
            tokio::time::sleep(every).await;
            if self.closed.load(Ordering::SeqCst) || *self.lease.borrow() != id {
                return;
            }
            match self.lease_client().keep_alive(id).await {
                Ok(_) => {}
                Err(Error::LeaseKeepAliveError(message)) => {
                    tracing::warn!(lease = id, %message, "this server's etcd lease ended");
                    self.lease.send_if_modified(|held| {
                        let ended = *held == id;
                        if ended {
                            *held = 0;
                        }
                        ended
                    });
                    return;
                }
                Err(e) => {
                    tracing::debug!(lease = id, error = %e, "lease not refreshed this time");
                    self.failover();
                }
            }
        }
    }

    /// Ends lease `id` at once: its keys go now rather than after its time to live.
    pub(super) async fn revoke(&self, id: i64) -> Result<(), StoreError> {
        self.lease_client()
            .revoke(id)
            .await
            .map(|_| ())
            .map_err(|e| self.unavailable(&e))
    }
}
