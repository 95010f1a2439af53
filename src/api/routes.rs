//! The route table: every path of the API, its methods and handlers, in the order the
//! router tries them; JSON 404s and 405s for the rest.

use actix_web::{HttpRequest, HttpResponse, Resource, web};

use crate::api::error::ApiError;

/// Registers every route on `cfg`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    use crate::api::apps::*;
    use crate::api::clusters::*;
    use crate::api::namespaces::*;
    use crate::api::preferences::*;
    use crate::api::profiles::*;
    use crate::api::runs::*;
    use crate::api::securekeys::*;
    use crate::api::system::*;
    use crate::api::templates::*;
    cfg.service(
        web::scope("/v3")
            // Runs first: the router tries resources in order, and these are the busiest.
            .service(resource(&format!("{PROGRAM}/runs/{{run}}/events")).get(run_events))
            .service(resource(&format!("{PROGRAM}/runs/{{run}}")).get(get_run))
            .service(resource(&format!("{PROGRAM}/start")).post(start_run))
            .service(resource("/namespaces/{ns}/runs").get(list_namespace_runs))
            .service(resource(PROGRAM).get(get_program))
            .service(resource(&format!("{PROGRAM}/runs")).get(list_runs))
            .service(resource(&format!("{PROGRAM}/runs/{{run}}/stop")).post(stop_run))
            .service(resource(&format!("{PROGRAM}/runs/{{run}}/deprovision")).post(deprovision_run))
            .service(resource(&format!("{PROGRAM}/runs/{{run}}/extend")).post(extend_run))
            .service(resource(&format!("{PROGRAM}/runs/{{run}}/logs")).get(run_logs))
            .service(resource(&format!("{PROGRAM}/runs/{{run}}/operations")).get(run_operations))
            .service(resource(&format!("{PROGRAM}/runs/{{run}}/cluster")).post(run_cluster))
            .service(
                resource(&format!("{PROGRAM}/runs/{{run}}/operations/{{op}}")).get(run_operation),
            )
            .service(resource("/health").get(health))
            .service(resource("/servers").get(list_servers))
            .service(resource("/servers/{name}/drain").post(drain_server))
            .service(resource("/namespaces").get(list_namespaces))
            .service(
                resource("/namespaces/{ns}")
                    .get(get_namespace)
                    .put(put_namespace)
                    .delete(delete_namespace),
            )
            .service(resource("/provisioners").get(list_provisioners))
            .service(resource("/provisioners/{name}").get(get_provisioner))
            .service(resource("/profiles").get(list_profiles))
            .service(resource("/namespaces/{ns}/profiles").get(list_profiles))
            .service(
                resource("/profiles/{name}")
                    .get(get_profile)
                    .put(put_profile)
                    .delete(delete_profile),
            )
            .service(
                resource("/namespaces/{ns}/profiles/{name}")
                    .get(get_profile)
                    .put(put_profile)
                    .delete(delete_profile),
            )
            .service(resource("/profiles/{name}/status").get(profile_status))
            .service(resource("/namespaces/{ns}/profiles/{name}/status").get(profile_status))
            .service(resource("/profiles/{name}/enable").post(enable_profile))
            .service(resource("/namespaces/{ns}/profiles/{name}/enable").post(enable_profile))
            .service(resource("/profiles/{name}/disable").post(disable_profile))
            .service(resource("/namespaces/{ns}/profiles/{name}/disable").post(disable_profile))
            .service(
                resource("/preferences")
                    .get(get_preferences)
                    .put(put_preferences)
                    .delete(delete_preferences),
            )
            .service(
                resource("/namespaces/{ns}/preferences")
                    .get(get_preferences)
                    .put(put_preferences)
                    .delete(delete_preferences),
            )
            .service(resource("/profiles/{name}/usage").get(profile_usage))
            .service(resource("/namespaces/{ns}/profiles/{name}/usage").get(profile_usage))
            .service(resource("/profiles/{name}/assignments").get(profile_assignments))
            .service(
                resource("/namespaces/{ns}/profiles/{name}/assignments").get(profile_assignments),
            )
            .service(resource("/namespaces/{ns}/plan").post(dry_run))
            .service(resource("/janitor").get(get_janitor))
            .service(resource("/janitor/run").post(run_janitor))
            .service(resource("/namespaces/{ns}/securekeys").get(list_secure_keys))
            .service(
                resource("/namespaces/{ns}/securekeys/{name}")
                    .get(get_secure_key)
                    .put(put_secure_key)
                    .delete(delete_secure_key),
            )
            .service(resource("/templates").get(list_templates))
            .service(resource("/namespaces/{ns}/templates").get(list_templates))
            .service(
                resource("/templates/{name}")
                    .get(get_template)
                    .put(put_template)
                    .delete(delete_template),
            )
            .service(
                resource("/namespaces/{ns}/templates/{name}")
                    .get(get_template)
                    .put(put_template)
                    .delete(delete_template),
            )
            .service(resource("/namespaces/{ns}/apps").get(list_apps))
            .service(
                resource("/namespaces/{ns}/apps/{app}")
                    .get(get_app)
                    .put(put_app)
                    .delete(delete_app),
            )
            .service(
                resource("/namespaces/{ns}/apps/{app}/preferences")
                    .get(get_preferences)
                    .put(put_preferences)
                    .delete(delete_preferences),
            )
            .service(
                resource("/namespaces/{ns}/apps/{app}/workflows/{program}/preferences")
                    .get(get_preferences)
                    .put(put_preferences)
                    .delete(delete_preferences),
            ),
    )
    .default_service(web::to(no_route));
}

/// The path of a program; runs hang below it.
const PROGRAM: &str = "/namespaces/{ns}/apps/{app}/workflows/{program}";

/// A resource whose unmatched methods answer a JSON 405.
fn resource(path: &str) -> Resource {
    web::resource(path).default_service(web::to(method_not_allowed))
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
