//! Apps and their programs: what a run executes.
//!
//! An app is deployed with `PUT /v3/namespaces/{ns}/apps/{app}` and holds programs (each a
//! command, its environment and a concurrency limit) and a deploy-time `config`, which is the
//! "app" level of the profile hierarchy. Deploying again replaces the app; runs already started
//! keep the program they started with. Deleting an app is refused while any of its runs still
//! holds a cluster. This module never starts runs; `service::runs` does.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::property::{Level, Values};
use crate::service::error::ServiceError;
use crate::service::{namespaces, preferences};
use crate::store::{Read, Store, Table};
use crate::{model::names, model::time};

/// The only program type so far, as it appears in paths.
pub const WORKFLOWS: &str = "workflows";

/// Longest command line accepted, in arguments.
const MAX_ARGS: usize = 4096;

/// A program as deployed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Program {
    #[serde(rename = "type")]
    pub program_type: String,
    pub name: String,
    /// The command and its arguments (no shell).
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Most runs that may hold a cluster at once; unset means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_runs: Option<u32>,
}

/// The body of `PUT .../apps/{app}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppSpec {
    pub description: Option<String>,
    #[serde(default)]
    pub config: Values,
    #[serde(default)]
    pub programs: Vec<Program>,
}

/// A deployed app.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct App {
    pub name: String,
    pub namespace: String,
    pub description: String,
    pub config: Values,
    pub programs: Vec<Program>,
    pub created: u64,
    pub updated: u64,
}

impl App {
    /// Program `name`, if the app has it.
    pub fn program(&self, name: &str) -> Option<&Program> {
        self.programs.iter().find(|p| p.name == name)
    }
}

fn key(ns: &str, app: &str) -> String {
    format!("{ns}/{app}")
}

/// App `app` of namespace `ns`, or a 404-class error (after checking the namespace).
pub fn require(r: &impl Read, ns: &str, app: &str) -> Result<App, ServiceError> {
    namespaces::require(r, ns)?;
    r.get(Table::Apps, &key(ns, app))?
        .ok_or_else(|| ServiceError::AppNotFound {
            namespace: ns.to_string(),
            app: app.to_string(),
        })
}

/// Program `program` of app `app`, or a 404-class error.
pub fn require_program(
    r: &impl Read,
    ns: &str,
    app: &str,
    program_type: &str,
    program: &str,
) -> Result<(App, Program), ServiceError> {
    let found = require(r, ns, app)?;
    let p = found
        .programs
        .iter()
        .find(|p| p.name == program && p.program_type == program_type)
        .cloned()
        .ok_or_else(|| ServiceError::ProgramNotFound {
            namespace: ns.to_string(),
            app: app.to_string(),
            program: program.to_string(),
        })?;
    Ok((found, p))
}

fn check_spec(spec: &AppSpec) -> Result<(), ServiceError> {
    let mut seen = std::collections::BTreeSet::new();
    for (i, p) in spec.programs.iter().enumerate() {
        let field = |f: &str| format!("programs[{i}].{f}");
        if p.program_type != WORKFLOWS {
            return Err(ServiceError::invalid(
                field("type"),
                format!("must be '{WORKFLOWS}', got '{}'", p.program_type),
            ));
        }
        names::check(&field("name"), &p.name)?;
        if !seen.insert(p.name.as_str()) {
            return Err(ServiceError::invalid(
                field("name"),
                format!("program '{}' appears twice", p.name),
            ));
        }
        match p.command.first() {
            None => return Err(ServiceError::invalid(field("command"), "must not be empty")),
            Some(exe) if exe.trim().is_empty() => {
                return Err(ServiceError::invalid(
                    field("command[0]"),
                    "must name a program",
                ));
            }
            Some(_) => {}
        }
        if p.command.len() > MAX_ARGS {
            return Err(ServiceError::invalid(
                field("command"),
                format!("at most {MAX_ARGS} arguments"),
            ));
        }
        if let Some(bad) = p
            .env
            .keys()
            .find(|k| k.is_empty() || k.contains('=') || k.contains('\0'))
        {
            return Err(ServiceError::invalid(
                field("env"),
                format!("'{bad}' is not a valid variable name"),
            ));
        }
        if p.max_concurrent_runs == Some(0) {
            return Err(ServiceError::invalid(
                field("maxConcurrentRuns"),
                "must be at least 1 (leave it out for no limit)",
            ));
        }
    }
    Ok(())
}

/// Deploys (creates or replaces) app `name` in `ns`.
pub async fn put(
    store: &Store,
    ns: String,
    name: String,
    spec: AppSpec,
) -> Result<App, ServiceError> {
    namespaces::check_name(&ns)?;
    names::check("app", &name)?;
    check_spec(&spec)?;
    store
        .write(move |tx| {
            namespaces::require(tx, &ns)?;
            preferences::check_level(tx, &ns, Level::App, &spec.config)?;
            let now = time::now_secs();
            let created = tx
                .get::<App>(Table::Apps, &key(&ns, &name))?
                .map_or(now, |a| a.created);
            let app = App {
                name,
                namespace: ns,
                description: spec.description.unwrap_or_default(),
                config: spec.config,
                programs: spec.programs,
                created,
                updated: now,
            };
            tx.put(Table::Apps, &key(&app.namespace, &app.name), &app)?;
            Ok(app)
        })
        .await
}

/// App `name` in `ns`.
pub async fn get(store: &Store, ns: String, name: String) -> Result<App, ServiceError> {
    namespaces::check_name(&ns)?;
    store.read(move |r| require(r, &ns, &name)).await
}

/// Every app in `ns`, by name.
pub async fn list(store: &Store, ns: String) -> Result<Vec<App>, ServiceError> {
    namespaces::check_name(&ns)?;
    store
        .read(move |r| {
            namespaces::require(r, &ns)?;
            Ok(r.scan::<App>(Table::Apps, &format!("{ns}/"))?
                .into_iter()
                .map(|(_, a)| a)
                .collect())
        })
        .await
}

/// Deletes app `name` and its preferences; refused while one of its runs holds a cluster.
pub async fn delete(store: &Store, ns: String, name: String) -> Result<App, ServiceError> {
    namespaces::check_name(&ns)?;
    store
        .write(move |tx| {
            let app = require(tx, &ns, &name)?;
            let active: Vec<String> = tx
                .scan::<serde_json::Value>(Table::Active, &format!("{ns}/{name}/"))?
                .into_iter()
                .filter_map(|(k, _)| k.rsplit('/').next().map(str::to_string))
                .collect();
            if !active.is_empty() {
                return Err(ServiceError::AppActive {
                    namespace: ns,
                    app: name,
                    runs: active,
                });
            }
            preferences::delete_app(tx, &ns, &name)?;
            tx.delete(Table::Apps, &key(&ns, &name));
            Ok(app)
        })
        .await
}

/// Whether namespace `ns` holds apps (which block deleting it).
pub fn names_in(r: &impl Read, ns: &str) -> Result<Vec<String>, ServiceError> {
    Ok(r.scan::<serde_json::Value>(Table::Apps, &format!("{ns}/"))?
        .into_iter()
        .map(|(k, _)| k[ns.len() + 1..].to_string())
        .collect())
}
