//! `ebb namespace`: create, list, show, set and delete namespaces.

use reqwest::Method;
use serde_json::json;

use super::args::NamespaceCmd;
use super::client::{CliError, Client, read_answer};
use super::output::{self, done, out, table};
use crate::model::namespace::Namespace;

pub fn namespace(client: &Client, json: bool, cmd: NamespaceCmd) -> Result<(), CliError> {
    let v = match cmd {
        NamespaceCmd::List => {
            let v = client.get("/v3/namespaces")?;
            if !json {
                let namespaces: Vec<Namespace> = read_answer(v)?;
                let rows = namespaces
                    .into_iter()
                    .map(|n| vec![n.name, n.description])
                    .collect::<Vec<_>>();
                table(&["NAME", "DESCRIPTION"], &rows);
                return Ok(());
            }
            v
        }
        NamespaceCmd::Get { name } => client.get(&format!("/v3/namespaces/{name}"))?,
        NamespaceCmd::Create { name, description } => {
            let body = description.map(|d| json!({ "description": d }));
            client.call(
                Method::PUT,
                &format!("/v3/namespaces/{name}"),
                body.as_ref(),
            )?
        }
        NamespaceCmd::Set { name, settings } => {
            let s = settings;
            let mut body = serde_json::Map::new();
            let limits = [
                ("maxLiveRuns", s.max_live_runs),
                ("maxLiveNodes", s.max_live_nodes),
                ("maxNodesPerRun", s.max_nodes_per_run),
                ("maxQueued", s.max_queued),
            ];
            for (field, limit) in limits {
                if let Some(limit) = limit {
                    body.insert(field.into(), json!(limit.0));
                }
            }
            if let Some(wait) = s.max_queue_time {
                body.insert("maxQueueTime".into(), json!(wait.0));
            }
            if let Some(v) = s.queue_runs {
                body.insert("queueRuns".into(), json!(v));
            }
            if let Some(v) = s.allow_host_programs {
                body.insert("allowHostPrograms".into(), json!(v));
            }
            if s.no_budget {
                body.insert("budget".into(), serde_json::Value::Null);
            } else if s.budget_cost.is_some() || s.budget_node_hours.is_some() || s.budget_hard_stop
            {
                let mut budget = json!({"hardStop": s.budget_hard_stop});
                if let Some(cost) = s.budget_cost {
                    budget["cost"] = json!(cost);
                }
                if let Some(hours) = s.budget_node_hours {
                    budget["nodeHours"] = json!(hours);
                }
                body.insert("budget".into(), budget);
            }
            let body = serde_json::Value::Object(body);
            client.call(Method::PUT, &format!("/v3/namespaces/{name}"), Some(&body))?
        }
        NamespaceCmd::Delete { name } => {
            client.call(Method::DELETE, &format!("/v3/namespaces/{name}"), None)?;
            return done(json, &format!("namespace '{name}' deleted"));
        }
    };
    if json {
        output::json(&v);
        return Ok(());
    }
    let view: crate::model::namespace::NamespaceView = read_answer(v)?;
    let ns = view.namespace;
    let limit = |l: Option<u32>| l.map_or("none".to_string(), |n| n.to_string());
    out!("name:              {}", ns.name);
    out!("description:       {}", ns.description);
    out!("maxLiveRuns:       {}", limit(ns.quota.max_live_runs));
    out!("maxLiveNodes:      {}", limit(ns.quota.max_live_nodes));
    out!("maxNodesPerRun:    {}", limit(ns.quota.max_nodes_per_run));
    out!("queueRuns:         {}", ns.queue.queue_runs);
    out!("maxQueued:         {}", ns.queue.max_queued());
    out!(
        "maxQueueTime:      {}",
        humantime::format_duration(std::time::Duration::from_secs(ns.queue.max_queue_time()))
    );
    out!("allowHostPrograms: {}", ns.allow_host_programs);
    if let Some(b) = &ns.budget {
        let part = |l: Option<f64>, unit: &str| l.map(|v| format!("{v} {unit}"));
        let limits: Vec<String> = [part(b.cost, "(currency)"), part(b.node_hours, "node-hours")]
            .into_iter()
            .flatten()
            .collect();
        let stop = if b.hard_stop { ", hard stop" } else { "" };
        out!("budget:            {} a month{stop}", limits.join(" and "));
    }
    if let Some(used) = &view.budget_used {
        out!(
            "budget used:       {:.0}% in {} ({:.2} cost, {:.2} node-hours)",
            used.share * 100.0,
            used.month,
            used.cost,
            used.node_hours
        );
    }
    Ok(())
}
