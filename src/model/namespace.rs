//! Namespaces: the tenant boundary. `default` always exists; `system` is reserved for SYSTEM
//! profiles and never exists as a namespace.

use serde::{Deserialize, Serialize};

use crate::model::invalid::Invalid;
use crate::model::names;

/// The namespace that always exists.
pub const DEFAULT: &str = "default";

/// A namespace as the API returns it and the store keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Namespace {
    pub name: String,
    pub description: String,
    /// When it was created, in epoch seconds.
    pub created: u64,
}

/// The body of `PUT /v3/namespaces/{ns}`; it may be left out.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceSpec {
    #[serde(default)]
    pub description: Option<String>,
}

/// Checks a namespace name taken from a path or body (400 naming `namespace` if bad). The
/// reserved name `system` passes here: it is refused on create and simply never exists.
pub fn check_name(name: &str) -> Result<(), Invalid> {
    names::check("namespace", name)
}
