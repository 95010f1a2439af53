//! This server's etcd lease: taken when the server joins the installation, refreshed every
//! third of its time to live, and told as ended (0) when etcd says it is gone.
//!
//! Only etcd decides that a lease ended: while etcd cannot be reached the lease is kept as it
//! is (an etcd without a leader expires nothing, and a new leader gives every lease its full
//! time again), and every write for a run stays fenced on it meanwhile.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use etcd_client::Error;

use super::shared::Shared;
use crate::store::backend::LeaseState;
use crate::store::table::StoreError;

/// Taken off the lease's time to live when judging it by this host's clock.
const MARGIN: Duration = Duration::from_millis(250);

impl Shared {
    /// Takes a lease of `ttl` and keeps it alive until it ends or the store closes.
    pub(super) async fn take_lease(self: Arc<Self>, ttl: Duration) -> Result<i64, StoreError> {
        let seconds = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let sent = Instant::now();
        let granted = self
            .lease_client()
            .grant(seconds, None)
            .await
            .map_err(|e| self.unavailable(&e))?;
        let id = granted.id();
        let ttl = Duration::from_secs(u64::try_from(granted.ttl()).unwrap_or(0)).min(ttl);
        self.lease.send_replace(id);
        self.renewed(sent, ttl);
        tokio::spawn(Arc::clone(&self).keep(id, ttl));
        Ok(id)
    }

    /// The lease was renewed by a request sent at `sent`: etcd keeps it at least `ttl` from
    /// then.
    fn renewed(&self, sent: Instant, ttl: Duration) {
        let until = sent + ttl.saturating_sub(MARGIN);
        *self
            .lease_deadline
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(until);
    }

    /// How `lease` stands: the one held and renewed within its time to live by this host's
    /// clock, held but not renewed lately, or gone.
    pub(super) fn lease_state(&self, lease: i64) -> LeaseState {
        if *self.lease.borrow() != lease {
            return LeaseState::Lost;
        }
        let renewed = self
            .lease_deadline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|until| Instant::now() < until);
        if renewed {
            LeaseState::Live
        } else {
            LeaseState::Unsure
        }
    }

    async fn keep(self: Arc<Self>, id: i64, ttl: Duration) {
        let every = (ttl / 3).max(Duration::from_millis(100));
        loop {
            tokio::time::sleep(every).await;
            if self.closed.load(Ordering::SeqCst) || *self.lease.borrow() != id {
                return;
            }
            let sent = Instant::now();
            match self.lease_client().keep_alive(id).await {
                Ok(_) => self.renewed(sent, ttl),
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
