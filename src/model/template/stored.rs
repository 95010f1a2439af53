//! A template as the store keeps it: its name in a namespace or SYSTEM, its scope and who
//! wrote it (only what instance admins wrote runs its scripts on the server's host).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::Template;
use crate::model::invalid::Invalid;
use crate::model::names;
use crate::model::profile::{SYSTEM_NAMESPACE, Scope};

/// Names a template: a namespace's (USER) or the instance's (SYSTEM, `namespace: None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateId {
    pub namespace: Option<String>,
    pub name: String,
}

impl TemplateId {
    pub fn key(&self) -> String {
        format!(
            "{}/{}",
            self.namespace.as_deref().unwrap_or(SYSTEM_NAMESPACE),
            self.name
        )
    }

    pub fn check(&self) -> Result<(), Invalid> {
        if let Some(ns) = &self.namespace {
            names::check("namespace", ns)?;
        }
        names::check("template name", &self.name)
    }
}

impl fmt::Display for TemplateId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            None => write!(f, "template 'SYSTEM:{}'", self.name),
            Some(ns) => write!(f, "template '{}' in namespace '{ns}'", self.name),
        }
    }
}

/// A template as the store keeps it and the API returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StoredTemplate {
    pub name: String,
    pub scope: Scope,
    #[serde(flatten)]
    pub template: Template,
    pub created: u64,
    pub updated: u64,
    /// Loaded from `profiles/templates/`; cannot be replaced or deleted over the API.
    #[serde(default)]
    pub builtin: bool,
    /// The trust of whoever wrote it last: only what instance admins wrote runs its scripts
    /// on the server's host. A record from before this was kept is taken as a namespace
    /// admin's.
    #[serde(
        rename = "writtenBy",
        default = "crate::model::access::Trust::unrecorded"
    )]
    pub written_by: crate::model::access::Trust,
}

impl StoredTemplate {
    /// Its author's trust: instance admins for a SYSTEM template, whoever wrote a USER one.
    pub fn author(&self) -> crate::model::access::Trust {
        match self.scope {
            Scope::System => crate::model::access::Trust::InstanceAdmin,
            Scope::User => self.written_by,
        }
    }
}
