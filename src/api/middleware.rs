//! The middleware every request passes: the origin guard, the request log. (Tokens and
//! rights are checked per route, by [`guard`](crate::api::guard).)

use std::sync::Arc;
use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::web;

use crate::api::origin;
use crate::api::state::AppState;

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
        ui: req.path().starts_with("/ui/"),
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
    // The request's reads share one look at the store's revision, taken after it began.
    let res = crate::store::serving_request(next.call(req)).await;
    let (status, route) = match &res {
        Ok(r) => (
            r.status().as_u16(),
            r.request()
                .match_pattern()
                .map_or_else(|| "unmatched".into(), |p| crate::api::pattern::shown(&p)),
        ),
        Err(e) => (
            e.as_response_error().status_code().as_u16(),
            "unmatched".to_string(),
        ),
    };
    use crate::model::metrics::{HTTP_REQUESTS, HTTP_SECONDS, method_label};
    // Any token is a method to HTTP: only the ones the API knows become a label, so no
    // request can grow the series without bound.
    let label = method_label(method.as_str());
    metrics::counter!(HTTP_REQUESTS.name, "route" => route.clone(), "method" => label, "status" => status.to_string())
        .increment(1);
    metrics::histogram!(HTTP_SECONDS.name, "route" => route, "method" => label)
        .record(started.elapsed().as_secs_f64());
    tracing::info!(
        http.method = %method,
        http.path = %path,
        http.status = status,
        elapsed_us = started.elapsed().as_micros() as u64,
        "request"
    );
    res
}
