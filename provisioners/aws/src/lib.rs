//! The `aws-ec2` provisioner: one EC2 instance per node, on the official AWS SDK for Rust.
//!
//! Each call is one EC2 request and keeps no state of its own; the framework persists every
//! resource's lifecycle around it. What makes a resent or resumed create safe:
//! - every instance carries ebb's tags (server, namespace, profile, run, node), and `find`
//!   looks a node up by them before any create is repeated;
//! - `RunInstances` carries a `ClientToken` derived from the run, the node and its
//!   generation ([`launch::client_token`]), so EC2 itself answers a resend with the first
//!   instance.
//!
//! Lookups of many nodes share one `DescribeInstances` per cluster ([`batch`]). With a
//! profile `timeout`, instances are launched to terminate themselves after it
//! ([`launch::failsafe`]), so a cluster outlives neither its profile nor a dead ebb.

pub mod batch;
pub mod error;
pub mod launch;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use aws_sdk_ec2::Client;
use aws_sdk_ec2::config::{Credentials, Region};
use aws_sdk_ec2::types::{
    Filter, Instance, InstanceStateName, InstanceType, ResourceType, ShutdownBehavior, Tag,
    TagSpecification,
};
use ebb_spi::capacity::{
    MARKET_TYPE, MAX_NODES, MAX_SPOT_PRICE, MIN_NODES, SPOT_RETRIES, SPOT_WORKERS_ONLY, ZONES,
};
use ebb_spi::resource::{
    HEAL, HEAL_ATTEMPTS, HEAL_WINDOW, RETRY_BUDGET, TEMPLATE, TEMPLATE_CONFIG, TEMPLATE_SERVICES,
    node_count, node_names,
};
use ebb_spi::{
    Call, Context, Properties, PropertyError, PropertyKind, PropertySpec, ProvisionError,
    Provisioner, ProvisionerSpec, Resource, ResourceKey, ResourceState, TAG_NODE, TAG_RUN, Tags,
};

use batch::{Coalescer, Fetch};

/// The provisioner's description and properties, as the widget in `widgets/aws-ec2.json`
/// shows them.
pub static SPEC: ProvisionerSpec = ProvisionerSpec {
    name: "aws-ec2",
    label: "Amazon EC2",
    description: "One EC2 instance per node, tagged with the run and node, created \
                  idempotently and terminated when the run is done. Works with any \
                  EC2-compatible endpoint.",
    properties: &[
        PropertySpec::optional("region", PropertyKind::Text).author_only(),
        PropertySpec::optional("accessKeyId", PropertyKind::Text).author_only(),
        PropertySpec::secret("secretAccessKey", PropertyKind::Text),
        PropertySpec::optional("endpointUrl", PropertyKind::Text).author_only(),
        PropertySpec::optional("imageId", PropertyKind::Text),
        PropertySpec::optional("instanceType", PropertyKind::Text),
        PropertySpec::optional("subnetId", PropertyKind::Text).author_only(),
        PropertySpec::optional("securityGroupIds", PropertyKind::Text).author_only(),
        PropertySpec::optional("keyName", PropertyKind::Text).author_only(),
        ebb_spi::SSH_USER,
        ebb_spi::SSH_PRIVATE_KEY,
        ebb_spi::SSH_HOST_KEY_CHECKING,
        ebb_spi::SSH_KNOWN_HOSTS,
        ebb_spi::SSH_PORT,
        PropertySpec::optional("tags", PropertyKind::Text),
        PropertySpec::optional("nodes", PropertyKind::Integer { min: 1, max: 1_000 }),
        ZONES,
        PropertySpec::optional("zoneSubnets", PropertyKind::Text).author_only(),
        MARKET_TYPE,
        SPOT_WORKERS_ONLY,
        SPOT_RETRIES,
        MAX_SPOT_PRICE,
        MIN_NODES,
        MAX_NODES,
        RETRY_BUDGET,
        TEMPLATE,
        TEMPLATE_CONFIG,
        TEMPLATE_SERVICES,
        HEAL,
        HEAL_ATTEMPTS,
        HEAL_WINDOW,
    ],
};

/// The instance type when a profile names none.
pub const DEFAULT_INSTANCE_TYPE: &str = "t3.micro";

/// Instance states a live node may be in (`shutting-down` and `terminated` are gone).
const LIVE: [&str; 4] = ["pending", "running", "stopping", "stopped"];

/// How long a lookup waits for others to share its call.
const GATHER: Duration = Duration::from_millis(25);

/// EC2 takes up to 200 values in one filter.
const FILTER_VALUES: usize = 200;

/// Where a profile's calls go and as whom. Its `Debug` hides the secret.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Account {
    region: Option<String>,
    endpoint: Option<String>,
    keys: Option<(String, String)>,
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label())
    }
}

impl Account {
    fn of(properties: &Properties) -> Self {
        let get = |name: &str| {
            properties
                .get(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        Self {
            region: get("region"),
            endpoint: get("endpointUrl"),
            keys: get("accessKeyId").zip(get("secretAccessKey")),
        }
    }

    /// Names the account without its secret.
    fn label(&self) -> String {
        format!(
            "region={} endpoint={} accessKeyId={}",
            self.region.as_deref().unwrap_or("(environment)"),
            self.endpoint.as_deref().unwrap_or("(AWS)"),
            self.keys
                .as_ref()
                .map_or("(credential chain)", |(id, _)| id.as_str()),
        )
    }

    async fn client(&self) -> Result<Client, ProvisionError> {
        let timeouts = aws_config::timeout::TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(10))
            .operation_attempt_timeout(Duration::from_secs(60))
            .build();
        // ebb retries with its own budget and records each try, so the SDK makes one.
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .timeout_config(timeouts);
        if let Some(region) = &self.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some((id, secret)) = &self.keys {
            loader = loader.credentials_provider(Credentials::new(
                id.clone(),
                secret.clone(),
                None,
                None,
                "ebb-profile",
            ));
        }
        if let Some(url) = &self.endpoint {
            loader = loader.endpoint_url(url.clone());
        }
        let config = loader.load().await;
        if config.region().is_none() {
            return Err(ProvisionError::fatal(
                "property 'region': not set, and the AWS environment names no region",
            ));
        }
        Ok(Client::new(&config))
    }
}

/// The `aws-ec2` provisioner. It keeps one SDK client per account and coalesces lookups;
/// neither is state that must survive a restart.
#[derive(Debug)]
pub struct Ec2 {
    clients: Mutex<HashMap<Account, Client>>,
    /// Lookups of instances by id, grouped per account.
    by_id: Coalescer<Resource>,
    /// Lookups of a run's nodes by tag, grouped per account and run.
    by_node: Coalescer<Resource>,
}

impl Default for Ec2 {
    fn default() -> Self {
        Self {
            clients: Mutex::default(),
            by_id: Coalescer::new(GATHER),
            by_node: Coalescer::new(GATHER),
        }
    }
}

impl Ec2 {
    async fn client(&self, ctx: &Context) -> Result<(Account, Client), ProvisionError> {
        let account = Account::of(&ctx.properties);
        let cached = self
            .clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&account)
            .cloned();
        if let Some(client) = cached {
            return Ok((account, client));
        }
        let client = account.client().await?;
        self.clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(account.clone(), client.clone());
        Ok((account, client))
    }

    async fn create(&self, ctx: &Context, key: &ResourceKey) -> Result<Resource, ProvisionError> {
        let (_, client) = self.client(ctx).await?;
        let image = ctx.property("imageId").ok_or_else(|| {
            ProvisionError::fatal(
                "property 'imageId': not set (set it in the profile, or through the template's \
                 image type)",
            )
        })?;
        let instance_type = ctx
            .property("instanceType")
            .unwrap_or(DEFAULT_INSTANCE_TYPE);
        let mut tags = ctx.tags(key);
        if let Some(extra) = ctx.property("tags") {
            let extra = launch::extra_tags(extra)
                .map_err(|e| ProvisionError::fatal(format!("property 'tags': {e}")))?;
            tags.extend(extra);
        }
        tags.entry("Name".to_string())
            .or_insert_with(|| launch::instance_name(key));
        let spec = TagSpecification::builder()
            .resource_type(ResourceType::Instance)
            .set_tags(Some(
                tags.iter()
                    .map(|(k, v)| Tag::builder().key(k).value(v).build())
                    .collect(),
            ))
            .build();
        // Where the framework asked for it: a zone (its subnet, when the profile maps one),
        // and a market.
        let zone = ctx.placement.zone.as_deref();
        let subnet = match zone {
            Some(zone) => {
                launch::zone_subnets(ctx.property("zoneSubnets").unwrap_or("")).remove(zone)
            }
            None => ctx.property("subnetId").map(str::to_string),
        };
        let placement = zone.filter(|_| subnet.is_none()).map(|zone| {
            aws_sdk_ec2::types::Placement::builder()
                .availability_zone(zone)
                .build()
        });
        let market = (ctx.placement.market == ebb_spi::Market::Spot)
            .then(|| launch::spot_options(ctx.property("maxSpotPrice")));
        let mut request = client
            .run_instances()
            .image_id(image)
            .instance_type(InstanceType::from(instance_type))
            .min_count(1)
            .max_count(1)
            .client_token(launch::client_token(key))
            .tag_specifications(spec)
            .set_subnet_id(subnet)
            .set_placement(placement)
            .set_instance_market_options(market)
            .set_key_name(ctx.property("keyName").map(str::to_string))
            .set_security_group_ids(ctx.property("securityGroupIds").map(list));
        let mut failsafe_at = None;
        if let Some(deadline) = ctx.deadline {
            let (script, at) = launch::failsafe(deadline);
            request = request
                .instance_initiated_shutdown_behavior(ShutdownBehavior::Terminate)
                .user_data(aws_smithy_types::base64::encode(script));
            failsafe_at = Some(at);
        }
        let out = request
            .send()
            .await
            .map_err(|e| error::classify("RunInstances", &e))?;
        let mut resource =
            out.instances().iter().find_map(resource).ok_or_else(|| {
                ProvisionError::retryable("RunInstances answered with no instance")
            })?;
        if let Some(at) = failsafe_at {
            resource.properties.insert(
                "failsafeAt".into(),
                humantime::format_rfc3339_seconds(at).to_string(),
            );
        }
        Ok(ebb_spi::resource::with_ssh(ctx, resource))
    }

    async fn find(
        &self,
        ctx: &Context,
        key: &ResourceKey,
    ) -> Result<Option<Resource>, ProvisionError> {
        let (account, client) = self.client(ctx).await?;
        let run = key.run.clone();
        let fetch: Fetch<Resource> = Box::new(move |_nodes| {
            Box::pin(async move {
                let filters = vec![
                    filter(&format!("tag:{TAG_RUN}"), [run]),
                    filter("instance-state-name", LIVE),
                ];
                let mut by_node: HashMap<String, Resource> = HashMap::new();
                for r in describe(&client, filters).await? {
                    let Some(node) = r.tags.get(TAG_NODE).cloned() else {
                        continue;
                    };
                    // Two instances for one node cannot come from ebb's creates; keep the
                    // first launched and leave the other to the janitor.
                    let keep = by_node
                        .get(&node)
                        .is_none_or(|k| launched(&r) < launched(k));
                    if keep {
                        by_node.insert(node, r);
                    }
                }
                Ok(by_node)
            })
        });
        let group = format!("{}|run={}", account.label(), key.run);
        self.by_node.get(&group, &key.node, fetch).await
    }

    async fn describe(&self, ctx: &Context, id: &str) -> Result<Option<Resource>, ProvisionError> {
        let (account, client) = self.client(ctx).await?;
        let fetch: Fetch<Resource> = Box::new(move |ids: Vec<String>| {
            Box::pin(async move {
                let mut found = HashMap::new();
                for chunk in ids.chunks(FILTER_VALUES) {
                    let filters = vec![filter("instance-id", chunk.iter().cloned())];
                    for r in describe(&client, filters).await? {
                        found.insert(r.id.clone(), r);
                    }
                }
                Ok(found)
            })
        });
        self.by_id.get(&account.label(), id, fetch).await
    }

    async fn delete(&self, ctx: &Context, id: &str) -> Result<(), ProvisionError> {
        let (_, client) = self.client(ctx).await?;
        match client.terminate_instances().instance_ids(id).send().await {
            Ok(_) => Ok(()),
            Err(e) if error::is_not_found(&e) => Ok(()),
            Err(e) => Err(error::classify("TerminateInstances", &e)),
        }
    }

    async fn list(&self, ctx: &Context) -> Result<Vec<Resource>, ProvisionError> {
        let (_, client) = self.client(ctx).await?;
        let filters = vec![
            filter("tag-key", [TAG_RUN]),
            filter("instance-state-name", LIVE),
        ];
        describe(&client, filters).await
    }
}

/// Every instance matching `filters`, through all pages; terminated ones are left out.
async fn describe(client: &Client, filters: Vec<Filter>) -> Result<Vec<Resource>, ProvisionError> {
    let mut pages = client
        .describe_instances()
        .set_filters(Some(filters))
        .into_paginator()
        .items()
        .send();
    let mut found = Vec::new();
    while let Some(reservation) = pages.next().await {
        let reservation = reservation.map_err(|e| error::classify("DescribeInstances", &e))?;
        found.extend(reservation.instances().iter().filter_map(resource));
    }
    Ok(found)
}

fn filter<S: Into<String>>(name: &str, values: impl IntoIterator<Item = S>) -> Filter {
    Filter::builder()
        .name(name)
        .set_values(Some(values.into_iter().map(Into::into).collect()))
        .build()
}

/// A comma-separated property as a list.
fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .collect()
}

fn launched(r: &Resource) -> (&str, &str) {
    (
        r.properties.get("launchTime").map_or("", String::as_str),
        r.id.as_str(),
    )
}

/// An instance as ebb sees it; `None` once it is terminated.
fn resource(i: &Instance) -> Option<Resource> {
    let id = i.instance_id()?.to_string();
    let state = match i.state().and_then(|s| s.name()) {
        Some(InstanceStateName::Running) => ResourceState::Running,
        Some(InstanceStateName::ShuttingDown) => ResourceState::Deleting,
        Some(InstanceStateName::Terminated) => return None,
        // Pending, or stopped behind ebb's back: not ready, and not going away by itself.
        _ => ResourceState::Pending,
    };
    let tags: Tags = i
        .tags()
        .iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
        .collect();
    let mut properties = std::collections::BTreeMap::new();
    let mut fact = |name: &str, value: Option<&str>| {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            properties.insert(name.to_string(), v.to_string());
        }
    };
    fact("instanceId", Some(&id));
    fact("instanceType", i.instance_type().map(|t| t.as_str()));
    fact("imageId", i.image_id());
    fact("privateIp", i.private_ip_address());
    fact("publicIp", i.public_ip_address());
    fact("privateDnsName", i.private_dns_name());
    fact("publicDnsName", i.public_dns_name());
    let zone = i.placement().and_then(|p| p.availability_zone());
    fact("availabilityZone", zone);
    fact("zone", zone);
    let spot = i.instance_lifecycle().map(|l| l.as_str()) == Some("spot");
    fact("market", Some(if spot { "spot" } else { "on-demand" }));
    let launch_time = i
        .launch_time()
        .and_then(|t| t.fmt(aws_smithy_types::date_time::Format::DateTime).ok());
    fact("launchTime", launch_time.as_deref());
    let address = i
        .public_ip_address()
        .or(i.private_ip_address())
        .map(str::to_string);
    Some(Resource {
        id,
        state,
        tags,
        address,
        properties,
    })
}

impl Provisioner for Ec2 {
    fn spec(&self) -> &'static ProvisionerSpec {
        &SPEC
    }

    fn validate(&self, properties: &Properties) -> Result<(), PropertyError> {
        ebb_spi::validate_properties(&SPEC, properties)?;
        let has = |name: &str| properties.contains_key(name);
        match (has("accessKeyId"), has("secretAccessKey")) {
            (true, false) => {
                return Err(PropertyError::new(
                    "secretAccessKey",
                    "must be set with accessKeyId (or leave both unset to use the AWS \
                     credential chain)",
                ));
            }
            (false, true) => {
                return Err(PropertyError::new(
                    "accessKeyId",
                    "must be set with secretAccessKey (or leave both unset to use the AWS \
                     credential chain)",
                ));
            }
            _ => {}
        }
        if let Some(url) = properties.get("endpointUrl")
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(PropertyError::new(
                "endpointUrl",
                format!("'{url}' is not an http:// or https:// URL"),
            ));
        }
        if let Some(tags) = properties.get("tags") {
            launch::extra_tags(tags).map_err(|e| PropertyError::new("tags", e))?;
        }
        if let Some(groups) = properties.get("securityGroupIds")
            && list(groups).is_empty()
        {
            return Err(PropertyError::new(
                "securityGroupIds",
                "must list at least one security group id (sg-...), separated by commas",
            ));
        }
        let zones = ebb_spi::capacity::zones(properties);
        if !zones.is_empty() && has("subnetId") {
            return Err(PropertyError::new(
                "subnetId",
                "a subnet is in one zone: with zones, give each zone's subnet in zoneSubnets",
            ));
        }
        if let Some(pairs) = properties.get("zoneSubnets") {
            launch::check_zone_subnets(pairs, &zones)
                .map_err(|e| PropertyError::new("zoneSubnets", e))?;
        }
        Ok(())
    }

    fn nodes(&self, properties: &Properties) -> Vec<String> {
        node_names(node_count(properties, 1))
    }

    fn create<'a>(&'a self, ctx: &'a Context, key: &'a ResourceKey) -> Call<'a, Resource> {
        Box::pin(self.create(ctx, key))
    }

    fn find<'a>(&'a self, ctx: &'a Context, key: &'a ResourceKey) -> Call<'a, Option<Resource>> {
        Box::pin(async move {
            let found = self.find(ctx, key).await?;
            Ok(found.map(|r| ebb_spi::resource::with_ssh(ctx, r)))
        })
    }

    fn describe<'a>(&'a self, ctx: &'a Context, id: &'a str) -> Call<'a, Option<Resource>> {
        Box::pin(async move {
            let found = self.describe(ctx, id).await?;
            Ok(found.map(|r| ebb_spi::resource::with_ssh(ctx, r)))
        })
    }

    fn delete<'a>(&'a self, ctx: &'a Context, id: &'a str) -> Call<'a, ()> {
        Box::pin(self.delete(ctx, id))
    }

    fn list<'a>(&'a self, ctx: &'a Context) -> Call<'a, Vec<Resource>> {
        Box::pin(self.list(ctx))
    }

    /// One `DescribeInstances` filtered by the run's tag.
    fn lookup<'a>(&'a self, ctx: &'a Context, run: &'a str) -> Call<'a, Vec<Resource>> {
        Box::pin(async move {
            let (_, client) = self.client(ctx).await?;
            let filters = vec![
                filter(&format!("tag:{TAG_RUN}"), [run]),
                filter("instance-state-name", LIVE),
            ];
            describe(&client, filters).await
        })
    }

    /// EC2's documented request buckets.
    fn call_rates(&self, _: &Properties) -> ebb_spi::CallRates {
        ebb_spi::CallRates::EC2
    }

    fn account(&self, properties: &Properties) -> String {
        Account::of(properties).label()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_its_properties() {
        let good = ebb_spi::properties([
            ("region", "eu-west-1"),
            ("accessKeyId", "AKIDEXAMPLE"),
            ("secretAccessKey", "${secure(aws-secret)}"),
            ("endpointUrl", "http://127.0.0.1:5000"),
            ("imageId", "ami-1e749f67"),
            ("instanceType", "t3.small"),
            ("securityGroupIds", "sg-1, sg-2"),
            ("tags", "team=data"),
            ("nodes", "3"),
        ]);
        assert_eq!(Ec2::default().validate(&good), Ok(()));
        for (input, bad) in [
            (
                ebb_spi::properties([("accessKeyId", "AKID")]),
                "secretAccessKey",
            ),
            (
                ebb_spi::properties([("secretAccessKey", "s")]),
                "accessKeyId",
            ),
            (
                ebb_spi::properties([("endpointUrl", "localhost:5000")]),
                "endpointUrl",
            ),
            (ebb_spi::properties([("tags", "ebb:run=x")]), "tags"),
            (
                ebb_spi::properties([("securityGroupIds", " , ")]),
                "securityGroupIds",
            ),
            (ebb_spi::properties([("nodes", "0")]), "nodes"),
            (ebb_spi::properties([("flavor", "m5")]), "flavor"),
        ] {
            let e = Ec2::default().validate(&input).expect_err("rejected");
            assert_eq!(e.property, bad, "{e}");
        }
    }

    #[test]
    fn secrets_are_marked_and_kept_out_of_the_account_name() {
        let secret: Vec<_> = SPEC
            .properties
            .iter()
            .filter(|p| p.secret)
            .map(|p| p.name)
            .collect();
        assert_eq!(secret, ["secretAccessKey", "sshPrivateKey"]);
        let account = Ec2::default().account(&ebb_spi::properties([
            ("region", "eu-west-1"),
            ("accessKeyId", "AKID"),
            ("secretAccessKey", "very-secret"),
        ]));
        assert!(!account.contains("very-secret"), "{account}");
        assert!(
            account.contains("AKID") && account.contains("eu-west-1"),
            "{account}"
        );
    }
}
