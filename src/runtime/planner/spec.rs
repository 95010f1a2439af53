//! What an operation works on: its planner's one input.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use ebb_spi::Provisioner;
use ebb_spi::resource::{DEFAULT_RETRY_BUDGET, RETRY_BUDGET};

use crate::model::plan::ClusterOperation;
use crate::model::run::RunRecord;
use crate::model::template::Template;
use crate::rules::resize::Change;
use crate::runtime::deps::Deps;

/// What an operation works on.
#[derive(Debug, Clone)]
pub struct OpSpec {
    pub operation: ClusterOperation,
    /// Carry on with the operation of this kind a restart interrupted, instead of a new one.
    pub resume: bool,
    pub run: String,
    /// The cluster's id: what its resources and services are kept under (the run that made
    /// it).
    pub cluster: String,
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

/// The run an operation is for, as its supervisor has it.
#[derive(Debug)]
pub struct On<'a> {
    pub deps: &'a Deps,
    pub run: &'a RunRecord,
    /// What the run's provisioner calls get (secure references not yet resolved).
    pub context: ebb_spi::Context,
}

impl OpSpec {
    /// What `operation` works on: `on`'s run's cluster as it is, or as `change` makes it;
    /// `resume` carries on with one a restart interrupted. Fails, saying so, when the run's
    /// provisioner is not installed.
    pub fn for_run(
        on: On<'_>,
        operation: ClusterOperation,
        change: Option<&Change>,
        resume: bool,
    ) -> Result<OpSpec, String> {
        let On { deps, run, context } = on;
        let Some(provisioner) = deps.registry.get(&run.provisioner).cloned() else {
            return Err(format!(
                "provisioner '{}' is not installed",
                run.provisioner
            ));
        };
        let properties = run.properties();
        let budget = properties
            .get(RETRY_BUDGET.name)
            .and_then(|v| ebb_spi::parse_duration(v).ok())
            .unwrap_or(DEFAULT_RETRY_BUDGET);
        let previous = run.config();
        let (nodes, layout, config, changed, request) = match change {
            Some(c) => (
                c.nodes.clone(),
                c.layout.clone(),
                c.config.clone(),
                c.changed.clone(),
                c.to_request(),
            ),
            None => (
                run.cluster.nodes.clone(),
                run.layout.clone(),
                previous.clone(),
                Default::default(),
                serde_json::Value::Null,
            ),
        };
        let selection = change.map(|c| c.selection.clone()).unwrap_or_default();
        let types = change.map_or(&run.node_types, |c| &c.node_types);
        let node_properties = match &run.template {
            Some(t) => types
                .iter()
                .map(|(node, ty)| (node.clone(), t.type_properties(&run.provisioner, ty)))
                .collect(),
            None => BTreeMap::new(),
        };
        Ok(OpSpec {
            operation,
            resume,
            run: run.key.run.clone(),
            cluster: run.cluster_id().to_string(),
            namespace: run.key.namespace.clone(),
            nodes,
            template: run.template.clone().map(Arc::new),
            layout,
            config,
            previous_config: previous,
            request,
            changed,
            selection,
            provisioner,
            context: Arc::new(context),
            node_properties,
            budget,
            act: None,
        })
    }

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
