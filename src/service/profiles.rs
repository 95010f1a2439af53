//! The rules of profiles, applied against the store: create or replace, enable and disable,
//! delete, list. Every check and its write happen in one store write, so two racing requests
//! cannot both pass a check that only one should.

use crate::model::access::{Act, Trust};
use crate::model::builtin;
use crate::model::namespace;
use crate::model::plan::ResourceStatus;
use crate::model::preference::Assignment;
use crate::model::profile::{
    Profile, ProfileId, ProfileSpec, ProfileStatus, Scope, StoredProfile, ValidSpec,
};
use crate::model::run::RunRecord;
use crate::model::view::{KeptUsage, Usage};
use crate::runtime::handle::Runtime;
use crate::runtime::registry::Registry;
use crate::service::catalog;
use crate::service::error::ServiceError;
use crate::store::clock::{self, now_secs};
use crate::store::{Read, Store, StoreError, Table, Txn, changes};

fn require(r: &impl Read, id: &ProfileId) -> Result<StoredProfile, ServiceError> {
    if id.scope == Scope::User {
        catalog::require_namespace(r, &id.namespace)?;
    }
    catalog::stored_profile(r, id)?.ok_or_else(|| ServiceError::ProfileNotFound(id.clone()))
}

fn check_id(id: &ProfileId) -> Result<(), ServiceError> {
    if id.scope == Scope::User {
        namespace::check_name(&id.namespace)?;
    }
    Ok(crate::model::names::check("profile name", &id.name)?)
}

/// Writes `spec` as profile `id` for a writer trusted as `by`, keeping `status` and
/// `created` of an existing profile.
pub(super) fn upsert(
    tx: &mut Txn,
    id: &ProfileId,
    spec: ValidSpec,
    builtin: bool,
    by: Trust,
) -> Result<Profile, ServiceError> {
    let existing = catalog::stored_profile(tx, id)?;
    if spec.pool.is_some() && id.scope == Scope::User {
        let pools = tx
            .scan::<StoredProfile>(Table::Profiles, &format!("{}/", id.namespace))?
            .into_iter()
            .filter(|(_, s)| s.profile.name != id.name && s.profile.pool.is_some())
            .count();
        if pools >= crate::model::profile::MAX_POOLS_PER_NAMESPACE {
            return Err(ServiceError::invalid(
                "pool",
                format!(
                    "namespace '{}' already has {pools} profiles that keep a pool, the most it may have",
                    id.namespace
                ),
            ));
        }
    }
    let (status, created) = existing
        .as_ref()
        .map_or((ProfileStatus::Enabled, now_secs()), |s| {
            (s.profile.status, s.profile.created)
        });
    let profile = Profile {
        name: id.name.clone(),
        label: spec.label.unwrap_or_else(|| id.name.clone()),
        description: spec.description.unwrap_or_default(),
        scope: id.scope,
        status,
        provisioner: spec.provisioner,
        keepalive: spec.keepalive,
        timeout: spec.timeout,
        retry: spec.retry,
        queue_runs: spec.queue_runs,
        cluster_reuse: spec.cluster_reuse,
        reuse_idle: spec.reuse_idle,
        pool: spec.pool,
        price_per_node_hour: spec.price_per_node_hour,
        created,
    };
    let stored = StoredProfile {
        profile: profile.clone(),
        builtin,
        written_by: by,
        changed: now_secs(),
    };
    tx.put(Table::Profiles, &id.key(), &stored)?;
    Ok(profile)
}

/// Creates or replaces profile `id`, written by a caller trusted as `by`. Built-in
/// profiles cannot be replaced.
pub async fn put(
    store: &Store,
    registry: &Registry,
    (act, by): (Act, Trust),
    id: ProfileId,
    spec: ProfileSpec,
) -> Result<Profile, ServiceError> {
    check_id(&id)?;
    let valid = spec.validate(&id.name, registry)?;
    if valid.pool.is_some() && id.scope == Scope::System {
        return Err(ServiceError::invalid(
            "pool",
            "a pool belongs to a namespace, whose runs alone may take its clusters: set it on a profile of that namespace",
        ));
    }
    // A directory on the server's host is an instance admin's to choose: the janitor sweeps
    // what profiles point at, and host programs run there.
    let names = valid.provisioner.properties.iter().map(|p| &p.name);
    if by < Trust::InstanceAdmin
        && let Some(spec) = registry.get(&valid.provisioner.name).map(|p| p.spec())
        && let Some(name) = spec.first_host_path(names)
    {
        return Err(ServiceError::NotAllowed(format!(
            "provisioner.properties.{name}: names a directory on the server's own host, which only an instance admin may choose; leave it out to use the server's work directory"
        )));
    }
    let properties = valid
        .provisioner
        .properties
        .iter()
        .map(|p| (p.name.clone(), p.value.clone()))
        .collect();
    registry
        .check(&valid.provisioner.name, properties)
        .await
        .map_err(|e| {
            ServiceError::invalid(format!("provisioner.properties.{}", e.property), e.message)
        })?;
    store
        .write(move |tx| {
            if id.scope == Scope::User {
                catalog::require_namespace(tx, &id.namespace)?;
            }
            if catalog::stored_profile(tx, &id)?.is_some_and(|s| s.builtin) {
                return Err(ServiceError::BuiltinProfile(id.clone()));
            }
            let profile = upsert(tx, &id, valid.clone(), false, by)?;
            changes::record(tx, &act)?;
            Ok(profile)
        })
        .await
}

/// Profile `id`.
pub async fn get(store: &Store, id: ProfileId) -> Result<Profile, ServiceError> {
    check_id(&id)?;
    store
        .read(move |r| require(r, &id).map(|s| s.profile))
        .await
}

/// Whether profile `id` ships with ebb (it cannot be replaced or deleted).
pub async fn is_builtin(store: &Store, id: ProfileId) -> Result<bool, ServiceError> {
    check_id(&id)?;
    store.read(move |r| Ok(require(r, &id)?.builtin)).await
}

/// The USER profiles of `namespace` (and, with `include_system`, every SYSTEM profile after
/// them); `None` lists the SYSTEM profiles.
pub async fn list(
    store: &Store,
    namespace: Option<String>,
    include_system: bool,
) -> Result<Vec<Profile>, ServiceError> {
    if let Some(ns) = &namespace {
        namespace::check_name(ns)?;
    }
    store
        .read(move |r| {
            let prefixes = catalog::scoped_prefixes(r, namespace.as_deref(), include_system)?;
            let mut out = Vec::new();
            for prefix in prefixes {
                out.extend(
                    r.scan::<StoredProfile>(Table::Profiles, &prefix)?
                        .into_iter()
                        .map(|(_, s)| s.profile),
                );
            }
            Ok(out)
        })
        .await
}

/// Enables or disables profile `id`; 409 if it already is. `SYSTEM:native` stays enabled.
pub async fn set_status(
    store: &Store,
    act: Act,
    id: ProfileId,
    status: ProfileStatus,
) -> Result<Profile, ServiceError> {
    check_id(&id)?;
    store
        .write(move |tx| {
            let mut stored = require(tx, &id)?;
            if stored.profile.status == status {
                return Err(ServiceError::ProfileStatusUnchanged {
                    profile: id.clone(),
                    status,
                });
            }
            if status == ProfileStatus::Disabled && id == ProfileId::native() {
                return Err(ServiceError::NativeProfile(id.clone()));
            }
            stored.profile.status = status;
            stored.changed = now_secs();
            tx.put(Table::Profiles, &id.key(), &stored)?;
            changes::record(tx, &act)?;
            Ok(stored.profile)
        })
        .await
}

/// Deletes profile `id`: it must exist, not be built in, be disabled, be assigned nowhere and
/// be used by no active run.
pub async fn delete(store: &Store, act: Act, id: ProfileId) -> Result<Profile, ServiceError> {
    check_id(&id)?;
    store
        .write(move |tx| {
            let stored = require(tx, &id)?;
            if stored.builtin {
                return Err(ServiceError::BuiltinProfile(id.clone()));
            }
            if stored.profile.status == ProfileStatus::Enabled {
                return Err(ServiceError::ProfileEnabled(id.clone()));
            }
            let places: Vec<String> = catalog::assignments(tx, &id)?
                .iter()
                .map(ToString::to_string)
                .collect();
            if !places.is_empty() {
                return Err(ServiceError::ProfileAssigned {
                    profile: id.clone(),
                    places,
                });
            }
            let runs = catalog::active_runs_of_profile(tx, &id)?;
            if !runs.is_empty() {
                return Err(ServiceError::ProfileInUse {
                    profile: id.clone(),
                    runs,
                });
            }
            tx.delete(Table::Profiles, &id.key());
            changes::record(tx, &act)?;
            Ok(stored.profile)
        })
        .await
}

/// Usage of profile `id`, from the run records and node records.
pub async fn usage(runtime: &Runtime, id: ProfileId) -> Result<Usage, ServiceError> {
    runtime
        .store()
        .read(move |r| {
            require(r, &id)?;
            let now = clock::now_secs();
            let mut usage = Usage {
                profile: id.scoped_name(),
                ..Default::default()
            };
            for run in runs_of_profile(r, &id)? {
                *usage.runs.entry(run.status.to_string()).or_default() += 1;
                if run.is_active() {
                    usage.active_runs.push(run.key.run.clone());
                }
                usage.idle_node_seconds += run.cluster.idle_node_seconds(now);
                for node in catalog::held_nodes(r, &run)? {
                    if node.id.is_some()
                        && node.create_time.is_some()
                        && node.status != ResourceStatus::Deleted
                    {
                        usage.nodes_now += 1;
                    }
                    usage.node_seconds += node.seconds(now);
                }
            }
            // Runs whose history was compacted count through their kept totals.
            if let Some(kept) = r.get::<KeptUsage>(Table::Usage, &id.key())? {
                for (status, count) in &kept.runs {
                    *usage.runs.entry(status.clone()).or_default() += count;
                }
                usage.node_seconds += kept.node_seconds;
                usage.idle_node_seconds += kept.idle_node_seconds;
                usage.compacted_runs = kept.runs.values().sum();
            }
            usage.node_hours = usage.node_seconds as f64 / 3600.0;
            Ok(usage)
        })
        .await
}

/// Every run that used profile `id`.
fn runs_of_profile(r: &impl Read, id: &ProfileId) -> Result<Vec<RunRecord>, StoreError> {
    let prefix = match id.scope {
        crate::model::profile::Scope::System => String::new(),
        crate::model::profile::Scope::User => format!("{}/", id.namespace),
    };
    Ok(r.scan::<RunRecord>(Table::Runs, &prefix)?
        .into_iter()
        .map(|(_, run)| run)
        .filter(|run| ProfileId::parse_scoped(&run.key.namespace, &run.profile).as_ref() == Ok(id))
        .collect())
}

/// Where profile `id` is assigned.
pub async fn assignments(
    runtime: &Runtime,
    id: ProfileId,
) -> Result<Vec<Assignment>, ServiceError> {
    runtime
        .store()
        .read(move |r| {
            require(r, &id)?;
            catalog::assignments(r, &id)
        })
        .await
}

/// Writes the built-in SYSTEM profiles (`profiles/*.json`, compiled in) to the store, at every
/// start-up. Each keeps its status and creation time, so an admin's disable survives a restart
/// or an upgrade; one built in that no longer ships becomes an ordinary SYSTEM profile the
/// admin may edit or delete.
pub async fn load_builtin(
    store: &Store,
    registry: &Registry,
) -> Result<Vec<ProfileId>, ServiceError> {
    let profiles = builtin::profiles(registry)?;
    store
        .write(move |tx| {
            let ids: Vec<ProfileId> = profiles.iter().map(|(id, _)| id.clone()).collect();
            for (key, mut stored) in tx.scan::<StoredProfile>(
                Table::Profiles,
                &crate::store::keys::in_namespace(crate::model::profile::SYSTEM_NAMESPACE),
            )? {
                if stored.builtin && !ids.iter().any(|id| id.name == stored.profile.name) {
                    stored.builtin = false;
                    tx.put(Table::Profiles, &key, &stored)?;
                }
            }
            for (id, spec) in &profiles {
                upsert(tx, id, spec.clone(), true, Trust::InstanceAdmin)?;
            }
            Ok(ids)
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::builtin;
    use crate::runtime::registry::Registry;

    fn validate(json: &str) -> Result<ValidSpec, String> {
        let de = &mut serde_json::Deserializer::from_str(json);
        let spec: ProfileSpec = serde_path_to_error::deserialize(de)
            .map_err(|e| format!("{}: {}", e.path(), e.inner()))?;
        spec.validate("p", &Registry::builtin())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn names_the_bad_field() {
        let cases = [
            (r#"{"provisioner":{"name":"nope"}}"#, "provisioner.name"),
            (
                r#"{"provisioner":{"name":"local","properties":[{"name":"nodes","value":"x"}]}}"#,
                "provisioner.properties.nodes",
            ),
            (
                r#"{"provisioner":{"name":"local","properties":[{"name":"nodes","value":"1"},{"name":"nodes","value":"2"}]}}"#,
                "provisioner.properties[1].name",
            ),
            (
                r#"{"provisioner":{"name":"local","properties":[{"name":"","value":"1"}]}}"#,
                "provisioner.properties[0].name",
            ),
            (
                r#"{"provisioner":{"name":"local"},"keepalive":{"failed":-5}}"#,
                "keepalive.failed",
            ),
            (
                r#"{"provisioner":{"name":"local"},"keepalive":{"killed":"-5s"}}"#,
                "keepalive.killed",
            ),
            (
                r#"{"provisioner":{"name":"local"},"timeout":1.5}"#,
                "timeout",
            ),
            (r#"{"provisioner":{"name":"local"},"timeout":0}"#, "timeout"),
            (
                r#"{"provisioner":{"name":"local"},"timeout":"forever"}"#,
                "timeout",
            ),
            (
                r#"{"provisioner":{"name":"local"},"timeout":999999999999}"#,
                "timeout",
            ),
            (
                r#"{"provisioner":{"name":"local"},"colour":"red"}"#,
                "colour",
            ),
            (
                r#"{"provisioner":{"name":"native","properties":[{"name":"nodes","value":"1"}]}}"#,
                "provisioner.properties.nodes",
            ),
            (r#"{"name":"q","provisioner":{"name":"native"}}"#, "name"),
            (r#"{"label":"x"}"#, "provisioner"),
            (
                r#"{"provisioner":{"name":"local","properties":[{"name":"nodes","value":"1","isEditable":"yes"}]}}"#,
                "provisioner.properties[0].isEditable",
            ),
        ];
        for (json, field) in cases {
            let err = validate(json).expect_err(json);
            assert!(err.contains(field), "{json}: '{err}' does not name {field}");
        }
    }

    #[test]
    fn every_file_in_profiles_is_built_in_and_valid() {
        builtin::assert_all_built_in("profiles", builtin::PROFILE_FILES);
        let parsed = builtin::profiles(&Registry::builtin()).expect("built-in profiles are valid");
        let names: Vec<&str> = parsed.iter().map(|(id, _)| id.name.as_str()).collect();
        assert!(names.contains(&"native") && names.contains(&"local"));
        let local = parsed
            .iter()
            .find(|(id, _)| id.name == "local")
            .expect("local");
        assert_eq!(local.1.provisioner.name, "local");
        assert_eq!(local.1.provisioner.properties[0].value, "3");
    }
}
