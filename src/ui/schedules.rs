//! A program's schedules on its page: each with its trigger, next fire times (in the browser's
//! zone) and an enable/disable switch; a form to create one, with a preview of the next five
//! times of its cron expression; and, on a run's page, what started it.

use actix_web::http::Method;
use actix_web::{HttpRequest, web};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{Answer, Ctx, badge, fragment, need, redirect, refused};
use crate::api::state::{ProgramPath, State};
use crate::model::property::Values;
use crate::model::schedule::{
    CatchUp, Schedule, ScheduleBody, ScheduleProgram, ScheduleStatus, StartedBy, Trigger,
};
use crate::service::error::ServiceError;
use crate::service::schedules::{self, Filter, ScheduleId};
use crate::store::clock;

/// How many next times a schedule shows on its program's page.
const SHOWN: usize = 3;

/// The schedules section of program `ns/app/program`'s page.
pub async fn section(
    state: &State,
    ctx: &Ctx,
    p: &ProgramPath,
) -> Result<Markup, super::layout::UiError> {
    let filter = Filter {
        app: Some(p.app.clone()),
        program: Some(p.program.clone()),
        ..Filter::default()
    };
    let all = need(schedules::list(&state.store, p.ns.clone(), filter).await)?;
    let may_create = ctx.may(
        Method::POST,
        "/ns/{ns}/apps/{app}/{program}/schedules",
        Some(&p.ns),
    );
    let base = format!("/ui/ns/{}/apps/{}/{}", p.ns, p.app, p.program);
    Ok(html! {
        section aria-labelledby="schedules-h" {
            h2 #schedules-h { "Schedules" }
            @if all.is_empty() { p.muted { "None: runs start only when asked." } }
            @else {
                div.scroll {
                    table.wide {
                        thead { tr {
                            th scope="col" { "Schedule" } th scope="col" { "Trigger" } th scope="col" { "Status" }
                            th scope="col" { "Next fires" } th scope="col" { span.sr { "Actions" } }
                        } }
                        tbody { @for s in &all { (row(ctx, s)) } }
                    }
                }
            }
            @if may_create {
                details {
                    summary { "New schedule" }
                    form #new-schedule method="post" action=(format!("{base}/schedules")) hx-post=(format!("{base}/schedules")) {
                        div.field {
                            label for="schedule-name" { "Name" }
                            input #schedule-name name="name" required pattern=(crate::model::names::PATTERN.trim_start_matches('^').trim_end_matches('$'));
                        }
                        div.field {
                            label for="cron" { "Cron expression" }
                            input #cron name="cron" required placeholder="0 4 * * *" aria-describedby="cron-help"
                                hx-post=(format!("{base}/schedules/preview")) hx-trigger="input changed delay:400ms" hx-include="#new-schedule" hx-target="#cron-preview";
                            p #cron-help.help { "Minute, hour, day of month, month, day of week; or six fields with seconds first." }
                        }
                        div.field {
                            label for="time-zone" { "Time zone" }
                            input #time-zone name="timeZone" value="UTC" data-zone="browser" aria-describedby="zone-help"
                                hx-post=(format!("{base}/schedules/preview")) hx-trigger="change" hx-include="#new-schedule" hx-target="#cron-preview";
                            p #zone-help.help { "An IANA name such as Europe/Berlin." }
                        }
                        div.field {
                            label for="catch-up" { "Missed times" }
                            select #catch-up name="catchUp" {
                                option value="none" { "skip them" }
                                option value="last" { "run the newest" }
                                option value="all" { "run each" }
                            }
                        }
                        div.field {
                            label for="schedule-properties" { "Properties" }
                            textarea #schedule-properties name="properties" placeholder="system.profile.name=USER:nightly" aria-describedby="properties-help" {}
                            p #properties-help.help { "One " code { "key=value" } " a line: a profile, property overrides, runtime arguments." }
                        }
                        div.field {
                            label { input type="checkbox" name="enable" value="true"; " Enable it now" }
                        }
                        div #cron-preview aria-live="polite" {}
                        div.actions { button.primary type="submit" { "Create" } }
                    }
                }
            }
        }
    })
}

/// One schedule as a row of its program's table.
fn row(ctx: &Ctx, s: &Schedule) -> Markup {
    let next = if s.status == ScheduleStatus::Scheduled {
        schedules::next_times(s, clock::now_millis(), SHOWN)
    } else {
        Vec::new()
    };
    let may_switch = ctx.may(
        Method::POST,
        "/ns/{ns}/apps/{app}/schedules/{name}/status",
        Some(&s.namespace),
    );
    let (label, to) = match s.status {
        ScheduleStatus::Scheduled => ("Disable", "SUSPENDED"),
        ScheduleStatus::Suspended => ("Enable", "SCHEDULED"),
    };
    html! {
        tr id=(format!("schedule-{}", s.name)) {
            td data-label="Schedule" { strong { (s.name) } @if !s.description.is_empty() { br; span.muted { (s.description) } } }
            td data-label="Trigger" { code { (s.trigger.summary()) } }
            td data-label="Status" { (badge(&s.status.to_string())) }
            td data-label="Next fires" {
                @if next.is_empty() { span.muted { "-" } }
                @for t in &next { (super::layout::time(t / 1000)) br; }
            }
            td {
                @if may_switch {
                    button hx-post=(format!("/ui/ns/{}/apps/{}/schedules/{}/status", s.namespace, s.application, s.name))
                        hx-vals=(format!(r#"{{"status":"{to}"}}"#)) hx-target="closest tr" hx-swap="outerHTML"
                        aria-label=(format!("{label} {}", s.name)) { (label) }
                }
            }
        }
    }
}

/// The new-schedule form.
#[derive(Debug, Deserialize)]
pub struct NewSchedule {
    #[serde(default)]
    name: String,
    #[serde(default)]
    cron: String,
    #[serde(default, rename = "timeZone")]
    time_zone: String,
    #[serde(default, rename = "catchUp")]
    catch_up: Option<CatchUp>,
    #[serde(default)]
    properties: String,
    #[serde(default)]
    enable: Option<String>,
}

impl NewSchedule {
    fn trigger(&self) -> Trigger {
        let zone = self.time_zone.trim();
        Trigger::Time {
            cron_expression: self.cron.trim().to_string(),
            time_zone: (!zone.is_empty() && zone != "UTC").then(|| zone.to_string()),
        }
    }

    fn body(&self, program: &str) -> Result<ScheduleBody, ServiceError> {
        let mut properties = Values::new();
        for line in self
            .properties
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
        {
            let Some((k, v)) = line.split_once('=') else {
                return Err(ServiceError::invalid(
                    "properties",
                    format!("'{line}' is not key=value"),
                ));
            };
            properties.insert(k.trim().to_string(), v.trim().to_string());
        }
        Ok(ScheduleBody {
            program: Some(ScheduleProgram {
                program_name: program.to_string(),
                program_type: crate::model::schedule::WORKFLOW.into(),
            }),
            trigger: Some(self.trigger()),
            properties: Some(properties),
            catch_up: self.catch_up,
            status: self.enable.as_ref().map(|_| ScheduleStatus::Scheduled),
            ..ScheduleBody::default()
        })
    }
}

/// `POST .../{program}/schedules/preview`: the next five times of the form's cron expression,
/// or why it is refused.
pub async fn preview(form: web::Form<NewSchedule>) -> Answer {
    let trigger = form.trigger();
    let Trigger::Time {
        cron_expression,
        time_zone,
    } = &trigger
    else {
        return Ok(fragment(html! {}));
    };
    if cron_expression.is_empty() {
        return Ok(fragment(html! {}));
    }
    let now = clock::now_millis();
    Ok(fragment(
        match crate::rules::schedule::Cron::parse(cron_expression, time_zone.as_deref(), now) {
            Ok(cron) => html! {
                p { "Next five times (in your browser's zone):" }
                ul { @for t in cron.next(now, 5) { li { (super::layout::time(t / 1000)) } } }
            },
            Err(e) => html! { p.notice.bad role="alert" { (e.to_string()) } },
        },
    ))
}

/// `POST .../{program}/schedules`: creates the schedule and shows the program again.
pub async fn create(
    state: State,
    ctx: Ctx,
    path: web::Path<ProgramPath>,
    form: web::Form<NewSchedule>,
    req: HttpRequest,
) -> Answer {
    let p = path.into_inner();
    let body = match form.body(&p.program) {
        Ok(b) => b,
        Err(e) => return refused(&req, e),
    };
    let id = ScheduleId {
        namespace: p.ns.clone(),
        app: p.app.clone(),
        name: form.name.trim().to_string(),
    };
    match schedules::create(&state.store, &ctx.caller, id, body).await {
        Ok(_) => Ok(redirect(
            &req,
            &format!("/ui/ns/{}/apps/{}/{}", p.ns, p.app, p.program),
        )),
        Err(e) => refused(&req, e),
    }
}

#[derive(Debug, Deserialize)]
pub struct SchedulePath {
    ns: String,
    app: String,
    name: String,
}

#[derive(Debug, Deserialize)]
pub struct StatusForm {
    status: ScheduleStatus,
}

/// `POST .../schedules/{name}/status`: enables or disables; answers the schedule's row.
pub async fn set_status(
    state: State,
    ctx: Ctx,
    path: web::Path<SchedulePath>,
    form: web::Form<StatusForm>,
    req: HttpRequest,
) -> Answer {
    let p = path.into_inner();
    let id = ScheduleId {
        namespace: p.ns,
        app: p.app,
        name: p.name,
    };
    match schedules::set_status(&state.store, &ctx.caller, id, form.status).await {
        Ok(s) => Ok(fragment(row(&ctx, &s))),
        Err(e) => refused(&req, e),
    }
}

/// What started a run, for its page.
pub fn started_by(by: &StartedBy) -> Markup {
    html! {
        p.muted {
            "Started by schedule " strong { (by.schedule) } " for "
            @match &by.triggering {
                Some(t) => {
                    "the end (" (t.status) ") of run "
                    a href=(super::layout::run_href(&crate::model::run::RunKey {
                        namespace: t.namespace.clone(), app: t.application.clone(),
                        program: t.program.clone(), run: t.run.clone(),
                    })) { code { (t.run) } }
                },
                None => { "the time " (super::layout::time(by.time / 1000)) },
            }
            "."
        }
    }
}
