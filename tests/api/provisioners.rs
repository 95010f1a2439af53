//! The provisioner registry and its widgets.

use crate::support::server::{Server, assert_error};

#[test]
fn list_and_get_show_specs_and_widgets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    let (code, list) = s.get("/v3/provisioners");
    assert_eq!(code, 200);
    let names: Vec<&str> = list
        .as_array()
        .expect("list")
        .iter()
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    let mut builtin = vec!["hosts", "local", "native", "sim"];
    if cfg!(feature = "aws") {
        builtin.push("aws-ec2");
    }
    if cfg!(feature = "gcp") {
        builtin.extend(["gcp-compute", "gcp-dataproc"]);
    }
    builtin.sort();
    assert_eq!(names, builtin);
    for p in list.as_array().expect("list") {
        for field in ["name", "label", "description"] {
            assert!(
                p[field].as_str().is_some_and(|v| !v.is_empty()),
                "{p} lacks {field}"
            );
        }
        assert!(p["configuration-groups"].is_array(), "{p}");
    }
    let (code, sim) = s.get("/v3/provisioners/sim");
    assert_eq!(code, 200);
    let props: Vec<&str> = sim["configuration-groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["properties"].as_array().expect("properties"))
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    for expected in [
        "nodes",
        "stateDir",
        "createLatency",
        "deleteLatency",
        "transientErrorRate",
        "lostCreateRate",
        "failCreate",
        "quota",
    ] {
        assert!(props.contains(&expected), "sim lacks {expected}: {props:?}");
    }
    let (_, native) = s.get("/v3/provisioners/native");
    assert_eq!(native["configuration-groups"], serde_json::json!([]));
    let (_, local) = s.get("/v3/provisioners/local");
    assert_eq!(
        local["configuration-groups"][0]["properties"][0]["widget-type"],
        "number"
    );
    assert_error(
        s.get("/v3/provisioners/aws-ec3"),
        404,
        "provisioner 'aws-ec3' not found",
    );
}
