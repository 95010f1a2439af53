//! Cluster reuse: what a run must match to take over a cluster another run left `IDLE`
//! ([`key`]), and the claim that moves the cluster from one run to the other ([`claim`]).
//!
//! A run of a profile with `clusterReuse` that COMPLETED leaves its cluster `IDLE` (see
//! `lifecycle`). A later run whose key is the same takes it over: one store write commits
//! both transitions of [`Claim`], so two runs never get one cluster and a crash leaves it with
//! exactly one of them. The cluster keeps the id of the run that made it: its resources,
//! services and cloud tags stay where they are, whichever run holds it. A taker that cannot
//! use the cluster (`ReuseFailed`) deprovisions it itself, then makes its own.

use crate::model::run::{ClusterStatus as C, Origin, ProgramStatus as P, RunRecord};
use crate::rules::lifecycle::{Effect, Transition};

/// Both sides of a claim: the run that left the cluster, and the run that takes it over.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub left: Transition,
    pub taker: Transition,
}

/// Why a cluster cannot be taken over.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("it is not IDLE any more")]
    NotIdle,
    #[error("it expires within the claim's margin")]
    Expiring,
    #[error("the runs do not match")]
    Mismatch,
    #[error("the run is not PENDING")]
    NotPending,
}

/// A claim is refused when the idle cluster expires within this many seconds: its own
/// deprovision would race the program's start.
pub const MARGIN: u64 = 5;

/// `taker` (PENDING) takes over the cluster `left` (IDLE) left, at `now_ms`; `begun_ms` is when
/// the taker began looking, for the claim's duration.
pub fn claim(
    left: &RunRecord,
    taker: &RunRecord,
    now_ms: u64,
    begun_ms: u64,
) -> Result<Claim, Refusal> {
    if left.cluster.status != Some(C::Idle) || left.cluster.attention.is_some() {
        return Err(Refusal::NotIdle);
    }
    if taker.status != P::Pending || taker.cluster.status.is_some() || taker.pooled {
        return Err(Refusal::NotPending);
    }
    let now = now_ms / 1000;
    if left
        .cluster
        .expires_at
        .is_some_and(|e| e <= now.saturating_add(MARGIN))
    {
        return Err(Refusal::Expiring);
    }
    if left.key.namespace != taker.key.namespace
        || left.cluster.reuse_key.is_none()
        || left.cluster.reuse_key != taker.reuse_key()
    {
        return Err(Refusal::Mismatch);
    }
    let mut gone = left.clone();
    gone.cluster.status = Some(C::Reused);
    gone.cluster.expires_at = None;
    gone.cluster.reused_by = Some(taker.key.run.clone());
    gone.cluster.end = Some(now);
    gone.cluster.idle_until = Some(now);
    let note = format!("cluster REUSED: run {} took it over", taker.key.run);
    let left_t = Transition {
        run: gone,
        effects: vec![Effect::Finish],
        notes: vec![note],
    };
    let mut next = taker.clone();
    next.status = P::Starting;
    next.cluster.status = Some(C::Provisioning);
    next.cluster.id = Some(left.cluster_id().to_string());
    next.cluster.nodes = left.cluster.nodes.clone();
    let claim_ms = now_ms.saturating_sub(begun_ms);
    next.cluster.origin = Some(Origin {
        from: left.key.run.clone(),
        claimed_at: now_ms,
        claim_ms,
        ready: false,
        discarded: None,
        pooled: left.pooled,
    });
    next.config = left.config.clone();
    let note = format!(
        "run STARTING on the IDLE cluster run {} left (cluster {}, taken over in {claim_ms} ms); making it ready",
        left.key.run,
        left.cluster_id()
    );
    let taker_t = Transition {
        run: next,
        effects: vec![Effect::PrepareCluster],
        notes: vec![note],
    };
    Ok(Claim {
        left: left_t,
        taker: taker_t,
    })
}

#[cfg(test)]
mod tests;
