//! The web UI's sessions: what a signed-in browser holds instead of its token.
//!
//! Signing in with a token begins a session: 256 random bits the browser keeps in its cookie,
//! and a record in the store, under `<token>/<SHA-256 of the session's secret>`, that names
//! the token and is bound to that token's secret, sealed by the installation like a token
//! record and of the current access generation (`store::generation`). A session acts as its
//! token for at most [`LIFETIME`] (never past the token's own expiry), ends at sign-out (for
//! good: its record written back is of a past generation), and ends with its token: a revoked
//! token takes its sessions with it, and a token made again under the same name does not
//! inherit them. The browser
//! never holds the token itself, so a cookie that leaks (browsers send a host's cookies to
//! every port of it) is not a token, and stops working when its session ends. A token has at
//! most [`MAX_PER_TOKEN`] sessions; a new one ends the oldest. A token signs in at most
//! [`SIGN_IN_BURST`] times at once and one more every [`SIGN_IN_PERIOD`] after
//! ([`SignIns`]): ending a live session advances the access generation, which reseals every
//! token and session, so signing in and out in a loop must not make that write as often as
//! a caller likes.

use std::sync::Arc;

use super::{self as tokens, FixedToken, Found, hash};
use crate::model::access::{Caller, SessionRecord};
use crate::service::error::ServiceError;
use crate::store::clock::now_secs;
use crate::store::generation;
use crate::store::secure::Cipher;
use crate::store::{Read, Store, StoreError, Table, Txn};

/// Longest a session lasts.
pub const LIFETIME: u64 = 12 * 3600;
/// Most sessions one token has at once.
pub const MAX_PER_TOKEN: usize = 16;

/// Sign-ins one token may make at once (as many as it may hold sessions).
pub const SIGN_IN_BURST: u32 = MAX_PER_TOKEN as u32;
/// How often a token may sign in again once it has used its burst.
pub const SIGN_IN_PERIOD: std::time::Duration = std::time::Duration::from_secs(10);

/// Each token's bucket of sign-ins (GCRA, as `governor` keeps them), kept by the server.
pub struct SignIns(governor::DefaultKeyedRateLimiter<String>);

impl std::fmt::Debug for SignIns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SignIns({} tokens)", self.0.len())
    }
}

impl Default for SignIns {
    fn default() -> Self {
        let quota = governor::Quota::with_period(SIGN_IN_PERIOD)
            .expect("a period above zero")
            .allow_burst(std::num::NonZeroU32::new(SIGN_IN_BURST).expect("above zero"));
        SignIns(governor::RateLimiter::keyed(quota))
    }
}

impl SignIns {
    /// Takes a sign-in from `token`'s bucket: `Err` with how long until it may sign in again.
    fn take(&self, token: &str) -> Result<(), std::time::Duration> {
        // Only tokens that authenticated get here, so the keys are bounded by the tokens.
        if self.0.len() > 10_000 {
            self.0.retain_recent();
        }
        self.0.check_key(&token.to_string()).map_err(|not_until| {
            not_until.wait_time_from(governor::clock::Clock::now(
                &governor::clock::DefaultClock::default(),
            ))
        })
    }
}

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
    sign_ins: &SignIns,
    fixed: Option<&FixedToken>,
    secret: &str,
) -> Result<Option<(Credential, Caller)>, ServiceError> {
    let Some(caller) = tokens::authenticate(store, cipher, fixed, secret).await? else {
        return Ok(None);
    };
    if let Err(wait) = sign_ins.take(&caller.name) {
        return Err(ServiceError::TooManySignIns {
            token: caller.name.clone(),
            retry_after_secs: wait.as_secs().max(1),
        });
    }
    let credential = Credential {
        token: caller.name.clone(),
        secret: tokens::random_hex()?,
    };
    let now = now_secs();
    let token_hash = hash(secret);
    let (key, name) = (credential.key(), caller.name.clone());
    store
        .write(move |tx| {
            // The token's own expiry bounds the session's.
            let token_expires = tx
                .get::<crate::model::access::TokenRecord>(Table::Tokens, &name)?
                .and_then(|t| t.expires);
            make_room(tx, &name, now)?;
            let record = SessionRecord {
                token: name.clone(),
                token_hash: token_hash.clone(),
                created: now,
                expires: token_expires.map_or(now + LIFETIME, |t| t.min(now + LIFETIME)),
                generation: generation::current(tx)?,
                signature: String::new(),
            };
            tx.put(Table::Sessions, &key, &record)?;
            Ok::<_, ServiceError>(())
        })
        .await?;
    Ok(Some((credential, caller)))
}

/// Ends the token's expired sessions, and its oldest while it has [`MAX_PER_TOKEN`] (for
/// good: the access generation advances when a live one ends).
fn make_room(tx: &mut Txn, token: &str, now: u64) -> Result<(), StoreError> {
    let mut held = tx.scan::<SessionRecord>(Table::Sessions, &format!("{token}/"))?;
    held.sort_by_key(|(_, s)| s.created);
    let mut left = held.len();
    let mut ended_live = false;
    for (key, session) in held {
        if session.expires > now && left < MAX_PER_TOKEN {
            continue;
        }
        ended_live |= session.expires > now;
        tx.delete(Table::Sessions, &key);
        left -= 1;
    }
    if ended_live {
        generation::advance(tx)?;
    }
    Ok(())
}

/// The caller session `credential` acts as, if it is live, sealed by this installation at the
/// current access generation, and its token still works with the secret it began with.
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
    let found = store
        .read(move |r| {
            let Some(session) = r.get::<SessionRecord>(Table::Sessions, &key)? else {
                return Ok(Found::Nothing);
            };
            if session.token != token || session.expires <= now_secs() {
                return Ok(Found::Nothing);
            }
            match generation::standing(r, &cipher, session.generation)? {
                generation::Standing::Holds => {}
                generation::Standing::Stale => {
                    tracing::warn!(
                        token.name = %token,
                        "a session record of a past access generation was refused: it was ended and written back by someone writing to the store directly"
                    );
                    return Ok(Found::Nothing);
                }
                generation::Standing::Behind => return Ok(Found::Behind),
            }
            if token == Caller::SERVE_TOKEN {
                return Ok(fixed
                    .as_ref()
                    .filter(|f| f.has_hash(&session.token_hash))
                    .map_or(Found::Nothing, |_| {
                        Found::Caller(Caller::instance_admin(Caller::SERVE_TOKEN))
                    }));
            }
            tokens::live(r, &cipher, &token, &session.token_hash)
        })
        .await?;
    Ok(found.into_caller())
}

/// Ends session `credential` (signing out), for good: the access generation advances.
/// Ending one that is gone does nothing.
pub async fn end(store: &Store, credential: &Credential) -> Result<(), StoreError> {
    let key = credential.key();
    store
        .write(move |tx| {
            if tx.get::<SessionRecord>(Table::Sessions, &key)?.is_some() {
                tx.delete(Table::Sessions, &key);
                generation::advance(tx)?;
            }
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
