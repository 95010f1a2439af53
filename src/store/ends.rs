//! The run ends that program-status triggers have not yet seen (`RunEnds`, by
//! `<namespace>/<run id>`, so the scheduler reads each namespace's ends as a fair share): a
//! run's end is written in the same write as the transition that ends it, and the scheduler
//! removes it once it has recorded the fires it causes, so no end is missed across a crash or
//! a failover. A run a schedule's fire started that was REJECTED feeds no trigger: a refused
//! start must not start another.

use crate::model::run::RunRecord;
use crate::model::schedule::{EndStatus, RunEnd, TriggeringRun};

use super::{StoreError, Table, Txn};

/// The key in `RunEnds` of the end of run `run` of namespace `ns`.
pub fn key(ns: &str, run: &str) -> String {
    format!("{ns}/{run}")
}

/// Records the end of `run`, if it has ended, for the scheduler.
pub fn record(tx: &mut Txn, run: &RunRecord) -> Result<(), StoreError> {
    let Some(status) = end_status(run.status) else {
        return Ok(());
    };
    if status == EndStatus::Rejected && run.started_by.is_some() {
        return Ok(());
    }
    let end = RunEnd {
        run: TriggeringRun {
            namespace: run.key.namespace.clone(),
            application: run.key.app.clone(),
            program: run.key.program.clone(),
            run: run.key.run.clone(),
            status,
        },
        // When the end is recorded, to the millisecond (the record keeps seconds): the run a
        // trigger starts is named after it, and sorts after the run that ended.
        time: crate::store::clock::now_millis(),
        args: run.args.clone(),
        depth: run.started_by.as_ref().map_or(0, |by| by.depth),
    };
    tx.put(Table::RunEnds, &key(&run.key.namespace, &run.key.run), &end)
}

/// The end status a program-status trigger may name for a run that ended with `status`.
pub fn end_status(status: crate::model::run::ProgramStatus) -> Option<EndStatus> {
    use crate::model::run::ProgramStatus as P;
    match status {
        P::Completed => Some(EndStatus::Completed),
        P::Failed => Some(EndStatus::Failed),
        P::Killed => Some(EndStatus::Killed),
        P::Rejected => Some(EndStatus::Rejected),
        P::Queued | P::Pending | P::Starting | P::Running => None,
    }
}
