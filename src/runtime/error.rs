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
    /// Another server owns the run: the command goes to it, at `url`.
    #[error("run '{run}' is owned by server {server} ({url})")]
    Elsewhere {
        run: String,
        server: String,
        url: String,
    },
    /// This server is handing its runs to the others before it stops: it takes no new one.
    #[error("server {0} is draining and takes no new run; start it on another server")]
    Draining(String),
    /// The run's owner is gone and no server has taken it over yet.
    #[error("run '{0}' is being taken over by another server; try again in a few seconds")]
    Unowned(String),
}
