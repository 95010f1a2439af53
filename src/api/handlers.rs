//! The request handlers: one small function per endpoint.

use actix_web::{FromRequest, HttpRequest, HttpResponse, web};

use super::AppState;
use super::body::{Json, OrDefault};
use super::error::ApiError;
use crate::model::profile::{ProfileId, ProfileSpec, ProfileStatus};
use crate::model::property::Values;
use crate::service::error::ServiceError;
use crate::service::namespaces::{self, NamespaceSpec};
use crate::service::preferences::{self, Scope as PrefScope};
use crate::service::profiles;

pub type State = web::Data<AppState>;
pub type Reply = Result<HttpResponse, ApiError>;

pub fn ok<T: serde::Serialize>(value: &T) -> Reply {
    Ok(HttpResponse::Ok().json(value))
}

pub async fn health() -> Reply {
    ok(&serde_json::json!({"status": "ok"}))
}

// ---- namespaces ----

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

// ---- provisioners ----

pub async fn list_provisioners(state: State) -> Reply {
    ok(&state.registry.details())
}

pub async fn get_provisioner(state: State, name: web::Path<String>) -> Reply {
    let name = name.into_inner();
    match state.registry.detail(&name) {
        Some(detail) => ok(&detail),
        None => Err(ServiceError::ProvisionerNotFound(name).into()),
    }
}

// ---- profiles ----

/// The profile a path names: `/v3/profiles/{name}` (SYSTEM) or
/// `/v3/namespaces/{ns}/profiles/{name}` (USER).
pub struct ProfilePath(pub ProfileId);

impl FromRequest for ProfilePath {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let info = req.match_info();
        let name = info.get("name").unwrap_or_default();
        std::future::ready(Ok(ProfilePath(match info.get("ns") {
            Some(ns) => ProfileId::user(ns, name),
            None => ProfileId::system(name),
        })))
    }
}

/// The query parameters of `req`.
pub fn query(req: &HttpRequest) -> Result<std::collections::HashMap<String, String>, ApiError> {
    web::Query::<std::collections::HashMap<String, String>>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .map_err(|e| ApiError::Query(format!("string cannot be read: {e}")))
}

/// Reads boolean query parameter `name`: absent is false; otherwise `true` or `false`.
pub fn flag(req: &HttpRequest, name: &str) -> Result<bool, ApiError> {
    let params = query(req)?;
    match params.get(name).map(|v| v.to_ascii_lowercase()) {
        None => Ok(false),
        Some(v) if v == "true" || v.is_empty() => Ok(true),
        Some(v) if v == "false" => Ok(false),
        Some(v) => Err(ApiError::Query(format!(
            "'{name}' must be true or false, got '{v}'"
        ))),
    }
}

// ---- janitor ----

pub async fn get_janitor(state: State) -> Reply {
    let last = state.janitor.last().await?;
    ok(&serde_json::json!({"settings": state.janitor.settings, "last": last}))
}

pub async fn run_janitor(state: State, req: HttpRequest) -> Reply {
    let dry_run = flag(&req, "dryRun")?;
    ok(&state.janitor.sweep(dry_run, "request").await?)
}

pub async fn list_profiles(state: State, req: HttpRequest) -> Reply {
    let include_system = flag(&req, "includeSystem")?;
    let ns = req.match_info().get("ns").map(str::to_string);
    ok(&profiles::list(&state.store, ns, include_system).await?)
}

pub async fn get_profile(state: State, id: ProfilePath) -> Reply {
    ok(&profiles::get(&state.store, id.0).await?)
}

pub async fn put_profile(state: State, id: ProfilePath, body: Json<ProfileSpec>) -> Reply {
    ok(&profiles::put(&state.store, &state.registry, id.0, body.0).await?)
}

pub async fn delete_profile(state: State, id: ProfilePath) -> Reply {
    ok(&profiles::delete(&state.store, id.0).await?)
}

pub async fn profile_status(state: State, id: ProfilePath) -> Reply {
    ok(&profiles::get(&state.store, id.0).await?.status)
}

pub async fn enable_profile(state: State, id: ProfilePath) -> Reply {
    ok(&profiles::set_status(&state.store, id.0, ProfileStatus::Enabled).await?)
}

pub async fn disable_profile(state: State, id: ProfilePath) -> Reply {
    ok(&profiles::set_status(&state.store, id.0, ProfileStatus::Disabled).await?)
}

// ---- preferences ----

fn pref_scope(req: &HttpRequest) -> Result<PrefScope, ApiError> {
    let info = req.match_info();
    let Some(ns) = info.get("ns") else {
        return Ok(PrefScope::Instance);
    };
    namespaces::check_name(ns)?;
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
            program_type: crate::service::apps::WORKFLOWS.to_string(),
            program: program.to_string(),
        },
    })
}

pub async fn get_preferences(state: State, req: HttpRequest) -> Reply {
    let resolved = flag(&req, "resolved")?;
    ok(&preferences::get(&state.store, pref_scope(&req)?, resolved).await?)
}

pub async fn put_preferences(state: State, req: HttpRequest, body: Json<Values>) -> Reply {
    ok(&preferences::put(&state.store, pref_scope(&req)?, body.0).await?)
}

pub async fn delete_preferences(state: State, req: HttpRequest) -> Reply {
    preferences::delete(&state.store, pref_scope(&req)?).await?;
    ok(&serde_json::json!({}))
}
