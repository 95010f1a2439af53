//! Handlers for cluster templates: `/v3/templates/...` (SYSTEM) and
//! `/v3/namespaces/{ns}/templates/...` (USER).

use actix_web::{FromRequest, HttpRequest};

use crate::api::body::Json;
use crate::api::contract::{Flag, Query, Reply, ok};
use crate::api::error::ApiError;
use crate::api::state::State;
use crate::model::access::{Act, Caller};
use crate::model::template::{StoredTemplate, Template, TemplateId};
use crate::service::templates::{self as templates};

/// The template a path names.
#[derive(Debug)]
pub struct TemplatePath(TemplateId);

impl FromRequest for TemplatePath {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let info = req.match_info();
        std::future::ready(Ok(TemplatePath(TemplateId {
            namespace: info.get("ns").map(str::to_string),
            name: info.get("name").unwrap_or_default().to_string(),
        })))
    }
}

/// The query of a namespace's lists of templates and profiles.
#[derive(Debug, Default, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    /// List the SYSTEM ones too.
    #[serde(default)]
    pub include_system: Flag,
}

pub async fn list_templates(
    state: State,
    query: Query<ListQuery>,
    req: HttpRequest,
) -> Reply<Vec<StoredTemplate>> {
    let include_system = query.0.include_system.0;
    let ns = req.match_info().get("ns").map(str::to_string);
    ok(templates::list(&state.store, ns, include_system).await?)
}

pub async fn get_template(state: State, id: TemplatePath) -> Reply<StoredTemplate> {
    ok(templates::get(&state.store, id.0).await?)
}

pub async fn put_template(
    state: State,
    caller: Caller,
    id: TemplatePath,
    body: Json<Template>,
) -> Reply<StoredTemplate> {
    let act = Act::new(
        &caller,
        "template.put",
        id.0.namespace.as_deref(),
        &id.0.to_string(),
    );
    ok(templates::put(
        &state.store,
        &state.registry,
        (act, caller.trust()),
        id.0,
        body.0,
    )
    .await?)
}

pub async fn delete_template(
    state: State,
    caller: Caller,
    id: TemplatePath,
) -> Reply<StoredTemplate> {
    let act = Act::new(
        &caller,
        "template.delete",
        id.0.namespace.as_deref(),
        &id.0.to_string(),
    );
    ok(templates::delete(&state.store, act, id.0).await?)
}

impl crate::api::contract::Takes for TemplatePath {}
