//! RunSupervisor: one actor per live run, the only writer of its run record.
//!
//! Every input (an API command, an operation's end, the program's end, a deadline) becomes a
//! `lifecycle::Event`. The supervisor computes the transition with the pure
//! `lifecycle::on`, persists the new record and its history in one write, and only then
//! carries out the effects: start or cancel a planner, launch or kill the program, arm the
//! deadline timer. Persisting blocks the mailbox (`ctx.wait`), so transitions apply one at a
//! time in order. On start-up a supervisor re-reads nothing but its record and resumes with
//! `lifecycle::resume`.

use crate::model::access::Act;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix::prelude::*;
use ebb_spi::resource::{DEFAULT_RETRY_BUDGET, RETRY_BUDGET};

use super::checker;
use super::deps::Deps;
use super::launch::{launch_file, launch_remote, remote_program};
use super::planner::{self as planner, Cancel, OpDone, OpSpec, Planner};
use super::program::{self, Started};
use crate::model::event::EventKind;
use crate::model::operation::{OpOutcome, OpStatus, OperationRecord};
use crate::model::plan::{ClusterOperation, NodeRecord};
use crate::model::run::{ClusterStatus, Exit, ProgramStatus, RunError, RunRecord};
use crate::model::template::Heal;
use crate::model::time;
use crate::rules::admission::{self, Slot};
use crate::rules::lifecycle::{self, Effect, Event, Transition};
use crate::rules::resize::{self, Change};
use crate::runtime::error::RuntimeError;
use crate::store::audit;
use crate::store::events;
use crate::store::keys;
use crate::store::{Read, StoreError, Table};

/// How long a stopped program gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(10);
/// The longest a deadline timer sleeps before it checks again.
const MAX_TIMER: Duration = Duration::from_secs(24 * 3600);

/// An API command for the run: `Stop`, `Deprovision`, `Extend` or `ForceDeprovision`.
#[derive(Debug, Message)]
#[rtype(result = "Result<RunRecord, RuntimeError>")]
pub struct Command(pub Event, pub Act);

/// News from the program watcher: `Launched`, `LaunchFailed` or `Exited`.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct ProgramNews(Event);

/// An operation an admin asked for on the run's cluster; answers with the operation's id.
#[derive(Debug, Message)]
#[rtype(result = "Result<u32, RuntimeError>")]
pub struct ClusterCommand(pub Change, pub Act);

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

    pub fn insert(&self, run: String, addr: Addr<RunSupervisor>) {
        self.lock().insert(run, addr);
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
    /// The run's span: every log line of its supervisor carries the run's id.
    span: tracing::Span,
    /// The checks of the cluster's services, and the ticker that starts those due.
    checks: checker::Checks,
    check_timer: Option<SpawnHandle>,
}

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
            checks: checker::Checks::default(),
            check_timer: None,
        }
    }

    /// Applies `event`: transition, persist, then effects. Errors are the command's refusal.
    fn apply(&mut self, event: Event, ctx: &mut Context<Self>) -> Result<(), RunError> {
        let leftovers = event == Event::ForceDeprovision;
        let mut t = lifecycle::on(&self.run, event, time::now_secs())?;
        if t.effects.contains(&Effect::Launch) {
            // Recorded before the launch: another server taking the run over then knows a
            // program on this host is out of its reach.
            t.run.launcher = Some(self.deps.member.name.to_string());
        }
        if t.run == self.run && t.effects.is_empty() {
            return Ok(());
        }
        let deps = self.deps.clone();
        let t2 = t.clone();
        ctx.wait(
            async move { persist(&deps, &t2, leftovers, None).await }
                .into_actor(self)
                .map(move |saved, act, ctx| act.after_persist(saved, t, ctx)),
        );
        Ok(())
    }

    fn after_persist(
        &mut self,
        saved: Result<(), StoreError>,
        t: Transition,
        ctx: &mut Context<Self>,
    ) {
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
        count_transition(&self.run, &t.run);
        self.run = t.run;
        self.perform(&t.effects, ctx);
        self.arm_timer(ctx);
        self.arm_checks(ctx);
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
                Effect::Launch => self.launch(ctx),
                Effect::Kill => {
                    let dir = self.deps.run_dir(&self.run.key.run);
                    let (deps, run, context) =
                        (self.deps.clone(), self.run.clone(), self.context());
                    actix::spawn(async move {
                        let killed = match remote_program(&deps, &run, context).await {
                            Some(Ok(program)) => program.kill(&deps, KILL_GRACE).await,
                            Some(Err(e)) => Err(e),
                            None => program::kill(dir, KILL_GRACE)
                                .await
                                .map_err(|e| e.to_string()),
                        };
                        if let Err(e) = killed {
                            tracing::warn!(run.id = %run.key.run, error = %e, "cannot signal a program");
                        }
                    });
                }
                Effect::Finish => ctx.stop(),
            }
        }
    }

    /// Feeds `event` to the admission rules and carries out what they say, except starting
    /// an admin's operation or refusing it, which the answer leaves to the caller.
    fn admit(&mut self, event: admission::Event, ctx: &mut Context<Self>) -> Admitted {
        let (slot, effects) = admission::on(self.slot, event);
        self.slot = slot;
        let mut answer = Admitted::Nothing;
        for effect in effects {
            match effect {
                admission::Effect::Start(operation) if operation.is_lifecycle() => {
                    self.checks.epoch += 1;
                    self.start_lifecycle_op(operation, ctx);
                }
                admission::Effect::Start(_) => {
                    // A check that looked before the operation says nothing after it.
                    self.checks.epoch += 1;
                    answer = Admitted::Start;
                }
                admission::Effect::Cancel => {
                    if let Some(planner) = &self.planner {
                        planner.do_send(Cancel);
                    }
                }
                admission::Effect::Refuse(reason) => answer = Admitted::Refused(reason),
                admission::Effect::Lifecycle(event) => {
                    if let Err(e) = self.apply(event, ctx) {
                        tracing::warn!(run.id = %self.run.key.run, error = %e, "operation result does not apply");
                    }
                }
                admission::Effect::Changed(outcome) => self.cluster_op_done(outcome, ctx),
            }
        }
        answer
    }

    /// Starts the create or delete the admission rules let start.
    fn start_lifecycle_op(&mut self, operation: ClusterOperation, ctx: &mut Context<Self>) {
        let spec = match self.op_spec(operation, None, self.resuming) {
            Ok(spec) => spec,
            Err(reason) => return ctx.notify(NotStarted(operation, reason)),
        };
        let report = ctx.address().recipient();
        self.planner = Some(Planner::new(self.deps.clone(), spec, report).start());
    }

    /// What `operation` works on: the run's cluster as it is, or as `change` makes it; `resume`
    /// carries on with one a restart interrupted. Fails, saying so, when the run's
    /// provisioner is not installed.
    fn op_spec(
        &self,
        operation: ClusterOperation,
        change: Option<&Change>,
        resume: bool,
    ) -> Result<OpSpec, String> {
        let Some(provisioner) = self.deps.registry.get(&self.run.provisioner).cloned() else {
            return Err(format!(
                "provisioner '{}' is not installed",
                self.run.provisioner
            ));
        };
        let properties = self.run.properties();
        let budget = properties
            .get(RETRY_BUDGET.name)
            .and_then(|v| ebb_spi::parse_duration(v).ok())
            .unwrap_or(DEFAULT_RETRY_BUDGET);
        let previous = self.run.config();
        let (nodes, layout, config, changed, request) = match change {
            Some(c) => (
                c.nodes.clone(),
                c.layout.clone(),
                c.config.clone(),
                c.changed.clone(),
                c.to_request(),
            ),
            None => (
                self.run.cluster.nodes.clone(),
                self.run.layout.clone(),
                previous.clone(),
                Default::default(),
                serde_json::Value::Null,
            ),
        };
        let selection = change.map(|c| c.selection.clone()).unwrap_or_default();
        let types = change.map_or(&self.run.node_types, |c| &c.node_types);
        let node_properties = match &self.run.template {
            Some(t) => types
                .iter()
                .map(|(node, ty)| (node.clone(), t.type_properties(&self.run.provisioner, ty)))
                .collect(),
            None => BTreeMap::new(),
        };
        Ok(OpSpec {
            operation,
            resume,
            run: self.run.key.run.clone(),
            namespace: self.run.key.namespace.clone(),
            nodes,
            template: self.run.template.clone().map(Arc::new),
            layout,
            config,
            previous_config: previous,
            request,
            changed,
            selection,
            provisioner,
            context: Arc::new(self.context()),
            node_properties,
            budget,
            act: None,
        })
    }

    /// What the run's provisioner calls get (secure references not yet resolved).
    fn context(&self) -> ebb_spi::Context {
        let mut context = ebb_spi::Context::new(self.run.properties(), self.deps.work_dir.clone());
        context.labels = [
            (ebb_spi::TAG_SERVER, self.deps.server_name.as_str()),
            (ebb_spi::TAG_NAMESPACE, self.run.key.namespace.as_str()),
            (ebb_spi::TAG_PROFILE, self.run.profile.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        context.deadline = self
            .run
            .deadline()
            .map(|s| std::time::UNIX_EPOCH + Duration::from_secs(s));
        context
    }

    /// An admin's operation ended: on success the run takes the cluster's new shape.
    fn cluster_op_done(&mut self, outcome: OpOutcome, ctx: &mut Context<Self>) {
        let Some(change) = self.pending.take() else {
            return;
        };
        let t = resize::finished(&self.run, change, &outcome);
        let deps = self.deps.clone();
        let t2 = t.clone();
        ctx.wait(
            async move { persist(&deps, &t2, false, None).await }
                .into_actor(self)
                .map(move |saved, act, ctx| act.after_persist(saved, t, ctx)),
        );
    }

    /// After a restart: carries on with an admin's operation that was running.
    fn resume_cluster_op(&mut self, ctx: &mut Context<Self>) {
        // Read the audit log only when the rules could let an operation carry on.
        if !admission::may_resume(self.slot, self.run.cluster.status) {
            return;
        }
        let (deps, run) = (self.deps.clone(), self.run.key.run.clone());
        ctx.wait(
            async move {
                deps.store
                    .read(move |r| audit::operations(r, &run))
                    .await
            }
            .into_actor(self)
            .map(|ops, act, ctx| {
                let ops: Vec<OperationRecord> = ops.unwrap_or_default();
                let Some(last) = ops.last().filter(|o| o.status == OpStatus::Running) else {
                    return;
                };
                // A rollback carries the change of the operation it undoes.
                let original = last
                    .rollback_of
                    .and_then(|id| ops.iter().find(|o| o.id == id))
                    .unwrap_or(last);
                if original.operation.is_lifecycle() {
                    return;
                }
                let Some(change) = Change::from_request(original.operation, &original.request)
                else {
                    tracing::warn!(run.id = %act.run.key.run, operation = original.id, "cannot read an interrupted operation's request");
                    return;
                };
                let resume = admission::Event::Resume {
                    operation: original.operation,
                    cluster: act.run.cluster.status,
                };
                if act.admit(resume, ctx) != Admitted::Start {
                    return;
                }
                match act.op_spec(original.operation, Some(&change), true) {
                    Ok(spec) => {
                        let report = ctx.address().recipient();
                        act.pending = Some(change);
                        act.planner = Some(Planner::new(act.deps.clone(), spec, report).start());
                    }
                    Err(reason) => {
                        let operation = original.operation;
                        act.admit(admission::Event::NotStarted { operation, reason }, ctx);
                    }
                }
            }),
        );
    }

    fn launch(&mut self, ctx: &mut Context<Self>) {
        let deps = self.deps.clone();
        let run = self.run.clone();
        let me = ctx.address();
        let context = self.context();
        actix::spawn(async move {
            let news = |e: Event| me.do_send(ProgramNews(e));
            let dir = deps.run_dir(&run.key.run);
            match remote_program(&deps, &run, context).await {
                None => {
                    if let Some(other) =
                        run.launcher.as_deref().filter(|l| **l != *deps.member.name)
                    {
                        return news(Event::ProgramLost(format!(
                            "the program ran on the host of server {other}, which is gone; no other server can reach it"
                        )));
                    }
                }
                Some(Err(e)) => return news(Event::LaunchFailed(e)),
                Some(Ok(program)) => {
                    return match launch_remote(&deps, &run, &program).await {
                        Ok(()) => {
                            news(Event::Launched);
                            news(Event::Exited(program.wait(&deps).await));
                        }
                        Err(e) => news(Event::LaunchFailed(e)),
                    };
                }
            }
            let started = match launch_file(&deps, &run).await {
                Ok(launch) => {
                    let (exe, dir) = (deps.exe.clone(), dir.clone());
                    tokio::task::spawn_blocking(move || program::start(&exe, &dir, &launch))
                        .await
                        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
                }
                Err(e) => Err(e),
            };
            let child = match started {
                Ok(Started::Child(child)) => Some(child),
                Ok(Started::Running) => None,
                Ok(Started::Ended(exit)) => {
                    news(Event::Launched);
                    news(Event::Exited(exit));
                    return;
                }
                Ok(Started::Lost) => {
                    news(Event::Launched);
                    news(Event::Exited(Exit {
                        code: None,
                        signal: None,
                    }));
                    return;
                }
                Err(e) => {
                    news(Event::LaunchFailed(e.to_string()));
                    return;
                }
            };
            news(Event::Launched);
            let exit = match program::wait(dir, child).await {
                Ok(Started::Ended(exit)) => exit,
                Ok(_) | Err(_) => Exit {
                    code: None,
                    signal: None,
                },
            };
            news(Event::Exited(exit));
        });
    }

    /// Starts the checks of the cluster's services while it is live, and ends them when it is
    /// no longer.
    fn arm_checks(&mut self, ctx: &mut Context<Self>) {
        let live = matches!(
            self.run.cluster.status,
            Some(ClusterStatus::Provisioned | ClusterStatus::Waiting)
        );
        let checked = self.run.template.as_ref().is_some_and(|t| {
            self.run
                .layout
                .values()
                .flatten()
                .any(|s| t.services.get(s).is_some_and(|s| s.check().is_some()))
        });
        match (live && checked, self.check_timer.is_some()) {
            (true, false) => {
                let tick = ctx.run_interval(checker::TICK, |act, ctx| act.tick_checks(ctx));
                self.check_timer = Some(tick);
            }
            (false, true) => {
                if let Some(handle) = self.check_timer.take() {
                    ctx.cancel_future(handle);
                }
                self.checks.clear();
            }
            _ => {}
        }
    }

    /// Starts the checks that are due, unless an operation runs.
    fn tick_checks(&mut self, ctx: &mut Context<Self>) {
        if self.slot.running.is_some() {
            return;
        }
        let Some(template) = self.run.template.clone() else {
            return;
        };
        let Some(context) = self.checks.context.clone() else {
            return self.resolve_check_context(ctx);
        };
        let now = time::now_millis();
        let due = self
            .checks
            .due(&template, &self.run.cluster.nodes, &self.run.layout, now);
        let config = self.run.config();
        let provisioner = self.deps.registry.get(&self.run.provisioner).cloned();
        let properties = self.run.properties();
        for check in due {
            let replaces = checker::policy(Some(&template), &check.0.1, &properties)
                .is_some_and(|p| p.heal == Heal::ReplaceNode);
            let job = self.checks.job(
                (&self.run.key.namespace, &self.run.key.run),
                check,
                Arc::clone(&context),
                &config,
                &self.run.layout,
                provisioner.clone().filter(|_| replaces),
            );
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

    /// Resolves the secure references of the run's properties once, for its checks (a node
    /// reached over SSH needs its key).
    fn resolve_check_context(&mut self, ctx: &mut Context<Self>) {
        if self.checks.resolving {
            return;
        }
        self.checks.resolving = true;
        let (deps, namespace, context) = (
            self.deps.clone(),
            self.run.key.namespace.clone(),
            Arc::new(self.context()),
        );
        ctx.spawn(
            async move { planner::resolve_context(&deps, &namespace, context).await }
                .into_actor(self)
                .map(|resolved, act, _| {
                    act.checks.resolving = false;
                    match resolved {
                        Ok(Ok(context)) => act.checks.context = Some(context),
                        Ok(Err(why)) => {
                            tracing::warn!(run.id = %act.run.key.run, error = %why, "checks cannot run")
                        }
                        Err(e) => {
                            tracing::warn!(run.id = %act.run.key.run, error = %e, "checks wait for the store")
                        }
                    }
                }),
        );
    }

    /// A check ended: records what it found, unless an operation started since it began.
    fn checked(&mut self, job: checker::Job, finding: checker::Finding, ctx: &mut Context<Self>) {
        self.checks.ended(&(job.node.clone(), job.service.clone()));
        let still_there = self
            .run
            .layout
            .get(&job.node)
            .is_some_and(|s| s.contains(&job.service));
        if job.epoch != self.checks.epoch
            || self.slot.running.is_some()
            || self.check_timer.is_none()
            || !still_there
        {
            return;
        }
        let deps = self.deps.clone();
        ctx.spawn(
            async move {
                let recorded =
                    checker::record(&deps, &job.run, &job.node, &job.service, finding.clone())
                        .await;
                (job, finding, recorded)
            }
            .into_actor(self)
            .map(|(job, finding, recorded), act, ctx| match recorded {
                Ok(r) if r.wants_heal => act.consider_heal(job, finding, r, ctx),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(run.id = %act.run.key.run, error = %e, "cannot record a check")
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
        let properties = self.run.properties();
        let Some(policy) = checker::policy(self.run.template.as_ref(), &job.service, &properties)
        else {
            return;
        };
        if policy.heal == Heal::None {
            return;
        }
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
                let now = time::now_millis();
                let at = (job.node.clone(), job.service.clone());
                let state = recorded.after.map(|s| s.to_string()).unwrap_or_default();
                let window = humantime::format_duration(policy.window).to_string();
                match crate::rules::service::heal_step(&policy, &past, now) {
                    crate::rules::service::HealStep::Report => {}
                    crate::rules::service::HealStep::Exhausted { attempts } => {
                        // Said once per window, not at every check.
                        let window_ms = u64::try_from(policy.window.as_millis()).unwrap_or(u64::MAX);
                        if act
                            .checks
                            .exhausted
                            .get(&at)
                            .is_some_and(|t| now.saturating_sub(*t) < window_ms)
                        {
                            return;
                        }
                        act.checks.exhausted.insert(at, now);
                        metrics::counter!(crate::model::metrics::HEALS.name, "heal" => "exhausted")
                            .increment(1);
                        let message = format!(
                            "{} stays {state}: healing stopped at its limit of {attempts} heal(s) in {window}",
                            job.service
                        );
                        let deps = act.deps.clone();
                        actix::spawn(async move {
                            let _ = checker::note(&deps, &job.run, &job.node, message).await;
                        });
                    }
                    crate::rules::service::HealStep::Heal { n } => {
                        act.checks.exhausted.remove(&at);
                        // A node that is gone is made anew; a service that is down on a node
                        // that is there is restarted.
                        let replace = finding.gone && policy.heal == Heal::ReplaceNode;
                        let trigger = serde_json::json!({
                            "heal": if replace { "replace-node" } else { "restart" },
                            "node": job.node,
                            "service": job.service,
                            "state": state,
                            "found": finding.detail,
                            "attempt": n,
                            "of": policy.attempts,
                            "window": window,
                        });
                        let kind = if replace { "replace-node" } else { "restart" };
                        metrics::counter!(crate::model::metrics::HEALS.name, "heal" => kind)
                            .increment(1);
                        let change = if replace {
                            resize::heal_replace(&act.run, &job.node, trigger)
                        } else {
                            resize::heal_restart(&act.run, &job.node, &job.service, trigger)
                        };
                        let how = if replace {
                            format!("operation {{id}} replaces node {}", job.node)
                        } else {
                            "operation {id} restarts it with its dependent chain".to_string()
                        };
                        let run_id = act.run.key.run.clone();
                        let heal = Act {
                            namespace: Some(act.run.key.namespace.clone()),
                            ..Act::by_server("run.heal", &run_id)
                        };
                        let (me, deps) = (ctx.address(), act.deps.clone());
                        actix::spawn(async move {
                            let message = match me.send(ClusterCommand(change, heal)).await {
                                Ok(Ok(id)) => format!(
                                    "healing {}: {} (heal {n} of {} in {window})",
                                    job.service,
                                    how.replace("{id}", &id.to_string()),
                                    policy.attempts
                                ),
                                Ok(Err(e)) => format!("cannot heal {}: {e}", job.service),
                                Err(e) => format!("cannot heal {}: {e}", job.service),
                            };
                            let _ = checker::note(&deps, &job.run, &job.node, message).await;
                        });
                    }
                }
            }),
        );
    }

    /// Arms the timer for the run's next deadline, replacing any earlier one.
    fn arm_timer(&mut self, ctx: &mut Context<Self>) {
        if let Some(handle) = self.timer.take() {
            ctx.cancel_future(handle);
        }
        if let Some((at, _)) = lifecycle::next_deadline(&self.run) {
            let now_ms = time::now_millis();
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
            if let Err(e) = self.apply(Event::Begin, ctx) {
                tracing::error!(run.id = %self.run.key.run, error = %e, "cannot begin a run");
            }
            return;
        }
        let effects = lifecycle::resume(&self.run);
        tracing::info!(run.id = %self.run.key.run, run.status = %self.run.status, effects = ?effects, "resuming run");
        self.resuming = true;
        self.perform(&effects, ctx);
        self.resuming = false;
        self.resume_cluster_op(ctx);
        self.arm_timer(ctx);
        self.arm_checks(ctx);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.live.forget(&self.run.key.run);
    }
}

/// Stops a supervisor where it is, writing nothing more: this server no longer owns its run,
/// and another carries it on.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Abandon;

impl Handler<Abandon> for RunSupervisor {
    type Result = ();

    fn handle(&mut self, _: Abandon, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        tracing::warn!(run.id = %self.run.key.run, "run abandoned: this server no longer owns it");
        ctx.stop();
    }
}

impl Handler<Command> for RunSupervisor {
    type Result = AtomicResponse<Self, Result<RunRecord, RuntimeError>>;

    fn handle(&mut self, cmd: Command, _: &mut Context<Self>) -> Self::Result {
        let _span = self.span.clone().entered();
        let leftovers = cmd.0 == Event::ForceDeprovision;
        let act = cmd.1;
        let t = match lifecycle::on(&self.run, cmd.0, time::now_secs()) {
            Ok(t) => t,
            Err(e) => return AtomicResponse::new(Box::pin(fut::ready(Err(e.into())))),
        };
        let deps = self.deps.clone();
        let t2 = t.clone();
        AtomicResponse::new(Box::pin(
            async move { persist(&deps, &t2, leftovers, Some(&act)).await }
                .into_actor(self)
                .map(move |saved, actor, ctx| {
                    let record = t.run.clone();
                    let failed = saved.as_ref().err().cloned();
                    actor.after_persist(saved, t, ctx);
                    match failed {
                        Some(e) => Err(RuntimeError::Store(e)),
                        None => Ok(record),
                    }
                }),
        ))
    }
}

impl Handler<ProgramNews> for RunSupervisor {
    type Result = ();

    fn handle(&mut self, news: ProgramNews, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        // A re-attached program reports Launched again; the record already says RUNNING.
        if news.0 == Event::Launched && self.run.status == ProgramStatus::Running {
            return;
        }
        if let Err(e) = self.apply(news.0, ctx) {
            tracing::warn!(run.id = %self.run.key.run, error = %e, "program news does not apply");
        }
    }
}

impl Handler<OpDone> for RunSupervisor {
    type Result = ();

    fn handle(&mut self, done: OpDone, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.planner = None;
        let done = admission::Event::Done {
            operation: done.operation,
            outcome: done.outcome,
        };
        self.admit(done, ctx);
    }
}

impl Handler<NotStarted> for RunSupervisor {
    type Result = ();

    fn handle(&mut self, NotStarted(operation, reason): NotStarted, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.admit(admission::Event::NotStarted { operation, reason }, ctx);
    }
}

impl Handler<ClusterCommand> for RunSupervisor {
    type Result = AtomicResponse<Self, Result<u32, RuntimeError>>;

    fn handle(&mut self, cmd: ClusterCommand, ctx: &mut Context<Self>) -> Self::Result {
        let _span = self.span.clone().entered();
        let refuse = |run: &str, reason: String| {
            AtomicResponse::new(Box::pin(fut::ready(Err(RunError::WrongState {
                run: run.to_string(),
                action: "changed",
                reason,
            }
            .into()))))
        };
        let id = self.run.key.run.clone();
        let (change, act) = (cmd.0, cmd.1);
        let operation = change.operation;
        let asked = admission::Event::Admin {
            operation,
            cluster: self.run.cluster.status,
        };
        match self.admit(asked, ctx) {
            Admitted::Start => {}
            Admitted::Refused(reason) => return refuse(&id, reason),
            Admitted::Nothing => return refuse(&id, "no operation could start".into()),
        }
        let spec = match self.op_spec(operation, Some(&change), false) {
            Ok(spec) => OpSpec {
                act: Some(act),
                ..spec
            },
            Err(reason) => {
                let not_started = admission::Event::NotStarted { operation, reason };
                return match self.admit(not_started, ctx) {
                    Admitted::Refused(reason) => refuse(&id, reason),
                    Admitted::Start | Admitted::Nothing => {
                        refuse(&id, "no operation could start".into())
                    }
                };
            }
        };
        // Running from here: a second request waits for this one (the response is atomic).
        let deps = self.deps.clone();
        let spec2 = spec.clone();
        AtomicResponse::new(Box::pin(
            async move { planner::prepare(deps, spec2).await }
                .into_actor(self)
                .map(move |prepared, act, ctx| {
                    let prepared = match prepared {
                        Ok(p) => p,
                        Err(e) => {
                            let reason = format!("cannot record the operation: {e}");
                            act.admit(admission::Event::NotStarted { operation, reason }, ctx);
                            return Err(RuntimeError::Store(e));
                        }
                    };
                    let op = prepared.operation_id().unwrap_or_default();
                    let report = ctx.address().recipient();
                    act.pending = Some(change);
                    act.planner =
                        Some(Planner::prepared(act.deps.clone(), spec, prepared, report).start());
                    Ok(op)
                }),
        ))
    }
}

impl Handler<Deadline> for RunSupervisor {
    type Result = ();

    fn handle(&mut self, _: Deadline, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.timer = None;
        match lifecycle::next_deadline(&self.run) {
            Some((at, event)) if at <= time::now_secs() => {
                if let Err(e) = self.apply(event, ctx) {
                    tracing::warn!(run.id = %self.run.key.run, error = %e, "deadline does not apply");
                }
            }
            _ => self.arm_timer(ctx),
        }
    }
}

/// Persists a transition: the record, the active index, and the notes as history.
/// Commits transition `t` of a run: its record, its events, and, for a command someone asked
/// for (`act`), who asked, in the events and the audit log of changes.
/// Counts what a persisted transition from `before` to `after` changed: the statuses
/// entered, and the provisioning and running phases that ended.
pub fn count_transition(before: &RunRecord, after: &RunRecord) {
    use crate::model::metrics::{CLUSTER_STATUS, RUN_PHASE, RUN_STATUS};
    if before.status != after.status {
        metrics::counter!(RUN_STATUS.name, "status" => after.status.to_string()).increment(1);
        if after.status == crate::model::run::ProgramStatus::Running
            && let Some(start) = after.start
        {
            metrics::histogram!(RUN_PHASE.name, "phase" => "provisioning")
                .record(start.saturating_sub(after.starting) as f64);
        }
        if after.status.is_end()
            && let (Some(start), Some(end)) = (before.start.or(after.start), after.end)
        {
            metrics::histogram!(RUN_PHASE.name, "phase" => "running")
                .record(end.saturating_sub(start) as f64);
        }
    }
    if before.cluster.status != after.cluster.status
        && let Some(status) = after.cluster.status
    {
        metrics::counter!(CLUSTER_STATUS.name, "status" => status.to_string()).increment(1);
    }
}

pub async fn persist(
    deps: &Deps,
    t: &Transition,
    leftovers: bool,
    act: Option<&Act>,
) -> Result<(), StoreError> {
    let act = act.cloned();
    let mut run = t.run.clone();
    run.format = crate::model::run::RUN_FORMAT;
    let notes = t.notes.clone();
    deps.store
        .write(move |tx| {
            let key = run.key.key();
            tx.put(Table::Runs, &key, &run)?;
            if !run.is_active() {
                tx.delete(Table::Active, &key);
                tx.delete(Table::Owners, &key);
            } else {
                // The namespace's quota counts the nodes its live runs hold: an expand or a
                // shrink changes them.
                let nodes = run.cluster.nodes.len();
                if let Some(mut entry) = tx.get::<serde_json::Value>(Table::Active, &key)?
                    && entry.get("nodes").and_then(serde_json::Value::as_u64) != Some(nodes as u64)
                {
                    entry["nodes"] = serde_json::json!(nodes);
                    tx.put(Table::Active, &key, &entry)?;
                }
            }
            let actor = act.as_ref().map(|a| a.actor.as_str());
            for note in &notes {
                events::append_by(tx, &run.key.run, EventKind::Status, None, note, actor)?;
            }
            if let Some(act) = &act {
                crate::store::changes::record(tx, act)?;
            }
            if leftovers {
                let left: Vec<String> = tx
                    .scan::<NodeRecord>(Table::Resources, &keys::of_run(&run.key.run))?
                    .into_iter()
                    .map(|(_, n)| n)
                    .filter(NodeRecord::may_exist)
                    .map(|n| {
                        format!(
                            "{} ({}, {:?})",
                            n.node,
                            n.id.as_deref().unwrap_or("id unknown"),
                            n.status
                        )
                    })
                    .collect();
                let message = if left.is_empty() {
                    "no resource was left behind".to_string()
                } else {
                    format!(
                        "resources that may have been left behind: {}",
                        left.join(", ")
                    )
                };
                events::append(tx, &run.key.run, EventKind::Error, None, message)?;
            }
            Ok::<_, StoreError>(())
        })
        .await?;
    deps.notifier.notify(&t.run.key.run);
    Ok(())
}
