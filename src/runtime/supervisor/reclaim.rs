//! The run supervisor's watch of its cluster's spot nodes ([`crate::runtime::spot`]): the
//! ticker, the lookups, and what a reclaim leads to.

use std::sync::Arc;

use actix::prelude::*;

use super::{ClusterCommand, ProgramNews, RunSupervisor};
use crate::model::access::Act;
use crate::rules::lifecycle::Event;
use crate::rules::resize;
use crate::runtime::spot::{TICK, look, record, wanted};
use crate::runtime::{launch, planner};

impl RunSupervisor {
    /// Watches the cluster's spot nodes while it is live, and stops when it is no longer.
    pub(super) fn arm_reclaims(&mut self, ctx: &mut Context<Self>) {
        match (wanted(&self.run), self.reclaims.ticker.is_some()) {
            (true, false) => {
                self.reclaims.ticker =
                    Some(ctx.run_interval(TICK, |act, ctx| act.tick_reclaims(ctx)));
            }
            (false, true) => {
                if let Some(handle) = self.reclaims.ticker.take() {
                    ctx.cancel_future(handle);
                }
                self.reclaims.missing.clear();
            }
            (true, true) | (false, false) => {}
        }
    }

    /// Looks the cluster up, unless a lookup or an operation is under way.
    fn tick_reclaims(&mut self, ctx: &mut Context<Self>) {
        if self.reclaims.looking || self.slot.running.is_some() || !wanted(&self.run) {
            return;
        }
        let Some(provisioner) = self.deps.registry.get(&self.run.provisioner).cloned() else {
            return;
        };
        self.reclaims.looking = true;
        let (deps, cluster, namespace) = (
            self.deps.clone(),
            self.run.cluster_id().to_string(),
            self.run.key.namespace.clone(),
        );
        let (known, unresolved) = (self.reclaims.context.clone(), Arc::new(self.context()));
        ctx.spawn(
            async move {
                let ctx = match known {
                    Some(ctx) => ctx,
                    None => match planner::resolve_context(&deps, &namespace, unresolved).await {
                        Ok(Ok(ctx)) => ctx,
                        Ok(Err(why)) => return (None, Err(why)),
                        Err(e) => return (None, Err(e.to_string())),
                    },
                };
                let missing = look(&deps, &cluster, provisioner, Arc::clone(&ctx)).await;
                (Some(ctx), missing)
            }
            .into_actor(self)
            .map(|(context, missing), act, ctx| {
                act.reclaims.looking = false;
                if context.is_some() {
                    act.reclaims.context = context;
                }
                match missing {
                    Ok(missing) => {
                        for node in act.reclaims.seen(missing) {
                            act.reclaimed(node, ctx);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(run.id = %act.run.key.run, error = %e, "cannot look the cluster's spot nodes up")
                    }
                }
            }),
        );
    }

    /// The cloud reclaimed `node`: recorded, then made anew with a replace-node operation (a
    /// master's program ends as if its server were lost).
    fn reclaimed(&mut self, node: String, ctx: &mut Context<Self>) {
        metrics::counter!(
            crate::model::metrics::RECLAIMS.name,
            "provisioner" => self.run.provisioner.clone(),
        )
        .increment(1);
        let master = self.run.cluster.nodes.first() == Some(&node);
        let (deps, me) = (self.deps.clone(), ctx.address());
        let (run, cluster) = (self.run.key.run.clone(), self.run.cluster_id().to_string());
        let trigger = serde_json::json!({"reclaimed": node});
        let change = resize::heal_replace(&self.run, &node, trigger);
        let act = Act {
            namespace: Some(self.run.key.namespace.clone()),
            ..Act::by_server("run.reclaim", &self.run.key.run)
        };
        if master {
            // The program ran there: it is lost, as with a lost server (what is left of it
            // here is killed; the run's retry policy decides whether it runs again).
            ctx.notify(ProgramNews(
                Event::ProgramLost(format!("the cloud reclaimed the master node {node} (spot)")),
                None,
            ));
            let (deps, run, context) = (self.deps.clone(), self.run.clone(), self.context());
            actix::spawn(async move { launch::kill(&deps, &run, context).await });
        }
        actix::spawn(async move {
            if let Err(e) = record(&deps, &run, &cluster, &node).await {
                tracing::warn!(run.id = %run, error = %e, "cannot record a reclaim");
                return;
            }
            let said = match me.send(ClusterCommand(change, act)).await {
                Ok(Ok(id)) => format!("operation {id} replaces node {node}"),
                Ok(Err(e)) => format!("cannot replace node {node} now: {e}"),
                Err(e) => format!("cannot replace node {node} now: {e}"),
            };
            let _ = crate::runtime::checker::note(&deps, &run, &node, said).await;
        });
    }
}
