//! Access tokens: made, listed, revoked, and found by the secret a request brings.
//!
//! A token's secret is 256 random bits, shown once in the answer that makes it. The store
//! keeps only its SHA-256 (a secret of 256 random bits needs no slow hash), under which the
//! token is found; the hash found is compared in constant time. Each record is signed with
//! a key derived from the installation's secure key file ([`Cipher::sign`]): a token record
//! written into the store by anyone but a server of the installation (someone who reached
//! etcd's port, say) is refused, however it names itself. The web UI's sign-ins of tokens are
//! [`sessions`].

use std::path::{Path, PathBuf};

pub mod run_tokens;
pub mod sessions;

use crate::model::access::{Act, Caller, Grants, TokenRecord, TokenSpec, TokenView};
use crate::runtime::clock::now_secs;
use crate::service::error::ServiceError;
use crate::store::secure::Cipher;
use crate::store::{Read, Store, StoreError, Table, changes};

/// `record`, signed by this installation.
fn signed(cipher: &Cipher, record: TokenRecord) -> TokenRecord {
    cipher.seal_token(record)
}

/// Whether this installation signed `record` as it is.
pub fn genuine(cipher: &Cipher, record: &TokenRecord) -> bool {
    cipher.token_is_genuine(record)
}

/// The prefix of every secret, so that secret scanners and people can tell what it is.
pub const SECRET_PREFIX: &str = "ebb_";

pub use crate::model::access::FIRST_TOKEN_FILE;

/// The name of the first token.
pub const FIRST_TOKEN_NAME: &str = "admin";

/// The hex SHA-256 of `secret`.
pub fn hash(secret: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `a` and `b` are equal, in time that depends only on their lengths.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// A new secret: the prefix and 256 random bits in hex.
fn new_secret() -> Result<String, ServiceError> {
    Ok(format!("{SECRET_PREFIX}{}", random_hex()?))
}

/// 256 random bits in hex.
pub fn random_hex() -> Result<String, ServiceError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| ServiceError::Internal(format!("cannot make a secret: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Stages token `record` under its name and hash, unless the name is taken or it grants a
/// role in a namespace that does not exist.
fn insert(tx: &mut crate::store::Txn, record: &TokenRecord) -> Result<(), ServiceError> {
    for ns in record.grants.namespaces.keys() {
        crate::service::catalog::require_namespace(tx, ns)?;
    }
    if tx
        .get::<TokenRecord>(Table::Tokens, &record.name)?
        .is_some()
    {
        return Err(ServiceError::TokenExists(record.name.clone()));
    }
    tx.put(Table::Tokens, &record.name, record)?;
    tx.put(Table::TokenHashes, &record.hash, &record.name)?;
    Ok(())
}

/// Makes token `spec` for `caller`, who may grant only what it administers. The answer is
/// the only place its secret ever shows.
pub async fn create(
    store: &Store,
    cipher: &Cipher,
    caller: &Caller,
    spec: TokenSpec,
) -> Result<TokenView, ServiceError> {
    let (grants, lifetime) = spec.validate()?;
    caller
        .grants
        .may_grant(&grants)
        .map_err(ServiceError::NotAllowed)?;
    // Token names are one space for the whole installation: a namespace admin's are named
    // after a namespace it grants a role in, so whether a name is taken tells it nothing
    // of tokens outside its namespaces.
    if !caller.grants.instance_admin
        && !grants
            .namespaces
            .keys()
            .any(|ns| spec.name.starts_with(&format!("{ns}-")))
    {
        let example = grants
            .namespaces
            .keys()
            .next()
            .map_or("<namespace>", |n| n.as_str());
        return Err(ServiceError::invalid(
            "name",
            format!(
                "a namespace admin names its tokens after a namespace they have a role in: '{example}-{}'",
                spec.name
            ),
        ));
    }
    let secret = new_secret()?;
    let now = now_secs();
    let record = signed(
        cipher,
        TokenRecord {
            name: spec.name.clone(),
            hash: hash(&secret),
            grants,
            created: now,
            created_by: caller.name.clone(),
            expires: lifetime.map(|l| now.saturating_add(l)),
            signature: String::new(),
        },
    );
    let act = Act::new(caller, "token.create", None, &record.name);
    let stored = record.clone();
    store
        .write(move |tx| {
            insert(tx, &stored)?;
            changes::record(tx, &act)?;
            Ok::<_, ServiceError>(())
        })
        .await?;
    let mut view = record.view();
    view.token = Some(secret);
    Ok(view)
}

/// The tokens `caller` may manage, by name: all for an instance admin, else those whose
/// every role is in a namespace it administers.
pub async fn list(store: &Store, caller: &Caller) -> Result<Vec<TokenView>, ServiceError> {
    let grants = caller.grants.clone();
    store
        .read(move |r| {
            Ok(r.scan::<TokenRecord>(Table::Tokens, "")?
                .into_iter()
                .map(|(_, t)| t)
                .filter(|t| grants.may_grant(&t.grants).is_ok())
                .map(|t| t.view())
                .collect())
        })
        .await
}

/// Revokes token `name`; it stops working at once, on every server. A token `caller` may
/// not manage does not exist for it.
pub async fn revoke(
    store: &Store,
    caller: &Caller,
    name: String,
) -> Result<TokenView, ServiceError> {
    crate::model::names::check("token", &name)?;
    let act = Act::new(caller, "token.revoke", None, &name);
    let grants = caller.grants.clone();
    store
        .write(move |tx| {
            let record = tx
                .get::<TokenRecord>(Table::Tokens, &name)?
                .filter(|t| grants.may_grant(&t.grants).is_ok())
                .ok_or_else(|| ServiceError::TokenNotFound(name.clone()))?;
            tx.delete(Table::Tokens, &name);
            tx.delete(Table::TokenHashes, &record.hash);
            // Its browsers' sessions (kept under its name) go with it.
            for (key, _) in tx.scan::<serde_json::Value>(Table::Sessions, &format!("{name}/"))? {
                tx.delete(Table::Sessions, &key);
            }
            changes::record(tx, &act)?;
            Ok(record.view())
        })
        .await
}

/// The token given to `ebb serve` (`--token`, `--token-file`) as the server keeps it: its
/// hash, never shown, not even in a debug print.
#[derive(Clone)]
pub struct FixedToken(String);

impl FixedToken {
    pub fn new(secret: &str) -> Self {
        FixedToken(hash(secret))
    }

    fn matches(&self, given: &str) -> bool {
        self.has_hash(&hash(given))
    }

    /// Whether `hashed` is this token's hash.
    pub fn has_hash(&self, hashed: &str) -> bool {
        same(&self.0, hashed)
    }
}

impl std::fmt::Debug for FixedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FixedToken(..)")
    }
}

/// How soon every server refuses a token revoked (or edited) on another; the server that
/// revoked it refuses it at once. Each request checks its token: a look at the store's state
/// no older than this costs no round trip to etcd of its own (see [`Store::read_within`]).
pub const REVOKED_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

/// The caller whose token is `secret`: an instance admin for the server's fixed token, else
/// the live token of the store that has it, if this installation signed its record; `None`
/// when none has.
pub async fn authenticate(
    store: &Store,
    cipher: &std::sync::Arc<Cipher>,
    fixed: Option<&FixedToken>,
    secret: &str,
) -> Result<Option<Caller>, StoreError> {
    if fixed.is_some_and(|f| f.matches(secret)) {
        return Ok(Some(Caller::instance_admin(Caller::SERVE_TOKEN)));
    }
    if !secret.starts_with(SECRET_PREFIX) || secret.len() > 256 {
        return Ok(None);
    }
    let hashed = hash(secret);
    let cipher = std::sync::Arc::clone(cipher);
    store
        .read_within(REVOKED_WITHIN, move |r| {
            let Some(name) = r.get::<String>(Table::TokenHashes, &hashed)? else {
                return Ok(None);
            };
            live(r, &cipher, &name, &hashed)
        })
        .await
}

/// The caller of token `name` if its record is live, signed by this installation, and has
/// hash `hashed`.
pub fn live(
    r: &impl Read,
    cipher: &Cipher,
    name: &str,
    hashed: &str,
) -> Result<Option<Caller>, StoreError> {
    let Some(record) = r.get::<TokenRecord>(Table::Tokens, name)? else {
        return Ok(None);
    };
    if !same(&record.hash, hashed) || !record.live(now_secs()) {
        return Ok(None);
    }
    if !genuine(cipher, &record) {
        tracing::warn!(
            token.name = %record.name,
            "a token record this installation did not sign was refused: someone wrote to the store directly"
        );
        return Ok(None);
    }
    Ok(Some(Caller {
        name: record.name,
        grants: record.grants,
        run: None,
    }))
}

/// The `Meta` key saying every token record made before records were signed is signed.
const SIGNED_ALL: &str = "tokens_signed";

/// Signs, once per installation, the token records made before records were signed; from
/// then on an unsigned record is refused. Run at start-up, before serving.
pub async fn sign_unsigned(
    store: &Store,
    cipher: &std::sync::Arc<Cipher>,
) -> Result<usize, ServiceError> {
    let cipher = std::sync::Arc::clone(cipher);
    let signed_now = store
        .write(move |tx| {
            if tx.get::<bool>(Table::Meta, SIGNED_ALL)?.is_some() {
                return Ok::<_, ServiceError>(0);
            }
            let mut count = 0;
            for (key, record) in tx.scan::<TokenRecord>(Table::Tokens, "")? {
                if record.signature.is_empty() {
                    tx.put(Table::Tokens, &key, &signed(&cipher, record))?;
                    count += 1;
                }
            }
            tx.put(Table::Meta, SIGNED_ALL, &true)?;
            Ok(count)
        })
        .await?;
    Ok(signed_now)
}

/// On the first start of an installation, with no token at all: makes the instance-admin
/// token [`FIRST_TOKEN_NAME`] and writes its secret to [`FIRST_TOKEN_FILE`] in `data_dir`,
/// owner-only. Returns the file's path when it made one.
///
/// The file is written before the token is committed: a crash in between leaves a file with
/// a secret that opens nothing, replaced at the next start.
pub async fn first_start(
    store: &Store,
    cipher: &Cipher,
    data_dir: &Path,
) -> Result<Option<PathBuf>, ServiceError> {
    let any = store
        .read(|r| {
            let first =
                r.scan_back::<serde_json::Value>(Table::Tokens, "", None, 1, 1, |_, _| true)?;
            Ok::<_, StoreError>(!first.entries.is_empty())
        })
        .await?;
    if any {
        return Ok(None);
    }
    let secret = new_secret()?;
    let path = data_dir.join(FIRST_TOKEN_FILE);
    write_private(&path, &format!("{secret}\n"))
        .map_err(|e| ServiceError::Internal(format!("cannot write {}: {e}", path.display())))?;
    let record = signed(
        cipher,
        TokenRecord {
            name: FIRST_TOKEN_NAME.into(),
            hash: hash(&secret),
            grants: Grants::instance_admin(),
            created: now_secs(),
            created_by: crate::model::access::SERVER_ACTOR.into(),
            expires: None,
            signature: String::new(),
        },
    );
    let act = Act::by_server("token.create", FIRST_TOKEN_NAME);
    let made = store
        .write(move |tx| {
            // Another server of the installation may have made the first token meanwhile.
            if tx
                .get::<TokenRecord>(Table::Tokens, FIRST_TOKEN_NAME)?
                .is_some()
            {
                return Ok::<_, ServiceError>(false);
            }
            insert(tx, &record)?;
            changes::record(tx, &act)?;
            Ok(true)
        })
        .await?;
    if !made {
        let _ = std::fs::remove_file(&path);
        return Ok(None);
    }
    Ok(Some(path))
}

/// Writes `text` to `path` through a temporary file made owner-only before anything is
/// written to it, then renamed into place.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_random_and_hashes_compare() {
        let a = new_secret().expect("secret");
        let b = new_secret().expect("secret");
        assert_ne!(a, b);
        assert_eq!(a.len(), SECRET_PREFIX.len() + 64);
        assert!(same(&hash(&a), &hash(&a)));
        assert!(!same(&hash(&a), &hash(&b)));
        assert!(!same("abc", "ab"));
        let fixed = FixedToken::new("s3cret");
        assert!(fixed.matches("s3cret"));
        assert!(!fixed.matches("s3cre") && !fixed.matches("s3cret "));
        assert_eq!(format!("{fixed:?}"), "FixedToken(..)");
    }
}
