//! The sweep of chunks no value points to.
//!
//! A write drops a key's chunks in its own transaction when its closure read the key and found
//! a large value there. A write that did not read the key (an append to a history, a record
//! written blind) does not look, and most never had chunks: dropping a chunk range with each of
//! them doubled the operations of a lifecycle's transactions. What such a write leaves, and
//! what a commit that failed after its chunks were written leaves, is an orphan: chunks of a
//! generation the key does not point to. Nothing reads them (a reader follows the pointer), and
//! this sweep drops them once their generation is old enough that no write still on its way can
//! own it. A generation is a UUIDv7, so its first 48 bits are when it was made.

use std::collections::{BTreeMap, BTreeSet};

use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, Txn, TxnOp};

use super::shared::{Shared, Trip, prefix_end};
use super::view::{CHUNKED, Pointer};
use crate::store::table::{StoreError, Table};

/// Most chunk keys one sweep looks at; the rest wait for the next.
const MAX_SWEPT: usize = 100_000;

/// Chunk keys fetched per request.
const PAGE: i64 = 1000;

/// One chunk key taken apart: the table and key of the value it belongs to, and its
/// generation.
#[derive(Debug, PartialEq, Eq)]
struct Chunk<'k> {
    table: Table,
    key: &'k str,
    generation: &'k str,
}

/// `rest` (a chunk key without `<root>/~chunks/`: `<table>/<key>\0<generation>\0<n>`) taken
/// apart, if it is one.
fn parse(rest: &[u8]) -> Option<Chunk<'_>> {
    let rest = std::str::from_utf8(rest).ok()?;
    let (table, rest) = rest.split_once('/')?;
    let mut parts = rest.split('\0');
    let (key, generation, n) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || n.is_empty() {
        return None;
    }
    Some(Chunk {
        table: Table::named(table)?,
        key,
        generation,
    })
}

/// When generation `generation` (a UUIDv7 in simple form) was made, in milliseconds since the
/// epoch.
fn made_ms(generation: &str) -> Option<u64> {
    u64::from_str_radix(generation.get(..12)?, 16).ok()
}

impl Shared {
    /// Drops the chunks of every generation made before `before_ms` (milliseconds since the
    /// epoch) that its key does not point to; answers how many generations went. Each drop is
    /// a transaction that compares the key as it was read, so a key rewritten meanwhile keeps
    /// its chunks until the next sweep looks again.
    pub(super) async fn sweep_chunks(&self, before_ms: u64) -> Result<usize, StoreError> {
        let root = self.keys.chunks_root();
        let end = prefix_end(&root);
        let mut stale: BTreeMap<(Table, String), BTreeSet<String>> = BTreeMap::new();
        let mut start = root.clone();
        let mut seen = 0;
        loop {
            let options = GetOptions::new()
                .with_range(end.clone())
                .with_keys_only()
                .with_limit(PAGE);
            self.trip(Trip::Read);
            let page = self
                .kv()
                .get(start.clone(), Some(options))
                .await
                .map_err(|e| self.unavailable(&e))?;
            for kv in page.kvs() {
                seen += 1;
                let Some(chunk) = kv.key().strip_prefix(root.as_slice()).and_then(parse) else {
                    continue;
                };
                if made_ms(chunk.generation).is_some_and(|ms| ms < before_ms) {
                    stale
                        .entry((chunk.table, chunk.key.to_string()))
                        .or_default()
                        .insert(chunk.generation.to_string());
                }
            }
            match page.kvs().last() {
                Some(last) if page.more() && seen < MAX_SWEPT => {
                    start = last.key().to_vec();
                    start.push(0);
                }
                _ => break,
            }
        }
        let mut dropped = 0;
        for ((table, key), generations) in stale {
            let base = self.keys.of(table, &key);
            self.trip(Trip::Read);
            let found = self
                .kv()
                .get(base.clone(), None)
                .await
                .map_err(|e| self.unavailable(&e))?;
            let (revision, pointed) = match found.kvs().first() {
                Some(kv) => (kv.mod_revision(), pointed_to(kv.value())),
                None => (0, None),
            };
            let drops: Vec<TxnOp> = generations
                .iter()
                .filter(|g| pointed.as_deref() != Some(g.as_str()))
                .map(|generation| {
                    let (from, to) = self.keys.generation_chunks(table, &key, generation);
                    TxnOp::delete(from, Some(DeleteOptions::new().with_range(to)))
                })
                .collect();
            if drops.is_empty() {
                continue;
            }
            let count = drops.len();
            let mut then = drops;
            then.push(TxnOp::put(self.keys.swept(), Vec::new(), None));
            // Never while an intent is pending: its batches may point the key at one of these
            // generations once they are applied.
            let txn = Txn::new()
                .when([
                    Compare::mod_revision(base, CompareOp::Equal, revision),
                    self.none_pending(),
                ])
                .and_then(then);
            self.trip(Trip::Chunk);
            let answer = self.kv().txn(txn).await.map_err(|e| self.unavailable(&e))?;
            if answer.succeeded() {
                dropped += count;
            }
        }
        Ok(dropped)
    }
}

/// The generation a stored value points to, if it is kept in chunks.
fn pointed_to(stored: &[u8]) -> Option<String> {
    let pointer = stored.strip_prefix(&[CHUNKED])?;
    serde_json::from_slice::<Pointer>(pointer)
        .ok()
        .map(|p| p.generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_key_is_taken_apart_into_its_value_and_generation() {
        let generation = uuid::Uuid::now_v7().simple().to_string();
        let key = format!("operations/run/000001\x00{generation}\x00000002");
        assert_eq!(
            parse(key.as_bytes()),
            Some(Chunk {
                table: Table::Operations,
                key: "run/000001",
                generation: &generation,
            })
        );
        for bad in [
            "operations/run/000001",
            "operations/run/000001\x00gen",
            "nosuchtable/k\x00gen\x00000001",
            "operations/k\x00gen\x00",
            "operations/k\x00gen\x00001\x00extra",
        ] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad:?}");
        }
    }

    /// A generation tells when it was made, to the millisecond.
    #[test]
    fn a_generation_tells_when_it_was_made() {
        let ms = 1_795_686_527_398u64;
        let generation = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
            uuid::NoContext,
            ms / 1000,
            (ms % 1000) as u32 * 1_000_000,
        ))
        .simple()
        .to_string();
        assert_eq!(made_ms(&generation), Some(ms));
        assert_eq!(made_ms("short"), None);
        assert_eq!(made_ms("zzzzzzzzzzzzzzzz"), None);
    }

    #[test]
    fn only_a_chunked_value_points_to_a_generation() {
        let mut stored = vec![CHUNKED];
        stored.extend_from_slice(br#"{"generation":"g1","chunks":2,"len":300000}"#);
        assert_eq!(pointed_to(&stored).as_deref(), Some("g1"));
        assert_eq!(pointed_to(br#"{"generation":"g1"}"#), None);
        assert_eq!(pointed_to(b""), None);
    }
}
