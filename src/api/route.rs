//! One row of a route table (the API's, [`routes`](crate::api::routes), and the web UI's,
//! [`ui`](crate::ui)): a method on a path, the right it needs and its handler; and how
//! rows become resources, each checking its rows' rights before any handler runs.

use std::sync::Arc;

use actix_web::http::Method;
use actix_web::{FromRequest, Handler, Responder, web};

use crate::api::contract::{Generators, Gives, Parts, Takes};
use crate::model::access::Need;

/// One row of a table: a method on a path (relative to the table's scope: `/v3` for the
/// API, `/ui` for the UI), the right it needs, its handler, and (for the API) what the
/// handler's types say it takes and answers.
#[derive(Clone)]
pub struct Route {
    pub method: Method,
    pub path: &'static str,
    pub need: Need,
    pub to: Arc<dyn Fn() -> actix_web::Route + Send + Sync>,
    pub doc: Option<Doc>,
    /// A command for a run, which the run's owner carries out: another server sends it there
    /// before its handler runs ([`forward::owner_bound`](crate::api::forward::owner_bound)).
    pub owner_bound: bool,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} ({:?})", self.method, self.path, self.need)
    }
}

/// What a handler's argument and return types describe of its operation.
#[derive(Debug, Clone, Copy)]
pub struct Doc {
    pub takes: fn(&mut Parts, &mut Generators),
    pub gives: fn(&mut Parts, &mut Generators),
}

impl Doc {
    /// The parts of the operation, their schemas made by `generators`.
    pub fn parts(&self, generators: &mut Generators) -> Parts {
        let mut parts = Parts::default();
        (self.takes)(&mut parts, generators);
        (self.gives)(&mut parts, generators);
        parts
    }
}

/// Paths served at the root rather than under `/v3`.
pub const ROOT_PATHS: &[&str] = &["/metrics"];

impl Route {
    /// A row: `method` on `path` needs `need` and is answered by `to` (a page, which the
    /// API's document does not describe).
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
            to: Arc::new(to),
            doc: None,
            owner_bound: false,
        }
    }

    /// A row of the API: `method` on `path` needs `need` and is answered by `handler`, whose
    /// argument and return types describe the operation in the document.
    pub fn api<F, Args>(method: Method, path: &'static str, need: Need, handler: F) -> Route
    where
        F: Handler<Args> + Send + Sync,
        Args: FromRequest + Takes + 'static,
        F::Output: Responder + Gives + 'static,
    {
        let on = method.clone();
        Route {
            method,
            path,
            need,
            to: Arc::new(move || web::method(on.clone()).to(handler.clone())),
            doc: Some(Doc {
                takes: <Args as Takes>::describe,
                gives: <F::Output as Gives>::describe,
            }),
            owner_bound: false,
        }
    }

    /// The row is a command for the run its path names (`{ns}`, `{app}`, `{program}`,
    /// `{run}`): the run's owner answers it, wherever the request arrives.
    pub fn owned(mut self) -> Route {
        self.owner_bound = true;
        self
    }

    /// The names of the query parameters the route's handler takes.
    pub fn query_names(&self) -> Vec<String> {
        let Some(doc) = self.doc else {
            return Vec::new();
        };
        // Only the arguments: the answer's schemas are not needed here.
        let mut parts = Parts::default();
        (doc.takes)(&mut parts, &mut Generators::default());
        parts
            .query
            .iter()
            .filter_map(|p| p["name"].as_str().map(str::to_string))
            .collect()
    }

    /// The route's whole path as documented (`{type}`, not the pattern it must match): under
    /// `/v3`, but for the few served at the root.
    pub fn url(&self) -> String {
        if ROOT_PATHS.contains(&self.path) {
            crate::api::pattern::shown(self.path)
        } else {
            format!("/v3{}", crate::api::pattern::shown(self.path))
        }
    }
}

/// What each method of one path needs.
pub type Needs = Arc<[(Method, Need)]>;

/// The methods of `rows` that are owner-bound: a resource's
/// [`forward::owner_bound`](crate::api::forward::owner_bound) middleware takes them.
pub fn owner_bound(rows: &[&Route]) -> Arc<[Method]> {
    rows.iter()
        .filter(|r| r.owner_bound)
        .map(|r| r.method.clone())
        .collect()
}

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
