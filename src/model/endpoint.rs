//! Endpoints: what a cluster's services publish for the programs that use them (a Spark
//! master's URL, a ZooKeeper connect string, a Dask scheduler's address, a web UI).
//!
//! A service action publishes an endpoint as a fact of its node: a line
//! `endpoint.<name>=<value>` in `$EBB_RESULT_FILE`. The cluster's endpoint `<name>` is the
//! values its nodes published under that name, in the cluster's node order, joined by commas
//! (so the members of an ensemble make a connect string). A program gets each endpoint as
//! `EBB_ENDPOINT_<NAME>` (upper case, `-` and `.` as `_`) and in `cluster.json`; the run's
//! view shows them.

use std::collections::BTreeMap;

use crate::model::plan::{NodeRecord, ResourceStatus};

/// The prefix of a node fact that publishes an endpoint.
pub const PREFIX: &str = "endpoint.";
/// The prefix of the environment variable a program reads an endpoint from.
pub const ENV_PREFIX: &str = "EBB_ENDPOINT_";

/// Whether `name` may name an endpoint: 1 to 63 of `a-z`, `0-9`, `-` and `.`, starting with a
/// letter (so that its variable's name is a shell's).
pub fn valid_name(name: &str) -> bool {
    name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

/// The environment variable a program reads endpoint `name` from.
pub fn env_name(name: &str) -> String {
    let tail: String = name
        .chars()
        .map(|c| match c {
            '-' | '.' => '_',
            c => c.to_ascii_uppercase(),
        })
        .collect();
    format!("{ENV_PREFIX}{tail}")
}

/// The endpoints the live nodes among `nodes` published, in their order: each name with its
/// values joined by commas. Facts whose name is not a valid endpoint's, or whose value is
/// empty or holds a comma or a control character, are passed over.
pub fn endpoints<'a>(nodes: impl IntoIterator<Item = &'a NodeRecord>) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for node in nodes {
        if node.status != ResourceStatus::Created {
            continue;
        }
        for (key, value) in &node.properties {
            let Some(name) = key.strip_prefix(PREFIX) else {
                continue;
            };
            let usable = !value.is_empty()
                && value.len() <= 1024
                && !value.chars().any(|c| c == ',' || c.is_control());
            if valid_name(name) && usable {
                out.entry(name.to_string()).or_default().push(value);
            }
        }
    }
    out.into_iter().map(|(k, v)| (k, v.join(","))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, status: ResourceStatus, facts: &[(&str, &str)]) -> NodeRecord {
        NodeRecord {
            node: name.into(),
            status,
            id: None,
            address: None,
            properties: facts
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            create_time: None,
            delete_time: None,
            since_ms: 0,
            attempts: 0,
            placement: None,
            reclaims: 0,
            entries: None,
        }
    }

    #[test]
    fn members_join_in_node_order_and_bad_facts_are_passed_over() {
        use ResourceStatus::*;
        let nodes = [
            node(
                "master",
                Created,
                &[
                    ("endpoint.zookeeper", "127.0.1.1:2181"),
                    ("endpoint.spark-ui", "http://127.0.1.1:8080"),
                    ("workDir", "/x"),
                    ("endpoint.Bad", "x"),
                    ("endpoint.comma", "a,b"),
                    ("endpoint.empty", ""),
                ],
            ),
            node(
                "worker-2",
                Created,
                &[("endpoint.zookeeper", "127.0.1.3:2181")],
            ),
            node(
                "worker-1",
                RequestingDelete,
                &[("endpoint.zookeeper", "127.0.1.2:2181")],
            ),
        ];
        let found = endpoints(&nodes);
        assert_eq!(
            found,
            BTreeMap::from([
                ("spark-ui".to_string(), "http://127.0.1.1:8080".to_string()),
                (
                    "zookeeper".to_string(),
                    "127.0.1.1:2181,127.0.1.3:2181".to_string()
                ),
            ])
        );
    }

    #[test]
    fn names_become_shell_variables() {
        assert_eq!(env_name("spark-master"), "EBB_ENDPOINT_SPARK_MASTER");
        assert_eq!(env_name("dask.dashboard"), "EBB_ENDPOINT_DASK_DASHBOARD");
        assert!(valid_name("zookeeper"));
        for bad in ["", "1x", "-x", "X", "a b", "a_b", &"a".repeat(64)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
