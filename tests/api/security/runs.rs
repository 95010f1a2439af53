//! Servers that share an account, paged run lists and waits on runs that do not exist.

use serde_json::{Value, json};

use crate::support::profiles::sim_profile;
use crate::support::runs::*;
use crate::support::server::{Server, assert_error};

#[test]
fn servers_left_at_their_defaults_never_sweep_each_others_resources() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let defaults = crate::support::server::Options {
        generated_name: true,
        ..Default::default()
    };
    let (a_dir, b_dir) = (sub(&dir, "a"), sub(&dir, "b"));
    let a = Server::start_at(&a_dir, defaults.clone());
    sim_profile(&a, "p", &sim, &[("nodes", "2")], 600, None);
    deploy(&a, "x", "exit 3", json!({}));
    let kept = start(&a, "x", json!({"system.profile.name": "p"}));
    wait_until(&a, &kept, std::time::Duration::from_secs(30), |r| {
        r["cluster"]["status"] == "WAITING"
    });
    let name = instances(&sim)[0]["tags"]["ebb:server"]
        .as_str()
        .expect("server tag")
        .to_string();
    assert!(name.starts_with("ebb-") && name.len() == 16, "{name}");

    // The name is kept: after a restart the same server still owns its cluster.
    drop(a);
    let a = Server::start_at(&a_dir, defaults.clone());
    let (_, sweep) = a.post("/v3/janitor/run?dryRun=true");
    assert!(
        sweep["orphans"].as_array().is_some_and(Vec::is_empty),
        "{sweep:#}"
    );
    assert_eq!(sweep["accounts"][0]["listed"], 2, "{sweep:#}");

    // A resource without a server tag, as a tool other than ebb might leave: nobody's.
    let mut stray = instances(&sim)[0].clone();
    stray["id"] = json!("i-stray");
    stray["tags"]
        .as_object_mut()
        .expect("tags")
        .remove("ebb:server");
    stray["tags"]["ebb:run"] = json!("0190-not-ours");
    std::fs::write(sim.join("resources/i-stray.json"), stray.to_string()).expect("stray");

    // Another server, also at its defaults, on the same account, sweeping to delete.
    let b = Server::start_at(&b_dir, defaults);
    sim_profile(&b, "p", &sim, &[("nodes", "2")], 0, None);
    let (code, sweep) = b.post("/v3/janitor/run");
    assert_eq!(code, 200, "{sweep}");
    assert!(
        sweep["orphans"].as_array().is_some_and(Vec::is_empty),
        "{sweep:#}"
    );
    let (_, sweep) = a.post("/v3/janitor/run");
    assert!(
        sweep["orphans"].as_array().is_some_and(Vec::is_empty),
        "{sweep:#}"
    );
    for i in instances(&sim) {
        assert_eq!(i["deleteCalls"].as_u64().unwrap_or(0), 0, "{i}");
    }
    let (code, _) = a.post(&format!("{kept}/deprovision"));
    assert_eq!(code, 200);
    wait_deprovisioned(&a, &kept);
}

/// GETs `path` and returns the runs and the `Link` to the next page, if any.
fn runs_page(server: &Server, path: &str) -> (Vec<Value>, Option<String>) {
    let res = reqwest::blocking::Client::new()
        .get(format!("{}{path}", server.url))
        .bearer_auth(server.token().expect("token"))
        .send()
        .expect("get");
    assert_eq!(res.status().as_u16(), 200, "{path}");
    let link = res
        .headers()
        .get("link")
        .map(|v| v.to_str().expect("ascii").to_string());
    let runs: Vec<Value> = res.json().expect("json");
    let next = link.map(|l| {
        assert!(l.ends_with(">; rel=\"next\""), "{l}");
        l.trim_start_matches('<')
            .split('>')
            .next()
            .expect("url")
            .to_string()
    });
    (runs, next)
}

#[test]
fn run_lists_are_paged_in_the_store_newest_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(&server, "a", "sleep 60", json!({"maxConcurrentRuns": 1}));
    let live = start(&server, "a", json!({}));
    // Refused runs are recorded too: the list must not read them all to show a few.
    for _ in 0..120 {
        let (code, _) = server.post_json(&format!("{}/start", program("a")), json!({}));
        assert_eq!(code, 409);
    }
    for base in [
        format!("{}/runs", program("a")),
        "/v3/namespaces/default/runs".to_string(),
    ] {
        let (first, next) = runs_page(&server, &base);
        assert_eq!(first.len(), 100, "the default page");
        let next = next.expect("a link to the next page");
        let (rest, end) = runs_page(&server, &next);
        assert_eq!(rest.len(), 21, "{next}");
        assert_eq!(end, None, "the last page links nowhere");
        let ids: Vec<&str> = first
            .iter()
            .chain(&rest)
            .map(|r| r["runid"].as_str().expect("id"))
            .collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        sorted.dedup();
        assert_eq!(ids, sorted, "newest first, none twice");
        assert_eq!(
            *ids.last().expect("oldest"),
            live.rsplit('/').next().expect("id")
        );

        let (rejected, next) = runs_page(&server, &format!("{base}?status=REJECTED&limit=7"));
        assert_eq!(rejected.len(), 7);
        assert!(rejected.iter().all(|r| r["status"] == "REJECTED"));
        let next = next.expect("more rejected runs");
        assert!(
            next.contains("status=REJECTED") && next.contains("limit=7"),
            "{next}"
        );
        let (more, _) = runs_page(&server, &next);
        assert_eq!(more.len(), 7);
        assert!(more[0]["runid"].as_str() < rejected[6]["runid"].as_str());
        let (running, next) = runs_page(&server, &format!("{base}?status=RUNNING"));
        assert_eq!(running.len(), 1);
        assert_eq!(next, None);
    }
    for bad in ["limit=0", "limit=1001", "limit=-1", "before=../x"] {
        let (code, body) = server.get(&format!("{}/runs?{bad}", program("a")));
        assert_eq!(code, 400, "{bad}: {body}");
    }
    let (code, _) = server.post(&format!("{live}/stop"));
    assert_eq!(code, 200);
}

#[test]
fn waiting_on_events_of_runs_that_do_not_exist_holds_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(&server, "a", "true", json!({}));
    let long = "x".repeat(60_000);
    assert_error(
        server.get(&format!("{}/runs/{long}/events?wait=1ms", program("a"))),
        400,
        "run",
    );
    assert_error(
        server.get(&format!("{}/runs/0190-nope/events?wait=10ms", program("a"))),
        404,
        "run '0190-nope' not found",
    );
    assert_error(
        server.get(&format!("{}/runs/..%2F..%2Fsecure.key/logs", program("a"))),
        400,
        "run",
    );
    let rss = || {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", server.pid())).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .expect("VmRSS")
    };
    let path = format!(
        "{}/runs/{}/events?wait=1ms",
        program("a"),
        "y".repeat(60_000)
    );
    let ask = |times: usize| {
        for _ in 0..times {
            let (code, _) = server.get(&path);
            assert_eq!(code, 400);
        }
    };
    // First as many requests as the allocator's caches of freed memory may take in (each of
    // the server's threads keeps some for its next allocations).
    ask(100);
    // Then three rounds of 200: a leak of the key (60 KB a request) grows every round by
    // 12 MB. The allocator's caches may still fill in one round or two (under the suite's
    // load, up to 7.5 MB in 300 requests), not in every one.
    let grown_kb: Vec<u64> = (0..3)
        .map(|_| {
            let before = rss();
            ask(200);
            rss().saturating_sub(before)
        })
        .collect();
    eprintln!("the server grew by {grown_kb:?} kB in three rounds of 200 requests");
    let least = grown_kb.iter().copied().min().unwrap_or_default();
    assert!(
        least < 6_000,
        "the server grew in every round: {grown_kb:?} kB"
    );

    // A long poll on a run that exists, given up by its client, leaves nothing behind either.
    let run = start(&server, "a", json!({}));
    wait_deprovisioned(&server, &run);
    let (code, _) = server.get(&format!("{run}/events?after=99999999999999999&wait=50ms"));
    assert_eq!(code, 200);
}
