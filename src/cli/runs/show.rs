//! A run as `ebb run get` (and stop, deprovision, extend) print it.

use serde_json::Value;

use crate::cli::client::{CliError, read_answer};
use crate::cli::output::{self, out, table};
use crate::model::view::RunView;

/// A run as `ebb run get` (and stop, deprovision, extend) print it.
pub(super) fn show_run(json: bool, answer: Value) -> Result<(), CliError> {
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
    let now = crate::store::clock::now_secs();
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
        if let Some(history) = &app.history {
            out!("history:  {history}");
        }
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
