//! `ebb profile`: profiles, their status, usage and assignments.

use reqwest::Method;
use serde_json::{Map, Value, json};

use super::args::{ProfileCmd, ProfileFlags, ProfileTarget};
use super::client::{CliError, Client, read_answer};
use super::input::{duration, profile_path, split_pair};
use super::output::{self, done, list, out, rows, table, text};
use crate::model::profile::Profile;
use crate::model::view::Usage;

pub fn profile(client: &Client, json: bool, cmd: ProfileCmd) -> Result<(), CliError> {
    match cmd {
        ProfileCmd::List(scope) => {
            let v = client.get(&scope.path("profiles"))?;
            if json {
                output::json(&v);
                return Ok(());
            }
            let profiles: Vec<Profile> = read_answer(v)?;
            let rows: Vec<Vec<String>> = profiles
                .iter()
                .map(|p| {
                    vec![
                        format!("{}:{}", p.scope, p.name),
                        p.status.to_string(),
                        p.provisioner.name.clone(),
                        output::seconds(Some(p.keepalive.failed)),
                        output::seconds(Some(p.keepalive.killed)),
                        output::seconds(p.timeout),
                        p.label.clone(),
                    ]
                })
                .collect();
            table(
                &[
                    "PROFILE",
                    "STATUS",
                    "PROVISIONER",
                    "KEEP FAILED",
                    "KEEP KILLED",
                    "TIMEOUT",
                    "LABEL",
                ],
                &rows,
            );
            Ok(())
        }
        ProfileCmd::Get(target) => show_profile(json, client.get(&profile_path(&target)?)?),
        ProfileCmd::Status(target) => {
            let v = client.get(&format!("{}/status", profile_path(&target)?))?;
            if json {
                output::json(&v)
            } else {
                out!("{}", text(&v))
            }
            Ok(())
        }
        ProfileCmd::Create { target, flags } => {
            let path = profile_path(&target)?;
            if client.get_opt(&path)?.is_some() {
                return Err(CliError::Usage(format!(
                    "profile '{}' already exists; use `ebb profile edit`",
                    target.profile
                )));
            }
            let body = profile_body(None, &flags)?;
            show_profile(json, client.call(Method::PUT, &path, Some(&body))?)
        }
        ProfileCmd::Edit { target, flags } => {
            let path = profile_path(&target)?;
            let current = client.get(&path)?;
            let body = profile_body(Some(&current), &flags)?;
            show_profile(json, client.call(Method::PUT, &path, Some(&body))?)
        }
        ProfileCmd::Delete(target) => {
            client.call(Method::DELETE, &profile_path(&target)?, None)?;
            done(json, &format!("profile '{}' deleted", target.profile))
        }
        ProfileCmd::Enable(target) => set_status(client, json, &target, "enable"),
        ProfileCmd::Disable(target) => set_status(client, json, &target, "disable"),
        ProfileCmd::Usage(target) => usage(client, json, &profile_path(&target)?),
        ProfileCmd::Assignments(target) => assignments(client, json, &profile_path(&target)?),
        ProfileCmd::Pool(target) => pool(client, json, &profile_path(&target)?),
    }
}

/// POSTs `verb` (`enable` or `disable`) to a profile and reports its new status.
fn set_status(
    client: &Client,
    json: bool,
    target: &ProfileTarget,
    verb: &str,
) -> Result<(), CliError> {
    let v = client.call(
        Method::POST,
        &format!("{}/{verb}", profile_path(target)?),
        None,
    )?;
    if json {
        output::json(&v);
    } else {
        let profile: Profile = read_answer(v)?;
        out!("profile '{}' is {}", target.profile, profile.status);
    }
    Ok(())
}

/// Builds a PUT body: from `current` (for edit) or the file, then the flags on top.
fn profile_body(current: Option<&Value>, flags: &ProfileFlags) -> Result<Value, CliError> {
    let mut body: Map<String, Value> = match (&flags.file, current) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path).map_err(|e| CliError::File {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
            let v: Value = serde_json::from_str(&text).map_err(|e| CliError::File {
                path: path.display().to_string(),
                reason: format!("not valid JSON: {e}"),
            })?;
            v.as_object().cloned().ok_or_else(|| CliError::File {
                path: path.display().to_string(),
                reason: "must hold a JSON object".into(),
            })?
        }
        (None, Some(current)) => current.as_object().cloned().unwrap_or_default(),
        (None, None) => Map::new(),
    };
    // What GET returns but PUT does not take.
    for read_only in ["scope", "status", "created", "name"] {
        body.remove(read_only);
    }
    if let Some(p) = &flags.provisioner {
        let keep = body
            .get("provisioner")
            .and_then(|v| v.get("name"))
            .and_then(Value::as_str)
            == Some(p.as_str());
        if !keep {
            body.insert("provisioner".into(), json!({ "name": p, "properties": [] }));
        }
    }
    let Some(provisioner) = body.get_mut("provisioner").and_then(Value::as_object_mut) else {
        return Err(CliError::Usage(
            "a profile needs a provisioner: give --provisioner NAME or --file FILE".into(),
        ));
    };
    let props = provisioner.entry("properties").or_insert_with(|| json!([]));
    let Some(props) = props.as_array_mut() else {
        return Err(CliError::Usage(
            "provisioner.properties must be a list".into(),
        ));
    };
    for name in &flags.remove_properties {
        props.retain(|p| p["name"].as_str() != Some(name));
    }
    for (pairs, editable) in [(&flags.properties, true), (&flags.fixed_properties, false)] {
        for pair in pairs {
            let (name, value) = split_pair(pair)?;
            props.retain(|p| p["name"].as_str() != Some(name));
            props.push(json!({ "name": name, "value": value, "isEditable": editable }));
        }
    }
    for (field, value) in [("label", &flags.label), ("description", &flags.description)] {
        if let Some(v) = value {
            body.insert(field.into(), json!(v));
        }
    }
    let keepalive = body
        .entry("keepalive")
        .or_insert_with(|| json!({ "killed": 0, "failed": 0 }));
    for (field, value) in [
        ("failed", &flags.keepalive_failed),
        ("killed", &flags.keepalive_killed),
    ] {
        if let Some(v) = value {
            keepalive[field] = json!(duration(&format!("--keepalive-{field}"), v)?);
        }
    }
    if let Some(t) = &flags.timeout {
        body.insert("timeout".into(), json!(duration("--timeout", t)?));
    }
    if flags.no_timeout {
        body.insert("timeout".into(), Value::Null);
    }
    if let Some(reuse) = flags.cluster_reuse {
        body.insert("clusterReuse".into(), json!(reuse));
        if !reuse {
            body.remove("reuseIdle");
        }
    }
    if let Some(idle) = &flags.reuse_idle {
        body.insert("reuseIdle".into(), json!(duration("--reuse-idle", idle)?));
    }
    if let Some(price) = flags.price_per_node_hour {
        body.insert("pricePerNodeHour".into(), json!(price));
    }
    if flags.no_pool {
        body.remove("pool");
    }
    if flags.pool_min.is_some() || flags.pool_max.is_some() || flags.pool_idle.is_some() {
        let pool = body.entry("pool").or_insert_with(|| json!({"min": 0}));
        if let Some(min) = flags.pool_min {
            pool["min"] = json!(min);
        }
        if let Some(max) = flags.pool_max {
            pool["max"] = json!(max);
        }
        if let Some(idle) = &flags.pool_idle {
            pool["idle"] = json!(duration("--pool-idle", idle)?);
        }
    }
    Ok(Value::Object(body))
}

fn show_profile(json: bool, answer: Value) -> Result<(), CliError> {
    if json {
        output::json(&answer);
        return Ok(());
    }
    let p: Profile = read_answer(answer)?;
    out!("profile:      {}:{}", p.scope, p.name);
    out!("label:        {}", p.label);
    out!("description:  {}", p.description);
    out!("status:       {}", p.status);
    out!("provisioner:  {}", p.provisioner.name);
    out!(
        "keepalive:    failed {}, killed {}",
        output::seconds(Some(p.keepalive.failed)),
        output::seconds(Some(p.keepalive.killed))
    );
    out!("timeout:      {}", output::seconds(p.timeout));
    match p.reuse() {
        Some(r) => out!(
            "reuse:        a completed run's cluster waits IDLE up to {} for the next run that matches",
            output::seconds(Some(r.idle))
        ),
        None => out!("reuse:        off"),
    }
    let rows: Vec<Vec<String>> = p
        .provisioner
        .properties
        .iter()
        .map(|prop| {
            let editable = if prop.is_editable {
                "editable"
            } else {
                "fixed"
            };
            vec![prop.name.clone(), prop.value.clone(), editable.to_string()]
        })
        .collect();
    if !rows.is_empty() {
        out!();
        table(&["PROPERTY", "VALUE", "RUNS MAY OVERRIDE"], &rows);
    }
    Ok(())
}

pub fn usage(client: &Client, json: bool, profile_path: &str) -> Result<(), CliError> {
    let v = client.get(&format!("{profile_path}/usage"))?;
    if json {
        output::json(&v);
        return Ok(());
    }
    let usage: Usage = read_answer(v)?;
    out!("profile:     {}", usage.profile);
    let runs: Vec<String> = usage.runs.iter().map(|(k, n)| format!("{k} {n}")).collect();
    out!(
        "runs:        {}",
        if runs.is_empty() {
            "none".into()
        } else {
            runs.join(", ")
        }
    );
    out!("active runs: {}", usage.active_runs.len());
    out!("nodes now:   {}", usage.nodes_now);
    out!("node-hours:  {:.3}", usage.node_hours);
    out!(
        "idle:        {:.3} node-hours IDLE between runs",
        usage.idle_node_seconds as f64 / 3600.0
    );
    Ok(())
}

/// `ebb profile pool`: the pool's spec, then its clusters.
pub fn pool(client: &Client, json: bool, profile_path: &str) -> Result<(), CliError> {
    let v = client.get(&format!("{profile_path}/pool"))?;
    if json {
        output::json(&v);
        return Ok(());
    }
    let pool: crate::model::view::PoolView = read_answer(v)?;
    out!("profile:  {}", pool.profile);
    match pool.pool {
        Some(p) => out!(
            "pool:     min {}, max {}, a cluster a run left waits {}",
            p.min,
            p.max,
            output::seconds(pool.idle)
        ),
        None => out!("pool:     none (IDLE clusters its runs left are shown)"),
    }
    out!(
        "ready {}, creating {}, held by runs {}",
        pool.ready.len(),
        pool.creating.len(),
        pool.claimed
    );
    let rows: Vec<Vec<String>> = pool
        .ready
        .iter()
        .map(|c| ("READY", c))
        .chain(pool.creating.iter().map(|c| ("CREATING", c)))
        .map(|(state, c)| {
            vec![
                state.to_string(),
                c.run.clone(),
                c.cluster.clone(),
                if c.pooled {
                    "made ahead"
                } else {
                    "left by a run"
                }
                .to_string(),
                c.nodes.to_string(),
                c.expires_at
                    .map_or("when taken".into(), |t| output::timestamp(Some(t))),
            ]
        })
        .collect();
    if !rows.is_empty() {
        out!();
        table(
            &["STATE", "RUN", "CLUSTER", "ORIGIN", "NODES", "EXPIRES"],
            &rows,
        );
    }
    Ok(())
}

pub fn assignments(client: &Client, json: bool, profile_path: &str) -> Result<(), CliError> {
    let v = client.get(&format!("{profile_path}/assignments"))?;
    if json {
        output::json(&v);
        return Ok(());
    }
    let places = rows(&list(&v), &["level", "namespace", "app", "program"]);
    if places.is_empty() {
        out!("(assigned nowhere)");
    } else {
        table(&["LEVEL", "NAMESPACE", "APP", "PROGRAM"], &places);
    }
    Ok(())
}
