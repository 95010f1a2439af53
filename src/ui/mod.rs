//! The web UI: server-rendered pages under `/ui`, on the same services, tokens and rights as
//! the REST API.
//!
//! A page is HTML written with [`maud`] (checked and escaped at compile time); the live parts
//! (run lists that update, a run's events as they happen, its output tailing, buttons that act
//! without a reload) use htmx, vendored in [`assets`] and served from the binary. There is no
//! JavaScript build step.
//!
//! Sign-in takes a token and keeps it in an `HttpOnly`, `SameSite=Strict` cookie
//! ([`session`]); every page is a row of [`table`] with the right it needs, checked by
//! [`session::check`] exactly as [`guard`](crate::api::guard) checks the API's rows. A page
//! shows only the buttons its caller may use ([`layout::Ctx::may`]).
//!
//! - [`overview`], [`runs`] (with [`timeline`]), [`profiles`] (with [`widgets`]), [`apps`]
//!   (with [`schedules`]), [`templates`], [`admin`] (secure keys, janitor, namespaces): the
//!   pages;
//! - [`layout`]: the page frame and the pieces pages share; [`assets`]: the static files.

pub mod admin;
pub mod apps;
pub mod assets;
pub mod chart;
pub mod events;
pub mod layout;
pub mod overview;
pub mod profiles;
pub mod runs;
pub mod schedules;
pub mod session;
pub mod templates;
pub mod timeline;
pub mod usage;
pub mod widgets;

use std::sync::Arc;

use actix_web::http::Method;
use actix_web::{HttpResponse, web};

use crate::model::access::{Need, Role};

use crate::api::route::Route;

const VIEW: Need = Need::Namespace(Role::Viewer);
const OPERATE: Need = Need::Namespace(Role::Operator);
const ADMIN: Need = Need::Namespace(Role::Admin);
const INSTANCE: Need = Need::Instance;
const TOKEN: Need = Need::Token;
const PUBLIC: Need = Need::Public;

/// The path of a run in the UI.
macro_rules! run {
    ($tail:literal) => {
        concat!("/ns/{ns}/apps/{app}/{program}/runs/{run}", $tail)
    };
}

/// Every page and action of the UI, in the order the router tries them.
pub fn table() -> Vec<Route> {
    let row = Route::new;
    use Method as M;
    vec![
        row(M::GET, "/assets/{file}", PUBLIC, || {
            web::get().to(assets::serve)
        }),
        row(M::GET, "/login", PUBLIC, || {
            web::get().to(session::login_page)
        }),
        row(M::POST, "/login", PUBLIC, || web::post().to(session::login)),
        row(M::POST, "/logout", PUBLIC, || {
            web::post().to(session::logout)
        }),
        row(M::GET, "", TOKEN, || web::get().to(overview::page)),
        row(M::GET, "/runs", TOKEN, || web::get().to(runs::list)),
        row(M::GET, "/runs/rows", TOKEN, || web::get().to(runs::rows)),
        row(M::GET, run!(""), VIEW, || web::get().to(runs::page)),
        row(M::GET, run!("/status"), VIEW, || {
            web::get().to(runs::status)
        }),
        row(M::GET, run!("/events"), VIEW, || {
            web::get().to(events::events)
        }),
        row(M::GET, run!("/logs"), VIEW, || web::get().to(runs::logs)),
        // Read where the run's nodes are: on the owner's host for local ones.
        row(M::GET, run!("/services/{service}/logs"), VIEW, || {
            web::get().to(runs::service_logs)
        })
        .owned(),
        row(M::GET, run!("/operations"), VIEW, || {
            web::get().to(runs::operations)
        }),
        row(M::POST, run!("/stop"), OPERATE, || {
            web::post().to(runs::stop)
        })
        .owned(),
        row(M::POST, run!("/deprovision"), OPERATE, || {
            web::post().to(runs::deprovision)
        })
        .owned(),
        row(M::POST, run!("/extend"), OPERATE, || {
            web::post().to(runs::extend)
        })
        .owned(),
        row(M::POST, run!("/cluster"), OPERATE, || {
            web::post().to(runs::cluster)
        })
        .owned(),
        row(M::POST, run!("/operations/{op}/cancel"), OPERATE, || {
            web::post().to(runs::cancel_operation)
        })
        .owned(),
        row(M::GET, "/profiles", TOKEN, || web::get().to(profiles::list)),
        row(M::GET, "/profiles/new", TOKEN, || {
            web::get().to(profiles::new)
        }),
        // SYSTEM profiles: every token reads them; instance admins change them.
        row(M::POST, "/system/profiles", INSTANCE, || {
            web::post().to(profiles::create)
        }),
        row(M::GET, "/system/profiles/{name}", TOKEN, || {
            web::get().to(profiles::page)
        }),
        row(M::GET, "/system/profiles/{name}/edit", INSTANCE, || {
            web::get().to(profiles::edit)
        }),
        row(M::POST, "/system/profiles/{name}", INSTANCE, || {
            web::post().to(profiles::save)
        }),
        row(M::POST, "/system/profiles/{name}/status", INSTANCE, || {
            web::post().to(profiles::set_status)
        }),
        row(M::POST, "/ns/{ns}/profiles", ADMIN, || {
            web::post().to(profiles::create)
        }),
        row(M::GET, "/ns/{ns}/profiles/{name}", VIEW, || {
            web::get().to(profiles::page)
        }),
        row(M::GET, "/ns/{ns}/profiles/{name}/edit", ADMIN, || {
            web::get().to(profiles::edit)
        }),
        row(M::POST, "/ns/{ns}/profiles/{name}", ADMIN, || {
            web::post().to(profiles::save)
        }),
        row(M::POST, "/ns/{ns}/profiles/{name}/status", ADMIN, || {
            web::post().to(profiles::set_status)
        }),
        row(M::GET, "/ns/{ns}/apps", VIEW, || web::get().to(apps::list)),
        row(M::POST, "/ns/{ns}/apps", ADMIN, || {
            web::post().to(apps::deploy)
        }),
        row(M::GET, "/ns/{ns}/apps/{app}/{program}", VIEW, || {
            web::get().to(apps::program)
        }),
        row(
            M::POST,
            "/ns/{ns}/apps/{app}/{program}/preview",
            VIEW,
            || web::post().to(apps::preview),
        ),
        row(
            M::POST,
            "/ns/{ns}/apps/{app}/{program}/start",
            OPERATE,
            || web::post().to(apps::start),
        ),
        row(
            M::POST,
            "/ns/{ns}/apps/{app}/{program}/schedules",
            ADMIN,
            || web::post().to(schedules::create),
        ),
        row(
            M::POST,
            "/ns/{ns}/apps/{app}/{program}/schedules/preview",
            VIEW,
            || web::post().to(schedules::preview),
        ),
        row(
            M::POST,
            "/ns/{ns}/apps/{app}/schedules/{name}/status",
            OPERATE,
            || web::post().to(schedules::set_status),
        ),
        row(M::GET, "/templates", TOKEN, || {
            web::get().to(templates::list)
        }),
        row(M::GET, "/system/templates/{name}", TOKEN, || {
            web::get().to(templates::page)
        }),
        row(M::GET, "/ns/{ns}/templates/{name}", VIEW, || {
            web::get().to(templates::page)
        }),
        row(M::POST, "/ns/{ns}/plan", VIEW, || {
            web::post().to(templates::plan)
        }),
        row(M::GET, "/ns/{ns}/securekeys", VIEW, || {
            web::get().to(admin::secure_keys)
        }),
        row(M::POST, "/ns/{ns}/securekeys", ADMIN, || {
            web::post().to(admin::put_secure_key)
        }),
        row(M::POST, "/ns/{ns}/securekeys/{name}/delete", ADMIN, || {
            web::post().to(admin::delete_secure_key)
        }),
        row(M::GET, "/namespaces", TOKEN, || {
            web::get().to(admin::namespaces)
        }),
        row(M::POST, "/namespaces", INSTANCE, || {
            web::post().to(admin::create_namespace)
        }),
        // Every token: a namespace's usage to its viewers, every one's to instance admins.
        row(M::GET, "/usage", TOKEN, || web::get().to(usage::page)),
        row(M::GET, "/janitor", INSTANCE, || {
            web::get().to(admin::janitor)
        }),
        row(M::POST, "/janitor/run", INSTANCE, || {
            web::post().to(admin::run_janitor)
        }),
        row(M::GET, "/plugins", INSTANCE, || {
            web::get().to(admin::plugins)
        }),
    ]
}

/// Registers the UI under `/ui`: one resource per path of [`table`], each checking its rows'
/// rights before any handler runs; `/` leads to `/ui`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    let table = table();
    let rights: Arc<[(Method, &'static str, Need)]> = table
        .iter()
        .map(|p| (p.method.clone(), p.path, p.need))
        .collect();
    let mut scope = web::scope("/ui").app_data(web::Data::new(layout::Rights(rights)));
    for (path, rows, needs) in crate::api::route::by_path(&table) {
        let mut resource = web::resource(path);
        for row in &rows {
            resource = resource.route((row.to)());
        }
        let guard = actix_web::middleware::from_fn(move |req, next| {
            session::check(Arc::clone(&needs), req, next)
        });
        let owned = crate::api::route::owner_bound(&rows);
        let owner_bound = actix_web::middleware::from_fn(move |req, next| {
            crate::api::forward::owner_bound(Arc::clone(&owned), req, next)
        });
        // As the API's: the session is checked before a command goes to its run's owner.
        scope = scope.service(resource.wrap(owner_bound).wrap(guard));
    }
    // A path the UI does not have: a page saying so, with the navigation, for whoever is
    // signed in.
    let signed_in: crate::api::route::Needs = [Method::GET, Method::HEAD, Method::POST]
        .into_iter()
        .map(|m| (m, TOKEN))
        .collect();
    let guard = actix_web::middleware::from_fn(move |req, next| {
        session::check(Arc::clone(&signed_in), req, next)
    });
    let scope = scope.default_service(web::to(not_found).wrap(guard));
    cfg.service(web::resource("/").get(to_ui))
        .service(web::resource("/ui/").get(to_ui))
        .service(scope.wrap(headers()));
}

/// The page for a path the UI does not have.
async fn not_found(ctx: layout::Ctx) -> actix_web::HttpResponse {
    let path = ctx.path.clone();
    let mut page = layout::frame(
        &ctx,
        "Not found",
        maud::html! {
            h1 { "Not found" }
            p.notice.bad role="alert" { "There is no page at " code { (path) } "." }
            p { a href="/ui" { "Back to the overview" } }
        },
    );
    *page.status_mut() = actix_web::http::StatusCode::NOT_FOUND;
    page
}

/// What every answer of the UI tells the browser: run only the UI's own scripts and styles
/// (style attributes are the timelines' bar positions), never inside another site's frame,
/// send no referrer elsewhere, sniff no types.
fn headers() -> actix_web::middleware::DefaultHeaders {
    actix_web::middleware::DefaultHeaders::new()
        .add((
            "Content-Security-Policy",
            "default-src 'self'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        ))
        .add(("X-Frame-Options", "DENY"))
        .add(("Referrer-Policy", "same-origin"))
        .add(("X-Content-Type-Options", "nosniff"))
}

/// `/` and `/ui/`: the overview.
async fn to_ui() -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((actix_web::http::header::LOCATION, "/ui"))
        .finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the sign-in pages and the static files are public; every action that changes
    /// something needs more than a viewer (the dry runs, the previews and plan, change
    /// nothing).
    #[test]
    fn every_page_needs_a_session_and_every_change_a_role_that_may_make_it() {
        let dry = [
            "/ns/{ns}/apps/{app}/{program}/preview",
            "/ns/{ns}/apps/{app}/{program}/schedules/preview",
            "/ns/{ns}/plan",
        ];
        for page in table() {
            let open = ["/assets/{file}", "/login", "/logout"].contains(&page.path);
            assert_eq!(
                page.need == Need::Public,
                open,
                "{} {}",
                page.method,
                page.path
            );
            if page.method == Method::POST && !open && !dry.contains(&page.path) {
                assert!(
                    matches!(
                        page.need,
                        Need::Instance | Need::Namespace(Role::Operator | Role::Admin)
                    ),
                    "{} {} needs only {:?}",
                    page.method,
                    page.path,
                    page.need
                );
            }
        }
        // Each method and path is one row.
        let rows = table();
        for (i, a) in rows.iter().enumerate() {
            for b in &rows[i + 1..] {
                assert!(
                    !(a.method == b.method && a.path == b.path),
                    "{} {} twice",
                    a.method,
                    a.path
                );
            }
        }
    }
}
