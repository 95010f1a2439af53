//! The limits a start meets: who may run what on the server's host, a program's
//! `maxConcurrentRuns`, and the namespace's quota and monthly budget.

use crate::model::access::{Trust, runs_on_host};
use crate::model::namespace::{Namespace, Usage};
use crate::model::run::{RunError, RunRecord};
use crate::rules::host;
use crate::rules::queue::Hold;
use crate::service::catalog;
use crate::service::error::ServiceError;
use crate::store::keys;
use crate::store::{Read, Table, Txn};

/// The authors of what a run resolved to, and their names for a refusal.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Authors {
    pub(super) profile: Trust,
    pub(super) profile_id: crate::model::profile::ProfileId,
    /// The template's reference and its author.
    pub(super) template: Option<(String, Trust)>,
    /// The template has actions an automator plugin runs: code from it runs on the server's
    /// host (in the plugin's process) whatever the provisioner.
    pub(super) template_on_host: bool,
}

/// Why run `run` may not start now, if it may not, and whether waiting would help: a part
/// of it that may not run on the server's host, its program's concurrency limit, or its
/// namespace's quota. Each check reads only what it needs (a scan makes the write conflict
/// with every other start and end it covers: on etcd, a retry each).
pub(super) fn refusal(
    tx: &Txn,
    namespace: &Namespace,
    run: &RunRecord,
    authors: &Authors,
    (max_concurrent_runs, taken): (Option<u32>, Option<&RunRecord>),
) -> Result<Option<(RunError, Hold)>, ServiceError> {
    let key = &run.key;
    let properties = run.properties();
    if let Some(by) = template_host_refusal(namespace, authors) {
        let name = authors.template.as_ref().map_or("", |(n, _)| n.as_str());
        let refusal = RunError::HostPrograms {
            namespace: key.namespace.clone(),
            part: format!("template '{name}' (its actions run by an automator plugin)"),
            written_by: Some(by),
            profile: format!("{}, provisioner {}", run.profile, run.provisioner),
            run: key.run.clone(),
        };
        return Ok(Some((refusal, Hold::Never)));
    }
    if runs_on_host(&run.provisioner, &properties) {
        let app = catalog::require_app(tx, &key.namespace, &key.app)?;
        let host = host::HostRun {
            namespace_allows: namespace.allow_host_programs,
            app_approved: app.host_programs,
            profile: authors.profile,
            template: authors.template.as_ref().map(|(_, t)| *t),
        };
        if let Some(part) = host::refusal(&host) {
            let (part, written_by) = match part {
                host::HostPart::App => (format!("app '{}'", key.app), None),
                host::HostPart::Profile(by) => (authors.profile_id.to_string(), Some(by)),
                host::HostPart::Template(by) => {
                    let name = authors.template.as_ref().map_or("", |(n, _)| n.as_str());
                    (format!("template '{name}'"), Some(by))
                }
            };
            let refusal = RunError::HostPrograms {
                namespace: key.namespace.clone(),
                part,
                written_by,
                profile: format!("{}, provisioner {}", run.profile, run.provisioner),
                run: key.run.clone(),
            };
            return Ok(Some((refusal, Hold::Never)));
        }
    }
    limit_hold(tx, namespace, run, (max_concurrent_runs, taken))
}

/// Who wrote a template whose automator-plugin actions may not run on the server's host, if
/// that is the case: a plugin runs a template's code in its process, on this host (an
/// Ansible playbook's lookups and local tasks run on its controller), so such a template must
/// come from an instance admin, as a host program's must, unless the namespace allows host
/// programs.
pub(super) fn template_host_refusal(namespace: &Namespace, authors: &Authors) -> Option<Trust> {
    if !authors.template_on_host {
        return None;
    }
    let written_by = authors.template.as_ref().map(|(_, t)| *t)?;
    match host::refusal(&host::HostRun {
        namespace_allows: namespace.allow_host_programs,
        app_approved: true,
        profile: Trust::InstanceAdmin,
        template: Some(written_by),
    }) {
        Some(host::HostPart::Template(by)) => Some(by),
        Some(host::HostPart::App | host::HostPart::Profile(_)) | None => None,
    }
}

/// Which limit holds run `run` back now, if one does: its program's `maxConcurrentRuns`
/// (`max_concurrent_runs`) or its namespace's quota. IDLE clusters' runs hold nothing; the
/// nodes of the IDLE cluster the run takes over (`taken`) count once, as the run's.
pub(super) fn limit_hold(
    tx: &Txn,
    namespace: &Namespace,
    run: &RunRecord,
    (max_concurrent_runs, taken): (Option<u32>, Option<&RunRecord>),
) -> Result<Option<(RunError, Hold)>, ServiceError> {
    let key = &run.key;
    let active = match max_concurrent_runs {
        Some(_) => tx
            .scan::<serde_json::Value>(
                Table::Active,
                &keys::program_runs(&key.namespace, &key.app, &key.program),
            )?
            .iter()
            .filter(|(_, entry)| !crate::store::idle::is_idle_entry(entry))
            .count(),
        None => 0,
    };
    if let Some(max) = max_concurrent_runs
        && active >= max as usize
    {
        let refusal = RunError::ConcurrencyLimit {
            program: format!("{}/{}/{}", key.namespace, key.app, key.program),
            active,
            run: key.run.clone(),
        };
        return Ok(Some((refusal, Hold::Program)));
    }
    if namespace.quota.limits() {
        let nodes = u32::try_from(run.cluster.nodes.len()).unwrap_or(u32::MAX);
        // A run larger than the namespace allows one run never fits, however long it waits.
        let never = namespace.quota.refuse(Usage::default(), nodes);
        let mut usage = catalog::namespace_usage(tx, &key.namespace)?;
        if let Some(left) = taken {
            let held = u32::try_from(left.cluster.nodes.len()).unwrap_or(u32::MAX);
            usage.live_nodes = usage.live_nodes.saturating_sub(held);
        }
        if let Some(reason) = namespace.quota.refuse(usage, nodes) {
            let refusal = RunError::Quota {
                namespace: key.namespace.clone(),
                reason,
                run: key.run.clone(),
            };
            let hold = if never.is_some() {
                Hold::Never
            } else {
                Hold::Namespace
            };
            return Ok(Some((refusal, hold)));
        }
    }
    if let Some(budget) = &namespace.budget {
        // Read in this same write: a run whose usage ends meanwhile makes it try again.
        let month = crate::rules::usage::month_of(crate::store::clock::now_secs());
        let used = crate::store::usage::month_total(tx, &key.namespace, &month)?;
        let currency = crate::store::usage::prices(tx)?.currency;
        if let Some(reason) = budget.refuse(&used, &currency) {
            let refusal = RunError::Quota {
                namespace: key.namespace.clone(),
                reason,
                run: key.run.clone(),
            };
            return Ok(Some((refusal, Hold::Namespace)));
        }
    }
    Ok(None)
}

/// What a queued run waits on, in words: the limit that `held` it, or the `queued` runs
/// ahead of it.
pub(super) fn waits_on(held: Option<&RunError>, queued: u32) -> String {
    match held.and_then(RunError::limit) {
        Some(limit) => limit,
        None => format!("{queued} run(s) of its namespace are queued ahead of it"),
    }
}
