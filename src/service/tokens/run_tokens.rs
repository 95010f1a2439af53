//! Run tokens: what a run's program gets as `EBB_RUN_TOKEN`, to resize its own cluster.
//!
//! `ebbrun_<namespace>.<run>.<signature>`, signed with the installation's key, so nothing
//! is stored and nothing can be made for another run without the key. It acts only while its
//! run has not ended (it is revoked with the run's end), and only on one route: an expand or
//! a shrink of its own run's cluster, within the profile's `minNodes` and `maxNodes` (the
//! size asked for when `maxNodes` is unset). It reaches the program in its environment: on
//! this host through the environment of the program's shim, never a file; on a node reached
//! over SSH in the launch script there, which only the node's SSH user may read. Never an
//! event, a log line or a command line.

use std::sync::Arc;

use crate::model::access::{Caller, Grants, RunScope};
use crate::model::run::RunRecord;
use crate::store::secure::Cipher;
pub use crate::store::secure::RUN_TOKEN_PREFIX as PREFIX;
use crate::store::{Read, Store, StoreError, Table, keys};

/// The caller a run token names: its run's program, while the run has not ended; `None` for
/// anything else.
pub async fn caller(
    store: &Store,
    cipher: &Arc<Cipher>,
    value: &str,
) -> Result<Option<Caller>, StoreError> {
    let Some((namespace, run)) = cipher.run_token_names(value) else {
        return Ok(None);
    };
    let scope = RunScope { namespace, run };
    let index = keys::run_index(&scope.namespace, &scope.run);
    let live = store
        .read(move |r| {
            let Some(key) = r.get::<String>(Table::RunIndex, &index)? else {
                return Ok::<_, StoreError>(false);
            };
            Ok(r.get::<RunRecord>(Table::Runs, &key)?
                .is_some_and(|run| !run.status.is_end()))
        })
        .await?;
    Ok(live.then(|| Caller {
        name: format!("run:{}", scope.run),
        grants: Grants::default(),
        run: Some(scope),
    }))
}
