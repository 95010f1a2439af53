//! Routes of preferences at each level: instance, namespace, app, program.

use actix_web::HttpRequest;

use crate::api::body::Json;
use crate::api::contract::{Flag, Query, Reply, ok};
use crate::api::error::ApiError;
use crate::api::state::State;
use crate::model::access::{Act, Caller};
use crate::model::app::WORKFLOWS;
use crate::model::namespace;
use crate::model::preference::Scope as PrefScope;
use crate::model::property::Values;
use crate::service::preferences;

fn pref_scope(req: &HttpRequest) -> Result<PrefScope, ApiError> {
    let info = req.match_info();
    let Some(ns) = info.get("ns") else {
        return Ok(PrefScope::Instance);
    };
    namespace::check_name(ns)?;
    let namespace = ns.to_string();
    Ok(match (info.get("app"), info.get("program")) {
        (None, _) => PrefScope::Namespace(namespace),
        (Some(app), None) => PrefScope::App {
            namespace,
            app: app.to_string(),
        },
        (Some(app), Some(program)) => PrefScope::Program {
            namespace,
            app: app.to_string(),
            program_type: WORKFLOWS.to_string(),
            program: program.to_string(),
        },
    })
}

/// The query of `GET .../preferences`.
#[derive(Debug, Default, serde::Deserialize, schemars::JsonSchema)]
pub struct PreferencesQuery {
    /// The preferences in force at this level: the levels above it merged in.
    #[serde(default)]
    resolved: Flag,
}

pub async fn get_preferences(
    state: State,
    query: Query<PreferencesQuery>,
    req: HttpRequest,
) -> Reply<Values> {
    let resolved = query.0.resolved.0;
    ok(preferences::get(&state.store, pref_scope(&req)?, resolved).await?)
}

/// What `caller` does to the preferences at `scope`: a namespace's are its own changes.
fn act(caller: &Caller, action: &str, scope: &PrefScope) -> Act {
    Act::new(caller, action, scope.namespace(), &scope.key())
}

pub async fn put_preferences(
    state: State,
    caller: Caller,
    req: HttpRequest,
    body: Json<Values>,
) -> Reply<Values> {
    let scope = pref_scope(&req)?;
    let act = act(&caller, "preferences.put", &scope);
    ok(preferences::put(&state.store, act, scope, body.0).await?)
}

/// An empty object: what is left at a level whose preferences were deleted.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Empty {}

pub async fn delete_preferences(state: State, caller: Caller, req: HttpRequest) -> Reply<Empty> {
    let scope = pref_scope(&req)?;
    let act = act(&caller, "preferences.delete", &scope);
    preferences::delete(&state.store, act, scope).await?;
    ok(Empty {})
}
