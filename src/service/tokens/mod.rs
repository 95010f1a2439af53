//! Access tokens: made, listed, revoked, and found by the secret a request brings.
//!
//! A token's secret is 256 random bits, shown once in the answer that makes it. The store
//! keeps only its SHA-256 (a secret of 256 random bits needs no slow hash), under which the
//! token is found; the hash found is compared in constant time. Records are sealed with a key
//! derived from the installation's secure key file (`store::seal`): a token record written
//! into the store by anyone but a server of the installation (someone who reached etcd's
//! port, say) is refused, however it names itself, and one written back after it was revoked
//! is of a past access generation (`store::generation`). The web UI's sign-ins of tokens are [`sessions`].

use std::path::{Path, PathBuf};

pub mod run_tokens;
pub mod sessions;

use crate::model::access::{Act, Caller, Grants, TokenRecord, TokenSpec, TokenView};
use crate::service::error::ServiceError;
use crate::store::clock::now_secs;
use crate::store::secure::Cipher;
use crate::store::{Read, Store, StoreError, Table, changes, generation};

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

/// Stages token `record` under its name and hash, at the current access generation, unless
/// the name is taken or it grants a role in a namespace that does not exist.
fn insert(tx: &mut crate::store::Txn, record: &TokenRecord) -> Result<(), ServiceError> {
    let record = &TokenRecord {
        generation: generation::current(tx)?,
        ..record.clone()
    };
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
    let record = TokenRecord {
        name: spec.name.clone(),
        hash: hash(&secret),
        grants,
        created: now,
        created_by: caller.name.clone(),
        expires: lifetime.map(|l| now.saturating_add(l)),
        generation: 0,
        signature: String::new(),
    };
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

/// Revokes token `name`; it stops working at once, on every server, and stays revoked if its
/// record is written back (the access generation advances). A token `caller` may not
/// manage does not exist for it.
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
            generation::advance(tx)?;
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
/// the live token of the store that has it, if this installation sealed its record at the
/// current access generation; `None` when none has.
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
    let look = {
        let cipher = std::sync::Arc::clone(cipher);
        move |r: &crate::store::Reader| {
            let Some(name) = r.get::<String>(Table::TokenHashes, &hashed)? else {
                return Ok(Found::Nothing);
            };
            live(r, &cipher, &name, &hashed)
        }
    };
    let found = match store.read_within(REVOKED_WITHIN, look.clone()).await? {
        // A state up to REVOKED_WITHIN late may be older than one this server saw: look at
        // the latest before deciding that the store went back.
        Found::Behind => store.read(look).await?,
        found @ (Found::Caller(_) | Found::Nothing) => found,
    };
    Ok(found.into_caller())
}

/// What a look for a token or session found.
#[derive(Debug)]
pub enum Found {
    /// The caller it acts as.
    Caller(Caller),
    /// No live record of this installation's at the current access generation.
    Nothing,
    /// The store's access generation is below one this server saw ([`generation::Standing`]).
    Behind,
}

impl Found {
    /// The caller found, if any; a store behind this server's generation is logged.
    pub fn into_caller(self) -> Option<Caller> {
        match self {
            Found::Caller(caller) => Some(caller),
            Found::Nothing => None,
            Found::Behind => {
                generation::log_behind();
                None
            }
        }
    }
}

/// The caller of token `name` if its record is live, of the current access generation, and
/// has hash `hashed` (the store read it only if this installation sealed it).
pub fn live(r: &impl Read, cipher: &Cipher, name: &str, hashed: &str) -> Result<Found, StoreError> {
    let Some(record) = r.get::<TokenRecord>(Table::Tokens, name)? else {
        return Ok(Found::Nothing);
    };
    if !same(&record.hash, hashed) || !record.live(now_secs()) {
        return Ok(Found::Nothing);
    }
    match generation::standing(r, cipher, record.generation)? {
        generation::Standing::Holds => Ok(Found::Caller(Caller {
            name: record.name,
            grants: record.grants,
            run: None,
        })),
        generation::Standing::Stale => {
            tracing::warn!(
                token.name = %record.name,
                "a token record of a past access generation was refused: it was revoked and written back by someone writing to the store directly"
            );
            Ok(Found::Nothing)
        }
        generation::Standing::Behind => Ok(Found::Behind),
    }
}

/// On the first start of an installation, with no token at all: makes the instance-admin
/// token [`FIRST_TOKEN_NAME`] and writes its secret to [`FIRST_TOKEN_FILE`] in `data_dir`,
/// owner-only. Returns the file's path when it made one.
///
/// The file is written before the token is committed: a crash in between leaves a file with
/// a secret that opens nothing, replaced at the next start.
pub async fn first_start(store: &Store, data_dir: &Path) -> Result<Option<PathBuf>, ServiceError> {
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
    let record = TokenRecord {
        name: FIRST_TOKEN_NAME.into(),
        hash: hash(&secret),
        grants: Grants::instance_admin(),
        created: now_secs(),
        created_by: crate::model::access::SERVER_ACTOR.into(),
        expires: None,
        generation: 0,
        signature: String::new(),
    };
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
