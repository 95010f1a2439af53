use super::*;

use serde_json::json;

fn write(dir: &Path, descriptor: &Value) {
    std::fs::write(dir.join(FILE), descriptor.to_string()).expect("write");
}

fn good() -> Value {
    json!({
        "name": "cloudy",
        "kind": "provisioner",
        "protocol": 1,
        "version": "1.2.3",
        "command": ["python3", "./plugin.py"],
        "properties": [
            {"name": "nodes", "type": "integer", "min": 1, "max": 8},
            {"name": "size", "type": "oneOf", "values": ["s", "m"]},
            {"name": "boot", "type": "duration", "min": "1s", "max": "5m"},
            {"name": "apiKey", "type": "text", "secret": true},
            {"name": "root", "type": "text", "hostPath": true}
        ],
        "account": ["root"],
        "timeout": "10s"
    })
}

#[test]
fn a_good_descriptor_gives_a_spec_with_the_framework_properties() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), &good());
    let d = load(dir.path()).expect("loads");
    assert_eq!(d.name, "cloudy");
    assert_eq!(d.timeout, Duration::from_secs(10));
    assert_eq!(d.concurrency, DEFAULT_CONCURRENCY);
    let names: Vec<&str> = d.spec.properties.iter().map(|p| p.name).collect();
    assert_eq!(
        names,
        [
            "nodes",
            "size",
            "boot",
            "apiKey",
            "root",
            "retryBudget",
            "template",
            "templateConfig",
            "templateServices",
            "heal",
            "healAttempts",
            "healWindow"
        ]
    );
    let key = d.spec.property("apiKey").expect("apiKey");
    assert!(key.secret && key.author_only);
    let root = d.spec.property("root").expect("root");
    assert!(root.host_path && root.author_only);
    assert_eq!(
        d.spec.property("boot").map(|p| &p.kind),
        Some(&PropertyKind::Duration {
            min: Duration::from_secs(1),
            max: Duration::from_secs(300)
        })
    );
    // No widget given: one is made, a secure field for the secret.
    let fields = d.configuration_groups[0]["properties"]
        .as_array()
        .expect("fields");
    assert_eq!(fields.len(), 5);
    assert_eq!(fields[3]["widget-type"], "securekey-password");
    assert_eq!(fields[1]["widget-attributes"]["values"], json!(["s", "m"]));
}

#[test]
fn a_bad_descriptor_names_its_file_and_field() {
    let cases: &[(&str, Value, &str, &str)] = &[
        ("name", json!("Bad Name"), "name", "lowercase"),
        ("protocol", json!(2), "protocol", "protocol 1"),
        ("command", json!([]), "command", "a program"),
        ("concurrency", json!(0), "concurrency", "between 1 and 64"),
        ("timeout", json!("1h"), "timeout", "between 1s and 10m"),
        ("kind", json!("gadget"), "kind", "unknown variant"),
        ("surprise", json!(1), "", "unknown field `surprise`"),
        (
            "properties",
            json!([{"name": "n", "type": "integer", "min": 5, "max": 1}]),
            "properties[0].max",
            "below min",
        ),
        (
            "properties",
            json!([{"name": "template", "type": "text"}]),
            "properties[0].name",
            "ebb's own",
        ),
        (
            "properties",
            json!([{"name": "a", "type": "text"}, {"name": "a", "type": "text"}]),
            "properties[1].name",
            "twice",
        ),
        (
            "properties",
            json!([{"name": "a", "type": "text", "values": ["x"]}]),
            "properties[0].values",
            "oneOf",
        ),
        ("account", json!(["nope"]), "account[0]", "not one of"),
        ("account", json!(["apiKey"]), "account[0]", "secret"),
        (
            "widget",
            json!({"configuration-groups": [{"label": "G", "properties": [
                {"widget-type": "textbox", "label": "x", "name": "nodes"}]}]}),
            "widget",
            "does not show property 'size'",
        ),
        (
            "widget",
            json!("../escape.json"),
            "widget",
            "inside the plugin's directory",
        ),
    ];
    for (field, value, at, says) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut d = good();
        d[*field] = value.clone();
        write(dir.path(), &d);
        let err = load(dir.path()).expect_err(&format!("{field}={value} must be refused"));
        assert_eq!(err.file, dir.path().join(FILE));
        assert!(
            err.field.starts_with(at) && err.message.contains(says),
            "{field}={value}: {err}"
        );
    }
}

#[test]
fn a_descriptor_that_is_not_json_or_too_large_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join(FILE), "{ not json").expect("write");
    let err = load(dir.path()).expect_err("refused");
    assert!(err.to_string().contains("plugin.json"), "{err}");
    std::fs::write(dir.path().join(FILE), vec![b' '; MAX_FILE as usize + 1]).expect("write");
    let err = load(dir.path()).expect_err("refused");
    assert!(err.message.contains("the most is"), "{err}");
    let missing = tempfile::tempdir().expect("tempdir");
    assert!(load(missing.path()).is_err());
}
