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

/// Taken off the lease's time to live when judging it by this host's clock, at the least.
const MARGIN: Duration = Duration::from_millis(250);

/// How much of its time to live a lease must still have, by this host's clock, for an
/// outside call to start under it: a third of it (at least [`MARGIN`]). A call that starts
/// has that long to reach the cloud before etcd can end the lease and another server claim
/// the run and look for what the call made; with only a quarter second, a call held up on
/// a busy host (waiting for a worker thread or a lock) could land after the new owner
/// looked and found nothing, and make a resource twice. A lease renewed every third of its
/// time to live stays this far from its end while etcd answers.
fn margin(ttl: Duration) -> Duration {
    (ttl / 3).max(MARGIN)
}

/// How long after a renewal was sent a lease of `ttl` counts as live for outside calls.
fn live_for(ttl: Duration) -> Duration {
    ttl.saturating_sub(margin(ttl))
}

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
        let until = sent + live_for(ttl);
        *self
            .lease_deadline
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(until);
        *self.lease_expiry.lock().unwrap_or_else(|e| e.into_inner()) = Some(sent + ttl);
    }

    /// The earliest instant etcd may end `lease` (its last renewal's sending plus its time
    /// to live), while it is the one held.
    pub(super) fn lease_expiry(&self, lease: i64) -> Option<Instant> {
        if *self.lease.borrow() != lease || lease == 0 {
            return None;
        }
        *self.lease_expiry.lock().unwrap_or_else(|e| e.into_inner())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outside_call_starts_only_while_a_third_of_the_lease_is_left() {
        let ttl = Duration::from_secs(3);
        // Renewed 1.9 s ago: over a second left before etcd may end it.
        assert!(Duration::from_millis(1_900) < live_for(ttl));
        // Renewed 2.1 s ago: under a second left, too little for a call held up on a busy
        // host to land before another server may claim the run and look for its resource.
        assert!(Duration::from_millis(2_100) >= live_for(ttl));
        // Renewed every third of the time to live, a lease etcd keeps renewing stays live
        // with room for the renewal's round trip.
        assert!(live_for(ttl) > ttl / 3 + Duration::from_millis(500));
        // A short lease keeps the quarter second at least.
        assert_eq!(
            live_for(Duration::from_millis(600)),
            Duration::from_millis(350)
        );
    }
}
