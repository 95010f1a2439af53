//! RunSupervisor: one actor per live run, the only writer of its run record.
//!
//! Every input (an API command, an operation's end, the program's end, a deadline) becomes a
//! `lifecycle::Event`, applied the one way a run changes ([`transition`]: the pure
//! `lifecycle::on`, then the new record and its history committed in one write); only then
//! does the supervisor carry out the effects: start or cancel a planner, launch or kill the
//! program ([`launch`]), arm the deadline timer. Committing blocks the mailbox (`ctx.wait`),
//! so transitions apply one at a time in order. The cluster operations it starts go through
//! `rules::admission` (one at a time; an admin's waits or is refused); the checks of a live
//! cluster and their heals are its [`Health`]. On start-up a supervisor re-reads nothing but
//! its record and resumes with `lifecycle::resume`.

use crate::model::access::Act;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix::prelude::*;

use super::checker;
use super::deps::Deps;
use super::health::{Due, Healing, Health};
use super::launch;
use super::planner::{self as planner, OpSpec, Planner};
use super::reuse;
use super::transition::{self, Next};
use crate::model::plan::ClusterOperation;
use crate::model::run::{ProgramStatus, RunError, RunRecord};
use crate::rules::admission::{self, Slot};
use crate::rules::lifecycle::{self, Effect, Event, Transition};
use crate::rules::resize::Change;
use crate::runtime::error::RuntimeError;
use crate::store::StoreError;
use crate::store::clock;

/// The longest a deadline timer sleeps before it checks again.
const MAX_TIMER: Duration = Duration::from_secs(24 * 3600);

/// An API command for the run: `Stop`, `Deprovision`, `Extend` or `ForceDeprovision`.
#[derive(Debug, Message)]
#[rtype(result = "Result<RunRecord, RuntimeError>")]
pub struct Command(pub Event, pub Act);

/// How often a due relaunch looks again whether the cluster's operation has ended.
const RELAUNCH_RECHECK: Duration = Duration::from_millis(250);

/// News of the program: from the watcher of attempt `Some(n)` (`Launched`, `LaunchFailed`,
/// `Exited`), or about whichever attempt is current (`None`: a relaunch, a reclaimed master).
/// A watcher's news of an attempt that is over (its program killed after the attempt was
/// lost) is not the current attempt's, and is dropped.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct ProgramNews(Event, Option<u32>);

/// An operation an admin asked for on the run's cluster; answers with the operation's id.
#[derive(Debug, Message)]
#[rtype(result = "Result<u32, RuntimeError>")]
pub struct ClusterCommand(pub Change, pub Act);

/// An operator cancels operation `.0` on the run's cluster.
#[derive(Debug, Message)]
#[rtype(result = "Result<(), RuntimeError>")]
pub struct CancelCommand(pub u32, pub Act);

/// The deadline timer fired.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct Deadline;

/// What the admission rules leave to the caller of [`RunSupervisor::admit`].
#[derive(Debug, PartialEq, Eq)]
enum Admitted {
    Nothing,
    /// Start the admin's operation.
    Start,
    /// Refuse the admin's request, for this reason.
    Refused(String),
}

/// Sent to itself when an operation the admission rules let start could not be.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct NotStarted(ClusterOperation, String);

/// The live supervisors by run id; a supervisor takes itself out when it stops.
#[derive(Debug, Clone, Default)]
pub struct Supervisors(Arc<Mutex<HashMap<String, Addr<RunSupervisor>>>>);

impl Supervisors {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Addr<RunSupervisor>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts run `run`'s supervisor with `start` unless one runs already: the server's
    /// claim round may find a run it owns unsupervised in the instant between the write that
    /// made it the owner (a start, a run leaving the queue) and that write's own spawn, and
    /// a run must never have two.
    pub fn start_once(&self, run: String, start: impl FnOnce() -> Addr<RunSupervisor>) -> bool {
        let mut live = self.lock();
        if live.contains_key(&run) {
            return false;
        }
        live.insert(run, start());
        true
    }

    pub fn get(&self, run: &str) -> Option<Addr<RunSupervisor>> {
        self.lock().get(run).cloned()
    }

    fn forget(&self, run: &str) {
        self.lock().remove(run);
    }

    /// Every supervisor running now.
    pub fn all(&self) -> Vec<Addr<RunSupervisor>> {
        self.lock().values().cloned().collect()
    }
}

/// The actor supervising one run.
#[derive(Debug)]
pub struct RunSupervisor {
    deps: Deps,
    live: Supervisors,
    run: RunRecord,
    planner: Option<Addr<Planner>>,
    timer: Option<SpawnHandle>,
    /// Set while the effects `lifecycle::resume` asked for are performed after a restart.
    resuming: bool,
    /// The cluster operation running and the one waiting, as `rules::admission` keeps them.
    slot: Slot,
    /// What an admin's operation changes once it succeeds.
    pending: Option<Change>,
    /// Transitions on their way to the store.
    committing: u32,
    /// The create or delete a transition just committed recorded, for the planner it starts.
    prepared: Option<(OpSpec, planner::Prepared)>,
    /// The run's span: every log line of its supervisor carries the run's id.
    span: tracing::Span,
    /// The checks of the cluster's services, and what their findings lead to.
    health: Health,
    /// While the cluster is IDLE: whether it is still wanted, looked at every [`IDLE_WATCH`].
    idle_watch: Option<SpawnHandle>,
    /// The watch of the cluster's spot nodes.
    reclaims: crate::runtime::spot::Reclaims,
    /// Lives as long as this supervisor: the fence of the run's program on this host moves on
    /// only while it does.
    owned: std::sync::Arc<()>,
}

/// How often an IDLE cluster's supervisor looks whether it is still wanted.
const IDLE_WATCH: Duration = Duration::from_secs(2);

impl RunSupervisor {
    /// A supervisor for `run`, which takes itself out of `live` when it stops.
    pub fn new(deps: Deps, live: Supervisors, run: RunRecord) -> Self {
        let span = tracing::info_span!(
            "run",
            run.id = %run.key.run,
            namespace = %run.key.namespace,
            app = %run.key.app,
            program = %run.key.program,
        );
        Self {
            deps,
            live,
            span,
            run,
            planner: None,
            timer: None,
            resuming: false,
            slot: Slot::default(),
            pending: None,
            committing: 0,
            prepared: None,
            health: Health::default(),
            idle_watch: None,
            reclaims: crate::runtime::spot::Reclaims::default(),
            owned: std::sync::Arc::new(()),
        }
    }

    /// Applies `event`: transition, commit, then effects. Errors are the command's refusal.
    fn apply(&mut self, event: Event, ctx: &mut Context<Self>) -> Result<(), RunError> {
        let next = transition::next(&self.run, event, &self.deps.member.name, clock::now_secs())?;
        if !next.is_idle(&self.run) {
            self.commit(next, ctx);
        }
        Ok(())
    }

    /// Commits `next` (the mailbox waits for it), then performs its effects.
    ///
    /// The create or delete it starts ([`Self::starts`]) is planned and recorded in the same
    /// write: the planner then begins from what that write recorded ([`Planner::prepared`]),
    /// one write where there were two, one after the other. A crash after that write finds
    /// the operation recorded, as it would once the planner had written it.
    fn commit(&mut self, next: Next, ctx: &mut Context<Self>) {
        let starts = self.starts(&next);
        self.committing += 1;
        let (deps, before) = (self.deps.clone(), self.run.clone());
        ctx.wait(
            async move {
                // Its secure references are resolved first (a read); when they cannot be,
                // the planner started as usual resolves them again and reports why.
                let mut planned = None;
                if let Some(spec) = starts {
                    let (namespace, context) = (spec.namespace.clone(), Arc::clone(&spec.context));
                    if let Ok(Ok(resolved)) =
                        planner::resolve_context(&deps, &namespace, context).await
                    {
                        planned = Some((spec, resolved));
                    }
                }
                let plan = planned.clone();
                let saved = transition::commit_with(&deps, &before, &next, None, move |tx| {
                    plan.as_ref()
                        .map(|(spec, resolved)| planner::prepare_in(tx, spec, Arc::clone(resolved)))
                        .transpose()
                })
                .await;
                let saved = saved.map(|prepared| {
                    planned
                        .zip(prepared)
                        .map(|((spec, _), prepared)| (spec, prepared))
                });
                (saved, next.transition)
            }
            .into_actor(self)
            .map(|(saved, t), act, ctx| {
                act.committing -= 1;
                let saved = saved.map(|prepared| act.prepared = prepared);
                act.after_commit(saved, t, ctx)
            }),
        );
    }

    fn after_commit(
        &mut self,
        saved: Result<(), StoreError>,
        t: Transition,
        ctx: &mut Context<Self>,
    ) {
        if let Err(StoreError::Fenced { .. }) = &saved
            && self.run.cluster.status == Some(crate::model::run::ClusterStatus::Idle)
        {
            tracing::info!(run.id = %self.run.key.run, "its IDLE cluster was taken over by another run");
            ctx.stop();
            return;
        }
        if let Err(e) = saved {
            // The record on disk is the last good state; a restart resumes from it.
            tracing::error!(run.id = %self.run.key.run, error = %e, "cannot persist a run transition; supervisor stops");
            ctx.stop();
            return;
        }
        let _span = self.span.clone().entered();
        if (self.run.status, self.run.cluster.status) != (t.run.status, t.run.cluster.status) {
            tracing::info!(
                program.status = %t.run.status,
                cluster.status = %t.run.cluster.status.map(|c| c.to_string()).unwrap_or_default(),
                "run status"
            );
        }
        self.run = t.run;
        self.perform(&t.effects, ctx);
        if let Some((spec, _)) = self.prepared.take() {
            // Never so: `starts` asks the admission rules the effects then ask.
            tracing::error!(run.id = %self.run.key.run, operation = %spec.operation, "an operation recorded with a transition was not started");
        }
        self.arm_timer(ctx);
        self.arm_checks(ctx);
        self.arm_idle_watch(ctx);
        self.arm_reclaims(ctx);
    }

    fn perform(&mut self, effects: &[Effect], ctx: &mut Context<Self>) {
        for effect in effects {
            match effect {
                Effect::CreateCluster => {
                    self.admit(admission::Event::Lifecycle(ClusterOperation::Create), ctx);
                }
                Effect::DeleteCluster => {
                    self.admit(admission::Event::Lifecycle(ClusterOperation::Delete), ctx);
                }
                Effect::CancelCreate | Effect::CancelDelete => {
                    self.admit(admission::Event::CancelLifecycle, ctx);
                }
                Effect::PrepareCluster => self.prepare(ctx),
                Effect::Launch => self.launch(ctx),
                Effect::Relaunch => {
                    let at = self.run.relaunch_at.unwrap_or(0).saturating_mul(1000);
                    let wait = at.saturating_sub(clock::now_millis());
                    self.relaunch_after(Duration::from_millis(wait), ctx);
                }
                Effect::Kill => {
                    let (deps, run, context) =
                        (self.deps.clone(), self.run.clone(), self.context());
                    actix::spawn(async move { launch::kill(&deps, &run, context).await });
                }
                Effect::Finish => ctx.stop(),
            }
        }
    }

    /// Begins the run: its cluster is made.
    fn begin(&mut self, ctx: &mut Context<Self>) {
        if let Err(e) = self.apply(Event::Begin, ctx) {
            tracing::error!(run.id = %self.run.key.run, error = %e, "cannot begin a run");
        }
    }

    /// Begins the run on an IDLE cluster that matches it, if one can be taken over, else as
    /// any run.
    fn begin_on_idle(&mut self, ctx: &mut Context<Self>) {
        let (deps, run, begun) = (self.deps.clone(), self.run.clone(), clock::now_millis());
        ctx.wait(
            async move { reuse::claim(&deps, &run, begun).await }
                .into_actor(self)
                .map(|claimed, act, ctx| match claimed {
                    Ok(Some(claimed)) => {
                        tracing::info!(run.id = %act.run.key.run, from = %claimed.from, "took an IDLE cluster over");
                        if let Some(left) = act.live.get(&claimed.from) {
                            left.do_send(TakenOver);
                        }
                        act.after_commit(Ok(()), claimed.transition, ctx);
                    }
                    Ok(None) => act.begin(ctx),
                    Err(e) => {
                        tracing::warn!(run.id = %act.run.key.run, error = %e, "cannot look for an IDLE cluster; making one");
                        act.begin(ctx);
                    }
                }),
        );
    }

    /// Makes the cluster the run took over ready for it, then launches the program; a
    /// cluster that cannot be made ready is deprovisioned and the run makes its own.
    fn prepare(&mut self, ctx: &mut Context<Self>) {
        let (deps, run, context) = (self.deps.clone(), self.run.clone(), self.context());
        ctx.spawn(
            async move { reuse::prepare(&deps, &run, context).await }
                .into_actor(self)
                .map(|ready, act, ctx| {
                    let event = match ready {
                        Ok(()) => Event::Provisioned,
                        Err(why) => Event::ReuseFailed(why),
                    };
                    if let Err(e) = act.apply(event, ctx) {
                        tracing::warn!(run.id = %act.run.key.run, error = %e, "a prepared cluster's news does not apply");
                    }
                }),
        );
    }

    /// Launches the next attempt after `wait`, once no operation is changing the cluster (a
    /// reclaimed master being made anew): the attempt runs on the cluster as it will be.
    fn relaunch_after(&mut self, wait: Duration, ctx: &mut Context<Self>) {
        ctx.run_later(wait, |act, ctx| match act.planner {
            Some(_) => act.relaunch_after(RELAUNCH_RECHECK, ctx),
            None => ctx.notify(ProgramNews(Event::Relaunch, None)),
        });
    }

    /// Launches the program (or re-attaches to it after a restart); its news comes back as
    /// events.
    fn launch(&mut self, ctx: &mut Context<Self>) {
        let (deps, run, context, me) = (
            self.deps.clone(),
            self.run.clone(),
            self.context(),
            ctx.address(),
        );
        let attempt = Some(run.attempt());
        let owned = std::sync::Arc::downgrade(&self.owned);
        actix::spawn(async move {
            launch::watch(&deps, &run, context, owned, |e| {
                me.do_send(ProgramNews(e, attempt))
            })
            .await;
        });
    }

    /// While the cluster is IDLE, looks every [`IDLE_WATCH`] whether it is still wanted
    /// (its profile enabled, its pool not over its max), and retires it when it is not.
    fn arm_idle_watch(&mut self, ctx: &mut Context<Self>) {
        let idle = self.run.cluster.status == Some(crate::model::run::ClusterStatus::Idle);
        match (idle, self.idle_watch.is_some()) {
            (true, false) => {
                self.idle_watch = Some(ctx.run_interval(IDLE_WATCH, |act, ctx| {
                    let (deps, run) = (act.deps.clone(), act.run.clone());
                    ctx.spawn(
                        async move { reuse::unwanted(&deps, &run).await }
                            .into_actor(act)
                            .map(|unwanted, act, ctx| match unwanted {
                                Ok(Some(why)) => {
                                    if let Err(e) = act.apply(Event::Retire(why), ctx) {
                                        tracing::warn!(run.id = %act.run.key.run, error = %e, "cannot retire an IDLE cluster");
                                    }
                                }
                                Ok(None) => {}
                                Err(e) => {
                                    tracing::debug!(run.id = %act.run.key.run, error = %e, "cannot tell whether an IDLE cluster is wanted");
                                }
                            }),
                    );
                }));
            }
            (false, true) => {
                if let Some(handle) = self.idle_watch.take() {
                    ctx.cancel_future(handle);
                }
            }
            (true, true) | (false, false) => {}
        }
    }

    /// Starts the checks of the cluster's services while it is live, and ends them when it is
    /// no longer.
    fn arm_checks(&mut self, ctx: &mut Context<Self>) {
        self.health
            .arm(&self.run, ctx, |act, ctx| act.tick_checks(ctx));
    }

    /// Starts the checks that are due, unless an operation runs.
    fn tick_checks(&mut self, ctx: &mut Context<Self>) {
        if self.slot.running.is_some() {
            return;
        }
        let provisioner = self.deps.registry.get(&self.run.provisioner);
        match self.health.due(&self.run, provisioner, clock::now_millis()) {
            Due::Nothing => {}
            Due::Resolve => self.resolve_check_context(ctx),
            Due::Jobs(jobs) => {
                for job in jobs {
                    let deps = self.deps.clone();
                    ctx.spawn(
                        async move {
                            let finding = checker::run(&deps, &job).await;
                            (job, finding)
                        }
                        .into_actor(self)
                        .map(|(job, finding), act, ctx| act.checked(job, finding, ctx)),
                    );
                }
            }
        }
    }

    /// Resolves the secure references of the run's properties once, for its checks (a node
    /// reached over SSH needs its key).
    fn resolve_check_context(&mut self, ctx: &mut Context<Self>) {
        let (deps, namespace, context) = (
            self.deps.clone(),
            self.run.key.namespace.clone(),
            Arc::new(self.context()),
        );
        ctx.spawn(
            async move { planner::resolve_context(&deps, &namespace, context).await }
                .into_actor(self)
                .map(|resolved, act, _| {
                    let context = match resolved {
                        Ok(Ok(context)) => Some(context),
                        Ok(Err(why)) => {
                            tracing::warn!(run.id = %act.run.key.run, error = %why, "checks cannot run");
                            None
                        }
                        Err(e) => {
                            tracing::warn!(run.id = %act.run.key.run, error = %e, "checks wait for the store");
                            None
                        }
                    };
                    act.health.resolved(context);
                }),
        );
    }

    /// A check ended: records what it found, unless an operation started since it began.
    fn checked(&mut self, job: checker::Job, finding: checker::Finding, ctx: &mut Context<Self>) {
        if !self
            .health
            .ended(&job, &finding, &self.run, self.slot.running.is_some())
        {
            return;
        }
        let deps = self.deps.clone();
        ctx.spawn(
            async move {
                let recorded = checker::record(
                    &deps,
                    (&job.run, &job.cluster),
                    &job.node,
                    &job.service,
                    finding.clone(),
                )
                .await;
                (job, finding, recorded)
            }
            .into_actor(self)
            .map(|(job, finding, recorded), act, ctx| {
                match recorded {
                    Ok(r) if r.wants_heal => act.consider_heal(job, finding, r, ctx),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(run.id = %act.run.key.run, error = %e, "cannot record a check")
                    }
                }
                // A check ended: what waited for it is decided now.
                for (job, finding, recorded) in act.health.released() {
                    act.consider_heal(job, finding, recorded, ctx);
                }
            }),
        );
    }

    /// A service is down or failed: heals it if its policy says so and its limit allows.
    fn consider_heal(
        &mut self,
        job: checker::Job,
        finding: checker::Finding,
        recorded: checker::Recorded,
        ctx: &mut Context<Self>,
    ) {
        let Some(policy) = Health::policy(&self.run, &job) else {
            return;
        };
        let deps = self.deps.clone();
        ctx.spawn(
            async move {
                let past = checker::heals(&deps, &job.run, &job.node, &job.service).await;
                (job, past)
            }
            .into_actor(self)
            .map(move |(job, past), act, ctx| {
                let past = match past {
                    Ok(p) => p,
                    Err(e) => {
                        return tracing::warn!(run.id = %act.run.key.run, error = %e, "cannot read earlier heals");
                    }
                };
                // An operation began meanwhile (a heal another finding asked for, say): it
                // restarts what it must, and the checks after it say what is still down.
                let now = clock::now_millis();
                if act.health.waits(act.slot.running.is_some(), now) {
                    return;
                }
                // Heal the root: what this service needs is down too (or its check is under
                // way), and that one's heal restarts this one with it.
                let Some((job, finding, recorded)) =
                    act.health.hold(&act.run, (job, finding, recorded))
                else {
                    return;
                };
                let healing = act
                    .health
                    .heal(&act.run, &job, &finding, &recorded, policy, &past, now);
                let (me, deps) = (ctx.address(), act.deps.clone());
                actix::spawn(async move {
                    let message = match healing {
                        Healing::Nothing => return,
                        Healing::Note(message) => message,
                        Healing::Operation(heal) => {
                            let asked = ClusterCommand(heal.change.clone(), heal.act.clone());
                            heal.said(match me.send(asked).await {
                                Ok(Ok(id)) => Ok(id),
                                Ok(Err(e)) => Err(e.to_string()),
                                Err(e) => Err(e.to_string()),
                            })
                        }
                    };
                    let _ = checker::note(&deps, &job.run, &job.node, message).await;
                });
            }),
        );
    }

    /// Arms the timer for the run's next deadline, replacing any earlier one.
    fn arm_timer(&mut self, ctx: &mut Context<Self>) {
        if let Some(handle) = self.timer.take() {
            ctx.cancel_future(handle);
        }
        if let Some((at, _)) = lifecycle::next_deadline(&self.run) {
            let now_ms = clock::now_millis();
            // Never more than a day at once: the handler re-arms until the deadline is there,
            // so no stored time, however far, can overflow the timer or wrap it to zero.
            let delay = Duration::from_millis(at.saturating_mul(1000).saturating_sub(now_ms))
                .min(MAX_TIMER);
            self.timer = Some(ctx.run_later(delay, |_, ctx| ctx.address().do_send(Deadline)));
        }
    }
}

impl Actor for RunSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        if self.run.status == ProgramStatus::Pending {
            if self.run.reuse.is_some() && !self.run.pooled {
                return self.begin_on_idle(ctx);
            }
            return self.begin(ctx);
        }
        let effects = lifecycle::resume(&self.run);
        tracing::info!(run.id = %self.run.key.run, run.status = %self.run.status, effects = ?effects, "resuming run");
        self.resuming = true;
        self.perform(&effects, ctx);
        self.resuming = false;
        self.resume_cluster_op(ctx);
        self.arm_timer(ctx);
        self.arm_checks(ctx);
        self.arm_idle_watch(ctx);
        self.arm_reclaims(ctx);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.live.forget(&self.run.key.run);
    }
}

/// Stops a supervisor whose run's IDLE cluster another run took over: nothing is left to do.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct TakenOver;

/// Stops a supervisor where it is, writing nothing more: this server no longer owns its run,
/// and another carries it on.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Abandon;

mod handlers;
mod operations;
mod reclaim;
