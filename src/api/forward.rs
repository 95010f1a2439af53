//! Commands for a run that another server owns go to that server: a route row marked
//! owner-bound ([`Route::owned`](super::route::Route::owned)), of the API or of the web UI, is
//! sent on to the owner's advertised URL before its handler runs, with the caller's token or
//! session, and the owner's answer comes back as it is ([`owner_bound`]). A forwarded request
//! is marked, and never forwarded again: a server that gets one for a run it does not own
//! answers 503 (ownership is moving). Other requests for another server (a drain) go there
//! the same way ([`forward`]).

use std::sync::Arc;

use actix_web::body::BoxBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, COOKIE, HeaderName};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::{HttpRequest, HttpResponse, web};

use super::error::ApiError;
use super::state::State;
use crate::model::run::RunKey;
use crate::service::error::ServiceError;

/// The header a forwarded request carries: the name of the server that forwarded it.
pub const FORWARDED_BY: &str = "x-ebb-forwarded-by";

/// How long the owner may take to answer a forwarded command.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A client for forwarded requests, trusting CA certificate `ca` (PEM) besides the system's
/// roots, for servers that serve HTTPS with certificates of their own CA.
pub fn client(ca: Option<&std::path::Path>) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .redirect(reqwest::redirect::Policy::none());
    if let Some(path) = ca {
        let pem = std::fs::read(path).map_err(|e| format!("--ca-cert {}: {e}", path.display()))?;
        let cert = reqwest::Certificate::from_pem(&pem)
            .map_err(|e| format!("--ca-cert {}: {e}", path.display()))?;
        builder = builder.add_root_certificate(cert);
    }
    builder
        .build()
        .map_err(|e| format!("cannot set up HTTP: {e}"))
}

/// The middleware of a resource whose rows for `methods` are owner-bound (commands for a
/// run): a request for a run another server owns goes to that server before any handler
/// runs, and its answer (status, type, body and the UI's `hx-*` headers) comes back as it is.
/// Runs after the guard: who calls is settled first, and the owner checks again.
pub async fn owner_bound(
    methods: Arc<[Method]>,
    req: ServiceRequest,
    next: Next<BoxBody>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let bound = methods.contains(req.method()) && !req.headers().contains_key(FORWARDED_BY);
    let Some(state) = req.app_data::<State>().cloned().filter(|_| bound) else {
        return next.call(req).await;
    };
    let part = |name: &str| req.match_info().get(name).map(str::to_string);
    let (Some(namespace), Some(app), Some(program), Some(run)) =
        (part("ns"), part("app"), part("program"), part("run"))
    else {
        return next.call(req).await;
    };
    let key = RunKey {
        namespace,
        app,
        program,
        run,
    };
    let owner = state
        .runtime
        .owned_elsewhere(&key)
        .await
        .map_err(|e| ApiError::from(ServiceError::from(e)))?;
    let Some((server, url)) = owner else {
        return next.call(req).await;
    };
    let (http, mut payload) = req.into_parts();
    // Bounded as every body is.
    let body = super::body::read(&http, &mut payload).await?.freeze();
    let who = format!("run '{}' is owned by server {server}, which", key.run);
    let answer = pass_on(&state, &http, body, &who, &url).await?;
    Ok(ServiceResponse::new(http, answer))
}

/// The request headers a forwarded request keeps: who calls (a token, or the UI's session),
/// what its body is, and what the UI asked for.
fn kept(name: &HeaderName) -> bool {
    [AUTHORIZATION, COOKIE, CONTENT_TYPE, ACCEPT].contains(name) || name.as_str().starts_with("hx-")
}

/// Sends `req` (with `body`) on to the server at `url` (`who`, for messages) and answers with
/// its answer.
async fn pass_on(
    state: &State,
    req: &HttpRequest,
    body: web::Bytes,
    who: &str,
    url: &str,
) -> Result<HttpResponse, ApiError> {
    let path = req.uri().path_and_query().map_or("", |p| p.as_str());
    let target = format!("{}{path}", url.trim_end_matches('/'));
    let method = reqwest::Method::from_bytes(req.method().as_str().as_bytes())
        .unwrap_or(reqwest::Method::POST);
    let mut call = state
        .forwarder
        .request(method, &target)
        .header(FORWARDED_BY, state.runtime.deps().member.name.as_ref())
        .body(body.to_vec());
    for (name, value) in req.headers().iter().filter(|(n, _)| kept(n)) {
        call = call.header(name.as_str(), value.as_bytes());
    }
    let unreachable =
        |e: String| ApiError::Unavailable(format!("{who} cannot be reached at {url}: {e}"));
    let answer = call.send().await.map_err(|e| unreachable(e.to_string()))?;
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut response = HttpResponse::build(status);
    for (name, value) in answer.headers() {
        if name == reqwest::header::CONTENT_TYPE || name.as_str().starts_with("hx-") {
            response.insert_header((name.as_str(), value.as_bytes()));
        }
    }
    let bytes = answer
        .bytes()
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    Ok(response.body(bytes))
}

/// Sends `req` (without a body) on to the server at `url` (`who`, for messages: "server s1,
/// which") and answers with its answer; a request forwarded already is refused with a 503
/// instead.
pub async fn forward(
    state: &State,
    req: &HttpRequest,
    who: &str,
    url: &str,
) -> Result<HttpResponse, ApiError> {
    if req.headers().contains_key(FORWARDED_BY) {
        return Err(ApiError::Unavailable(format!(
            "{who} is not this server; the request was forwarded here already"
        )));
    }
    pass_on(state, req, web::Bytes::new(), who, url).await
}
