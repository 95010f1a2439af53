//! The secure store: secrets (cloud keys, passwords, private keys) that provisioner
//! properties refer to as `${secure(name)}`.
//!
//! Each namespace has its own keys (`SecureKeys` table, key `<namespace>/<name>`). A key's
//! data is sealed with XChaCha20-Poly1305 under a server key kept in a file outside the store
//! (created owner-only on first start), with the key's namespace and name as associated data,
//! so a sealed value cannot be moved to another name. The API shows a key's metadata, never
//! its data. References are resolved only when a provisioner is called, in the namespace of
//! the run; run records, events and API answers keep the reference, and any resolved value
//! that shows up in a provider's message is masked. The cipher and the resolution of
//! references are the store's (`store::secure`); this module checks and writes keys.

use crate::model::access::Act;
use crate::model::names;
use crate::model::namespace;
use crate::model::secure::{KeyMetadata, KeySpec};
use crate::service::catalog;
use crate::service::error::ServiceError;
use crate::store::changes;
use crate::store::clock::now_millis;
use crate::store::keys;
use crate::store::secure::{Cipher, StoredKey};
use crate::store::{Read, Store, Table};

fn check(ns: &str, name: &str) -> Result<(), ServiceError> {
    namespace::check_name(ns)?;
    Ok(names::check("secure key name", name)?)
}

/// Creates or replaces secure key `name` of namespace `ns`.
pub async fn put(
    store: &Store,
    cipher: &Cipher,
    act: Act,
    ns: String,
    name: String,
    spec: KeySpec,
) -> Result<KeyMetadata, ServiceError> {
    check(&ns, &name)?;
    if spec.data.is_empty() {
        return Err(ServiceError::invalid("data", "must not be empty"));
    }
    let key = keys::secure_key(&ns, &name);
    let sealed = cipher
        .seal(&key, spec.data.as_bytes())
        .map_err(ServiceError::Internal)?;
    let meta = KeyMetadata {
        name,
        description: spec.description.unwrap_or_default(),
        created_epoch_ms: now_millis(),
        properties: spec.properties,
    };
    let value = StoredKey {
        meta: meta.clone(),
        sealed,
    };
    store
        .write(move |tx| {
            catalog::require_namespace(tx, &ns)?;
            tx.put(Table::SecureKeys, &key, &value)?;
            changes::record(tx, &act)?;
            Ok(meta.clone())
        })
        .await
}

fn require(r: &impl Read, ns: &str, name: &str) -> Result<StoredKey, ServiceError> {
    catalog::require_namespace(r, ns)?;
    r.get(Table::SecureKeys, &keys::secure_key(ns, name))?
        .ok_or_else(|| ServiceError::SecureKeyNotFound {
            namespace: ns.to_string(),
            name: name.to_string(),
        })
}

/// The metadata of secure key `name` of namespace `ns`.
pub async fn get(store: &Store, ns: String, name: String) -> Result<KeyMetadata, ServiceError> {
    check(&ns, &name)?;
    store.read(move |r| Ok(require(r, &ns, &name)?.meta)).await
}

/// The metadata of every secure key of namespace `ns`, by name.
pub async fn list(store: &Store, ns: String) -> Result<Vec<KeyMetadata>, ServiceError> {
    namespace::check_name(&ns)?;
    store
        .read(move |r| {
            catalog::require_namespace(r, &ns)?;
            Ok(
                r.scan::<StoredKey>(Table::SecureKeys, &keys::in_namespace(&ns))?
                    .into_iter()
                    .map(|(_, k)| k.meta)
                    .collect(),
            )
        })
        .await
}

/// Deletes secure key `name` of namespace `ns`.
pub async fn delete(
    store: &Store,
    act: Act,
    ns: String,
    name: String,
) -> Result<KeyMetadata, ServiceError> {
    check(&ns, &name)?;
    store
        .write(move |tx| {
            let existing = require(tx, &ns, &name)?;
            tx.delete(Table::SecureKeys, &keys::secure_key(&ns, &name));
            changes::record(tx, &act)?;
            Ok(existing.meta)
        })
        .await
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::store::secure::resolve;

    #[test]
    fn resolution_substitutes_and_the_context_masks_what_it_resolved() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let cipher = std::sync::Arc::new(Cipher::ephemeral());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            crate::service::namespaces::ensure_default(&store)
                .await
                .expect("default");
            let spec = KeySpec {
                description: None,
                data: "hunter22".into(),
                properties: BTreeMap::new(),
            };
            let act = Act::by_server("securekey.put", "pw");
            put(&store, &cipher, act, "default".into(), "pw".into(), spec)
                .await
                .expect("put");
        });
        let props = ebb_spi::properties([
            ("password", "${secure(pw)}"),
            ("url", "u:${secure( pw )}@h"),
        ]);
        let lookup = |props: ebb_spi::Properties| {
            let cipher = std::sync::Arc::clone(&cipher);
            rt.block_on(
                store.read(move |r| Ok::<_, ServiceError>(resolve(r, &cipher, "default", &props))),
            )
            .expect("read")
        };
        let resolved = lookup(props.clone()).expect("resolved");
        let ctx = resolved.into_context(ebb_spi::Context::new(props.clone(), dir.path().into()));
        assert_eq!(ctx.property("password"), Some("hunter22"));
        // A reference inside a longer value is never resolved: it would put the secret where
        // it does not belong (a URL, a directory name).
        assert_eq!(ctx.property("url"), Some("u:${secure( pw )}@h"));
        assert_eq!(
            ctx.redact("auth failed for hunter22"),
            "auth failed for ***"
        );
        let missing = ebb_spi::properties([("password", "${secure(nope)}")]);
        let e = lookup(missing).expect_err("missing");
        assert_eq!(
            e,
            "property 'password': secure key 'nope' does not exist in namespace 'default'"
        );
    }
}
