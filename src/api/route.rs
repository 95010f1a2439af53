//! One row of a route table (the API's, [`routes`](crate::api::routes), and the web UI's,
//! [`ui`](crate::api::ui)): a method on a path, the right it needs and its handler; and how
//! rows become resources, each checking its rows' rights before any handler runs.

use std::sync::Arc;

use actix_web::http::Method;

use crate::model::access::Need;

/// One row of a table: a method on a path (relative to the table's scope: `/v3` for the
/// API, `/ui` for the UI), the right it needs and its handler.
#[derive(Debug, Clone)]
pub struct Route {
    pub method: Method,
    pub path: &'static str,
    pub need: Need,
    pub to: fn() -> actix_web::Route,
}

/// Paths served at the root rather than under `/v3`.
pub const ROOT_PATHS: &[&str] = &["/metrics"];

impl Route {
    /// A row: `method` on `path` needs `need` and is answered by `to`.
    pub fn new(
        method: Method,
        path: &'static str,
        need: Need,
        to: fn() -> actix_web::Route,
    ) -> Route {
        Route {
            method,
            path,
            need,
            to,
        }
    }

    /// The route's whole path: under `/v3`, but for the few served at the root.
    pub fn url(&self) -> String {
        if ROOT_PATHS.contains(&self.path) {
            self.path.to_string()
        } else {
            format!("/v3{}", self.path)
        }
    }
}

/// What each method of one path needs.
pub type Needs = Arc<[(Method, Need)]>;

/// The rows of `table` by path, in the table's order: each path with its rows and what each
/// of their methods needs.
pub fn by_path(table: &[Route]) -> Vec<(&'static str, Vec<&Route>, Needs)> {
    let mut paths: Vec<&'static str> = Vec::new();
    for route in table {
        if !paths.contains(&route.path) {
            paths.push(route.path);
        }
    }
    paths
        .into_iter()
        .map(|path| {
            let rows: Vec<&Route> = table.iter().filter(|r| r.path == path).collect();
            let needs: Needs = rows.iter().map(|r| (r.method.clone(), r.need)).collect();
            (path, rows, needs)
        })
        .collect()
}

/// What a request with `method` to a resource whose methods need `needs` needs of its caller:
/// `None` when it needs no caller at all (a public route, or a method the resource does not
/// have, which goes on to its 405).
pub fn caller_needed(needs: &Needs, method: &Method) -> Option<Need> {
    needs
        .iter()
        .find(|(m, _)| m == method)
        .map(|(_, n)| *n)
        .filter(|n| *n != Need::Public)
}
