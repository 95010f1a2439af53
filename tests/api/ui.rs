//! The web UI: its flows in a real browser (Debian's chromium driven by Playwright, from
//! `tests/ui/flows.py`) against a real server this module starts and fills; and, over plain
//! HTTP, what an attacker would try: the session cookie's attributes, writes from other
//! sites, pages in frames, a viewer's commands, open redirects, oversized forms.
//!
//! The browser tests install what they need (`tests/support/ui/setup.sh`) and fail loudly
//! when they cannot. Their screenshots go to `target/ui-screenshots/`; with
//! `EBB_UPDATE_SCREENSHOTS=1` they are copied to `docs/src/ui/screenshots/`, which the book
//! shows.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::support::process::python_from;
use crate::support::profiles::{echo_services, sim_profile};
use crate::support::runs::{deploy, kept_failed_run, start, sub, wait_until};
use crate::support::server::{Options, Server, make_token as token};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The python that drives the browser, made once per test process.
fn python() -> PathBuf {
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON
        .get_or_init(|| {
            python_from(
                &root(),
                "tests/support/ui/setup.sh",
                "chromium and Playwright",
            )
        })
        .clone()
}

/// Runs browser flow `flow` against `server`, with `env` besides; fails with what the
/// browser saw when the flow fails.
fn flow(server: &Server, flow: &str, env: &[(&str, String)]) {
    let shots = root().join("target/ui-screenshots");
    let out = Command::new(python())
        .arg(root().join("tests/ui/flows.py"))
        .arg(flow)
        .env("EBB_URL", &server.url)
        .env("EBB_TOKEN", server.token().expect("a token"))
        .env("EBB_SHOTS", &shots)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("run tests/ui/flows.py");
    assert!(
        out.status.success(),
        "flow {flow} failed (screenshot in {}):\n{}\n{}",
        shots.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if std::env::var_os("EBB_UPDATE_SCREENSHOTS").is_some() {
        let kept = root().join("docs/src/ui/screenshots");
        std::fs::create_dir_all(&kept).expect("screenshots dir");
        for entry in std::fs::read_dir(&shots).expect("screenshots") {
            let path = entry.expect("entry").path();
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .to_string();
            if !name.starts_with("failed-") {
                std::fs::copy(&path, kept.join(name)).expect("copy screenshot");
            }
        }
    }
}

/// The UI path of the run at API path `api`.
pub(crate) fn ui_path(api: &str) -> String {
    // /v3/namespaces/{ns}/apps/{app}/workflows/{program}/runs/{run}
    let parts: Vec<&str> = api.trim_start_matches('/').split('/').collect();
    format!(
        "/ui/ns/{}/apps/{}/{}/runs/{}",
        parts[2], parts[4], parts[6], parts[8]
    )
}

/// Run `api`'s page, as the server's admin token sees it once signed in.
pub(crate) fn run_page(server: &Server, api: &str) -> String {
    let (code, page) = ui_get(server, &ui_path(api));
    assert_eq!(code, 200, "{page}");
    page
}

/// The UI's page at `path` (`/ui/...`), as the server's admin token sees it once signed in:
/// its status and its HTML.
pub(crate) fn ui_get(server: &Server, path: &str) -> (u16, String) {
    let token = server.token().unwrap_or_default();
    let cookie = cookie_of(&sign_in(server, &token));
    let page = raw()
        .get(format!("{}{path}", server.url))
        .header("cookie", cookie)
        .send()
        .expect("the page");
    (page.status().as_u16(), page.text().expect("html"))
}

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn signing_in_and_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    flow(&server, "sign_in", &[]);
}

#[test]
fn a_sim_profile_is_made_through_the_widget_form() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let state = sub(&dir, "sim");
    flow(
        &server,
        "profile_form",
        &[("EBB_STATE_DIR", state.display().to_string())],
    );
}

#[test]
fn a_plugin_profile_is_made_through_the_form_its_widget_draws() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("plugins/pcloud");
    std::fs::create_dir_all(&plugins).expect("plugins");
    let example = root().join("examples/plugins/pcloud");
    for file in ["plugin.json", "widget.json", "pcloud.py"] {
        std::fs::copy(example.join(file), plugins.join(file)).expect("copy");
    }
    let server = Server::start_at(
        &sub(&dir, "data"),
        Options {
            args: vec![
                "--plugin-dir".into(),
                dir.path().join("plugins").display().to_string(),
            ],
            ..Options::default()
        },
    );
    flow(
        &server,
        "plugin_profile",
        &[("EBB_CLOUD_DIR", sub(&dir, "cloud").display().to_string())],
    );
}

#[test]
fn a_profile_is_disabled_and_enabled_from_the_list() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    sim_profile(&server, "toggled", &sub(&dir, "sim"), &[], 0, None);
    flow(&server, "toggle", &[]);
}

#[test]
fn a_run_started_in_the_ui_is_watched_to_completion_live() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    sim_profile(
        &server,
        "quick",
        &sub(&dir, "sim"),
        &[("nodes", "1")],
        0,
        None,
    );
    let go = dir.path().join("go/now");
    // The program waits for the browser to have seen it RUNNING (at most two minutes).
    let script = format!(
        "i=0; while [ ! -e '{}' ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; echo finished the work",
        go.display()
    );
    deploy(&server, "live", &script, json!({}));
    flow(&server, "run_live", &[("EBB_GO", go.display().to_string())]);
}

#[test]
fn a_schedule_is_made_previewed_enabled_and_seen_firing_from_the_ui() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(&server, "timed", "true", json!({}));
    flow(&server, "schedules", &[]);
}

#[test]
fn a_failed_runs_cluster_is_extended_then_deprovisioned_from_the_ui() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let run = kept_failed_run(&server, &dir, "fails", "1");
    flow(
        &server,
        "waiting",
        &[("EBB_RUN", ui_path(&run)), ("EBB_API", run.clone())],
    );
}

#[test]
fn the_usage_page_charts_cost_and_its_range_picker_redraws_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let sim = sub(&dir, "sim");
    let mut body = crate::support::profiles::profile_body(
        "sim",
        &[
            ("stateDir", sim.to_str().expect("utf-8"), false),
            ("nodes", "2", false),
        ],
    );
    body["pricePerNodeHour"] = json!(36.0);
    let (code, reply) = server.put("/v3/namespaces/team", json!({}));
    assert_eq!(code, 200, "{reply}");
    for ns in ["default", "team"] {
        let (code, reply) = server.put(
            &format!("/v3/namespaces/{ns}/profiles/priced"),
            body.clone(),
        );
        assert_eq!(code, 200, "{reply}");
    }
    let (code, reply) = server.put("/v3/namespaces/default", json!({"budget": {"cost": 1.0}}));
    assert_eq!(code, 200, "{reply}");
    let mut runs = Vec::new();
    for app in ["ingest", "report"] {
        deploy(&server, app, "sleep 1", json!({}));
        runs.push(start(
            &server,
            app,
            json!({"system.profile.name": "priced"}),
        ));
    }
    crate::support::runs::deploy_in(&server, "team", "train", "sleep 2", json!({}));
    runs.push(crate::support::runs::start_in(
        &server,
        "team",
        "train",
        json!({"system.profile.name": "priced"}),
    ));
    for run in &runs {
        wait_until(&server, run, Duration::from_secs(60), |r| {
            r["cluster"]["status"] == "DEPROVISIONED"
        });
    }
    let started = std::time::Instant::now();
    loop {
        let (code, usage) = server.get("/v3/usage?groupBy=namespace");
        assert_eq!(code, 200, "{usage}");
        if usage["total"]["runs"]["COMPLETED"] == 3 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{usage}");
        std::thread::sleep(Duration::from_millis(100));
    }
    flow(
        &server,
        "usage",
        &[("EBB_SERIES", "default,team".to_string())],
    );
}

#[test]
fn a_template_clusters_operations_are_a_timeline_per_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let template = echo_services(&server);
    sim_profile(
        &server,
        "zk",
        &sub(&dir, "sim"),
        &[
            ("nodes", "3"),
            ("template", template),
            ("bootFailures", "1"),
        ],
        0,
        None,
    );
    deploy(&server, "zk", "true", json!({}));
    let run = start(&server, "zk", json!({"system.profile.name": "zk"}));
    wait_until(&server, &run, LIMIT, |r| {
        r["cluster"]["status"] == "DEPROVISIONED"
    });
    flow(&server, "timeline", &[("EBB_RUN", ui_path(&run))]);
}

#[test]
fn a_viewer_sees_no_action_buttons() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let run = kept_failed_run(&server, &dir, "live", "1");
    let viewer = token(
        &server,
        "watcher",
        json!({"namespaces": {"default": "viewer"}}),
    );
    flow(
        &server,
        "viewer",
        &[("EBB_VIEWER", viewer), ("EBB_RUN", ui_path(&run))],
    );
    // The viewer's attempt changed nothing.
    let (_, after) = server.get(&run);
    assert_eq!(after["cluster"]["status"], "WAITING", "{after}");
}

#[test]
fn a_new_user_makes_a_namespace_a_key_and_an_app_and_runs_it_from_the_ui() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    flow(&server, "first_steps", &[]);
    let (_, keys) = server.get("/v3/namespaces/default/securekeys");
    assert_eq!(keys[0]["name"], "db-pass", "{keys}");
    let (code, ns) = server.get("/v3/namespaces/team-a");
    assert_eq!(code, 200, "{ns}");
}

// ---- over plain HTTP: what an attacker would try ----

/// A client that follows no redirect and keeps no cookie: each request says exactly what it
/// sends.
pub(crate) fn raw() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// Signs in with `secret`; returns the session cookie's `Set-Cookie` header.
pub(crate) fn sign_in(server: &Server, secret: &str) -> String {
    let reply = raw()
        .post(format!("{}/ui/login", server.url))
        .form(&[("token", secret), ("next", "/ui/runs")])
        .send()
        .expect("sign in");
    assert_eq!(reply.status(), 303);
    assert_eq!(reply.headers()["location"], "/ui/runs");
    reply.headers()["set-cookie"]
        .to_str()
        .expect("ascii")
        .to_string()
}

pub(crate) fn cookie_of(set_cookie: &str) -> String {
    set_cookie.split(';').next().expect("pair").to_string()
}

#[test]
fn the_session_cookie_is_http_only_same_site_strict_and_every_page_needs_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let set = sign_in(&server, &server.token().expect("token"));
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attribute), "{attribute} missing: {set}");
    }
    // Over plain HTTP the cookie cannot be Secure (it would never be sent back).
    assert!(!set.contains("Secure"), "{set}");
    let http = raw();
    // Without the cookie, a page leads to sign-in and back.
    let reply = http
        .get(format!("{}/ui/runs?namespace=default", server.url))
        .send()
        .expect("get");
    assert_eq!(reply.status(), 303);
    assert_eq!(
        reply.headers()["location"],
        "/ui/login?next=/ui/runs%3Fnamespace%3Ddefault"
    );
    // With it, the page, with headers that keep it out of other sites' frames and scripts.
    let reply = http
        .get(format!("{}/ui/runs", server.url))
        .header("Cookie", cookie_of(&set))
        .send()
        .expect("get");
    assert_eq!(reply.status(), 200);
    let csp = reply.headers()["content-security-policy"]
        .to_str()
        .expect("ascii")
        .to_string();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert_eq!(reply.headers()["x-frame-options"], "DENY");
    // A revoked token's session ends at once.
    let secret = token(
        &server,
        "gone",
        json!({"namespaces": {"default": "viewer"}}),
    );
    let set = sign_in(&server, &secret);
    let (code, _) = server.delete("/v3/tokens/gone");
    assert_eq!(code, 200);
    let reply = http
        .get(format!("{}/ui", server.url))
        .header("Cookie", cookie_of(&set))
        .send()
        .expect("get");
    assert_eq!(reply.status(), 303, "a revoked token's session is over");
    // A wrong token is refused on the sign-in page, and nothing is set.
    let reply = http
        .post(format!("{}/ui/login", server.url))
        .form(&[("token", "ebb_0000")])
        .send()
        .expect("sign in");
    assert_eq!(reply.status(), 401);
    assert!(reply.headers().get("set-cookie").is_none());
    assert!(reply.text().expect("body").contains("not valid"));
}

/// A path the UI does not have answers a page with the navigation (404), not the API's JSON;
/// without a session it leads to sign-in like every page.
#[test]
fn a_page_the_ui_does_not_have_is_a_page_with_the_navigation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let cookie = cookie_of(&sign_in(&server, &server.token().expect("token")));
    let reply = raw()
        .get(format!("{}/ui/no/such/page", server.url))
        .header("Cookie", &cookie)
        .send()
        .expect("get");
    assert_eq!(reply.status(), 404);
    assert!(
        reply.headers()["content-type"]
            .to_str()
            .is_ok_and(|t| t.starts_with("text/html")),
        "{:?}",
        reply.headers()
    );
    let page = reply.text().expect("body");
    assert!(page.contains("There is no page at"), "{page}");
    assert!(page.contains("<code>/ui/no/such/page</code>"), "{page}");
    assert!(page.contains("href=\"/ui/runs\""), "the navigation: {page}");
    let reply = raw()
        .get(format!("{}/ui/no/such/page", server.url))
        .send()
        .expect("get");
    assert_eq!(reply.status(), 303);
    // The API's unknown paths stay JSON.
    let (code, body) = server.get("/v3/no/such/thing");
    assert_eq!(code, 404, "{body}");
}

#[test]
fn writes_from_other_sites_frames_and_open_redirects_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    sim_profile(&server, "p", &sub(&dir, "sim"), &[], 0, None);
    let cookie = cookie_of(&sign_in(&server, &server.token().expect("token")));
    let http = raw();
    let disable = format!("{}/ui/ns/default/profiles/p/status", server.url);
    // A form another site's page posts, with the victim's cookie (an old browser without
    // SameSite), is refused by its origin.
    for (header, value) in [
        ("Origin", "http://evil.example"),
        ("Sec-Fetch-Site", "cross-site"),
    ] {
        let reply = http
            .post(&disable)
            .header("Cookie", &cookie)
            .header(header, value)
            .form(&[("status", "DISABLED")])
            .send()
            .expect("post");
        assert_eq!(reply.status(), 403, "{header}: {value}");
    }
    let (_, status) = server.get("/v3/namespaces/default/profiles/p/status");
    assert_eq!(status, "ENABLED");
    // The same form from the UI's own page works.
    let reply = http
        .post(&disable)
        .header("Cookie", &cookie)
        .header("Origin", &server.url)
        .header("Sec-Fetch-Site", "same-origin")
        .form(&[("status", "DISABLED")])
        .send()
        .expect("post");
    assert_eq!(reply.status(), 200);
    let (_, status) = server.get("/v3/namespaces/default/profiles/p/status");
    assert_eq!(status, "DISABLED");
    // The API itself still takes no form, cookie or not.
    let reply = http
        .post(format!(
            "{}/v3/namespaces/default/profiles/p/enable",
            server.url
        ))
        .header("Cookie", &cookie)
        .form(&[("x", "y")])
        .send()
        .expect("post");
    assert_eq!(reply.status(), 415);
    // The cookie is no API token.
    let reply = http
        .post(format!(
            "{}/v3/namespaces/default/profiles/p/enable",
            server.url
        ))
        .header("Cookie", &cookie)
        .send()
        .expect("post");
    assert_eq!(reply.status(), 401);
    // After sign-in, only pages of the UI are gone to.
    for evil in [
        "https://evil.example/",
        "//evil.example/ui",
        "/ui//evil.example",
    ] {
        let reply = http
            .post(format!("{}/ui/login", server.url))
            .form(&[
                ("token", server.token().expect("token").as_str()),
                ("next", evil),
            ])
            .send()
            .expect("sign in");
        assert_eq!(reply.status(), 303);
        assert_eq!(reply.headers()["location"], "/ui", "{evil}");
    }
}

#[test]
fn bad_input_to_the_ui_is_a_clear_4xx() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let run = kept_failed_run(&server, &dir, "fails", "1");
    let cookie = cookie_of(&sign_in(&server, &server.token().expect("token")));
    let http = raw();
    let page = format!("{}{}", server.url, ui_path(&run));
    let post = |tail: &str, form: &[(&str, &str)]| {
        let reply = http
            .post(format!("{page}{tail}"))
            .header("Cookie", &cookie)
            .header("HX-Request", "true")
            .form(form)
            .send()
            .expect("post");
        let status = reply.status().as_u16();
        (status, reply.text().expect("body"))
    };
    let long = "9".repeat(5000);
    // (path, form, status, what the notice says)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, u16, &'a str);
    let cases: Vec<Case> = vec![
        (
            "/extend",
            vec![("at", "tomorrow"), ("tzOffset", "0")],
            400,
            "not a date",
        ),
        (
            "/extend",
            vec![("at", "2020-01-01T00:00"), ("tzOffset", "0")],
            400,
            "future",
        ),
        (
            "/extend",
            vec![("at", "2030-01-01T00:00"), ("tzOffset", "99999")],
            400,
            "zone",
        ),
        (
            "/extend",
            vec![("at", "2030-01-01T00:00"), ("tzOffset", &long)],
            400,
            "",
        ),
        ("/extend", vec![("by", "forever")], 400, "duration"),
        ("/extend", vec![("by", "999999999999h")], 400, ""),
        (
            "/cluster",
            vec![("operation", "explode")],
            400,
            "not an operation",
        ),
        (
            "/cluster",
            vec![("operation", "expand"), ("nodes", &long)],
            400,
            "",
        ),
        ("/deprovision?force=maybe", vec![], 400, "true or false"),
    ];
    for (tail, form, code, says) in cases {
        let (status, body) = post(tail, &form);
        assert_eq!(status, code, "{tail} {form:?}: {body}");
        assert!(body.contains(says), "{tail} {form:?}: {body}");
    }
    // A form far beyond any profile's size.
    let fields: Vec<(String, String)> = (0..20_000)
        .map(|i| (format!("p.x{i}"), "v".into()))
        .collect();
    let reply = http
        .post(format!("{}/ui/ns/default/profiles/kept", server.url))
        .header("Cookie", &cookie)
        .form(&fields)
        .send()
        .expect("post");
    assert!(reply.status().is_client_error(), "{}", reply.status());
    // Nothing of it changed the run, and the server still answers.
    let (code, after) = server.get(&run);
    assert_eq!(code, 200);
    assert_eq!(after["cluster"]["status"], "WAITING", "{after}");
}

#[test]
fn the_run_list_pages_through_a_namespaces_older_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(&server, "many", "true", json!({}));
    // Starts refused by the quota are recorded too (REJECTED), and cost nothing.
    let (code, ns) = server.put("/v3/namespaces/default", json!({"maxLiveRuns": 0}));
    assert_eq!(code, 200, "{ns}");
    let mut ids = Vec::new();
    for _ in 0..52 {
        let (code, reply) = server.post_json(
            "/v3/namespaces/default/apps/many/workflows/p/start",
            json!({}),
        );
        assert!(code >= 400, "{reply}");
        let (_, runs) = server.get("/v3/namespaces/default/apps/many/workflows/p/runs?limit=1");
        ids.push(runs[0]["runid"].as_str().expect("id").to_string());
    }
    let cookie = cookie_of(&sign_in(&server, &server.token().expect("token")));
    let page = |path: &str| {
        raw()
            .get(format!("{}{path}", server.url))
            .header("Cookie", &cookie)
            .send()
            .expect("get")
            .text()
            .expect("body")
    };
    let first = page("/ui/runs?namespace=default");
    assert!(
        first.contains(&ids[51][..13]),
        "the newest run is on the first page"
    );
    assert!(
        !first.contains(&format!(">{}<", &ids[0][..13])),
        "the oldest is not"
    );
    let older = first
        .split("href=\"")
        .filter_map(|s| s.split('"').next())
        .find(|h| h.contains("before="))
        .expect("a link to older runs")
        .replace("&amp;", "&");
    let second = page(&older);
    assert!(
        second.contains(&ids[0][..13]),
        "the oldest run is on the next page"
    );
    assert!(second.contains("Newest runs"));
    assert!(
        !second.contains("hx-trigger=\"every 2s\""),
        "an older page stays still"
    );
}

#[test]
fn a_runs_events_stream_as_server_sent_events_and_end_with_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    sim_profile(
        &server,
        "quick",
        &sub(&dir, "sim"),
        &[("nodes", "1")],
        0,
        None,
    );
    deploy(
        &server,
        "done",
        "echo '<script>alert(1)</script>'",
        json!({}),
    );
    let run = start(&server, "done", json!({"system.profile.name": "quick"}));
    wait_until(&server, &run, LIMIT, |r| {
        r["cluster"]["status"] == "DEPROVISIONED"
    });
    let cookie = cookie_of(&sign_in(&server, &server.token().expect("token")));
    let page = format!("{}{}", server.url, ui_path(&run));
    let reply = raw()
        .get(format!("{page}/events"))
        .header("Cookie", &cookie)
        .send()
        .expect("stream");
    assert_eq!(reply.headers()["content-type"], "text/event-stream");
    let body = reply.text().expect("a finished run's stream ends");
    assert!(body.contains("event: events\nid: "), "{body}");
    assert!(body.contains("DEPROVISIONED"), "{body}");
    assert!(body.trim_end().ends_with("event: end\ndata:"), "{body}");
    // Starting after the last event a browser saw, only the end follows.
    let last: u64 = body
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .filter_map(|id| id.parse().ok())
        .max()
        .expect("ids");
    let again = raw()
        .get(format!("{page}/events"))
        .header("Cookie", &cookie)
        .header("Last-Event-ID", last.to_string())
        .send()
        .expect("stream")
        .text()
        .expect("body");
    assert!(!again.contains("event: events"), "{again}");
    // The program's output is shown as text, never as markup.
    let logs = raw()
        .get(format!("{page}/logs"))
        .header("Cookie", &cookie)
        .send()
        .expect("logs")
        .text()
        .expect("body");
    assert!(logs.contains("&lt;script&gt;"), "{logs}");
    assert!(!logs.contains("<script>"), "{logs}");
}
