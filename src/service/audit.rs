//! The audit log of changes, as the API lists it: a namespace's, or the instance-wide ones.
//! Who may read which is the guard's (an admin of the namespace; an instance admin).

use crate::model::access::AuditEntry;
use crate::model::namespace;
use crate::service::error::ServiceError;
use crate::store::{Store, changes};

/// Entries a page shows when it does not say.
pub const DEFAULT_LIMIT: usize = 100;
/// The most entries one page shows.
pub const MAX_LIMIT: usize = 1_000;

/// Which changes to list (the query of `GET /v3/audit`).
#[derive(Debug, Clone, Default, serde::Deserialize, schemars::JsonSchema)]
pub struct AuditQuery {
    /// A namespace's changes; left out, the instance-wide ones.
    #[serde(default)]
    #[schemars(schema_with = "crate::model::names::schema")]
    pub namespace: Option<String>,
    /// None older than this (epoch seconds).
    #[schemars(range(min = 0.0))]
    pub since: Option<f64>,
    /// Only entries older than this one: the `next` of the page before.
    pub before: Option<u64>,
    /// At most this many entries (100 when left out).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<usize>,
}

/// Records `act` alone: for what changes no record of the store's own (a sweep asked for, a
/// drain).
pub async fn record(store: &Store, act: crate::model::access::Act) -> Result<(), ServiceError> {
    Ok(store.write(move |tx| changes::record(tx, &act)).await?)
}

/// A page of changes, newest first, and the `before` of the next page.
pub async fn list(
    store: &Store,
    query: AuditQuery,
) -> Result<(Vec<AuditEntry>, Option<u64>), ServiceError> {
    if let Some(ns) = &query.namespace {
        namespace::check_name(ns)?;
    }
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ServiceError::invalid(
            "limit",
            format!("must be 1 to {MAX_LIMIT}"),
        ));
    }
    let since = query.since.unwrap_or(0.0);
    if !since.is_finite() || since < 0.0 {
        return Err(ServiceError::invalid("since", "must be epoch seconds"));
    }
    Ok(store
        .read(move |r| changes::list(r, query.namespace.as_deref(), since, query.before, limit))
        .await?)
}
