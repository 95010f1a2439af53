//! `ebb schedule`: create, change, show, list, delete, enable and disable schedules, and show
//! their next fire times and what became of their fires.

use reqwest::Method;
use serde_json::{Map, Value, json};

use super::args::{ScheduleCmd, ScheduleSpec};
use super::client::{CliError, Client, read_answer};
use super::input::{read_json, split_pair};
use super::output::{self, done, out, table};
use crate::model::schedule::{Fire, FireOutcome, Schedule};

/// The API path of schedule `NAMESPACE/APP/NAME`.
fn schedule_path(schedule: &str) -> Result<String, CliError> {
    match schedule.split('/').collect::<Vec<_>>().as_slice() {
        [ns, app, name] if !ns.is_empty() && !app.is_empty() && !name.is_empty() => {
            Ok(format!("/v3/namespaces/{ns}/apps/{app}/schedules/{name}"))
        }
        _ => Err(CliError::Usage(format!(
            "'{schedule}' is not NAMESPACE/APP/NAME"
        ))),
    }
}

pub fn schedule(client: &Client, json: bool, cmd: ScheduleCmd) -> Result<(), CliError> {
    match cmd {
        ScheduleCmd::Create { schedule, spec } => {
            let path = schedule_path(&schedule)?;
            let body = body(&spec, true)?;
            show(json, client.call(Method::PUT, &path, Some(&body))?)?;
        }
        ScheduleCmd::Update { schedule, spec } => {
            let path = schedule_path(&schedule)?;
            let body = body(&spec, false)?;
            show(json, client.call(Method::POST, &path, Some(&body))?)?;
        }
        ScheduleCmd::Get { schedule } => {
            let path = schedule_path(&schedule)?;
            let answer = client.get(&path)?;
            show(json, answer)?;
            if !json {
                next(client, &path, 3)?;
            }
        }
        ScheduleCmd::List { namespace, app } => {
            let path = match &app {
                Some(app) => format!("/v3/namespaces/{namespace}/apps/{app}/schedules"),
                None => format!("/v3/namespaces/{namespace}/schedules"),
            };
            // Every page: a namespace may hold more schedules than one answer lists.
            let mut all: Vec<Schedule> = Vec::new();
            loop {
                let page_path = match all.last() {
                    Some(s) => format!("{path}?after={}/{}", s.application, s.name),
                    None => path.clone(),
                };
                let page: Vec<Schedule> = read_answer(client.get(&page_path)?)?;
                let full = page.len() == crate::model::schedule::LIST_PAGE;
                all.extend(page);
                if !full {
                    break;
                }
            }
            if json {
                output::json(&serde_json::to_value(&all).unwrap_or_default());
                return Ok(());
            }
            let rows: Vec<Vec<String>> = all
                .iter()
                .map(|s| {
                    vec![
                        format!("{}/{}", s.application, s.name),
                        s.program.program_name.clone(),
                        s.status.to_string(),
                        s.trigger.summary(),
                    ]
                })
                .collect();
            table(&["SCHEDULE", "PROGRAM", "STATUS", "TRIGGER"], &rows);
        }
        ScheduleCmd::Delete { schedule } => {
            client.call(Method::DELETE, &schedule_path(&schedule)?, None)?;
            return done(json, &format!("schedule '{schedule}' deleted"));
        }
        ScheduleCmd::Enable { schedule } => {
            let path = format!("{}/enable", schedule_path(&schedule)?);
            client.call(Method::POST, &path, None)?;
            return done(json, &format!("schedule '{schedule}' enabled"));
        }
        ScheduleCmd::Disable { schedule } => {
            let path = format!("{}/disable", schedule_path(&schedule)?);
            client.call(Method::POST, &path, None)?;
            return done(json, &format!("schedule '{schedule}' suspended"));
        }
        ScheduleCmd::Next { schedule, count } => {
            let path = schedule_path(&schedule)?;
            if json {
                output::json(&client.get(&format!("{path}/next?count={count}"))?);
                return Ok(());
            }
            next(client, &path, count)?;
        }
        ScheduleCmd::Fires { schedule, limit } => {
            let path = schedule_path(&schedule)?;
            let v = client.get(&format!("{path}/fires?limit={limit}"))?;
            if json {
                output::json(&v);
                return Ok(());
            }
            let fires: Vec<Fire> = read_answer(v)?;
            let rows: Vec<Vec<String>> = fires
                .iter()
                .map(|f| {
                    let (status, detail) = match &f.outcome {
                        FireOutcome::Started { run } => ("STARTED", format!("run {run}")),
                        FireOutcome::Skipped { reason } => ("SKIPPED", reason.clone()),
                        FireOutcome::Waiting { reason } => ("WAITING", reason.clone()),
                        FireOutcome::Part { reason } => ("PART", reason.clone()),
                    };
                    let what = match &f.triggering {
                        Some(t) => format!("end of {} ({})", t.run, t.status),
                        None => crate::model::schedule::iso(f.time),
                    };
                    vec![what, status.into(), detail]
                })
                .collect();
            table(&["FIRED FOR", "OUTCOME", "DETAIL"], &rows);
        }
    }
    Ok(())
}

/// The body the flags make: `--file`'s, changed by the flags given. A new schedule needs a
/// program and a trigger.
fn body(spec: &ScheduleSpec, new: bool) -> Result<Value, CliError> {
    let mut body: Map<String, Value> = match &spec.file {
        Some(file) => match read_json(file)? {
            Value::Object(m) => m,
            Value::Null
            | Value::Bool(_)
            | Value::Number(_)
            | Value::String(_)
            | Value::Array(_) => {
                return Err(CliError::Usage(
                    "--file must hold a JSON object (a schedule body)".into(),
                ));
            }
        },
        None => Map::new(),
    };
    if let Some(program) = &spec.program {
        body.insert(
            "program".into(),
            json!({"programName": program, "programType": "WORKFLOW"}),
        );
    }
    if let Some(cron) = &spec.cron {
        let mut t = json!({"type": "TIME", "cronExpression": cron});
        if let Some(zone) = &spec.time_zone {
            t["timeZone"] = json!(zone);
        }
        body.insert("trigger".into(), t);
    }
    if let Some(after) = &spec.after {
        let [ns, app, program] = after.split('/').collect::<Vec<_>>()[..] else {
            return Err(CliError::Usage(format!(
                "--after '{after}' is not NAMESPACE/APP/PROGRAM"
            )));
        };
        let on: Vec<String> = if spec.on.is_empty() {
            vec!["COMPLETED".into()]
        } else {
            spec.on
                .iter()
                .map(|s| s.trim().to_ascii_uppercase())
                .collect()
        };
        body.insert(
            "trigger".into(),
            json!({"type": "PROGRAM_STATUS", "programStatuses": on,
                   "programId": {"namespace": ns, "application": app, "program": program}}),
        );
    }
    if !spec.properties.is_empty() {
        let mut props = match body.remove("properties") {
            Some(Value::Object(m)) => m,
            Some(_) | None => Map::new(),
        };
        for pair in &spec.properties {
            let (k, v) = split_pair(pair)?;
            props.insert(k.into(), json!(v));
        }
        body.insert("properties".into(), Value::Object(props));
    }
    if let Some(c) = &spec.catch_up {
        body.insert("catchUp".into(), json!(c));
    }
    if let Some(d) = &spec.description {
        body.insert("description".into(), json!(d));
    }
    if spec.enable {
        body.insert("status".into(), json!("SCHEDULED"));
    }
    if new {
        for (field, flag) in [("program", "--program"), ("trigger", "--cron or --after")] {
            if !body.contains_key(field) {
                return Err(CliError::Usage(format!(
                    "a new schedule needs {flag} (or a --file that has '{field}')"
                )));
            }
        }
    }
    Ok(Value::Object(body))
}

fn show(json: bool, answer: Value) -> Result<(), CliError> {
    if json {
        output::json(&answer);
        return Ok(());
    }
    let s: Schedule = read_answer(answer)?;
    out!("schedule:    {}", s.path());
    out!("program:     {}", s.program.program_name);
    out!("status:      {}", s.status);
    out!("trigger:     {}", s.trigger.summary());
    out!("catch-up:    {}", s.catch_up);
    if !s.description.is_empty() {
        out!("description: {}", s.description);
    }
    for (k, v) in &s.properties {
        out!("property:    {k}={}", crate::model::property::redact(k, v));
    }
    for c in &s.constraints {
        out!(
            "constraint:  {}",
            serde_json::to_string(c).unwrap_or_default()
        );
    }
    Ok(())
}

/// Prints the next `count` fire times of the schedule at `path`, in UTC and in the time zone
/// of its cron expression.
fn next(client: &Client, path: &str, count: usize) -> Result<(), CliError> {
    let s: Schedule = read_answer(client.get(path)?)?;
    let zone = crate::rules::schedule::time_parts(&s.trigger)
        .first()
        .and_then(|(_, z)| *z)
        .and_then(|z| {
            jiff::tz::TimeZone::get(z)
                .ok()
                .map(|tz| (z.to_string(), tz))
        });
    let times: Vec<u64> = read_answer(client.get(&format!("{path}/next?count={count}"))?)?;
    if times.is_empty() {
        out!("next:        none (not a time schedule)");
    }
    for t in times {
        let local = zone.as_ref().and_then(|(name, tz)| {
            let at = jiff::Timestamp::from_millisecond(i64::try_from(t).ok()?).ok()?;
            Some(format!(
                " ({} {name})",
                at.to_zoned(tz.clone()).strftime("%Y-%m-%d %H:%M:%S")
            ))
        });
        out!(
            "next:        {}{}",
            crate::model::schedule::iso(t),
            local.unwrap_or_default()
        );
    }
    Ok(())
}
