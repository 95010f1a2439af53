//! Apps and their programs: what a run executes.
//!
//! An app is deployed with `PUT /v3/namespaces/{ns}/apps/{app}` and holds programs (each a
//! command, its environment and a concurrency limit) and a deploy-time `config`, which is the
//! "app" level of the profile hierarchy. Deploying again replaces the app; runs already started
//! keep the program they started with. Deleting an app is refused while any of its runs still
//! holds a cluster. This module never starts runs; `service::runs` does.

use crate::model::access::{Act, Caller};
use crate::model::app::{App, AppSpec, check_spec};
use crate::model::names;
use crate::model::namespace;
use crate::model::property::Level;
use crate::model::schedule::{Schedule, ScheduleBody, merge};
use crate::service::catalog;
use crate::service::error::ServiceError;
use crate::store::clock;
use crate::store::keys;
use crate::store::{Read, Store, Table, changes};

/// Deploys (creates or replaces) app `name` in `ns` for `caller`. Its programs may run on
/// the server's host only when `caller` is an instance admin or the namespace allows it; an
/// app whose own config picks a profile that runs there is refused otherwise.
pub async fn put(
    store: &Store,
    caller: &Caller,
    ns: String,
    name: String,
    spec: AppSpec,
) -> Result<App, ServiceError> {
    namespace::check_name(&ns)?;
    names::check("app", &name)?;
    if name == crate::model::run::POOL_APP {
        return Err(ServiceError::invalid(
            "app",
            format!("'{name}' is reserved: the runs of a profile's pool are kept under it"),
        ));
    }
    check_spec(&spec)?;
    let act = Act::new(caller, "app.put", Some(&ns), &name);
    let instance_admin = caller.grants.instance_admin;
    let caller = caller.clone();
    store
        .write(move |tx| {
            let namespace = catalog::require_namespace(tx, &ns)?;
            catalog::check_level(tx, &ns, Level::App, &spec.config)?;
            if !(instance_admin || namespace.allow_host_programs) {
                catalog::refuse_host_profile(tx, &ns, "config", &spec.config)?;
            }
            // Only an instance admin's deploy approves the app for the host: a namespace's
            // allowance is looked at anew at each start, so turning it off takes it back.
            let host_programs = instance_admin;
            let now = clock::now_secs();
            let created = tx
                .get::<App>(Table::Apps, &keys::app(&ns, &name))?
                .map_or(now, |a| a.created);
            let app = App {
                name: name.clone(),
                namespace: ns.clone(),
                description: spec.description.clone().unwrap_or_default(),
                config: spec.config.clone(),
                programs: spec.programs.clone(),
                created,
                updated: now,
                host_programs,
                deployed_by: Some(act.actor.clone()),
            };
            tx.put(Table::Apps, &keys::app(&app.namespace, &app.name), &app)?;
            deploy_schedules(tx, &caller, &app, &spec.schedules)?;
            changes::record(tx, &act)?;
            Ok(app)
        })
        .await
}

/// App `name` in `ns`.
pub async fn get(store: &Store, ns: String, name: String) -> Result<App, ServiceError> {
    namespace::check_name(&ns)?;
    store
        .read(move |r| catalog::require_app(r, &ns, &name))
        .await
}

/// Every app in `ns`, by name.
pub async fn list(store: &Store, ns: String) -> Result<Vec<App>, ServiceError> {
    namespace::check_name(&ns)?;
    store
        .read(move |r| {
            catalog::require_namespace(r, &ns)?;
            Ok(r.scan::<App>(Table::Apps, &keys::in_namespace(&ns))?
                .into_iter()
                .map(|(_, a)| a)
                .collect())
        })
        .await
}

/// Creates or updates the schedules an app's spec carries, in the write that deploys it
/// (after the app, whose programs they name). An error names the schedule's place in the
/// spec.
fn deploy_schedules(
    tx: &mut crate::store::Txn,
    caller: &Caller,
    app: &App,
    bodies: &[ScheduleBody],
) -> Result<(), ServiceError> {
    let now = clock::now_millis();
    for (i, body) in bodies.iter().enumerate() {
        let at = |e: ServiceError| {
            if let ServiceError::Invalid(inv) = &e {
                return ServiceError::invalid(
                    format!("schedules[{i}].{}", inv.field),
                    inv.message.clone(),
                );
            }
            e
        };
        let name = body
            .name
            .clone()
            .ok_or_else(|| ServiceError::invalid(format!("schedules[{i}].name"), "required"))?;
        names::check(&format!("schedules[{i}].name"), &name)?;
        let key = keys::schedule(&app.namespace, &app.name, &name);
        let old = tx.get::<Schedule>(Table::Schedules, &key)?;
        let names = (app.namespace.as_str(), app.name.as_str(), name.as_str());
        let s = merge(names, body, old.as_ref(), &caller.name, now).map_err(|e| at(e.into()))?;
        catalog::check_schedule(&s, caller, now).map_err(at)?;
        catalog::save_schedule(tx, &s, caller, old.is_none()).map_err(at)?;
    }
    Ok(())
}

/// Deletes app `name` and its preferences; refused while one of its runs holds a cluster.
pub async fn delete(
    store: &Store,
    act: Act,
    ns: String,
    name: String,
) -> Result<App, ServiceError> {
    namespace::check_name(&ns)?;
    let (app, schedules) = store
        .write(move |tx| {
            let app = catalog::require_app(tx, &ns, &name)?;
            let active: Vec<String> = tx
                .scan::<serde_json::Value>(Table::Active, &keys::app_runs(&ns, &name))?
                .into_iter()
                .filter_map(|(k, _)| k.rsplit('/').next().map(str::to_string))
                .collect();
            if !active.is_empty() {
                return Err(ServiceError::AppActive {
                    namespace: ns.clone(),
                    app: name.clone(),
                    runs: active,
                });
            }
            catalog::delete_app_preferences(tx, &ns, &name)?;
            let schedules: Vec<Schedule> = tx
                .scan::<Schedule>(Table::Schedules, &format!("{}/", keys::app(&ns, &name)))?
                .into_iter()
                .map(|(_, s)| s)
                .collect();
            for s in &schedules {
                catalog::forget_schedule(tx, s)?;
            }
            tx.delete(Table::Apps, &keys::app(&ns, &name));
            changes::record(tx, &act)?;
            Ok((app, schedules))
        })
        .await?;
    for s in &schedules {
        catalog::forget_fires(store, s).await?;
    }
    Ok(app)
}
