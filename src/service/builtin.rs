//! Built-in SYSTEM profiles: the files in `profiles/*.json`, compiled into the binary and
//! written to the store at every start-up.
//!
//! Loading keeps each profile's status and creation time, so an admin's disable survives a
//! restart or an upgrade. A SYSTEM profile that was built in but no longer ships becomes an
//! ordinary SYSTEM profile the admin may edit or delete.

use crate::model::profile::{ProfileId, ProfileSpec, SYSTEM_NAMESPACE};
use crate::runtime::registry::Registry;
use crate::service::error::ServiceError;
use crate::service::profiles::{StoredProfile, upsert};
use crate::store::{Read, Store, Table};

/// The built-in profiles: file name and content.
pub const FILES: &[(&str, &str)] = &[
    ("native.json", include_str!("../../profiles/native.json")),
    ("local.json", include_str!("../../profiles/local.json")),
];

/// Parses built-in file `dir/file` as a `T`; an error names the file and the JSON path.
pub(crate) fn parse_file<T: serde::de::DeserializeOwned>(
    dir: &str,
    file: &str,
    json: &str,
) -> Result<T, ServiceError> {
    let de = &mut serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(de).map_err(|e| {
        ServiceError::invalid(
            format!("{dir}/{file}"),
            format!("{}: {}", e.path(), e.inner()),
        )
    })
}

/// Asserts that the `*.json` files in `dir` (relative to the crate) are exactly `files`.
#[cfg(test)]
pub(crate) fn assert_all_built_in(dir: &str, files: &[(&str, &str)]) {
    let path = format!("{}/{dir}", env!("CARGO_MANIFEST_DIR"));
    let mut on_disk: Vec<String> = std::fs::read_dir(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    on_disk.sort();
    let mut built_in: Vec<String> = files.iter().map(|(f, _)| f.to_string()).collect();
    built_in.sort();
    assert_eq!(
        on_disk, built_in,
        "{dir}/*.json and the built-in list differ"
    );
}

/// Parses and validates every built-in profile file.
pub fn parse(
    registry: &Registry,
) -> Result<Vec<(ProfileId, crate::model::profile::ValidSpec)>, ServiceError> {
    FILES
        .iter()
        .map(|(file, json)| {
            let context = |e: String| ServiceError::invalid(format!("profiles/{file}"), e);
            let spec: ProfileSpec = parse_file("profiles", file, json)?;
            let name = spec
                .name
                .clone()
                .ok_or_else(|| context("has no \"name\"".into()))?;
            crate::model::names::check("name", &name).map_err(|e| context(e.to_string()))?;
            let valid = spec
                .validate(&name, registry)
                .map_err(|e| context(e.to_string()))?;
            Ok((ProfileId::system(&name), valid))
        })
        .collect()
}

/// Writes the built-in profiles to the store.
pub async fn load(store: &Store, registry: &Registry) -> Result<Vec<ProfileId>, ServiceError> {
    let profiles = parse(registry)?;
    store
        .write(move |tx| {
            let ids: Vec<ProfileId> = profiles.iter().map(|(id, _)| id.clone()).collect();
            for (key, mut stored) in
                tx.scan::<StoredProfile>(Table::Profiles, &format!("{SYSTEM_NAMESPACE}/"))?
            {
                if stored.builtin && !ids.iter().any(|id| id.name == stored.profile.name) {
                    stored.builtin = false;
                    tx.put(Table::Profiles, &key, &stored)?;
                }
            }
            for (id, spec) in profiles {
                upsert(tx, &id, spec, true)?;
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
        assert_all_built_in("profiles", FILES);
        let parsed = parse(&Registry::builtin()).expect("built-in profiles are valid");
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
