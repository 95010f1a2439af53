//! What an operation works on: its planner's one input.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use ebb_spi::Provisioner;

use crate::model::plan::ClusterOperation;
use crate::model::template::Template;

/// What an operation works on.
#[derive(Debug, Clone)]
pub struct OpSpec {
    pub operation: ClusterOperation,
    /// Carry on with the operation of this kind a restart interrupted, instead of a new one.
    pub resume: bool,
    pub run: String,
    /// The run's namespace, where its secure references are resolved.
    pub namespace: String,
    /// The cluster's nodes.
    pub nodes: Vec<String>,
    pub template: Option<Arc<Template>>,
    /// Every node's services (empty without a template).
    pub layout: BTreeMap<String, BTreeSet<String>>,
    /// The config this operation applies, and the one a rollback restores.
    pub config: serde_json::Value,
    pub previous_config: serde_json::Value,
    /// What was asked, as the audit log keeps it.
    pub request: serde_json::Value,
    /// The nodes an expand adds or a shrink removes.
    pub changed: BTreeSet<String>,
    /// The services and nodes a start, stop or restart of services acts on.
    pub selection: crate::model::plan::Selection,
    pub provisioner: Arc<dyn Provisioner>,
    pub context: Arc<ebb_spi::Context>,
    /// Properties some nodes get on top of the context's: their hardware and image types'.
    pub node_properties: BTreeMap<String, ebb_spi::Properties>,
    pub budget: Duration,
    /// Who asked for it: an admin's operation, recorded with the operation and in the audit
    /// log of changes.
    pub act: Option<crate::model::access::Act>,
}

/// What an operation's plan is made from (besides the store's records of the cluster).
#[derive(Debug, Clone, Copy)]
pub struct PlanInput<'a> {
    pub operation: ClusterOperation,
    pub template: Option<&'a Template>,
    pub nodes: &'a [String],
    pub layout: &'a BTreeMap<String, BTreeSet<String>>,
    pub changed: &'a BTreeSet<String>,
    pub selection: &'a crate::model::plan::Selection,
}

impl OpSpec {
    /// What its plan is made from.
    pub fn plan_input(&self) -> PlanInput<'_> {
        PlanInput {
            operation: self.operation,
            template: self.template.as_deref(),
            nodes: &self.nodes,
            layout: &self.layout,
            changed: &self.changed,
            selection: &self.selection,
        }
    }

    /// The context of a task on `node`.
    pub fn context_for(&self, node: &str) -> Arc<ebb_spi::Context> {
        match self.node_properties.get(node).filter(|p| !p.is_empty()) {
            None => Arc::clone(&self.context),
            Some(extra) => {
                let mut ctx = (*self.context).clone();
                ctx.properties.extend(extra.clone());
                Arc::new(ctx)
            }
        }
    }
}
