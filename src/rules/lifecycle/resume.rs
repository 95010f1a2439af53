//! Where a run goes on from: what a supervisor taking it up must do ([`resume`]), and the next
//! deadline its timer waits for ([`next_deadline`]).

use super::event::{Effect, Event};
use crate::model::run::{ClusterStatus as C, ProgramStatus as P, RunRecord, StopReason};

/// What a supervisor taking up `run` after a restart must do to continue where it was.
pub fn resume(run: &RunRecord) -> Vec<Effect> {
    match (run.status, run.cluster.status) {
        (P::Starting, Some(C::Provisioning)) if run.cluster.origin.is_some() => {
            vec![Effect::PrepareCluster]
        }
        (P::Starting, Some(C::Provisioning)) => vec![Effect::CreateCluster],
        (P::Running, Some(C::Provisioned)) if run.relaunch_at.is_some() => {
            vec![Effect::Relaunch]
        }
        (P::Starting, Some(C::Provisioned)) | (P::Running, Some(C::Provisioned)) => {
            let mut effects = vec![Effect::Launch];
            if run.stop.is_some() {
                effects.push(Effect::Kill);
            }
            effects
        }
        (any_status!(), Some(C::Deprovisioning)) => vec![Effect::DeleteCluster],
        (any_status!(), Some(C::Deprovisioned | C::Orphaned | C::Reused)) => vec![Effect::Finish],
        (any_status!(), None | Some(C::Provisioning | C::Provisioned | C::Waiting | C::Idle)) => {
            Vec::new()
        }
    }
}

/// The next deadline of `run` and the event it fires: a WAITING or IDLE cluster's
/// `expiresAt`, or the profile's timeout while the run or its cluster is live.
pub fn next_deadline(run: &RunRecord) -> Option<(u64, Event)> {
    let timeout = run.deadline().map(|d| (d, Event::TimedOut));
    match run.cluster.status {
        Some(C::Waiting | C::Idle) => {
            let expiry = run.cluster.expires_at.map(|e| (e, Event::Expired));
            match (expiry, timeout) {
                (Some(e), Some(t)) if t.0 < e.0 => Some(t),
                (Some(e), _) => Some(e),
                (None, t) => t,
            }
        }
        None | Some(C::Provisioning | C::Provisioned)
            if !run.status.is_end() && run.stop.is_none_or(|s| s.reason != StopReason::Timeout) =>
        {
            timeout
        }
        None
        | Some(
            C::Provisioning
            | C::Provisioned
            | C::Deprovisioning
            | C::Deprovisioned
            | C::Orphaned
            | C::Reused,
        ) => None,
    }
}
