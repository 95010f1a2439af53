//! The checks of a live cluster's services, for its run's supervisor.
//!
//! While the cluster is PROVISIONED or WAITING, each service with a `check` action is checked
//! on every node it runs on, every `checkInterval`. A check runs beside the others, under its
//! own time limit: one that hangs is killed at its limit and says `unknown`, and holds up
//! nothing else. What a check finds goes through the one transition function
//! ([`rules::service`](crate::rules::service)); a change of state is written with an event in
//! the run's history. No check starts while a cluster operation runs, and the finding of one
//! that began before an operation started is set aside: an operation's actions say more than a
//! check that looked before them.
//!
//! The schedule is the supervisor's, in memory: a cluster the supervisor just made is first
//! checked an interval after it is live (its services' starts just said they run); after a
//! restart every check is due at once,
//! so a restarted server looks at the whole cluster again before anything else.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use super::automator;
use super::deps::Deps;
use super::on_node::On;
use crate::model::event::EventKind;
use crate::model::operation::OperationRecord;
use crate::model::plan::{NodeRecord, ResourceStatus};
use crate::model::service::{CheckOutcome, ServiceRecord, ServiceState};
use crate::model::template::{HealPolicy, Template};
use crate::rules::service::{Happened, next};
use crate::store::clock::now_millis;
use crate::store::{Read, StoreError, Table, audit, events, keys};
use ebb_spi::resource::{HEAL, HEAL_ATTEMPTS, HEAL_WINDOW};

/// How often the supervisor looks for checks that are due.
pub const TICK: Duration = Duration::from_secs(1);

/// A service on a node.
pub type Placed = (String, String);

/// The most checks of one run's services running at once; the others wait their turn, the
/// longest overdue first.
pub const MAX_RUNNING_PER_RUN: usize = 16;

/// The most checks running at once on one server, over all its runs (each check is a
/// process here or a connection to a node).
pub const MAX_RUNNING_ON_SERVER: usize = 64;

/// The most checks of one namespace's runs running at once on one server: one tenant's hung
/// checks wait in its own lane and leave the others' checks (and healing) room.
pub const MAX_RUNNING_PER_NAMESPACE: usize = 16;

/// When each check is due, and which are running.
#[derive(Debug, Default)]
pub struct Checks {
    due: BTreeMap<Placed, u64>,
    running: BTreeSet<Placed>,
    /// Counts the cluster operations started: a check begun before one is set aside.
    pub epoch: u64,
    /// The run's provisioner context with its secure references resolved, once read.
    pub context: Option<Arc<ebb_spi::Context>>,
    /// The services whose healing stopped at its limit, and when it was said.
    pub exhausted: BTreeMap<Placed, u64>,
    /// Set while the context is being resolved.
    pub resolving: bool,
    /// Set when this supervisor made the cluster: its services just started, so each check
    /// is first due an interval after the cluster is live rather than at once (a restart of
    /// the server, a failover or a reused cluster checks at once).
    pub just_made: bool,
}

/// A check to run.
#[derive(Debug, Clone)]
pub struct Job {
    /// The run's namespace, whose share of the server's checks this one takes.
    pub namespace: String,
    pub run: String,
    /// The cluster's id, which its records are kept under (the run that made it).
    pub cluster: String,
    pub node: String,
    pub service: String,
    pub script: String,
    pub timeout: Duration,
    pub epoch: u64,
    pub context: Arc<ebb_spi::Context>,
    pub config: serde_json::Value,
    pub layout: BTreeMap<String, BTreeSet<String>>,
    /// Set when the service heals by replacing its node: the check first asks the run's
    /// provisioner whether the node's resource is still there.
    pub provisioner: Option<Arc<dyn ebb_spi::Provisioner>>,
}

impl Checks {
    /// Forgets the schedule: the cluster is no longer live.
    pub fn clear(&mut self) {
        self.due.clear();
        self.just_made = false;
    }

    /// The checks due at `now_ms` on the cluster of `layout` (nodes in `nodes`), marked as
    /// running and next due an interval later: the longest overdue first, as many as keep
    /// [`MAX_RUNNING_PER_RUN`]. A check still running is not started again; one left over stays
    /// due.
    pub fn due(
        &mut self,
        template: &Template,
        nodes: &[String],
        layout: &BTreeMap<String, BTreeSet<String>>,
        now_ms: u64,
    ) -> Vec<(Placed, String, Duration)> {
        let mut ready = Vec::new();
        let mut present = BTreeSet::new();
        for node in nodes {
            for service in layout.get(node).into_iter().flatten() {
                let Some((script, interval, timeout)) = template
                    .services
                    .get(service)
                    .and_then(|s| s.check())
                    .map(|(script, i, t)| (script.to_string(), i, t))
                else {
                    continue;
                };
                let at = (node.clone(), service.clone());
                present.insert(at.clone());
                let first = match self.just_made {
                    true => now_ms.saturating_add(u64::try_from(interval.as_millis()).unwrap_or(0)),
                    false => now_ms,
                };
                let due = *self.due.entry(at.clone()).or_insert(first);
                if due > now_ms || self.running.contains(&at) {
                    continue;
                }
                ready.push((due, at, script, interval, timeout));
            }
        }
        // Services no longer on the cluster (a shrink) are not checked again.
        self.due.retain(|k, _| present.contains(k));
        ready.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let room = MAX_RUNNING_PER_RUN.saturating_sub(self.running.len());
        let mut out = Vec::new();
        for (_, at, script, interval, timeout) in ready.into_iter().take(room) {
            let interval_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
            self.due
                .insert(at.clone(), now_ms.saturating_add(interval_ms));
            self.running.insert(at.clone());
            out.push((at, script, timeout));
        }
        out
    }

    /// The job for a check of `at` that [`Checks::due`] gave; with `provisioner`, it also
    /// looks for the node's resource.
    pub fn job(
        &self,
        (namespace, run, cluster): (&str, &str, &str),
        (at, script, timeout): (Placed, String, Duration),
        context: Arc<ebb_spi::Context>,
        config: &serde_json::Value,
        layout: &BTreeMap<String, BTreeSet<String>>,
        provisioner: Option<Arc<dyn ebb_spi::Provisioner>>,
    ) -> Job {
        Job {
            namespace: namespace.to_string(),
            run: run.to_string(),
            cluster: cluster.to_string(),
            node: at.0,
            service: at.1,
            script,
            timeout,
            epoch: self.epoch,
            context,
            config: config.clone(),
            layout: layout.clone(),
            provisioner,
        }
    }

    /// The check of `at` ended.
    pub fn ended(&mut self, at: &Placed) {
        self.running.remove(at);
    }

    /// The checks under way.
    pub fn running(&self) -> impl Iterator<Item = &Placed> {
        self.running.iter()
    }
}

/// What one check found, and how it ended in words.
#[derive(Debug, Clone)]
pub struct Finding {
    pub outcome: CheckOutcome,
    pub detail: String,
    /// The node's resource is gone: the provider no longer has it.
    pub gone: bool,
}

/// Runs `job`'s check to its end or its time limit (then its processes are killed); first,
/// for a service healed by replacing its node, asks the provider whether the node is there.
pub async fn run(deps: &Deps, job: &Job) -> Finding {
    // Waiting for a turn is not the check's time: its limit starts when it does.
    let _turn = deps.check_slots.turn(&job.namespace).await;
    let finding = look(deps, job).await;
    let outcome = serde_json::to_value(finding.outcome)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    metrics::counter!(crate::model::metrics::SERVICE_CHECKS.name, "outcome" => outcome)
        .increment(1);
    finding
}

/// [`run`], unrecorded.
async fn look(deps: &Deps, job: &Job) -> Finding {
    if let Some(provisioner) = &job.provisioner {
        let looked = tokio::time::timeout(job.timeout, resource_gone(deps, job, &**provisioner));
        // There, or nobody knows yet (the provider did not answer): the script looks.
        if let Ok(Some(id)) = looked.await {
            return Finding {
                outcome: CheckOutcome::Down,
                detail: format!("its node's resource {id} is gone"),
                gone: true,
            };
        }
    }
    run_script(deps, job).await
}

/// The id of `job`'s node's resource if the provider says it is gone; `None` if it is there
/// or cannot be told.
async fn resource_gone(
    deps: &Deps,
    job: &Job,
    provisioner: &dyn ebb_spi::Provisioner,
) -> Option<String> {
    let key = keys::node(&job.cluster, &job.node);
    let record = deps
        .store
        .read(move |r| r.get::<NodeRecord>(Table::Resources, &key))
        .await
        .ok()??;
    // Only a node that was up can be found gone; one on its way up or down is an operation's.
    if record.status != ResourceStatus::Created {
        return None;
    }
    let id = record.id?;
    match provisioner.describe(&job.context, &id).await {
        Ok(None) => Some(id),
        Ok(Some(_)) | Err(_) => None,
    }
}

/// Runs `job`'s script.
async fn run_script(deps: &Deps, job: &Job) -> Finding {
    let on = On {
        run: &job.run,
        cluster: &job.cluster,
        node: &job.node,
        context: &job.context,
        config: &job.config,
        layout: &job.layout,
        check: true,
    };
    let ended = tokio::time::timeout(
        job.timeout,
        automator::check(deps, &on, &job.service, &job.script),
    )
    .await;
    match ended {
        Err(_) => Finding {
            outcome: CheckOutcome::Unknown,
            detail: format!(
                "its check did not end within {}",
                humantime::format_duration(job.timeout)
            ),
            gone: false,
        },
        Ok(Err(why)) => Finding {
            outcome: CheckOutcome::Unknown,
            detail: format!("its check could not run: {why}"),
            gone: false,
        },
        Ok(Ok(ended)) => Finding {
            outcome: CheckOutcome::of_exit(ended.code),
            detail: format!("its check {}", ended.status),
            gone: false,
        },
    }
}

/// What recording a finding did.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The state before and after; `None` after: the service is not on the node any more.
    pub before: Option<ServiceState>,
    pub after: Option<ServiceState>,
    /// The service is down or failed and no operation put it there on purpose.
    pub wants_heal: bool,
}

/// Records what a check of `service` on `node` found: the new state and, if it changed, an
/// event. The caller checks the service is still on the node.
pub async fn record(
    deps: &Deps,
    (run, cluster): (&str, &str),
    node: &str,
    service: &str,
    finding: Finding,
) -> Result<Recorded, StoreError> {
    let (run_id, node, service) = (run.to_string(), node.to_string(), service.to_string());
    let cluster = cluster.to_string();
    let recorded = deps
        .store
        .write(move |tx| {
            let key = keys::service(&cluster, &node, &service);
            // A service no action has set yet (it has only a check) gets its first state.
            let before = tx.get::<ServiceRecord>(Table::Services, &key)?;
            let state_before = before.as_ref().map(|b| b.state);
            let after = next(state_before, Happened::Checked(finding.outcome));
            let wants = before
                .as_ref()
                .is_some_and(|b| crate::rules::service::wants_heal(b.state, b.found, after));
            if let Some(state) = after
                && Some(state) != state_before
            {
                tx.put(
                    Table::Services,
                    &key,
                    &ServiceRecord {
                        node: node.clone(),
                        service: service.clone(),
                        state,
                        since_ms: now_millis(),
                        reason: finding.detail.clone(),
                        found: true,
                    },
                )?;
                events::append(
                    tx,
                    &run_id,
                    EventKind::Service,
                    Some(&node),
                    format!("{service} is {state}: {}", finding.detail),
                )?;
            }
            Ok::<_, StoreError>(Recorded {
                before: state_before,
                after,
                wants_heal: wants,
            })
        })
        .await?;
    deps.notifier.notify(run);
    Ok(recorded)
}

/// The heal operations of `service` on `node` in `run`'s audit log, by start (epoch ms).
pub async fn heals(
    deps: &Deps,
    run: &str,
    node: &str,
    service: &str,
) -> Result<Vec<u64>, StoreError> {
    let (run, node, service) = (run.to_string(), node.to_string(), service.to_string());
    deps.store
        .read(move |r| {
            let ops: Vec<OperationRecord> = audit::operations(r, &run)?;
            Ok(ops
                .iter()
                .filter(|o| o.rollback_of.is_none())
                .filter(|o| {
                    let t = &o.request["trigger"];
                    t["node"] == node.as_str() && t["service"] == service.as_str()
                })
                .map(|o| (o.created * 1000.0) as u64)
                .collect())
        })
        .await
}

/// Writes an event in `run`'s history.
pub async fn note(deps: &Deps, run: &str, node: &str, message: String) -> Result<(), StoreError> {
    let (run_id, node) = (run.to_string(), node.to_string());
    deps.store
        .write(move |tx| {
            events::append(
                tx,
                &run_id,
                EventKind::Service,
                Some(&node),
                message.clone(),
            )
        })
        .await?;
    deps.notifier.notify(run);
    Ok(())
}

/// The healing of `service` in `template`, as the run's profile properties (`heal`,
/// `healAttempts`, `healWindow`, already validated) override it.
pub fn policy(
    template: Option<&Template>,
    service: &str,
    properties: &ebb_spi::Properties,
) -> Option<HealPolicy> {
    let mut policy = template?.services.get(service)?.heal_policy();
    let property = |p: &ebb_spi::PropertySpec| properties.get(p.name).map(String::as_str);
    if let Some(heal) = property(&HEAL)
        .and_then(|h| serde_json::from_value(serde_json::Value::String(h.to_string())).ok())
    {
        policy.heal = heal;
    }
    if let Some(n) = property(&HEAL_ATTEMPTS).and_then(|n| n.parse().ok()) {
        policy.attempts = n;
    }
    if let Some(window) = property(&HEAL_WINDOW).and_then(|w| ebb_spi::parse_duration(w).ok()) {
        policy.window = window;
    }
    Some(policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's checks start at most [`MAX_RUNNING_PER_RUN`] at a time, the longest overdue
    /// first; the ones left over stay due and go next, before any that ran comes round again.
    #[test]
    fn a_big_cluster_checks_a_few_at_a_time_the_longest_overdue_first() {
        let template: Template = serde_json::from_value(serde_json::json!({
            "services": {"zk": {"checkInterval": "1s", "actions": {
                "check": {"type": "shell", "script": "true"}}}}
        }))
        .expect("template");
        template.validate().expect("valid");
        let nodes: Vec<String> = (0..40).map(|i| format!("n{i:02}")).collect();
        let layout: BTreeMap<String, BTreeSet<String>> = nodes
            .iter()
            .map(|n| (n.clone(), ["zk".to_string()].into()))
            .collect();
        let mut checks = Checks::default();
        let first = checks.due(&template, &nodes, &layout, 1_000);
        assert_eq!(first.len(), MAX_RUNNING_PER_RUN);
        // Full: nothing more starts, however late it gets.
        assert!(checks.due(&template, &nodes, &layout, 60_000).is_empty());
        // Four end: four of the 24 that never ran take their places, not those four.
        for (at, _, _) in &first[..4] {
            checks.ended(at);
        }
        let next = checks.due(&template, &nodes, &layout, 60_000);
        assert_eq!(next.len(), 4);
        let ran: BTreeSet<&Placed> = first.iter().map(|(at, _, _)| at).collect();
        assert!(next.iter().all(|(at, _, _)| !ran.contains(at)), "{next:?}");
        // Every node is checked in turn, while 12 of the first stay running.
        for (at, _, _) in &next {
            checks.ended(at);
        }
        let mut seen: BTreeSet<Placed> = first.iter().chain(&next).map(|c| c.0.clone()).collect();
        let mut now = 60_000;
        while seen.len() < nodes.len() {
            now += 1_000;
            let started = checks.due(&template, &nodes, &layout, now);
            assert!(started.len() <= MAX_RUNNING_PER_RUN);
            for (at, _, _) in started {
                checks.ended(&at);
                seen.insert(at);
            }
            assert!(now < 200_000, "some node is never checked: {seen:?}");
        }
    }
}
