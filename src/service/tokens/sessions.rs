//! The web UI's sessions: what a signed-in browser holds instead of its token.
//!
//! Signing in with a token begins a session: 256 random bits the browser keeps in its cookie,
//! and a record in the store, under `<token>/<SHA-256 of the session's secret>`, that names
//! the token and is bound to that token's secret, signed by the installation like a token
//! record. A session acts as its token for at most [`LIFETIME`] (never past the token's own
//! expiry), ends at sign-out, and ends with its token: a revoked token takes its sessions
//! with it, and a token made again under the same name does not inherit them. The browser
//! never holds the token itself, so a cookie that leaks (browsers send a host's cookies to
//! every port of it) is not a token, and stops working when its session ends. A token has at
//! most [`MAX_PER_TOKEN`] sessions; a new one ends the oldest.

use std::sync::Arc;

use super::{self as tokens, FixedToken, hash};
use crate::model::access::{Caller, SessionRecord};
use crate::runtime::clock::now_secs;
use crate::service::error::ServiceError;
use crate::store::secure::Cipher;
use crate::store::{Read, Store, StoreError, Table, Txn};

/// Longest a session lasts.
pub const LIFETIME: u64 = 12 * 3600;
/// Most sessions one token has at once.
pub const MAX_PER_TOKEN: usize = 16;

/// What session signatures are made under.
const SIGNED_AS: &str = "session";

/// A session's credential as the browser keeps it: `<token name>.<secret>`. Its `Debug`
/// hides the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    token: String,
    secret: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credential({}.., ..)", self.token)
    }
}

impl Credential {
    /// Parses a cookie's value; `None` unless it has the shape of a credential.
    pub fn parse(value: &str) -> Option<Credential> {
        let (token, secret) = value.rsplit_once('.')?;
        let hex = secret.len() == 64 && secret.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex || crate::model::names::check("token", token).is_err() {
            return None;
        }
        Some(Credential {
            token: token.to_string(),
            secret: secret.to_string(),
        })
    }

    /// The value the browser keeps.
    pub fn value(&self) -> String {
        format!("{}.{}", self.token, self.secret)
    }

    /// Its record's key in the store.
    fn key(&self) -> String {
        format!("{}/{}", self.token, hash(&self.secret))
    }
}

/// Begins a session for the token whose secret is `secret`, if that token works: the
/// credential and the caller it acts as.
pub async fn begin(
    store: &Store,
    cipher: &Arc<Cipher>,
    fixed: Option<&FixedToken>,
    secret: &str,
) -> Result<Option<(Credential, Caller)>, ServiceError> {
    let Some(caller) = tokens::authenticate(store, cipher, fixed, secret).await? else {
        return Ok(None);
    };
    let credential = Credential {
        token: caller.name.clone(),
        secret: tokens::random_hex()?,
    };
    let now = now_secs();
    let token_hash = hash(secret);
    let (cipher, key, name) = (Arc::clone(cipher), credential.key(), caller.name.clone());
    store
        .write(move |tx| {
            // The token's own expiry bounds the session's.
            let token_expires = tx
                .get::<crate::model::access::TokenRecord>(Table::Tokens, &name)?
                .and_then(|t| t.expires);
            let mut record = SessionRecord {
                token: name.clone(),
                token_hash: token_hash.clone(),
                created: now,
                expires: token_expires.map_or(now + LIFETIME, |t| t.min(now + LIFETIME)),
                signature: String::new(),
            };
            record.signature = cipher.sign(SIGNED_AS, &record.signed(&key));
            make_room(tx, &name, now)?;
            tx.put(Table::Sessions, &key, &record)?;
            Ok::<_, ServiceError>(())
        })
        .await?;
    Ok(Some((credential, caller)))
}

/// Ends the token's expired sessions, and its oldest while it has [`MAX_PER_TOKEN`].
fn make_room(tx: &mut Txn, token: &str, now: u64) -> Result<(), StoreError> {
    let mut held = tx.scan::<SessionRecord>(Table::Sessions, &format!("{token}/"))?;
    held.sort_by_key(|(_, s)| s.created);
    let mut left = held.len();
    for (key, session) in held {
        if session.expires > now && left < MAX_PER_TOKEN {
            continue;
        }
        tx.delete(Table::Sessions, &key);
        left -= 1;
    }
    Ok(())
}

/// The caller session `credential` acts as, if it is live, signed by this installation, and
/// its token still works with the secret it began with.
pub async fn caller(
    store: &Store,
    cipher: &Arc<Cipher>,
    fixed: Option<&FixedToken>,
    credential: &Credential,
) -> Result<Option<Caller>, StoreError> {
    let key = credential.key();
    let token = credential.token.clone();
    let cipher = Arc::clone(cipher);
    let fixed = fixed.cloned();
    store
        .read(move |r| {
            let Some(session) = r.get::<SessionRecord>(Table::Sessions, &key)? else {
                return Ok(None);
            };
            let signed = cipher.verify(SIGNED_AS, &session.signed(&key), &session.signature);
            if !signed || session.token != token || session.expires <= now_secs() {
                return Ok(None);
            }
            if token == Caller::SERVE_TOKEN {
                return Ok(fixed
                    .as_ref()
                    .filter(|f| f.has_hash(&session.token_hash))
                    .map(|_| Caller::instance_admin(Caller::SERVE_TOKEN)));
            }
            tokens::live(r, &cipher, &token, &session.token_hash)
        })
        .await
}

/// Ends session `credential` (signing out). Ending one that is gone does nothing.
pub async fn end(store: &Store, credential: &Credential) -> Result<(), StoreError> {
    let key = credential.key();
    store
        .write(move |tx| {
            tx.delete(Table::Sessions, &key);
            Ok(())
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_have_one_shape() {
        let secret = "a".repeat(64);
        let c = Credential::parse(&format!("ci-bot.{secret}")).expect("parses");
        assert_eq!(c.value(), format!("ci-bot.{secret}"));
        assert_eq!(c.key(), format!("ci-bot/{}", hash(&secret)));
        assert!(!format!("{c:?}").contains(&secret));
        for bad in [
            String::new(),
            secret.clone(),
            format!("ci-bot.{}", &secret[..63]),
            format!("ci-bot.{}g", &secret[..63]),
            format!("../x.{secret}"),
            format!(".{secret}"),
            format!("ebb_{secret}"),
        ] {
            assert_eq!(Credential::parse(&bad), None, "{bad}");
        }
    }
}
