//! Which cluster operation of a run may run, as a pure function: `on(slot, event) -> (slot,
//! effects)`.
//!
//! A run's cluster takes one operation at a time. The run's lifecycle drives create and
//! delete; admins drive the others (expand, shrink, configure, start/stop/restart services).
//! The rules:
//! - an admin's operation needs a PROVISIONED or WAITING cluster and nothing running;
//! - the lifecycle never waits for an admin: its operation cancels the admin's, waits in the
//!   queue until the admin's has stopped, then starts;
//! - an operation that ends tells the lifecycle (create and delete) or changes the run's
//!   cluster (an admin's);
//! - after a restart, an admin's operation the crash interrupted carries on, unless the
//!   lifecycle already started one of its own.
//!
//! The supervisor keeps the [`Slot`], feeds it every event and carries out the effects, in
//! order. It decides nothing itself.

use crate::model::operation::OpOutcome;
use crate::model::plan::ClusterOperation;
use crate::model::run::ClusterStatus;
use crate::rules::lifecycle;

/// The run's cluster operations: the one running and the lifecycle's waiting for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Slot {
    pub running: Option<ClusterOperation>,
    pub queued: Option<ClusterOperation>,
}

/// Something that asks for, or ends, a cluster operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The lifecycle asks for its create or delete.
    Lifecycle(ClusterOperation),
    /// The lifecycle cancels its operation (the run is stopped while provisioning, or
    /// deprovisioned by force).
    CancelLifecycle,
    /// An admin asks for an operation on a cluster that is `cluster` and, with `attention`,
    /// needs attention (only a repair may run on it then).
    Admin {
        operation: ClusterOperation,
        cluster: Option<ClusterStatus>,
        attention: bool,
    },
    /// After a restart: the audit log says `operation` was running when the server stopped.
    Resume {
        operation: ClusterOperation,
        cluster: Option<ClusterStatus>,
    },
    /// The operation could not be started (the provisioner is not installed, or the
    /// operation could not be recorded).
    NotStarted {
        operation: ClusterOperation,
        reason: String,
    },
    /// The running operation ended.
    Done {
        operation: ClusterOperation,
        outcome: OpOutcome,
    },
}

/// What the supervisor must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Start a planner for the operation (an admin's is recorded before it is answered).
    Start(ClusterOperation),
    /// Ask the running planner to stop before its next outside call.
    Cancel,
    /// Refuse the admin's request: the run cannot be changed, for this reason.
    Refuse(String),
    /// Tell the run's lifecycle.
    Lifecycle(lifecycle::Event),
    /// Apply (or drop) the admin's change, as the operation ended.
    Changed(OpOutcome),
}

/// Why an operation other than a repair is refused on a cluster that needs attention.
pub const NEEDS_ATTENTION: &str = "its cluster needs attention (an operation failed and so did its rollback); only a repair may run on it: POST .../cluster {\"operation\": \"repair\"}";

/// Why an admin's operation is refused on a cluster that is `cluster`, if it is.
fn unfit(cluster: Option<ClusterStatus>) -> Option<String> {
    let status = match cluster {
        Some(ClusterStatus::Provisioned | ClusterStatus::Waiting) => return None,
        Some(
            s @ (ClusterStatus::Provisioning
            | ClusterStatus::Idle
            | ClusterStatus::Reused
            | ClusterStatus::Deprovisioning
            | ClusterStatus::Deprovisioned
            | ClusterStatus::Orphaned),
        ) => s.to_string(),
        None => "not started".to_string(),
    };
    Some(format!(
        "its cluster is {status}; operations need a PROVISIONED or WAITING cluster"
    ))
}

/// Whether an admin's operation a restart interrupted may carry on: nothing else runs and
/// the cluster takes operations.
pub fn may_resume(slot: Slot, cluster: Option<ClusterStatus>) -> bool {
    slot.running.is_none() && unfit(cluster).is_none()
}

/// What the lifecycle hears when its operation ends; a cancelled delete says nothing (the
/// run has finished, or is being deprovisioned by force).
fn lifecycle_event(operation: ClusterOperation, outcome: OpOutcome) -> Option<lifecycle::Event> {
    use lifecycle::Event as L;
    let delete = match operation {
        ClusterOperation::Create => false,
        ClusterOperation::Delete => true,
        ClusterOperation::Expand
        | ClusterOperation::Shrink
        | ClusterOperation::StartServices
        | ClusterOperation::StopServices
        | ClusterOperation::RestartServices
        | ClusterOperation::Configure
        | ClusterOperation::ReplaceNode
        | ClusterOperation::AddServices
        | ClusterOperation::RemoveServices
        | ClusterOperation::Repair => return None,
    };
    Some(match (delete, outcome) {
        (false, OpOutcome::Done) => L::Provisioned,
        (false, OpOutcome::Failed(m) | OpOutcome::RollbackFailed(m)) => L::ProvisionFailed(m),
        (false, OpOutcome::Cancelled) => L::CreateStopped,
        (true, OpOutcome::Done) => L::Deprovisioned,
        (true, OpOutcome::Failed(m) | OpOutcome::RollbackFailed(m)) => L::DeprovisionFailed(m),
        (true, OpOutcome::Cancelled) => return None,
    })
}

/// The next slot and what to do, for `event` in `slot`.
pub fn on(slot: Slot, event: Event) -> (Slot, Vec<Effect>) {
    let admin_running = slot.running.is_some_and(|r| !r.is_lifecycle());
    match event {
        Event::Lifecycle(operation) if admin_running => (
            Slot {
                queued: Some(operation),
                ..slot
            },
            vec![Effect::Cancel],
        ),
        Event::Lifecycle(operation) => (
            Slot {
                running: Some(operation),
                queued: None,
            },
            vec![Effect::Start(operation)],
        ),
        Event::CancelLifecycle => {
            let effects = match slot.running {
                Some(_) => vec![Effect::Cancel],
                None => Vec::new(),
            };
            (
                Slot {
                    queued: None,
                    ..slot
                },
                effects,
            )
        }
        Event::Admin {
            operation,
            cluster,
            attention,
        } => {
            if let Some(reason) = unfit(cluster) {
                return (slot, vec![Effect::Refuse(reason)]);
            }
            if attention && operation != ClusterOperation::Repair {
                return (slot, vec![Effect::Refuse(NEEDS_ATTENTION.to_string())]);
            }
            if let Some(running) = slot.running {
                let reason = format!("a {} operation is running on its cluster", running.name());
                return (slot, vec![Effect::Refuse(reason)]);
            }
            let running = Some(operation);
            (Slot { running, ..slot }, vec![Effect::Start(operation)])
        }
        Event::Resume { operation, cluster } => {
            if operation.is_lifecycle() || !may_resume(slot, cluster) {
                return (slot, Vec::new());
            }
            let running = Some(operation);
            (Slot { running, ..slot }, vec![Effect::Start(operation)])
        }
        Event::NotStarted { operation, reason } => {
            let slot = Slot {
                running: None,
                ..slot
            };
            let effects = match operation {
                ClusterOperation::Create => {
                    vec![Effect::Lifecycle(lifecycle::Event::ProvisionFailed(reason))]
                }
                ClusterOperation::Delete => {
                    vec![Effect::Lifecycle(lifecycle::Event::DeprovisionFailed(
                        reason,
                    ))]
                }
                ClusterOperation::Expand
                | ClusterOperation::Shrink
                | ClusterOperation::StartServices
                | ClusterOperation::StopServices
                | ClusterOperation::RestartServices
                | ClusterOperation::Configure
                | ClusterOperation::ReplaceNode
                | ClusterOperation::AddServices
                | ClusterOperation::RemoveServices
                | ClusterOperation::Repair => vec![Effect::Refuse(reason)],
            };
            (slot, effects)
        }
        Event::Done { operation, outcome } if !operation.is_lifecycle() => {
            let mut effects = vec![Effect::Changed(outcome)];
            let slot = match slot.queued {
                Some(queued) => {
                    effects.push(Effect::Start(queued));
                    Slot {
                        running: Some(queued),
                        queued: None,
                    }
                }
                None => Slot::default(),
            };
            (slot, effects)
        }
        Event::Done { operation, outcome } => {
            let slot = Slot {
                running: None,
                ..slot
            };
            let effects = lifecycle_event(operation, outcome)
                .map(Effect::Lifecycle)
                .into_iter()
                .collect();
            (slot, effects)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ClusterOperation::{Create, Delete, Expand, Shrink};

    fn slot(running: Option<ClusterOperation>, queued: Option<ClusterOperation>) -> Slot {
        Slot { running, queued }
    }

    /// Every kind of slot a supervisor can be in.
    fn slots() -> Vec<(&'static str, Slot)> {
        vec![
            ("idle", slot(None, None)),
            ("create", slot(Some(Create), None)),
            ("delete", slot(Some(Delete), None)),
            ("admin", slot(Some(Expand), None)),
            ("admin+queued", slot(Some(Expand), Some(Delete))),
        ]
    }

    /// Every kind of event, with the clusters that decide an admin's request.
    fn events() -> Vec<(&'static str, Event)> {
        let fit = Some(ClusterStatus::Provisioned);
        let unfit = Some(ClusterStatus::Deprovisioning);
        let admin = |cluster| Event::Admin {
            operation: Shrink,
            cluster,
            attention: false,
        };
        let attention = |operation| Event::Admin {
            operation,
            cluster: Some(ClusterStatus::Provisioned),
            attention: true,
        };
        let resume = |operation, cluster| Event::Resume { operation, cluster };
        let not_started = |operation| Event::NotStarted {
            operation,
            reason: "r".into(),
        };
        let done = |operation, outcome| Event::Done { operation, outcome };
        let failed = || OpOutcome::Failed("boom".into());
        vec![
            ("lifecycle create", Event::Lifecycle(Create)),
            ("lifecycle delete", Event::Lifecycle(Delete)),
            ("cancel", Event::CancelLifecycle),
            ("admin fit", admin(fit)),
            ("admin waiting", admin(Some(ClusterStatus::Waiting))),
            ("admin unfit", admin(unfit)),
            ("admin unstarted", admin(None)),
            ("admin needing attention", attention(Shrink)),
            (
                "repair needing attention",
                attention(ClusterOperation::Repair),
            ),
            ("resume admin", resume(Shrink, fit)),
            ("resume admin unfit", resume(Shrink, unfit)),
            ("resume lifecycle", resume(Create, fit)),
            ("not started create", not_started(Create)),
            ("not started delete", not_started(Delete)),
            ("not started admin", not_started(Shrink)),
            ("create done", done(Create, OpOutcome::Done)),
            ("create failed", done(Create, failed())),
            ("create cancelled", done(Create, OpOutcome::Cancelled)),
            ("delete done", done(Delete, OpOutcome::Done)),
            ("delete failed", done(Delete, failed())),
            ("delete cancelled", done(Delete, OpOutcome::Cancelled)),
            ("admin done", done(Expand, OpOutcome::Done)),
            ("admin failed", done(Expand, failed())),
        ]
    }

    /// The expected answer for a (slot, event) pair, written out as a table.
    fn expected(state: &str, event: &str) -> (Slot, Vec<Effect>) {
        use Effect::*;
        let from = slots()
            .into_iter()
            .find(|(n, _)| *n == state)
            .expect("a slot")
            .1;
        let same = |effects: Vec<Effect>| (from, effects);
        let unfit = |s: &str| {
            Refuse(format!(
                "its cluster is {s}; operations need a PROVISIONED or WAITING cluster"
            ))
        };
        let busy = |r: &str| Refuse(format!("a {r} operation is running on its cluster"));
        let l = |e: lifecycle::Event| Lifecycle(e);
        let cleared = slot(None, from.queued);
        match (state, event) {
            ("admin" | "admin+queued", "lifecycle create") => {
                (slot(Some(Expand), Some(Create)), vec![Cancel])
            }
            ("admin" | "admin+queued", "lifecycle delete") => {
                (slot(Some(Expand), Some(Delete)), vec![Cancel])
            }
            (_, "lifecycle create") => (slot(Some(Create), None), vec![Start(Create)]),
            (_, "lifecycle delete") => (slot(Some(Delete), None), vec![Start(Delete)]),
            ("idle", "cancel") => same(vec![]),
            (_, "cancel") => (slot(from.running, None), vec![Cancel]),
            (_, "admin unfit") => same(vec![unfit("DEPROVISIONING")]),
            (_, "admin unstarted") => same(vec![unfit("not started")]),
            (_, "admin needing attention") => same(vec![Refuse(NEEDS_ATTENTION.into())]),
            ("idle", "admin fit" | "admin waiting") => {
                (slot(Some(Shrink), None), vec![Start(Shrink)])
            }
            ("idle", "repair needing attention") => (
                slot(Some(ClusterOperation::Repair), None),
                vec![Start(ClusterOperation::Repair)],
            ),
            ("create", "admin fit" | "admin waiting" | "repair needing attention") => {
                same(vec![busy("create")])
            }
            ("delete", "admin fit" | "admin waiting" | "repair needing attention") => {
                same(vec![busy("delete")])
            }
            (_, "admin fit" | "admin waiting" | "repair needing attention") => {
                same(vec![busy("expand")])
            }
            ("idle", "resume admin") => (slot(Some(Shrink), None), vec![Start(Shrink)]),
            (_, "resume admin" | "resume admin unfit" | "resume lifecycle") => same(vec![]),
            (_, "not started create") => (
                cleared,
                vec![l(lifecycle::Event::ProvisionFailed("r".into()))],
            ),
            (_, "not started delete") => (
                cleared,
                vec![l(lifecycle::Event::DeprovisionFailed("r".into()))],
            ),
            (_, "not started admin") => (cleared, vec![Refuse("r".into())]),
            (_, "create done") => (cleared, vec![l(lifecycle::Event::Provisioned)]),
            (_, "create failed") => (
                cleared,
                vec![l(lifecycle::Event::ProvisionFailed("boom".into()))],
            ),
            (_, "create cancelled") => (cleared, vec![l(lifecycle::Event::CreateStopped)]),
            (_, "delete done") => (cleared, vec![l(lifecycle::Event::Deprovisioned)]),
            (_, "delete failed") => (
                cleared,
                vec![l(lifecycle::Event::DeprovisionFailed("boom".into()))],
            ),
            (_, "delete cancelled") => (cleared, vec![]),
            ("admin+queued", "admin done") => (
                slot(Some(Delete), None),
                vec![Changed(OpOutcome::Done), Start(Delete)],
            ),
            ("admin+queued", "admin failed") => (
                slot(Some(Delete), None),
                vec![Changed(OpOutcome::Failed("boom".into())), Start(Delete)],
            ),
            (_, "admin done") => (Slot::default(), vec![Changed(OpOutcome::Done)]),
            (_, "admin failed") => (
                Slot::default(),
                vec![Changed(OpOutcome::Failed("boom".into()))],
            ),
            (s, e) => panic!("no expectation for ({s}, {e})"),
        }
    }

    #[test]
    fn every_slot_and_event() {
        let mut pairs = 0;
        for (state, from) in slots() {
            for (name, event) in events() {
                let got = on(from, event);
                assert_eq!(got, expected(state, name), "({state}, {name})");
                pairs += 1;
            }
        }
        assert_eq!(pairs, slots().len() * events().len());
    }

    #[test]
    fn the_lifecycle_waits_for_an_admin_and_then_starts() {
        let (s, e) = on(
            Slot::default(),
            Event::Admin {
                operation: Expand,
                cluster: Some(ClusterStatus::Waiting),
                attention: false,
            },
        );
        assert_eq!(e, vec![Effect::Start(Expand)]);
        let (s, e) = on(s, Event::Lifecycle(Delete));
        assert_eq!(e, vec![Effect::Cancel]);
        let (s, e) = on(
            s,
            Event::Done {
                operation: Expand,
                outcome: OpOutcome::Cancelled,
            },
        );
        assert_eq!(
            e,
            vec![Effect::Changed(OpOutcome::Cancelled), Effect::Start(Delete)]
        );
        let (s, e) = on(
            s,
            Event::Done {
                operation: Delete,
                outcome: OpOutcome::Done,
            },
        );
        assert_eq!(e, vec![Effect::Lifecycle(lifecycle::Event::Deprovisioned)]);
        assert_eq!(s, Slot::default());
    }
}
