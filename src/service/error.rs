//! The error type of the service layer (namespaces, profiles, preferences, apps, runs).
//!
//! Each variant is one reason a request is refused or failed; `api::error` maps each to an
//! HTTP status in one table. Messages are short, lower-case, name the entity or field, and
//! end with a hint where the caller can act.

use crate::model::invalid::Invalid;
use crate::model::profile::{ProfileId, ProfileStatus};
use crate::rules::resolve::ResolveError;
use crate::runtime::error::RuntimeError;
use crate::store::StoreError;

/// Why a service call did not succeed. (`Changed`: what a request was checked against changed
/// before it could be recorded; trying again may succeed.)
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error("namespace '{0}' not found")]
    NamespaceNotFound(String),
    #[error("namespace 'default' always exists and cannot be deleted")]
    DefaultNamespace,
    #[error("namespace '{namespace}' still holds {kind} ({}); delete them first", names.join(", "))]
    NamespaceNotEmpty {
        namespace: String,
        kind: &'static str,
        names: Vec<String>,
    },
    #[error("app '{namespace}/{app}' not found")]
    AppNotFound { namespace: String, app: String },
    #[error("program '{program}' not found in app '{namespace}/{app}'")]
    ProgramNotFound {
        namespace: String,
        app: String,
        program: String,
    },
    #[error("app '{namespace}/{app}' has runs that still hold a cluster ({}); stop them or wait until they are deprovisioned", runs.join(", "))]
    AppActive {
        namespace: String,
        app: String,
        runs: Vec<String>,
    },
    #[error("run '{0}' not found")]
    RunNotFound(String),
    #[error("schedule '{0}' not found")]
    ScheduleNotFound(String),
    #[error(
        "Idempotency-Key: this key started run {run} with other runtime arguments; use a new key for a new start"
    )]
    IdempotencyKeyReused { run: String },
    /// A start repeated with its idempotency key, which the first time was refused.
    #[error("{0}")]
    RefusedBefore(String),
    #[error("schedule '{0}' already exists; update it with POST, or delete it first")]
    ScheduleExists(String),
    #[error("schedule '{schedule}' is already {status}")]
    ScheduleStatusUnchanged {
        schedule: String,
        status: crate::model::schedule::ScheduleStatus,
    },
    #[error("namespace '{namespace}' holds {max} schedules, the most it may; delete some first")]
    TooManySchedules { namespace: String, max: usize },
    #[error("token '{token}' signed in too often; try again in {retry_after_secs} s")]
    TooManySignIns {
        token: String,
        retry_after_secs: u64,
    },
    #[error("run '{run}' has no operation {id}")]
    OperationNotFound { run: String, id: String },
    #[error("{profile} is used by active runs ({}); wait until they are deprovisioned", runs.join(", "))]
    ProfileInUse {
        profile: ProfileId,
        runs: Vec<String>,
    },
    #[error(transparent)]
    Run(#[from] crate::model::run::RunError),
    #[error("{0} not found")]
    TemplateNotFound(String),
    #[error("{0} is built in and cannot be changed or deleted; create another template instead")]
    BuiltinTemplate(String),
    #[error("provisioner '{0}' not found")]
    ProvisionerNotFound(String),
    #[error("server '{0}' is not up")]
    ServerNotFound(String),
    #[error("{0} not found")]
    ProfileNotFound(ProfileId),
    #[error("{0} is built in and cannot be changed or deleted; create another profile instead")]
    BuiltinProfile(ProfileId),
    #[error("{0} is the instance default and cannot be disabled")]
    NativeProfile(ProfileId),
    #[error("{profile} is already {status}")]
    ProfileStatusUnchanged {
        profile: ProfileId,
        status: ProfileStatus,
    },
    #[error("{0} is enabled; disable it first")]
    ProfileEnabled(ProfileId),
    #[error("{0} is disabled; enable it first")]
    ProfileDisabled(ProfileId),
    #[error("{profile} is still assigned in {}; remove those assignments first", places.join(", "))]
    ProfileAssigned {
        profile: ProfileId,
        places: Vec<String>,
    },
    #[error("secure key '{name}' not found in namespace '{namespace}'")]
    SecureKeyNotFound { namespace: String, name: String },
    #[error("{0}")]
    Changed(String),
    /// An expand that would take the namespace past its quota.
    #[error("namespace '{namespace}' is at its quota: {reason}; the expand was refused")]
    Quota { namespace: String, reason: String },
    #[error("token '{0}' already exists; revoke it first or choose another name")]
    TokenExists(String),
    #[error("token '{0}' not found")]
    TokenNotFound(String),
    /// The caller sees the thing but may not do this to it.
    #[error("{0}")]
    NotAllowed(String),
    /// A bug: a 500, never blamed on the store or the caller.
    #[error("{0}")]
    Internal(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

impl ServiceError {
    /// A bad input value: `field` names it the way the caller wrote it.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ServiceError::Invalid(Invalid::new(field, message))
    }

    /// Work on the blocking pool (solving, planning) that did not finish: it panicked, a bug
    /// (a 500, not the store's 503), said with `what` it was to produce.
    pub fn unfinished(what: &str, e: &tokio::task::JoinError) -> Self {
        tracing::error!(error = %e, work = what, "blocking work did not finish");
        ServiceError::Internal(format!("{what} did not finish: an internal error"))
    }
}
