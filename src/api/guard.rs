//! Who is calling, and whether it may: the check every route of the table passes before its
//! handler runs.
//!
//! The bearer token is found among the store's tokens (or is the fixed token `ebb serve` was
//! given); [`decide`] then weighs the route's [`Need`] against its grants in the request's
//! namespace. A namespace the caller has no role in answers exactly as one that does not
//! exist. The caller is left in the request for handlers that record who did what
//! ([`Caller`] is an extractor).

use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{FromRequest, HttpMessage as _, HttpRequest, web};

use crate::api::error::ApiError;
use crate::api::route::{Needs, caller_needed};
use crate::api::state::{Access, AppState};
use crate::model::access::{Caller, Decision, Need, decide};
use crate::service::error::ServiceError;
use crate::service::tokens;

/// Checks a request to a resource whose methods need `needs`: finds the caller, weighs its
/// grants, and leaves it in the request for the handler.
pub async fn check(
    needs: Needs,
    req: ServiceRequest,
    next: Next<actix_web::body::BoxBody>,
) -> Result<ServiceResponse<actix_web::body::BoxBody>, actix_web::Error> {
    let Some(need) = caller_needed(&needs, req.method()) else {
        return next.call(req).await;
    };
    let caller = authenticate(req.request()).await?;
    match &caller.run {
        Some(scope) => admit_run(scope, req.request())?,
        None => admit(need, &caller, req.request())?,
    }
    typed_program(req.request()).await?;
    req.extensions_mut().insert(caller);
    next.call(req).await
}

/// A path that names its program's type as CDAP's do (`.../spark/{program}`) addresses a
/// program of that type only: another is not found there (ebb's own `workflows` addresses
/// every program).
async fn typed_program(req: &HttpRequest) -> Result<(), ApiError> {
    let info = req.match_info();
    let (Some(program_type), Some(ns), Some(app), Some(program)) = (
        info.get("type"),
        info.get("ns"),
        info.get("app"),
        info.get("program"),
    ) else {
        return Ok(());
    };
    if program_type == crate::model::app::WORKFLOWS {
        return Ok(());
    }
    let state = req
        .app_data::<web::Data<AppState>>()
        .ok_or_else(|| ApiError::Unavailable("the server is starting".into()))?;
    let app = crate::service::apps::get(&state.store, ns.to_string(), app.to_string()).await?;
    match app.program(program) {
        Some(p) if p.program_type == program_type => Ok(()),
        Some(_) | None => Err(ServiceError::ProgramNotFound {
            namespace: ns.to_string(),
            app: app.name,
            program: program.to_string(),
        }
        .into()),
    }
}

/// The namespace request `req` acts in: the path's `{ns}`, else the `namespace` query
/// parameter.
pub fn namespace_of(req: &HttpRequest) -> Option<String> {
    match req.match_info().get("ns") {
        Some(ns) => Some(ns.to_string()),
        None => {
            web::Query::<std::collections::HashMap<String, String>>::from_query(req.query_string())
                .ok()
                .and_then(|q| q.get("namespace").cloned())
        }
    }
}

/// Whether `caller` may do what needs `need` in `req`'s namespace: a namespace it has no
/// role in is not found (404); a right it lacks is a 403.
pub fn admit(need: Need, caller: &Caller, req: &HttpRequest) -> Result<(), ApiError> {
    match decide(need, &caller.grants, namespace_of(req).as_deref()) {
        Decision::Allow => Ok(()),
        Decision::Hidden(ns) => Err(ApiError::from(ServiceError::NamespaceNotFound(ns))),
        Decision::Forbidden(why) => Err(ApiError::Forbidden(why)),
    }
}

/// Whether a run's program (its run token, for `scope`) may make request `req`: only an
/// operation on its own run's cluster (the handler allows only an expand or a shrink).
fn admit_run(scope: &crate::model::access::RunScope, req: &HttpRequest) -> Result<(), ApiError> {
    let own = req.match_info().get("ns") == Some(scope.namespace.as_str())
        && req.match_info().get("run") == Some(scope.run.as_str());
    let resize = req.method() == actix_web::http::Method::POST
        && req
            .match_pattern()
            .is_some_and(|p| p.ends_with("/runs/{run}/cluster"));
    if own && resize {
        Ok(())
    } else {
        Err(ApiError::Forbidden(
            "a run's token may only expand or shrink its own run's cluster".into(),
        ))
    }
}

/// The caller `req`'s bearer token names; 401 without one that works.
async fn authenticate(req: &HttpRequest) -> Result<Caller, ApiError> {
    let given = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    caller_of(req, given).await?.ok_or(ApiError::Unauthorized)
}

/// The caller secret `given` names: a token's secret, or a UI session's credential (the UI
/// forwards a command to the server owning its run with it); `None` when there is none, or
/// it names nobody. With `--no-auth`, every request is the anonymous instance admin's.
pub async fn caller_of(req: &HttpRequest, given: Option<&str>) -> Result<Option<Caller>, ApiError> {
    let state = req
        .app_data::<web::Data<AppState>>()
        .ok_or_else(|| ApiError::Unavailable("the server is starting".into()))?;
    let fixed = match &state.access {
        Access::Open => return Ok(Some(Caller::instance_admin(Caller::ANONYMOUS))),
        Access::Tokens { fixed } => fixed,
    };
    let Some(given) = given else {
        return Ok(None);
    };
    // An unreachable store is a 503, never a 401: the token may well be good.
    let store = state.store.impatient();
    if given.starts_with(tokens::run_tokens::PREFIX) {
        return tokens::run_tokens::caller(&store, &state.cipher, given)
            .await
            .map_err(|e| ApiError::from(ServiceError::from(e)));
    }
    let found = match crate::service::tokens::sessions::Credential::parse(given) {
        Some(session) => {
            crate::service::tokens::sessions::caller(
                &store,
                &state.cipher,
                fixed.as_ref(),
                &session,
            )
            .await
        }
        None => tokens::authenticate(&store, &state.cipher, fixed.as_ref(), given).await,
    };
    found.map_err(|e| ApiError::from(ServiceError::from(e)))
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    /// The caller the guard found; every route that needs a token has one.
    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        std::future::ready(
            req.extensions()
                .get::<Caller>()
                .cloned()
                .ok_or(ApiError::Unauthorized),
        )
    }
}
