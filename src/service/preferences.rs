//! Preferences: string key/values set at the instance, a namespace, an app or a program.
//!
//! Together with an app's configuration and a run's arguments they form the hierarchy that
//! `rules::resolve` reads. Setting `system.profile.name` checks that the profile exists and
//! is enabled (and is a SYSTEM profile at instance level); setting a
//! `system.profile.properties.*` key checks its shape. `PUT` replaces a scope's whole map.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::model::profile::{ProfileId, ProfileStatus};
use crate::model::property::{Level, PROFILE_KEY, Values};
use crate::rules::resolve;
use crate::service::apps::{self, App};
use crate::service::error::ServiceError;
use crate::service::namespaces;
use crate::service::profiles::stored_profile;
use crate::store::{Read, Store, Table, Txn};

/// Longest preference key accepted.
pub const MAX_KEY_LEN: usize = 1024;

/// Where a set of preferences is attached.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    Instance,
    Namespace(String),
    App {
        namespace: String,
        app: String,
    },
    Program {
        namespace: String,
        app: String,
        program_type: String,
        program: String,
    },
}

impl Scope {
    /// The store key of this scope's preferences.
    pub fn key(&self) -> String {
        match self {
            Scope::Instance => "instance".into(),
            Scope::Namespace(ns) => format!("namespace/{ns}"),
            Scope::App { namespace, app } => format!("app/{namespace}/{app}"),
            Scope::Program {
                namespace,
                app,
                program_type,
                program,
            } => format!("program/{namespace}/{app}/{program_type}/{program}"),
        }
    }

    /// Parses a store key made by [`Scope::key`].
    pub fn from_key(key: &str) -> Option<Scope> {
        let parts: Vec<&str> = key.split('/').collect();
        match parts.as_slice() {
            ["instance"] => Some(Scope::Instance),
            ["namespace", ns] => Some(Scope::Namespace(ns.to_string())),
            ["app", ns, app] => Some(Scope::App {
                namespace: ns.to_string(),
                app: app.to_string(),
            }),
            ["program", ns, app, program_type, program] => Some(Scope::Program {
                namespace: ns.to_string(),
                app: app.to_string(),
                program_type: program_type.to_string(),
                program: program.to_string(),
            }),
            _ => None,
        }
    }

    /// The level of the resolution hierarchy this scope feeds.
    pub fn level(&self) -> Level {
        match self {
            Scope::Instance => Level::Instance,
            Scope::Namespace(_) => Level::Namespace,
            Scope::App { .. } => Level::AppPreferences,
            Scope::Program { .. } => Level::Program,
        }
    }

    /// The namespace this scope lives in; `None` for the instance.
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Scope::Instance => None,
            Scope::Namespace(ns)
            | Scope::App { namespace: ns, .. }
            | Scope::Program { namespace: ns, .. } => Some(ns),
        }
    }

    /// This scope and every scope above it, from the instance down.
    pub fn lineage(&self) -> Vec<Scope> {
        let mut out = vec![Scope::Instance];
        if let Some(ns) = self.namespace() {
            out.push(Scope::Namespace(ns.to_string()));
        }
        if let Scope::App { namespace, app } | Scope::Program { namespace, app, .. } = self {
            out.push(Scope::App {
                namespace: namespace.clone(),
                app: app.clone(),
            });
        }
        if let Scope::Program { .. } = self {
            out.push(self.clone());
        }
        out
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Instance => write!(f, "instance preferences"),
            Scope::Namespace(ns) => write!(f, "namespace '{ns}' preferences"),
            Scope::App { namespace, app } => write!(f, "app '{namespace}/{app}' preferences"),
            Scope::Program {
                namespace,
                app,
                program_type,
                program,
            } => write!(
                f,
                "program '{namespace}/{app}/{program_type}/{program}' preferences"
            ),
        }
    }
}

fn require_scope(r: &impl Read, scope: &Scope) -> Result<(), ServiceError> {
    match scope {
        Scope::Instance => {}
        Scope::Namespace(ns) => {
            namespaces::require(r, ns)?;
        }
        Scope::App { namespace, app } => {
            apps::require(r, namespace, app)?;
        }
        Scope::Program {
            namespace,
            app,
            program_type,
            program,
        } => {
            apps::require_program(r, namespace, app, program_type, program)?;
        }
    }
    Ok(())
}

fn load(r: &impl Read, scope: &Scope) -> Result<Values, ServiceError> {
    Ok(r.get(Table::Preferences, &scope.key())?.unwrap_or_default())
}

/// The preferences set at `scope`; with `resolved`, merged with every scope above it.
pub async fn get(store: &Store, scope: Scope, resolved: bool) -> Result<Values, ServiceError> {
    store
        .read(move |r| {
            require_scope(r, &scope)?;
            if !resolved {
                return load(r, &scope);
            }
            let lineage = scope.lineage();
            let maps = lineage
                .iter()
                .map(|s| load(r, s).map(|v| (s.level(), v)))
                .collect::<Result<Vec<_>, _>>()?;
            let levels: Vec<(Level, &Values)> = maps.iter().map(|(l, v)| (*l, v)).collect();
            Ok(resolve::merge(&levels))
        })
        .await
}

/// Replaces the preferences at `scope` with `values`, after checking them.
pub async fn put(store: &Store, scope: Scope, values: Values) -> Result<Values, ServiceError> {
    check_keys(&values)?;
    store
        .write(move |tx| {
            require_scope(tx, &scope)?;
            let namespace = scope.namespace().unwrap_or(namespaces::DEFAULT);
            check_profile_assignment(tx, namespace, scope.level(), &values)?;
            if values.is_empty() {
                tx.delete(Table::Preferences, &scope.key());
            } else {
                tx.put(Table::Preferences, &scope.key(), &values)?;
            }
            Ok(values)
        })
        .await
}

/// Removes every preference at `scope`.
pub async fn delete(store: &Store, scope: Scope) -> Result<(), ServiceError> {
    store
        .write(move |tx| {
            require_scope(tx, &scope)?;
            tx.delete(Table::Preferences, &scope.key());
            Ok(())
        })
        .await
}

fn check_keys(values: &Values) -> Result<(), ServiceError> {
    for key in values.keys() {
        if key.trim().is_empty() {
            return Err(ServiceError::invalid("preferences", "a key is empty"));
        }
        if key.len() > MAX_KEY_LEN {
            return Err(ServiceError::invalid(
                key.chars().take(40).collect::<String>() + "...",
                format!("keys are at most {MAX_KEY_LEN} bytes"),
            ));
        }
    }
    Ok(())
}

/// Checks the values of one level of namespace `namespace` the way preferences are checked:
/// keys, property overrides, and any profile assignment. For an app's deploy-time config.
pub fn check_level(
    r: &impl Read,
    namespace: &str,
    level: Level,
    values: &Values,
) -> Result<(), ServiceError> {
    check_keys(values)?;
    check_profile_assignment(r, namespace, level, values)
}

/// Checks a profile assignment in `values`: well-formed, allowed at this level, existing and
/// enabled. Also checks the shape of property overrides.
fn check_profile_assignment(
    r: &impl Read,
    namespace: &str,
    level: Level,
    values: &Values,
) -> Result<(), ServiceError> {
    resolve::check_overrides(level, values)?;
    if !values.contains_key(PROFILE_KEY) {
        return Ok(());
    }
    let chosen = resolve::choose_profile(namespace, &[(level, values)])?;
    let stored =
        stored_profile(r, &chosen.id)?.ok_or(ServiceError::ProfileNotFound(chosen.id.clone()))?;
    if stored.profile.status == ProfileStatus::Disabled {
        return Err(ServiceError::ProfileDisabled(chosen.id));
    }
    Ok(())
}

/// One place a profile is assigned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Assignment {
    /// The level of the hierarchy that assigns it.
    pub level: Level,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
}

impl fmt::Display for Assignment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.namespace.as_deref().unwrap_or_default();
        let app = self.app.as_deref().unwrap_or_default();
        match self.level {
            Level::Instance | Level::Runtime => write!(f, "instance preferences"),
            Level::Namespace => write!(f, "namespace '{ns}' preferences"),
            Level::App => write!(f, "app '{ns}/{app}' configuration"),
            Level::AppPreferences => write!(f, "app '{ns}/{app}' preferences"),
            Level::Program => write!(
                f,
                "program '{ns}/{app}/{}' preferences",
                self.program.as_deref().unwrap_or_default()
            ),
        }
    }
}

/// Every place profile `id` is assigned: preferences at every level and app configurations.
pub fn assignments(r: &impl Read, id: &ProfileId) -> Result<Vec<Assignment>, ServiceError> {
    let mut places = Vec::new();
    for (key, values) in r.scan::<Values>(Table::Preferences, "")? {
        let Some(scope) = Scope::from_key(&key) else {
            continue;
        };
        let Some(assigned) = values.get(PROFILE_KEY) else {
            continue;
        };
        let namespace = scope.namespace().unwrap_or(namespaces::DEFAULT);
        if ProfileId::parse_scoped(namespace, assigned).as_ref() == Ok(id) {
            let (app, program) = match &scope {
                Scope::App { app, .. } => (Some(app.clone()), None),
                Scope::Program { app, program, .. } => (Some(app.clone()), Some(program.clone())),
                _ => (None, None),
            };
            places.push(Assignment {
                level: scope.level(),
                namespace: scope.namespace().map(str::to_string),
                app,
                program,
            });
        }
    }
    for (_, app) in r.scan::<App>(Table::Apps, "")? {
        if let Some(assigned) = app.config.get(PROFILE_KEY)
            && ProfileId::parse_scoped(&app.namespace, assigned).as_ref() == Ok(id)
        {
            places.push(Assignment {
                level: Level::App,
                namespace: Some(app.namespace.clone()),
                app: Some(app.name.clone()),
                program: None,
            });
        }
    }
    Ok(places)
}

/// Removes the preferences of app `app` in `ns` and of its programs.
pub fn delete_app(tx: &mut Txn, ns: &str, app: &str) -> Result<(), ServiceError> {
    tx.delete(
        Table::Preferences,
        &Scope::App {
            namespace: ns.to_string(),
            app: app.to_string(),
        }
        .key(),
    );
    delete_prefix(tx, &format!("program/{ns}/{app}/"))
}

fn delete_prefix(tx: &mut Txn, prefix: &str) -> Result<(), ServiceError> {
    let keys: Vec<String> = tx
        .scan::<BTreeMap<String, String>>(Table::Preferences, prefix)?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    for key in keys {
        tx.delete(Table::Preferences, &key);
    }
    Ok(())
}

/// Removes the preferences of namespace `ns` and of everything in it.
pub fn delete_namespace(tx: &mut Txn, ns: &str) -> Result<(), ServiceError> {
    tx.delete(Table::Preferences, &Scope::Namespace(ns.to_string()).key());
    for prefix in [format!("app/{ns}/"), format!("program/{ns}/")] {
        delete_prefix(tx, &prefix)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_lineage_goes_top_down() {
        let program = Scope::Program {
            namespace: "ns".into(),
            app: "a".into(),
            program_type: "workflows".into(),
            program: "p".into(),
        };
        for scope in [
            Scope::Instance,
            Scope::Namespace("ns".into()),
            Scope::App {
                namespace: "ns".into(),
                app: "a".into(),
            },
            program.clone(),
        ] {
            assert_eq!(Scope::from_key(&scope.key()), Some(scope.clone()));
        }
        let levels: Vec<Level> = program.lineage().iter().map(Scope::level).collect();
        assert_eq!(
            levels,
            vec![
                Level::Instance,
                Level::Namespace,
                Level::AppPreferences,
                Level::Program
            ]
        );
        assert_eq!(Scope::from_key("bogus/x"), None);
    }
}
