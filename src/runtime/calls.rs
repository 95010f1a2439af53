//! Calls to clouds, kept economical: every server's calls to one account held within client-side
//! token buckets shaped like the cloud's documented limits ([`ebb_spi::CallRates`]), and the
//! polls of a cluster's nodes answered from shared lookups of the whole cluster (one call for
//! many nodes) where the provisioner offers one ([`ebb_spi::Provisioner::batches_lookups`]).
//!
//! A poll joins the cluster's next round, which calls after [`GATHER`] (so the polls that come
//! meanwhile share it) and never sooner than [`SPACING`] after the cluster's last call began.
//! A round takes no more polls once its call begins, so every poll is answered by a call that
//! began after it asked (it sees the delete it just made). However many nodes poll, a cluster
//! costs at most two lookups a second.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ebb_spi::{Context, ProvisionError, Provisioner, Rate, Resource};
use futures_util::FutureExt as _;
use futures_util::future::{BoxFuture, Shared};
use governor::{DefaultDirectRateLimiter, Quota};

/// How long a round waits for more polls before it calls.
pub const GATHER: Duration = Duration::from_millis(25);

/// The least time between the starts of two lookups of one cluster: a cluster's polls cost at
/// most two calls a second, however many nodes it has.
pub const SPACING: Duration = Duration::from_millis(500);

/// The kind of call a bucket limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Read,
    Create,
    Delete,
}

/// A cluster's resources by id, as one lookup found them.
type Found = Result<Arc<HashMap<String, Resource>>, ProvisionError>;

/// The buckets and lookup rounds of this server's calls.
#[derive(Default)]
pub struct Calls {
    buckets: Arc<Buckets>,
    rounds: Arc<Mutex<Rounds>>,
}

/// Each cluster's lookup in flight, and when its last one began.
#[derive(Default)]
struct Rounds {
    current: HashMap<String, Shared<BoxFuture<'static, Found>>>,
    began: HashMap<String, tokio::time::Instant>,
}

/// Each account's bucket for each kind of call.
#[derive(Default)]
struct Buckets(Mutex<HashMap<(String, String, Kind), Arc<DefaultDirectRateLimiter>>>);

impl std::fmt::Debug for Calls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Calls").finish_non_exhaustive()
    }
}

fn limiter(rate: Rate) -> Option<DefaultDirectRateLimiter> {
    let burst = NonZeroU32::new(rate.burst)?;
    let period = Duration::from_secs_f64(1.0 / rate.per_second.max(0.001));
    let quota = Quota::with_period(period)?.allow_burst(burst);
    Some(DefaultDirectRateLimiter::direct(quota))
}

impl Buckets {
    async fn admit(&self, provisioner: &dyn Provisioner, ctx: &Context, kind: Kind) {
        let rates = provisioner.call_rates(&ctx.properties);
        let rate = match kind {
            Kind::Read => rates.read,
            Kind::Create => rates.create,
            Kind::Delete => rates.delete,
        };
        let Some(rate) = rate else {
            return;
        };
        let key = (
            provisioner.spec().name.to_string(),
            provisioner.account(&ctx.properties),
            kind,
        );
        let bucket = {
            let mut buckets = self.0.lock().unwrap_or_else(|e| e.into_inner());
            match buckets.get(&key) {
                Some(b) => Some(Arc::clone(b)),
                None => limiter(rate).map(|l| {
                    let l = Arc::new(l);
                    buckets.insert(key, Arc::clone(&l));
                    l
                }),
            }
        };
        if let Some(bucket) = bucket {
            bucket.until_ready().await;
        }
    }
}

impl Calls {
    /// Waits until the account `ctx` points at may take one more call of `kind`.
    pub async fn admit(&self, provisioner: &dyn Provisioner, ctx: &Context, kind: Kind) {
        self.buckets.admit(provisioner, ctx, kind).await;
    }

    /// Resource `id` of cluster `cluster`, from the cluster's shared lookup; `None` once it
    /// is gone.
    pub async fn describe(
        &self,
        provisioner: Arc<dyn Provisioner>,
        ctx: Arc<Context>,
        cluster: &str,
        id: &str,
    ) -> Result<Option<Resource>, ProvisionError> {
        let key = format!(
            "{}\u{0}{}\u{0}{cluster}",
            provisioner.spec().name,
            provisioner.account(&ctx.properties)
        );
        let round = {
            let mut rounds = self.rounds.lock().unwrap_or_else(|e| e.into_inner());
            match rounds.current.get(&key) {
                Some(round) => round.clone(),
                None => {
                    let now = tokio::time::Instant::now();
                    let at = rounds
                        .began
                        .get(&key)
                        .map_or(now, |last| *last + SPACING)
                        .max(now + GATHER);
                    rounds.began.insert(key.clone(), at);
                    // Clusters long gone are forgotten.
                    rounds
                        .began
                        .retain(|_, b| *b + Duration::from_secs(60) > now);
                    let round = self.round(key.clone(), at, provisioner, ctx, cluster.to_string());
                    rounds.current.insert(key, round.clone());
                    round
                }
            }
        };
        Ok(round.await?.get(id).cloned())
    }

    /// One lookup of `cluster`, shared by every poll that joins it before its call begins. It
    /// runs in a task of its own, so a poll that gives up cancels nobody's.
    fn round(
        &self,
        key: String,
        at: tokio::time::Instant,
        provisioner: Arc<dyn Provisioner>,
        ctx: Arc<Context>,
        cluster: String,
    ) -> Shared<BoxFuture<'static, Found>> {
        let rounds = Arc::clone(&self.rounds);
        let buckets = Arc::clone(&self.buckets);
        let call = tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            buckets.admit(provisioner.as_ref(), &ctx, Kind::Read).await;
            // Joined no more from here: a poll must see what its call saw after it asked (a
            // delete it just made, say), never an answer from a call that began before.
            rounds
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .current
                .remove(&key);
            let found = provisioner.lookup(&ctx, &cluster).await;
            let found = found.map_err(|e| ProvisionError {
                message: ctx.redact(&e.message),
                ..e
            })?;
            Ok(Arc::new(
                found.into_iter().map(|r| (r.id.clone(), r)).collect(),
            ))
        });
        async move {
            call.await.unwrap_or_else(|e| {
                Err(ProvisionError::retryable(format!(
                    "the cluster's lookup did not finish: {e}"
                )))
            })
        }
        .boxed()
        .shared()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_is_made_only_from_a_usable_rate() {
        assert!(
            limiter(Rate {
                burst: 0,
                per_second: 1.0
            })
            .is_none()
        );
        let l = limiter(Rate {
            burst: 2,
            per_second: 0.5,
        })
        .expect("a bucket");
        assert!(l.check().is_ok());
        assert!(l.check().is_ok());
        assert!(l.check().is_err(), "the burst is spent");
    }
}
