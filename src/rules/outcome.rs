//! How a cluster operation ends, as pure functions: whether it is rolled back, what is
//! recorded, and what its planner reports.
//!
//! [`on`] is the end of a running operation: `on(phase, event) -> (phase, effects)`.
//! ```text
//! Forward ─Settled→ Recording ─Recorded→ Ended (report)
//!                             └─Recorded, a failure to undo→ Undoing ─Settled→ Recording ─Recorded→ Ended
//! any Recording ─NotRecorded→ Ended (report the failure)
//! ```
//! A failed operation is rolled back once, when its kind can be undone
//! ([`ClusterOperation::undoable`]) and it was not cancelled; a rollback that fails is not
//! rolled back in turn.
//!
//! [`resume`] is how a planner takes up an operation of a kind a restart may have cut short.

use crate::model::operation::{OpOutcome, OpStatus};
use crate::model::plan::ClusterOperation;

/// The error recorded for an operation a stop request cancelled.
pub const CANCELLED: &str = "cancelled by a stop request";

/// Where an operation is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// The operation's own tasks run.
    Forward,
    /// The rollback's tasks run; the operation failed with `error`.
    Undoing { error: String },
    /// The end of the operation (or of its rollback) is being recorded.
    Recording {
        /// The error of the operation being undone, when this is a rollback.
        undoing: Option<String>,
        /// The error recorded for this one.
        error: Option<String>,
        cancelled: bool,
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
        cancelled: bool,
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
        (
            phase @ (Phase::Forward | Phase::Undoing { .. }),
            Event::Settled { failure, cancelled },
        ) => {
            let undoing = match phase {
                Phase::Undoing { error } => Some(error),
                Phase::Forward | Phase::Recording { .. } | Phase::Ended => None,
            };
            let rollback =
                failure.is_some() && !cancelled && undoing.is_none() && operation.undoable();
            let error = match (failure, cancelled) {
                (Some(f), _) => Some(f),
                (None, true) => Some(CANCELLED.to_string()),
                (None, false) => None,
            };
            let status = match error {
                Some(_) => OpStatus::Failed,
                None => OpStatus::Succeeded,
            };
            let record = Effect::Record {
                status,
                error: error.clone(),
                rollback,
            };
            let phase = Phase::Recording {
                undoing,
                error,
                cancelled,
                rollback,
            };
            (phase, vec![record])
        }
        (
            Phase::Recording {
                undoing,
                error,
                cancelled,
                rollback,
            },
            Event::Recorded { id },
        ) => {
            if rollback {
                let error = error.unwrap_or_default();
                return (Phase::Undoing { error }, vec![Effect::RunRollback]);
            }
            let outcome = match (undoing, error) {
                (Some(original), None) => {
                    OpOutcome::Failed(format!("{original} (rolled back by operation {id})"))
                }
                (Some(original), Some(e)) => {
                    OpOutcome::Failed(format!("{original}; the rollback failed too: {e}"))
                }
                (None, None) => OpOutcome::Done,
                (None, Some(_)) if cancelled => OpOutcome::Cancelled,
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
            phase @ (Phase::Forward | Phase::Undoing { .. }),
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

/// See [`Resume`]. A failed delete is tried anew; a failed operation of another kind is
/// reported as failed.
pub fn resume(
    operation: ClusterOperation,
    status: OpStatus,
    undo: Option<OpStatus>,
    error: Option<&str>,
) -> Resume {
    match (status, undo) {
        (OpStatus::Running, _) => Resume::CarryOn,
        (OpStatus::Succeeded, _) => Resume::Report(OpOutcome::Done),
        (OpStatus::Failed, Some(OpStatus::Running)) => Resume::CarryOnRollback,
        (OpStatus::Failed, Some(OpStatus::Succeeded | OpStatus::Failed)) => match operation {
            ClusterOperation::Delete => Resume::Start,
            ClusterOperation::Create
            | ClusterOperation::Expand
            | ClusterOperation::Shrink
            | ClusterOperation::StartServices
            | ClusterOperation::StopServices
            | ClusterOperation::RestartServices
            | ClusterOperation::Configure
            | ClusterOperation::ReplaceNode => {
                Resume::Report(OpOutcome::Failed(error.unwrap_or_default().to_string()))
            }
        },
        (OpStatus::Failed, None) => Resume::Start,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ClusterOperation::{Create, Delete, Shrink};

    fn phases() -> Vec<(&'static str, Phase)> {
        let recording =
            |undoing: Option<&str>, error: Option<&str>, cancelled, rollback| Phase::Recording {
                undoing: undoing.map(str::to_string),
                error: error.map(str::to_string),
                cancelled,
                rollback,
            };
        vec![
            ("forward", Phase::Forward),
            ("undoing", Phase::Undoing { error: "E".into() }),
            ("recording ok", recording(None, None, false, false)),
            ("recording failed", recording(None, Some("F"), false, false)),
            (
                "recording cancelled",
                recording(None, Some(CANCELLED), true, false),
            ),
            (
                "recording rollback",
                recording(None, Some("F"), false, true),
            ),
            ("recording undone", recording(Some("E"), None, false, false)),
            (
                "recording undo failed",
                recording(Some("E"), Some("F"), false, false),
            ),
            ("ended", Phase::Ended),
        ]
    }

    fn events() -> Vec<(&'static str, Event)> {
        let settled = |failure: Option<&str>, cancelled| Event::Settled {
            failure: failure.map(str::to_string),
            cancelled,
        };
        vec![
            ("done", settled(None, false)),
            ("failed", settled(Some("F"), false)),
            ("cancelled", settled(None, true)),
            ("failed and cancelled", settled(Some("F"), true)),
            ("recorded", Event::Recorded { id: 7 }),
            ("not recorded", Event::NotRecorded("disk".into())),
        ]
    }

    /// The expected answer for an undoable operation (a create), written out.
    fn expected(phase: &str, event: &str) -> (Phase, Vec<Effect>) {
        let from = phases()
            .into_iter()
            .find(|(n, _)| *n == phase)
            .expect("a phase")
            .1;
        let record = |undoing: Option<&str>, error: Option<&str>, cancelled, rollback| {
            let status = if error.is_some() {
                OpStatus::Failed
            } else {
                OpStatus::Succeeded
            };
            (
                Phase::Recording {
                    undoing: undoing.map(str::to_string),
                    error: error.map(str::to_string),
                    cancelled,
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
        match (phase, event) {
            ("forward", "done") => record(None, None, false, false),
            ("forward", "failed") => record(None, Some("F"), false, true),
            ("forward", "cancelled") => record(None, Some(CANCELLED), true, false),
            ("forward", "failed and cancelled") => record(None, Some("F"), true, false),
            ("undoing", "done") => record(Some("E"), None, false, false),
            ("undoing", "failed") => record(Some("E"), Some("F"), false, false),
            ("undoing", "cancelled") => record(Some("E"), Some(CANCELLED), true, false),
            ("undoing", "failed and cancelled") => record(Some("E"), Some("F"), true, false),
            ("recording ok", "recorded") => report(OpOutcome::Done),
            ("recording failed", "recorded") => report(failed("F")),
            ("recording cancelled", "recorded") => report(OpOutcome::Cancelled),
            ("recording rollback", "recorded") => (
                Phase::Undoing { error: "F".into() },
                vec![Effect::RunRollback],
            ),
            ("recording undone", "recorded") => report(failed("E (rolled back by operation 7)")),
            ("recording undo failed", "recorded") => {
                report(failed("E; the rollback failed too: F"))
            }
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
        for operation in [Delete, Shrink, ClusterOperation::StopServices] {
            let failed = Event::Settled {
                failure: Some("F".into()),
                cancelled: false,
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

    #[test]
    fn resuming_carries_on_reports_or_starts_anew() {
        use OpStatus::{Failed, Running, Succeeded};
        let statuses = [None, Some(Running), Some(Succeeded), Some(Failed)];
        for operation in [Create, Delete] {
            for status in [Running, Succeeded, Failed] {
                for undo in statuses {
                    let got = resume(operation, status, undo, Some("boom"));
                    let want = match (status, undo) {
                        (Running, _) => Resume::CarryOn,
                        (Succeeded, _) => Resume::Report(OpOutcome::Done),
                        (Failed, Some(Running)) => Resume::CarryOnRollback,
                        (Failed, None) => Resume::Start,
                        (Failed, Some(_)) if operation == Delete => Resume::Start,
                        (Failed, Some(_)) => Resume::Report(OpOutcome::Failed("boom".into())),
                    };
                    assert_eq!(got, want, "{operation:?} {status:?} {undo:?}");
                }
            }
        }
    }
}
