//! Templates in the store: create or replace, get, list, delete, and the built-ins.
//!
//! USER templates live in a namespace; SYSTEM templates under the `system` key space, like
//! SYSTEM profiles. The files in `profiles/templates/*.json` are compiled in and written as
//! SYSTEM templates at every start-up; they cannot be replaced or deleted over the API.

use serde::Deserialize;

use crate::model::access::{Act, Trust};
use crate::model::builtin;
use crate::model::namespace;
use crate::model::plan::Selection;
use crate::model::profile::Scope;
use crate::model::template::{StoredTemplate, Template, TemplateId};
use crate::model::view::{DryRun, PlannedNode};
use crate::service::catalog;
use crate::service::error::ServiceError;
use crate::store::clock::now_secs;
use crate::store::{Read, Store, Table, changes};

fn require(r: &impl Read, id: &TemplateId) -> Result<StoredTemplate, ServiceError> {
    if let Some(ns) = &id.namespace {
        catalog::require_namespace(r, ns)?;
    }
    r.get(Table::Templates, &id.key())?
        .ok_or_else(|| ServiceError::TemplateNotFound(id.to_string()))
}

fn stored(
    id: &TemplateId,
    mut template: Template,
    existing: Option<&StoredTemplate>,
    builtin: bool,
    by: Trust,
) -> StoredTemplate {
    template.name = None;
    let now = now_secs();
    StoredTemplate {
        name: id.name.clone(),
        scope: if id.namespace.is_some() {
            Scope::User
        } else {
            Scope::System
        },
        template,
        created: existing.map_or(now, |e| e.created),
        updated: now,
        builtin,
        written_by: by,
    }
}

/// Creates or replaces template `id` after validating it, written by a caller trusted as
/// `by`.
pub async fn put(
    store: &Store,
    registry: &crate::runtime::registry::Registry,
    (act, by): (Act, Trust),
    id: TemplateId,
    template: Template,
) -> Result<StoredTemplate, ServiceError> {
    id.check()?;
    if let Some(body_name) = &template.name
        && *body_name != id.name
    {
        return Err(ServiceError::invalid(
            "name",
            format!(
                "'{body_name}' does not match the template name '{}' in the path",
                id.name
            ),
        ));
    }
    template.validate()?;
    check_automators(registry, &template)?;
    store
        .write(move |tx| {
            if let Some(ns) = &id.namespace {
                catalog::require_namespace(tx, ns)?;
            }
            let existing: Option<StoredTemplate> = tx.get(Table::Templates, &id.key())?;
            if existing.as_ref().is_some_and(|e| e.builtin) {
                return Err(ServiceError::BuiltinTemplate(id.to_string()));
            }
            let value = stored(&id, template.clone(), existing.as_ref(), false, by);
            tx.put(Table::Templates, &id.key(), &value)?;
            changes::record(tx, &act)?;
            Ok(value)
        })
        .await
}

/// Template `id`.
pub async fn get(store: &Store, id: TemplateId) -> Result<StoredTemplate, ServiceError> {
    id.check()?;
    store.read(move |r| require(r, &id)).await
}

/// The templates of namespace `ns` (SYSTEM ones with `None`, or after them with
/// `include_system`).
pub async fn list(
    store: &Store,
    ns: Option<String>,
    include_system: bool,
) -> Result<Vec<StoredTemplate>, ServiceError> {
    if let Some(ns) = &ns {
        namespace::check_name(ns)?;
    }
    store
        .read(move |r| {
            let prefixes = catalog::scoped_prefixes(r, ns.as_deref(), include_system)?;
            let mut out = Vec::new();
            for prefix in prefixes {
                out.extend(
                    r.scan::<StoredTemplate>(Table::Templates, &prefix)?
                        .into_iter()
                        .map(|(_, t)| t),
                );
            }
            Ok(out)
        })
        .await
}

/// Deletes template `id`; built-ins cannot be deleted.
pub async fn delete(
    store: &Store,
    act: Act,
    id: TemplateId,
) -> Result<StoredTemplate, ServiceError> {
    id.check()?;
    store
        .write(move |tx| {
            let existing = require(tx, &id)?;
            if existing.builtin {
                return Err(ServiceError::BuiltinTemplate(id.to_string()));
            }
            tx.delete(Table::Templates, &id.key());
            changes::record(tx, &act)?;
            Ok(existing)
        })
        .await
}

/// A template named in a request: its name (`SYSTEM:x`, `USER:x`, or `x`: the namespace's,
/// else the SYSTEM one), or the template itself.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum TemplateRef {
    Name(String),
    Inline(Box<Template>),
}

/// The body of `POST /v3/namespaces/{ns}/plan`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(example = serde_json::json!({"template": "spark", "provisioner": "sim", "nodes": 4}))]
pub struct PlanRequest {
    pub template: TemplateRef,
    pub provisioner: String,
    pub nodes: u32,
    #[serde(default = "create")]
    pub operation: crate::model::plan::ClusterOperation,
    pub services: Option<Vec<String>>,
    pub hardware_type: Option<String>,
    pub image_type: Option<String>,
    /// Starting, stopping or restarting services: which services, on which nodes (all if
    /// left out). The plan adds their dependent chains.
    #[serde(default)]
    pub select: Selection,
}

fn create() -> crate::model::plan::ClusterOperation {
    crate::model::plan::ClusterOperation::Create
}

/// Every action names an automator this server has (`shell` or a loaded plugin) and gives
/// it the fields it declares.
pub fn check_automators(
    registry: &crate::runtime::registry::Registry,
    template: &Template,
) -> Result<(), ServiceError> {
    use crate::model::template::Action;
    for (name, service) in &template.services {
        for (kind, action) in &service.actions {
            let Action::Plugin {
                automator, fields, ..
            } = action
            else {
                continue;
            };
            let kind = serde_json::to_value(kind).unwrap_or_default();
            let at = format!(
                "services.{name}.actions.{}",
                kind.as_str().unwrap_or_default()
            );
            let Some(plugin) = registry.automator(automator) else {
                return Err(ServiceError::invalid(
                    format!("{at}.type"),
                    format!(
                        "no automator '{automator}' on this server (it has: {}); GET /v3/plugins lists the plugins",
                        registry.automator_names().join(", ")
                    ),
                ));
            };
            plugin
                .check_fields(fields)
                .map_err(|e| ServiceError::invalid(format!("{at}.{}", e.property), e.message))?;
        }
    }
    Ok(())
}

/// Solves the layout and plans the operation of `request`, touching nothing.
pub async fn dry_run(
    store: &Store,
    registry: &crate::runtime::registry::Registry,
    ns: String,
    request: PlanRequest,
) -> Result<DryRun, ServiceError> {
    namespace::check_name(&ns)?;
    use crate::model::plan::ClusterOperation as Op;
    if matches!(
        request.operation,
        Op::Expand | Op::Shrink | Op::ReplaceNode | Op::Repair
    ) {
        return Err(ServiceError::invalid(
            "operation",
            "expand, shrink, replace-node and repair change a live cluster: plan them against the run with POST .../runs/{run}/cluster/plan",
        ));
    }
    let Some(provisioner) = registry.get(&request.provisioner).cloned() else {
        return Err(ServiceError::invalid(
            "provisioner",
            format!(
                "provisioner '{}' does not exist; GET /v3/provisioners lists them",
                request.provisioner
            ),
        ));
    };
    // Checked before anything is sized by it.
    let max = provisioner.spec().max_nodes();
    if request.nodes > max {
        return Err(ServiceError::invalid(
            "nodes",
            format!(
                "provisioner '{}' allows at most {max} nodes, not {}",
                request.provisioner, request.nodes
            ),
        ));
    }
    let template = match request.template.clone() {
        TemplateRef::Inline(t) => {
            t.validate()?;
            check_automators(registry, &t)?;
            *t
        }
        TemplateRef::Name(name) => {
            let ns = ns.clone();
            store
                .read(move |r| {
                    catalog::require_namespace(r, &ns)?;
                    catalog::resolve_template(r, &ns, &name, Scope::User).map(|(t, _)| t)
                })
                .await?
        }
    };
    // Solving and planning are pure but can take a while on a large cluster: off the HTTP
    // worker, on the blocking pool.
    tokio::task::spawn_blocking(move || plan_dry_run(&*provisioner, &template, request))
        .await
        .map_err(|e| ServiceError::unfinished("the plan", &e))?
}

/// The solving and planning of [`dry_run`].
fn plan_dry_run(
    provisioner: &dyn ebb_spi::Provisioner,
    template: &Template,
    request: PlanRequest,
) -> Result<DryRun, ServiceError> {
    let solved = crate::rules::solver::solve(
        template,
        &crate::rules::solver::Request {
            provisioner: request.provisioner.clone(),
            nodes: request.nodes,
            services: request.services.clone(),
            hardware_type: request.hardware_type.clone(),
            image_type: request.image_type.clone(),
            fixed: Vec::new(),
        },
    )
    .map_err(|e| ServiceError::invalid("template", e.to_string()))?;
    // The names a run's nodes get from this provisioner, so the plan reads as the run will.
    let count = solved.len().to_string();
    let mut names = provisioner.nodes(&ebb_spi::properties([("nodes", count.as_str())]));
    if names.len() != solved.len() {
        names = ebb_spi::resource::node_names(solved.len());
    }
    let layout: Vec<PlannedNode> = names
        .into_iter()
        .zip(solved)
        .map(|(node, layout)| PlannedNode {
            node,
            hardware_type: layout.hardware_type,
            image_type: layout.image_type,
            services: layout.services,
        })
        .collect();
    let nodes: Vec<crate::model::plan::PlanNode> = layout
        .iter()
        .map(|n| crate::model::plan::PlanNode {
            name: n.node.clone(),
            services: n.services.clone(),
        })
        .collect();
    crate::rules::plan::cluster::check_size(request.operation, template, &nodes)
        .map_err(|e| ServiceError::invalid("nodes", e))?;
    check_selection(request.operation, &request.select, &nodes)?;
    let tasks = crate::rules::plan::cluster::plan_selected(
        request.operation,
        template,
        &nodes,
        &Default::default(),
        &request.select,
    );
    let stages = crate::rules::plan::cluster::stages(&tasks);
    Ok(DryRun {
        layout,
        tasks,
        stages,
    })
}

/// Refuses a selection an operation does not take, or one naming a service or node the
/// planned cluster does not have.
fn check_selection(
    operation: crate::model::plan::ClusterOperation,
    select: &Selection,
    nodes: &[crate::model::plan::PlanNode],
) -> Result<(), ServiceError> {
    use crate::model::plan::ClusterOperation as Op;
    if select.is_all() {
        return Ok(());
    }
    if !matches!(
        operation,
        Op::StartServices | Op::StopServices | Op::RestartServices
    ) {
        return Err(ServiceError::invalid(
            "select",
            format!("is not used by '{}'", operation.name()),
        ));
    }
    let max = crate::model::names::MAX_LIST;
    if select.services.len() > max || select.nodes.len() > max {
        return Err(ServiceError::invalid(
            "select",
            format!("names at most {max} services and {max} nodes"),
        ));
    }
    if let Some(n) = select
        .nodes
        .iter()
        .find(|n| !nodes.iter().any(|m| &m.name == *n))
    {
        return Err(ServiceError::invalid(
            "select.nodes",
            format!("'{n}' is not a node of the planned cluster"),
        ));
    }
    for s in &select.services {
        if !nodes
            .iter()
            .any(|n| select.takes(&n.name, s) && n.services.contains(s))
        {
            return Err(ServiceError::invalid(
                "select.services",
                format!("'{s}' runs on none of the nodes selected"),
            ));
        }
    }
    Ok(())
}

/// Writes the built-in templates to the store, keeping their creation times.
pub async fn load_builtin(store: &Store) -> Result<usize, ServiceError> {
    let templates = builtin::templates()?;
    store
        .write(move |tx| {
            let count = templates.len();
            for (id, template) in &templates {
                let existing: Option<StoredTemplate> = tx.get(Table::Templates, &id.key())?;
                let value = stored(
                    id,
                    template.clone(),
                    existing.as_ref(),
                    true,
                    Trust::InstanceAdmin,
                );
                tx.put(Table::Templates, &id.key(), &value)?;
            }
            Ok(count)
        })
        .await
}
