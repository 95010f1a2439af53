//! One row of the route table ([`routes`](crate::api::routes)): a method on a path, the
//! right it needs and its handler.

use actix_web::http::Method;

use crate::model::access::Need;

/// One row of the table: a method on a path (under `/v3`), the right it needs and its
/// handler.
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
    /// The route's whole path: under `/v3`, but for the few served at the root.
    pub fn url(&self) -> String {
        if ROOT_PATHS.contains(&self.path) {
            self.path.to_string()
        } else {
            format!("/v3{}", self.path)
        }
    }
}
