//! Directories on the server's host are an instance admin's to choose, and the janitor
//! deletes only what ebb made there: never through a link, never another user's.

use serde_json::{Value, json};

use crate::support::server::{Server, assert_error, work_dir};

#[test]
fn only_an_instance_admin_chooses_a_directory_on_the_servers_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let admin = super::team_with_admin(&server);
    let victim = dir.path().join("victim");
    let victim = victim.to_str().expect("utf-8");
    for (provisioner, property) in [("local", "workDir"), ("sim", "stateDir")] {
        let body = json!({"provisioner": {"name": provisioner, "properties": [
            {"name": property, "value": victim}
        ]}});
        let (code, reply) = server.call(
            "PUT",
            "/v3/namespaces/team/profiles/mine",
            Some(body.clone()),
            Some(&admin),
        );
        assert_error(
            (code, reply),
            403,
            &format!(
                "provisioner.properties.{property}: names a directory on the server's own host"
            ),
        );
        // An instance admin may.
        let (code, reply) = server.put("/v3/namespaces/team/profiles/vetted", body);
        assert_eq!(code, 200, "{reply}");
    }
}

/// A sandbox record as the local provisioner writes it, claiming `id`, tagged as this
/// server's and a run the store does not know: an orphan to the janitor's eyes.
fn record(id: &str, dir: &std::path::Path) -> Value {
    json!({
        "id": id,
        "tags": {"ebb:run": "0190-gone", "ebb:node": "n1", "ebb:server": "ebb"},
        "address": "127.0.1.200",
        "dir": dir,
        "createdAt": 0
    })
}

#[test]
fn the_janitor_follows_no_link_and_no_record_that_lies_about_its_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let root = work_dir(dir.path()).join("local");
    std::fs::create_dir_all(&root).expect("mkdir");
    // A run directory that is a link to someone else's directory, holding a record.
    let victim = dir.path().join("victim");
    std::fs::create_dir_all(victim.join("n1")).expect("mkdir");
    std::fs::write(victim.join("n1").join("keep"), "precious").expect("write");
    let planted = root.join("evil").join("n1");
    std::fs::write(
        victim.join("n1").join("node.json"),
        record("evil/n1", &planted).to_string(),
    )
    .expect("write");
    std::os::unix::fs::symlink(&victim, root.join("evil")).expect("symlink");
    // A record that claims another directory's id.
    let other = root.join("c").join("n1");
    std::fs::create_dir_all(&other).expect("mkdir");
    std::fs::write(other.join("keep"), "precious").expect("write");
    let liar = root.join("a").join("n1");
    std::fs::create_dir_all(&liar).expect("mkdir");
    std::fs::write(liar.join("node.json"), record("c/n1", &other).to_string()).expect("write");

    let (code, sweep) = server.post("/v3/janitor/run");
    assert_eq!(code, 200, "{sweep}");
    assert!(
        victim.join("n1").join("keep").exists(),
        "a link was followed: {sweep:#}"
    );
    assert!(
        other.join("keep").exists(),
        "a lying record was believed: {sweep:#}"
    );
    assert_eq!(
        sweep["orphans"].as_array().map(Vec::len),
        Some(0),
        "neither is ebb's: {sweep:#}"
    );
}

#[test]
fn a_server_refuses_a_data_or_work_dir_of_another_user() {
    let dir = tempfile::tempdir().expect("tempdir");
    if !is_root() {
        eprintln!("not root: another user's directory cannot be made here, so not checked");
        return;
    }
    for which in ["data", "work"] {
        let theirs = dir.path().join(format!("theirs-{which}"));
        std::fs::create_dir_all(&theirs).expect("mkdir");
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
        let mine = dir.path().join(format!("mine-{which}"));
        let (data, work) = if which == "data" {
            (theirs.clone(), mine.join("work"))
        } else {
            (mine.clone(), theirs.clone())
        };
        let work = work.to_str().expect("utf-8").to_string();
        let stderr = crate::support::server::serve_fails_with(&data, &["--work-dir", &work]);
        assert!(
            stderr.contains("is owned by another user (uid 65534)"),
            "{stderr}"
        );
    }
}

/// Whether the tests run as root (who can make another user's directory).
fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt as _;
        m.uid() == 0
    })
}
