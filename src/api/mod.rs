//! The HTTP API: CDAP-style `/v3` paths over the services.
//!
//! Handlers are thin: extract, call a service, serialize. They never touch the store directly.
//! Unknown paths answer a JSON 404 and known paths with a wrong method a JSON 405; every error
//! goes through [`error::ApiError`]. When the server has a token, every path but
//! `/v3/health` needs `Authorization: Bearer <token>`.

pub mod body;
pub mod error;
mod handlers;
pub mod origin;
mod runs;
mod secure;
mod templates;

use std::sync::Arc;
use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{HttpRequest, HttpResponse, Resource, web};

use crate::runtime::Runtime;
use crate::runtime::registry::Registry;
use crate::store::Store;
use error::ApiError;

/// What every handler can reach.
#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Store,
    pub registry: Arc<Registry>,
    pub runtime: Runtime,
    /// Seals the data of secure keys.
    pub cipher: Arc<crate::store::secure::Cipher>,
    pub janitor: crate::runtime::janitor::Janitor,
    /// The hash of the bearer token required on every request but health; `None` to require
    /// none.
    pub token: Option<TokenHash>,
    /// Host names (besides IP addresses and `localhost`) a request may be addressed to.
    pub allowed_hosts: Arc<[String]>,
}

/// Registers every route on `cfg`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    use handlers::*;
    use runs::*;
    use secure::*;
    use templates::*;
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

/// Checks the bearer token, when the server has one.
pub async fn authenticate(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let token = req
        .app_data::<web::Data<AppState>>()
        .and_then(|s| s.token.clone());
    if let Some(token) = token
        && req.path() != "/v3/health"
    {
        let given = req
            .headers()
            .get(actix_web::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| token.matches(g)) {
            return Err(ApiError::Unauthorized.into());
        }
    }
    next.call(req).await
}

/// A bearer token as the server keeps it: its SHA-256, compared in constant time with the
/// hash of what a request brings, so neither the comparison's time nor its length tells
/// anything of the token.
#[derive(Clone)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    pub fn new(token: &str) -> Self {
        TokenHash(Self::hash(token))
    }

    fn hash(text: &str) -> [u8; 32] {
        use sha2::Digest as _;
        sha2::Sha256::digest(text.as_bytes()).into()
    }

    /// Whether `given` is the token.
    pub fn matches(&self, given: &str) -> bool {
        let given = Self::hash(given);
        self.0
            .iter()
            .zip(given.iter())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
    }
}

impl std::fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenHash(..)")
    }
}

/// Refuses what a web page, not a client of the API, would send (see [`origin`]).
pub async fn guard_origin(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let allowed = req
        .app_data::<web::Data<AppState>>()
        .map(|s| Arc::clone(&s.allowed_hosts))
        .unwrap_or_else(|| Arc::from(Vec::new()));
    let header = |name: actix_web::http::header::HeaderName| {
        req.headers()
            .get(name)
            .map(|v| v.to_str().unwrap_or("\u{fffd}").to_string())
    };
    use actix_web::http::header;
    let request = origin::Request {
        write: !matches!(
            *req.method(),
            actix_web::http::Method::GET
                | actix_web::http::Method::HEAD
                | actix_web::http::Method::OPTIONS
        ),
        host: header(header::HOST),
        origin: header(header::ORIGIN),
        fetch_site: header(header::HeaderName::from_static("sec-fetch-site")),
        content_type: header(header::CONTENT_TYPE),
    };
    origin::check(&request, &allowed)?;
    next.call(req).await
}

/// Logs each request once it is answered.
pub async fn log_request(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.path().to_string();
    let res = next.call(req).await;
    let status = match &res {
        Ok(r) => r.status().as_u16(),
        Err(e) => e.as_response_error().status_code().as_u16(),
    };
    tracing::info!(
        http.method = %method,
        http.path = %path,
        http.status = status,
        elapsed_us = started.elapsed().as_micros() as u64,
        "request"
    );
    res
}
