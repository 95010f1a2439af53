//! How a cluster operation ends, as pure functions: whether it is rolled back, what is
//! recorded, and what its planner reports.
//!
//! [`on`] is the end of a running operation: `on(phase, event) -> (phase, effects)`.
//! ```text
//! Forward ─Settled→ Recording ─Recorded→ Ended (report)
//!                             └─Recorded, a failure or an operator's cancel to undo→ Undoing ─Settled→ Recording ─Recorded→ Ended
//! any Recording ─NotRecorded→ Ended (report the failure)
//! ```
//! An operation is rolled back once, when its kind can be undone
//! ([`ClusterOperation::undoable`]) and it failed or an operator cancelled it; one the run's
//! own stop cancelled is not (the cluster's delete follows), and a rollback that fails or is
//! cancelled is not rolled back in turn.
//!
//! [`resume`] is how a planner takes up an operation of a kind a restart may have cut short.

use crate::model::operation::{OpOutcome, OpStatus};
use crate::model::plan::ClusterOperation;

/// The error recorded for an operation a stop request cancelled.
pub const CANCELLED: &str = "cancelled by a stop request";

/// Who cancelled an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancel {
    /// The run's lifecycle (a stop, a deprovision): the cluster's delete follows, so nothing
    /// is undone.
    Stop,
    /// An operator, named by the token's name: what the operation did is undone.
    By(String),
}

impl Cancel {
    /// The error an operation cancelled so records.
    pub fn error(&self) -> String {
        match self {
            Cancel::Stop => CANCELLED.to_string(),
            Cancel::By(actor) => format!("cancelled by {actor}"),
        }
    }
}

/// The operation a rollback undoes: its error, and whether an operator cancelled it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undoing {
    pub error: String,
    pub cancelled: bool,
}

/// Where an operation is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// The operation's own tasks run.
    Forward,
    /// The rollback's tasks run.
    Undoing(Undoing),
    /// The end of the operation (or of its rollback) is being recorded.
    Recording {
        /// The operation being undone, when this is a rollback.
        undoing: Option<Undoing>,
        /// The error recorded for this one: its failure, else why it was cancelled.
        error: Option<String>,
        /// A task failed (else an error is the cancel's).
        failed: bool,
        cancel: Option<Cancel>,
        rollback: bool,
    },
    /// Reported; nothing more happens.
    Ended,
}

/// What the planner tells the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Nothing runs any more and nothing more will start: every task is done, or the
    /// operation stops because a task failed past its retries (`failure`) or it was
    /// cancelled.
    Settled {
        failure: Option<String>,
        cancel: Option<Cancel>,
    },
    /// The end was recorded; with a rollback, as operation `id`.
    Recorded { id: u32 },
    /// The end could not be recorded.
    NotRecorded(String),
}

/// What the planner must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Record the operation's end with this status and error; with `rollback`, record its
    /// rollback in the same write.
    Record {
        status: OpStatus,
        error: Option<String>,
        rollback: bool,
    },
    /// Run the rollback just recorded.
    RunRollback,
    /// Report how the operation ended, and stop.
    Report(OpOutcome),
}

/// The next phase of `operation` and what to do, for `event` in `phase`.
pub fn on(operation: ClusterOperation, phase: Phase, event: Event) -> (Phase, Vec<Effect>) {
    match (phase, event) {
        (phase @ (Phase::Forward | Phase::Undoing(_)), Event::Settled { failure, cancel }) => {
            let undoing = match phase {
                Phase::Undoing(u) => Some(u),
                Phase::Forward | Phase::Recording { .. } | Phase::Ended => None,
            };
            let wanted = match &cancel {
                None => failure.is_some(),
                Some(Cancel::Stop) => false,
                Some(Cancel::By(_)) => true,
            };
            let rollback = wanted && undoing.is_none() && operation.undoable();
            let status = match (&failure, &cancel) {
                (Some(_), _) => OpStatus::Failed,
                (None, Some(_)) => OpStatus::Cancelled,
                (None, None) => OpStatus::Succeeded,
            };
            let failed = failure.is_some();
            let error = failure.or_else(|| cancel.as_ref().map(Cancel::error));
            let record = Effect::Record {
                status,
                error: error.clone(),
                rollback,
            };
            let phase = Phase::Recording {
                undoing,
                error,
                failed,
                cancel,
                rollback,
            };
            (phase, vec![record])
        }
        (
            Phase::Recording {
                undoing,
                error,
                failed,
                cancel,
                rollback,
            },
            Event::Recorded { id },
        ) => {
            if rollback {
                let undoing = Undoing {
                    error: error.unwrap_or_default(),
                    cancelled: !failed,
                };
                return (Phase::Undoing(undoing), vec![Effect::RunRollback]);
            }
            let outcome = match (undoing, error) {
                (Some(u), None) if u.cancelled => OpOutcome::Cancelled,
                (Some(u), None) => {
                    OpOutcome::Failed(format!("{} (rolled back by operation {id})", u.error))
                }
                (Some(u), Some(e)) => OpOutcome::RollbackFailed(format!(
                    "{}; the rollback (operation {id}) failed too: {e}",
                    u.error
                )),
                (None, None) => OpOutcome::Done,
                (None, Some(_)) if !failed && cancel.is_some() => OpOutcome::Cancelled,
                (None, Some(e)) => OpOutcome::Failed(e),
            };
            (Phase::Ended, vec![Effect::Report(outcome)])
        }
        (Phase::Recording { .. }, Event::NotRecorded(e)) => {
            let message = format!("cannot record the operation's end: {e}");
            (
                Phase::Ended,
                vec![Effect::Report(OpOutcome::Failed(message))],
            )
        }
        // Events that cannot happen in a phase change nothing: a planner settles only while
        // tasks run, and hears about its write only while it writes.
        (
            phase @ (Phase::Forward | Phase::Undoing(_)),
            Event::Recorded { .. } | Event::NotRecorded(_),
        )
        | (phase @ Phase::Recording { .. }, Event::Settled { .. })
        | (
            phase @ Phase::Ended,
            Event::Settled { .. } | Event::Recorded { .. } | Event::NotRecorded(_),
        ) => (phase, Vec::new()),
    }
}

/// How a planner takes up an operation when the audit log's last one of its kind is in
/// `status`, with a rollback in `undo` status if it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// Carry on with the operation.
    CarryOn,
    /// Carry on with its rollback.
    CarryOnRollback,
    /// It ended: report this.
    Report(OpOutcome),
    /// Start a new operation.
    Start,
}

/// See [`Resume`]. A failed or cancelled delete is tried anew; an operation of another kind
/// that ended is reported as it ended.
pub fn resume(
    operation: ClusterOperation,
    status: OpStatus,
    undo: Option<OpStatus>,
    error: Option<&str>,
) -> Resume {
    let ended = |outcome: OpOutcome| match operation {
        ClusterOperation::Delete => Resume::Start,
        ClusterOperation::Create
        | ClusterOperation::Expand
        | ClusterOperation::Shrink
        | ClusterOperation::StartServices
        | ClusterOperation::StopServices
        | ClusterOperation::RestartServices
        | ClusterOperation::Configure
        | ClusterOperation::ReplaceNode
        | ClusterOperation::AddServices
        | ClusterOperation::RemoveServices
        | ClusterOperation::Repair => Resume::Report(outcome),
    };
    let failed = || OpOutcome::Failed(error.unwrap_or_default().to_string());
    match (status, undo) {
        (OpStatus::Running, _) => Resume::CarryOn,
        (OpStatus::Succeeded, _) => Resume::Report(OpOutcome::Done),
        (OpStatus::Failed | OpStatus::Cancelled, Some(OpStatus::Running)) => {
            Resume::CarryOnRollback
        }
        (OpStatus::Cancelled, Some(OpStatus::Succeeded)) => ended(OpOutcome::Cancelled),
        (OpStatus::Failed | OpStatus::Cancelled, Some(OpStatus::Failed | OpStatus::Cancelled)) => {
            ended(OpOutcome::RollbackFailed(
                error.unwrap_or_default().to_string(),
            ))
        }
        (OpStatus::Failed, Some(OpStatus::Succeeded)) => ended(failed()),
        (OpStatus::Failed | OpStatus::Cancelled, None) => Resume::Start,
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use ClusterOperation::{Create, Delete, Shrink};

    fn by() -> Cancel {
        Cancel::By("ops".into())
    }

    fn undoing(cancelled: bool) -> Undoing {
        Undoing {
            error: "E".into(),
            cancelled,
        }
    }

    fn phases() -> Vec<(&'static str, Phase)> {
        let recording = |undoing: Option<Undoing>,
                         error: Option<&str>,
                         cancel: Option<Cancel>,
                         rollback| Phase::Recording {
            undoing,
            error: error.map(str::to_string),
            failed: error.is_some_and(|e| !e.starts_with("cancelled")),
            cancel,
            rollback,
        };
        vec![
            ("forward", Phase::Forward),
            ("undoing", Phase::Undoing(undoing(false))),
            ("undoing a cancel", Phase::Undoing(undoing(true))),
            ("recording ok", recording(None, None, None, false)),
            ("recording failed", recording(None, Some("F"), None, false)),
            (
                "recording cancelled",
                recording(None, Some(CANCELLED), Some(Cancel::Stop), false),
            ),
            ("recording rollback", recording(None, Some("F"), None, true)),
            (
                "recording cancel's rollback",
                recording(None, Some("cancelled by ops"), Some(by()), true),
            ),
            (
                "recording undone",
                recording(Some(undoing(false)), None, None, false),
            ),
            (
                "recording cancel undone",
                recording(Some(undoing(true)), None, None, false),
            ),
            (
                "recording undo failed",
                recording(Some(undoing(false)), Some("F"), None, false),
            ),
            ("ended", Phase::Ended),
        ]
    }

    fn events() -> Vec<(&'static str, Event)> {
        let settled = |failure: Option<&str>, cancel| Event::Settled {
            failure: failure.map(str::to_string),
            cancel,
        };
        vec![
            ("done", settled(None, None)),
            ("failed", settled(Some("F"), None)),
            ("stopped", settled(None, Some(Cancel::Stop))),
            ("failed and stopped", settled(Some("F"), Some(Cancel::Stop))),
            ("cancelled", settled(None, Some(by()))),
            ("failed and cancelled", settled(Some("F"), Some(by()))),
            ("recorded", Event::Recorded { id: 7 }),
            ("not recorded", Event::NotRecorded("disk".into())),
        ]
    }

    /// The expected answer for an undoable operation (a create), written out.
    fn expected(phase: &str, event: &str) -> (Phase, Vec<Effect>) {
        use OpStatus::{Cancelled, Failed, Succeeded};
        let from = phases()
            .into_iter()
            .find(|(n, _)| *n == phase)
            .expect("a phase")
            .1;
        let record = |undoing: Option<Undoing>,
                      status: OpStatus,
                      error: Option<&str>,
                      cancel: Option<Cancel>,
                      rollback| {
            (
                Phase::Recording {
                    undoing,
                    error: error.map(str::to_string),
                    failed: status == Failed,
                    cancel,
                    rollback,
                },
                vec![Effect::Record {
                    status,
                    error: error.map(str::to_string),
                    rollback,
                }],
            )
        };
        let report = |o: OpOutcome| (Phase::Ended, vec![Effect::Report(o)]);
        let failed = |m: &str| OpOutcome::Failed(m.to_string());
        let stop = Some(Cancel::Stop);
        let u = |c| Some(undoing(c));
        match (phase, event) {
            ("forward", "done") => record(None, Succeeded, None, None, false),
            ("forward", "failed") => record(None, Failed, Some("F"), None, true),
            ("forward", "stopped") => record(None, Cancelled, Some(CANCELLED), stop, false),
            ("forward", "failed and stopped") => record(None, Failed, Some("F"), stop, false),
            ("forward", "cancelled") => {
                record(None, Cancelled, Some("cancelled by ops"), Some(by()), true)
            }
            ("forward", "failed and cancelled") => {
                record(None, Failed, Some("F"), Some(by()), true)
            }
            // A rollback is never rolled back, whatever ends it.
            ("undoing" | "undoing a cancel", e) if e != "recorded" && e != "not recorded" => {
                let undone = u(phase == "undoing a cancel");
                match e {
                    "done" => record(undone, Succeeded, None, None, false),
                    "failed" => record(undone, Failed, Some("F"), None, false),
                    "stopped" => record(undone, Cancelled, Some(CANCELLED), stop, false),
                    "failed and stopped" => record(undone, Failed, Some("F"), stop, false),
                    "cancelled" => record(
                        undone,
                        Cancelled,
                        Some("cancelled by ops"),
                        Some(by()),
                        false,
                    ),
                    "failed and cancelled" => record(undone, Failed, Some("F"), Some(by()), false),
                    _ => unreachable!("every settled event is above"),
                }
            }
            ("recording ok", "recorded") => report(OpOutcome::Done),
            ("recording failed", "recorded") => report(failed("F")),
            ("recording cancelled", "recorded") => report(OpOutcome::Cancelled),
            ("recording rollback", "recorded") => (
                Phase::Undoing(Undoing {
                    error: "F".into(),
                    cancelled: false,
                }),
                vec![Effect::RunRollback],
            ),
            ("recording cancel's rollback", "recorded") => (
                Phase::Undoing(Undoing {
                    error: "cancelled by ops".into(),
                    cancelled: true,
                }),
                vec![Effect::RunRollback],
            ),
            ("recording undone", "recorded") => report(failed("E (rolled back by operation 7)")),
            ("recording cancel undone", "recorded") => report(OpOutcome::Cancelled),
            ("recording undo failed", "recorded") => report(OpOutcome::RollbackFailed(
                "E; the rollback (operation 7) failed too: F".into(),
            )),
            (p, "not recorded") if p.starts_with("recording") => {
                report(failed("cannot record the operation's end: disk"))
            }
            _ => (from, Vec::new()),
        }
    }

    #[test]
    fn every_phase_and_event() {
        let mut pairs = 0;
        for (phase, from) in phases() {
            for (name, event) in events() {
                let got = on(Create, from.clone(), event);
                assert_eq!(got, expected(phase, name), "({phase}, {name})");
                pairs += 1;
            }
        }
        assert_eq!(pairs, phases().len() * events().len());
    }

    #[test]
    fn teardowns_are_never_rolled_back() {
        for operation in [Delete, ClusterOperation::StopServices] {
            for cancel in [None, Some(by())] {
                let failed = Event::Settled {
                    failure: Some("F".into()),
                    cancel,
                };
                let (phase, effects) = on(operation, Phase::Forward, failed);
                assert_eq!(
                    effects,
                    vec![Effect::Record {
                        status: OpStatus::Failed,
                        error: Some("F".into()),
                        rollback: false
                    }],
                    "{operation:?}"
                );
                let (phase, effects) = on(operation, phase, Event::Recorded { id: 1 });
                assert_eq!(
                    (phase, effects),
                    (
                        Phase::Ended,
                        vec![Effect::Report(OpOutcome::Failed("F".into()))]
                    )
                );
            }
        }
    }

    /// Which kinds are undone when they fail or an operator cancels them, one row each.
    #[test]
    fn each_kind_is_undone_or_not() {
        use ClusterOperation as Op;
        let table = [
            (Op::Create, true),
            (Op::Delete, false),
            (Op::Expand, true),
            (Op::Shrink, true),
            (Op::StartServices, true),
            (Op::StopServices, false),
            (Op::RestartServices, true),
            (Op::Configure, true),
            (Op::ReplaceNode, true),
            (Op::AddServices, true),
            (Op::RemoveServices, true),
            (Op::Repair, false),
        ];
        for (operation, undone) in table {
            for cancel in [None, Some(by())] {
                let failure = cancel.is_none().then(|| "F".to_string());
                let (_, effects) = on(
                    operation,
                    Phase::Forward,
                    Event::Settled { failure, cancel },
                );
                let rollback = matches!(&effects[..], [Effect::Record { rollback: true, .. }]);
                assert_eq!(rollback, undone, "{operation:?}");
            }
            // The run's stop never undoes anything: the delete follows.
            let stopped = Event::Settled {
                failure: None,
                cancel: Some(Cancel::Stop),
            };
            let (_, effects) = on(operation, Phase::Forward, stopped);
            assert!(matches!(
                &effects[..],
                [Effect::Record {
                    rollback: false,
                    ..
                }]
            ));
        }
    }

    #[test]
    fn a_failed_or_cancelled_shrink_is_rolled_back() {
        for cancel in [None, Some(by())] {
            let failure = cancel.is_none().then(|| "F".to_string());
            let (_, effects) = on(Shrink, Phase::Forward, Event::Settled { failure, cancel });
            assert!(
                matches!(&effects[..], [Effect::Record { rollback: true, .. }]),
                "{effects:?}"
            );
        }
    }

    #[test]
    fn resuming_carries_on_reports_or_starts_anew() {
        use OpStatus::{Cancelled, Failed, Running, Succeeded};
        let statuses = [
            None,
            Some(Running),
            Some(Succeeded),
            Some(Failed),
            Some(Cancelled),
        ];
        for operation in [Create, Delete] {
            for status in [Running, Succeeded, Failed, Cancelled] {
                for undo in statuses {
                    let got = resume(operation, status, undo, Some("boom"));
                    let want = match (status, undo) {
                        (Running, _) => Resume::CarryOn,
                        (Succeeded, _) => Resume::Report(OpOutcome::Done),
                        (_, Some(Running)) => Resume::CarryOnRollback,
                        (_, None) => Resume::Start,
                        (_, Some(_)) if operation == Delete => Resume::Start,
                        (Cancelled, Some(Succeeded)) => Resume::Report(OpOutcome::Cancelled),
                        (Failed, Some(Succeeded)) => {
                            Resume::Report(OpOutcome::Failed("boom".into()))
                        }
                        (_, Some(_)) => Resume::Report(OpOutcome::RollbackFailed("boom".into())),
                    };
                    assert_eq!(got, want, "{operation:?} {status:?} {undo:?}");
                }
            }
        }
    }
}
