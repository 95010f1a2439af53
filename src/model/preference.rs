//! Preferences: where in the hierarchy a set of values is kept ([`Scope`]), and where a
//! profile is assigned ([`Assignment`]).

use std::fmt;

use serde::Serialize;

use crate::model::invalid::Invalid;
use crate::model::property::{Level, Values};

/// Longest preference key accepted.
pub const MAX_KEY_LEN: usize = 1024;

/// Where a set of preferences is attached.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    Instance,
    Namespace(String),
    App {
        namespace: String,
        app: String,
    },
    Program {
        namespace: String,
        app: String,
        program_type: String,
        program: String,
    },
}

impl Scope {
    /// The store key of this scope's preferences.
    pub fn key(&self) -> String {
        match self {
            Scope::Instance => "instance".into(),
            Scope::Namespace(ns) => format!("namespace/{ns}"),
            Scope::App { namespace, app } => format!("app/{namespace}/{app}"),
            Scope::Program {
                namespace,
                app,
                program_type,
                program,
            } => format!("program/{namespace}/{app}/{program_type}/{program}"),
        }
    }

    /// Parses a store key made by [`Scope::key`].
    pub fn from_key(key: &str) -> Option<Scope> {
        let parts: Vec<&str> = key.split('/').collect();
        match parts.as_slice() {
            ["instance"] => Some(Scope::Instance),
            ["namespace", ns] => Some(Scope::Namespace(ns.to_string())),
            ["app", ns, app] => Some(Scope::App {
                namespace: ns.to_string(),
                app: app.to_string(),
            }),
            ["program", ns, app, program_type, program] => Some(Scope::Program {
                namespace: ns.to_string(),
                app: app.to_string(),
                program_type: program_type.to_string(),
                program: program.to_string(),
            }),
            _ => None,
        }
    }

    /// The level of the resolution hierarchy this scope feeds.
    pub fn level(&self) -> Level {
        match self {
            Scope::Instance => Level::Instance,
            Scope::Namespace(_) => Level::Namespace,
            Scope::App { .. } => Level::AppPreferences,
            Scope::Program { .. } => Level::Program,
        }
    }

    /// The namespace this scope lives in; `None` for the instance.
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Scope::Instance => None,
            Scope::Namespace(ns)
            | Scope::App { namespace: ns, .. }
            | Scope::Program { namespace: ns, .. } => Some(ns),
        }
    }

    /// This scope and every scope above it, from the instance down.
    pub fn lineage(&self) -> Vec<Scope> {
        let mut out = vec![Scope::Instance];
        if let Some(ns) = self.namespace() {
            out.push(Scope::Namespace(ns.to_string()));
        }
        if let Scope::App { namespace, app } | Scope::Program { namespace, app, .. } = self {
            out.push(Scope::App {
                namespace: namespace.clone(),
                app: app.clone(),
            });
        }
        if let Scope::Program { .. } = self {
            out.push(self.clone());
        }
        out
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Instance => write!(f, "instance preferences"),
            Scope::Namespace(ns) => write!(f, "namespace '{ns}' preferences"),
            Scope::App { namespace, app } => write!(f, "app '{namespace}/{app}' preferences"),
            Scope::Program {
                namespace,
                app,
                program_type,
                program,
            } => write!(
                f,
                "program '{namespace}/{app}/{program_type}/{program}' preferences"
            ),
        }
    }
}

/// One place a profile is assigned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Assignment {
    /// The level of the hierarchy that assigns it.
    pub level: Level,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
}

impl fmt::Display for Assignment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.namespace.as_deref().unwrap_or_default();
        let app = self.app.as_deref().unwrap_or_default();
        match self.level {
            Level::Instance | Level::Runtime => write!(f, "instance preferences"),
            Level::Namespace => write!(f, "namespace '{ns}' preferences"),
            Level::App => write!(f, "app '{ns}/{app}' configuration"),
            Level::AppPreferences => write!(f, "app '{ns}/{app}' preferences"),
            Level::Program => write!(
                f,
                "program '{ns}/{app}/{}' preferences",
                self.program.as_deref().unwrap_or_default()
            ),
            Level::Schedule => write!(
                f,
                "schedule '{ns}/{app}/{}'",
                self.schedule.as_deref().unwrap_or_default()
            ),
        }
    }
}

/// Checks the keys of a set of preferences: none empty, none longer than [`MAX_KEY_LEN`].
pub fn check_keys(values: &Values) -> Result<(), Invalid> {
    for key in values.keys() {
        if key.trim().is_empty() {
            return Err(Invalid::new("preferences", "a key is empty"));
        }
        if key.len() > MAX_KEY_LEN {
            return Err(Invalid::new(
                key.chars().take(40).collect::<String>() + "...",
                format!("keys are at most {MAX_KEY_LEN} bytes"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_lineage_goes_top_down() {
        let program = Scope::Program {
            namespace: "ns".into(),
            app: "a".into(),
            program_type: "workflows".into(),
            program: "p".into(),
        };
        for scope in [
            Scope::Instance,
            Scope::Namespace("ns".into()),
            Scope::App {
                namespace: "ns".into(),
                app: "a".into(),
            },
            program.clone(),
        ] {
            assert_eq!(Scope::from_key(&scope.key()), Some(scope.clone()));
        }
        let levels: Vec<Level> = program.lineage().iter().map(Scope::level).collect();
        assert_eq!(
            levels,
            vec![
                Level::Instance,
                Level::Namespace,
                Level::AppPreferences,
                Level::Program
            ]
        );
        assert_eq!(Scope::from_key("bogus/x"), None);
    }
}
