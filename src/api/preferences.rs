//! Routes of preferences at each level: instance, namespace, app, program.

use actix_web::HttpRequest;

use crate::api::body::Json;
use crate::api::error::ApiError;
use crate::api::state::{Reply, State, flag, ok};
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
