//! A plugin as an automator: it runs a template's service actions on nodes (an Ansible
//! playbook, a Chef run list, a Puppet manifest), one `run` request per attempt.
//!
//! The framework keeps what it keeps for the built-in `shell`: attempts, time limits, the
//! task's record and output, the node's facts. The request carries what the action needs and
//! nothing else: its fields from the template, the node (its address, facts and, for a node
//! reached over SSH, the login the profile gives, its key included) and the cluster. A
//! profile's other properties (a cloud's credentials) never reach an automator.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ebb_spi::{PropertyError, PropertyKind};
use serde_json::{Map, Value};

use crate::descriptor::Descriptor;
use crate::process::{CallError, Pool};
use crate::protocol::{ContextMessage, Method, Request, RunResult};

/// An automator plugin.
#[derive(Debug)]
pub struct PluginAutomator {
    pool: Pool,
}

/// One attempt of a service action, as the framework hands it over.
#[derive(Debug)]
pub struct ActionCall<'a> {
    /// The server's work directory (the plugin's own directory is in it).
    pub work_dir: &'a Path,
    /// `{service, action, fields}`.
    pub action: Value,
    /// The node: `{name, id, address, facts, workDir?, ssh?}`.
    pub node: Value,
    /// The cluster document every action gets.
    pub cluster: Value,
    /// How long the attempt may take.
    pub timeout: Duration,
}

/// Its processes: `descriptor()`, `health()`.
impl std::ops::Deref for PluginAutomator {
    type Target = Pool;
    fn deref(&self) -> &Pool {
        &self.pool
    }
}

impl PluginAutomator {
    pub fn new(descriptor: Descriptor) -> Self {
        Self {
            pool: Pool::new(Arc::new(descriptor)),
        }
    }

    /// Checks an action's fields (as a template gives them) against the fields the plugin
    /// declares: none unknown, every required one present, text values of the right kind.
    /// A field declared as text may also hold any JSON (a map of variables, a list).
    pub fn check_fields(&self, fields: &Map<String, Value>) -> Result<(), PropertyError> {
        let spec = self.descriptor().spec;
        for (name, value) in fields {
            let Some(field) = spec.property(name) else {
                let known: Vec<&str> = spec.properties.iter().map(|p| p.name).collect();
                return Err(PropertyError::new(
                    name,
                    format!(
                        "is not a field of automator '{}' (known: {})",
                        spec.name,
                        known.join(", ")
                    ),
                ));
            };
            match value {
                Value::String(text) => ebb_spi::check_value(&field.kind, text)
                    .map_err(|m| PropertyError::new(name, m))?,
                Value::Null
                | Value::Bool(_)
                | Value::Number(_)
                | Value::Array(_)
                | Value::Object(_) => {
                    if field.kind != PropertyKind::Text {
                        return Err(PropertyError::new(name, "must be text"));
                    }
                }
            }
        }
        if let Some(missing) = spec
            .properties
            .iter()
            .find(|p| p.required && !fields.contains_key(p.name))
        {
            return Err(PropertyError::new(
                missing.name,
                format!("is required by automator '{}'", spec.name),
            ));
        }
        Ok(())
    }

    /// Runs one attempt; `redact` masks the run's secrets in what is kept.
    pub async fn run(
        &self,
        call: ActionCall<'_>,
        redact: &(dyn Fn(&str) -> String + Sync),
    ) -> Result<RunResult, CallError> {
        let home = self.home(call.work_dir);
        let none = ebb_spi::Properties::new();
        let labels = ebb_spi::Tags::new();
        let mut request = Request::new(Method::Run);
        request.context = Some(ContextMessage {
            properties: &none,
            work_dir: home.join("work").display().to_string(),
            labels: &labels,
            deadline: None,
        });
        request.action = Some(call.action);
        request.node = Some(call.node);
        request.cluster = Some(call.cluster);
        // The plugin is told a little less than the attempt's limit, so that one that stops
        // its own tool on time can say what it saw before ebb kills it.
        let told = call.timeout.saturating_sub(Duration::from_secs(3));
        request.timeout = Some(told.as_secs().max(1));
        let value = self
            .pool
            .call_within(request, &home, redact, call.timeout)
            .await?;
        let mut result: RunResult = serde_json::from_value(value).map_err(|e| {
            CallError::Broken(format!("answered run with what is not its result: {e}"))
        })?;
        let bounded = result.facts.len() <= crate::protocol::MAX_ENTRIES
            && result.facts.iter().all(|(k, v)| {
                !k.is_empty() && k.len() <= 256 && v.len() <= crate::protocol::MAX_VALUE
            });
        if !bounded {
            return Err(CallError::Broken(format!(
                "answered run with more than {} facts, or a fact out of bounds",
                crate::protocol::MAX_ENTRIES
            )));
        }
        result.output = redact(&result.output);
        Ok(result)
    }
}
