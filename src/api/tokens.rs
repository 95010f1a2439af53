//! Routes of access tokens and of the audit log of changes.

use actix_web::{HttpRequest, web};

use crate::api::body::Json;
use crate::api::contract::{Answer, Query, Reply, ok};
use crate::api::state::State;
use crate::model::access::{AuditEntry, Caller, TokenSpec, TokenView};
use crate::service::audit::{self, AuditQuery};
use crate::service::tokens;

pub async fn list_tokens(state: State, caller: Caller) -> Reply<Vec<TokenView>> {
    ok(tokens::list(&state.store, &caller).await?)
}

/// `POST /v3/tokens`: 201 with the token's secret, shown this once.
pub async fn create_token(
    state: State,
    caller: Caller,
    body: Json<TokenSpec>,
) -> Reply<TokenView, 201> {
    let made = tokens::create(&state.store, &caller, body.0).await?;
    Ok(Answer::new(made))
}

pub async fn revoke_token(
    state: State,
    caller: Caller,
    name: web::Path<String>,
) -> Reply<TokenView> {
    ok(tokens::revoke(&state.store, &caller, name.into_inner()).await?)
}

/// `GET /v3/audit?namespace=&since=&before=&limit=`: changes, newest first; a `Link` header
/// names the next page.
pub async fn list_audit(
    state: State,
    query: Query<AuditQuery>,
    req: HttpRequest,
) -> Reply<Vec<AuditEntry>> {
    let query = query.0;
    let (entries, next) = audit::list(&state.store, query.clone()).await?;
    let mut answer = Answer::new(entries);
    if let Some(next) = next {
        let mut link = format!("before={next}");
        for (name, value) in [
            ("namespace", query.namespace),
            ("since", query.since.map(|s| s.to_string())),
            ("limit", query.limit.map(|l| l.to_string())),
        ] {
            if let Some(v) = value {
                link.push_str(&format!("&{name}={v}"));
            }
        }
        answer = answer.header(
            actix_web::http::header::LINK,
            &format!("<{}?{link}>; rel=\"next\"", req.path()),
        );
    }
    Ok(answer)
}
