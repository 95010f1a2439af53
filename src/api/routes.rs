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

/// The path of a program; runs hang below it.
macro_rules! program {
    ($tail:literal) => {
        concat!("/namespaces/{ns}/apps/{app}/workflows/{program}", $tail)
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
    use crate::api::securekeys::*;
    use crate::api::system::*;
    use crate::api::templates::*;
    use crate::api::tokens::*;
    let row = Route::new;
    use Method as M;
    vec![
        // Runs first: the router tries resources in order, and these are the busiest.
        row(M::GET, program!("/runs/{run}/events"), VIEW, || {
            web::get().to(run_events)
        }),
        row(M::GET, program!("/runs/{run}"), VIEW, || {
            web::get().to(get_run)
        }),
        row(M::POST, program!("/start"), OPERATE, || {
            web::post().to(start_run)
        }),
        row(M::GET, "/namespaces/{ns}/runs", VIEW, || {
            web::get().to(list_namespace_runs)
        }),
        row(M::GET, program!(""), VIEW, || web::get().to(get_program)),
        row(M::GET, program!("/runs"), VIEW, || web::get().to(list_runs)),
        row(M::POST, program!("/runs/{run}/stop"), OPERATE, || {
            web::post().to(stop_run)
        }),
        row(
            M::POST,
            program!("/runs/{run}/deprovision"),
            OPERATE,
            || web::post().to(deprovision_run),
        ),
        row(M::POST, program!("/runs/{run}/extend"), OPERATE, || {
            web::post().to(extend_run)
        }),
        row(M::GET, program!("/runs/{run}/logs"), VIEW, || {
            web::get().to(run_logs)
        }),
        row(M::GET, program!("/runs/{run}/operations"), VIEW, || {
            web::get().to(run_operations)
        }),
        row(M::POST, program!("/runs/{run}/cluster"), OPERATE, || {
            web::post().to(run_cluster)
        }),
        row(
            M::GET,
            program!("/runs/{run}/operations/{op}"),
            VIEW,
            || web::get().to(run_operation),
        ),
        row(M::GET, "/health", Need::Public, || web::get().to(health)),
        // The contract: generated from this table.
        row(M::GET, "/openapi.json", Need::Public, || {
            web::get().to(openapi_json)
        }),
        // Any token reads the metrics (a scraper's needs no role).
        row(M::GET, "/metrics", TOKEN, || web::get().to(metrics)),
        row(M::GET, "/servers", INSTANCE, || web::get().to(list_servers)),
        row(M::POST, "/servers/{name}/drain", INSTANCE, || {
            web::post().to(drain_server)
        }),
        row(M::GET, "/tokens", Need::AnyAdmin, || {
            web::get().to(list_tokens)
        }),
        row(M::POST, "/tokens", Need::AnyAdmin, || {
            web::post().to(create_token)
        }),
        row(M::DELETE, "/tokens/{name}", Need::AnyAdmin, || {
            web::delete().to(revoke_token)
        }),
        // The namespace comes from the `namespace` query parameter: an admin of it reads its
        // changes; without one, an instance admin reads the instance-wide ones.
        row(M::GET, "/audit", ADMIN, || web::get().to(list_audit)),
        // Every token lists the namespaces it has a role in.
        row(M::GET, "/namespaces", TOKEN, || {
            web::get().to(list_namespaces)
        }),
        row(M::GET, "/namespaces/{ns}", VIEW, || {
            web::get().to(get_namespace)
        }),
        row(M::PUT, "/namespaces/{ns}", INSTANCE, || {
            web::put().to(put_namespace)
        }),
        row(M::DELETE, "/namespaces/{ns}", INSTANCE, || {
            web::delete().to(delete_namespace)
        }),
        row(M::GET, "/provisioners", TOKEN, || {
            web::get().to(list_provisioners)
        }),
        row(M::GET, "/provisioners/{name}", TOKEN, || {
            web::get().to(get_provisioner)
        }),
        row(M::GET, "/profiles", TOKEN, || web::get().to(list_profiles)),
        row(M::GET, "/namespaces/{ns}/profiles", VIEW, || {
            web::get().to(list_profiles)
        }),
        row(M::GET, "/profiles/{name}", TOKEN, || {
            web::get().to(get_profile)
        }),
        row(M::PUT, "/profiles/{name}", INSTANCE, || {
            web::put().to(put_profile)
        }),
        row(M::DELETE, "/profiles/{name}", INSTANCE, || {
            web::delete().to(delete_profile)
        }),
        row(M::GET, "/namespaces/{ns}/profiles/{name}", VIEW, || {
            web::get().to(get_profile)
        }),
        row(M::PUT, "/namespaces/{ns}/profiles/{name}", ADMIN, || {
            web::put().to(put_profile)
        }),
        row(M::DELETE, "/namespaces/{ns}/profiles/{name}", ADMIN, || {
            web::delete().to(delete_profile)
        }),
        row(M::GET, "/profiles/{name}/status", TOKEN, || {
            web::get().to(profile_status)
        }),
        row(
            M::GET,
            "/namespaces/{ns}/profiles/{name}/status",
            VIEW,
            || web::get().to(profile_status),
        ),
        row(M::POST, "/profiles/{name}/enable", INSTANCE, || {
            web::post().to(enable_profile)
        }),
        row(
            M::POST,
            "/namespaces/{ns}/profiles/{name}/enable",
            ADMIN,
            || web::post().to(enable_profile),
        ),
        row(M::POST, "/profiles/{name}/disable", INSTANCE, || {
            web::post().to(disable_profile)
        }),
        row(
            M::POST,
            "/namespaces/{ns}/profiles/{name}/disable",
            ADMIN,
            || web::post().to(disable_profile),
        ),
        row(M::GET, "/preferences", TOKEN, || {
            web::get().to(get_preferences)
        }),
        row(M::PUT, "/preferences", INSTANCE, || {
            web::put().to(put_preferences)
        }),
        row(M::DELETE, "/preferences", INSTANCE, || {
            web::delete().to(delete_preferences)
        }),
        row(M::GET, "/namespaces/{ns}/preferences", VIEW, || {
            web::get().to(get_preferences)
        }),
        row(M::PUT, "/namespaces/{ns}/preferences", ADMIN, || {
            web::put().to(put_preferences)
        }),
        row(M::DELETE, "/namespaces/{ns}/preferences", ADMIN, || {
            web::delete().to(delete_preferences)
        }),
        // A SYSTEM profile's usage and assignments span every namespace.
        row(M::GET, "/profiles/{name}/usage", INSTANCE, || {
            web::get().to(profile_usage)
        }),
        row(
            M::GET,
            "/namespaces/{ns}/profiles/{name}/usage",
            VIEW,
            || web::get().to(profile_usage),
        ),
        row(M::GET, "/profiles/{name}/assignments", INSTANCE, || {
            web::get().to(profile_assignments)
        }),
        row(
            M::GET,
            "/namespaces/{ns}/profiles/{name}/assignments",
            VIEW,
            || web::get().to(profile_assignments),
        ),
        // A dry run changes nothing.
        row(M::POST, "/namespaces/{ns}/plan", VIEW, || {
            web::post().to(dry_run)
        }),
        row(M::GET, "/janitor", INSTANCE, || web::get().to(get_janitor)),
        row(M::POST, "/janitor/run", INSTANCE, || {
            web::post().to(run_janitor)
        }),
        row(M::GET, "/namespaces/{ns}/securekeys", VIEW, || {
            web::get().to(list_secure_keys)
        }),
        row(M::GET, "/namespaces/{ns}/securekeys/{name}", VIEW, || {
            web::get().to(get_secure_key)
        }),
        row(M::PUT, "/namespaces/{ns}/securekeys/{name}", ADMIN, || {
            web::put().to(put_secure_key)
        }),
        row(
            M::DELETE,
            "/namespaces/{ns}/securekeys/{name}",
            ADMIN,
            || web::delete().to(delete_secure_key),
        ),
        row(M::GET, "/templates", TOKEN, || {
            web::get().to(list_templates)
        }),
        row(M::GET, "/namespaces/{ns}/templates", VIEW, || {
            web::get().to(list_templates)
        }),
        row(M::GET, "/templates/{name}", TOKEN, || {
            web::get().to(get_template)
        }),
        row(M::PUT, "/templates/{name}", INSTANCE, || {
            web::put().to(put_template)
        }),
        row(M::DELETE, "/templates/{name}", INSTANCE, || {
            web::delete().to(delete_template)
        }),
        row(M::GET, "/namespaces/{ns}/templates/{name}", VIEW, || {
            web::get().to(get_template)
        }),
        row(M::PUT, "/namespaces/{ns}/templates/{name}", ADMIN, || {
            web::put().to(put_template)
        }),
        row(
            M::DELETE,
            "/namespaces/{ns}/templates/{name}",
            ADMIN,
            || web::delete().to(delete_template),
        ),
        row(M::GET, "/namespaces/{ns}/apps", VIEW, || {
            web::get().to(list_apps)
        }),
        row(M::GET, "/namespaces/{ns}/apps/{app}", VIEW, || {
            web::get().to(get_app)
        }),
        row(M::PUT, "/namespaces/{ns}/apps/{app}", ADMIN, || {
            web::put().to(put_app)
        }),
        row(M::DELETE, "/namespaces/{ns}/apps/{app}", ADMIN, || {
            web::delete().to(delete_app)
        }),
        row(
            M::GET,
            "/namespaces/{ns}/apps/{app}/preferences",
            VIEW,
            || web::get().to(get_preferences),
        ),
        row(
            M::PUT,
            "/namespaces/{ns}/apps/{app}/preferences",
            ADMIN,
            || web::put().to(put_preferences),
        ),
        row(
            M::DELETE,
            "/namespaces/{ns}/apps/{app}/preferences",
            ADMIN,
            || web::delete().to(delete_preferences),
        ),
        row(M::GET, program!("/preferences"), VIEW, || {
            web::get().to(get_preferences)
        }),
        row(M::PUT, program!("/preferences"), ADMIN, || {
            web::put().to(put_preferences)
        }),
        row(M::DELETE, program!("/preferences"), ADMIN, || {
            web::delete().to(delete_preferences)
        }),
    ]
}

/// Registers every route of [`table`] on `cfg`: one resource per path, in the table's order,
/// each checking its rows' rights before any handler runs.
pub fn configure(cfg: &mut web::ServiceConfig) {
    let table = table();
    let mut scope = web::scope("/v3");
    for (path, rows, needs) in crate::api::route::by_path(&table) {
        let root = crate::api::route::ROOT_PATHS.contains(&path);
        let mut resource = resource(path);
        for row in rows {
            resource = resource.route((row.to)());
        }
        let guard = actix_web::middleware::from_fn(move |req, next| {
            crate::api::guard::check(std::sync::Arc::clone(&needs), req, next)
        });
        if root {
            cfg.service(resource.wrap(guard));
        } else {
            scope = scope.service(resource.wrap(guard));
        }
    }
    cfg.service(scope).default_service(web::to(no_route));
}

/// A resource whose unmatched methods answer a JSON 405.
fn resource(path: &str) -> Resource {
    web::resource(path).default_service(web::to(method_not_allowed))
}

/// `GET /v3/openapi.json`: the API's OpenAPI document, made from [`table`].
async fn openapi_json() -> HttpResponse {
    HttpResponse::Ok().json(crate::api::openapi::document(&table()))
}

async fn no_route(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::NoRoute {
        path: req.path().to_string(),
    })
}

async fn method_not_allowed(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed {
        method: req.method().to_string(),
        path: req.path().to_string(),
    })
}

#[cfg(test)]
mod openapi_tests {
    use super::*;
    use crate::api::openapi::document;

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
            let params = op["parameters"].as_array().expect("parameters").len();
            assert_eq!(params, route.path.matches('{').count(), "{}", route.path);
        }
    }
}
