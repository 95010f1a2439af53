//! Signing in to the UI, and the check every page passes.
//!
//! The sign-in page takes a token (the same tokens as the API) and begins a session for it
//! ([`sessions`](crate::service::tokens::sessions)): the browser keeps the session's credential,
//! never the token, in the session cookie: `HttpOnly` (no script reads it), `SameSite=Strict`
//! (no other site's page sends it), gone when the browser closes, and over HTTPS `Secure` and
//! named `__Host-ebb_session` (only this host's HTTPS pages may set it, at path `/`). The
//! session is checked on every request, so signing out, a revoked or expired token, or the
//! end of the session's lifetime signs the browser out at once, on every server.

use actix_web::cookie::{Cookie, SameSite};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::{HttpMessage as _, HttpRequest, HttpResponse, web};
use maud::html;
use serde::Deserialize;

use super::layout::{Secret, UiError, bare};
use crate::api::guard;
use crate::api::route::{Needs, caller_needed};
use crate::api::state::{Access, State};
use crate::service::error::ServiceError;
use crate::service::tokens::sessions::{self, Credential};

/// The session cookie's name over plain HTTP.
pub const COOKIE: &str = "ebb_session";
/// Its name over HTTPS: a `__Host-` cookie, which a browser accepts only from this host over
/// HTTPS, for path `/`, with no domain.
pub const SECURE_COOKIE: &str = "__Host-ebb_session";

/// The session cookie's name on a server that answers over HTTPS or not.
fn cookie_name(https: bool) -> &'static str {
    if https { SECURE_COOKIE } else { COOKIE }
}

/// Longest secret the sign-in form takes (a token is 68 characters).
const MAX_SECRET: usize = 256;

/// Checks a request to a UI resource whose methods need `needs`: finds the caller from the
/// session cookie, weighs its grants, and leaves it in the request. Without a session, a page
/// leads to the sign-in page and comes back after it.
pub async fn check(
    needs: Needs,
    req: ServiceRequest,
    next: Next<actix_web::body::BoxBody>,
) -> Result<ServiceResponse<actix_web::body::BoxBody>, actix_web::Error> {
    let Some(need) = caller_needed(&needs, req.method()) else {
        return next.call(req).await;
    };
    let https = req.app_data::<State>().is_some_and(|s| s.https);
    // Only a session's credential: a token given as the cookie signs nobody in.
    let secret = req
        .cookie(cookie_name(https))
        .and_then(|c| Credential::parse(c.value()))
        .map(|c| c.value());
    let caller = guard::caller_of(req.request(), secret.as_deref())
        .await
        .map_err(UiError)?;
    let Some(caller) = caller else {
        let answer = to_sign_in(req.request());
        return Ok(req.into_response(answer));
    };
    guard::admit(need, &caller, req.request()).map_err(UiError)?;
    req.extensions_mut().insert(caller);
    req.extensions_mut().insert(Secret(secret));
    next.call(req).await
}

/// Where a request without a (working) session goes: the sign-in page, then back.
fn to_sign_in(req: &HttpRequest) -> HttpResponse {
    let back = if req.method() == Method::GET && !super::layout::htmx(req) {
        req.uri()
            .path_and_query()
            .map_or("/ui".to_string(), |p| p.to_string())
    } else {
        "/ui".to_string()
    };
    let to = format!("/ui/login?next={}", super::layout::encode(&back));
    if super::layout::htmx(req) {
        return HttpResponse::Unauthorized()
            .insert_header(("HX-Redirect", to))
            .finish();
    }
    HttpResponse::SeeOther()
        .insert_header((actix_web::http::header::LOCATION, to))
        .finish()
}

/// Where to go after signing in: a path of the UI, never another site.
fn next_page(next: Option<&str>) -> String {
    match next {
        Some(n)
            if (n == "/ui" || n.starts_with("/ui/") || n.starts_with("/ui?"))
                && !n.contains("//")
                && !n.contains('\\')
                && n.len() <= 2048 =>
        {
            n.to_string()
        }
        _ => "/ui".to_string(),
    }
}

/// The query of the sign-in page.
#[derive(Debug, Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

/// The sign-in form.
#[derive(Debug, Deserialize)]
pub struct LoginForm {
    token: String,
    next: Option<String>,
}

fn login_form(next: &str, error: Option<&str>) -> maud::Markup {
    bare(
        "Sign in",
        html! {
            div.signin {
                h1 { "Sign in to ebb" }
                form method="post" action="/ui/login" {
                    input type="hidden" name="next" value=(next);
                    div.field.invalid[error.is_some()] {
                        label for="token" { "Token" }
                        input #token type="password" name="token" required autocomplete="current-password"
                            maxlength=(MAX_SECRET) autofocus
                            aria-describedby="token-help token-error" aria-invalid=[error.map(|_| "true")];
                        @if let Some(error) = error {
                            p #token-error.error role="alert" { (error) }
                        }
                        p #token-help.help {
                            "An API token (" code { "ebb_…" } "). On a new installation the first one is in "
                            code { "ebb-data/admin.token" } "; " code { "ebb token create" } " makes more."
                        }
                    }
                    button.primary type="submit" { "Sign in" }
                }
            }
        },
    )
}

pub async fn login_page(state: State, query: web::Query<LoginQuery>) -> HttpResponse {
    if matches!(state.access, Access::Open) {
        return HttpResponse::SeeOther()
            .insert_header((actix_web::http::header::LOCATION, "/ui"))
            .finish();
    }
    let next = next_page(query.next.as_deref());
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .body(login_form(&next, None).into_string())
}

pub async fn login(state: State, form: web::Form<LoginForm>) -> Result<HttpResponse, UiError> {
    let form = form.into_inner();
    let next = next_page(form.next.as_deref());
    let secret = form.token.trim();
    let refuse = |why: &str| {
        HttpResponse::Unauthorized()
            .content_type("text/html; charset=utf-8")
            .body(login_form(&next, Some(why)).into_string())
    };
    if secret.is_empty() {
        return Ok(refuse("Give a token."));
    }
    if secret.len() > MAX_SECRET {
        return Ok(refuse("That is not a token: it is too long."));
    }
    let fixed = match &state.access {
        Access::Tokens { fixed } => fixed.as_ref(),
        Access::Open => None,
    };
    let begun = match sessions::begin(
        &state.store.impatient(),
        &state.cipher,
        &state.sign_ins,
        fixed,
        secret,
    )
    .await
    {
        Err(
            e @ ServiceError::TooManySignIns {
                retry_after_secs, ..
            },
        ) => {
            return Ok(HttpResponse::TooManyRequests()
                .content_type("text/html; charset=utf-8")
                .insert_header(("Retry-After", retry_after_secs.to_string()))
                .body(login_form(&next, Some(&format!("{e}."))).into_string()));
        }
        begun => begun.map_err(|e| UiError(e.into()))?,
    };
    let Some((credential, _)) = begun else {
        return Ok(refuse(
            "That token is not valid: it is wrong, revoked or expired.",
        ));
    };
    Ok(HttpResponse::SeeOther()
        .cookie(session_cookie(&state, credential.value()))
        .insert_header((actix_web::http::header::LOCATION, next))
        .finish())
}

/// The session cookie holding `value`.
fn session_cookie(state: &State, value: String) -> Cookie<'static> {
    Cookie::build(cookie_name(state.https), value)
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(state.https)
        .finish()
}

/// Signing out ends the session in the store, not only in this browser.
pub async fn logout(state: State, req: HttpRequest) -> Result<HttpResponse, UiError> {
    let held = req
        .cookie(cookie_name(state.https))
        .and_then(|c| Credential::parse(c.value()));
    if let Some(credential) = held {
        sessions::end(&state.store.impatient(), &credential)
            .await
            .map_err(|e| UiError(ServiceError::from(e).into()))?;
    }
    let mut cookie = session_cookie(&state, String::new());
    cookie.make_removal();
    Ok(HttpResponse::SeeOther()
        .cookie(cookie)
        .insert_header((actix_web::http::header::LOCATION, "/ui/login"))
        .finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pages_of_the_ui_are_gone_back_to() {
        assert_eq!(
            next_page(Some("/ui/runs?namespace=a")),
            "/ui/runs?namespace=a"
        );
        assert_eq!(next_page(Some("/ui")), "/ui");
        for evil in [
            "https://evil.example/",
            "//evil.example/ui",
            "/ui//evil.example",
            "/uix",
            "/v3/tokens",
            "/ui/\\evil",
            "",
        ] {
            assert_eq!(next_page(Some(evil)), "/ui", "{evil}");
        }
        assert_eq!(next_page(None), "/ui");
        assert_eq!(
            super::super::layout::encode("/ui/runs?a=b&c"),
            "/ui/runs%3Fa%3Db%26c"
        );
    }
}
