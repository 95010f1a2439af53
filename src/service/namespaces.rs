//! Namespaces: the tenant boundary. `default` always exists; `system` is reserved for SYSTEM
//! profiles and cannot be created.
//!
//! Deleting a namespace is refused while it holds profiles, and removes its preferences.

use crate::model::access::{Act, Grants};
use crate::model::namespace::{self, DEFAULT, Namespace, NamespaceSpec, NamespaceView};
use crate::model::profile::SYSTEM_NAMESPACE;
use crate::service::catalog;
use crate::service::error::ServiceError;
use crate::store::clock::now_secs;
use crate::store::keys;
use crate::store::{Read, Store, Table, changes};

/// Creates `default` if it is missing. Run at start-up.
pub async fn ensure_default(store: &Store) -> Result<(), ServiceError> {
    store
        .write(|tx| {
            if tx.get::<Namespace>(Table::Namespaces, DEFAULT)?.is_none() {
                let ns = new(DEFAULT, "The default namespace".into());
                tx.put(Table::Namespaces, DEFAULT, &ns)?;
            }
            Ok::<_, ServiceError>(())
        })
        .await
}

/// A namespace made now, with no quota.
fn new(name: &str, description: String) -> Namespace {
    Namespace {
        name: name.to_string(),
        description,
        created: now_secs(),
        quota: Default::default(),
        allow_host_programs: false,
        queue: Default::default(),
        budget: None,
    }
}

/// Creates namespace `name`, or changes what `spec` names of an existing one.
pub async fn put(
    store: &Store,
    act: Act,
    name: String,
    spec: NamespaceSpec,
) -> Result<Namespace, ServiceError> {
    namespace::check_name(&name)?;
    spec.check()?;
    if name == SYSTEM_NAMESPACE {
        return Err(ServiceError::invalid(
            "namespace",
            "'system' is reserved for SYSTEM profiles (under /v3/profiles)",
        ));
    }
    store
        .write(move |tx| {
            let mut ns = tx
                .get::<Namespace>(Table::Namespaces, &name)?
                .unwrap_or_else(|| new(&name, String::new()));
            spec.apply(&mut ns);
            tx.put(Table::Namespaces, &name, &ns)?;
            changes::record(tx, &act)?;
            Ok(ns)
        })
        .await
}

/// The namespaces `grants` see, by name.
pub async fn list(store: &Store, grants: &Grants) -> Result<Vec<Namespace>, ServiceError> {
    let grants = grants.clone();
    store
        .read(move |r| {
            Ok(r.scan::<Namespace>(Table::Namespaces, "")?
                .into_iter()
                .map(|(_, ns)| ns)
                .filter(|ns| grants.sees(&ns.name))
                .collect())
        })
        .await
}

/// Namespace `name`, with what its live runs hold when it has a quota.
pub async fn get(store: &Store, name: String) -> Result<NamespaceView, ServiceError> {
    namespace::check_name(&name)?;
    store
        .read(move |r| {
            let namespace = catalog::require_namespace(r, &name)?;
            let usage = match namespace.quota.limits() {
                true => Some(catalog::namespace_usage(r, &name)?),
                false => None,
            };
            let budget_used = match &namespace.budget {
                Some(budget) => {
                    let month = crate::rules::usage::month_of(now_secs());
                    let used = crate::store::usage::month_total(r, &name, &month)?;
                    Some(namespace::BudgetUse::new(month, budget, &used))
                }
                None => None,
            };
            Ok(NamespaceView {
                namespace,
                usage,
                budget_used,
            })
        })
        .await
}

/// Deletes namespace `name`, its preferences and every token's role in it; refused for
/// `default` and while it holds profiles, apps or secure keys.
pub async fn delete(store: &Store, act: Act, name: String) -> Result<Namespace, ServiceError> {
    namespace::check_name(&name)?;
    if name == DEFAULT {
        return Err(ServiceError::DefaultNamespace);
    }
    store
        .write(move |tx| {
            let ns = catalog::require_namespace(tx, &name)?;
            let profiles: Vec<String> = tx
                .scan::<serde_json::Value>(Table::Profiles, &keys::in_namespace(&name))?
                .into_iter()
                .map(|(key, _)| key[name.len() + 1..].to_string())
                .collect();
            if !profiles.is_empty() {
                return Err(ServiceError::NamespaceNotEmpty {
                    namespace: name.clone(),
                    kind: "profiles",
                    names: profiles,
                });
            }
            let apps = catalog::app_names(tx, &name)?;
            if !apps.is_empty() {
                return Err(ServiceError::NamespaceNotEmpty {
                    namespace: name.clone(),
                    kind: "apps",
                    names: apps,
                });
            }
            let keys = catalog::secure_key_names(tx, &name)?;
            if !keys.is_empty() {
                return Err(ServiceError::NamespaceNotEmpty {
                    namespace: name.clone(),
                    kind: "secure keys",
                    names: keys,
                });
            }
            catalog::delete_namespace_preferences(tx, &name)?;
            crate::service::catalog::forget_grants(tx, &name)?;
            tx.delete(Table::Namespaces, &name);
            changes::record(tx, &act)?;
            Ok(ns)
        })
        .await
}
