//! How a run's supervisor answers its messages: commands from the API, news from the program
//! and the planner, its timer, and being told to stop.

use actix::prelude::*;

use super::{
    Abandon, Admitted, CancelCommand, ClusterCommand, Command, Deadline, NotStarted, ProgramNews,
    RunSupervisor, TakenOver,
};
use crate::model::plan::ClusterOperation;
use crate::model::run::{ProgramStatus, RunError, RunRecord};
use crate::rules::admission;
use crate::rules::lifecycle::{self, Event};
use crate::runtime::error::RuntimeError;
use crate::runtime::planner::{self, CancelBy, OpDone, OpSpec, Planner};
use crate::runtime::transition;
use crate::store::clock;

impl Handler<TakenOver> for RunSupervisor {
    type Result = ();

    fn handle(&mut self, _: TakenOver, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        tracing::info!(run.id = %self.run.key.run, "its IDLE cluster was taken over by another run");
        ctx.stop();
    }
}

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
        let Command(event, act) = cmd;
        let next =
            match transition::next(&self.run, event, &self.deps.member.name, clock::now_secs()) {
                Ok(next) => next,
                Err(e) => return AtomicResponse::new(Box::pin(fut::ready(Err(e.into())))),
            };
        let (deps, before) = (self.deps.clone(), self.run.clone());
        AtomicResponse::new(Box::pin(
            async move {
                let saved = transition::commit(&deps, &before, &next, Some(&act)).await;
                (saved, next.transition)
            }
            .into_actor(self)
            .map(|(saved, t), actor, ctx| {
                let record = t.run.clone();
                let failed = saved.as_ref().err().cloned();
                actor.after_commit(saved, t, ctx);
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
        if let Some(attempt) = news.1
            && attempt != self.run.attempt()
        {
            tracing::debug!(run.id = %self.run.key.run, attempt, now = self.run.attempt(), event = ?news.0, "news of an attempt that is over");
            return;
        }
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
        if done.operation == ClusterOperation::Create && !done.dropped.is_empty() {
            // Nodes the create gave up for want of capacity are no longer the cluster's: the
            // transition that follows writes the run without them.
            let gone = &done.dropped;
            self.run.cluster.nodes.retain(|n| !gone.contains(n));
            self.run.layout.retain(|n, _| !gone.contains(n));
            self.run.node_types.retain(|n, _| !gone.contains(n));
            self.run.cluster.given_up = done.dropped.clone();
        }
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
            attention: self.run.cluster.attention.is_some(),
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

impl Handler<CancelCommand> for RunSupervisor {
    type Result = ResponseFuture<Result<(), RuntimeError>>;

    fn handle(
        &mut self,
        CancelCommand(id, act): CancelCommand,
        _: &mut Context<Self>,
    ) -> Self::Result {
        let run = self.run.key.run.clone();
        let refused = move |reason: String| -> RuntimeError {
            RunError::NotCancellable { run, id, reason }.into()
        };
        let Some(planner) = self.planner.clone().filter(|_| self.slot.running.is_some()) else {
            return Box::pin(async move { Err(refused("it is not running".into())) });
        };
        Box::pin(async move {
            match planner.send(CancelBy { id, act }).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(reason)) => Err(refused(reason)),
                Err(_) => Err(refused("it has just ended".into())),
            }
        })
    }
}

impl Handler<Deadline> for RunSupervisor {
    type Result = ();

    fn handle(&mut self, _: Deadline, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.timer = None;
        match lifecycle::next_deadline(&self.run) {
            Some((at, event)) if at <= clock::now_secs() => {
                if let Err(e) = self.apply(event, ctx) {
                    tracing::warn!(run.id = %self.run.key.run, error = %e, "deadline does not apply");
                }
            }
            _ => self.arm_timer(ctx),
        }
    }
}
