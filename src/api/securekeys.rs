//! Handlers for the secure store: `/v3/namespaces/{ns}/securekeys[/{name}]`. Answers carry a
//! key's metadata, never its data.

use actix_web::web;

use crate::api::body::Json;
use crate::api::contract::{Reply, ok};
use crate::api::state::State;
use crate::model::access::{Act, Caller};
use crate::model::secure::{KeyMetadata, KeySpec};
use crate::service::secure;

pub async fn list_secure_keys(state: State, ns: web::Path<String>) -> Reply<Vec<KeyMetadata>> {
    ok(secure::list(&state.store, ns.into_inner()).await?)
}

pub async fn get_secure_key(state: State, path: web::Path<(String, String)>) -> Reply<KeyMetadata> {
    let (ns, name) = path.into_inner();
    ok(secure::get(&state.store, ns, name).await?)
}

pub async fn put_secure_key(
    state: State,
    caller: Caller,
    path: web::Path<(String, String)>,
    body: Json<KeySpec>,
) -> Reply<KeyMetadata> {
    let (ns, name) = path.into_inner();
    let act = Act::new(&caller, "securekey.put", Some(&ns), &name);
    ok(secure::put(&state.store, &state.cipher, act, ns, name, body.0).await?)
}

pub async fn delete_secure_key(
    state: State,
    caller: Caller,
    path: web::Path<(String, String)>,
) -> Reply<KeyMetadata> {
    let (ns, name) = path.into_inner();
    let act = Act::new(&caller, "securekey.delete", Some(&ns), &name);
    ok(secure::delete(&state.store, act, ns, name).await?)
}
