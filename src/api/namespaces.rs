//! Routes of namespaces: list, get, create or update, delete.

use actix_web::web;

use crate::api::body::OrDefault;
use crate::api::state::{Reply, State, ok};
use crate::model::namespace::NamespaceSpec;
use crate::service::namespaces;

pub async fn list_namespaces(state: State) -> Reply {
    ok(&namespaces::list(&state.store).await?)
}

pub async fn get_namespace(state: State, ns: web::Path<String>) -> Reply {
    ok(&namespaces::get(&state.store, ns.into_inner()).await?)
}

pub async fn put_namespace(
    state: State,
    ns: web::Path<String>,
    body: OrDefault<NamespaceSpec>,
) -> Reply {
    ok(&namespaces::put(&state.store, ns.into_inner(), body.0).await?)
}

pub async fn delete_namespace(state: State, ns: web::Path<String>) -> Reply {
    ok(&namespaces::delete(&state.store, ns.into_inner()).await?)
}
