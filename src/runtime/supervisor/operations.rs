//! A run's cluster operations: the admission rules' slot, and starting, resuming and ending
//! the planners of the lifecycle's create and delete and of an admin's operations.

use std::time::Duration;

use actix::prelude::*;

use super::{Admitted, NotStarted, RunSupervisor};
use crate::model::operation::{OpOutcome, OpStatus, OperationRecord};
use crate::model::plan::ClusterOperation;
use crate::model::run::RunRecord;
use crate::rules::admission;
use crate::rules::lifecycle::Effect;
use crate::rules::resize::{self, Change};
use crate::runtime::planner::{self as planner, Cancel, OpSpec, Planner};
use crate::runtime::transition::Next;
use crate::store::audit;
use crate::store::clock;

impl RunSupervisor {
    /// Feeds `event` to the admission rules and carries out what they say, except starting
    /// an admin's operation or refusing it, which the answer leaves to the caller.
    pub(super) fn admit(&mut self, event: admission::Event, ctx: &mut Context<Self>) -> Admitted {
        let (slot, effects) = admission::on(self.slot, event);
        self.slot = slot;
        let mut answer = Admitted::Nothing;
        for effect in effects {
            match effect {
                admission::Effect::Start(operation) if operation.is_lifecycle() => {
                    self.health.operation_started();
                    if operation == ClusterOperation::Create {
                        self.health.making_cluster();
                    }
                    self.start_lifecycle_op(operation, ctx);
                }
                admission::Effect::Start(_) => {
                    // A check that looked before the operation says nothing after it.
                    self.health.operation_started();
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

    /// Starts the create or delete the admission rules let start: from what the transition
    /// that started it recorded ([`Self::commit`]), or planned now.
    pub(super) fn start_lifecycle_op(
        &mut self,
        operation: ClusterOperation,
        ctx: &mut Context<Self>,
    ) {
        if let Some((spec, prepared)) = self.prepared.take()
            && spec.operation == operation
        {
            let report = ctx.address().recipient();
            self.planner =
                Some(Planner::prepared(self.deps.clone(), spec, prepared, report).start());
            return;
        }
        let spec = match self.op_spec(operation, None, self.resuming) {
            Ok(spec) => spec,
            Err(reason) => return ctx.notify(NotStarted(operation, reason)),
        };
        let report = ctx.address().recipient();
        self.planner = Some(Planner::new(self.deps.clone(), spec, report).start());
    }

    /// What `operation` works on ([`OpSpec::for_run`]).
    pub(super) fn op_spec(
        &self,
        operation: ClusterOperation,
        change: Option<&Change>,
        resume: bool,
    ) -> Result<OpSpec, String> {
        let on = planner::On {
            deps: &self.deps,
            run: &self.run,
            context: self.context(),
        };
        OpSpec::for_run(on, operation, change, resume)
    }

    /// The create or delete that committing `next` starts at once, by the admission rules,
    /// if it does: its spec, for the run as `next` writes it. Only when no other commit is on
    /// its way, so that the rules, when the effects are performed, find the slot as it is now.
    pub(super) fn starts(&self, next: &Next) -> Option<OpSpec> {
        if self.committing > 0 {
            return None;
        }
        let mut operations = Vec::new();
        for effect in &next.transition.effects {
            match effect {
                Effect::CreateCluster => operations.push(ClusterOperation::Create),
                Effect::DeleteCluster => operations.push(ClusterOperation::Delete),
                // A cancel changes the slot the rules then find.
                Effect::CancelCreate | Effect::CancelDelete => return None,
                Effect::PrepareCluster
                | Effect::Launch
                | Effect::Relaunch
                | Effect::Kill
                | Effect::Finish => {}
            }
        }
        let [operation] = operations[..] else {
            return None;
        };
        let (_, admitted) = admission::on(self.slot, admission::Event::Lifecycle(operation));
        if admitted != [admission::Effect::Start(operation)] {
            return None;
        }
        let run = &next.transition.run;
        let on = planner::On {
            deps: &self.deps,
            run,
            context: self.context_of(run),
        };
        OpSpec::for_run(on, operation, None, self.resuming).ok()
    }

    /// What the run's provisioner calls get (secure references not yet resolved).
    pub(super) fn context(&self) -> ebb_spi::Context {
        self.context_of(&self.run)
    }

    /// What the provisioner calls of `run` (this run, as it is or is about to be) get.
    pub(super) fn context_of(&self, run: &RunRecord) -> ebb_spi::Context {
        let mut context = ebb_spi::Context::new(run.properties(), self.deps.work_dir.clone());
        context.labels = [
            (ebb_spi::TAG_SERVER, self.deps.server_name.as_str()),
            (ebb_spi::TAG_NAMESPACE, run.key.namespace.as_str()),
            (ebb_spi::TAG_PROFILE, run.profile.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        context.deadline = run
            .deadline()
            .map(|s| std::time::UNIX_EPOCH + Duration::from_secs(s));
        context
    }

    /// An admin's operation ended: on success the run takes the cluster's new shape.
    pub(super) fn cluster_op_done(&mut self, outcome: OpOutcome, ctx: &mut Context<Self>) {
        let Some(change) = self.pending.take() else {
            return;
        };
        let next = Next::of(resize::finished(
            &self.run,
            change,
            &outcome,
            clock::now_secs(),
        ));
        self.commit(next, ctx);
    }

    /// After a restart: carries on with an admin's operation that was running.
    pub(super) fn resume_cluster_op(&mut self, ctx: &mut Context<Self>) {
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
}
