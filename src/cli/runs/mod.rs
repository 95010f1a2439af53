//! `ebb run`: start (and follow), list, inspect, stop, keep, tear down, and change a run's
//! cluster.

use std::time::{Duration, UNIX_EPOCH};

use reqwest::Method;
use serde_json::{Map, Value, json};

use super::args::RunCmd;
use super::client::{CliError, Client, read_answer};
use super::input::{duration, split_pair};
use super::output::{self, out, table, text};
use crate::model::event::RunEvent;
use crate::model::run::{ClusterStatus, ProgramStatus};
use crate::model::view::{Logs, RunView};

mod ops;
mod paths;
mod show;

use ops::{cancel, cluster, cluster_body};
use paths::{program_path, run_path};
use show::show_run;

/// How long each long-poll for new events waits on the server.
const POLL: &str = "30s";

pub fn run(client: &Client, json: bool, cmd: RunCmd) -> Result<u8, CliError> {
    match cmd {
        RunCmd::Start {
            program,
            args,
            wait,
        } => start(client, json, &program, &args, wait),
        RunCmd::List {
            program,
            namespace,
            status,
            limit,
        } => {
            let base = match (&program, &namespace) {
                (Some(p), _) => format!("{}/runs", program_path(p)?),
                (None, Some(ns)) => format!("/v3/namespaces/{ns}/runs"),
                (None, None) => {
                    return Err(CliError::Usage("give a program or --namespace".into()));
                }
            };
            list_runs(client, json, &base, status, limit).map(|()| 0)
        }
        RunCmd::Get { run } => show_run(json, client.get(&run_path(&run)?)?).map(|()| 0),
        RunCmd::Stop { run, keepalive } => {
            let body = json!({ "keepalive": keepalive });
            let path = format!("{}/stop", run_path(&run)?);
            show_run(json, client.call(Method::POST, &path, Some(&body))?).map(|()| 0)
        }
        RunCmd::Deprovision { run, force } => {
            let path = format!("{}/deprovision?force={force}", run_path(&run)?);
            show_run(json, client.call(Method::POST, &path, None)?).map(|()| 0)
        }
        RunCmd::Extend {
            run,
            by,
            until,
            shorten,
        } => {
            let body = match (by, until) {
                (Some(by), _) => {
                    // Checked here so a typo is told before any request.
                    duration("--by", &by)?;
                    json!({ "by": by })
                }
                (None, Some(until)) => json!({ "expireAt": until, "shorten": shorten }),
                (None, None) => return Err(CliError::Usage("give --by or --until".into())),
            };
            let path = format!("{}/extend", run_path(&run)?);
            show_run(json, client.call(Method::POST, &path, Some(&body))?).map(|()| 0)
        }
        RunCmd::Logs {
            run,
            service: Some(service),
            node,
        } => {
            let path = run_path(&run)?;
            let view: RunView = client.get_as(&path)?;
            let nodes: Vec<String> = view
                .cluster
                .nodes
                .iter()
                .filter(|n| n.services.contains_key(&service))
                .filter(|n| node.as_ref().is_none_or(|want| &n.name == want))
                .map(|n| n.name.clone())
                .collect();
            if nodes.is_empty() {
                return Err(CliError::Usage(format!(
                    "no node of the run's cluster runs service '{service}'{}",
                    node.map(|n| format!(" on node '{n}'")).unwrap_or_default()
                )));
            }
            let mut all = Vec::new();
            for n in nodes {
                let v = client.get(&format!("{path}/services/{service}/logs?node={n}"))?;
                all.push(v);
            }
            if json {
                output::json(&serde_json::Value::Array(all));
            } else {
                for v in all {
                    print_service_logs(&read_answer(v)?);
                }
            }
            Ok(0)
        }
        RunCmd::Logs { run, .. } => {
            let v = client.get(&format!("{}/logs", run_path(&run)?))?;
            if json {
                output::json(&v);
            } else {
                print_logs(&read_answer(v)?);
            }
            Ok(0)
        }
        RunCmd::Cluster {
            run,
            operation,
            nodes,
            services,
            on,
            remove,
            config,
            wait,
            dry_run,
        } => {
            let mut body = cluster_body(&operation, nodes, remove, config)?;
            if !services.is_empty() {
                body["services"] = json!(services);
            }
            if !on.is_empty() {
                body["nodes"] = json!(on);
            }
            if dry_run {
                let path = format!("{}/cluster/plan", run_path(&run)?);
                let v = client.call(Method::POST, &path, Some(&body))?;
                return crate::cli::templates::show_plan(json, v).map(|()| 0);
            }
            cluster(client, json, &run, &operation, &body, wait)
        }
        RunCmd::Ops { run, op } => ops::ops(client, json, &run, op).map(|()| 0),
        RunCmd::Cancel { run, op, wait } => cancel(client, json, &run, op, wait),
        RunCmd::Events { run, follow: keep } => {
            let path = run_path(&run)?;
            if keep {
                return follow(client, json, &path, &run);
            }
            let v = client.get(&format!("{path}/events"))?;
            if json {
                output::json(&v);
            } else {
                let events: Vec<RunEvent> = read_answer(v)?;
                events.iter().for_each(print_event);
            }
            Ok(0)
        }
    }
}

/// `ebb run start`: starts a run, and with `wait` follows it to its end.
fn start(
    client: &Client,
    json: bool,
    program: &str,
    args: &[String],
    wait: bool,
) -> Result<u8, CliError> {
    let path = program_path(program)?;
    let mut body = Map::new();
    for pair in args {
        let (k, v) = split_pair(pair)?;
        body.insert(k.to_string(), json!(v));
    }
    let v = client.post_once(&format!("{path}/start"), &Value::Object(body))?;
    let id = text(&v["runId"]);
    let full = format!("{program}/{id}");
    if !wait {
        if json {
            output::json(&v);
        } else {
            out!("{full}");
        }
        return Ok(0);
    }
    if !json {
        out!("run {full}");
    }
    follow(client, json, &format!("{path}/runs/{id}"), &full)
}

/// `ebb run list`: the runs under `base`, newest first.
fn list_runs(
    client: &Client,
    json: bool,
    base: &str,
    status: Option<String>,
    limit: Option<usize>,
) -> Result<(), CliError> {
    let mut query = Vec::new();
    if let Some(s) = status {
        query.push(format!("status={s}"));
    }
    if let Some(l) = limit {
        query.push(format!("limit={l}"));
    }
    let path = format!("{base}?{}", query.join("&"));
    if json {
        output::json(&client.get(&path)?);
        return Ok(());
    }
    let runs: Vec<RunView> = client.get_as(&path)?;
    let now = crate::store::clock::now_secs();
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                format!("{}/{}/{}/{}", r.namespace, r.app, r.program, r.runid),
                r.status.to_string(),
                {
                    let status = r.cluster.status.map(|c| c.to_string()).unwrap_or_default();
                    match &r.cluster.attention {
                        Some(_) => format!("{status} NEEDS_ATTENTION"),
                        None => status,
                    }
                },
                r.profile.clone(),
                output::ago(r.starting, now),
            ]
        })
        .collect();
    table(&["RUN", "STATUS", "CLUSTER", "PROFILE", "STARTED"], &rows);
    Ok(())
}

fn print_service_logs(logs: &crate::model::view::ServiceLogs) {
    for log in &logs.logs {
        let shown = log.text.as_ref().map_or(0, |t| t.len() as u64);
        let part = if log.size > shown {
            format!(", its last {shown} of {} bytes", log.size)
        } else {
            String::new()
        };
        out!(
            "---- node {}: {} {}{part} ----",
            logs.node,
            logs.service,
            log.file
        );
        match (&log.text, &log.error) {
            (Some(text), _) => {
                out!("{}", text.trim_end());
            }
            (None, Some(e)) => out!("(cannot read it: {e})"),
            (None, None) => {}
        }
    }
}

fn print_logs(logs: &Logs) {
    for line in logs.stdout.lines() {
        out!("{line}");
    }
    for line in logs.stderr.lines() {
        out!("[stderr] {line}");
    }
}

/// Epoch seconds as a time of day (UTC), to the millisecond.
fn clock(secs: f64) -> String {
    let t = UNIX_EPOCH + Duration::from_secs_f64(secs.max(0.0));
    let stamp = humantime::format_rfc3339_millis(t).to_string();
    // 2026-11-22T10:00:01.234Z → 10:00:01.234
    stamp.get(11..23).unwrap_or(&stamp).to_string()
}

fn print_event(e: &RunEvent) {
    let node = e
        .node
        .as_deref()
        .map(|n| format!("node {n}: "))
        .unwrap_or_default();
    out!("{}  {}{}", clock(e.time), node, e.message);
}

/// Follows run `path` until its cluster is gone or kept WAITING, printing each event (and
/// the program's output once it ends); returns the program's exit status.
fn follow(client: &Client, json: bool, path: &str, name: &str) -> Result<u8, CliError> {
    let mut after = 0u64;
    let mut printed_logs = false;
    let mut print_new = |wait: &str| -> Result<(), CliError> {
        let events: Vec<RunEvent> = client.get_as(&format!("{path}/events?after={after}{wait}"))?;
        for e in &events {
            after = after.max(e.seq);
            if json {
                out!("{}", serde_json::to_value(e).unwrap_or_default());
            } else {
                print_event(e);
            }
        }
        Ok(())
    };
    loop {
        print_new(&format!("&wait={POLL}"))?;
        let run: RunView = client.get_as(path)?;
        let ended = run.status.is_end();
        if ended && !printed_logs && !json && run.start.is_some() {
            printed_logs = true;
            let logs: Logs = client.get_as(&format!("{path}/logs"))?;
            out!("---- program output ----");
            print_logs(&logs);
            out!("------------------------");
        }
        if ended && followed_to_the_end(run.cluster.status) {
            print_new("")?;
            if !json {
                summary(&run, name);
            }
            return Ok(exit_status(&run));
        }
    }
}

/// Whether `run start --wait` stops following a run whose program ended, once its cluster
/// is this: gone, given up on, or kept WAITING.
fn followed_to_the_end(cluster: Option<ClusterStatus>) -> bool {
    match cluster {
        Some(
            ClusterStatus::Deprovisioned
            | ClusterStatus::Orphaned
            | ClusterStatus::Waiting
            | ClusterStatus::Idle
            | ClusterStatus::Reused,
        ) => true,
        None
        | Some(
            ClusterStatus::Provisioning
            | ClusterStatus::Provisioned
            | ClusterStatus::Deprovisioning,
        ) => false,
    }
}

fn summary(run: &RunView, name: &str) {
    match &run.failure {
        Some(f) => out!("run {} ({}: {})", run.status, f.kind, f.message),
        None => out!("run {}", run.status),
    }
    match run.cluster.status {
        Some(ClusterStatus::Waiting) => out!(
            "cluster WAITING until {}; keep it longer with `ebb run extend {name} --by 1h`, tear it down with `ebb run deprovision {name}`",
            super::output::timestamp(run.cluster.expires_at)
        ),
        Some(ClusterStatus::Idle) => out!(
            "cluster IDLE until {}, for the next run of this profile that matches; tear it down with `ebb run deprovision {name}`",
            super::output::timestamp(run.cluster.expires_at)
        ),
        Some(cluster) => out!("cluster {cluster}"),
        None => out!("cluster -"),
    }
}

/// The exit status `run start --wait` reports: the program's own, 1 for a failure without
/// one, 130 for a stopped run.
fn exit_status(run: &RunView) -> u8 {
    if let Some(code) = run.exit.as_ref().and_then(|e| e.code) {
        return u8::try_from(code).unwrap_or(1);
    }
    match run.status {
        ProgramStatus::Completed => 0,
        ProgramStatus::Killed => 130,
        ProgramStatus::Queued
        | ProgramStatus::Pending
        | ProgramStatus::Starting
        | ProgramStatus::Running
        | ProgramStatus::Failed
        | ProgramStatus::Rejected => 1,
    }
}
