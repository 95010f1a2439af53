//! Routes of namespaces: list, get, create or update, delete.

use actix_web::web;

use crate::api::body::OrDefault;
use crate::api::contract::{Reply, ok};
use crate::api::state::State;
use crate::model::access::{Act, Caller};
use crate::model::namespace::{Namespace, NamespaceSpec, NamespaceView};
use crate::service::namespaces;

pub async fn list_namespaces(state: State, caller: Caller) -> Reply<Vec<Namespace>> {
    ok(namespaces::list(&state.store, &caller.grants).await?)
}

pub async fn get_namespace(state: State, ns: web::Path<String>) -> Reply<NamespaceView> {
    ok(namespaces::get(&state.store, ns.into_inner()).await?)
}

pub async fn put_namespace(
    state: State,
    caller: Caller,
    ns: web::Path<String>,
    body: OrDefault<NamespaceSpec>,
) -> Reply<Namespace> {
    let ns = ns.into_inner();
    let act = Act::new(&caller, "namespace.put", Some(&ns), &ns);
    ok(namespaces::put(&state.store, act, ns, body.0).await?)
}

pub async fn delete_namespace(
    state: State,
    caller: Caller,
    ns: web::Path<String>,
) -> Reply<Namespace> {
    let ns = ns.into_inner();
    let act = Act::new(&caller, "namespace.delete", Some(&ns), &ns);
    ok(namespaces::delete(&state.store, act, ns).await?)
}
