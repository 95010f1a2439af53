//! The commands an operator sends from a run's page: stop, deprovision, extend and the
//! cluster's operations. Each answers a notice and has the page redraw its status; a run
//! another server owns was sent there before (the rows are owner-bound).

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use serde::Deserialize;

use crate::api::state::{OperationPath, RunPath, State};
use crate::model::access::Act;
use crate::model::run::RunKey;
use crate::rules::lifecycle::Event;
use crate::service::error::ServiceError;
use crate::service::runs::{self};
use crate::ui::layout::{Answer, Ctx, need, notice, refused, span};

/// The body of a command's form.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandForm {
    #[serde(default)]
    keepalive: Option<String>,
    /// Extend: the new deadline, as a `datetime-local` input gives it (the browser's time).
    #[serde(default)]
    at: Option<String>,
    /// Extend: minutes the browser's zone is behind UTC (`Date.getTimezoneOffset`).
    #[serde(default)]
    tz_offset: Option<i64>,
    /// Extend by this much from the present deadline (`1h`).
    #[serde(default)]
    by: Option<String>,
    /// A cluster operation.
    #[serde(default)]
    operation: Option<String>,
    #[serde(default)]
    nodes: Option<u32>,
    /// Starting, stopping or restarting services: which, comma-separated.
    #[serde(default)]
    services: Option<String>,
    /// Starting, stopping or restarting services, replacing nodes: on which nodes,
    /// comma-separated.
    #[serde(default)]
    on: Option<String>,
    /// `configure`: the new config, a JSON object.
    #[serde(default)]
    config: Option<String>,
}

/// Sends `event` to run `key` as `caller`'s `action`; when another server owns the run, the
/// API call `api_body` goes to it with the session's token. Answers a notice, and has the
/// page update its status.
async fn command(
    state: &State,
    ctx: &Ctx,
    req: &HttpRequest,
    key: RunKey,
    what: Command,
) -> Answer {
    let act = Act::new(&ctx.caller, what.action, Some(&key.namespace), &key.run);
    let done = match &what.kind {
        Kind::Event(event) => runs::command(&state.runtime, key.clone(), event.clone(), act)
            .await
            .map(drop),
        Kind::Cluster(request) => runs::cluster_operation(
            &state.runtime,
            key.clone(),
            request.clone(),
            act,
            runs::Resizer::Admin,
        )
        .await
        .map(drop),
        Kind::Cancel(op) => {
            crate::service::history::cancel_operation(&state.runtime, key.clone(), op.clone(), act)
                .await
                .map(drop)
        }
    };
    // (A run another server owns was sent there before: these rows are owner-bound.)
    if let Err(e) = done {
        return refused(req, e);
    }
    let (status, message) = (StatusCode::OK, what.done.to_string());
    let mut answer = notice(req, status, &message);
    if status.is_success() {
        // The status panel follows at once, without waiting for the event stream.
        answer.headers_mut().insert(
            actix_web::http::header::HeaderName::from_static("hx-trigger"),
            actix_web::http::header::HeaderValue::from_static("ebb-run-changed"),
        );
    }
    Ok(answer)
}

/// What a command does: the event or operation, the action recorded, and what the notice
/// says when it is done.
struct Command {
    kind: Kind,
    action: &'static str,
    done: String,
}

enum Kind {
    Event(Event),
    Cluster(crate::rules::resize::ClusterRequest),
    /// Cancel the operation with this id.
    Cancel(String),
}

fn flag(v: &Option<String>) -> bool {
    v.as_deref().is_some_and(|v| v == "true" || v == "on")
}

pub async fn stop(
    state: State,
    ctx: Ctx,
    path: web::Path<RunPath>,
    form: web::Form<CommandForm>,
    req: HttpRequest,
) -> Answer {
    let keepalive = flag(&form.keepalive);
    let what = Command {
        kind: Kind::Event(Event::Stop { keepalive }),
        action: "run.stop",
        done: if keepalive {
            "Stop requested; the cluster is kept for the profile's keepalive.".into()
        } else {
            "Stop requested.".into()
        },
    };
    command(&state, &ctx, &req, path.into_inner().into(), what).await
}

pub async fn deprovision(
    state: State,
    ctx: Ctx,
    path: web::Path<RunPath>,
    req: HttpRequest,
) -> Answer {
    let force = crate::api::contract::flag(&req, "force")?;
    let what = if force {
        Command {
            kind: Kind::Event(Event::ForceDeprovision),
            action: "run.deprovision.force",
            done: "The cluster is recorded deprovisioned; the events list what may be left behind."
                .into(),
        }
    } else {
        Command {
            kind: Kind::Event(Event::Deprovision),
            action: "run.deprovision",
            done: "Deprovisioning the cluster now.".into(),
        }
    };
    command(&state, &ctx, &req, path.into_inner().into(), what).await
}

/// The epoch second a `datetime-local` value names, in a zone `offset` minutes behind UTC.
fn local_time(value: &str, offset: i64) -> Result<u64, String> {
    let value = value.trim();
    if value.len() > 32 {
        return Err("is not a date and time".into());
    }
    let full = if value.len() == 16 {
        format!("{value}:00")
    } else {
        value.to_string()
    };
    let at = humantime::parse_rfc3339_weak(&full.replace('T', " "))
        .map_err(|_| format!("'{value}' is not a date and time"))?;
    let secs = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| format!("'{value}' is before 1970"))?
        .as_secs() as i64;
    if !(-24 * 60..=24 * 60).contains(&offset) {
        return Err(format!("the zone offset {offset} minutes is not a zone"));
    }
    u64::try_from(secs + offset * 60).map_err(|_| format!("'{value}' is before 1970"))
}

pub async fn extend(
    state: State,
    ctx: Ctx,
    path: web::Path<RunPath>,
    form: web::Form<CommandForm>,
    req: HttpRequest,
) -> Answer {
    let key: RunKey = path.into_inner().into();
    let form = form.into_inner();
    // A time the person chose may shorten the keepalive; "+1h" only ever moves it later.
    let by_given = form.by.as_deref().is_some_and(|b| !b.is_empty());
    let expire_at = if let Some(by) = form.by.as_deref().filter(|b| !b.is_empty()) {
        let by = ebb_spi::parse_duration(by)
            .map_err(|m| ServiceError::invalid("by", m))
            .and_then(|d| {
                if d > Duration::from_secs(crate::model::profile::MAX_SECONDS) {
                    Err(ServiceError::invalid("by", "is more than ten years"))
                } else {
                    Ok(d)
                }
            });
        let by = match by {
            Ok(by) => by,
            Err(e) => return refused(&req, e),
        };
        let run = need(runs::get(&state.runtime, key.clone()).await)?;
        let now = crate::store::clock::now_secs();
        run.cluster
            .expires_at
            .unwrap_or(now)
            .max(now)
            .saturating_add(by.as_secs())
    } else {
        match local_time(
            form.at.as_deref().unwrap_or_default(),
            form.tz_offset.unwrap_or(0),
        ) {
            Ok(at) => at,
            Err(m) => return refused(&req, ServiceError::invalid("at", m)),
        }
    };
    let now = crate::store::clock::now_secs();
    let what = Command {
        kind: Kind::Event(Event::Extend {
            expire_at,
            shorten: !by_given,
        }),
        action: "run.extend",
        done: format!(
            "The cluster is kept until {} from now.",
            span(expire_at.saturating_sub(now))
        ),
    };
    command(&state, &ctx, &req, key, what).await
}

pub async fn cluster(
    state: State,
    ctx: Ctx,
    path: web::Path<RunPath>,
    form: web::Form<CommandForm>,
    req: HttpRequest,
) -> Answer {
    let form = form.into_inner();
    let operation = form.operation.unwrap_or_default();
    let config = match (operation.as_str(), form.config.as_deref().map(str::trim)) {
        ("configure", Some(text)) if !text.is_empty() => {
            match serde_json::from_str::<serde_json::Value>(text) {
                Ok(v) if v.is_object() => Some(v),
                _ => {
                    return refused(
                        &req,
                        ServiceError::invalid("config", "must be a JSON object"),
                    );
                }
            }
        }
        ("configure", _) => {
            return refused(
                &req,
                ServiceError::invalid("config", "configure needs the new config, a JSON object"),
            );
        }
        _ => None,
    };
    // A comma-separated list from a text field; bounded by the field's length.
    let list = |text: &Option<String>| -> Vec<String> {
        text.as_deref()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .take(crate::model::names::MAX_LIST + 1)
            .map(str::to_string)
            .collect()
    };
    let (services, on) = (list(&form.services), list(&form.on));
    let nodes = match operation.as_str() {
        "expand" | "shrink" => form.nodes.map(|n| serde_json::json!(n)),
        _ if !on.is_empty() => Some(serde_json::json!(on)),
        _ => None,
    };
    let mut body = serde_json::json!({"operation": operation, "nodes": nodes, "config": config});
    if !services.is_empty() && operation.ends_with("-services") {
        body["services"] = serde_json::json!(services);
    }
    let request: crate::rules::resize::ClusterRequest = match serde_json::from_value(body) {
        Ok(r) => r,
        Err(_) => {
            return refused(
                &req,
                ServiceError::invalid(
                    "operation",
                    format!("'{operation}' is not an operation of a live cluster"),
                ),
            );
        }
    };
    let what = Command {
        kind: Kind::Cluster(request),
        action: "run.cluster",
        done: format!("Operation {operation} started."),
    };
    command(&state, &ctx, &req, path.into_inner().into(), what).await
}

/// `POST .../operations/{op}/cancel`: an operator cancels a running operation.
pub async fn cancel_operation(
    state: State,
    ctx: Ctx,
    path: web::Path<OperationPath>,
    req: HttpRequest,
) -> Answer {
    let (key, op) = path.into_inner().split();
    let what = Command {
        done: format!("Operation #{op} is being cancelled; what it did is rolled back."),
        kind: Kind::Cancel(op),
        action: "run.cancel-operation",
    };
    command(&state, &ctx, &req, key, what).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_picked_time_is_read_in_the_browsers_zone() {
        // 10:00 in a zone two hours ahead of UTC (offset -120) is 08:00 UTC.
        let utc = local_time("2026-11-24T08:00", 0).expect("valid");
        assert_eq!(local_time("2026-11-24T10:00", -120), Ok(utc));
        assert_eq!(local_time("2026-11-24T10:00:30", -120), Ok(utc + 30));
        for bad in [
            "",
            "tomorrow",
            "2026-13-01T00:00",
            "2026-11-24T10:00:00:00:00:00:00:00:00",
        ] {
            assert!(local_time(bad, 0).is_err(), "{bad}");
        }
        assert!(local_time("2026-11-24T10:00", 100_000).is_err());
    }
}
