//! The frame every page shares (header, navigation, namespace picker), the caller's context a
//! page is drawn for, the UI's errors as pages, and small pieces pages share (status badges,
//! times, deadlines).

use std::collections::BTreeMap;

use actix_web::http::{Method, StatusCode};
use actix_web::{FromRequest, HttpMessage as _, HttpRequest, HttpResponse, ResponseError, web};
use maud::{DOCTYPE, Markup, html};

use crate::api::error::ApiError;
use crate::api::state::{Access, AppState};
use crate::model::access::{Caller, Decision, Need, decide};
use crate::model::run::RunKey;
use crate::service::error::ServiceError;

/// The token a signed-in browser sent (its session cookie); `None` with `--no-auth`.
#[derive(Debug, Clone)]
pub struct Secret(pub Option<String>);

/// The right each page and action of the UI needs, by method and path: the UI's table, kept
/// in the app's data so pages can show only the buttons their caller may press.
#[derive(Debug, Clone)]
pub struct Rights(pub std::sync::Arc<[(Method, &'static str, Need)]>);

impl Rights {
    /// The right `method path` needs; an unknown one needs an instance admin.
    pub fn of(&self, method: &Method, path: &str) -> Need {
        self.0
            .iter()
            .find(|(m, p, _)| m == method && *p == path)
            .map_or(Need::Instance, |(_, _, n)| *n)
    }
}

/// The session's token, as the UI's check left it in the request.
impl actix_web::FromRequest for Secret {
    type Error = UiError;
    type Future = std::future::Ready<Result<Self, UiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        use actix_web::HttpMessage as _;
        std::future::ready(Ok(req
            .extensions()
            .get::<Secret>()
            .cloned()
            .unwrap_or(Secret(None))))
    }
}

/// Who a page is drawn for: the caller, the namespaces it sees, the one the page is in.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub caller: Caller,
    /// The namespaces the caller has a role in (every one for an instance admin).
    pub namespaces: Vec<String>,
    /// The namespace the page is in: the path's, the `namespace` query parameter, else
    /// `default` when the caller sees it, else the first it sees.
    pub ns: Option<String>,
    /// Whether the server runs without tokens (`--no-auth`): no sign-out.
    pub open: bool,
    /// The path of the page, for the navigation's current item.
    pub path: String,
    /// What each page and action needs.
    pub rights: Rights,
}

impl Ctx {
    /// Whether the caller may do what `method path` (a row of the UI's table) needs, in
    /// namespace `ns`.
    pub fn may(&self, method: Method, path: &str, ns: Option<&str>) -> bool {
        let need = self.rights.of(&method, path);
        matches!(decide(need, &self.caller.grants, ns), Decision::Allow)
    }

    /// Whether the caller is an instance admin.
    pub fn instance_admin(&self) -> bool {
        self.caller.grants.instance_admin
    }

    /// Whether the caller may do what needs `need` in namespace `ns`.
    pub fn allows(&self, need: Need, ns: Option<&str>) -> bool {
        matches!(decide(need, &self.caller.grants, ns), Decision::Allow)
    }
}

impl FromRequest for Ctx {
    type Error = UiError;
    type Future = futures_util::future::LocalBoxFuture<'static, Result<Self, UiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let caller = req
                .extensions()
                .get::<Caller>()
                .cloned()
                .ok_or(ApiError::Unauthorized)?;
            let state = req
                .app_data::<web::Data<AppState>>()
                .ok_or_else(|| ApiError::Unavailable("the server is starting".into()))?;
            let mut namespaces: Vec<String> =
                crate::service::namespaces::list(&state.store, &caller.grants)
                    .await
                    .map_err(ApiError::from)?
                    .into_iter()
                    .map(|n| n.name)
                    .collect();
            namespaces.sort();
            let asked = crate::api::guard::namespace_of(&req).filter(|n| !n.is_empty());
            let ns = asked.or_else(|| {
                namespaces
                    .iter()
                    .find(|n| n.as_str() == "default")
                    .or(namespaces.first())
                    .cloned()
            });
            let rights = req
                .app_data::<web::Data<Rights>>()
                .map(|r| r.get_ref().clone())
                .unwrap_or_else(|| Rights(std::sync::Arc::from(Vec::new())));
            Ok(Ctx {
                caller,
                namespaces,
                ns,
                open: matches!(state.access, Access::Open),
                path: req.path().to_string(),
                rights,
            })
        })
    }
}

/// An error a page or action answers: a page saying what went wrong, with the API's status
/// code; for an htmx request, a notice shown in the page's message area.
#[derive(Debug)]
pub struct UiError(pub ApiError);

impl<E: Into<ApiError>> From<E> for UiError {
    fn from(e: E) -> Self {
        UiError(e.into())
    }
}

impl std::fmt::Display for UiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl ResponseError for UiError {
    fn status_code(&self) -> StatusCode {
        self.0.status()
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        let title = status.canonical_reason().unwrap_or("Error");
        HttpResponse::build(status)
            .content_type("text/html; charset=utf-8")
            .body(
                bare(
                    title,
                    html! {
                        h1 { (status.as_u16()) " " (title) }
                        p.notice.bad role="alert" { (self.0.to_string()) }
                        p { a href="/ui" { "Back to the overview" } }
                    },
                )
                .into_string(),
            )
    }
}

/// What a page or action answers.
pub type Answer = Result<HttpResponse, UiError>;

/// Whether `req` was sent by htmx (a part of a page, not a whole one).
pub fn htmx(req: &HttpRequest) -> bool {
    req.headers().contains_key("hx-request")
}

/// A notice for the page's message area (`#notice`), answered to an htmx action: what it did,
/// or why it was refused, with the status the API would answer. An action that names
/// `#notice` as its target gets it there; any other is sent there (`HX-Retarget`).
pub fn notice(req: &HttpRequest, status: StatusCode, text: &str) -> HttpResponse {
    let class = if status.is_success() { "good" } else { "bad" };
    let mut answer = HttpResponse::build(status);
    answer.content_type("text/html; charset=utf-8");
    // The element that sent the request may be gone by now (a live panel redrawn), and a
    // retarget is looked up from it: only ask for one when the target is another element.
    let targeted = req
        .headers()
        .get("hx-target")
        .is_some_and(|t| t.as_bytes() == b"notice");
    if !targeted {
        answer
            .insert_header(("HX-Retarget", "#notice"))
            .insert_header(("HX-Reswap", "innerHTML"));
    }
    answer.body(
        html! { p.notice.(class) role=(if status.is_success() { "status" } else { "alert" }) { (text) } }
            .into_string(),
    )
}

/// An error answered to an htmx action as a notice; any other error as a page.
pub fn refused(req: &HttpRequest, e: impl Into<ApiError>) -> Answer {
    let e: ApiError = e.into();
    if htmx(req) {
        Ok(notice(req, e.status(), &e.to_string()))
    } else {
        Err(UiError(e))
    }
}

/// A part of a page, answered to htmx.
pub fn fragment(markup: Markup) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .body(markup.into_string())
}

/// Sends the browser to `to` (for htmx, through `HX-Redirect`).
pub fn redirect(req: &HttpRequest, to: &str) -> HttpResponse {
    if htmx(req) {
        HttpResponse::Ok()
            .insert_header(("HX-Redirect", to))
            .finish()
    } else {
        HttpResponse::SeeOther()
            .insert_header((actix_web::http::header::LOCATION, to))
            .finish()
    }
}

/// The `<head>` of every page.
fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta name="color-scheme" content="light dark";
            // htmx swaps refusals (4xx) too: they are notices to show. Inline scripts and
            // eval stay off. New content is made live as it is swapped in: with htmx's
            // default 20 ms settle delay, a click on a button of a panel just redrawn (a
            // run's status, redrawn on every event) did nothing.
            meta name="htmx-config" content=r#"{"responseHandling":[{"code":"204","swap":false},{"code":"[23]..","swap":true},{"code":"[45]..","swap":true,"error":true}],"allowEval":false,"includeIndicatorStyles":false,"defaultSettleDelay":0}"#;
            title { (title) " · ebb" }
            link rel="icon" href="data:,";
            link rel="stylesheet" href=(super::assets::href("ebb.css"));
            script src=(super::assets::href("htmx.min.js")) defer {}
            script src=(super::assets::href("htmx-sse.min.js")) defer {}
            script src=(super::assets::href("ebb.js")) defer {}
        }
    }
}

/// A page without navigation (sign-in, errors).
pub fn bare(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body.bare {
                main #main { (body) }
            }
        }
    }
}

/// The navigation: (label, path, whether the caller sees it).
fn nav(ctx: &Ctx) -> Vec<(&'static str, String)> {
    let ns = ctx.ns.clone().unwrap_or_else(|| "default".into());
    let mut items = vec![
        ("Overview", "/ui".to_string()),
        ("Runs", "/ui/runs".to_string()),
        ("Apps", format!("/ui/ns/{ns}/apps")),
        ("Profiles", "/ui/profiles".to_string()),
        ("Templates", "/ui/templates".to_string()),
        ("Secure keys", format!("/ui/ns/{ns}/securekeys")),
        ("Namespaces", "/ui/namespaces".to_string()),
        ("Usage", "/ui/usage".to_string()),
    ];
    if ctx.instance_admin() {
        items.push(("Janitor", "/ui/janitor".to_string()));
        items.push(("Plugins", "/ui/plugins".to_string()));
    }
    items
}

/// Whether navigation item `href` is the section `path` is in: the last section word of the
/// path (a run's page, under its app, is in Runs).
fn current(href: &str, path: &str) -> bool {
    if href == "/ui" {
        return path == "/ui";
    }
    const SECTIONS: &[&str] = &[
        "runs",
        "apps",
        "profiles",
        "templates",
        "securekeys",
        "namespaces",
        "usage",
        "janitor",
        "plugins",
    ];
    let section = path.split('/').rev().find(|s| SECTIONS.contains(s));
    section.is_some_and(|s| href.rsplit('/').next() == Some(s))
}

/// A whole page: the frame around `body`, titled `title`.
pub fn frame(ctx: &Ctx, title: &str, body: Markup) -> HttpResponse {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/ui" { "ebb" }
                    nav aria-label="Sections" {
                        ul {
                            @for (label, href) in nav(ctx) {
                                li {
                                    @if current(&href, &ctx.path) {
                                        a href=(href) aria-current="page" { (label) }
                                    } @else {
                                        a href=(href) { (label) }
                                    }
                                }
                            }
                        }
                    }
                    div.who {
                        @if ctx.namespaces.len() > 1 {
                            form.nspick method="get" action="/ui/runs" {
                                label for="nspick" { "Namespace" }
                                select #nspick name="namespace" data-navigate="namespace" {
                                    @for n in &ctx.namespaces {
                                        option value=(n) selected[ctx.ns.as_deref() == Some(n.as_str())] { (n) }
                                    }
                                }
                                noscript { button type="submit" { "Go" } }
                            }
                        }
                        span.caller title="The token you signed in with" { (ctx.caller.name) }
                        @if !ctx.open {
                            form method="post" action="/ui/logout" {
                                button.link type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main #main {
                    div #notice aria-live="polite" {}
                    (body)
                }
            }
        }
    };
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .body(markup.into_string())
}

/// A status as a badge whose colour says how it went.
pub fn badge(status: &str) -> Markup {
    let class = match status {
        "COMPLETED" | "PROVISIONED" | "ENABLED" | "SUCCEEDED" | "CREATED" | "SCHEDULED"
        | "STARTED" => "ok",
        "FAILED" | "REJECTED" | "ORPHANED" | "TIMED_OUT" | "ROLLED_BACK" => "bad",
        "RUNNING" | "STARTING" | "PENDING" | "PROVISIONING" | "DEPROVISIONING"
        | "POLLING_CREATE" | "POLLING_DELETE" | "REQUESTING_CREATE" | "REQUESTING_DELETE" => "live",
        "QUEUED" | "WAITING" | "IDLE" | "KILLED" | "DISABLED" | "SUSPENDED" | "SKIPPED" => "wait",
        _ => "done",
    };
    html! { span.badge.(class) { (status) } }
}

/// A time (epoch seconds): shown in UTC, and in the browser's zone once its script runs.
pub fn time(secs: u64) -> Markup {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    let iso = humantime::format_rfc3339_seconds(at).to_string();
    html! { time datetime=(iso) data-t=(secs) { (iso.replace('T', " ").replace('Z', " UTC")) } }
}

/// A deadline (epoch seconds): "in 2h 14m", kept current by the page's script, with the time
/// itself as a tooltip.
pub fn deadline(secs: u64) -> Markup {
    let now = crate::store::clock::now_secs();
    let text = if secs > now {
        format!("in {}", span(secs - now))
    } else {
        format!("{} ago", span(now - secs))
    };
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    let iso = humantime::format_rfc3339_seconds(at).to_string();
    html! { time.deadline datetime=(iso) data-deadline=(secs) title=(iso) { (text) } }
}

/// A span of seconds as a person says it: "2h 14m", "3d 4h", "45s".
pub fn span(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m"),
        _ => format!("{d}d {h}h"),
    }
}

/// The UI path of run `key`.
pub fn run_href(key: &RunKey) -> String {
    format!(
        "/ui/ns/{}/apps/{}/{}/runs/{}",
        key.namespace, key.app, key.program, key.run
    )
}

/// A definition list of `pairs`.
pub fn facts(pairs: &[(&str, Markup)]) -> Markup {
    html! {
        dl.facts {
            @for (k, v) in pairs {
                div { dt { (k) } dd { (v) } }
            }
        }
    }
}

/// A table of key/values, or "none" when there are none.
pub fn values(values: &BTreeMap<String, String>) -> Markup {
    html! {
        @if values.is_empty() {
            p.muted { "None." }
        } @else {
            table {
                thead { tr { th scope="col" { "Name" } th scope="col" { "Value" } } }
                tbody {
                    @for (k, v) in values {
                        tr { td { code { (k) } } td { code { (v) } } }
                    }
                }
            }
        }
    }
}

/// The answer of a service call a page needs, or the page saying why not.
pub fn need<T>(r: Result<T, ServiceError>) -> Result<T, UiError> {
    r.map_err(|e| UiError(ApiError::from(e)))
}

/// Where a value came from, as a person reads it: "runtime arguments", "the profile".
pub fn origin(o: &crate::model::property::Origin) -> String {
    use crate::model::property::Origin;
    match o {
        Origin::Default => "the instance default".into(),
        Origin::Profile => "the profile".into(),
        Origin::Level(level) => level.to_string(),
        Origin::Schedule(name) => format!("schedule {name}"),
    }
}

/// `s` percent-encoded for a URL's query (`/` kept, as a path in a parameter reads better).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
