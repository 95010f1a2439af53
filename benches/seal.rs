//! What sealing records costs the store (`store::seal`): the same records written and read
//! back through a redb store opened without the installation's key and through one that seals,
//! side by side in one build and one process.
//!
//! `cargo bench --bench seal` prints, for 20,000 records of 3 KB (a run record's size), the
//! time per record to write them (200 per write) and to read them all back in one scan, each
//! the median of 5 rounds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ebb::store::secure::Cipher;
use ebb::store::{Read as _, Store, StoreError, Table};

const RECORDS: usize = 20_000;
const PER_WRITE: usize = 200;
const ROUNDS: usize = 5;

fn record(i: usize) -> serde_json::Value {
    serde_json::json!({
        "key": {"namespace": "default", "app": "a", "program": "p", "run": format!("run-{i:06}")},
        "status": "COMPLETED",
        "profileProperties": (0..40).map(|p| serde_json::json!({
            "name": format!("property{p}"), "value": "x".repeat(40), "origin": "profile"
        })).collect::<Vec<_>>(),
    })
}

/// Writes and reads back every record; the time per record of each.
fn round(rt: &tokio::runtime::Runtime, store: &Store) -> (Duration, Duration) {
    let began = Instant::now();
    for chunk in (0..RECORDS).collect::<Vec<_>>().chunks(PER_WRITE) {
        let chunk = chunk.to_vec();
        rt.block_on(store.write(move |tx| {
            for i in &chunk {
                tx.put(Table::Runs, &format!("default/a/p/run-{i:06}"), &record(*i))?;
            }
            Ok::<_, StoreError>(())
        }))
        .expect("write");
    }
    let wrote = began.elapsed() / RECORDS as u32;
    let began = Instant::now();
    let read = rt
        .block_on(store.read(|r| r.scan::<serde_json::Value>(Table::Runs, "default/")))
        .expect("read");
    assert_eq!(read.len(), RECORDS, "every record read back");
    (wrote, began.elapsed() / RECORDS as u32)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let key = Arc::new(Cipher::load_or_create(&dir.path().join("secure.key")).expect("key"));
    for (name, sealed) in [("plain", false), ("sealed", true)] {
        let data = dir.path().join(name);
        let opened = Store::open(&data).expect("store");
        let store = match sealed {
            true => opened.sealed(Arc::clone(&key)),
            false => opened,
        };
        let (mut writes, mut reads) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let (w, r) = round(&rt, &store);
            writes.push(w);
            reads.push(r);
        }
        println!(
            "{name:>6}: write {:>6.2} µs/record, read {:>6.2} µs/record ({RECORDS} records of ~3 KB, {PER_WRITE} a write, median of {ROUNDS})",
            median(writes).as_secs_f64() * 1e6,
            median(reads).as_secs_f64() * 1e6,
        );
        rt.block_on(store.close()).expect("close");
    }
}
