//! The `gcp-dataproc` provisioner: the whole cluster is one resource, a Dataproc managed
//! cluster, through Google's official Rust SDK (`google-cloud-dataproc-v1`).
//!
//! Its properties are those CDAP users know from CDAP's Dataproc provisioner: `projectId`,
//! `region`, `zone`, `network`, `subnet`, `masterMachineType`, `masterNumNodes`,
//! `workerMachineType`, `workerNumNodes`, `imageVersion`, `serviceAccount` and `idleTTL`;
//! and Dataproc's secondary workers, cheap capacity that scales compute without HDFS:
//! `secondaryWorkerNumNodes` of `secondaryWorkerType` `spot` (the default), `preemptible`
//! or `non-preemptible`. Dataproc itself replaces a preempted secondary worker.
//!
//! - **Name:** `ebb-<run>` (and `-g<N>` for a replacement), so "already exists" on create
//!   means an earlier create got through; the cluster is adopted when its labels say so.
//! - **requestId:** a UUID from run and generation; a resent create is answered with the
//!   first one's operation.
//! - **Fail-safe:** `idleTTL` becomes `lifecycleConfig.idleDeleteTtl`, and a profile
//!   `timeout` becomes `autoDeleteTtl` running out 10 minutes after the run's deadline:
//!   Dataproc deletes the cluster itself even if ebb is gone.
//! - **Failure:** a create whose operation ends in error leaves the cluster in state ERROR,
//!   as Dataproc does; `describe` reports that as a fatal error with Dataproc's detail, and
//!   the cluster (which still exists) is deleted with the rest of the run.
//! - **Endpoint:** Dataproc answers a region only at its regional endpoint
//!   (`https://<region>-dataproc.googleapis.com`), which is used unless `endpoint` is set.

use std::time::{Duration, SystemTime};

use ebb_gcp::{ACCOUNT_KEY, ANONYMOUS, Clients, ENDPOINT, LABELS, classify};
use ebb_spi::resource::RETRY_BUDGET;
use ebb_spi::{
    Call, Context, Properties, PropertyError, PropertyKind, PropertySpec, ProvisionError,
    Provisioner, ProvisionerSpec, Resource, ResourceKey, ResourceState, TAG_RUN,
};
use google_cloud_dataproc_v1::client::ClusterController;
use google_cloud_dataproc_v1::model;

/// How long past the run's deadline Dataproc deletes the cluster on its own.
pub const FAILSAFE_GRACE: Duration = Duration::from_secs(600);

/// The one node a Dataproc run has: the managed cluster.
pub const NODE: &str = "cluster";

/// The provisioner's description and properties, as `widgets/gcp-dataproc.json` shows them.
pub static SPEC: ProvisionerSpec = ProvisionerSpec {
    name: "gcp-dataproc",
    label: "Google Dataproc",
    description: "Runs each program on a Dataproc managed cluster made for the run, through \
                  Google's official Rust SDK.",
    properties: &[
        PropertySpec::required("projectId", PropertyKind::Text).author_only(),
        PropertySpec::required("region", PropertyKind::Text).author_only(),
        PropertySpec::optional("zone", PropertyKind::Text).author_only(),
        PropertySpec::optional("network", PropertyKind::Text).author_only(),
        PropertySpec::optional("subnet", PropertyKind::Text).author_only(),
        PropertySpec::optional("masterMachineType", PropertyKind::Text),
        PropertySpec::optional("masterNumNodes", PropertyKind::OneOf(&["1", "3"])),
        PropertySpec::optional("workerMachineType", PropertyKind::Text),
        PropertySpec::optional(
            "workerNumNodes",
            PropertyKind::Integer { min: 0, max: 1000 },
        ),
        PropertySpec::optional(
            "secondaryWorkerNumNodes",
            PropertyKind::Integer { min: 0, max: 1000 },
        ),
        PropertySpec::optional(
            "secondaryWorkerType",
            PropertyKind::OneOf(&["spot", "preemptible", "non-preemptible"]),
        ),
        PropertySpec::optional("imageVersion", PropertyKind::Text),
        PropertySpec::optional("serviceAccount", PropertyKind::Text).author_only(),
        PropertySpec::optional("idleTTL", PropertyKind::Text),
        LABELS,
        ACCOUNT_KEY,
        ENDPOINT,
        ANONYMOUS,
        RETRY_BUDGET,
    ],
};

const DEFAULT_MACHINE_TYPE: &str = "n1-standard-4";

/// The `gcp-dataproc` provisioner.
#[derive(Debug, Default)]
pub struct Dataproc {
    clients: Clients<ClusterController>,
}

/// The cluster name of run `key`: lower case, at most 51 characters.
pub fn cluster_name(key: &ResourceKey) -> String {
    let run: String = key
        .run
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .take(40)
        .collect();
    match key.generation {
        0 => format!("ebb-{run}"),
        g => format!("ebb-{run}-g{g}"),
    }
}

/// `idleTTL`: minutes (CDAP's unit) or a duration (`30m`, `2h`), at least 10 minutes.
pub fn idle_ttl(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let ttl = match text.parse::<u64>() {
        Ok(minutes) => Duration::from_secs(minutes * 60),
        Err(_) => humantime::parse_duration(text)
            .map_err(|e| format!("'{text}' is not minutes or a duration: {e}"))?,
    };
    if ttl < Duration::from_secs(600) || ttl > Duration::from_secs(14 * 24 * 3600) {
        return Err(format!(
            "'{text}' is outside Dataproc's 10 minutes to 14 days"
        ));
    }
    Ok(ttl)
}

fn location(ctx: &Context) -> Result<(&str, &str), ProvisionError> {
    match (ctx.property("projectId"), ctx.property("region")) {
        (Some(p), Some(r)) => Ok((p, r)),
        _ => Err(ProvisionError::fatal("projectId and region must be set")),
    }
}

fn duration(d: Duration) -> google_cloud_wkt::Duration {
    google_cloud_wkt::Duration::clamp(d.as_secs() as i64, 0)
}

impl Dataproc {
    async fn client(&self, ctx: &Context) -> Result<ClusterController, ProvisionError> {
        let (_, region) = location(ctx)?;
        let account = format!("{}|{region}", ebb_gcp::account_key(ctx));
        if let Some(c) = self.clients.get(&account) {
            return Ok(c);
        }
        let endpoint = match ctx.property(ENDPOINT.name) {
            Some(e) => e.to_string(),
            None => format!("https://{region}-dataproc.googleapis.com"),
        };
        let client = ClusterController::builder()
            .with_credentials(ebb_gcp::credentials(ctx)?)
            .with_retry_policy(google_cloud_gax::retry_policy::NeverRetry)
            .with_endpoint(endpoint)
            .build()
            .await
            .map_err(|e| ProvisionError::fatal(format!("cannot make a Dataproc client: {e}")))?;
        self.clients.put(&account, client.clone());
        Ok(client)
    }

    fn cluster(&self, ctx: &Context, key: &ResourceKey) -> Result<model::Cluster, ProvisionError> {
        let (project, _) = location(ctx)?;
        let group = |machine: &str, count: i32| {
            let mut g = model::InstanceGroupConfig::default();
            g.num_instances = count;
            g.machine_type_uri = ctx
                .property(machine)
                .unwrap_or(DEFAULT_MACHINE_TYPE)
                .to_string();
            g
        };
        let mut gce = model::GceClusterConfig::default();
        if let Some(zone) = ctx.property("zone") {
            gce.zone_uri = zone.to_string();
        }
        if let Some(subnet) = ctx.property("subnet") {
            gce.subnetwork_uri = subnet.to_string();
        } else {
            gce.network_uri = ctx.property("network").unwrap_or("default").to_string();
        }
        if let Some(sa) = ctx.property("serviceAccount") {
            gce.service_account = sa.to_string();
        }
        let mut config = model::ClusterConfig::default();
        config.gce_cluster_config = Some(gce);
        let masters = ctx
            .property("masterNumNodes")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let workers = ctx
            .property("workerNumNodes")
            .and_then(|v| v.parse().ok())
            .unwrap_or(2);
        config.master_config = Some(group("masterMachineType", masters));
        config.worker_config = Some(group("workerMachineType", workers));
        let secondary: i32 = ctx
            .property("secondaryWorkerNumNodes")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if secondary > 0 {
            use model::instance_group_config::Preemptibility;
            let mut g = model::InstanceGroupConfig::default();
            g.num_instances = secondary;
            g.preemptibility = match ctx.property("secondaryWorkerType") {
                Some("preemptible") => Preemptibility::Preemptible,
                Some("non-preemptible") => Preemptibility::NonPreemptible,
                Some(_) | None => Preemptibility::Spot,
            };
            config.secondary_worker_config = Some(g);
        }
        if let Some(version) = ctx.property("imageVersion") {
            let mut software = model::SoftwareConfig::default();
            software.image_version = version.to_string();
            config.software_config = Some(software);
        }
        let mut lifecycle = model::LifecycleConfig::default();
        let mut fail_safe = false;
        if let Some(idle) = ctx.property("idleTTL") {
            let idle =
                idle_ttl(idle).map_err(|e| ProvisionError::fatal(format!("idleTTL: {e}")))?;
            lifecycle.idle_delete_ttl = Some(duration(idle));
            fail_safe = true;
        }
        if let Some(at) = ctx.deadline.map(|d| d + FAILSAFE_GRACE) {
            let left = at
                .duration_since(SystemTime::now())
                .unwrap_or_default()
                .max(Duration::from_secs(600));
            lifecycle = lifecycle.set_auto_delete_ttl(duration(left));
            fail_safe = true;
        }
        if fail_safe {
            config.lifecycle_config = Some(lifecycle);
        }
        let mut cluster = model::Cluster::default();
        cluster.project_id = project.to_string();
        cluster.cluster_name = cluster_name(key);
        cluster.labels = ebb_gcp::labels(ctx, &ctx.tags(key))?;
        cluster.config = Some(config);
        Ok(cluster)
    }

    async fn create(&self, ctx: &Context, key: &ResourceKey) -> Result<Resource, ProvisionError> {
        let (project, region) = location(ctx)?;
        let client = self.client(ctx).await?;
        let cluster = self.cluster(ctx, key)?;
        let name = cluster.cluster_name.clone();
        let sent = client
            .create_cluster()
            .set_project_id(project)
            .set_region(region)
            .set_request_id(ebb_gcp::request_id("create", key))
            .set_cluster(cluster.clone())
            .send()
            .await;
        match sent {
            Ok(_) => {}
            Err(e) if ebb_gcp::is_conflict(&e) => {
                return match self
                    .fetch(ctx, &name)
                    .await
                    .map(|c| c.as_ref().map(resource))
                {
                    Ok(Some(r)) if key.matches(&r.tags) => Ok(r),
                    Ok(Some(_)) => Err(ProvisionError::fatal(format!(
                        "cluster {name} exists but its labels do not name run {}",
                        key.run
                    ))),
                    Ok(None) => Err(ProvisionError::retryable(format!(
                        "create {name}: it exists, but cannot be read yet"
                    ))),
                    Err(e) => Err(e),
                };
            }
            Err(e) => return Err(classify("clusters.create", &e)),
        }
        let mut made = resource(&cluster);
        made.state = ResourceState::Pending;
        Ok(made)
    }

    /// The cluster called `name`, if it exists.
    async fn fetch(
        &self,
        ctx: &Context,
        name: &str,
    ) -> Result<Option<model::Cluster>, ProvisionError> {
        let (project, region) = location(ctx)?;
        let client = self.client(ctx).await?;
        match client
            .get_cluster()
            .set_project_id(project)
            .set_region(region)
            .set_cluster_name(name)
            .send()
            .await
        {
            Ok(c) => Ok(Some(c)),
            Err(e) if ebb_gcp::is_not_found(&e) => Ok(None),
            Err(e) => Err(classify("clusters.get", &e)),
        }
    }

    async fn list_filtered(
        &self,
        ctx: &Context,
        filter: &str,
    ) -> Result<Vec<model::Cluster>, ProvisionError> {
        let (project, region) = location(ctx)?;
        let client = self.client(ctx).await?;
        let mut out = Vec::new();
        let mut token = String::new();
        loop {
            let page = client
                .list_clusters()
                .set_project_id(project)
                .set_region(region)
                .set_filter(filter)
                .set_page_token(token.clone())
                .send()
                .await
                .map_err(|e| classify("clusters.list", &e))?;
            out.extend(page.clusters);
            if page.next_page_token.is_empty() {
                return Ok(out);
            }
            token = page.next_page_token;
        }
    }

    async fn describe(
        &self,
        ctx: &Context,
        name: &str,
    ) -> Result<Option<Resource>, ProvisionError> {
        let Some(cluster) = self.fetch(ctx, name).await? else {
            return Ok(None);
        };
        if let Some(status) = &cluster.status
            && matches!(
                status.state,
                model::cluster_status::State::Error
                    | model::cluster_status::State::ErrorDueToUpdate
            )
        {
            return Err(ProvisionError::fatal(format!(
                "cluster {name} is in state ERROR: {}",
                status.detail
            )));
        }
        Ok(Some(resource(&cluster)))
    }

    async fn delete(&self, ctx: &Context, name: &str) -> Result<(), ProvisionError> {
        let (project, region) = location(ctx)?;
        let client = self.client(ctx).await?;
        match client
            .delete_cluster()
            .set_project_id(project)
            .set_region(region)
            .set_cluster_name(name)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if ebb_gcp::is_not_found(&e) => Ok(()),
            Err(e) => Err(classify("clusters.delete", &e)),
        }
    }
}

/// A cluster as ebb sees it: its master's name is the address, its shape the facts.
fn resource(c: &model::Cluster) -> Resource {
    use model::cluster_status::State;
    let state = match c.status.as_ref().map(|s| &s.state) {
        Some(State::Running) | Some(State::Updating) => ResourceState::Running,
        Some(State::Deleting | State::Stopping | State::Stopped) => ResourceState::Deleting,
        _ => ResourceState::Pending,
    };
    let mut properties = std::collections::BTreeMap::new();
    let config = c.config.as_ref();
    let master = config.and_then(|c| c.master_config.as_ref());
    let workers = config.and_then(|c| c.worker_config.as_ref());
    if let Some(m) = master {
        properties.insert("masterMachineType".to_string(), m.machine_type_uri.clone());
        properties.insert("masterNodes".to_string(), m.instance_names.join(","));
    }
    if let Some(w) = workers {
        properties.insert("workerMachineType".to_string(), w.machine_type_uri.clone());
        properties.insert("workerNodes".to_string(), w.instance_names.join(","));
        properties.insert("workerNumNodes".to_string(), w.num_instances.to_string());
    }
    if let Some(s) = config.and_then(|c| c.secondary_worker_config.as_ref()) {
        properties.insert(
            "secondaryWorkerNodes".to_string(),
            s.instance_names.join(","),
        );
        properties.insert(
            "secondaryWorkerNumNodes".to_string(),
            s.num_instances.to_string(),
        );
        let kind = match s.preemptibility.name() {
            Some("SPOT") => "spot",
            Some("NON_PREEMPTIBLE") => "non-preemptible",
            Some(_) | None => "preemptible",
        };
        properties.insert("secondaryWorkerType".to_string(), kind.to_string());
    }
    if !c.cluster_uuid.is_empty() {
        properties.insert("clusterUuid".to_string(), c.cluster_uuid.clone());
    }
    if let Some(ttl) = config
        .and_then(|c| c.lifecycle_config.as_ref())
        .and_then(|l| l.auto_delete_ttl())
    {
        properties.insert("autoDeleteTtl".to_string(), format!("{}s", ttl.seconds()));
    }
    Resource {
        id: c.cluster_name.clone(),
        state,
        tags: ebb_gcp::tags_of(&c.labels),
        address: master.and_then(|m| m.instance_names.first().cloned()),
        properties,
    }
}

impl Provisioner for Dataproc {
    fn spec(&self) -> &'static ProvisionerSpec {
        &SPEC
    }

    fn validate(&self, properties: &Properties) -> Result<(), PropertyError> {
        ebb_gcp::validate(&SPEC, properties)?;
        if let Some(text) = properties.get("idleTTL") {
            idle_ttl(text).map_err(|e| PropertyError::new("idleTTL", e))?;
        }
        Ok(())
    }

    fn nodes(&self, _: &Properties) -> Vec<String> {
        vec![NODE.to_string()]
    }

    fn max_nodes(&self, _: &Properties) -> u32 {
        1
    }

    fn create<'a>(&'a self, ctx: &'a Context, key: &'a ResourceKey) -> Call<'a, Resource> {
        Box::pin(Dataproc::create(self, ctx, key))
    }

    fn find<'a>(&'a self, ctx: &'a Context, key: &'a ResourceKey) -> Call<'a, Option<Resource>> {
        Box::pin(async move {
            let filter = format!("labels.ebb-run = {}", ebb_gcp::label_value(&key.run));
            let mut found: Vec<Resource> = self
                .list_filtered(ctx, &filter)
                .await?
                .iter()
                .map(resource)
                .filter(|r| key.matches(&r.tags) && r.state != ResourceState::Deleting)
                .collect();
            found.sort_by_key(|r| r.id != cluster_name(key));
            Ok(found.into_iter().next())
        })
    }

    fn describe<'a>(&'a self, ctx: &'a Context, id: &'a str) -> Call<'a, Option<Resource>> {
        Box::pin(Dataproc::describe(self, ctx, id))
    }

    fn delete<'a>(&'a self, ctx: &'a Context, id: &'a str) -> Call<'a, ()> {
        Box::pin(Dataproc::delete(self, ctx, id))
    }

    fn list<'a>(&'a self, ctx: &'a Context) -> Call<'a, Vec<Resource>> {
        Box::pin(async move {
            let all = self.list_filtered(ctx, "labels.ebb-run = *").await?;
            Ok(all
                .iter()
                .map(resource)
                .filter(|r| r.tags.contains_key(TAG_RUN))
                .collect())
        })
    }

    fn account(&self, properties: &Properties) -> String {
        let get = |k: &str| properties.get(k).map(String::as_str).unwrap_or("");
        format!(
            "{}/{} {}",
            get("projectId"),
            get("region"),
            get(ENDPOINT.name)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_deterministic_and_short() {
        let key = ResourceKey::new("019a2041-3e40-7770-bb8e-0ee8707b44d7", NODE);
        assert_eq!(cluster_name(&key), "ebb-019a20413e407770bb8e0ee8707b44d7");
        let mut next = key.clone();
        next.generation = 1;
        assert!(cluster_name(&next).ends_with("-g1"));
        assert!(cluster_name(&next).len() <= 51);
    }

    #[test]
    fn idle_ttl_takes_minutes_or_durations() {
        assert_eq!(idle_ttl("30"), Ok(Duration::from_secs(1800)));
        assert_eq!(idle_ttl("2h"), Ok(Duration::from_secs(7200)));
        assert!(idle_ttl("5").is_err());
        assert!(idle_ttl("soon").is_err());
    }

    #[test]
    fn validates_its_properties() {
        let ok = ebb_spi::properties([
            ("projectId", "p"),
            ("region", "us-central1"),
            ("idleTTL", "30"),
        ]);
        assert_eq!(Dataproc::default().validate(&ok), Ok(()));
        for (k, v) in [
            ("idleTTL", "1"),
            ("masterNumNodes", "2"),
            ("workerNumNodes", "-1"),
        ] {
            let mut bad = ok.clone();
            bad.insert(k.to_string(), v.to_string());
            assert_eq!(
                Dataproc::default()
                    .validate(&bad)
                    .expect_err("refused")
                    .property,
                k
            );
        }
    }
}
