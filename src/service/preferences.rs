//! Preferences: string key/values set at the instance, a namespace, an app or a program.
//!
//! Together with an app's configuration and a run's arguments they form the hierarchy that
//! `rules::resolve` reads. Setting `system.profile.name` checks that the profile exists and
//! is enabled (and is a SYSTEM profile at instance level); setting a
//! `system.profile.properties.*` key checks its shape. `PUT` replaces a scope's whole map.

use crate::model::access::Act;
use crate::model::namespace;
use crate::model::preference::{Scope, check_keys};
use crate::model::property::{Level, Values};
use crate::rules::resolve;
use crate::service::catalog;
use crate::service::error::ServiceError;
use crate::store::{Store, Table, changes};

/// The preferences set at `scope`; with `resolved`, merged with every scope above it.
pub async fn get(store: &Store, scope: Scope, resolved: bool) -> Result<Values, ServiceError> {
    store
        .read(move |r| {
            catalog::require_scope(r, &scope)?;
            if !resolved {
                return catalog::preferences(r, &scope);
            }
            let lineage = scope.lineage();
            let maps = lineage
                .iter()
                .map(|s| catalog::preferences(r, s).map(|v| (s.level(), v)))
                .collect::<Result<Vec<_>, _>>()?;
            let levels: Vec<(Level, &Values)> = maps.iter().map(|(l, v)| (*l, v)).collect();
            Ok(resolve::merge(&levels))
        })
        .await
}

/// Replaces the preferences at `scope` with `values`, after checking them.
pub async fn put(
    store: &Store,
    act: Act,
    scope: Scope,
    values: Values,
) -> Result<Values, ServiceError> {
    check_keys(&values)?;
    store
        .write(move |tx| {
            catalog::require_scope(tx, &scope)?;
            let namespace = scope.namespace().unwrap_or(namespace::DEFAULT);
            catalog::check_profile_assignment(tx, namespace, scope.level(), &values)?;
            if values.is_empty() {
                tx.delete(Table::Preferences, &scope.key());
            } else {
                tx.put(Table::Preferences, &scope.key(), &values)?;
            }
            changes::record(tx, &act)?;
            Ok(values.clone())
        })
        .await
}

/// Removes every preference at `scope`.
pub async fn delete(store: &Store, act: Act, scope: Scope) -> Result<(), ServiceError> {
    store
        .write(move |tx| {
            catalog::require_scope(tx, &scope)?;
            tx.delete(Table::Preferences, &scope.key());
            changes::record(tx, &act)?;
            Ok(())
        })
        .await
}

#[cfg(test)]
mod tests {}
