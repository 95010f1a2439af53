//! Usage answers from the usage ledger: a year of daily rows for 1,000 programs in 20
//! namespaces (`EBB_BENCH_PROGRAMS`, `EBB_BENCH_NAMESPACES`, `EBB_BENCH_DAYS`), written into
//! the store as the ledger's fold writes them (a row per program and day, per program and
//! month, per namespace and month), then `GET /v3/usage` asked `EBB_BENCH_QUERIES` times
//! (default 200, after 3 s not measured) for each of: a year by month and namespace (the target: p50 and p99
//! under 50 ms), a year by month and program, and a month by day; p50 and p99 of the answer's
//! latency as the client sees it.
//!
//! `cargo bench --bench usage`; `EBB_BENCH_DIR` picks the data dir's disk; with
//! `EBB_TEST_STORE=etcd` on etcd.

#[allow(dead_code)]
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use ebb::model::usage::{Dims, Figures};
use ebb::store::{Store, Table};

use support::bench::{env_usize, percentile};
use support::server::{Options, Server, store_location};

/// Day `d` of 2025 as `2025-mm-dd`, and its month.
fn day(d: usize) -> (String, String) {
    let date = jiff::civil::date(2025, 1, 1)
        .checked_add(jiff::Span::new().days(d as i64))
        .expect("a day of 2025");
    let name = date.to_string();
    let month = name[..7].to_string();
    (name, month)
}

fn main() {
    let programs = env_usize("EBB_BENCH_PROGRAMS", 1000);
    let namespaces = env_usize("EBB_BENCH_NAMESPACES", 20);
    let days = env_usize("EBB_BENCH_DAYS", 365);
    let queries = env_usize("EBB_BENCH_QUERIES", 200);
    let base =
        std::env::var("EBB_BENCH_DIR").unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").into());
    let dir = tempfile::tempdir_in(base).expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    let options = || Options {
        env: vec![("EBB_LOG".into(), "warn,ebb::server=info".into())],
        unchecked: true,
        ..Options::default()
    };
    // A server makes the store (and its namespaces), then stops while the rows are written.
    let server = Server::start_at(&data, options());
    for n in 0..namespaces {
        let (code, body) = server.put(
            &format!("/v3/namespaces/team-{n:02}"),
            serde_json::json!({}),
        );
        assert_eq!(code, 200, "{body}");
    }
    drop(server);

    let started = Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store = Store::open_at(&store_location(&data)).expect("store");
    let dims: Vec<Dims> = (0..programs)
        .map(|p| Dims {
            namespace: format!("team-{:02}", p % namespaces),
            app: format!("app-{}", p / 10),
            program: format!("p{p}"),
            profile: format!("USER:profile-{}", p % 7),
            provisioner: if p % 2 == 0 { "aws-ec2" } else { "gcp-compute" }.into(),
        })
        .collect();
    let figures = |p: usize, d: usize| Figures {
        runs: [
            ("COMPLETED".to_string(), 3),
            ("FAILED".to_string(), (p + d) as u64 % 2),
        ]
        .into_iter()
        .collect(),
        program: 3600 + (p * 7 + d * 13) as u64 % 1800,
        kept: (d % 5) as u64 * 60,
        idle: (p % 3) as u64 * 120,
        markets: [("on-demand".to_string(), 3600)].into_iter().collect(),
        cost_micros: 200_000 + (p * d) as u64 % 50_000,
        ..Default::default()
    };
    let mut rows: Vec<(String, Figures)> = Vec::with_capacity(programs * (days + 13));
    let mut months: std::collections::BTreeMap<String, Figures> = Default::default();
    for (p, dims) in dims.iter().enumerate() {
        for d in 0..days {
            let (name, month) = day(d);
            let f = figures(p, d);
            months
                .entry(format!("m/{}", dims.key(&month)))
                .or_default()
                .add(&f);
            months
                .entry(format!("t/{month}/{}", dims.namespace))
                .or_default()
                .add(&f);
            rows.push((format!("d/{}", dims.key(&name)), f));
        }
    }
    rows.extend(months);
    let count = rows.len();
    rt.block_on(async {
        for batch in rows.chunks(ebb::store::SPLIT_WRITES) {
            let batch = batch.to_vec();
            store
                .write(move |tx| {
                    for (key, f) in &batch {
                        tx.put(Table::Ledger, key, f)?;
                    }
                    Ok::<_, ebb::store::StoreError>(())
                })
                .await
                .expect("write rows");
        }
        store.close().await.expect("close");
    });
    drop(store);
    println!(
        "usage: wrote {count} ledger rows ({programs} programs, {namespaces} namespaces, {days} days) in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let server = Server::start_at(&data, options());
    let (from, to) = ("2025-01-01", "2026-01-01");
    for (what, query, groups) in [
        (
            "a year by month and namespace",
            format!("from={from}&to={to}&groupBy=month,namespace"),
            12 * namespaces,
        ),
        (
            "a year by month and program",
            format!("from={from}&to={to}&groupBy=month,program"),
            12 * programs,
        ),
        (
            "a month by day",
            "from=2025-03-01&to=2025-04-01&groupBy=day".to_string(),
            31,
        ),
    ] {
        let path = format!("/v3/usage?{query}");
        let (code, answer) = server.get(&path);
        assert_eq!(code, 200, "{answer}");
        assert_eq!(
            answer["groups"].as_array().map(Vec::len),
            Some(groups.min(12 * programs)),
            "{what}"
        );
        // Warm up first (3 s): a server on etcd reads from etcd until its copy in memory is
        // loaded.
        let warm = Instant::now();
        while warm.elapsed() < Duration::from_secs(3) {
            assert_eq!(server.get(&path).0, 200);
        }
        let mut took: Vec<Duration> = (0..queries)
            .map(|_| {
                let t = Instant::now();
                let (code, _) = server.get(&path);
                assert_eq!(code, 200);
                t.elapsed()
            })
            .collect();
        took.sort();
        println!(
            "usage: {what} ({groups} groups), {queries} queries: p50 {:.1} ms, p99 {:.1} ms",
            percentile(&took, 0.50).as_secs_f64() * 1000.0,
            percentile(&took, 0.99).as_secs_f64() * 1000.0
        );
    }
}
