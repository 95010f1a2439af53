//! The health of a run's live cluster, as its supervisor keeps it: when the checks tick,
//! which checks start, which findings still count, and what a finding that wants a heal
//! leads to.
//!
//! The supervisor owns one [`Health`] and spawns what it asks for (a check, the resolution of
//! the checks' secure context, the heal operation); this component keeps the bookkeeping (the
//! schedule, the epoch that sets aside a check begun before an operation, the limits already
//! said) and decides with `rules::service`. It writes nothing itself: `checker` records what a
//! check found.

use std::collections::BTreeSet;
use std::sync::Arc;

use actix::prelude::*;

use super::checker::{self, Checks, Finding, Job, Placed, Recorded};
use crate::model::access::Act;
use crate::model::run::{ClusterStatus, RunRecord};
use crate::model::service::CheckOutcome;
use crate::model::template::{Heal, HealPolicy};
use crate::rules::resize::{self, Change};
use crate::rules::service::{self as rule, Found, HealDecision};

/// How long a heal asked for holds other findings back if it never starts (it was refused):
/// an ask is answered in milliseconds.
const HEAL_ASK_HOLDS_MS: u64 = 5_000;

/// The checks of one run's cluster and their ticker.
#[derive(Debug, Default)]
pub struct Health {
    checks: Checks,
    ticker: Option<SpawnHandle>,
    /// When (epoch ms) a heal operation was asked for that has not started yet: findings
    /// decided meanwhile wait for it, as they wait for any operation (checks ending in one
    /// tick, a scheduler's and those of the workers that lost it, would each ask, and all but
    /// one be refused). A refused ask stops holding them after [`HEAL_ASK_HOLDS_MS`].
    heal_asked: Option<u64>,
    /// The services the last counted check of found down: a finding of a service that needs
    /// one of them waits for that one's heal.
    found_down: BTreeSet<Placed>,
    /// Findings that want a heal, held until the check of a service they need has ended.
    held: Vec<Held>,
}

/// A finding that wants a heal, as recorded, with the check that found it.
pub type Held = (Job, Finding, Recorded);

/// What the checks need before any starts.
#[derive(Debug)]
pub enum Due {
    /// These checks start now.
    Jobs(Vec<Job>),
    /// The run's secure references must be resolved first (a node reached over SSH needs its
    /// key): start resolving.
    Resolve,
    /// Nothing to start (nothing is due, or the context is being resolved).
    Nothing,
}

/// What a finding that wants a heal leads to.
#[derive(Debug)]
pub enum Healing {
    Nothing,
    /// Say this in the run's history (the limit is reached).
    Note(String),
    /// Ask the supervisor for this operation.
    Operation(Box<HealOp>),
}

/// A heal operation to ask for, and how to say what came of it.
#[derive(Debug)]
pub struct HealOp {
    pub change: Change,
    pub act: Act,
    service: String,
    /// What the operation does, with `{id}` for its id.
    how: String,
    n: u32,
    policy: HealPolicy,
}

impl HealOp {
    /// The history's words for the operation's start (`Ok(id)`) or its refusal.
    pub fn said(&self, started: Result<u32, String>) -> String {
        match started {
            Ok(id) => format!(
                "healing {}: {} (heal {} of {} in {})",
                self.service,
                self.how.replace("{id}", &id.to_string()),
                self.n,
                self.policy.attempts,
                humantime::format_duration(self.policy.window)
            ),
            Err(e) => format!("cannot heal {}: {e}", self.service),
        }
    }
}

impl Health {
    /// Whether `run`'s cluster is live and has a service with a check.
    fn wanted(run: &RunRecord) -> bool {
        let live = matches!(
            run.cluster.status,
            Some(ClusterStatus::Provisioned | ClusterStatus::Waiting)
        );
        live && run.template.as_ref().is_some_and(|t| {
            run.layout
                .values()
                .flatten()
                .any(|s| t.services.get(s).is_some_and(|s| s.check().is_some()))
        })
    }

    /// Starts the ticker (calling `tick` every [`checker::TICK`]) while `run`'s cluster is
    /// live and checked, and stops it, forgetting the schedule, when it is no longer.
    pub fn arm<A>(
        &mut self,
        run: &RunRecord,
        ctx: &mut Context<A>,
        tick: fn(&mut A, &mut Context<A>),
    ) where
        A: Actor<Context = Context<A>>,
    {
        match (Self::wanted(run), self.ticker.is_some()) {
            (true, false) => self.ticker = Some(ctx.run_interval(checker::TICK, tick)),
            (false, true) => {
                if let Some(handle) = self.ticker.take() {
                    ctx.cancel_future(handle);
                }
                self.checks.clear();
            }
            (true, true) | (false, false) => {}
        }
    }

    /// An operation starts: a check that looked before it says nothing after it.
    pub fn operation_started(&mut self) {
        self.checks.epoch += 1;
        self.heal_asked = None;
        self.found_down.clear();
        self.held.clear();
    }

    /// Whether a finding decided at `now_ms` waits: an operation runs (`busy`), or a heal was
    /// asked for and has not started yet. The checks after it say what is still wrong.
    pub fn waits(&self, busy: bool, now_ms: u64) -> bool {
        busy || self
            .heal_asked
            .is_some_and(|at| now_ms < at.saturating_add(HEAL_ASK_HOLDS_MS))
    }

    /// The run makes its cluster: its checks first come an interval after it is live.
    pub fn making_cluster(&mut self) {
        self.checks.just_made = true;
    }

    /// The checks of `run` due at `now_ms`; `provisioner` is the run's, which a check of a
    /// service that heals by replacing its node uses to look for the node's resource.
    pub fn due(
        &mut self,
        run: &RunRecord,
        provisioner: Option<&Arc<dyn ebb_spi::Provisioner>>,
        now_ms: u64,
    ) -> Due {
        let Some(template) = run.template.as_ref() else {
            return Due::Nothing;
        };
        let Some(context) = self.checks.context.clone() else {
            if self.checks.resolving {
                return Due::Nothing;
            }
            self.checks.resolving = true;
            return Due::Resolve;
        };
        let due = self
            .checks
            .due(template, &run.cluster.nodes, &run.layout, now_ms);
        let (config, properties) = (run.config(), run.properties());
        let jobs = due
            .into_iter()
            .map(|check| {
                let replaces = checker::policy(Some(template), &check.0.1, &properties)
                    .is_some_and(|p| p.heal == Heal::ReplaceNode);
                self.checks.job(
                    (&run.key.namespace, &run.key.run, run.cluster_id()),
                    check,
                    Arc::clone(&context),
                    &config,
                    &run.layout,
                    provisioner.cloned().filter(|_| replaces),
                )
            })
            .collect();
        Due::Jobs(jobs)
    }

    /// The checks' secure context is resolved (`None`: it could not be; the next tick tries
    /// again).
    pub fn resolved(&mut self, context: Option<Arc<ebb_spi::Context>>) {
        self.checks.resolving = false;
        if context.is_some() {
            self.checks.context = context;
        }
    }

    /// A check ended: whether its finding still counts for `run` (no operation started since
    /// it began, none runs now (`busy`), the checks still tick, and the service is still on
    /// its node).
    pub fn ended(&mut self, job: &Job, finding: &Finding, run: &RunRecord, busy: bool) -> bool {
        let at = (job.node.clone(), job.service.clone());
        self.checks.ended(&at);
        let still_there = run
            .layout
            .get(&job.node)
            .is_some_and(|s| s.contains(&job.service));
        let counts =
            job.epoch == self.checks.epoch && !busy && self.ticker.is_some() && still_there;
        if counts && finding.outcome == CheckOutcome::Down {
            self.found_down.insert(at);
        } else {
            self.found_down.remove(&at);
        }
        counts
    }

    /// Whether a finding of `job`'s service that wants a heal waits for a service it needs at
    /// run time (directly or through others): one found down, whose heal restarts `job`'s
    /// service too (the finding is dropped; the checks after that heal say what is still
    /// wrong), or one whose check is under way (the finding is held, and decided again by
    /// [`Health::released`] when that check has ended).
    pub fn hold(&mut self, run: &RunRecord, held: Held) -> Option<Held> {
        let Some(template) = run.template.as_ref() else {
            return Some(held);
        };
        let job = &held.0;
        let down = others(self.found_down.iter(), job);
        if let Some(root) = rule::unsettled_requirement(template, &job.service, &down) {
            tracing::debug!(run.id = %job.run, service = %job.service, waits_for = %root, "a heal waits for the heal of what it needs");
            return None;
        }
        let checking = others(self.checks.running(), job);
        if let Some(root) = rule::unsettled_requirement(template, &job.service, &checking) {
            tracing::debug!(run.id = %job.run, service = %job.service, waits_for = %root, "a heal waits for the check of what it needs");
            self.held.push(held);
            return None;
        }
        Some(held)
    }

    /// The findings held while a check ran, to decide again now that a check has ended
    /// (one held for a check still under way is held again); those from before an operation
    /// started are dropped.
    pub fn released(&mut self) -> Vec<Held> {
        let epoch = self.checks.epoch;
        std::mem::take(&mut self.held)
            .into_iter()
            .filter(|(job, ..)| job.epoch == epoch)
            .collect()
    }

    /// The heal policy of the service a recorded finding wants healed, if it heals at all.
    pub fn policy(run: &RunRecord, job: &Job) -> Option<HealPolicy> {
        checker::policy(run.template.as_ref(), &job.service, &run.properties())
            .filter(|p| p.heal != Heal::None)
    }

    /// What `finding`, recorded as `recorded`, leads to under `policy`, after heals begun at
    /// `past` (epoch ms), at `now_ms`.
    #[allow(clippy::too_many_arguments)]
    pub fn heal(
        &mut self,
        run: &RunRecord,
        job: &Job,
        finding: &Finding,
        recorded: &Recorded,
        policy: HealPolicy,
        past: &[u64],
        now_ms: u64,
    ) -> Healing {
        let at = (job.node.clone(), job.service.clone());
        let state = recorded.after.map(|s| s.to_string()).unwrap_or_default();
        let found = Found {
            node: &job.node,
            service: &job.service,
            state: &state,
            detail: &finding.detail,
            gone: finding.gone,
        };
        let said = self.checks.exhausted.get(&at).copied();
        match rule::decide_heal(&policy, past, &found, said, now_ms) {
            HealDecision::Nothing => Healing::Nothing,
            HealDecision::Exhausted { attempts } => {
                self.checks.exhausted.insert(at, now_ms);
                metrics::counter!(crate::model::metrics::HEALS.name, "heal" => "exhausted")
                    .increment(1);
                Healing::Note(format!(
                    "{} stays {state}: healing stopped at its limit of {attempts} heal(s) in {}",
                    job.service,
                    humantime::format_duration(policy.window)
                ))
            }
            HealDecision::Heal { n, replace } => {
                self.checks.exhausted.remove(&at);
                self.heal_asked = Some(now_ms);
                let trigger = rule::heal_trigger(&policy, &found, n, replace);
                let kind = if replace { "replace-node" } else { "restart" };
                metrics::counter!(crate::model::metrics::HEALS.name, "heal" => kind).increment(1);
                let (change, how) = if replace {
                    (
                        resize::heal_replace(run, &job.node, trigger),
                        format!("operation {{id}} replaces node {}", job.node),
                    )
                } else {
                    (
                        resize::heal_restart(run, &job.node, &job.service, trigger),
                        "operation {id} restarts it with its dependent chain".to_string(),
                    )
                };
                let act = Act {
                    namespace: Some(run.key.namespace.clone()),
                    ..Act::by_server("run.heal", &run.key.run)
                };
                Healing::Operation(Box::new(HealOp {
                    change,
                    act,
                    service: job.service.clone(),
                    how,
                    n,
                    policy,
                }))
            }
        }
    }
}

/// The services of `set` but `job`'s own.
fn others<'a>(set: impl Iterator<Item = &'a Placed>, job: &Job) -> BTreeSet<&'a str> {
    set.filter(|(node, service)| *node != job.node || *service != job.service)
        .map(|(_, service)| service.as_str())
        .collect()
}
