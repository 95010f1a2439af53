//! Apps and their programs: start a run with runtime arguments (a profile and property
//! overrides among them), with what it would resolve to shown before it starts.

use actix_web::http::Method;
use actix_web::{HttpRequest, web};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{Answer, Ctx, fragment, frame, need, redirect, refused, run_href, span, time};
use crate::api::state::{ProgramPath, State};
use crate::model::access::Act;
use crate::model::property::{PROFILE_KEY, PROPERTY_PREFIX, Values};
use crate::model::run::RunKey;
use crate::service::error::ServiceError;
use crate::service::{apps, profiles, runs, starts};

/// `GET /ui/ns/{ns}/apps`.
pub async fn list(state: State, ctx: Ctx, ns: web::Path<String>) -> Answer {
    let ns = ns.into_inner();
    let apps = need(apps::list(&state.store, ns.clone()).await)?;
    let admin = ctx.allows(
        crate::model::access::Need::Namespace(crate::model::access::Role::Admin),
        Some(&ns),
    );
    let body = html! {
        h1 { "Apps in " (ns) }
        @if apps.is_empty() {
            p.muted { "No apps. Deploy one with " code { "ebb app deploy" } " or " code { "PUT /v3/namespaces/" (ns) "/apps/{app}" } "." }
        }
        @for app in &apps {
            section {
                h2 { (app.name) }
                @if !app.description.is_empty() { p { (app.description) } }
                p.muted { "Updated " (time(app.updated)) @if let Some(by) = &app.deployed_by { " by " (by) } }
                ul {
                    @for p in app.programs.iter() {
                        li {
                            a href=(format!("/ui/ns/{ns}/apps/{}/{}", app.name, p.name)) { (p.name) }
                            " " code.muted { (p.summary()) }
                        }
                    }
                }
            }
        }
        @if admin {
            h2 { "Deploy an app" }
            form hx-post=(format!("/ui/ns/{ns}/apps")) method="post" action=(format!("/ui/ns/{ns}/apps")) {
                div.field { label for="app-name" { "Name" } input #app-name type="text" name="name" required maxlength="128"; }
                div.field {
                    label for="app-spec" { "Definition" }
                    textarea #app-spec name="spec" rows="6" aria-describedby="app-spec-help" { (EXAMPLE) }
                    p #app-spec-help.help {
                        "JSON, as " code { "PUT /v3/namespaces/" (ns) "/apps/{app}" } " takes it: programs (a command with arguments, no shell), "
                        "and config (preferences of the app, such as " code { (PROFILE_KEY) } "). Deploying a name again replaces the app."
                    }
                }
                button.primary type="submit" { "Deploy" }
            }
        }
    };
    Ok(frame(&ctx, "Apps", body))
}

/// The definition the deploy form starts with.
const EXAMPLE: &str = r#"{
  "description": "Says hello",
  "programs": [
    {"type": "workflows", "name": "hello", "command": ["sh", "-c", "echo hello from $(hostname)"]}
  ]
}"#;

/// The deploy form.
#[derive(Debug, Deserialize)]
pub struct DeployForm {
    name: String,
    spec: String,
}

/// `POST /ui/ns/{ns}/apps`: deploys (or replaces) an app from its JSON definition.
pub async fn deploy(
    state: State,
    ctx: Ctx,
    ns: web::Path<String>,
    form: web::Form<DeployForm>,
    req: HttpRequest,
) -> Answer {
    let ns = ns.into_inner();
    let form = form.into_inner();
    let de = &mut serde_json::Deserializer::from_str(&form.spec);
    let spec: crate::model::app::AppSpec = match serde_path_to_error::deserialize(de) {
        Ok(spec) => spec,
        Err(e) => {
            let at = e.path().to_string();
            let field = if at == "." {
                "definition".to_string()
            } else {
                format!("definition: {at}")
            };
            return refused(&req, ServiceError::invalid(field, e.inner().to_string()));
        }
    };
    let name = form.name.trim().to_string();
    match apps::put(&state.store, &ctx.caller, ns.clone(), name.clone(), spec).await {
        Ok(app) => {
            let to = match app.programs.first() {
                Some(p) => format!("/ui/ns/{ns}/apps/{name}/{}", p.name),
                None => format!("/ui/ns/{ns}/apps"),
            };
            Ok(redirect(&req, &to))
        }
        Err(e) => refused(&req, e),
    }
}

/// The runtime arguments a start form sent: the profile picked, property overrides and other
/// arguments, one `key=value` a line.
#[derive(Debug, Default, Deserialize)]
pub struct StartForm {
    #[serde(default)]
    profile: String,
    #[serde(default)]
    overrides: String,
    #[serde(default)]
    args: String,
}

/// Most lines the argument boxes take.
const MAX_LINES: usize = 200;

/// The runtime arguments the form gives, or which line is wrong.
fn arguments(form: &StartForm) -> Result<Values, ServiceError> {
    let mut out = Values::new();
    let lines = |field: &'static str, text: &str, prefix: &'static str, out: &mut Values| {
        let mut n = 0;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            n += 1;
            if n > MAX_LINES {
                return Err(ServiceError::invalid(
                    field,
                    format!("takes at most {MAX_LINES} lines"),
                ));
            }
            let Some((k, v)) = line.split_once('=') else {
                return Err(ServiceError::invalid(
                    field,
                    format!("line {} is not key=value: '{line}'", i + 1),
                ));
            };
            out.insert(format!("{prefix}{}", k.trim()), v.trim().to_string());
        }
        Ok(())
    };
    lines("args", &form.args, "", &mut out)?;
    lines("overrides", &form.overrides, PROPERTY_PREFIX, &mut out)?;
    if !form.profile.trim().is_empty() {
        out.insert(PROFILE_KEY.to_string(), form.profile.trim().to_string());
    }
    Ok(out)
}

/// `GET /ui/ns/{ns}/apps/{app}/{program}`: the program, its start form, its newest runs.
pub async fn program(state: State, ctx: Ctx, path: web::Path<ProgramPath>) -> Answer {
    let p = path.into_inner();
    let app = need(apps::get(&state.store, p.ns.clone(), p.app.clone()).await)?;
    let program = app
        .program(&p.program)
        .cloned()
        .ok_or_else(|| ServiceError::ProgramNotFound {
            namespace: p.ns.clone(),
            app: p.app.clone(),
            program: p.program.clone(),
        })
        .map_err(crate::api::error::ApiError::from)?;
    let recent = need(
        runs::list_program(
            &state.runtime,
            p.ns.clone(),
            p.app.clone(),
            p.program.clone(),
            runs::RunFilter {
                limit: Some(10),
                ..Default::default()
            },
        )
        .await,
    )?;
    let choices = need(profiles::list(&state.store, Some(p.ns.clone()), true).await)?;
    let schedules = super::schedules::section(&state, &ctx, &p).await?;
    let base = format!("/ui/ns/{}/apps/{}/{}", p.ns, p.app, p.program);
    let may_start = ctx.may(
        Method::POST,
        "/ns/{ns}/apps/{app}/{program}/start",
        Some(&p.ns),
    );
    let body = html! {
        p.muted { a href=(format!("/ui/ns/{}/apps", p.ns)) { "Apps in " (p.ns) } " / " (p.app) }
        h1 { (p.app) " / " (p.program) }
        p { "Runs " code { (program.summary()) } }
        @if may_start {
            h2 { "Start a run" }
            form #start method="post" action=(format!("{base}/start")) hx-post=(format!("{base}/start")) {
                div.field {
                    label for="profile" { "Profile" }
                    select #profile name="profile" aria-describedby="profile-help" {
                        option value="" { "(as the preferences say)" }
                        @for pr in &choices {
                            @let scoped = format!("{}:{}", pr.scope, pr.name);
                            option value=(scoped) { (scoped) @if pr.status == crate::model::profile::ProfileStatus::Disabled { " (disabled)" } }
                        }
                    }
                    p #profile-help.help { "Sets " code { (PROFILE_KEY) } " for this run only." }
                }
                div.field {
                    label for="overrides" { "Property overrides" }
                    textarea #overrides name="overrides" placeholder="nodes=3" aria-describedby="overrides-help" {}
                    p #overrides-help.help { "One " code { "property=value" } " a line; each becomes " code { (PROPERTY_PREFIX) "<property>" } ". Only properties the profile leaves editable." }
                }
                div.field {
                    label for="args" { "Other runtime arguments" }
                    textarea #args name="args" placeholder="key=value" aria-describedby="args-help" {}
                    p #args-help.help { "One " code { "key=value" } " a line; the program sees them as its arguments." }
                }
                div.actions {
                    button type="button" hx-post=(format!("{base}/preview")) hx-include="#start" hx-target="#preview" { "Preview the profile" }
                    button.primary type="submit" { "Start" }
                }
            }
            div #preview aria-live="polite" {}
        }
        (schedules)
        h2 { "Newest runs" }
        @if recent.runs.is_empty() { p.muted { "None yet." } }
        ul {
            @for r in &recent.runs {
                li {
                    a href=(run_href(&RunKey { namespace: r.namespace.clone(), app: r.app.clone(), program: r.program.clone(), run: r.runid.clone() })) { code { (r.runid) } }
                    " " (super::layout::badge(&r.status.to_string())) " " (time(r.starting))
                }
            }
        }
    };
    Ok(frame(&ctx, &format!("{} / {}", p.app, p.program), body))
}

fn preview_of(p: &starts::Preview) -> Markup {
    html! {
        h3 { "This run would use " (p.profile) }
        p.muted {
            "Chosen by " (super::layout::origin(&p.origin)) "; provisioner " code { (p.provisioner) } ", " (p.nodes) " node(s); kept "
            (span(p.keepalive.failed)) " after a failure; "
            (p.timeout.map_or("no time limit".to_string(), |t| format!("at most {}", span(t)))) "."
        }
        table {
            thead { tr { th scope="col" { "Property" } th scope="col" { "Value" } th scope="col" { "Set by" } } }
            tbody {
                @for e in &p.properties {
                    tr { td { code { (e.name) } } td { code { (e.value) } } td { (super::layout::origin(&e.origin)) } }
                }
            }
        }
    }
}

/// `POST .../preview`: what the start would resolve to, or why it would be refused.
pub async fn preview(
    state: State,
    path: web::Path<ProgramPath>,
    form: web::Form<StartForm>,
) -> Answer {
    let p = path.into_inner();
    let args = match arguments(&form) {
        Ok(a) => a,
        Err(e) => {
            return Ok(fragment(
                html! { p.notice.bad role="alert" { (e.to_string()) } },
            ));
        }
    };
    Ok(fragment(
        match starts::preview(&state.runtime, p.ns, p.app, p.program, args).await {
            Ok(preview) => preview_of(&preview),
            Err(e) => {
                html! { p.notice.bad role="alert" { "It would be refused: " (crate::api::error::ApiError::from(e).to_string()) } }
            }
        },
    ))
}

/// `POST .../start`: starts the run and opens its page.
pub async fn start(
    state: State,
    ctx: Ctx,
    path: web::Path<ProgramPath>,
    form: web::Form<StartForm>,
    req: HttpRequest,
) -> Answer {
    let p = path.into_inner();
    let args = match arguments(&form) {
        Ok(a) => a,
        Err(e) => return refused(&req, e),
    };
    let act = Act::new(&ctx.caller, "run.start", Some(&p.ns), "");
    let program = (p.ns.clone(), p.app.clone(), p.program.clone());
    match starts::start(&state.runtime, act, program, args, None).await {
        Ok(id) => {
            let key = RunKey {
                namespace: p.ns,
                app: p.app,
                program: p.program,
                run: id,
            };
            Ok(redirect(&req, &run_href(&key)))
        }
        Err(e) => refused(&req, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_becomes_runtime_arguments() {
        let form = StartForm {
            profile: "USER:small".into(),
            overrides: "nodes = 3\n\n# a comment\n".into(),
            args: "input=/data\n".into(),
        };
        let args = arguments(&form).expect("valid");
        assert_eq!(
            args.get("system.profile.name").map(String::as_str),
            Some("USER:small")
        );
        assert_eq!(
            args.get("system.profile.properties.nodes")
                .map(String::as_str),
            Some("3")
        );
        assert_eq!(args.get("input").map(String::as_str), Some("/data"));
        let bad = StartForm {
            args: "no equals sign".into(),
            ..StartForm::default()
        };
        assert!(
            arguments(&bad)
                .expect_err("refused")
                .to_string()
                .contains("line 1")
        );
    }
}
