//! Provisioner plugins: outside programs the server loads from its plugin directories, held to
//! the built-ins' guarantees. The example plugin `pcloud` (Python: machines are processes, the
//! cloud's records a SQLite database) provisions real runs, survives a SIGKILL of the server
//! mid-create without a leak or a duplicate, and passes the conformance kit; plugins that
//! crash, hang, flood or garble leave the server up and say so in their runs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::profiles::put_profile;
use crate::support::runs::*;
use crate::support::server::{Options, Server, run_ebb};

const PCLOUD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/plugins/pcloud");
const UNRULY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/support/plugins/unruly.py"
);

/// A plugin directory in `dir` with a copy of the pcloud example.
fn install_pcloud(dir: &Path) -> PathBuf {
    let plugins = dir.join("plugins");
    let target = plugins.join("pcloud");
    std::fs::create_dir_all(&target).expect("plugin dir");
    for file in ["plugin.json", "widget.json", "pcloud.py"] {
        std::fs::copy(Path::new(PCLOUD).join(file), target.join(file)).expect("copy");
    }
    plugins
}

/// A server on `dir/data` loading the plugins in `plugins`.
pub(crate) fn server(dir: &Path, plugins: &Path) -> Server {
    Server::start_at(
        &dir.join("data"),
        Options {
            args: vec!["--plugin-dir".into(), plugins.display().to_string()],
            ..Options::default()
        },
    )
}

/// The cloud's journal: (created ids by token, deleted ids).
fn journal(cloud: &Path) -> (BTreeMap<String, Vec<String>>, Vec<String>) {
    let text = std::fs::read_to_string(cloud.join("calls.log")).unwrap_or_default();
    let mut created: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut deleted = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["create", id, token] => created
                .entry(token.to_string())
                .or_default()
                .push(id.to_string()),
            ["delete", id] => deleted.push(id.to_string()),
            _ => panic!("unexpected journal line {line}"),
        }
    }
    (created, deleted)
}

/// Machine processes of the cloud in `cloud` that still run.
fn machines_running(cloud: &Path) -> Vec<String> {
    let needle = cloud.display().to_string();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&needle) && c.contains(" machine "))
        .collect()
}

/// Each node was made once (one machine per idempotency token), every machine deleted once,
/// and nothing of the cloud is left: no machine directory, no machine process.
#[track_caller]
fn assert_clean(cloud: &Path, nodes: usize) {
    let (created, deleted) = journal(cloud);
    assert_eq!(created.len(), nodes, "tokens: {created:?}");
    for (token, ids) in &created {
        assert_eq!(ids.len(), 1, "{token} made {ids:?}");
    }
    let made: BTreeSet<&String> = created.values().flatten().collect();
    let gone: BTreeSet<&String> = deleted.iter().collect();
    assert_eq!(made, gone, "every machine deleted");
    assert_eq!(deleted.len(), gone.len(), "each deleted once: {deleted:?}");
    let left: Vec<_> = std::fs::read_dir(cloud)
        .expect("cloud dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("m-"))
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "machine dirs left: {left:?}");
    assert_eq!(machines_running(cloud), Vec::<String>::new());
}

fn pcloud_profile(server: &Server, cloud: &Path, nodes: &str, boot: &str) {
    let root = cloud.display().to_string();
    put_profile(
        server,
        "pc",
        "pcloud",
        &[("root", &root), ("nodes", nodes), ("bootDelay", boot)],
        &[],
        None,
    );
}

#[test]
fn a_plugin_is_listed_and_provisions_a_run_like_a_builtin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = install_pcloud(dir.path());
    let cloud = dir.path().join("cloud");
    let server = server(dir.path(), &plugins);

    let (code, p) = server.get("/v3/provisioners/pcloud");
    assert_eq!(code, 200, "{p}");
    assert_eq!(p["plugin"]["version"], "1.0.0", "{p}");
    assert_eq!(p["plugin"]["status"], "loaded", "{p}");
    assert!(
        p["plugin"].get("dir").is_none(),
        "only admins see where: {p}"
    );
    let groups: Vec<&str> = p["configuration-groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| g["label"].as_str())
        .collect();
    assert_eq!(groups, ["Cluster", "Cloud", "Services", "Retries"]);
    let listed = server.get("/v3/provisioners").1;
    assert!(
        listed
            .as_array()
            .expect("list")
            .iter()
            .any(|p| p["name"] == "pcloud"),
        "{listed}"
    );
    // The profile's properties are checked against the plugin's declared spec.
    let (code, refused) = server.put(
        "/v3/namespaces/default/profiles/bad",
        json!({"provisioner": {"name": "pcloud", "properties": [{"name": "nodes", "value": "99"}]}}),
    );
    assert_eq!(code, 400, "{refused}");
    assert!(refused.to_string().contains("nodes"), "{refused}");
    // ... and by the plugin itself, which answers `validate` for what only it knows.
    let (code, refused) = server.put(
        "/v3/namespaces/default/profiles/bad",
        json!({"provisioner": {"name": "pcloud", "properties": [{"name": "root", "value": "relative/dir"}]}}),
    );
    assert_eq!(code, 400, "{refused}");
    let said = refused.to_string();
    assert!(
        said.contains("provisioner.properties.root") && said.contains("absolute path"),
        "{refused}"
    );

    pcloud_profile(&server, &cloud, "2", "300ms");
    let marker = dir.path().join("ran");
    deploy(
        &server,
        "a",
        &format!("pwd >> '{}'", marker.display()),
        json!({}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "pc"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let ran = std::fs::read_to_string(&marker).expect("the program ran");
    assert!(
        ran.trim().starts_with(&cloud.display().to_string()) && ran.contains("/home"),
        "the program ran in its master machine's home: {ran}"
    );
    assert_clean(&cloud, 2);

    let (code, all) = server.get("/v3/plugins");
    assert_eq!(code, 200, "{all}");
    let pc = &all["plugins"][0];
    assert_eq!(pc["name"], "pcloud", "{all}");
    assert_eq!(pc["dir"], plugins.join("pcloud").display().to_string());
    assert!(pc["calls"].as_u64() > Some(4), "{all}");
    assert_eq!(pc["broken"], 0, "{all}");
}

#[test]
fn a_server_killed_mid_create_of_a_plugin_leaks_nothing_and_makes_nothing_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = install_pcloud(dir.path());
    let cloud = dir.path().join("cloud");
    let server = server(dir.path(), &plugins);
    pcloud_profile(&server, &cloud, "3", "2s");
    let marker = dir.path().join("ran");
    deploy(
        &server,
        "a",
        &format!("echo \"$EBB_RUN_ID\" >> '{}'", marker.display()),
        json!({}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "pc"}));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while journal(&cloud).0.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no create reached the plugin"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill();

    let server = self::server(dir.path(), &plugins);
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let ran = std::fs::read_to_string(&marker).expect("ran");
    assert_eq!(ran.lines().count(), 1, "the program ran once: {ran}");
    assert_clean(&cloud, 3);
}

/// A plugin directory named `name` whose plugin is `unruly.py` with `fault`.
fn unruly(plugins: &Path, name: &str, fault: &str) {
    let dir = plugins.join(name);
    std::fs::create_dir_all(&dir).expect("dir");
    let descriptor = json!({
        "name": name,
        "kind": "provisioner",
        "protocol": 1,
        "version": "0.0.1",
        "command": ["python3", UNRULY, name, fault],
        "properties": [
            {"name": "nodes", "type": "integer", "min": 1, "max": 5},
            {"name": "root", "type": "text", "hostPath": true}
        ],
        "concurrency": 2,
        "timeout": "2s"
    });
    std::fs::write(dir.join("plugin.json"), descriptor.to_string()).expect("write");
}

#[test]
fn plugins_that_crash_hang_flood_or_garble_leave_the_server_up_and_say_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("plugins");
    unruly(&plugins, "crashy", "crash");
    unruly(&plugins, "hangs", "hang");
    unruly(&plugins, "floods", "flood");
    unruly(&plugins, "garbles", "garbage");
    // Broken descriptors: one without its command, one not JSON, one shadowing a built-in.
    for (name, text) in [
        ("nocommand", r#"{"name": "nocommand", "kind": "provisioner", "protocol": 1, "version": "1"}"#.to_string()),
        ("notjson", "{ this is not json".to_string()),
        ("shadow", json!({"name": "sim", "kind": "provisioner", "protocol": 1, "version": "1", "command": ["true"]}).to_string()),
    ] {
        std::fs::create_dir_all(plugins.join(name)).expect("dir");
        std::fs::write(plugins.join(name).join("plugin.json"), text).expect("write");
    }
    let server = server(dir.path(), &plugins);

    let all = server.get("/v3/plugins").1;
    let loaded: BTreeSet<&str> = all["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(
        loaded,
        BTreeSet::from(["crashy", "floods", "garbles", "hangs"])
    );
    let broken = all["broken"].as_array().expect("broken");
    let said = |dir: &str| {
        broken
            .iter()
            .find(|b| b["dir"].as_str().is_some_and(|d| d.ends_with(dir)))
            .map(|b| b["error"].as_str().unwrap_or_default().to_string())
            .unwrap_or_else(|| panic!("{dir} not reported: {all}"))
    };
    let missing = said("nocommand");
    assert!(
        missing.contains("nocommand/plugin.json") && missing.contains("command"),
        "{missing}"
    );
    assert!(said("notjson").contains("notjson/plugin.json"), "{all}");
    assert!(said("shadow").contains("built-in"), "{all}");

    let cloud = dir.path().join("cloud");
    let root = cloud.display().to_string();
    let mut runs = Vec::new();
    for (plugin, nodes, budget) in [
        ("crashy", "2", "2m"),
        ("hangs", "1", "3s"),
        ("floods", "1", "1s"),
        ("garbles", "1", "1s"),
    ] {
        put_profile(
            &server,
            plugin,
            plugin,
            &[("root", &root), ("nodes", nodes), ("retryBudget", budget)],
            &[],
            None,
        );
        deploy(&server, plugin, "true", json!({}));
        runs.push(start(
            &server,
            plugin,
            json!({"system.profile.name": plugin}),
        ));
    }
    let done: Vec<Value> = runs
        .iter()
        .map(|r| wait_deprovisioned(&server, r))
        .collect();
    assert_eq!(
        done[0]["status"], "COMPLETED",
        "crashes are retried: {}",
        done[0]
    );
    for (i, says) in [
        (1, "did not answer create within 2s"),
        (2, "larger than"),
        (3, "not an answer"),
    ] {
        assert_eq!(done[i]["status"], "FAILED", "{}", done[i]);
        let message = done[i]["failure"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{message}");
        let events = server.get(&format!("{}/events", runs[i])).1.to_string();
        assert!(events.contains(says), "{events}");
    }
    assert_eq!(server.get("/v3/health").0, 200);
    let all = server.get("/v3/plugins").1;
    let crashy = all["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .find(|p| p["name"] == "crashy")
        .expect("crashy")
        .clone();
    assert!(crashy["broken"].as_u64() > Some(0), "{crashy}");
    assert!(crashy["starts"].as_u64() > Some(1), "{crashy}");
    assert_eq!(machines_running(&cloud), Vec::<String>::new());
}

#[test]
fn a_plugin_dir_others_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = install_pcloud(dir.path());
    let script = plugins.join("pcloud/pcloud.py");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let server = server(dir.path(), &plugins);
    assert_eq!(server.get("/v3/provisioners/pcloud").0, 404);
    let all = server.get("/v3/plugins").1;
    let error = all["broken"][0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("pcloud.py") && error.contains("other users"),
        "{all}"
    );
}

#[test]
fn the_conformance_kit_passes_the_example_plugins() {
    let boxes = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/plugins/boxes");
    for args in [
        vec!["plugin", "test", PCLOUD, "-p", "bootDelay=200ms"],
        vec!["plugin", "test", boxes],
    ] {
        let (code, out, err) = run_ebb(&args, &[], None);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        assert!(out.contains("11 of 11 cases hold"), "{args:?}: {out}");
    }
}

/// The book's tour, "Writing a plugin", shows the boxes plugin as it is in `examples/`, which
/// the kit passes: the example a reader copies works.
#[test]
fn the_tours_plugin_example_is_the_one_tested() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("docs/src/tour.md")).expect("the tour");
    for file in ["boxes.py", "plugin.json"] {
        let text = std::fs::read_to_string(root.join("examples/plugins/boxes").join(file))
            .expect("example");
        assert!(
            readme.contains(text.trim()),
            "docs/src/tour.md lacks examples/plugins/boxes/{file} as it is"
        );
    }
}

/// The janitor sweeps a plugin's account like a built-in's: a cluster whose store was lost is
/// found through the plugin's `list` and deleted through its `delete`.
#[test]
fn the_janitor_sweeps_what_a_plugin_made_for_a_lost_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = install_pcloud(dir.path());
    let cloud = dir.path().join("cloud");
    let server = server(dir.path(), &plugins);
    pcloud_profile(&server, &cloud, "2", "0s");
    deploy(&server, "a", "sleep 60", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "pc"}));
    wait_until(&server, &run, Duration::from_secs(30), |r| {
        r["status"] == "RUNNING"
    });
    server.kill();
    crate::support::server::lose_store(&dir.path().join("data"));

    let server = self::server(dir.path(), &plugins);
    pcloud_profile(&server, &cloud, "2", "0s");
    let (code, sweep) = server.post("/v3/janitor/run");
    assert_eq!(code, 200, "{sweep}");
    let orphans = sweep["orphans"].as_array().cloned().unwrap_or_default();
    assert_eq!(orphans.len(), 2, "{sweep:#}");
    for o in &orphans {
        assert_eq!(o["provisioner"], "pcloud", "{o}");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !machines_running(&cloud).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "machines left running"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_clean(&cloud, 2);
}

/// Who may rename an entry in a directory above the plugins swaps them: such a directory is
/// refused at start-up, as a plugin directory that is a link; and what changes after start-up
/// is refused when the plugin's process would start.
#[test]
fn the_directories_above_a_plugin_and_its_later_changes_are_checked() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    // Above the plugin directory, a directory its group may write.
    let shared = dir.path().join("shared");
    let plugins = install_pcloud(&shared);
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o775)).expect("chmod");
    let first = server(dir.path(), &plugins);
    assert_eq!(first.get("/v3/provisioners/pcloud").0, 404);
    let all = first.get("/v3/plugins").1;
    let error = all["broken"][0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("shared") && error.contains("may be changed by other users"),
        "{all}"
    );
    drop(first);

    // A plugin directory that is a link to one elsewhere.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let linked = dir.path().join("linked");
    std::fs::create_dir_all(&linked).expect("dir");
    std::os::unix::fs::symlink(plugins.join("pcloud"), linked.join("pcloud")).expect("link");
    let second = server(&dir.path().join("second"), &linked);
    assert_eq!(second.get("/v3/provisioners/pcloud").0, 404);
    let all = second.get("/v3/plugins").1;
    let error = all["broken"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("symbolic link"), "{all}");
    drop(second);

    // Loaded safe, then made writable by others: its process is not started.
    let cloud = dir.path().join("cloud");
    let server = server(dir.path(), &plugins);
    assert_eq!(server.get("/v3/provisioners/pcloud").0, 200);
    std::fs::set_permissions(
        plugins.join("pcloud/pcloud.py"),
        std::fs::Permissions::from_mode(0o666),
    )
    .expect("chmod");
    // Checked when its first process would start: the profile is taken (a plugin that
    // cannot answer does not hold it up); its run's calls are refused, saying why, and
    // nothing is made.
    pcloud_profile(&server, &cloud, "1", "0");
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "pc"}));
    let started = std::time::Instant::now();
    loop {
        let (_, events) = server.get(&format!("{run}/events"));
        let refused = events.as_array().into_iter().flatten().any(|e| {
            e["message"].as_str().is_some_and(|m| {
                m.contains("not safe to run from") && m.contains("may be changed by other users")
            })
        });
        if refused {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{events}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, body) = server.post(&format!("{run}/stop"));
    assert_eq!(code, 200, "{body}");
    assert!(!cloud.exists());
}
