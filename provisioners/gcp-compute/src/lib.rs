//! The `gcp-compute` provisioner: one Compute Engine instance per node, through Google's
//! official Rust SDK (`google-cloud-compute-v1`, only its `instances` and `zone-operations`
//! features).
//!
//! - **Names** are deterministic: `ebb-<run>-<node>` (and `-g<N>` for the replacement a failed
//!   confirm makes, or a node moved to another zone or market), so a node never has two
//!   instances by accident, and "already exists" on insert means an earlier insert got
//!   through: the instance is adopted when its labels say it is this node's.
//! - **Zones:** an instance lives in a zone, so its id is `<zone>/<name>` (an id without a
//!   zone is in the profile's `zone`). `zones` lists where nodes may go, in order; a zone
//!   without room (`ZONE_RESOURCE_POOL_EXHAUSTED`) moves the node to the next. Every lookup
//!   by label is one `instances.aggregatedList` over all zones of the project.
//! - **Spot:** `provisioningModel: SPOT` (or `marketType: spot`, `spot-with-fallback`) makes
//!   workers Spot VMs (`scheduling.provisioningModel=SPOT`, `instanceTerminationAction=DELETE`,
//!   so a preempted VM is gone, and the framework replaces it).
//! - **requestId** is a UUID derived from run, node and generation: a resent insert is
//!   answered with the first one's operation. When that operation had failed (its error
//!   inside the DONE operation), the id is spent and the retry derives the next one from it.
//! - **Labels** carry ebb's tags (`ebb-run`, `ebb-node`, `ebb-server`...), so `find` and the
//!   janitor see what ebb made.
//! - **Fail-safe:** with a profile `timeout`, `scheduling.maxRunDuration` runs out 10 minutes
//!   after the run's deadline and `instanceTerminationAction=DELETE` removes the instance even
//!   if ebb is gone.
//! - **Operations:** an insert waits for its zonal operation; an error inside the DONE
//!   operation fails the step (capacity is retried, quota and bad input are not).

use std::time::{Duration, SystemTime};

use ebb_gcp::{ACCOUNT_KEY, ANONYMOUS, Clients, ENDPOINT, LABELS, classify};
use ebb_spi::capacity::{
    MARKET_TYPE, MAX_NODES as MAX_NODES_PROPERTY, MIN_NODES, PROVISIONING_MODEL, SPOT_RETRIES,
    SPOT_WORKERS_ONLY, ZONES,
};
use ebb_spi::resource::{
    HEAL, HEAL_ATTEMPTS, HEAL_WINDOW, RETRY_BUDGET, TEMPLATE, TEMPLATE_CONFIG, TEMPLATE_SERVICES,
    node_count, node_names,
};
use ebb_spi::{
    Call, Context, Properties, PropertyError, PropertyKind, PropertySpec, ProvisionError,
    Provisioner, ProvisionerSpec, Resource, ResourceKey, ResourceState, SSH_HOST_KEY_CHECKING,
    SSH_KNOWN_HOSTS, SSH_PRIVATE_KEY, SSH_USER, TAG_NODE, TAG_RUN,
};
use google_cloud_compute_v1::client::{Instances, ZoneOperations};
use google_cloud_compute_v1::model;

/// Most nodes one cluster may have.
pub const MAX_NODES: i64 = 256;
/// How long past the run's deadline the cloud deletes an instance on its own.
pub const FAILSAFE_GRACE: Duration = Duration::from_secs(600);
/// How long an insert waits for its operation before leaving the rest to `describe`.
const OPERATION_WAIT: Duration = Duration::from_secs(120);

/// The provisioner's description and properties, as `widgets/gcp-compute.json` shows them.
pub static SPEC: ProvisionerSpec = ProvisionerSpec {
    name: "gcp-compute",
    label: "Google Compute Engine",
    description: "Runs each node of the cluster as a Compute Engine instance, through Google's \
                  official Rust SDK.",
    properties: &[
        PropertySpec::required("projectId", PropertyKind::Text).author_only(),
        PropertySpec::optional("zone", PropertyKind::Text).author_only(),
        ZONES,
        PropertySpec::optional("machineType", PropertyKind::Text),
        PropertySpec::optional("image", PropertyKind::Text),
        PropertySpec::optional(
            "diskSizeGb",
            PropertyKind::Integer {
                min: 10,
                max: 65536,
            },
        ),
        PropertySpec::optional("network", PropertyKind::Text).author_only(),
        PropertySpec::optional("subnet", PropertyKind::Text).author_only(),
        PropertySpec::optional("serviceAccount", PropertyKind::Text).author_only(),
        PropertySpec::optional(
            "nodes",
            PropertyKind::Integer {
                min: 1,
                max: MAX_NODES,
            },
        ),
        MIN_NODES,
        MAX_NODES_PROPERTY,
        PROVISIONING_MODEL,
        MARKET_TYPE,
        SPOT_WORKERS_ONLY,
        SPOT_RETRIES,
        LABELS,
        ACCOUNT_KEY,
        ENDPOINT,
        ANONYMOUS,
        SSH_USER,
        SSH_PRIVATE_KEY,
        SSH_HOST_KEY_CHECKING,
        SSH_KNOWN_HOSTS,
        ebb_spi::SSH_PORT,
        RETRY_BUDGET,
        TEMPLATE,
        TEMPLATE_CONFIG,
        TEMPLATE_SERVICES,
        HEAL,
        HEAL_ATTEMPTS,
        HEAL_WINDOW,
    ],
};

const DEFAULT_MACHINE_TYPE: &str = "e2-medium";
const DEFAULT_IMAGE: &str = "projects/debian-cloud/global/images/family/debian-12";

/// The `gcp-compute` provisioner.
#[derive(Debug, Default)]
pub struct Compute {
    clients: Clients<(Instances, ZoneOperations)>,
}

/// The instance name of node `key`: lower case, at most 63 characters.
pub fn instance_name(key: &ResourceKey) -> String {
    let run: String = key
        .run
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    let node = ebb_gcp::label_value(&key.node).replace('_', "-");
    let suffix = match key.generation {
        0 => String::new(),
        g => format!("-g{g}"),
    };
    let room = 63usize.saturating_sub(4 + 1 + node.len() + suffix.len());
    let run = &run[..run.len().min(room)];
    format!("ebb-{run}-{node}{suffix}")
}

fn project(ctx: &Context) -> Result<&str, ProvisionError> {
    ctx.property("projectId")
        .ok_or_else(|| ProvisionError::fatal("projectId must be set"))
}

/// The zone a create goes to: the one the framework placed it in, else the profile's `zone`,
/// else the first of its `zones`.
fn target_zone(ctx: &Context) -> Result<String, ProvisionError> {
    if let Some(zone) = &ctx.placement.zone {
        return Ok(zone.clone());
    }
    home_zone(ctx).ok_or_else(|| ProvisionError::fatal("zone (or zones) must be set"))
}

/// The profile's `zone`, else the first of its `zones`.
fn home_zone(ctx: &Context) -> Option<String> {
    match ctx.property("zone") {
        Some(zone) => Some(zone.to_string()),
        None => ebb_spi::capacity::zones(&ctx.properties).into_iter().next(),
    }
}

/// The id of instance `name` in `zone`.
pub fn instance_id(zone: &str, name: &str) -> String {
    format!("{zone}/{name}")
}

/// The zone and name an id names; an id without a zone (made before zones) is in the
/// profile's zone.
fn split_id(ctx: &Context, id: &str) -> Result<(String, String), ProvisionError> {
    match id.split_once('/') {
        Some((zone, name)) => Ok((zone.to_string(), name.to_string())),
        None => match home_zone(ctx) {
            Some(zone) => Ok((zone, id.to_string())),
            None => Err(ProvisionError::fatal("zone (or zones) must be set")),
        },
    }
}

/// The region of zone `zone` (`us-central1-a` → `us-central1`).
fn region_of(zone: &str) -> &str {
    zone.rsplit_once('-')
        .map(|(region, _)| region)
        .unwrap_or(zone)
}

/// The moment the fail-safe deletes the node: 10 minutes after the run's deadline.
pub fn failsafe_at(ctx: &Context) -> Option<SystemTime> {
    ctx.deadline.map(|d| d + FAILSAFE_GRACE)
}

impl Compute {
    async fn client(&self, ctx: &Context) -> Result<(Instances, ZoneOperations), ProvisionError> {
        let account = ebb_gcp::account_key(ctx);
        if let Some(c) = self.clients.get(&account) {
            return Ok(c);
        }
        let credentials = ebb_gcp::credentials(ctx)?;
        let mut instances = Instances::builder()
            .with_credentials(credentials.clone())
            .with_retry_policy(google_cloud_gax::retry_policy::NeverRetry);
        let mut operations = ZoneOperations::builder()
            .with_credentials(credentials)
            .with_retry_policy(google_cloud_gax::retry_policy::NeverRetry);
        if let Some(endpoint) = ctx.property(ENDPOINT.name) {
            instances = instances.with_endpoint(endpoint);
            operations = operations.with_endpoint(endpoint);
        }
        let built =
            (
                instances.build().await.map_err(|e| {
                    ProvisionError::fatal(format!("cannot make a Compute client: {e}"))
                })?,
                operations.build().await.map_err(|e| {
                    ProvisionError::fatal(format!("cannot make a Compute client: {e}"))
                })?,
            );
        self.clients.put(&account, built.clone());
        Ok(built)
    }

    fn instance(
        &self,
        ctx: &Context,
        key: &ResourceKey,
        zone: &str,
    ) -> Result<model::Instance, ProvisionError> {
        let mut instance = model::Instance::default();
        instance.name = Some(instance_name(key));
        let machine = ctx.property("machineType").unwrap_or(DEFAULT_MACHINE_TYPE);
        instance.machine_type = Some(if machine.contains('/') {
            machine.to_string()
        } else {
            format!("zones/{zone}/machineTypes/{machine}")
        });
        instance.labels = ebb_gcp::labels(ctx, &ctx.tags(key))?;
        let mut params = model::AttachedDiskInitializeParams::default();
        params.source_image = Some(ctx.property("image").unwrap_or(DEFAULT_IMAGE).to_string());
        params.disk_size_gb = ctx.property("diskSizeGb").and_then(|v| v.parse().ok());
        let mut disk = model::AttachedDisk::default();
        disk.boot = Some(true);
        disk.auto_delete = Some(true);
        disk.initialize_params = Some(params);
        instance.disks = vec![disk];
        let mut nic = model::NetworkInterface::default();
        nic.network = Some(format!(
            "global/networks/{}",
            ctx.property("network").unwrap_or("default")
        ));
        nic.subnetwork = ctx.property("subnet").map(str::to_string);
        let mut nat = model::AccessConfig::default();
        nat.name = Some("External NAT".into());
        nat.r#type = Some(model::access_config::Type::OneToOneNat);
        nic.access_configs = vec![nat];
        instance.network_interfaces = vec![nic];
        if let Some(email) = ctx.property("serviceAccount") {
            let mut sa = model::ServiceAccount::default();
            sa.email = Some(email.to_string());
            sa.scopes = vec!["https://www.googleapis.com/auth/cloud-platform".into()];
            instance.service_accounts = vec![sa];
        }
        instance.scheduling = scheduling(ctx);
        Ok(instance)
    }

    async fn create(&self, ctx: &Context, key: &ResourceKey) -> Result<Resource, ProvisionError> {
        let project = project(ctx)?;
        let zone = target_zone(ctx)?;
        let zone = zone.as_str();
        let (instances, operations) = self.client(ctx).await?;
        let body = self.instance(ctx, key, zone)?;
        let name = instance_name(key);
        let mut request_id = ebb_gcp::request_id("insert", key);
        let mut spent_ids = 0;
        let inserted = loop {
            let sent = instances
                .insert()
                .set_project(project)
                .set_zone(zone)
                .set_request_id(request_id.clone())
                .set_body(body.clone())
                .send()
                .await;
            // An insert answered with an operation that had already failed is a resend of
            // one that failed before: its request id is spent, so the next id is derived
            // from that operation (still deterministic, so a crash here resends it too).
            match &sent {
                Ok(op)
                    if spent_ids < 5
                        && op.status == Some(model::operation::Status::Done)
                        && op.error.is_some() =>
                {
                    spent_ids += 1;
                    let spent = op.name.clone().unwrap_or_default();
                    request_id = ebb_gcp::request_id(&format!("insert after {spent}"), key);
                }
                _ => break sent,
            }
        };
        match inserted {
            Ok(op) => wait(&operations, project, zone, op).await?,
            Err(e) if ebb_gcp::is_conflict(&e) => {
                // An earlier insert got through; adopt the instance if it is this node's.
                let found = self.get(ctx, zone, &name).await?;
                return match found {
                    Some(r) if key.matches(&r.tags) => Ok(self.with_facts(ctx, r)),
                    Some(_) => Err(ProvisionError::fatal(format!(
                        "instance {name} exists but its labels do not name run {} node {}",
                        key.run, key.node
                    ))),
                    None => Err(ProvisionError::retryable(format!(
                        "insert {name}: it exists, but cannot be read yet"
                    ))),
                };
            }
            Err(e) => return Err(classify("instances.insert", &e)),
        }
        match self.get(ctx, zone, &name).await? {
            Some(r) => Ok(self.with_facts(ctx, r)),
            None => Err(ProvisionError::retryable(format!(
                "instances.insert of {name} finished, but the instance is not there"
            ))),
        }
    }

    /// The node's facts: the fail-safe moment and how to reach it over SSH.
    fn with_facts(&self, ctx: &Context, mut r: Resource) -> Resource {
        if let Some(at) = failsafe_at(ctx) {
            r.properties.insert(
                "failsafeAt".into(),
                humantime::format_rfc3339_seconds(at).to_string(),
            );
        }
        ebb_spi::resource::with_ssh(ctx, r)
    }

    async fn get(
        &self,
        ctx: &Context,
        zone: &str,
        name: &str,
    ) -> Result<Option<Resource>, ProvisionError> {
        let project = project(ctx)?;
        let (instances, _) = self.client(ctx).await?;
        match instances
            .get()
            .set_project(project)
            .set_zone(zone)
            .set_instance(name)
            .send()
            .await
        {
            Ok(i) => Ok(resource(&i)),
            Err(e) if ebb_gcp::is_not_found(&e) => Ok(None),
            Err(e) => Err(classify("instances.get", &e)),
        }
    }

    /// The project's instances that `filter` selects, in every zone: one
    /// `instances.aggregatedList` (a page per 500).
    async fn list_filtered(
        &self,
        ctx: &Context,
        filter: String,
    ) -> Result<Vec<Resource>, ProvisionError> {
        let project = project(ctx)?;
        let (instances, _) = self.client(ctx).await?;
        let mut out = Vec::new();
        let mut token = String::new();
        loop {
            let page = instances
                .aggregated_list()
                .set_project(project)
                .set_filter(filter.clone())
                .set_page_token(token.clone())
                .send()
                .await
                .map_err(|e| classify("instances.aggregatedList", &e))?;
            out.extend(
                page.items
                    .values()
                    .flat_map(|scoped| scoped.instances.iter())
                    .filter_map(resource),
            );
            match page.next_page_token {
                Some(t) if !t.is_empty() => token = t,
                _ => return Ok(out),
            }
        }
    }

    async fn find(
        &self,
        ctx: &Context,
        key: &ResourceKey,
    ) -> Result<Option<Resource>, ProvisionError> {
        let filter = format!(
            "labels.ebb-run = \"{}\" AND labels.ebb-node = \"{}\"",
            ebb_gcp::label_value(&key.run),
            ebb_gcp::label_value(&key.node)
        );
        let mut found: Vec<Resource> = self
            .list_filtered(ctx, filter)
            .await?
            .into_iter()
            .filter(|r| key.matches(&r.tags) && r.state != ResourceState::Deleting)
            .collect();
        // The one of this generation first: a failed confirm's instance may still be there.
        let name = instance_name(key);
        found.sort_by_key(|r| r.id.rsplit('/').next() != Some(name.as_str()));
        Ok(found.into_iter().next().map(|r| self.with_facts(ctx, r)))
    }

    async fn delete(&self, ctx: &Context, id: &str) -> Result<(), ProvisionError> {
        let project = project(ctx)?;
        let (zone, name) = split_id(ctx, id)?;
        let (instances, _) = self.client(ctx).await?;
        // No requestId: a delete is idempotent by itself (404 is success), and a spent id
        // would answer every retry with the first attempt's operation.
        match instances
            .delete()
            .set_project(project)
            .set_zone(zone)
            .set_instance(name)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if ebb_gcp::is_not_found(&e) => Ok(()),
            Err(e) => Err(classify("instances.delete", &e)),
        }
    }
}

/// Waits for a zonal operation; an error inside the DONE operation fails the call.
async fn wait(
    operations: &ZoneOperations,
    project: &str,
    zone: &str,
    mut op: model::Operation,
) -> Result<(), ProvisionError> {
    let started = tokio::time::Instant::now();
    loop {
        if op.status == Some(model::operation::Status::Done) {
            return match op.error.as_ref().and_then(|e| e.errors.first()) {
                None => Ok(()),
                Some(err) => Err(operation_error(
                    err.code.as_deref().unwrap_or("UNKNOWN"),
                    err.message.as_deref().unwrap_or(""),
                )),
            };
        }
        if started.elapsed() > OPERATION_WAIT {
            // Still running: the instance is polled by describe from here.
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let Some(name) = op.name.clone() else {
            return Ok(());
        };
        op = operations
            .get()
            .set_project(project)
            .set_zone(zone)
            .set_operation(name)
            .send()
            .await
            .map_err(|e| classify("zoneOperations.get", &e))?;
    }
}

/// An error inside a DONE operation: a zone without room moves the node to the next place;
/// the rate errors are waited out; readiness and internal errors are retried; quota, bad
/// input and permissions are fatal.
pub fn operation_error(code: &str, message: &str) -> ProvisionError {
    let text = format!("{code}: {message}");
    match code {
        _ if code.starts_with("ZONE_RESOURCE_POOL_EXHAUSTED") => {
            ProvisionError::capacity(ebb_spi::CapacityScope::Zone, text)
        }
        "QUOTA_EXCEEDED" => ProvisionError::quota(text),
        "RESOURCE_OPERATION_RATE_EXCEEDED" | "RATE_LIMIT_EXCEEDED" => {
            ProvisionError::throttled(None, text)
        }
        "RESOURCE_NOT_READY" | "INTERNAL_ERROR" => ProvisionError::retryable(text),
        _ => ProvisionError::fatal(text),
    }
}

/// The instance's scheduling: a Spot VM when the framework placed it on spot, and the
/// fail-safe's `maxRunDuration` with a profile `timeout`. Both delete the VM when they end
/// it, so a preempted node is gone rather than stopped.
fn scheduling(ctx: &Context) -> Option<model::Scheduling> {
    use model::scheduling::{InstanceTerminationAction, ProvisioningModel};
    let spot = ctx.placement.market == ebb_spi::Market::Spot;
    let failsafe = failsafe_at(ctx);
    if !spot && failsafe.is_none() {
        return None;
    }
    let mut scheduling = model::Scheduling::default();
    if spot {
        scheduling.provisioning_model = Some(ProvisioningModel::Spot);
        scheduling.automatic_restart = Some(false);
        scheduling.on_host_maintenance = Some(model::scheduling::OnHostMaintenance::Terminate);
    }
    if let Some(at) = failsafe {
        let left = at
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::from_secs(30))
            .max(Duration::from_secs(30));
        let mut max = model::Duration::default();
        max.seconds = Some(left.as_secs() as i64);
        scheduling.max_run_duration = Some(max);
    }
    scheduling.instance_termination_action = Some(InstanceTerminationAction::Delete);
    Some(scheduling)
}

/// An instance as ebb sees it; `None` when it has no name.
fn resource(i: &model::Instance) -> Option<Resource> {
    use model::instance::Status;
    let name = i.name.clone()?;
    let zone = i
        .zone
        .as_deref()
        .map(|z| z.rsplit('/').next().unwrap_or(z).to_string());
    let state = match i.status {
        Some(Status::Running) => ResourceState::Running,
        Some(Status::Provisioning | Status::Staging) | None => ResourceState::Pending,
        _ => ResourceState::Deleting,
    };
    let nic = i.network_interfaces.first();
    let internal = nic.and_then(|n| n.network_ip.clone());
    let external = nic
        .and_then(|n| n.access_configs.first())
        .and_then(|a| a.nat_ip.clone());
    let mut properties = std::collections::BTreeMap::new();
    if let Some(ip) = &internal {
        properties.insert("internalIp".to_string(), ip.clone());
    }
    if let Some(m) = &i.machine_type {
        properties.insert(
            "machineType".to_string(),
            m.rsplit('/').next().unwrap_or(m).to_string(),
        );
    }
    if let Some(z) = &zone {
        properties.insert("zone".to_string(), z.clone());
    }
    let spot = i
        .scheduling
        .as_ref()
        .and_then(|s| s.provisioning_model.as_ref())
        == Some(&model::scheduling::ProvisioningModel::Spot);
    let market = if spot { "spot" } else { "on-demand" };
    properties.insert("market".to_string(), market.to_string());
    Some(Resource {
        id: match &zone {
            Some(z) => instance_id(z, &name),
            None => name,
        },
        state,
        tags: ebb_gcp::tags_of(&i.labels),
        address: external.or(internal),
        properties,
    })
}

impl Provisioner for Compute {
    fn spec(&self) -> &'static ProvisionerSpec {
        &SPEC
    }

    fn validate(&self, properties: &Properties) -> Result<(), PropertyError> {
        ebb_gcp::validate(&SPEC, properties)?;
        let zones = ebb_spi::capacity::zones(properties);
        if zones.is_empty() && !properties.contains_key("zone") {
            return Err(PropertyError::new(
                "zone",
                "must be set (the zone of the instances), or zones (a list of them)",
            ));
        }
        if properties.contains_key("subnet")
            && let Some(other) = zones.iter().find(|z| region_of(z) != region_of(&zones[0]))
        {
            return Err(PropertyError::new(
                ZONES.name,
                format!(
                    "a subnet is in one region: {other} is not in {} as {} is",
                    region_of(&zones[0]),
                    zones[0]
                ),
            ));
        }
        Ok(())
    }

    fn nodes(&self, properties: &Properties) -> Vec<String> {
        node_names(node_count(properties, 1))
    }

    fn create<'a>(&'a self, ctx: &'a Context, key: &'a ResourceKey) -> Call<'a, Resource> {
        Box::pin(Compute::create(self, ctx, key))
    }

    fn find<'a>(&'a self, ctx: &'a Context, key: &'a ResourceKey) -> Call<'a, Option<Resource>> {
        Box::pin(Compute::find(self, ctx, key))
    }

    fn describe<'a>(&'a self, ctx: &'a Context, id: &'a str) -> Call<'a, Option<Resource>> {
        Box::pin(async move {
            let (zone, name) = split_id(ctx, id)?;
            let found = self.get(ctx, &zone, &name).await?;
            Ok(found.map(|r| self.with_facts(ctx, r)))
        })
    }

    fn delete<'a>(&'a self, ctx: &'a Context, id: &'a str) -> Call<'a, ()> {
        Box::pin(Compute::delete(self, ctx, id))
    }

    fn list<'a>(&'a self, ctx: &'a Context) -> Call<'a, Vec<Resource>> {
        Box::pin(async move {
            let all = self
                .list_filtered(ctx, "labels.ebb-run:*".to_string())
                .await?;
            Ok(all
                .into_iter()
                .filter(|r| r.tags.contains_key(TAG_RUN) && r.tags.contains_key(TAG_NODE))
                .collect())
        })
    }

    /// One `instances.aggregatedList` filtered by the run's label, over every zone.
    fn lookup<'a>(&'a self, ctx: &'a Context, run: &'a str) -> Call<'a, Vec<Resource>> {
        Box::pin(async move {
            let filter = format!("labels.ebb-run = \"{}\"", ebb_gcp::label_value(run));
            let all = self.list_filtered(ctx, filter).await?;
            Ok(all
                .into_iter()
                .filter(|r| r.tags.get(TAG_RUN).is_some_and(|v| v == run))
                .filter(|r| r.state != ResourceState::Deleting)
                .map(|r| self.with_facts(ctx, r))
                .collect())
        })
    }

    fn batches_lookups(&self) -> bool {
        true
    }

    /// Compute Engine's documented per-project rate quotas.
    fn call_rates(&self, _: &Properties) -> ebb_spi::CallRates {
        ebb_spi::CallRates::GCE
    }

    /// One project, with one set of credentials, is one account: its rate quotas are the
    /// project's, and a lookup covers all of its zones.
    fn account(&self, properties: &Properties) -> String {
        let get = |k: &str| properties.get(k).map(String::as_str).unwrap_or("");
        format!("{} {}", get("projectId"), get(ENDPOINT.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_deterministic_and_valid() {
        let key = ResourceKey::new("019a2041-3e40-7770-bb8e-0ee8707b44d7", "worker-12");
        let name = instance_name(&key);
        assert_eq!(name, "ebb-019a20413e407770bb8e0ee8707b44d7-worker-12");
        let mut next = key.clone();
        next.generation = 2;
        assert_eq!(instance_name(&next), format!("{name}-g2"));
        assert!(instance_name(&next).len() <= 63);
    }

    #[test]
    fn operation_errors_are_classified() {
        let full = operation_error("ZONE_RESOURCE_POOL_EXHAUSTED", "no room");
        assert_eq!(full.capacity_scope(), Some(ebb_spi::CapacityScope::Zone));
        let full = operation_error("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "no room");
        assert_eq!(full.capacity_scope(), Some(ebb_spi::CapacityScope::Zone));
        assert!(!operation_error("QUOTA_EXCEEDED", "CPUS").retryable);
        assert_eq!(
            operation_error("QUOTA_EXCEEDED", "CPUS").kind,
            ebb_spi::ErrorKind::Quota
        );
        assert_eq!(
            operation_error("RATE_LIMIT_EXCEEDED", "slow down").kind,
            ebb_spi::ErrorKind::Throttled(None)
        );
        assert!(!operation_error("INVALID_FIELD_VALUE", "bad").retryable);
        assert!(
            operation_error("QUOTA_EXCEEDED", "CPUS")
                .message
                .contains("QUOTA_EXCEEDED: CPUS")
        );
    }

    #[test]
    fn validates_its_properties() {
        let ok = ebb_spi::properties([("projectId", "p"), ("zone", "us-central1-a")]);
        assert_eq!(Compute::default().validate(&ok), Ok(()));
        let bad = ebb_spi::properties([("projectId", "p"), ("zone", "z"), ("labels", "ebb-run=x")]);
        assert_eq!(
            Compute::default()
                .validate(&bad)
                .expect_err("refused")
                .property,
            "labels"
        );
        let missing = ebb_spi::properties([("projectId", "p")]);
        assert_eq!(
            Compute::default()
                .validate(&missing)
                .expect_err("refused")
                .property,
            "zone"
        );
        let zones = ebb_spi::properties([("projectId", "p"), ("zones", "us-east1-b, us-east1-c")]);
        assert_eq!(Compute::default().validate(&zones), Ok(()));
        let apart = ebb_spi::properties([
            ("projectId", "p"),
            ("zones", "us-east1-b, europe-west1-b"),
            ("subnet", "regions/us-east1/subnetworks/s"),
        ]);
        let e = Compute::default().validate(&apart).expect_err("refused");
        assert_eq!(e.property, "zones");
        assert!(e.message.contains("europe-west1-b"), "{}", e.message);
        let both = ebb_spi::properties([
            ("projectId", "p"),
            ("zone", "z"),
            ("provisioningModel", "SPOT"),
            ("marketType", "on-demand"),
        ]);
        let e = Compute::default().validate(&both).expect_err("refused");
        assert_eq!(e.property, "provisioningModel");
    }

    #[test]
    fn spot_is_google_spot_and_ids_carry_the_zone() {
        let props = ebb_spi::properties([
            ("projectId", "p"),
            ("zones", "us-east1-b, us-east1-c"),
            ("provisioningModel", "SPOT"),
        ]);
        let workers = Compute::default().placements(&props, false);
        assert_eq!(workers.len(), 2);
        assert!(workers.iter().all(|p| p.market == ebb_spi::Market::Spot));
        let master = Compute::default().placements(&props, true);
        assert!(master.iter().all(|p| p.market == ebb_spi::Market::OnDemand));
        let mut ctx = Context::new(props, std::path::PathBuf::new());
        ctx.placement = workers[1].clone();
        let spot = scheduling(&ctx).expect("spot scheduling");
        assert_eq!(
            spot.provisioning_model,
            Some(model::scheduling::ProvisioningModel::Spot)
        );
        assert_eq!(
            spot.instance_termination_action,
            Some(model::scheduling::InstanceTerminationAction::Delete)
        );
        assert_eq!(target_zone(&ctx).expect("zone"), "us-east1-c");
        assert_eq!(
            split_id(&ctx, "us-east1-c/ebb-r-worker-1").expect("id"),
            ("us-east1-c".to_string(), "ebb-r-worker-1".to_string())
        );
        ctx.placement = ebb_spi::Placement::default();
        assert_eq!(
            split_id(&ctx, "ebb-r-master").expect("id").0,
            "us-east1-b",
            "an id from before zones is in the profile's zone"
        );
        assert!(scheduling(&ctx).is_none(), "on-demand without a timeout");
    }
}
