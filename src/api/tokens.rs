//! Routes of access tokens and of the audit log of changes.

use actix_web::{HttpRequest, HttpResponse, web};

use crate::api::body::Json;
use crate::api::error::ApiError;
use crate::api::state::{Reply, State, ok, query};
use crate::model::access::{Caller, TokenSpec};
use crate::service::audit::{self, AuditQuery};
use crate::service::tokens;

pub async fn list_tokens(state: State, caller: Caller) -> Reply {
    ok(&tokens::list(&state.store, &caller).await?)
}

/// `POST /v3/tokens`: 201 with the token's secret, shown this once.
pub async fn create_token(state: State, caller: Caller, body: Json<TokenSpec>) -> Reply {
    let made = tokens::create(&state.store, &caller, body.0).await?;
    Ok(HttpResponse::Created().json(made))
}

pub async fn revoke_token(state: State, caller: Caller, name: web::Path<String>) -> Reply {
    ok(&tokens::revoke(&state.store, &caller, name.into_inner()).await?)
}

/// `GET /v3/audit?namespace=&since=&before=&limit=`: changes, newest first; a `Link` header
/// names the next page.
pub async fn list_audit(state: State, req: HttpRequest) -> Reply {
    let q = query(&req)?;
    let number = |name: &str| -> Result<Option<f64>, ApiError> {
        q.get(name)
            .map(|v| {
                v.parse::<f64>()
                    .ok()
                    .filter(|n| n.is_finite() && *n >= 0.0)
                    .ok_or_else(|| ApiError::Query(format!("'{name}' must be a number, got '{v}'")))
            })
            .transpose()
    };
    let whole = |name: &str| -> Result<Option<u64>, ApiError> {
        q.get(name)
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    ApiError::Query(format!("'{name}' must be a whole number, got '{v}'"))
                })
            })
            .transpose()
    };
    let query = AuditQuery {
        namespace: q.get("namespace").cloned(),
        since: number("since")?,
        before: whole("before")?,
        limit: whole("limit")?.map(|l| l.min(usize::MAX as u64) as usize),
    };
    let (entries, next) = audit::list(&state.store, query.clone()).await?;
    let mut response = HttpResponse::Ok();
    if let Some(next) = next {
        let mut link = format!("before={next}");
        for (name, value) in [
            ("namespace", query.namespace.map(|n| n.to_string())),
            ("since", q.get("since").cloned()),
            ("limit", q.get("limit").cloned()),
        ] {
            if let Some(v) = value {
                link.push_str(&format!("&{name}={v}"));
            }
        }
        response.insert_header((
            actix_web::http::header::LINK,
            format!("<{}?{link}>; rel=\"next\"", req.path()),
        ));
    }
    Ok(response.json(entries))
}
