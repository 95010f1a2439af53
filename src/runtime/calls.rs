//! Calls to clouds, kept economical: every server's calls to one account held within client-side
//! token buckets shaped like the cloud's documented limits ([`ebb_spi::CallRates`]), and the
//! polls of a cluster's nodes answered from shared lookups of the whole cluster (one call for
//! many nodes) where the provisioner offers one ([`ebb_spi::Provisioner::batches_lookups`]).
//!
//! A poll joins the cluster's next round. A cluster's rounds go one at a time: a round calls
//! once the one before it has answered (the polls that come meanwhile share it), and within the
//! cluster's pace, a burst of [`BURST`] and then one every [`SPACING`]. A round takes no more
//! polls once its call begins, so every poll is answered by a call that began after it asked
//! (it sees the delete it just made). The first poll of a quiet cluster is answered at once; however
//! many nodes poll, a cluster costs at most two lookups a second once its burst is spent.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ebb_spi::{Context, ProvisionError, Provisioner, Rate, Resource};
use futures_util::FutureExt as _;
use futures_util::future::{BoxFuture, Shared};
use governor::{DefaultDirectRateLimiter, Quota};

/// The lookups a quiet cluster may make at once, each as soon as the one before answered.
pub const BURST: u32 = 4;

/// The time between the starts of two lookups of one cluster once its burst is spent: a
/// cluster's polls cost at most two calls a second, however many nodes it has.
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

/// A round: its lookup's answer, shared by the polls that joined it.
type Round = Shared<BoxFuture<'static, Found>>;

/// Each cluster's round that polls may still join, and its pace.
#[derive(Default)]
struct Rounds {
    current: HashMap<String, Round>,
    paces: HashMap<String, Pace>,
}

/// A cluster's pace: its latest round (the next one calls after it answered), and the
/// theoretical time of its next lookup (a generic cell rate: a round may begin up to
/// `BURST - 1` spacings before it).
struct Pace {
    latest: Round,
    next: tokio::time::Instant,
}

/// When a round asked for at `now` may begin, given the time of the cluster's next lookup at
/// its pace, and that time after it.
fn paced(
    next: tokio::time::Instant,
    now: tokio::time::Instant,
) -> (tokio::time::Instant, tokio::time::Instant) {
    let early = SPACING * (BURST - 1);
    let begin = now.max(next.checked_sub(early).unwrap_or(now));
    (begin, next.max(begin) + SPACING)
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
                    // Clusters quiet for a minute are forgotten.
                    rounds
                        .paces
                        .retain(|_, p| p.next + Duration::from_secs(60) > now);
                    let (at, after) = match rounds.paces.get(&key) {
                        Some(pace) => {
                            let (at, next) = paced(pace.next, now);
                            (Some((at, pace.latest.clone())), next)
                        }
                        None => (None, now + SPACING),
                    };
                    let round = self.round(key.clone(), at, provisioner, ctx, cluster.to_string());
                    rounds.current.insert(key.clone(), round.clone());
                    let pace = Pace {
                        latest: round.clone(),
                        next: after,
                    };
                    rounds.paces.insert(key, pace);
                    round
                }
            }
        };
        Ok(round.await?.get(id).cloned())
    }

    /// One lookup of `cluster`, shared by every poll that joins it before its call begins,
    /// which begins at once or, `after` the cluster's latest round, once that one answered and
    /// not before the instant its pace allows. It runs in a task of its own, so a poll that
    /// gives up cancels nobody's.
    fn round(
        &self,
        key: String,
        after: Option<(tokio::time::Instant, Round)>,
        provisioner: Arc<dyn Provisioner>,
        ctx: Arc<Context>,
        cluster: String,
    ) -> Round {
        let rounds = Arc::clone(&self.rounds);
        let buckets = Arc::clone(&self.buckets);
        let call = tokio::spawn(async move {
            if let Some((at, latest)) = after {
                // Its answer is its own polls'; this round only waits for it.
                let _ = latest.await;
                tokio::time::sleep_until(at).await;
            }
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

    /// A quiet cluster's rounds begin at once, BURST of them; then one every SPACING.
    #[test]
    fn a_clusters_rounds_keep_its_pace() {
        let start = tokio::time::Instant::now();
        // The first round sets the pace one spacing on.
        let mut next = start + SPACING;
        let mut begins = Vec::new();
        // Rounds 2 to BURST + 2.
        for _ in 1..BURST + 2 {
            let (begin, after) = paced(next, start);
            begins.push(begin - start);
            next = after;
        }
        let s = SPACING;
        assert_eq!(
            begins,
            [Duration::ZERO, Duration::ZERO, Duration::ZERO, s, 2 * s]
        );
        // Quiet long enough, the burst is back.
        let later = next + SPACING * BURST;
        assert_eq!(paced(next, later).0, later);
    }

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
