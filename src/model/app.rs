//! Apps and their programs as deployed: what a run executes.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::model::invalid::Invalid;
use crate::model::names;
use crate::model::property::Values;

/// The only program type so far, as it appears in paths.
pub const WORKFLOWS: &str = "workflows";

/// Longest command line accepted, in arguments.
const MAX_ARGS: usize = 4096;

/// A program as deployed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Program {
    #[serde(rename = "type")]
    pub program_type: String,
    #[schemars(schema_with = "crate::model::names::schema")]
    pub name: String,
    /// The command and its arguments (no shell).
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Most runs that may hold a cluster at once; unset means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_runs: Option<u32>,
    /// How a failed run of it is tried again on the same cluster (over the profile's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<crate::model::retry::Retry>,
}

/// The body of `PUT .../apps/{app}`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(example = serde_json::json!({
    "description": "Says hello",
    "programs": [{"type": "workflows", "name": "hello", "command": ["echo", "hello"]}]
}))]
pub struct AppSpec {
    pub description: Option<String>,
    #[serde(default)]
    pub config: Values,
    #[serde(default)]
    pub programs: Vec<Program>,
    /// Schedules deployed with the app (each with its `name`): created, or updated where
    /// they exist; deleted with the app.
    #[serde(default)]
    #[schemars(length(max = 1000))]
    pub schedules: Vec<crate::model::schedule::ScheduleBody>,
}

/// A deployed app.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct App {
    pub name: String,
    pub namespace: String,
    pub description: String,
    pub config: Values,
    pub programs: Vec<Program>,
    pub created: u64,
    pub updated: u64,
    /// Whether an instance admin deployed it, so its programs may run on the server's own
    /// host whatever its namespace allows; otherwise they may while the namespace allows host
    /// programs (looked at at each start). A run that would run there otherwise is REJECTED.
    /// (Apps deployed before access control were deployed by the one admin there was.)
    #[serde(default = "yes")]
    pub host_programs: bool,
    /// The token that deployed it last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_by: Option<String>,
}

fn yes() -> bool {
    true
}

impl App {
    /// Program `name`, if the app has it.
    pub fn program(&self, name: &str) -> Option<&Program> {
        self.programs.iter().find(|p| p.name == name)
    }
}

/// Checks the programs of an app being deployed: type, unique names, a command, variable
/// names, a concurrency limit of at least 1.
pub fn check_spec(spec: &AppSpec) -> Result<(), Invalid> {
    let mut seen = BTreeSet::new();
    for (i, p) in spec.programs.iter().enumerate() {
        let field = |f: &str| format!("programs[{i}].{f}");
        if p.program_type != WORKFLOWS {
            return Err(Invalid::new(
                field("type"),
                format!("must be '{WORKFLOWS}', got '{}'", p.program_type),
            ));
        }
        names::check(&field("name"), &p.name)?;
        if let Some(retry) = &p.retry {
            retry.check(&field("retry"))?;
        }
        if !seen.insert(p.name.as_str()) {
            return Err(Invalid::new(
                field("name"),
                format!("program '{}' appears twice", p.name),
            ));
        }
        match p.command.first() {
            None => return Err(Invalid::new(field("command"), "must not be empty")),
            Some(exe) if exe.trim().is_empty() => {
                return Err(Invalid::new(field("command[0]"), "must name a program"));
            }
            Some(_) => {}
        }
        if p.command.len() > MAX_ARGS {
            return Err(Invalid::new(
                field("command"),
                format!("at most {MAX_ARGS} arguments"),
            ));
        }
        if let Some(bad) = p
            .env
            .keys()
            .find(|k| k.is_empty() || k.contains('=') || k.contains('\0'))
        {
            return Err(Invalid::new(
                field("env"),
                format!("'{bad}' is not a valid variable name"),
            ));
        }
        if p.max_concurrent_runs == Some(0) {
            return Err(Invalid::new(
                field("maxConcurrentRuns"),
                "must be at least 1 (leave it out for no limit)",
            ));
        }
    }
    Ok(())
}
