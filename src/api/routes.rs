//! The route table: every path of the API, its methods, handlers and the right each needs, in
//! the order the router tries them; JSON 404s and 405s for the rest.
//!
//! [`table`] is the one guard table: a route is registered from its row, with the right of
//! that row checked before its handler runs ([`guard`](crate::api::guard)). A route without a
//! row cannot exist, and the test of every route × role walks the same rows.

use actix_web::http::Method;
use actix_web::{HttpRequest, HttpResponse, Resource, web};

use crate::api::error::ApiError;
use crate::model::access::{Need, Role};

pub use crate::api::route::Route;

/// The path of a program; runs hang below it. `{type}` is `workflows`, ebb's own, which
/// addresses every program, or `spark`, CDAP's, which addresses a spark program only (the
/// guard checks it).
macro_rules! program {
    ($tail:literal) => {
        concat!(
            "/namespaces/{ns}/apps/{app}/{type:workflows|spark}/{program}",
            $tail
        )
    };
}

/// The path of a schedule.
macro_rules! schedule {
    ($tail:literal) => {
        concat!("/namespaces/{ns}/apps/{app}/schedules/{name}", $tail)
    };
}

const VIEW: Need = Need::Namespace(Role::Viewer);
const OPERATE: Need = Need::Namespace(Role::Operator);
const ADMIN: Need = Need::Namespace(Role::Admin);
const INSTANCE: Need = Need::Instance;
const TOKEN: Need = Need::Token;

/// Every route of the API, in the order the router tries them.
pub fn table() -> Vec<Route> {
    use crate::api::apps::*;
    use crate::api::clusters::*;
    use crate::api::namespaces::*;
    use crate::api::preferences::*;
    use crate::api::profiles::*;
    use crate::api::runs::*;
    use crate::api::schedules::*;
    use crate::api::securekeys::*;
    use crate::api::system::*;
    use crate::api::templates::*;
    use crate::api::tokens::*;
    use crate::api::usage::*;
    use Method as M;
    vec![
        // Runs first: the router tries resources in order, and these are the busiest.
        Route::api(M::GET, program!("/runs/{run}/events"), VIEW, run_events),
        Route::api(M::GET, program!("/runs/{run}"), VIEW, get_run),
        Route::api(M::POST, program!("/start"), OPERATE, start_run),
        Route::api(M::GET, "/namespaces/{ns}/runs", VIEW, list_namespace_runs),
        Route::api(M::GET, program!(""), VIEW, get_program),
        Route::api(M::GET, program!("/runs"), VIEW, list_runs),
        Route::api(M::POST, program!("/runs/{run}/stop"), OPERATE, stop_run).owned(),
        Route::api(
            M::POST,
            program!("/runs/{run}/deprovision"),
            OPERATE,
            deprovision_run,
        )
        .owned(),
        Route::api(M::POST, program!("/runs/{run}/extend"), OPERATE, extend_run).owned(),
        Route::api(M::GET, program!("/runs/{run}/logs"), VIEW, run_logs),
        Route::api(
            M::GET,
            program!("/runs/{run}/services/{service}/logs"),
            VIEW,
            service_logs,
        )
        .owned(),
        Route::api(
            M::GET,
            program!("/runs/{run}/operations"),
            VIEW,
            run_operations,
        ),
        Route::api(
            M::POST,
            program!("/runs/{run}/cluster"),
            OPERATE,
            run_cluster,
        )
        .owned(),
        // A dry run: what the operation would do, planned from the store, touching nothing.
        Route::api(
            M::POST,
            program!("/runs/{run}/cluster/plan"),
            VIEW,
            plan_run_cluster,
        ),
        Route::api(
            M::GET,
            program!("/runs/{run}/operations/{op}"),
            VIEW,
            run_operation,
        ),
        Route::api(
            M::POST,
            program!("/runs/{run}/operations/{op}/cancel"),
            OPERATE,
            cancel_operation,
        )
        .owned(),
        // The same, under the run's cluster.
        Route::api(
            M::POST,
            program!("/runs/{run}/cluster/operations/{op}/cancel"),
            OPERATE,
            cancel_operation,
        )
        .owned(),
        Route::api(M::GET, "/health", Need::Public, health),
        // The contract: generated from this table.
        Route::api(M::GET, "/openapi.json", Need::Public, openapi_json),
        // The metrics name every namespace: an instance admin's, or a scraper's token.
        Route::api(M::GET, "/metrics", Need::Metrics, metrics),
        Route::api(M::GET, "/servers", INSTANCE, list_servers),
        Route::api(M::POST, "/servers/{name}/drain", INSTANCE, drain_server),
        Route::api(M::GET, "/tokens", Need::AnyAdmin, list_tokens),
        Route::api(M::POST, "/tokens", Need::AnyAdmin, create_token),
        Route::api(M::DELETE, "/tokens/{name}", Need::AnyAdmin, revoke_token),
        // The namespace comes from the `namespace` query parameter: an admin of it reads its
        // changes; without one, an instance admin reads the instance-wide ones.
        Route::api(M::GET, "/audit", ADMIN, list_audit),
        // Every token lists the namespaces it has a role in.
        Route::api(M::GET, "/namespaces", TOKEN, list_namespaces),
        Route::api(M::GET, "/namespaces/{ns}", VIEW, get_namespace),
        Route::api(M::PUT, "/namespaces/{ns}", INSTANCE, put_namespace),
        Route::api(M::DELETE, "/namespaces/{ns}", INSTANCE, delete_namespace),
        // The namespace comes from the `namespace` query parameter: a viewer of it reads its
        // usage; without one, an instance admin reads every namespace's.
        Route::api(M::GET, "/usage", VIEW, get_usage),
        Route::api(M::GET, "/prices", TOKEN, get_prices),
        Route::api(M::PUT, "/prices", INSTANCE, put_prices),
        Route::api(M::GET, "/provisioners", TOKEN, list_provisioners),
        Route::api(M::GET, "/provisioners/{name}", TOKEN, get_provisioner),
        Route::api(M::GET, "/plugins", INSTANCE, list_plugins),
        Route::api(M::GET, "/profiles", TOKEN, list_profiles),
        Route::api(M::GET, "/namespaces/{ns}/profiles", VIEW, list_profiles),
        Route::api(M::GET, "/profiles/{name}", TOKEN, get_profile),
        Route::api(M::PUT, "/profiles/{name}", INSTANCE, put_profile),
        Route::api(M::DELETE, "/profiles/{name}", INSTANCE, delete_profile),
        Route::api(
            M::GET,
            "/namespaces/{ns}/profiles/{name}",
            VIEW,
            get_profile,
        ),
        Route::api(
            M::PUT,
            "/namespaces/{ns}/profiles/{name}",
            ADMIN,
            put_profile,
        ),
        Route::api(
            M::DELETE,
            "/namespaces/{ns}/profiles/{name}",
            ADMIN,
            delete_profile,
        ),
        Route::api(M::GET, "/profiles/{name}/status", TOKEN, profile_status),
        Route::api(
            M::GET,
            "/namespaces/{ns}/profiles/{name}/status",
            VIEW,
            profile_status,
        ),
        Route::api(M::POST, "/profiles/{name}/enable", INSTANCE, enable_profile),
        Route::api(
            M::POST,
            "/namespaces/{ns}/profiles/{name}/enable",
            ADMIN,
            enable_profile,
        ),
        Route::api(
            M::POST,
            "/profiles/{name}/disable",
            INSTANCE,
            disable_profile,
        ),
        Route::api(
            M::POST,
            "/namespaces/{ns}/profiles/{name}/disable",
            ADMIN,
            disable_profile,
        ),
        Route::api(M::GET, "/preferences", TOKEN, get_preferences),
        Route::api(M::PUT, "/preferences", INSTANCE, put_preferences),
        Route::api(M::DELETE, "/preferences", INSTANCE, delete_preferences),
        Route::api(
            M::GET,
            "/namespaces/{ns}/preferences",
            VIEW,
            get_preferences,
        ),
        Route::api(
            M::PUT,
            "/namespaces/{ns}/preferences",
            ADMIN,
            put_preferences,
        ),
        Route::api(
            M::DELETE,
            "/namespaces/{ns}/preferences",
            ADMIN,
            delete_preferences,
        ),
        // A SYSTEM profile's usage and assignments span every namespace.
        Route::api(M::GET, "/profiles/{name}/usage", INSTANCE, profile_usage),
        Route::api(
            M::GET,
            "/namespaces/{ns}/profiles/{name}/usage",
            VIEW,
            profile_usage,
        ),
        Route::api(
            M::GET,
            "/namespaces/{ns}/profiles/{name}/pool",
            VIEW,
            profile_pool,
        ),
        Route::api(
            M::GET,
            "/profiles/{name}/assignments",
            INSTANCE,
            profile_assignments,
        ),
        Route::api(
            M::GET,
            "/namespaces/{ns}/profiles/{name}/assignments",
            VIEW,
            profile_assignments,
        ),
        // A dry run changes nothing.
        Route::api(M::POST, "/namespaces/{ns}/plan", VIEW, dry_run),
        Route::api(M::GET, "/janitor", INSTANCE, get_janitor),
        Route::api(M::POST, "/janitor/run", INSTANCE, run_janitor),
        Route::api(
            M::GET,
            "/namespaces/{ns}/securekeys",
            VIEW,
            list_secure_keys,
        ),
        Route::api(
            M::GET,
            "/namespaces/{ns}/securekeys/{name}",
            VIEW,
            get_secure_key,
        ),
        Route::api(
            M::PUT,
            "/namespaces/{ns}/securekeys/{name}",
            ADMIN,
            put_secure_key,
        ),
        Route::api(
            M::DELETE,
            "/namespaces/{ns}/securekeys/{name}",
            ADMIN,
            delete_secure_key,
        ),
        Route::api(M::GET, "/templates", TOKEN, list_templates),
        Route::api(M::GET, "/namespaces/{ns}/templates", VIEW, list_templates),
        Route::api(M::GET, "/templates/{name}", TOKEN, get_template),
        Route::api(M::PUT, "/templates/{name}", INSTANCE, put_template),
        Route::api(M::DELETE, "/templates/{name}", INSTANCE, delete_template),
        Route::api(
            M::GET,
            "/namespaces/{ns}/templates/{name}",
            VIEW,
            get_template,
        ),
        Route::api(
            M::PUT,
            "/namespaces/{ns}/templates/{name}",
            ADMIN,
            put_template,
        ),
        Route::api(
            M::DELETE,
            "/namespaces/{ns}/templates/{name}",
            ADMIN,
            delete_template,
        ),
        Route::api(M::GET, "/namespaces/{ns}/apps", VIEW, list_apps),
        Route::api(M::GET, "/namespaces/{ns}/apps/{app}", VIEW, get_app),
        Route::api(M::PUT, "/namespaces/{ns}/apps/{app}", ADMIN, put_app),
        Route::api(M::DELETE, "/namespaces/{ns}/apps/{app}", ADMIN, delete_app),
        Route::api(
            M::GET,
            "/namespaces/{ns}/apps/{app}/preferences",
            VIEW,
            get_preferences,
        ),
        Route::api(
            M::PUT,
            "/namespaces/{ns}/apps/{app}/preferences",
            ADMIN,
            put_preferences,
        ),
        Route::api(
            M::DELETE,
            "/namespaces/{ns}/apps/{app}/preferences",
            ADMIN,
            delete_preferences,
        ),
        // Schedules: viewers read them, operators enable and disable them, admins change them.
        Route::api(
            M::GET,
            "/namespaces/{ns}/schedules",
            VIEW,
            list_namespace_schedules,
        ),
        Route::api(
            M::GET,
            "/namespaces/{ns}/apps/{app}/schedules",
            VIEW,
            list_app_schedules,
        ),
        Route::api(M::GET, schedule!(""), VIEW, get_schedule),
        Route::api(M::PUT, schedule!(""), ADMIN, create_schedule),
        Route::api(M::POST, schedule!(""), ADMIN, update_schedule),
        Route::api(M::DELETE, schedule!(""), ADMIN, delete_schedule),
        // CDAP's own update path.
        Route::api(M::POST, schedule!("/update"), ADMIN, update_schedule),
        Route::api(M::POST, schedule!("/enable"), OPERATE, enable_schedule),
        Route::api(M::POST, schedule!("/resume"), OPERATE, enable_schedule),
        Route::api(M::POST, schedule!("/disable"), OPERATE, disable_schedule),
        Route::api(M::POST, schedule!("/suspend"), OPERATE, disable_schedule),
        Route::api(M::GET, schedule!("/status"), VIEW, schedule_status),
        Route::api(M::GET, schedule!("/fires"), VIEW, schedule_fires),
        Route::api(M::GET, schedule!("/next"), VIEW, schedule_next),
        Route::api(M::GET, program!("/schedules"), VIEW, list_program_schedules),
        Route::api(M::GET, program!("/nextruntime"), VIEW, next_runtime),
        Route::api(M::GET, program!("/previousruntime"), VIEW, previous_runtime),
        Route::api(M::GET, program!("/preferences"), VIEW, get_preferences),
        Route::api(M::PUT, program!("/preferences"), ADMIN, put_preferences),
        Route::api(
            M::DELETE,
            program!("/preferences"),
            ADMIN,
            delete_preferences,
        ),
    ]
}

/// Registers every route of [`table`] on `cfg`: one resource per path, in the table's order,
/// each checking its rows' rights before any handler runs.
pub fn configure(cfg: &mut web::ServiceConfig) {
    let table = table();
    let mut scope = web::scope("/v3");
    for (path, rows, needs) in crate::api::route::by_path(&table) {
        let root = crate::api::route::ROOT_PATHS.contains(&path);
        let allowed: Vec<&str> = rows.iter().map(|r| r.method.as_str()).collect();
        let mut resource = resource(path, &allowed.join(", "));
        for row in &rows {
            resource = resource.route((row.to)());
        }
        let params: crate::api::contract::Params = rows
            .iter()
            .map(|row| (row.method.clone(), row.query_names()))
            .collect();
        let known_query = actix_web::middleware::from_fn(move |req, next| {
            crate::api::contract::known_query(std::sync::Arc::clone(&params), req, next)
        });
        let guard = actix_web::middleware::from_fn(move |req, next| {
            crate::api::guard::check(std::sync::Arc::clone(&needs), req, next)
        });
        let owned = crate::api::route::owner_bound(&rows);
        let owner_bound = actix_web::middleware::from_fn(move |req, next| {
            crate::api::forward::owner_bound(std::sync::Arc::clone(&owned), req, next)
        });
        // The guard runs first: who calls is settled before what they asked is read, and
        // before a command goes to its run's owner.
        let resource = resource.wrap(owner_bound).wrap(known_query).wrap(guard);
        if root {
            cfg.service(resource);
        } else {
            scope = scope.service(resource);
        }
    }
    cfg.service(scope).default_service(web::to(no_route));
}

/// A resource whose unmatched methods answer a JSON 405 with the `allow`ed methods.
fn resource(path: &str, allow: &str) -> Resource {
    let allow = allow.to_string();
    web::resource(path).default_service(web::to(move |req: HttpRequest| {
        let allow = allow.clone();
        async move {
            let refused = method_not_allowed(req).await;
            let mut response = actix_web::ResponseError::error_response(&refused);
            if let Ok(value) = actix_web::http::header::HeaderValue::from_str(&allow) {
                response
                    .headers_mut()
                    .insert(actix_web::http::header::ALLOW, value);
            }
            response
        }
    }))
}

/// `GET /v3/openapi.json`: the API's OpenAPI document, made from [`table`] once.
async fn openapi_json() -> crate::api::contract::Reply<&'static crate::api::openapi::Document> {
    static DOCUMENT: std::sync::OnceLock<crate::api::openapi::Document> =
        std::sync::OnceLock::new();
    let document = DOCUMENT
        .get_or_init(|| crate::api::openapi::Document(crate::api::openapi::document(&table())));
    crate::api::contract::ok(document)
}

async fn no_route(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::NoRoute {
        path: req.path().to_string(),
    })
}

async fn method_not_allowed(req: HttpRequest) -> ApiError {
    ApiError::MethodNotAllowed {
        method: req.method().to_string(),
        path: req.path().to_string(),
    }
}

#[cfg(test)]
mod openapi_tests {
    use super::*;
    use crate::api::openapi::document;
    use serde_json::json;

    #[test]
    fn every_route_of_the_table_is_in_the_document_once() {
        let table = table();
        let doc = document(&table);
        let mut ids = std::collections::BTreeSet::new();
        for route in &table {
            let op = &doc["paths"][route.url()][route.method.as_str().to_ascii_lowercase()];
            assert!(
                op.is_object(),
                "{} {} is missing",
                route.method,
                route.url()
            );
            let id = op["operationId"].as_str().expect("an id").to_string();
            assert!(ids.insert(id.clone()), "{id} twice");
            let params = op["parameters"].as_array().expect("parameters");
            let in_path = params.iter().filter(|p| p["in"] == "path").count();
            assert_eq!(in_path, route.path.matches('{').count(), "{}", route.path);
            if route.path.contains("{type:") {
                let kinds = params.iter().find(|p| p["name"] == "type").expect("type");
                assert_eq!(kinds["schema"]["enum"], json!(["workflows", "spark"]));
            }
            // The answer is described by the handler's type, never left open.
            assert!(
                route.doc.is_some(),
                "{} {} has no types",
                route.method,
                route.path
            );
            let (status, answer) = op["responses"]
                .as_object()
                .expect("responses")
                .iter()
                .find(|(code, _)| code.starts_with('2'))
                .expect("a success answer");
            let content = answer["content"].as_object().expect("content");
            let schema = &content.values().next().expect("a media type")["schema"];
            assert!(
                schema.as_object().is_some_and(|s| !s.is_empty()),
                "{} {} answers {status} without a schema",
                route.method,
                route.path
            );
        }
    }

    #[test]
    fn bodies_and_query_parameters_come_from_the_handlers_types() {
        let doc = document(&table());
        let start = &doc["paths"]["/v3/namespaces/{ns}/apps/{app}/{type}/{program}/start"]["post"];
        // `OrDefault<Values>`: a body that may be left out.
        assert_eq!(start["requestBody"]["required"], false);
        let put = &doc["paths"]["/v3/profiles/{name}"]["put"];
        assert_eq!(put["requestBody"]["required"], true);
        let body_ref = put["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            .as_str()
            .expect("a reference");
        let name = body_ref.rsplit('/').next().expect("a name");
        let spec = &doc["components"]["schemas"][name];
        assert!(spec["properties"]["provisioner"].is_object(), "{spec}");
        // Typed query parameters: named, optional, never null.
        let runs = &doc["paths"]["/v3/namespaces/{ns}/runs"]["get"]["parameters"];
        let limit = runs
            .as_array()
            .expect("parameters")
            .iter()
            .find(|p| p["name"] == "limit")
            .expect("limit");
        assert_eq!(limit["in"], "query");
        assert_eq!(limit["required"], false);
        assert_eq!(limit["schema"]["type"], "integer");
        // A parameter whose schema is written by hand is optional all the same.
        for param in runs.as_array().expect("parameters") {
            if param["in"] == "query" {
                assert_eq!(param["required"], false, "{param}");
            }
        }
        // Every reference points at a schema the document has.
        let text = doc.to_string();
        for part in text.split("\"$ref\":\"").skip(1) {
            let target = &part[..part.find('"').expect("end of reference")];
            let pointer = target.trim_start_matches('#');
            assert!(doc.pointer(pointer).is_some(), "{target} is dangling");
        }
    }
}
