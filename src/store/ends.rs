//! The run ends that program-status triggers have not yet seen (`RunEnds`): a run's end is
//! written in the same write as the transition that ends it, and the scheduler removes it once
//! it has recorded the fires it causes, so no end is missed across a crash or a failover.

use crate::model::run::RunRecord;
use crate::model::schedule::{RunEnd, TriggeringRun, end_status};

use super::{StoreError, Table, Txn};

/// Records the end of `run`, if it has ended, for the scheduler.
pub fn record(tx: &mut Txn, run: &RunRecord) -> Result<(), StoreError> {
    let Some(status) = end_status(run.status) else {
        return Ok(());
    };
    let end = RunEnd {
        run: TriggeringRun {
            namespace: run.key.namespace.clone(),
            application: run.key.app.clone(),
            program: run.key.program.clone(),
            run: run.key.run.clone(),
            status,
        },
        time: run.end.unwrap_or(run.starting).saturating_mul(1000),
        args: run.args.clone(),
    };
    tx.put(Table::RunEnds, &run.key.run, &end)
}
