//! The scheduler at scale: `EBB_BENCH_SCHEDULES` enabled schedules (default 10,000) on one
//! `ebb serve`, a tenth of them firing every second (the rest daily, at 04:00), for
//! `EBB_BENCH_SECONDS` (default 20). It reports the fire lag (a cron time to its fire and run
//! recorded, read from the fire records) p50 and p99, the server's memory, and the time from a
//! SIGKILL of the server to the first fire after it started again.
//!
//! Every fire records a run. The program allows one live run at a time (`maxConcurrentRuns:
//! 1`), so most of the thousand runs a second are recorded REJECTED at once, as a busy program's
//! are: the bench measures the scheduler and the fire's write, not a thousand clusters a
//! second (`lifecycle` measures those).
//!
//! `cargo bench --bench schedules`; `EBB_BENCH_DIR` picks the data dir's disk.

#[allow(dead_code)]
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use support::bench::{env_usize, percentile};
use support::server::{Options, Server};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn options() -> Options {
    Options {
        env: vec![("EBB_LOG".into(), "warn,ebb::server=info".into())],
        unchecked: true,
        ..Options::default()
    }
}

/// The server's resident memory, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn schedule_path(i: usize) -> String {
    format!("/v3/namespaces/default/apps/bench/schedules/s{i}")
}

/// The fires of schedule `i`.
fn fires(server: &Server, i: usize) -> Vec<Value> {
    let (code, body) = server.get(&format!("{}/fires?limit=1000", schedule_path(i)));
    assert_eq!(code, 200, "{body}");
    body.as_array().cloned().unwrap_or_default()
}

fn main() {
    let count = env_usize("EBB_BENCH_SCHEDULES", 10_000);
    let seconds = env_usize("EBB_BENCH_SECONDS", 20) as u64;
    let every_second = count / 10;
    let base =
        std::env::var("EBB_BENCH_DIR").unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").into());
    let dir = tempfile::tempdir_in(base).expect("tempdir");
    let data = dir.path().join("data");
    let server = Server::start_at(&data, options());
    let (code, body) = server.put(
        "/v3/namespaces/default/apps/bench",
        json!({"programs": [{"type": "workflows", "name": "p", "command": ["true"],
                             "maxConcurrentRuns": 1}]}),
    );
    assert_eq!(code, 200, "{body}");

    let made = Instant::now();
    std::thread::scope(|scope| {
        for part in 0..4 {
            let server = &server;
            scope.spawn(move || {
                for i in (part..count).step_by(4) {
                    let cron = if i < every_second {
                        "* * * * * *"
                    } else {
                        "0 0 4 * * *"
                    };
                    let (code, body) = server.put(
                        &schedule_path(i),
                        json!({"program": {"programName": "p", "programType": "WORKFLOW"},
                               "trigger": {"type": "TIME", "cronExpression": cron},
                               "status": "SCHEDULED"}),
                    );
                    assert_eq!(code, 200, "{body}");
                }
            });
        }
    });
    println!(
        "schedules: {count} made in {:.1} s ({every_second} firing every second)",
        made.elapsed().as_secs_f64()
    );

    // Warm up, then measure the fires of a whole window.
    std::thread::sleep(Duration::from_secs(5));
    let from = now_ms();
    std::thread::sleep(Duration::from_secs(seconds));
    let to = now_ms();
    let rss = rss_mib(server.pid());
    // Let the window's last fires land before reading them.
    std::thread::sleep(Duration::from_secs(3));
    let mut lags = Vec::new();
    let mut missing = 0usize;
    for i in 0..every_second {
        let window: Vec<Value> = fires(&server, i)
            .into_iter()
            .filter(|f| {
                let t = f["time"].as_u64().unwrap_or(0);
                t >= from && t < to
            })
            .collect();
        let expected = ((to - from) / 1000) as usize;
        missing += expected.saturating_sub(window.len());
        for f in window {
            let lag = f["recorded"]
                .as_u64()
                .unwrap_or(0)
                .saturating_sub(f["time"].as_u64().unwrap_or(0));
            lags.push(Duration::from_millis(lag));
        }
    }
    lags.sort();
    println!(
        "fire lag over {seconds} s: {} fires ({:.0}/s), p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; {missing} fire times not recorded in the window; server memory {rss:.0} MiB",
        lags.len(),
        lags.len() as f64 / seconds as f64,
        percentile(&lags, 0.50).as_secs_f64() * 1e3,
        percentile(&lags, 0.99).as_secs_f64() * 1e3,
        lags.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );

    // A SIGKILL, and the time until the restarted server fires again.
    let killed_at = now_ms();
    let killed = Instant::now();
    server.kill();
    let server = Server::start_at(&data, options());
    let answering = killed.elapsed();
    let first = loop {
        let newest = fires(&server, 0)
            .first()
            .and_then(|f| f["recorded"].as_u64())
            .unwrap_or(0);
        if newest > killed_at {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(120),
            "no fire after the restart"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    println!(
        "restart: answering {:.2} s after the SIGKILL, first fire {:.2} s after it",
        answering.as_secs_f64(),
        first.as_secs_f64()
    );
    drop(server);
}
