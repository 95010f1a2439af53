use super::*;
use serde_json::json;

fn example() -> serde_json::Value {
    json!({
        "description": "ZooKeeper, one master, workers",
        "services": {
            "base": {"actions": {"install": {"type": "shell", "script": "mkdir -p base"}}},
            "zookeeper": {"dependencies": {"install": {"requires": ["base"]}},
                          "actions": {"start": {"type": "shell", "script": "echo zk"}}},
            "master": {"dependencies": {"runtime": {"requires": ["zookeeper"]}}},
            "worker": {"dependencies": {"runtime": {"requires": ["master"]}}}
        },
        "hardwareTypes": {"small": {"local": {}}, "large": {"local": {}}},
        "imageTypes": {"debian12": {"local": {}}},
        "compatibility": {"services": ["base", "zookeeper", "master", "worker"], "hardwareTypes": ["small", "large"], "imageTypes": ["debian12"]},
        "defaults": {"services": ["base", "zookeeper", "master", "worker"], "hardwareType": "small", "imageType": "debian12"},
        "constraints": {
            "size": {"min": 1, "max": 1000},
            "layout": {"mustCoexist": [["base", "worker"]], "cantCoexist": [["master", "worker"]]},
            "services": {"master": {"quantities": {"min": 1, "max": 1}, "hardwareTypes": ["large"]},
                         "zookeeper": {"quantities": {"min": 1, "max": 3}, "odd": true}}
        }
    })
}

fn parse(v: serde_json::Value) -> Result<Template, String> {
    serde_json::from_value(v).map_err(|e| e.to_string())
}

#[test]
fn the_example_is_valid_and_orders_its_services() {
    let t = parse(example()).expect("parses");
    t.validate().expect("valid");
    assert_eq!(
        t.predecessors("worker", "runtime"),
        BTreeSet::from(["master"])
    );
    assert_eq!(
        t.predecessors("zookeeper", "install"),
        BTreeSet::from(["base"])
    );
}

#[test]
fn bad_templates_are_refused_naming_the_field() {
    let cases: Vec<(serde_json::Value, &str, &str)> = vec![
        (
            json!({"services": {"a": {"dependencies": {"runtime": {"requires": ["ghost"]}}}}}),
            "services.a.dependencies.runtime.requires[0]",
            "no service provides it",
        ),
        (
            json!({"services": {"a": {"dependencies": {"runtime": {"requires": ["b"]}}},
                             "b": {"dependencies": {"runtime": {"requires": ["c"]}}},
                             "c": {"dependencies": {"runtime": {"uses": ["a"]}}}}}),
            "services (dependencies.runtime)",
            "a → b → c → a",
        ),
        (
            json!({"services": {"a": {"dependencies": {"install": {"requires": ["a"]}}}}}),
            "services.a.dependencies.install.requires[0]",
            "itself",
        ),
        (
            json!({"services": {"a": {"actions": {"start": {"type": "shell", "script": " "}}}}}),
            "services.a.actions.start.script",
            "must not be empty",
        ),
        (
            json!({"services": {"a": {"actions": {"start": {"type": "shell", "script": "x", "timeout": "8d"}}}}}),
            "services.a.actions.start.timeout",
            "at most 7days",
        ),
        (
            json!({"services": {"a": {"logs": ["../etc/passwd"]}}}),
            "services.a.logs[0]",
            "under the node's directory",
        ),
        (
            json!({"services": {"a": {"logs": ["ok.log", "/var/log/syslog"]}}}),
            "services.a.logs[1]",
            "under the node's directory",
        ),
        (
            json!({"services": {"a": {"logs": ["a b.log"]}}}),
            "services.a.logs[0]",
            "under the node's directory",
        ),
        (
            json!({"services": {"a": {"logs": ["1", "2", "3", "4", "5", "6", "7", "8", "9"]}}}),
            "services.a.logs",
            "at most 8",
        ),
        (
            json!({"services": {"a": {"checkInterval": "30s"}}}),
            "services.a.checkInterval",
            "needs a check action",
        ),
        (
            json!({"services": {"a": {"checkInterval": "0s",
                                      "actions": {"check": {"type": "shell", "script": "true"}}}}}),
            "services.a.checkInterval",
            "between 1s and 1day",
        ),
        (
            json!({"services": {"a": {"checkInterval": "2days",
                                      "actions": {"check": {"type": "shell", "script": "true"}}}}}),
            "services.a.checkInterval",
            "between 1s and 1day",
        ),
        (
            json!({"services": {"a": {"checkInterval": "soon",
                                      "actions": {"check": {"type": "shell", "script": "true"}}}}}),
            "services.a.checkInterval",
            "",
        ),
        (
            json!({"services": {"a": {"actions": {"check": {"type": "shell", "script": ""}}}}}),
            "services.a.actions.check.script",
            "must not be empty",
        ),
        (
            json!({"services": {"a": {"heal": "restart"}}}),
            "services.a.heal",
            "needs a check action",
        ),
        (
            json!({"services": {"a": {"heal": "restart", "healAttempts": 0,
                                      "actions": {"check": {"type": "shell", "script": "true"}}}}}),
            "services.a.healAttempts",
            "between 1 and 100",
        ),
        (
            json!({"services": {"a": {"heal": "restart", "healWindow": "2days",
                                      "actions": {"check": {"type": "shell", "script": "true"}}}}}),
            "services.a.healWindow",
            "between 1s and 1day",
        ),
        (
            json!({"services": {"a": {}}, "compatibility": {"services": ["b"]}}),
            "compatibility.services[0]",
            "'b' is not a service",
        ),
        (
            json!({"services": {"a": {}}, "defaults": {"hardwareType": "huge"}}),
            "defaults.hardwareType[0]",
            "'huge' is not defined",
        ),
        (
            json!({"services": {"a": {}, "b": {}}, "compatibility": {"services": ["a"]}, "defaults": {"services": ["b"]}}),
            "defaults.services[0]",
            "not in compatibility.services",
        ),
        (
            json!({"constraints": {"size": {"min": 5, "max": 2}}}),
            "constraints.size",
            "above max",
        ),
        (
            json!({"services": {"a": {}}, "constraints": {"layout": {"cantCoexist": [["a"]]}}}),
            "constraints.layout.cantCoexist[0]",
            "at least two",
        ),
        (
            json!({"services": {"a": {}}, "constraints": {"services": {"a": {"ratio": {"min": 0.5, "max": 0.2}}}}}),
            "constraints.services.a.ratio",
            "min <= max",
        ),
        (
            json!({"services": {"a": {}}, "constraints": {"services": {"a": {"quantities": {"min": 2, "max": 2}, "odd": true}}}}),
            "constraints.services.a.odd",
            "even",
        ),
        (
            json!({"services": {"a": {}}, "constraints": {"services": {"z": {}}}}),
            "constraints.services.z",
            "not a service",
        ),
    ];
    for (body, field, fragment) in cases {
        let t = parse(body.clone()).expect("parses");
        match t.validate() {
            Err(Invalid { field: f, message }) => {
                assert_eq!(f, field, "{body}");
                assert!(message.contains(fragment), "{body}: {message}");
            }
            other => panic!("{body}: expected Invalid, got {other:?}"),
        }
    }
}

#[test]
fn unknown_fields_are_refused_and_other_automators_parse_as_plugin_actions() {
    assert!(parse(json!({"servics": {}})).is_err());
    let err = parse(json!({"services": {"a": {"actions": {"start": {"type": "shell", "script": "x", "scirpt": "y"}}}}}))
        .expect_err("unknown shell field");
    assert!(err.contains("scirpt"), "{err}");
    let err = parse(json!({"services": {"a": {"actions": {"start": {"script": "x"}}}}}))
        .expect_err("no type");
    assert!(err.contains("needs a 'type'"), "{err}");
    // Any other type names an automator plugin; whether the server has it, and its fields,
    // are checked when the template is written (service::templates::check_automators).
    let action = json!({"type": "chef", "runList": ["a"], "timeout": "5m", "attempts": 2});
    let t = parse(json!({"services": {"a": {"actions": {"start": action.clone()}}}}))
        .expect("a plugin action parses");
    let start = &t.services["a"].actions[&ActionKind::Start];
    assert_eq!(start.automator(), "chef");
    assert!(start.is_plugin() && start.script().is_none());
    assert_eq!(start.attempts(), 2);
    assert_eq!(start.timeout(), std::time::Duration::from_secs(300));
    assert_eq!(serde_json::to_value(start).expect("serializes"), action);
    let check = json!({"services": {"a": {"actions": {"check": {"type": "chef"}}}}});
    let err = parse(check)
        .expect("parses")
        .validate()
        .expect_err("a plugin check");
    assert!(
        err.to_string().contains("a check is a shell script"),
        "{err}"
    );
    let reset = json!({"services": {"a": {"actions": {"reset": {"type": "chef"}}}}});
    let err = parse(reset)
        .expect("parses")
        .validate()
        .expect_err("a plugin reset");
    assert!(
        err.to_string().contains("a reset is a shell script"),
        "{err}"
    );
    let err =
        parse(json!({"services": {"a": {"actions": {"boot": {"type": "shell", "script": "x"}}}}}))
            .expect_err("unknown action");
    assert!(err.contains("boot"), "{err}");
}

#[test]
fn provides_satisfies_requires() {
    let t = parse(json!({"services": {
        "zk": {"dependencies": {"provides": ["coordination"]}},
        "app": {"dependencies": {"runtime": {"requires": ["coordination"]}}}}}))
    .expect("parses");
    t.validate().expect("valid");
    assert_eq!(t.predecessors("app", "runtime"), BTreeSet::from(["zk"]));
}

#[test]
fn size_limits_are_named_and_cycles_are_found_without_recursion() {
    let chain = |count: usize, close: bool| {
        let services: serde_json::Map<String, serde_json::Value> = (0..count)
            .map(|i| {
                let dep = if i > 0 {
                    format!("s{}", i - 1)
                } else if close {
                    format!("s{}", count - 1)
                } else {
                    return ("s0".to_string(), json!({}));
                };
                (
                    format!("s{i}"),
                    json!({"dependencies": {"runtime": {"requires": [dep]}}}),
                )
            })
            .collect();
        parse(json!({ "services": services })).expect("parses")
    };
    chain(MAX_SERVICES, false)
        .validate()
        .expect("a long chain is fine");
    let err = chain(MAX_SERVICES, true).validate().expect_err("cycle");
    assert!(
        err.to_string()
            .contains("dependency cycle: s0 → s127 → s126"),
        "{err}"
    );
    let err = chain(MAX_SERVICES + 1, false)
        .validate()
        .expect_err("too many");
    assert_eq!(
        err.to_string(),
        "services: has 129 services, more than the limit of 128"
    );
    // The cycle check alone, on a chain far past the limit: no stack overflow.
    assert!(chain(20_000, true).cycle("runtime").is_some());
    let names: Vec<String> = (0..17).map(|i| format!("s{i}")).collect();
    let t = parse(json!({
        "services": names.iter().map(|n| (n.clone(), json!({}))).collect::<serde_json::Map<_, _>>(),
        "constraints": {"layout": {"cantCoexist": [names]}}
    }))
    .expect("parses");
    let err = t.validate().expect_err("too many constrained");
    assert!(err.to_string().contains("17 constrained services"), "{err}");
}

#[test]
fn a_check_runs_every_interval_for_at_most_its_timeout() {
    let t = parse(json!({"services": {
        "plain": {},
        "defaults": {"actions": {"check": {"type": "shell", "script": "true"}}},
        "set": {"checkInterval": "5s",
                "actions": {"check": {"type": "shell", "script": "true", "timeout": "2s"}}}
    }}))
    .expect("parses");
    t.validate().expect("valid");
    assert!(t.services["plain"].check().is_none());
    let (_, every, within) = t.services["defaults"].check().expect("a check");
    assert_eq!(
        (every, within),
        (DEFAULT_CHECK_INTERVAL, DEFAULT_CHECK_TIMEOUT)
    );
    let (_, every, within) = t.services["set"].check().expect("a check");
    assert_eq!(
        (every, within),
        (
            std::time::Duration::from_secs(5),
            std::time::Duration::from_secs(2)
        )
    );
}
