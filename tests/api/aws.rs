//! The aws-ec2 provisioner against a real moto server, through the official SDK: full
//! lifecycles, a SIGKILL mid-provisioning, fatal and retryable errors, and secrets that never
//! come back out.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::moto::*;
use crate::support::profiles::echo_services;
use crate::support::runs::*;
use crate::support::server::{Options, Server};

fn run_id(path: &str) -> &str {
    path.rsplit('/').next().expect("run id")
}

fn events(server: &Server, run: &str) -> Vec<Value> {
    let (code, body) = server.get(&format!("{run}/events"));
    assert_eq!(code, 200, "{body}");
    body.as_array().cloned().unwrap_or_default()
}

/// No answer, log line or stored byte holds the secret.
#[track_caller]
fn assert_secret_never_shown(server: &Server, data: &Path, run: &str) {
    let mut answers = Vec::new();
    for path in [
        "/v3/namespaces/default/securekeys".to_string(),
        "/v3/namespaces/default/securekeys/aws-secret".to_string(),
        "/v3/namespaces/default/profiles".to_string(),
        "/v3/namespaces/default/profiles/aws".to_string(),
        run.to_string(),
        format!("{run}/events"),
        format!("{run}/operations"),
        format!("{run}/operations/1"),
        format!("{run}/logs"),
        "/v3/namespaces/default/runs".to_string(),
    ] {
        let (code, body) = server.get(&path);
        assert!(code < 500, "{path}: {code} {body}");
        answers.push((path, body.to_string()));
    }
    for (path, text) in &answers {
        assert!(!text.contains(SECRET), "{path} shows the secret: {text}");
    }
    let logs = server.logs().join("\n");
    assert!(!logs.contains(SECRET), "the server log shows the secret");
    for (path, bytes) in files(data) {
        let found = bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
        assert!(!found, "{} holds the secret in the clear", path.display());
    }
}

#[test]
fn a_three_node_cluster_is_tagged_run_and_terminated_and_its_secret_never_shows() {
    let moto = Moto::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = sub(&dir, "data");
    let server = Server::start_at(&data, Options::default());
    put_secret(&server);
    aws_profile(&server, &moto, "aws", &[("tags", "team=data")], Some(3600));
    deploy(&server, "a", "cat \"$EBB_CLUSTER_FILE\"", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "aws"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");

    let id = run_id(&run);
    let instances = moto.of_run(id);
    assert_eq!(instances.len(), 3, "one instance per node: {instances:#?}");
    let nodes: BTreeSet<&str> = instances
        .iter()
        .map(|i| i["tags"]["ebb:node"].as_str().expect("node tag"))
        .collect();
    assert_eq!(nodes, ["master", "worker-1", "worker-2"].into());
    for i in &instances {
        assert_eq!(i["state"], "terminated", "{i}");
        assert_eq!(i["tags"]["ebb:server"], "ebb", "{i}");
        assert_eq!(i["tags"]["ebb:namespace"], "default", "{i}");
        assert_eq!(i["tags"]["ebb:profile"], "USER:aws", "{i}");
        assert_eq!(i["tags"]["team"], "data", "{i}");
        assert!(
            i["tags"]["Name"]
                .as_str()
                .is_some_and(|n| n.starts_with("ebb-")),
            "{i}"
        );
        assert_eq!(
            (i["imageId"].as_str(), i["instanceType"].as_str()),
            (Some(AMI), Some("t3.micro"))
        );
        // The fail-safe: shutting down terminates, and the instance shuts itself down.
        assert_eq!(i["shutdownBehavior"], "terminate", "{i}");
        let script = i["userData"].as_str().expect("user data");
        assert!(script.contains("shutdown -h +$left"), "{script}");
    }
    assert_eq!(moto.count("RunInstances"), 3);
    assert_eq!(moto.count("TerminateInstances"), 3);
    // Lookups by id were batched: some DescribeInstances asked for several nodes at once.
    let widest = moto
        .calls()
        .iter()
        .filter(|c| c["action"] == "DescribeInstances")
        .filter_map(|c| c["filters"]["instance-id"].as_array().map(Vec::len))
        .max()
        .unwrap_or(0);
    assert!(
        widest >= 2,
        "every DescribeInstances asked for one instance: {:#?}",
        moto.calls()
    );

    // The program saw the nodes' addresses and EC2's facts.
    let (_, logs) = server.get(&format!("{run}/logs"));
    let logs = logs.to_string();
    assert!(logs.contains("instanceId"), "{logs}");
    assert_secret_never_shown(&server, &data, &run);
}

#[test]
fn killed_while_ec2_answers_a_create_resumes_by_tag_without_a_second_instance() {
    let moto = Moto::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = sub(&dir, "data");
    let server = Server::start_at(&data, Options::default());
    put_secret(&server);
    aws_profile(&server, &moto, "aws", &[], None);
    deploy(&server, "a", "true", json!({}));
    // EC2 makes each instance at once but its answer is slow: ebb dies before hearing it.
    moto.fault(json!({"action": "RunInstances", "delay": 60}));
    let run = start(&server, "a", json!({"system.profile.name": "aws"}));
    let id = run_id(&run).to_string();
    let started = Instant::now();
    while moto.of_run(&id).len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "creates never landed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill();
    moto.clear_faults();

    // Moto ignores ClientToken, so only the tag lookup can keep a second set away.
    let server = Server::start_at(&data, Options::default());
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let instances = moto.of_run(&id);
    assert_eq!(instances.len(), 3, "no second instance: {instances:#?}");
    assert!(
        instances.iter().all(|i| i["state"] == "terminated"),
        "{instances:#?}"
    );
    assert_eq!(moto.count("RunInstances"), 3);
    let found = events(&server, &run)
        .iter()
        .filter(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("made by an earlier create"))
        })
        .count();
    assert_eq!(found, 3, "each node was found by its tags");
}

#[test]
fn ec2_errors_are_retried_or_fatal_with_the_clouds_words_and_no_secret() {
    let moto = Moto::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = sub(&dir, "data");
    let server = Server::start_at(&data, Options::default());
    put_secret(&server);
    deploy(&server, "a", "true", json!({}));

    // A secret given in the clear is refused, in a profile and as a run's override.
    let mut body = json!({"provisioner": {"name": "aws-ec2", "properties": [
        {"name": "accessKeyId", "value": "testing"},
        {"name": "secretAccessKey", "value": SECRET},
    ]}});
    let (code, reply) = server.put("/v3/namespaces/default/profiles/clear", body.clone());
    assert_eq!(code, 400, "{reply}");
    assert!(
        reply["message"].as_str().is_some_and(|m| m.starts_with(
            "provisioner.properties.secretAccessKey: is a secret: give it as a reference"
        )),
        "{reply}"
    );
    body["provisioner"]["properties"][1]["value"] = json!("${secure(aws-secret)}");
    let (code, reply) = server.put("/v3/namespaces/default/profiles/clear", body.clone());
    assert_eq!(code, 200, "{reply}");
    let (code, reply) = server.post_json(
        &format!("{}/start", program("a")),
        json!({"system.profile.name": "clear", "system.profile.properties.secretAccessKey": SECRET}),
    );
    assert_eq!(code, 400, "{reply}");
    // A reference in runtime arguments is refused whatever it names.
    let (code, reply) = server.post_json(
        &format!("{}/start", program("a")),
        json!({"system.profile.name": "clear", "system.profile.properties.secretAccessKey": "${secure(aws-secret)}"}),
    );
    assert_eq!(code, 400, "{reply}");
    assert!(
        reply["message"]
            .as_str()
            .is_some_and(|m| m.contains("runtime arguments may not refer to secure keys")),
        "{reply}"
    );
    // A profile's reference to a key that does not exist: refused when a run starts.
    body["provisioner"]["properties"][1]["value"] = json!("${secure(nope)}");
    let (code, reply) = server.put("/v3/namespaces/default/profiles/dangling", body);
    assert_eq!(code, 200, "{reply}");
    let (code, reply) = server.post_json(
        &format!("{}/start", program("a")),
        json!({"system.profile.name": "dangling"}),
    );
    assert_eq!(code, 400, "{reply}");
    assert!(
        reply["message"]
            .as_str()
            .is_some_and(|m| m.contains("secure key 'nope' does not exist")),
        "{reply}"
    );

    // Throttling twice: waited out as backpressure (never in the run's history), then the
    // cluster comes up.
    aws_profile(&server, &moto, "aws", &[("nodes", "1")], None);
    let launches = moto.count("RunInstances");
    moto.fault(json!({"action": "RunInstances", "status": 503, "code": "RequestLimitExceeded", "times": 2}));
    let run = start(&server, "a", json!({"system.profile.name": "aws"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(
        moto.count("RunInstances") - launches,
        3,
        "two throttled, one through"
    );
    let told = events(&server, &run)
        .iter()
        .filter(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("RequestLimitExceeded"))
        })
        .count();
    assert_eq!(told, 0, "{:#?}", events(&server, &run));

    // A bad AMI: fatal at once, in EC2's words; nothing is left.
    aws_profile(
        &server,
        &moto,
        "bad-ami",
        &[("nodes", "1"), ("imageId", "ami-00000000")],
        None,
    );
    let before = moto.count("RunInstances");
    let run = start(&server, "a", json!({"system.profile.name": "bad-ami"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "FAILED", "{done}");
    let failure = done["failure"].to_string();
    assert!(failure.contains("InvalidAMIID"), "{failure}");
    assert_eq!(
        moto.count("RunInstances") - before,
        1,
        "a fatal error is not retried"
    );
    assert!(moto.of_run(run_id(&run)).is_empty());

    // A provider that quotes the secret back: the message keeps only a mask.
    aws_profile(&server, &moto, "aws", &[("nodes", "1")], None);
    moto.fault(json!({
        "action": "RunInstances", "status": 401, "code": "AuthFailure",
        "message": format!("the key {SECRET} is not valid"), "times": 1
    }));
    let run = start(&server, "a", json!({"system.profile.name": "aws"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "FAILED", "{done}");
    let failure = done["failure"].to_string();
    assert!(
        failure.contains("AuthFailure: the key *** is not valid"),
        "{failure}"
    );
    assert_secret_never_shown(&server, &data, &run);
}

#[test]
fn the_janitor_terminates_an_instance_with_ebbs_tags_whose_run_the_store_does_not_know() {
    let moto = Moto::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = sub(&dir, "data");
    let server = Server::start_at(&data, Options::default());
    put_secret(&server);
    aws_profile(&server, &moto, "aws", &[("nodes", "2")], None);
    deploy(&server, "a", "sleep 60", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "aws"}));
    wait_until(&server, &run, Duration::from_secs(60), |r| {
        r["status"] == "RUNNING"
    });

    let stray = moto.run_instance(&[
        ("ebb:server", "ebb"),
        ("ebb:run", "019a0000-0000-7000-8000-000000000000"),
        ("ebb:node", "master"),
    ]);
    let foreign = moto.run_instance(&[
        ("ebb:server", "another-ebb"),
        ("ebb:run", "019a0000-0000-7000-8000-000000000001"),
        ("ebb:node", "master"),
    ]);
    let untagged = moto.run_instance(&[("team", "data")]);
    // A second instance for a node of the live run: not the one ebb recorded.
    let twin = moto.run_instance(&[
        ("ebb:server", "ebb"),
        ("ebb:run", run_id(&run)),
        ("ebb:node", "master"),
    ]);

    let (code, sweep) = server.post("/v3/janitor/run?dryRun=true");
    assert_eq!(code, 200, "{sweep}");
    let found: BTreeSet<&str> = sweep["orphans"]
        .as_array()
        .expect("orphans")
        .iter()
        .map(|o| o["id"].as_str().expect("id"))
        .collect();
    assert_eq!(found, [stray.as_str(), twin.as_str()].into(), "{sweep:#}");
    let aws = sweep["accounts"]
        .as_array()
        .expect("accounts")
        .iter()
        .find(|a| a["provisioner"] == "aws-ec2")
        .cloned()
        .expect("the moto account was listed");
    assert_eq!(
        aws["listed"], 4,
        "the run's two nodes, the stray and the twin: {sweep:#}"
    );

    let (code, out, err) = crate::support::server::run_ebb(
        &["--server", &server.url, "janitor", "run"],
        &[("EBB_TOKEN", server.token().expect("token").as_str())],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&stray) && out.contains("deleted"), "{out}");
    let state = |id: &str| {
        moto.instances()
            .into_iter()
            .find(|i| i["id"] == id)
            .map(|i| i["state"].clone())
            .expect("instance")
    };
    assert_eq!(state(&stray), "terminated");
    assert_eq!(state(&twin), "terminated");
    let noted = events(&server, &run).iter().any(|e| {
        e["message"].as_str().is_some_and(|m| {
            m.starts_with(&format!("janitor: deleted {twin} (it is not the resource"))
        })
    });
    assert!(
        noted,
        "the run's history tells what the janitor did: {:#?}",
        events(&server, &run)
    );
    assert_eq!(
        state(&foreign),
        "running",
        "another server's instance is left alone"
    );
    assert_eq!(
        state(&untagged),
        "running",
        "an instance without ebb's tags is left alone"
    );
    let live: Vec<Value> = moto
        .of_run(run_id(&run))
        .into_iter()
        .filter(|i| i["id"] != twin.as_str())
        .collect();
    assert_eq!(live.len(), 2);
    assert!(live.iter().all(|i| i["state"] == "running"), "{live:#?}");

    let (code, _) = server.post(&format!("{run}/stop"));
    assert_eq!(code, 200);
    wait_deprovisioned(&server, &run);
    let (_, status) = server.get("/v3/janitor");
    assert!(!status.to_string().contains(SECRET));
    assert_secret_never_shown(&server, &data, &run);
}

#[test]
fn a_templates_hardware_types_choose_the_instance_types() {
    let moto = Moto::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(&sub(&dir, "data"), Options::default());
    put_secret(&server);
    let template = echo_services(&server);
    aws_profile(
        &server,
        &moto,
        "zk",
        &[("nodes", "4"), ("template", template)],
        None,
    );
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "zk"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let instances = moto.of_run(run_id(&run));
    assert_eq!(instances.len(), 4);
    // The template puts the master service on `large` (m6i.xlarge on aws-ec2) and the rest
    // on its default `small` (t3.small), over the profile's t3.micro.
    for i in &instances {
        let want = if i["tags"]["ebb:node"] == "master" {
            "m6i.xlarge"
        } else {
            "t3.small"
        };
        assert_eq!(i["instanceType"], want, "{i}");
    }

    // A type mapping to a property aws-ec2 does not have is refused when the run starts.
    let (_, mut template) = server.get(&format!("/v3/templates/{template}"));
    template["hardwareTypes"]["small"]["aws-ec2"] = json!({"flavor": "big"});
    for field in [
        "scope",
        "created",
        "updated",
        "builtin",
        "writtenBy",
        "name",
    ] {
        template.as_object_mut().expect("object").remove(field);
    }
    let (code, body) = server.put("/v3/namespaces/default/templates/zk-flavor", template);
    assert_eq!(code, 200, "{body}");
    aws_profile(
        &server,
        &moto,
        "zk-flavor",
        &[("nodes", "4"), ("template", "zk-flavor")],
        None,
    );
    let (code, body) = server.post_json(
        &format!("{}/start", program("a")),
        json!({"system.profile.name": "zk-flavor"}),
    );
    assert_eq!(code, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("'flavor'")),
        "{body}"
    );
}
