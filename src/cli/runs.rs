//! `ebb run`: start (and follow), list, inspect, stop, keep, tear down, and change a run's
//! cluster.

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use reqwest::Method;
use serde_json::{Map, Value, json};

use super::args::RunCmd;
use super::client::{CliError, Client, read_answer};
use super::input::{duration, read_json, split_pair};
use super::output::{self, out, table, text};
use crate::model::event::RunEvent;
use crate::model::operation::{OpStatus, OperationView, TaskView};
use crate::model::run::{ClusterStatus, ProgramStatus};
use crate::model::view::{Logs, RunView};

/// How long each long-poll for new events waits on the server.
const POLL: &str = "30s";

/// One operation as a timeline: a header, then each task by when it first started, with its
/// offset from the operation's start, how long it took and how many attempts it needed.
fn print_operation(op: &OperationView) {
    let took = op
        .finished
        .map(|f| format!(" in {:.2}s", f - op.created))
        .unwrap_or_default();
    let undo = op
        .rollback_of
        .map(|id| format!(" (rollback of operation {id})"))
        .unwrap_or_default();
    out!(
        "operation {} {} {}{took}{undo}, {} tasks",
        op.id,
        op.operation.name(),
        op.status,
        op.tasks.len()
    );
    if let Some(e) = &op.error {
        out!("  error: {e}");
    }
    if let Some(undo) = op.rolled_back_by {
        out!("  rolled back by operation {undo}");
    }
    for b in &op.blocked {
        let place = match (&b.zone, b.region) {
            (_, true) => "every zone".to_string(),
            (Some(zone), false) => format!("zone {zone}"),
            (None, false) => "its zone".to_string(),
        };
        out!(
            "  no room: {place}, {} (found by {}): {}",
            b.market,
            b.node,
            b.error
        );
    }
    for d in &op.dropped {
        out!("  went on without {}: {}", d.node, d.reason);
    }
    let mut tasks: Vec<&TaskView> = op.tasks.iter().collect();
    let first = |t: &TaskView| t.attempts.first().map_or(f64::MAX, |a| a.started);
    tasks.sort_by(|a, b| first(a).total_cmp(&first(b)));
    let rows: Vec<Vec<String>> = tasks.iter().map(|t| task_row(t, op.created)).collect();
    table(
        &["AT", "TOOK", "NODE", "TASK", "STATUS", "ATTEMPTS", "ERROR"],
        &rows,
    );
    out!();
}

/// A task's row in an operation's timeline; `created` is when the operation began.
fn task_row(t: &TaskView, created: f64) -> Vec<String> {
    let start = t.attempts.first().map(|a| a.started);
    let end = t.attempts.last().and_then(|a| a.finished);
    let at = start.map_or("-".to_string(), |s| format!("+{:.2}s", s - created));
    let took = match (start, end) {
        (Some(s), Some(e)) => format!("{:.2}s", e - s),
        _ => "-".to_string(),
    };
    let task = match &t.service {
        Some(s) => format!("{} {s}", t.action.name()),
        None => t.action.name().to_string(),
    };
    let tries: Vec<String> = t
        .attempts
        .iter()
        .map(|a| match a.status {
            Some(status) => status.to_string().to_lowercase().replace('_', "-"),
            None => "-".to_string(),
        })
        .collect();
    let error = t
        .attempts
        .last()
        .and_then(|a| a.error.as_deref())
        .unwrap_or_default();
    vec![
        at,
        took,
        t.node.clone(),
        task,
        t.status.to_string(),
        tries.join(","),
        error.chars().take(80).collect(),
    ]
}

/// `NS/APP/PROGRAM` as an API path.
fn program_path(program: &str) -> Result<String, CliError> {
    match program.split('/').collect::<Vec<_>>().as_slice() {
        [ns, app, prog] if !ns.is_empty() && !app.is_empty() && !prog.is_empty() => {
            Ok(format!("/v3/namespaces/{ns}/apps/{app}/workflows/{prog}"))
        }
        _ => Err(CliError::Usage(format!(
            "'{program}' is not NAMESPACE/APP/PROGRAM"
        ))),
    }
}

/// `NS/APP/PROGRAM/RUN` as an API path.
fn run_path(run: &str) -> Result<String, CliError> {
    match run.rsplit_once('/') {
        Some((program, id)) if !id.is_empty() && run.split('/').count() == 4 => {
            Ok(format!("{}/runs/{id}", program_path(program)?))
        }
        _ => Err(CliError::Usage(format!(
            "'{run}' is not NAMESPACE/APP/PROGRAM/RUN (as `ebb run start` and `ebb run list` print it)"
        ))),
    }
}

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
        RunCmd::Ops { run, op } => ops(client, json, &run, op).map(|()| 0),
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
    let now = crate::runtime::clock::now_secs();
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

/// The body of `POST .../cluster` from `ebb run cluster`'s flags.
fn cluster_body(
    operation: &str,
    nodes: Option<u32>,
    remove: Vec<String>,
    config: Option<String>,
) -> Result<Value, CliError> {
    let mut body = json!({ "operation": operation });
    if let Some(n) = nodes {
        body["nodes"] = json!(n);
    }
    if !remove.is_empty() {
        body["remove"] = json!(remove);
    }
    if let Some(c) = config {
        body["config"] = match c.strip_prefix('@') {
            Some(file) => read_json(Path::new(file))?,
            None => serde_json::from_str(&c).map_err(|e| {
                CliError::Usage(format!(
                    "--config is not JSON ({e}); give JSON text or @FILE"
                ))
            })?,
        };
    }
    Ok(body)
}

/// `ebb run cluster`: starts an admin's operation, and with `wait` waits for its end (exit
/// status 0 only if it succeeded).
fn cluster(
    client: &Client,
    json: bool,
    run: &str,
    operation: &str,
    body: &Value,
    wait: bool,
) -> Result<u8, CliError> {
    let path = run_path(run)?;
    let v = client.call(Method::POST, &format!("{path}/cluster"), Some(body))?;
    let id = v["id"].as_u64().unwrap_or_default();
    if !wait {
        if json {
            output::json(&v);
        } else {
            out!("operation {id} ({operation}) started; `ebb run ops {run} --op {id}` shows it");
        }
        return Ok(0);
    }
    let (answer, op) = wait_operation(client, &path, id)?;
    if json {
        output::json(&answer);
    } else {
        print_operation(&op);
    }
    Ok(match op.status {
        OpStatus::Succeeded => 0,
        OpStatus::Running | OpStatus::Failed | OpStatus::Cancelled => 1,
    })
}

/// Waits for operation `id` of the run at `path` to end, and for its rollback if it has
/// one; answers the operation as it ended (its rollback's id in `rolledBackBy`).
fn wait_operation(
    client: &Client,
    path: &str,
    id: u64,
) -> Result<(Value, OperationView), CliError> {
    let ended = |id: u64| -> Result<(Value, OperationView), CliError> {
        loop {
            let answer = client.get(&format!("{path}/operations/{id}"))?;
            let op: OperationView = read_answer(answer.clone())?;
            match op.status {
                OpStatus::Running => std::thread::sleep(Duration::from_millis(200)),
                OpStatus::Succeeded | OpStatus::Failed | OpStatus::Cancelled => {
                    return Ok((answer, op));
                }
            }
        }
    };
    let (answer, op) = ended(id)?;
    if let Some(undo) = op.rolled_back_by {
        ended(u64::from(undo))?;
    }
    Ok((answer, op))
}

/// `ebb run cancel`: cancels a running operation, and with `wait` waits for its rollback
/// (exit status 0 only if the rollback succeeded).
fn cancel(client: &Client, json: bool, run: &str, id: u32, wait: bool) -> Result<u8, CliError> {
    let path = run_path(run)?;
    let v = client.call(
        Method::POST,
        &format!("{path}/operations/{id}/cancel"),
        None,
    )?;
    if !wait {
        if json {
            output::json(&v);
        } else {
            out!("operation {id} is being cancelled; `ebb run ops {run} --op {id}` shows it");
        }
        return Ok(0);
    }
    let (answer, op) = wait_operation(client, &path, u64::from(id))?;
    let undone = match op.rolled_back_by {
        Some(undo) => {
            let v = client.get(&format!("{path}/operations/{undo}"))?;
            let undo: OperationView = read_answer(v)?;
            undo.status == OpStatus::Succeeded
        }
        // Nothing was left to undo, or it ended before the cancel took.
        None => op.status == OpStatus::Cancelled,
    };
    if json {
        output::json(&answer);
    } else {
        print_operation(&op);
        if let Some(undo) = op.rolled_back_by {
            out!("rolled back by operation {undo}: `ebb run ops {run} --op {undo}` shows it");
        }
    }
    Ok(if undone { 0 } else { 1 })
}

/// `ebb run ops`: a run's cluster operations, or one of them.
fn ops(client: &Client, json: bool, run: &str, op: Option<u32>) -> Result<(), CliError> {
    let path = run_path(run)?;
    let v = match op {
        Some(id) => client.get(&format!("{path}/operations/{id}"))?,
        None => client.get(&format!("{path}/operations"))?,
    };
    if json {
        output::json(&v);
        return Ok(());
    }
    let ops: Vec<OperationView> = match op {
        Some(_) => vec![read_answer(v)?],
        None => read_answer(v)?,
    };
    for op in &ops {
        print_operation(op);
    }
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

/// A run as `ebb run get` (and stop, deprovision, extend) print it.
fn show_run(json: bool, answer: Value) -> Result<(), CliError> {
    if json {
        output::json(&answer);
        return Ok(());
    }
    let r: RunView = read_answer(answer)?;
    out!(
        "run:      {}/{}/{}/{}",
        r.namespace,
        r.app,
        r.program,
        r.runid
    );
    let stopping = if r.stopping { " (stopping)" } else { "" };
    out!("status:   {}{stopping}", r.status);
    out!("profile:  {}", r.profile);
    if let Some(by) = &r.started_by {
        out!(
            "started:  by schedule {} for {}",
            by.schedule,
            by.describe()
        );
    }
    for (k, v) in &r.properties {
        out!("argument: {k}={v}");
    }
    let now = crate::runtime::clock::now_secs();
    out!("starting: {}", output::when(Some(r.starting), now));
    out!("running:  {}", output::when(r.start, now));
    out!("ended:    {}", output::when(r.end, now));
    if let Some(code) = r.exit.as_ref().and_then(|e| e.code) {
        out!("exit:     {code}");
    }
    if let Some(f) = &r.failure {
        out!("failure:  {}: {}", f.kind, f.message);
    }
    if let Some(app) = &r.application {
        let ui = app
            .ui
            .as_ref()
            .map(|u| format!(" ({u})"))
            .unwrap_or_default();
        out!("{}:    application {}{ui}", app.engine, app.id);
    }
    if let Some(retry) = &r.retry {
        let waits = r
            .relaunch_at
            .map(|at| format!(", the next at {}", output::when(Some(at), now)))
            .unwrap_or_default();
        out!("attempt:  {} of {}{waits}", r.attempt, retry.max_attempts);
    }
    for a in &r.attempts {
        let app = a
            .application
            .as_ref()
            .map(|app| format!(" ({} application {})", app.engine, app.id))
            .unwrap_or_default();
        out!(
            "  attempt {} failed {}: {}: {}{app}",
            a.attempt,
            output::when(Some(a.ended), now),
            a.failure.kind,
            a.failure.message
        );
    }
    if let Some(q) = &r.queue {
        let place = q
            .position
            .map(|p| format!(", number {p} in its namespace's queue"))
            .unwrap_or_default();
        let waited = q.stay.admitted.unwrap_or(now.saturating_mul(1000));
        out!(
            "queued:   {:.2}s{place}, on: {}",
            waited.saturating_sub(q.stay.since) as f64 / 1000.0,
            q.stay.reason
        );
    }
    let c = &r.cluster;
    out!(
        "cluster:  {}{}",
        c.status.map_or("-".to_string(), |s| s.to_string()),
        c.expires_at
            .map(|t| format!(" until {}", output::timestamp(Some(t))))
            .unwrap_or_default()
    );
    match (&c.reused_from, &c.reused_by) {
        (Some(o), _) => out!(
            "origin:   {} {} (cluster {}), taken over in {} ms{}",
            if o.pooled {
                "made ahead by the pool's run"
            } else {
                "reused from run"
            },
            o.from,
            c.id.as_deref().unwrap_or("-"),
            o.claim_ms,
            o.discarded
                .as_ref()
                .map(|d| format!("; could not be used: {d}"))
                .unwrap_or_default()
        ),
        (None, _) if c.status.is_some() => out!("origin:   made for this run"),
        (None, _) => {}
    }
    if let Some(by) = &c.reused_by {
        out!("taken over by run {by}");
    }
    if let Some(a) = &c.attention {
        out!(
            "attention: NEEDS ATTENTION since {}: {}; only a repair may run on it (`ebb run cluster RUN repair`)",
            output::when(Some(a.since), now),
            a.reason
        );
    }
    let nodes: Vec<Vec<String>> = c
        .nodes
        .iter()
        .map(|n| {
            let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
            let services: Vec<String> = n
                .services
                .iter()
                .map(|(service, state)| format!("{service}:{state}"))
                .collect();
            let fact = |k: &str| n.properties.get(k).cloned().unwrap_or_else(|| "-".into());
            vec![
                n.name.clone(),
                or_dash(&n.id),
                n.status.to_string(),
                or_dash(&n.ip_address),
                fact("zone"),
                fact("market"),
                if services.is_empty() {
                    "-".into()
                } else {
                    services.join(" ")
                },
            ]
        })
        .collect();
    if !nodes.is_empty() {
        out!();
        table(
            &[
                "NODE", "ID", "STATUS", "ADDRESS", "ZONE", "MARKET", "SERVICES",
            ],
            &nodes,
        );
    }
    let endpoints: Vec<Vec<String>> = c
        .endpoints
        .iter()
        .map(|(name, value)| {
            vec![
                name.clone(),
                crate::model::endpoint::env_name(name),
                value.clone(),
            ]
        })
        .collect();
    if !endpoints.is_empty() {
        out!();
        table(&["ENDPOINT", "PROGRAMS READ", "VALUE"], &endpoints);
    }
    let props: Vec<Vec<String>> = r
        .profile_properties
        .iter()
        .map(|p| vec![p.name.clone(), p.value.clone(), p.origin.to_string()])
        .collect();
    if !props.is_empty() {
        out!();
        table(&["PROPERTY", "VALUE", "SET BY"], &props);
    }
    Ok(())
}
