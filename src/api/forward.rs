//! Commands for a run that another server owns go to that server: the request is sent on to
//! the owner's advertised URL, with the caller's token, and the owner's answer comes back as
//! it is. A forwarded request is marked, and never forwarded again: a server that gets one for
//! a run it does not own answers 503 (ownership is moving).

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use serde::Serialize;

use super::contract::{Answer, Reply, ok};
use super::error::ApiError;
use super::state::State;
use crate::runtime::error::RuntimeError;
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

/// Answers `result`; when it says another server owns the run, answers with that server's
/// answer to the same request, sent on with `body`.
pub async fn or_forward<T: Serialize>(
    state: &State,
    req: &HttpRequest,
    body: Option<serde_json::Value>,
    result: Result<T, ServiceError>,
) -> Reply<T> {
    match result {
        Err(ServiceError::Runtime(RuntimeError::Elsewhere { run, server, url }))
            if !url.is_empty() =>
        {
            let owner = format!("run '{run}' is owned by server {server}, which");
            forward(state, req, body, &owner, &url)
                .await
                .map(Answer::forwarded)
        }
        other => ok(other?),
    }
}

/// Sends `req` on to the server at `url` (`who`, for messages: "server s1, which") and answers
/// with its answer; a request forwarded already is refused with a 503 instead.
pub async fn forward(
    state: &State,
    req: &HttpRequest,
    body: Option<serde_json::Value>,
    who: &str,
    url: &str,
) -> Result<HttpResponse, ApiError> {
    if req.headers().contains_key(FORWARDED_BY) {
        return Err(ApiError::Unavailable(format!(
            "{who} is not this server; the request was forwarded here already"
        )));
    }
    let method = reqwest::Method::from_bytes(req.method().as_str().as_bytes())
        .unwrap_or(reqwest::Method::POST);
    let auth = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .map(|v| v.as_bytes().to_vec());
    let path = req.uri().path_and_query().map_or("", |p| p.as_str());
    let (status, bytes) = send(state, method, path, auth, body, who, url).await?;
    Ok(HttpResponse::build(status)
        .content_type("application/json")
        .body(bytes))
}

/// Sends a request for `path` (with its query) to the server at `url`, with `auth` as its
/// `Authorization` header; answers the status and body that server answered.
pub async fn send(
    state: &State,
    method: reqwest::Method,
    path: &str,
    auth: Option<Vec<u8>>,
    body: Option<serde_json::Value>,
    who: &str,
    url: &str,
) -> Result<(StatusCode, actix_web::web::Bytes), ApiError> {
    let target = format!("{}{path}", url.trim_end_matches('/'));
    let mut call = state
        .forwarder
        .request(method, &target)
        .header(FORWARDED_BY, state.runtime.deps().member.name.as_ref());
    if let Some(auth) = auth {
        call = call.header(reqwest::header::AUTHORIZATION, auth);
    }
    if let Some(body) = body {
        call = call.json(&body);
    }
    let unreachable =
        |e: String| ApiError::Unavailable(format!("{who} cannot be reached at {url}: {e}"));
    let answer = call.send().await.map_err(|e| unreachable(e.to_string()))?;
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let bytes = answer
        .bytes()
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    Ok((status, bytes))
}
