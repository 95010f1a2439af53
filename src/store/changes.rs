//! The audit log of changes: who (a token's name) changed what. An entry is staged in the
//! same write as the change it records, so the log and the state never disagree, and a
//! change a crash undid leaves no entry.

use crate::model::access::{Act, AuditEntry};
use crate::model::profile::SYSTEM_NAMESPACE;
use crate::store::events::next_seq;
use crate::store::{Reader, StoreError, Table, Txn, keys};

/// Stages the entry of `act`.
pub fn record(tx: &mut Txn, act: &Act) -> Result<(), StoreError> {
    let seq = next_seq();
    let entry = AuditEntry {
        seq,
        time: seq as f64 / 1e6,
        act: act.clone(),
    };
    let ns = act.namespace.as_deref().unwrap_or(SYSTEM_NAMESPACE);
    tx.put(Table::Changes, &keys::change(ns, seq), &entry)
}

/// A page of the changes of namespace `ns` (`None`: the instance-wide ones), newest first:
/// at most `limit`, older than entry `before` if given, none older than `since` (epoch
/// seconds). Returns the entries and the `before` of the next page, if there is one.
pub fn list(
    r: &Reader,
    ns: Option<&str>,
    since: f64,
    before: Option<u64>,
    limit: usize,
) -> Result<(Vec<AuditEntry>, Option<u64>), StoreError> {
    let ns = ns.unwrap_or(SYSTEM_NAMESPACE);
    let prefix = keys::in_namespace(ns);
    let before = before.map(|seq| keys::change(ns, seq));
    // Entries come newest first, so those after `since` are the first ones read: reading
    // `limit` entries is enough.
    let page = r.scan_back::<AuditEntry>(
        Table::Changes,
        &prefix,
        before.as_deref(),
        limit,
        limit,
        |_, e| e.time >= since,
    )?;
    let entries: Vec<AuditEntry> = page.entries.into_iter().map(|(_, e)| e).collect();
    let next = match page.next {
        Some(_) if entries.len() == limit => entries.last().map(|e| e.seq),
        _ => None,
    };
    Ok((entries, next))
}
