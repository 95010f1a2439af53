//! Routes of clusters: a plan's dry run, and the operations on a run's cluster.

use actix_web::web;

use crate::api::body::Json;
use crate::api::contract::{Reply, ok};
use crate::api::state::{OperationPath, RunPath, State};
use crate::model::access::{Act, Caller};
use crate::model::operation::OperationView;
use crate::model::run::RunKey;
use crate::model::view::DryRun;
use crate::service::templates::{self, PlanRequest};
use crate::service::{history, runs};

pub async fn dry_run(
    state: State,
    ns: actix_web::web::Path<String>,
    body: Json<PlanRequest>,
) -> Reply<DryRun> {
    ok(templates::dry_run(&state.store, &state.registry, ns.into_inner(), body.0).await?)
}

pub async fn run_cluster(
    state: State,
    caller: Caller,
    path: web::Path<RunPath>,
    body: Json<crate::rules::resize::ClusterRequest>,
) -> Reply<runs::OperationStarted> {
    let key: RunKey = path.into_inner().into();
    let act = Act::new(&caller, "run.cluster", Some(&key.namespace), &key.run);
    let by = match caller.run {
        None => runs::Resizer::Admin,
        // A run's own program may only resize its cluster.
        Some(_) => {
            use crate::model::plan::ClusterOperation as Op;
            if !matches!(body.0.operation, Op::Expand | Op::Shrink) {
                return Err(crate::api::error::ApiError::Forbidden(
                    "a run's token may only expand or shrink its own run's cluster".into(),
                ));
            }
            runs::Resizer::Program
        }
    };
    ok(runs::cluster_operation(&state.runtime, key, body.0, act, by).await?)
}

/// The plan an admin's operation would have on the run's cluster now (a dry run).
pub async fn plan_run_cluster(
    state: State,
    path: web::Path<RunPath>,
    body: Json<crate::rules::resize::ClusterRequest>,
) -> Reply<DryRun> {
    ok(runs::plan_operation(&state.runtime, path.into_inner().into(), body.0).await?)
}

pub async fn run_operations(state: State, path: web::Path<RunPath>) -> Reply<Vec<OperationView>> {
    ok(history::operations(&state.runtime, path.into_inner().into()).await?)
}

pub async fn run_operation(state: State, path: web::Path<OperationPath>) -> Reply<OperationView> {
    let (key, op) = path.into_inner().split();
    ok(history::operation(&state.runtime, key, op).await?)
}

/// An operator cancels a running operation: it stops before its tasks' next outside call and
/// what it did is rolled back.
pub async fn cancel_operation(
    state: State,
    caller: Caller,
    path: web::Path<OperationPath>,
) -> Reply<OperationView> {
    let (key, op) = path.into_inner().split();
    let act = Act::new(
        &caller,
        "run.cancel-operation",
        Some(&key.namespace),
        &key.run,
    );
    ok(history::cancel_operation(&state.runtime, key, op, act).await?)
}
