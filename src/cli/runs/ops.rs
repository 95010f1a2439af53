//! `ebb run cluster`, `ebb run cancel` and `ebb run ops`: a run's cluster operations, asked
//! for, waited on and shown as timelines.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use super::paths::run_path;
use crate::cli::client::{CliError, Client, read_answer};
use crate::cli::input::read_json;
use crate::cli::output::{self, out, table};
use crate::model::operation::{OpStatus, OperationView, TaskView};
use std::path::Path;

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

/// The body of `POST .../cluster` from `ebb run cluster`'s flags.
pub(super) fn cluster_body(
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
pub(super) fn cluster(
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
pub(super) fn cancel(
    client: &Client,
    json: bool,
    run: &str,
    id: u32,
    wait: bool,
) -> Result<u8, CliError> {
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
pub(super) fn ops(client: &Client, json: bool, run: &str, op: Option<u32>) -> Result<(), CliError> {
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
