//! The error of the runtime layer: what a command to a run's supervisor, or the janitor, can
//! answer.

use crate::model::run::RunError;
use crate::store::StoreError;

/// Why a command to a run, or a janitor sweep, did not go through.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("run '{0}' not found")]
    RunNotFound(String),
    /// The run's state does not allow it, or the request's values are wrong for it.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The store could not record the change: nothing was changed.
    #[error(transparent)]
    Store(#[from] StoreError),
}
