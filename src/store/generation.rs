//! The access generation: why a token or session record written back into the store after
//! it was revoked or ended stays revoked.
//!
//! Records are sealed (`store::seal`), so nobody but a server of the installation can make
//! one; but someone who can write the store's keys can put back a sealed record as it was
//! before (a revoked token's, a signed-out session's). Every token and session record
//! therefore carries the installation's access generation, a counter in `Meta`, and works only
//! while its generation is the current one. Whatever takes a grant away (revoking a token,
//! ending a session before its time) advances the generation and reseals every record left
//! at the new one, in the same write: a record put back carries an old generation. Putting
//! the counter back as well is caught by every server that saw the later one: each keeps
//! the highest it has seen ([`Cipher::generation_holds`]) and refuses every token and session
//! while the store's is below it.

use super::cipher::Cipher;
use super::{Read, StoreError, Table, Txn};
use crate::model::access::{SessionRecord, TokenRecord};

/// The `Meta` key of the access generation.
pub const KEY: &str = "access_generation";

/// The installation's access generation (0 until something was first revoked).
pub fn current(r: &impl Read) -> Result<u64, StoreError> {
    Ok(r.get::<u64>(Table::Meta, KEY)?.unwrap_or(0))
}

/// Advances the access generation in write `tx`, after what it staged took a grant away,
/// and reseals every token and live session left at the new one (expired sessions go).
pub fn advance(tx: &mut Txn) -> Result<u64, StoreError> {
    let next = current(tx)?.saturating_add(1);
    tx.put(Table::Meta, KEY, &next)?;
    for (key, mut record) in tx.scan::<TokenRecord>(Table::Tokens, "")? {
        record.generation = next;
        tx.put(Table::Tokens, &key, &record)?;
    }
    // An expired session is dropped rather than sealed again: a sign-out's write grows with
    // the live sessions only.
    let now = crate::store::clock::now_secs();
    for (key, mut record) in tx.scan::<SessionRecord>(Table::Sessions, "")? {
        if record.expires <= now {
            tx.delete(Table::Sessions, &key);
            continue;
        }
        record.generation = next;
        tx.put(Table::Sessions, &key, &record)?;
    }
    Ok(next)
}

/// How a token or session record of generation `record` stands in a state of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// It is of the current generation, and the store's is not behind this server's.
    Holds,
    /// It is of another generation: revoked or ended, and written back.
    Stale,
    /// The store's generation is below the highest this server has seen: the state read is
    /// older than one this server saw (a read of another server's state, up to
    /// `service::tokens::REVOKED_WITHIN` late), or someone set the store back.
    Behind,
}

/// How a record of generation `record` stands in the state `r` reads.
pub fn standing(r: &impl Read, cipher: &Cipher, record: u64) -> Result<Standing, StoreError> {
    let current = current(r)?;
    if !cipher.generation_holds(current) {
        return Ok(Standing::Behind);
    }
    Ok(if record == current {
        Standing::Holds
    } else {
        Standing::Stale
    })
}

/// Logs a store whose access generation is behind this server's, read fresh.
pub fn log_behind() {
    tracing::error!(
        "the store's access generation is below one this server saw: token and session records were set back by someone writing to the store directly; every token and session is refused until it is restored"
    );
}
