//! Signing in to the UI, and the check every page passes.
//!
//! The sign-in page takes a token (the same tokens as the API) and keeps it in the session
//! cookie: `HttpOnly` (no script reads it), `SameSite=Strict` (no other site's page sends it),
//! `Secure` over HTTPS, and gone when the browser closes. The token is checked on every
//! request, so a revoked or expired one signs the browser out at once, on every server.

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

/// The session cookie's name.
pub const COOKIE: &str = "ebb_session";

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
    let secret = req
        .cookie(COOKIE)
        .map(|c| c.value().to_string())
        .filter(|s| !s.is_empty() && s.len() <= MAX_SECRET);
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

pub async fn login(
    state: State,
    req: HttpRequest,
    form: web::Form<LoginForm>,
) -> Result<HttpResponse, UiError> {
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
    if guard::caller_of(&req, Some(secret)).await?.is_none() {
        return Ok(refuse(
            "That token is not valid: it is wrong, revoked or expired.",
        ));
    }
    let cookie = Cookie::build(COOKIE, secret.to_string())
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(state.https)
        .finish();
    Ok(HttpResponse::SeeOther()
        .cookie(cookie)
        .insert_header((actix_web::http::header::LOCATION, next))
        .finish())
}

pub async fn logout(state: State) -> HttpResponse {
    let mut cookie = Cookie::build(COOKIE, "")
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(state.https)
        .finish();
    cookie.make_removal();
    HttpResponse::SeeOther()
        .cookie(cookie)
        .insert_header((actix_web::http::header::LOCATION, "/ui/login"))
        .finish()
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
