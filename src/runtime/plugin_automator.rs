//! Service actions run by automator plugins (`{"type": "ansible", ...}` in a template): one
//! `run` request per attempt, with the action's fields, the node and the cluster.
//!
//! A node reached over SSH is handed over with the login the profile gives (user, address,
//! port, the private key, and how its host key is checked: the `known_hosts` the profile
//! lists, or the fingerprint ebb pinned at first contact), so the plugin's tool reaches the
//! same node ebb's own SSH would, and no other. A node on this host is handed over with its
//! directory. The answer's facts are held to the bounds a script's result file is.

use std::collections::BTreeMap;

use ebb_spi::{
    FACT_SSH, FACT_SSH_HOST_KEY, FACT_WORK_DIR, SSH_HOST_KEY_CHECKING, SSH_KNOWN_HOSTS,
    SSH_PRIVATE_KEY, SSH_USER,
};
use serde_json::{Map, Value, json};

use super::attempt::{AttemptOutcome, TaskSpec, merge_properties, reportable_facts, tail_of};
use super::deps::Deps;
use super::on_node::{On, cluster_doc, cluster_nodes};
use crate::model::plan::NodeRecord;
use ebb_plugin::process::CallError;

/// Runs one attempt of `service`'s `action` with the automator plugin `automator`.
pub async fn run(
    deps: &Deps,
    spec: &TaskSpec,
    (service, action): (&str, &str),
    automator: &str,
    fields: Map<String, Value>,
    timeout: std::time::Duration,
) -> AttemptOutcome {
    let Some(plugin) = deps.registry.automator(automator) else {
        return AttemptOutcome::failed(
            format!("no automator plugin '{automator}' is loaded on this server"),
            false,
        );
    };
    let on = On::task(spec);
    let nodes = match cluster_nodes(deps, on.cluster).await {
        Ok(nodes) => nodes,
        Err(e) => return AttemptOutcome::failed(e.to_string(), true),
    };
    let Some(me) = nodes.iter().find(|n| n.node == on.node) else {
        return AttemptOutcome::failed(format!("node {} has no record", on.node), true);
    };
    let node = match node_message(deps, &on, me) {
        Ok(node) => node,
        Err(e) => return AttemptOutcome::failed(e, false),
    };
    let call = ebb_plugin::automator::ActionCall {
        work_dir: deps.registry.work_dir(),
        action: json!({ "service": service, "action": action, "fields": fields }),
        node,
        cluster: cluster_doc(&on, &nodes),
        timeout,
    };
    let redact = |text: &str| on.context.redact(text);
    match plugin.run(call, &redact).await {
        Ok(done) => {
            let facts = reportable_facts(done.facts);
            if !facts.is_empty()
                && let Err(e) =
                    merge_properties(deps, &spec.cluster, spec.node(), facts.clone()).await
            {
                return AttemptOutcome::failed(format!("cannot record the result: {e}"), true);
            }
            let output = tail_of(&done.output);
            AttemptOutcome::Done {
                result: facts,
                output: (!output.is_empty()).then_some(output),
            }
        }
        Err(CallError::Answered {
            message, retryable, ..
        }) => AttemptOutcome::failed(format!("{automator}: {}", tail_of(&message)), retryable),
        Err(CallError::Broken(why)) => {
            AttemptOutcome::failed(format!("automator plugin '{automator}' {why}"), true)
        }
    }
}

/// The node as a plugin sees it: its name, address and facts, its directory on this host or
/// its SSH login.
fn node_message(deps: &Deps, on: &On<'_>, me: &NodeRecord) -> Result<Value, String> {
    let ctx = on.context;
    let mut node = json!({
        "name": me.node,
        "id": me.id,
        "address": me.address,
        "facts": me.properties,
    });
    let Some(target) = me.properties.get(FACT_SSH) else {
        let dir = me
            .properties
            .get(FACT_WORK_DIR)
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| deps.node_work_dir(on.cluster, on.node));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        node["workDir"] = json!(dir.display().to_string());
        return Ok(node);
    };
    let target = ebb_ssh::Target::parse(target, ctx.property(SSH_USER.name))
        .map_err(|e| format!("fact '{FACT_SSH}': {e}"))?;
    let key = ctx.property(SSH_PRIVATE_KEY.name).ok_or_else(|| {
        format!(
            "property '{}' is not set: the automator needs a key to log in to the node",
            SSH_PRIVATE_KEY.name
        )
    })?;
    let checking = ctx
        .property(SSH_HOST_KEY_CHECKING.name)
        .unwrap_or("accept-new");
    let mut ssh: BTreeMap<&str, Value> = BTreeMap::from([
        ("user", json!(target.user)),
        ("host", json!(target.host)),
        ("port", json!(target.port)),
        ("privateKey", json!(key)),
        ("hostKeyChecking", json!(checking)),
        (
            "remoteDir",
            json!(
                me.properties
                    .get(ebb_spi::FACT_REMOTE_DIR)
                    .cloned()
                    .unwrap_or_else(|| ebb_spi::resource::remote_dir(None, on.cluster, on.node))
            ),
        ),
    ]);
    if let Some(known) = ctx.property(SSH_KNOWN_HOSTS.name) {
        ssh.insert("knownHosts", json!(known));
    }
    if let Some(pinned) = me.properties.get(FACT_SSH_HOST_KEY) {
        ssh.insert("pinnedKey", json!(pinned));
    }
    node["ssh"] = json!(ssh);
    Ok(node)
}
