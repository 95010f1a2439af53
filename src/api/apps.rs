//! Routes of apps and their programs.

use actix_web::web;

use crate::api::body::Json;
use crate::api::contract::{Reply, ok};
use crate::api::state::{AppPath, ProgramPath, State};
use crate::model::access::{Act, Caller};
use crate::model::app::{App, AppSpec, Program};
use crate::service::apps;

pub async fn list_apps(state: State, ns: web::Path<String>) -> Reply<Vec<App>> {
    ok(apps::list(&state.store, ns.into_inner()).await?)
}

pub async fn get_app(state: State, path: web::Path<AppPath>) -> Reply<App> {
    let p = path.into_inner();
    ok(apps::get(&state.store, p.ns, p.app).await?)
}

pub async fn put_app(
    state: State,
    caller: Caller,
    path: web::Path<AppPath>,
    body: Json<AppSpec>,
) -> Reply<App> {
    let p = path.into_inner();
    ok(apps::put(&state.store, &caller, p.ns, p.app, body.0).await?)
}

pub async fn delete_app(state: State, caller: Caller, path: web::Path<AppPath>) -> Reply<App> {
    let p = path.into_inner();
    let act = Act::new(&caller, "app.delete", Some(&p.ns), &p.app);
    ok(apps::delete(&state.store, act, p.ns, p.app).await?)
}

pub async fn get_program(state: State, path: web::Path<ProgramPath>) -> Reply<Program> {
    let p = path.into_inner();
    let found = apps::get(&state.store, p.ns.clone(), p.app.clone()).await?;
    match found.program(&p.program) {
        Some(program) => ok(program.clone()),
        None => Err(crate::service::error::ServiceError::ProgramNotFound {
            namespace: p.ns,
            app: p.app,
            program: p.program,
        }
        .into()),
    }
}
