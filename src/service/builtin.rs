//! Built-in SYSTEM profiles: the files in `profiles/*.json`, compiled into the binary and
//! written to the store at every start-up.
//!
//! Loading keeps each profile's status and creation time, so an admin's disable survives a
//! restart or an upgrade. A SYSTEM profile that was built in but no longer ships becomes an
//! ordinary SYSTEM profile the admin may edit or delete.

use crate::model::access::Trust;
use crate::model::builtin;
use crate::model::profile::{ProfileId, SYSTEM_NAMESPACE, StoredProfile};
use crate::runtime::registry::Registry;
use crate::service::error::ServiceError;
use crate::service::profiles::upsert;
use crate::store::keys;
use crate::store::{Read, Store, Table};

/// Writes the built-in profiles to the store.
pub async fn load(store: &Store, registry: &Registry) -> Result<Vec<ProfileId>, ServiceError> {
    let profiles = builtin::profiles(registry)?;
    store
        .write(move |tx| {
            let ids: Vec<ProfileId> = profiles.iter().map(|(id, _)| id.clone()).collect();
            for (key, mut stored) in
                tx.scan::<StoredProfile>(Table::Profiles, &keys::in_namespace(SYSTEM_NAMESPACE))?
            {
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
