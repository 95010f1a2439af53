//! The etcd store itself, on real etcd servers whatever `EBB_TEST_STORE` says: optimistic
//! concurrency between two servers' stores, large values, etcd going away and coming back,
//! a three-member cluster losing a member, and copying an installation from redb to etcd.

use std::time::{Duration, Instant};

use ebb::store::{Read, SPLIT_WRITES, Store, StoreError, Table};
use serde_json::json;

use crate::support::etcd::Cluster;
use crate::support::profiles::sim_profile;
use crate::support::runs::{
    assert_all_completed, assert_clean, deploy, start, sub, wait_deprovisioned, wait_for_call,
    wait_until,
};
use crate::support::server::{Options, Server, run_ebb};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn open(cluster: &Cluster, prefix: &str) -> Store {
    Store::open_at(&cluster.location(prefix)).expect("open etcd store")
}

/// Two stores on one installation (as two servers would hold) add to one counter and insert
/// under a limit, concurrently: every write that was answered OK counts once, and the limit
/// a check-then-write enforces holds across both.
#[test]
fn concurrent_writers_from_two_stores_lose_nothing_and_keep_limits() {
    let cluster = Cluster::start(1);
    let (a, b) = (
        open(&cluster, "/ebb-test/race"),
        open(&cluster, "/ebb-test/race"),
    );
    rt().block_on(async {
        let mut handles = Vec::new();
        for i in 0..120 {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            handles.push(tokio::spawn(async move {
                store
                    .write(move |tx| {
                        let n: u64 = tx.get(Table::Meta, "counter")?.unwrap_or(0);
                        tx.put(Table::Meta, "counter", &(n + 1))?;
                        // At most 10 entries under "slot/": the scan is part of what is compared.
                        let taken = tx.scan::<u64>(Table::Meta, "slot/")?.len();
                        if taken < 10 {
                            tx.put(Table::Meta, &format!("slot/{i:03}"), &i)?;
                        }
                        Ok::<_, StoreError>(())
                    })
                    .await
            }));
        }
        for h in handles {
            h.await.expect("join").expect("write");
        }
        let (counter, slots) = a
            .read(|r| {
                let n: Option<u64> = r.get(Table::Meta, "counter")?;
                Ok::<_, StoreError>((n, r.scan::<u64>(Table::Meta, "slot/")?.len()))
            })
            .await
            .expect("read");
        assert_eq!(counter, Some(120), "every increment counted once");
        assert_eq!(slots, 10, "the limit held across both stores");
        // A delete in a scanned range conflicts too: freeing one slot lets exactly one in.
        a.write(|tx| {
            let first = tx.scan::<u64>(Table::Meta, "slot/")?[0].0.clone();
            tx.delete(Table::Meta, &first);
            Ok::<_, StoreError>(())
        })
        .await
        .expect("free a slot");
        let mut handles = Vec::new();
        for i in 200..210 {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            handles.push(tokio::spawn(async move {
                store
                    .write(move |tx| {
                        if tx.scan::<u64>(Table::Meta, "slot/")?.len() < 10 {
                            tx.put(Table::Meta, &format!("slot/{i:03}"), &i)?;
                        }
                        Ok::<_, StoreError>(())
                    })
                    .await
            }));
        }
        for h in handles {
            h.await.expect("join").expect("write");
        }
        let slots = b
            .read(|r| r.scan::<u64>(Table::Meta, "slot/"))
            .await
            .expect("read");
        assert_eq!(slots.len(), 10, "{slots:?}");
    });
}

/// Many writers append to one run's history at once while a reader follows it by sequence
/// (as a long poll does, asking only for events after the last it saw): the reader misses
/// none, and etcd holds the history in the order of its sequence. Appends commit in the order
/// their sequence numbers were drawn, from the first write on (while the copy in memory is
/// still being read) and with several groups committing at once.
#[test]
fn a_history_followed_by_sequence_misses_no_concurrent_append() {
    use ebb::model::event::EventKind;
    use ebb::store::events;
    const WRITERS: usize = 16;
    const EACH: usize = 25;
    let cluster = Cluster::start(1);
    let store = open(&cluster, "/ebb-test/history");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    rt().block_on(async {
        let reader = {
            let (store, seen) = (store.clone(), std::sync::Arc::clone(&seen));
            tokio::spawn(async move {
                let mut after = 0u64;
                while seen.lock().expect("seen").len() < WRITERS * EACH {
                    let new = store
                        .read(move |r| events::list(r, "run-1", after))
                        .await
                        .expect("read the history");
                    for e in new {
                        assert!(e.seq > after, "events came out of order");
                        after = e.seq;
                        seen.lock().expect("seen").push(e.message);
                    }
                    tokio::task::yield_now().await;
                }
            })
        };
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let store = store.clone();
                tokio::spawn(async move {
                    for i in 0..EACH {
                        store
                            .write(move |tx| {
                                // Each write touches a key of its own too, as a task's does.
                                tx.put(Table::Meta, &format!("writer/{w:02}"), &i)?;
                                events::append(
                                    tx,
                                    "run-1",
                                    EventKind::Task,
                                    None,
                                    format!("{w}/{i}"),
                                )
                            })
                            .await
                            .expect("append");
                    }
                })
            })
            .collect();
        for w in writers {
            w.await.expect("writer");
        }
        // The reader stops once it saw them all; one that missed some never does.
        let _ = tokio::time::timeout(Duration::from_secs(20), reader).await;
    });
    let seen = seen.lock().expect("seen").clone();
    let distinct: std::collections::BTreeSet<&String> = seen.iter().collect();
    assert_eq!(
        (seen.len(), distinct.len()),
        (WRITERS * EACH, WRITERS * EACH),
        "the reader missed events that committed after a later one"
    );
    let revisions: Vec<i64> = cluster.admin(|mut c| async move {
        let found = c
            .get(
                "/ebb-test/history/events/run-1/",
                Some(etcd_client::GetOptions::new().with_prefix()),
            )
            .await?;
        Ok(found.kvs().iter().map(|kv| kv.mod_revision()).collect())
    });
    assert!(
        revisions.is_sorted(),
        "events committed out of sequence order: {revisions:?}"
    );
}

/// A value larger than etcd takes in one request is split across keys and read back whole.
/// Rewriting it small or deleting it drops its chunks: at once when the write read it, and
/// by the sweep of orphans when the write did not look (a blind put leaves them, and nothing
/// reads them); the sweep keeps the chunks a value points to.
#[test]
fn a_large_value_is_split_never_truncated() {
    let cluster = Cluster::start(1);
    let store = open(&cluster, "/ebb-test/large");
    let big: String = (0..3_000_000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let chunks_of = |key: &str| {
        crate::support::etcd::count_keys(
            &cluster,
            &format!("/ebb-test/large/~chunks/operations/{key}"),
        )
    };
    rt().block_on(async {
        for key in ["run/000001", "run/000002", "run/000003", "run/000004"] {
            let value = big.clone();
            store
                .write(move |tx| tx.put(Table::Operations, key, &value))
                .await
                .expect("write a 3 MB value");
        }
        let back: Option<String> = store
            .read(|r| r.get(Table::Operations, "run/000001"))
            .await
            .expect("read");
        assert_eq!(back.as_deref().map(str::len), Some(big.len()));
        assert!(
            back.as_deref() == Some(big.as_str()),
            "the value came back changed"
        );
        let scanned: Vec<(String, String)> = store
            .read(|r| r.scan(Table::Operations, "run/"))
            .await
            .expect("scan");
        assert_eq!(scanned.len(), 4);
        assert!(scanned.iter().all(|(_, v)| v.len() == big.len()));
        // Read, then rewritten small or deleted: the chunks go with the write.
        store
            .write(|tx| {
                let _: Option<String> = tx.get(Table::Operations, "run/000001")?;
                let _: Option<String> = tx.get(Table::Operations, "run/000002")?;
                tx.put(Table::Operations, "run/000001", &"small")?;
                tx.delete(Table::Operations, "run/000002");
                Ok::<_, StoreError>(())
            })
            .await
            .expect("rewrite after a read");
    });
    assert_eq!(chunks_of("run/000001"), 0, "a rewrite left chunks behind");
    assert_eq!(chunks_of("run/000002"), 0, "a delete left chunks behind");
    // Rewritten blind: the chunks stay, pointed to by nothing, until the sweep.
    rt().block_on(async {
        store
            .write(|tx| tx.put(Table::Operations, "run/000003", &"small"))
            .await
            .expect("blind rewrite");
    });
    assert!(chunks_of("run/000003") > 0, "the blind rewrite looked");
    rt().block_on(async {
        let swept = store.sweep_orphans(Duration::ZERO).await.expect("sweep");
        assert_eq!(swept, 1, "one generation had nothing pointing to it");
    });
    assert_eq!(chunks_of("run/000003"), 0, "the sweep left orphans");
    rt().block_on(async {
        let kept: Option<String> = store
            .read(|r| r.get(Table::Operations, "run/000004"))
            .await
            .expect("read");
        assert!(
            kept.as_deref() == Some(big.as_str()),
            "the sweep took chunks a value points to"
        );
        let small: Option<String> = store
            .read(|r| r.get(Table::Operations, "run/000003"))
            .await
            .expect("read");
        assert_eq!(small.as_deref(), Some("small"));
    });
    assert_eq!(
        crate::support::etcd::count_keys(&cluster, "/ebb-test/large/~chunks/"),
        chunks_of("run/000004"),
        "chunks of no value are left"
    );
}

/// The sweep of orphan chunks drops nothing while an intent is pending (its batches may point
/// a key at chunks that look orphaned until they are applied), and marks what it drops
/// (`~swept`), which a write of chunks compares to its first chunk's revision.
#[test]
fn the_sweep_of_orphan_chunks_waits_for_a_pending_intent_and_marks_what_it_drops() {
    let cluster = Cluster::start(1);
    let store = open(&cluster, "/ebb-test/orphans");
    // A chunk of a generation made an hour ago (a UUIDv7 begins with its milliseconds) that
    // no value points to, and an intent pending.
    let hour_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
        - 3_600_000;
    let generation = format!("{hour_ago:012x}7000800000000000000");
    let chunk =
        format!("/ebb-test/orphans/~chunks/operations/run/000001\x00{generation}\x00000000");
    cluster.admin(|mut c| async move {
        c.put(chunk, "x", None).await?;
        c.put(
            "/ebb-test/orphans/~pending",
            r#"{"id":"none","batches":1}"#,
            None,
        )
        .await
        .map(|_| ())
    });
    let count = |prefix: &str| crate::support::etcd::count_keys(&cluster, prefix);
    let swept = rt()
        .block_on(store.sweep_orphans(Duration::ZERO))
        .expect("sweep");
    assert_eq!(
        swept, 0,
        "the sweep dropped chunks while an intent was pending"
    );
    assert_eq!(count("/ebb-test/orphans/~chunks/"), 1);
    assert_eq!(count("/ebb-test/orphans/~swept"), 0);
    cluster.admin(|mut c| async move {
        c.delete("/ebb-test/orphans/~pending", None)
            .await
            .map(|_| ())
    });
    let swept = rt()
        .block_on(store.sweep_orphans(Duration::ZERO))
        .expect("sweep");
    assert_eq!(swept, 1);
    assert_eq!(count("/ebb-test/orphans/~chunks/"), 0);
    assert_eq!(
        count("/ebb-test/orphans/~swept"),
        1,
        "the sweep left no mark"
    );
}

/// etcd stops for a while: an impatient write (a request's) fails naming etcd, a patient one
/// (a run's) waits and lands once etcd is back.
#[test]
fn writes_wait_for_etcd_or_fail_naming_it() {
    let mut cluster = Cluster::start(1);
    let store = open(&cluster, "/ebb-test/away");
    let runtime = rt();
    cluster.kill_member(0);
    let failed = runtime
        .block_on(store.write(|tx| tx.put(Table::Meta, "k", &1)))
        .expect_err("etcd is down");
    assert!(
        matches!(failed, StoreError::Unavailable { .. }),
        "{failed:?}"
    );
    assert!(
        failed.to_string().contains("etcd at https://127.0.0.1:"),
        "{failed}"
    );
    let patient = store.patient();
    let pending =
        runtime.spawn(async move { patient.write(|tx| tx.put(Table::Meta, "k", &2)).await });
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !pending.is_finished(),
        "a patient write gave up while etcd was down"
    );
    cluster.start_member(0);
    cluster.wait_healthy();
    runtime
        .block_on(pending)
        .expect("join")
        .expect("the patient write landed once etcd was back");
    let k: Option<u64> = runtime
        .block_on(store.read(|r| r.get(Table::Meta, "k")))
        .expect("read");
    assert_eq!(k, Some(2));
}

/// Runs on a server whose etcd stops for 20 s mid-provisioning: requests get 503s naming
/// etcd meanwhile, then every run finishes, each node made and deleted exactly once.
#[test]
fn etcd_stopped_mid_provisioning_pauses_runs_and_loses_nothing() {
    let mut cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
    let server = Server::start_at(&data, etcd_options(&cluster, "/ebb-test/paused"));
    sim_profile(
        &server,
        "p",
        &sim,
        &[("nodes", "2"), ("createLatency", "1s")],
        0,
        None,
    );
    deploy(&server, "a", "sleep 0.2", json!({}));
    let runs: Vec<String> = (0..4)
        .map(|_| start(&server, "a", json!({"system.profile.name": "p"})))
        .collect();
    wait_for_call(&sim, "create");
    cluster.kill_member(0);
    let down = Instant::now();
    let run_path = runs[0].as_str();
    let stop = format!("{run_path}/stop");
    let events = format!("{run_path}/events");
    // Reads, writes, commands to a run's supervisor and the janitor all answer soon.
    for (method, path) in [
        ("GET", "/v3/namespaces/default/profiles"),
        ("GET", run_path),
        ("GET", events.as_str()),
        ("POST", stop.as_str()),
        ("GET", "/v3/janitor"),
        ("POST", "/v3/janitor/run"),
    ] {
        let (code, body) = match method {
            "GET" => server.get(path),
            _ => server.post(path),
        };
        assert_eq!(code, 503, "{method} {path}: {body}");
        assert!(
            body["message"].as_str().is_some_and(|m| m.contains("etcd")),
            "{method} {path}: {body}"
        );
    }
    std::thread::sleep(Duration::from_secs(20).saturating_sub(down.elapsed()));
    cluster.start_member(0);
    cluster.wait_healthy();
    // The stop that got a 503 did not happen: every run completes.
    assert_all_completed(&server, &runs, &sim, 2);
}

/// A three-member etcd loses a member mid-run: nothing changes for the runs.
#[test]
fn a_three_member_etcd_losing_a_member_changes_nothing() {
    let mut cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
    let server = Server::start_at(&data, etcd_options(&cluster, "/ebb-test/three"));
    sim_profile(
        &server,
        "p",
        &sim,
        &[("nodes", "2"), ("createLatency", "300ms")],
        0,
        None,
    );
    deploy(&server, "a", "sleep 0.5", json!({}));
    let runs: Vec<String> = (0..4)
        .map(|_| start(&server, "a", json!({"system.profile.name": "p"})))
        .collect();
    std::thread::sleep(Duration::from_millis(400));
    cluster.kill_member(0);
    let (code, body) = server.get("/v3/namespaces/default/profiles");
    assert_eq!(code, 200, "{body}");
    let more = start(&server, "a", json!({"system.profile.name": "p"}));
    for run in runs.iter().chain([&more]) {
        let done = wait_deprovisioned(&server, run);
        assert_eq!(done["status"], "COMPLETED", "{done}");
    }
    let mut ids: Vec<&str> = runs.iter().map(String::as_str).collect();
    ids.push(&more);
    assert_clean(&sim, &ids, 2);
}

/// `ebb store copy` moves an installation from its redb file to etcd: the copy refuses a
/// target that holds anything unless forced, and a server on etcd then shows everything.
#[test]
fn an_installation_moves_from_redb_to_etcd() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = sub(&dir, "data");
    let redb = Options {
        args: vec!["--store".into(), "redb".into()],
        ..Options::default()
    };
    let server = Server::start_at(&data, redb.clone());
    let (code, body) = server.put(
        "/v3/namespaces/default/securekeys/pw",
        json!({"data": "s3cret", "description": "a password"}),
    );
    assert_eq!(code, 200, "{body}");
    deploy(&server, "a", "echo hi", json!({}));
    let run = start(
        &server,
        "a",
        json!({"system.profile.name": "SYSTEM:native"}),
    );
    assert_eq!(wait_deprovisioned(&server, &run)["status"], "COMPLETED");
    let (_, events_before) = server.get(&format!("{run}/events"));

    // With the server up, its redb file is held: the copy refuses to read it.
    let from = format!("redb:{}", data.display());
    let to = format!("etcd:{}", cluster.endpoints());
    let access = cluster.access_args();
    let copy = |extra: &[&str]| {
        let mut args = vec![
            "store",
            "copy",
            "--from",
            &from,
            "--to",
            &to,
            "--to-prefix",
            "/ebb-test/moved",
        ];
        args.extend(access.iter().map(String::as_str));
        args.extend_from_slice(extra);
        run_ebb(&args, &[], None)
    };
    let (code, _, err) = copy(&[]);
    assert_ne!(code, 0);
    assert!(err.contains("in use by another process"), "{err}");
    assert_eq!(server.terminate().code(), Some(0));

    let (code, out, err) = copy(&[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("runs") && out.contains("secure_keys"), "{out}");
    let (code, _, err) = copy(&[]);
    assert_ne!(code, 0, "a second copy into a non-empty target");
    assert!(err.contains("--force"), "{err}");
    let (code, _, err) = copy(&["--force"]);
    assert_eq!(code, 0, "{err}");

    let server = Server::start_at(&data, etcd_options(&cluster, "/ebb-test/moved"));
    let (code, moved) = server.get(&run);
    assert_eq!(code, 200, "{moved}");
    assert_eq!(moved["status"], "COMPLETED");
    let (_, events_after) = server.get(&format!("{run}/events"));
    assert_eq!(events_before, events_after);
    let (code, key) = server.get("/v3/namespaces/default/securekeys/pw");
    assert_eq!(code, 200, "{key}");
    // The installation's secure keys are sealed with the data dir's key file: a server with
    // another key file is refused, naming the fix.
    let other = sub(&dir, "other");
    let args = cluster.serve_args("/ebb-test/moved");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let stderr = crate::support::server::serve_fails_with(&other, &args);
    assert!(stderr.contains("same key file"), "{stderr}");
}

fn etcd_options(cluster: &Cluster, prefix: &str) -> Options {
    Options {
        args: cluster.serve_args(prefix),
        ..Options::default()
    }
}

/// On etcd's default limits (128 operations a transaction), a write of 2,000 records is
/// still one write: readers and other writers racing with it see all of it or none of it.
#[test]
fn a_write_larger_than_a_transaction_is_all_or_nothing_to_everyone() {
    let cluster = Cluster::start(1);
    let store = open(&cluster, "/ebb-test/intent");
    rt().block_on(async {
        let writer = store.clone();
        let big = tokio::spawn(async move {
            for round in 0..5u32 {
                writer
                    .write(move |tx| {
                        for i in 0..2000 {
                            let key = format!("big/{i:04}");
                            if round % 2 == 0 {
                                tx.put(
                                    Table::Events,
                                    &key,
                                    &json!({"round": round, "pad": "x".repeat(300)}),
                                )?;
                            } else {
                                tx.delete(Table::Events, &key);
                            }
                        }
                        Ok::<_, StoreError>(())
                    })
                    .await
                    .expect("a write of 2000 records");
            }
        });
        // A quick reader: the first and the last record of the write, read together, are of
        // the same round (or both absent) whenever it looks.
        let quick = {
            let store = store.clone();
            let big = big.abort_handle();
            tokio::spawn(async move {
                let mut looks = 0u32;
                while !big.is_finished() {
                    let (first, last) = store
                        .read(|r| {
                            let first: Option<serde_json::Value> =
                                r.get(Table::Events, "big/0000")?;
                            let last: Option<serde_json::Value> =
                                r.get(Table::Events, "big/1999")?;
                            Ok::<_, StoreError>((
                                first.map(|v| v["round"].clone()),
                                last.map(|v| v["round"].clone()),
                            ))
                        })
                        .await
                        .expect("read");
                    assert_eq!(first, last, "a reader saw the write half applied");
                    looks += 1;
                }
                looks
            })
        };
        let mut seen = std::collections::BTreeSet::new();
        let mut checks = 0;
        while !big.is_finished() || checks < 20 {
            let n = store
                .read(|r| {
                    Ok::<_, StoreError>(r.scan::<serde_json::Value>(Table::Events, "big/")?.len())
                })
                .await
                .expect("read");
            // A writer that decides on what it read: it records the count it saw.
            let counted = store
                .write(move |tx| {
                    let n = tx.scan::<serde_json::Value>(Table::Events, "big/")?.len();
                    tx.put(Table::Meta, &format!("seen/{checks:05}"), &n)?;
                    Ok::<_, StoreError>(n)
                })
                .await
                .expect("small write");
            assert!(n == 0 || n == 2000, "a reader saw {n} of 2000 records");
            assert!(
                counted == 0 || counted == 2000,
                "a writer saw {counted} of 2000"
            );
            seen.insert(n);
            seen.insert(counted);
            checks += 1;
        }
        big.await.expect("join");
        let looks = quick.await.expect("the quick reader");
        let last: Vec<(String, serde_json::Value)> = store
            .read(|r| r.scan(Table::Events, "big/"))
            .await
            .expect("read");
        assert_eq!(last.len(), 2000);
        assert!(
            last.iter().all(|(_, v)| v["round"] == 4),
            "every record of the last round"
        );
        eprintln!("counts seen while writing: {seen:?} over {checks} checks, {looks} quick looks");
    });
    assert_eq!(
        crate::support::etcd::count_keys(&cluster, "/ebb-test/intent/~pending"),
        0
    );
    assert_eq!(
        crate::support::etcd::count_keys(&cluster, "/ebb-test/intent/~intents/"),
        0,
        "an applied intent's batches are removed with it"
    );
}

/// `ebb store copy` writes 50 records a write ([`ebb::store::SPLIT_WRITES`]): of 24 KB each,
/// a write is larger than an etcd transaction may be (1 MiB), so each is an intent.
/// SIGKILLed at instants spread over the time a whole copy takes on this machine, it leaves
/// every write whole or absent, and the next reader finishes one it committed but had not
/// applied.
#[test]
fn a_writer_killed_mid_intent_leaves_whole_writes_only() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let source = sub(&dir, "source");
    let store = Store::open(&source).expect("redb");
    rt().block_on(store.write(|tx| {
        for i in 0..400 {
            tx.put(
                Table::Events,
                &format!("r/{i:04}"),
                &json!({"n": i, "pad": "y".repeat(24_000)}),
            )?;
        }
        Ok::<_, StoreError>(())
    }))
    .expect("source");
    rt().block_on(store.close()).expect("close");
    drop(store);
    let from = format!("redb:{}", source.display());
    let to = format!("etcd:{}", cluster.endpoints());
    let prefix = "/ebb-test/killed-copy";
    let copy = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_ebb"))
            .args([
                "store",
                "copy",
                "--from",
                &from,
                "--to",
                &to,
                "--to-prefix",
                prefix,
                "--force",
            ])
            .args(cluster.access_args())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("ebb store copy")
    };
    // How long a whole copy takes here (a loaded machine is slower): the kills land inside it.
    let began = Instant::now();
    let status = copy().wait().expect("copy");
    assert!(status.success(), "a whole copy failed: {status}");
    let whole = began.elapsed();
    let mut partial = 0;
    for round in 0..12u64 {
        let mut child = copy();
        std::thread::sleep(whole.mul_f64(0.1 + 0.8 * ((round * 37) % 12) as f64 / 12.0));
        let _ = child.kill();
        let _ = child.wait();
        let target = open(&cluster, prefix);
        let n = rt()
            .block_on(target.read(|r| {
                Ok::<_, StoreError>(r.scan::<serde_json::Value>(Table::Events, "r/")?.len())
            }))
            .expect("read");
        assert_eq!(
            n % SPLIT_WRITES,
            0,
            "round {round}: {n} records, not whole writes of {SPLIT_WRITES}"
        );
        if n != 0 && n != 400 {
            partial += 1;
        }
        assert_eq!(
            crate::support::etcd::count_keys(&cluster, &format!("{prefix}/~pending")),
            0,
            "round {round}: the reader finished the intent it met"
        );
        rt().block_on(target.close()).expect("close");
    }
    assert!(
        partial > 0,
        "no kill landed mid-copy; the test proved nothing"
    );
}

/// A 2,000-node cluster on etcd's default limits, its server SIGKILLed three times at random
/// points while the cluster is created: each time the restarted server carries the same
/// create on; every node is made once and deleted once, and the audit log holds one create
/// and one delete, both ended well, with every node's tasks.
#[test]
fn a_2000_node_cluster_on_default_etcd_survives_kills_mid_create() {
    const NODES: usize = 2000;
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
    let options = || etcd_options(&cluster, "/ebb-test/big-cluster");
    let mut server = Server::start_at(&data, options());
    sim_profile(&server, "p", &sim, &[("nodes", "2000")], 0, None);
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "p"}));
    let mut points: Vec<usize> = (0..3).map(|_| fastrand::usize(20..NODES - 100)).collect();
    points.sort_unstable();
    eprintln!("SIGKILL after {points:?} creates");
    for at in points {
        let started = Instant::now();
        loop {
            let creates = crate::support::runs::calls(&sim)
                .iter()
                .filter(|c| c["op"] == "create")
                .count();
            if creates >= at {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(180),
                "only {creates} creates in 3 minutes"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server.kill();
        server = Server::start_at(&data, options());
    }
    let done = wait_until(&server, &run, Duration::from_secs(600), |r| {
        r["cluster"]["status"] == "DEPROVISIONED"
    });
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_clean(&sim, &[run.as_str()], NODES);
    let ops = crate::support::runs::operations(&server, &run);
    let kinds: Vec<(&str, &str)> = ops
        .iter()
        .map(|o| {
            (
                o["operation"].as_str().unwrap_or(""),
                o["status"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [("create", "SUCCEEDED"), ("delete", "SUCCEEDED")],
        "{kinds:?}"
    );
}

/// TLS and etcd's own auth: what a server with the wrong CA, password or certificate is told
/// at start, and that the password shows nowhere.
mod access {
    use super::*;
    use crate::support::etcd::Auth;
    use crate::support::pki::{Pki, private};

    /// `serve_args` of `cluster` with the value after `flag` replaced by `value` (or the
    /// flag and its value left out when `value` is `None`).
    fn with(cluster: &Cluster, prefix: &str, flag: &str, value: Option<&str>) -> Vec<String> {
        let mut args = cluster.serve_args(prefix);
        let at = args.iter().position(|a| a == flag).expect(flag);
        match value {
            Some(v) => args[at + 1] = v.to_string(),
            None => {
                args.drain(at..at + 2);
            }
        }
        args
    }

    /// `serve_args` of `cluster` without `flags` and their values.
    fn without(cluster: &Cluster, flags: [&str; 2]) -> Vec<String> {
        flags
            .into_iter()
            .fold(cluster.serve_args("/ebb-test/a"), |args, flag| {
                let at = args.iter().position(|a| a == flag).expect(flag);
                args.into_iter()
                    .enumerate()
                    .filter(|(i, _)| *i != at && *i != at + 1)
                    .map(|(_, a)| a)
                    .collect()
            })
    }

    fn fails(dir: &tempfile::TempDir, name: &str, args: &[String]) -> String {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        crate::support::server::serve_fails_with(&sub(dir, name), &args)
    }

    #[test]
    fn a_wrong_ca_password_or_prefix_and_a_missing_client_certificate_are_refused_naming_which() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cluster = Cluster::start(1);

        let other = sub(&dir, "other-ca");
        let other_ca = Pki::new(&other).ca;
        let err = fails(
            &dir,
            "ca",
            &with(&cluster, "/ebb-test/a", "--etcd-ca-cert", other_ca.to_str()),
        );
        assert!(err.contains("certificate is not trusted"), "{err}");
        assert!(err.contains("--etcd-ca-cert"), "{err}");

        let wrong = dir.path().join("wrong.password");
        private(&wrong, "not-the-password-4711\n");
        let err = fails(
            &dir,
            "password",
            &with(
                &cluster,
                "/ebb-test/a",
                "--etcd-password-file",
                wrong.to_str(),
            ),
        );
        assert!(err.contains("refused user 'ebb'"), "{err}");
        assert!(err.contains("--etcd-password-file"), "{err}");
        assert!(!err.contains("not-the-password-4711"), "{err}");

        let err = fails(&dir, "prefix", &cluster.serve_args("/elsewhere"));
        assert!(
            err.contains("may not read and write under /elsewhere"),
            "{err}"
        );

        let err = fails(
            &dir,
            "no-user",
            &without(&cluster, ["--etcd-user", "--etcd-password-file"]),
        );
        assert!(err.contains("requires a user"), "{err}");

        let certs = Cluster::start_with(1, Auth::ClientCert);
        let err = fails(
            &dir,
            "no-cert",
            &without(&certs, ["--etcd-cert", "--etcd-key"]),
        );
        assert!(err.contains("requires a client certificate"), "{err}");
        assert!(err.contains("--etcd-cert"), "{err}");
    }

    #[test]
    fn plain_http_to_another_host_is_refused_without_etcd_insecure() {
        let dir = tempfile::tempdir().expect("tempdir");
        let args: Vec<String> = [
            "--store",
            "etcd",
            "--etcd-endpoints",
            "http://192.0.2.10:2379",
        ]
        .map(String::from)
        .to_vec();
        let err = fails(&dir, "plain", &args);
        assert!(err.contains("--etcd-insecure"), "{err}");
        assert!(err.contains("https://"), "{err}");
    }

    /// A whole run on an etcd that knows ebb by its client certificate alone.
    #[test]
    fn a_run_on_an_etcd_that_authenticates_by_client_certificate() {
        let cluster = Cluster::start_with(1, Auth::ClientCert);
        let dir = tempfile::tempdir().expect("tempdir");
        let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
        let server = Server::start_at(&data, etcd_options(&cluster, "/ebb-test/certs"));
        sim_profile(&server, "p", &sim, &[("nodes", "2")], 0, None);
        deploy(&server, "a", "true", json!({}));
        let run = start(&server, "a", json!({"system.profile.name": "p"}));
        assert_eq!(wait_deprovisioned(&server, &run)["status"], "COMPLETED");
        assert_clean(&sim, &[run.as_str()], 2);
    }

    /// The password is read from its file: it appears in no log line, in no process's
    /// arguments or environment, and in no answer, through a whole run at debug level.
    #[test]
    fn the_password_shows_in_no_log_process_list_or_answer() {
        let cluster = Cluster::start(1);
        let password = std::fs::read_to_string(cluster.password_file()).expect("password");
        let password = password.trim();
        let dir = tempfile::tempdir().expect("tempdir");
        let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
        let mut options = etcd_options(&cluster, "/ebb-test/quiet");
        options.env = vec![("RUST_LOG".into(), "debug".into())];
        let server = Server::start_at(&data, options);
        sim_profile(&server, "p", &sim, &[("nodes", "1")], 0, None);
        deploy(&server, "a", "env; ps -eo args", json!({}));
        let run = start(&server, "a", json!({"system.profile.name": "p"}));
        assert_eq!(wait_deprovisioned(&server, &run)["status"], "COMPLETED");
        let (_, logs) = server.get(&format!("{run}/logs"));
        assert!(!logs.to_string().contains(password), "the program saw it");
        let ps = std::process::Command::new("ps")
            .args(["-eo", "args"])
            .output()
            .expect("ps");
        assert!(!String::from_utf8_lossy(&ps.stdout).contains(password));
        let environ = std::fs::read(format!("/proc/{}/environ", server.pid())).expect("environ");
        assert!(!String::from_utf8_lossy(&environ).contains(password));
        let logs = server.logs();
        assert!(logs.len() > 10, "debug logs: {}", logs.len());
        assert!(
            logs.iter().all(|l| !l.contains(password)),
            "a log line holds it"
        );
    }
}
