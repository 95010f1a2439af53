//! The layout of a start with a template: solved on the blocking pool, outside the store's
//! writer, and checked against the provisioner and the plan's bounds.

use std::collections::BTreeMap;

use super::{Layout, Resolved};
use crate::service::error::ServiceError;

/// Solves the layout of what a start resolved to, on the blocking pool (never inside a
/// store write).
pub(super) async fn solve_outside(
    registry: &std::sync::Arc<crate::runtime::registry::Registry>,
    resolved: Resolved,
) -> Result<(Resolved, Layout), ServiceError> {
    let r = std::sync::Arc::clone(registry);
    tokio::task::spawn_blocking(move || {
        solve_layout(&r, &resolved).map(|layout| (resolved, layout))
    })
    .await
    .map_err(|e| ServiceError::unfinished("the layout's solution", &e))?
}

/// Solves the template's layout for the run's nodes and checks that every node's types give
/// the provisioner valid properties and that the plan stays within bounds. Pure, and possibly
/// slow: called on the blocking pool, never inside a store write.
fn solve_layout(
    registry: &crate::runtime::registry::Registry,
    resolved: &Resolved,
) -> Result<Layout, ServiceError> {
    let Some(template) = &resolved.template else {
        return Ok((BTreeMap::new(), BTreeMap::new()));
    };
    let provisioner_name = &resolved.provisioner;
    let provisioner = registry
        .get(provisioner_name)
        .ok_or_else(|| ServiceError::ProvisionerNotFound(provisioner_name.clone()))?;
    let map = crate::model::property::by_name(&resolved.properties);
    let nodes = &resolved.nodes;
    let solved = crate::rules::solver::solve(
        template,
        &crate::rules::solver::Request {
            provisioner: provisioner_name.clone(),
            nodes: nodes.len() as u32,
            ..Default::default()
        },
    )
    .map_err(|e| ServiceError::invalid("template", e.to_string()))?;
    // A node gets its hardware and image type's properties on top of the profile's: the
    // provisioner must accept them too (checked once per pair of types).
    let mut checked = std::collections::BTreeSet::new();
    for l in &solved {
        if !checked.insert((&l.hardware_type, &l.image_type)) {
            continue;
        }
        let types = crate::model::template::NodeTypes {
            hardware_type: l.hardware_type.clone(),
            image_type: l.image_type.clone(),
        };
        let given = template.type_properties(provisioner_name, &types);
        // A template trusted less than the profile's author may not move what only the
        // author decides (an endpoint, a subnet, credentials) through its node types.
        let template_author = resolved.authors.template.as_ref().map(|(_, t)| *t);
        if let Some(author) = template_author
            && author < resolved.authors.profile
            && let Some(name) = given.keys().find(|k| provisioner.spec().author_only(k))
        {
            return Err(ServiceError::invalid(
                "template",
                format!(
                    "hardware type '{}' with image type '{}' sets property '{name}', which only the author of {} ({}) may set; the template was written by a {author}",
                    types.hardware_type,
                    types.image_type,
                    resolved.authors.profile_id,
                    resolved.authors.profile
                ),
            ));
        }
        let mut merged = map.clone();
        merged.extend(given);
        provisioner.validate(&merged).map_err(|e| {
            ServiceError::invalid(
                "template",
                format!(
                    "hardware type '{}' with image type '{}' gives {provisioner_name} a bad property '{}': {}",
                    types.hardware_type, types.image_type, e.property, e.message
                ),
            )
        })?;
    }
    let plan_nodes: Vec<crate::model::plan::PlanNode> = nodes
        .iter()
        .zip(&solved)
        .map(|(name, l)| crate::model::plan::PlanNode {
            name: name.clone(),
            services: l.services.clone(),
        })
        .collect();
    crate::rules::plan::cluster::check_size(
        crate::model::plan::ClusterOperation::Create,
        template,
        &plan_nodes,
    )
    .map_err(|e| ServiceError::invalid("template", e))?;
    let node_types = nodes
        .iter()
        .cloned()
        .zip(solved.iter().map(|l| crate::model::template::NodeTypes {
            hardware_type: l.hardware_type.clone(),
            image_type: l.image_type.clone(),
        }))
        .collect();
    let layout = nodes
        .iter()
        .cloned()
        .zip(solved.into_iter().map(|l| l.services))
        .collect();
    Ok((layout, node_types))
}
