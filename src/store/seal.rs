//! Record seals: what makes a writer of the store (someone who reached etcd's port with write
//! access) less than an administrator of ebb.
//!
//! Every record of a sealed table ([`Table::sealed`]) is kept as
//! `{"seal":"<HMAC-SHA256, hex>","value":<the record>}`, the HMAC taken with a key derived from
//! the installation's key file over the table's name, the record's key and the record's JSON.
//! A record is read only if its seal is this installation's for that table and key: one
//! written by anyone else, or moved from another key, is refused as if it were absent, and
//! logged. The seal goes on in [`super::Txn::put`] and comes off in every typed read, so no
//! service can forget it; the backends keep the bytes as they are.
//!
//! A seal does not stop a record being written back over a newer one (a replay): the
//! records whose replay would grant what was taken away (tokens, sessions) carry a
//! generation besides (`store::generation`).
//!
//! Stores of schema version 2 hold records without seals: `store::migrate` seals them all
//! and bumps the version in one write, once.

use super::cipher::Cipher;
use super::table::Table;

/// What a sealed record begins with.
const HEAD: &[u8] = br#"{"seal":""#;
/// What follows the seal.
const MID: &[u8] = br#"","value":"#;
/// The seal's length in hex digits.
const SEAL_HEX: usize = 64;
/// The length of everything before the record.
const PREFIX: usize = HEAD.len() + SEAL_HEX + MID.len();

/// What a record's seal is made under.
const RECORD_SEAL: &str = "record";

/// What the seal of `json` under `key` of `table` covers.
fn covered(table: Table, key: &str, json: &[u8]) -> Vec<u8> {
    let mut data = Vec::with_capacity(table.name().len() + key.len() + json.len() + 2);
    data.extend_from_slice(table.name().as_bytes());
    data.push(0);
    data.extend_from_slice(key.as_bytes());
    data.push(0);
    data.extend_from_slice(json);
    data
}

/// `json`, sealed as the record under `key` of `table`.
pub(super) fn wrap(cipher: &Cipher, table: Table, key: &str, json: &[u8]) -> Vec<u8> {
    let seal = cipher.sign(RECORD_SEAL, &covered(table, key, json));
    let mut out = Vec::with_capacity(PREFIX + json.len() + 1);
    out.extend_from_slice(HEAD);
    out.extend_from_slice(seal.as_bytes());
    out.extend_from_slice(MID);
    out.extend_from_slice(json);
    out.push(b'}');
    out
}

/// The seal and the record of `bytes`, if they are in a seal's shape.
fn parts(bytes: &[u8]) -> Option<(&str, &[u8])> {
    if bytes.len() <= PREFIX || !bytes.starts_with(HEAD) || bytes.last() != Some(&b'}') {
        return None;
    }
    let seal = std::str::from_utf8(&bytes[HEAD.len()..HEAD.len() + SEAL_HEX]).ok()?;
    if &bytes[HEAD.len() + SEAL_HEX..PREFIX] != MID {
        return None;
    }
    Some((seal, &bytes[PREFIX..bytes.len() - 1]))
}

/// The record in `bytes` without looking at its seal: for what only decides whether to look
/// closer (a backend's wake-up), never for what is acted on.
pub fn unchecked(bytes: &[u8]) -> &[u8] {
    parts(bytes).map_or(bytes, |(_, record)| record)
}

/// The record in `bytes`, read under `key` of `table`, as a store with `cipher` (or none, for
/// tools and tests that open a store without the key) may read it: `None` if the record
/// needs a seal and has none of this installation's for that key.
pub(super) fn open<'a>(
    cipher: Option<&Cipher>,
    table: Table,
    key: &str,
    bytes: &'a [u8],
) -> Option<&'a [u8]> {
    let Some(cipher) = cipher else {
        return Some(unchecked(bytes));
    };
    if !table.sealed(key) {
        return Some(unchecked(bytes));
    }
    match parts(bytes) {
        Some((seal, record)) if cipher.verify(RECORD_SEAL, &covered(table, key, record), seal) => {
            Some(record)
        }
        _ => {
            tracing::error!(
                store.table = table.name(),
                store.key = key,
                "a record this installation did not seal was refused: someone wrote to the store directly"
            );
            None
        }
    }
}

/// Whether `bytes` hold a record sealed by `cipher` under `key` of `table`.
pub(super) fn sealed_by(cipher: &Cipher, table: Table, key: &str, bytes: &[u8]) -> bool {
    parts(bytes).is_some_and(|(seal, record)| {
        cipher.verify(RECORD_SEAL, &covered(table, key, record), seal)
    })
}

/// Checks the seals of a store's own tests.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_holds_for_its_record_table_and_key_only() {
        let cipher = Cipher::ephemeral();
        let json = br#"{"name":"a","hostPrograms":false}"#;
        let bytes = wrap(&cipher, Table::Apps, "default/a", json);
        assert!(serde_json::from_slice::<serde_json::Value>(&bytes).is_ok());
        let open = |c: &Cipher, t, k: &str, b: &[u8]| open(Some(c), t, k, b).map(<[u8]>::to_vec);
        assert_eq!(
            open(&cipher, Table::Apps, "default/a", &bytes),
            Some(json.to_vec())
        );
        // Another key, another table, another installation, a changed record, no seal.
        assert_eq!(open(&cipher, Table::Apps, "default/b", &bytes), None);
        assert_eq!(open(&cipher, Table::Profiles, "default/a", &bytes), None);
        assert_eq!(
            open(&Cipher::ephemeral(), Table::Apps, "default/a", &bytes),
            None
        );
        let changed = String::from_utf8(bytes.clone())
            .expect("utf-8")
            .replace("false", "true ");
        assert_eq!(
            open(&cipher, Table::Apps, "default/a", changed.as_bytes()),
            None
        );
        assert_eq!(open(&cipher, Table::Apps, "default/a", json), None);
        // What needs no seal is read with or without one; a store without the key reads
        // the record inside.
        assert_eq!(
            open(&cipher, Table::Events, "r/1", json),
            Some(json.to_vec())
        );
        assert_eq!(
            super::open(None, Table::Apps, "default/a", &bytes),
            Some(&json[..])
        );
        assert_eq!(unchecked(json), &json[..]);
    }
}
