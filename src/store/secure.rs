//! The secure store's keeping: the sealed records in the `SecureKeys` table, whether a
//! server's key file is the installation's, and the resolution of `${secure(name)}`
//! references when a provisioner is called. The key itself is [`Cipher`]'s. Which keys may
//! be written, and by whom, is the service's business (`service::secure`).

use serde::{Deserialize, Serialize};

pub use super::cipher::{Cipher, KeyFileError, RUN_TOKEN_PREFIX, Sealed, read_owner_only};
use crate::model::names;
use crate::model::property::{is_reference, substitute};
use crate::model::secure::KeyMetadata;
use crate::store::{Read, Table, keys};

/// A secure key as the store keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredKey {
    #[serde(flatten)]
    pub meta: KeyMetadata,
    pub sealed: Sealed,
}

/// Properties with their references resolved, and the secret values they now hold.
#[derive(Clone, Default)]
pub struct Resolved {
    pub properties: ebb_spi::Properties,
    secrets: Vec<String>,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("properties", &self.properties.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Resolved {
    /// `ctx` with these properties and their secrets.
    pub fn into_context(self, ctx: ebb_spi::Context) -> ebb_spi::Context {
        ctx.with_resolved(self.properties, self.secrets)
    }
}

/// The `Meta` key of a value sealed with the installation's key file, which tells a server
/// whether its key file is the installation's.
const KEY_CHECK: &str = "secure_key_check";

/// What [`KEY_CHECK`] seals.
const KEY_CHECK_VALUE: &[u8] = b"ebb secure store";

/// Whether `cipher` is the key the installation's secure keys are sealed with. The first
/// server of an installation records that it is; every later one (and every other server on
/// the same etcd) must use the same key file.
pub async fn same_key_as_installation(
    store: &crate::store::Store,
    cipher: std::sync::Arc<Cipher>,
) -> Result<bool, crate::store::StoreError> {
    store
        .write(move |tx| {
            if let Some(sealed) = tx.get::<Sealed>(Table::Meta, KEY_CHECK)? {
                return Ok(cipher.open(KEY_CHECK, &sealed).as_deref()
                    == std::str::from_utf8(KEY_CHECK_VALUE).ok());
            }
            let sealed = cipher
                .seal(KEY_CHECK, KEY_CHECK_VALUE)
                .map_err(crate::store::StoreError::Storage)?;
            tx.put(Table::Meta, KEY_CHECK, &sealed)?;
            Ok(true)
        })
        .await
}

/// Whether `cipher` is the key of the installation whose store is `store`, if the store
/// says yet; reads only (see [`same_key_as_installation`]).
pub async fn key_of_installation(
    store: &crate::store::Store,
    cipher: std::sync::Arc<Cipher>,
) -> Result<Option<bool>, crate::store::StoreError> {
    store
        .read(move |r| {
            Ok(r.get::<Sealed>(Table::Meta, KEY_CHECK)?.map(|sealed| {
                cipher.open(KEY_CHECK, &sealed).as_deref()
                    == std::str::from_utf8(KEY_CHECK_VALUE).ok()
            }))
        })
        .await
}

/// Resolves the references in `properties` with the keys of namespace `ns`.
pub fn resolve(
    r: &impl Read,
    cipher: &Cipher,
    ns: &str,
    properties: &ebb_spi::Properties,
) -> Result<Resolved, String> {
    let mut out = Resolved::default();
    for (property, value) in properties {
        // Only a value that is one reference is resolved: references are allowed in secret
        // properties only, and those must be exactly one, so anything else (a profile stored
        // before that rule) is used as written and never carries a secret anywhere.
        if !is_reference(value) {
            out.properties.insert(property.clone(), value.clone());
            continue;
        }
        let resolved = substitute(value.trim(), |name| {
            names::check("secure key name", name).map_err(|e| e.to_string())?;
            let label = keys::secure_key(ns, name);
            let stored: StoredKey = r
                .get(Table::SecureKeys, &label)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("secure key '{name}' does not exist in namespace '{ns}'"))?;
            let plain = cipher.open(&label, &stored.sealed).ok_or_else(|| {
                format!("secure key '{name}' cannot be decrypted with this server's key file")
            })?;
            out.secrets.push(plain.clone());
            Ok(plain)
        })
        .map_err(|e| format!("property '{property}': {e}"))?;
        out.properties.insert(property.clone(), resolved);
    }
    Ok(out)
}
