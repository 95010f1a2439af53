//! What the records of a store of schema version 2 become when the store is sealed
//! (`store::seal::seal_installation`), once, at the first start of this version:
//!
//! - token and session records the installation did not sign are deleted, not sealed (that
//!   version refused them already: [`legacy_kept`]);
//! - an app keeps its approval for the server's host only if an instance admin deployed it;
//!   one approved because its namespace allowed host programs then loses it, and runs on the
//!   host while the namespace allows them now ([`app`]).

use crate::model::access::{Caller, SessionRecord, TokenRecord};
use crate::model::app::App;
use crate::store::secure::Cipher;
use crate::store::{Read, Table, Txn};

/// What session records of schema 2 stores were signed under.
const LEGACY_SESSION: &str = "session";

/// Record `bytes` under `key` of `table` as it is to be sealed, or `None` to delete it.
pub fn record(
    tx: &Txn,
    cipher: &Cipher,
    table: Table,
    key: &str,
    bytes: Vec<u8>,
) -> Option<Vec<u8>> {
    // Three tables change; every other record is sealed as it is.
    if table == Table::Tokens || table == Table::Sessions {
        return legacy_kept(tx, cipher, table, key, &bytes).then_some(bytes);
    }
    if table == Table::Apps {
        return Some(app(tx, bytes));
    }
    Some(bytes)
}

/// An app record as it is to be sealed: approved for the host only if whoever deployed it
/// is an instance admin (the server's own token, an instance-admin token that still is one,
/// or nobody named: deployed before access control, by the one admin there was).
fn app(tx: &Txn, bytes: Vec<u8>) -> Vec<u8> {
    let Ok(mut app) = serde_json::from_slice::<App>(&bytes) else {
        return bytes;
    };
    if !app.host_programs {
        return bytes;
    }
    let by_instance_admin = match app.deployed_by.as_deref() {
        None | Some(Caller::SERVE_TOKEN) => true,
        Some(name) => tx
            .get::<TokenRecord>(Table::Tokens, name)
            .ok()
            .flatten()
            .is_some_and(|t| t.grants.instance_admin),
    };
    if by_instance_admin {
        return bytes;
    }
    app.host_programs = false;
    serde_json::to_vec(&app).unwrap_or(bytes)
}

/// The `Meta` key a schema 2 store has once its token records were signed.
const SIGNED_ALL: &str = "tokens_signed";

/// Whether a token or session record of a schema 2 store (bytes under `key` of `table`) may
/// be sealed when the store is (`store::migrate::seal_installation`): such records were signed
/// one by one, and one without this installation's signature was refused then, so it is
/// not sealed now. Token records of a store from before tokens were signed (no
/// `tokens_signed` mark) are all kept, as they worked then. Other tables' records are kept.
fn legacy_kept(r: &impl Read, cipher: &Cipher, table: Table, key: &str, bytes: &[u8]) -> bool {
    if table == Table::Tokens {
        let Ok(record) = serde_json::from_slice::<TokenRecord>(bytes) else {
            return false;
        };
        let signed_then = r
            .get::<bool>(Table::Meta, SIGNED_ALL)
            .ok()
            .flatten()
            .is_some();
        return !signed_then || cipher.legacy_token_is_genuine(&record);
    }
    if table == Table::Sessions {
        return serde_json::from_slice::<SessionRecord>(bytes).is_ok_and(|session| {
            cipher.verify(LEGACY_SESSION, &session.signed(key), &session.signature)
        });
    }
    true
}
