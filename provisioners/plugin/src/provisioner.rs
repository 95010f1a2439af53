//! A plugin as a [`Provisioner`]: each resource call is one request to one of its processes.
//!
//! Nothing here keeps state: the framework persists each resource around these calls exactly
//! as it does for a built-in, so a plugin gets the same crash safety, retries and janitor.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use ebb_spi::resource::{node_count, node_names};
use ebb_spi::{
    Call, Context, ErrorKind, Properties, PropertyError, ProvisionError, Provisioner,
    ProvisionerSpec, Resource, ResourceKey,
};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::descriptor::Descriptor;
use crate::process::{CallError, Pool};
use crate::protocol::{ContextMessage, Method, Request, ResourceMessage};

/// A provisioner plugin.
#[derive(Debug)]
pub struct PluginProvisioner {
    pool: Pool,
}

/// Its processes: `descriptor()`, `health()`.
impl std::ops::Deref for PluginProvisioner {
    type Target = Pool;
    fn deref(&self) -> &Pool {
        &self.pool
    }
}

impl PluginProvisioner {
    pub fn new(descriptor: Descriptor) -> Self {
        Self {
            pool: Pool::new(Arc::new(descriptor)),
        }
    }

    /// Asks the plugin to check `ctx`'s properties beyond what its descriptor declares (rules
    /// that span properties, values only the backend knows).
    pub async fn check(&self, ctx: &Context) -> Result<(), PropertyError> {
        match self.request(ctx, Request::new(Method::Validate)).await {
            Ok(_) => Ok(()),
            Err(CallError::Answered {
                message, property, ..
            }) => Err(PropertyError::new(property.unwrap_or_default(), message)),
            Err(CallError::Broken(why)) => Err(PropertyError::new(
                "",
                format!(
                    "plugin '{}' could not check the properties: {why}",
                    self.spec().name
                ),
            )),
        }
    }

    async fn request(&self, ctx: &Context, mut request: Request<'_>) -> Result<Value, CallError> {
        let work_dir = self.home(&ctx.work_dir);
        request.context = Some(ContextMessage {
            properties: &ctx.properties,
            work_dir: work_dir.join("work").display().to_string(),
            labels: &ctx.labels,
            deadline: ctx
                .deadline
                .and_then(|d| d.duration_since(UNIX_EPOCH).ok())
                .map(|d| d.as_secs()),
        });
        let redact = |text: &str| ctx.redact(text);
        self.pool.call(request, &work_dir, &redact).await
    }

    /// One resource call, its answer read as `T`.
    async fn resource_call<T: DeserializeOwned>(
        &self,
        ctx: &Context,
        request: Request<'_>,
    ) -> Result<T, ProvisionError> {
        let name = self.spec().name;
        let method = request.method.as_str();
        let value = self.request(ctx, request).await.map_err(|e| match e {
            CallError::Answered {
                message,
                retryable,
                kind,
                ..
            } => ProvisionError {
                // A capacity or throttling answer is worth another try (elsewhere, or later).
                retryable: retryable || !matches!(kind, ErrorKind::Other | ErrorKind::Quota),
                message: format!("plugin '{name}': {message}"),
                kind,
            },
            CallError::Broken(why) => ProvisionError::retryable(format!("plugin '{name}' {why}")),
        })?;
        serde_json::from_value(value).map_err(|e| {
            ProvisionError::retryable(format!(
                "plugin '{name}' answered {method} with what is not its result: {e}"
            ))
        })
    }

    fn resource(&self, message: ResourceMessage) -> Result<Resource, ProvisionError> {
        message
            .into_resource()
            .map_err(|e| ProvisionError::retryable(format!("plugin '{}': {e}", self.spec().name)))
    }
}

/// The idempotency token of one incarnation of a node: the same for every create of it, and
/// different for the next generation.
pub fn token(key: &ResourceKey) -> String {
    format!("ebb-{}-{}-{}", key.run, key.node, key.generation)
}

impl Provisioner for PluginProvisioner {
    fn spec(&self) -> &'static ProvisionerSpec {
        self.descriptor().spec
    }

    fn nodes(&self, properties: &Properties) -> Vec<String> {
        node_names(node_count(properties, 1))
    }

    fn create<'a>(&'a self, ctx: &'a Context, key: &'a ResourceKey) -> Call<'a, Resource> {
        Box::pin(async move {
            let mut request = Request::new(Method::Create);
            request.key = Some(key);
            request.tags = Some(ctx.tags(key));
            request.token = Some(token(key));
            let r: ResourceMessage = self.resource_call(ctx, request).await?;
            self.resource(r)
        })
    }

    fn find<'a>(&'a self, ctx: &'a Context, key: &'a ResourceKey) -> Call<'a, Option<Resource>> {
        Box::pin(async move {
            let mut request = Request::new(Method::Find);
            request.key = Some(key);
            let r: Option<ResourceMessage> = self.resource_call(ctx, request).await?;
            r.map(|r| self.resource(r)).transpose()
        })
    }

    fn describe<'a>(&'a self, ctx: &'a Context, id: &'a str) -> Call<'a, Option<Resource>> {
        Box::pin(async move {
            let mut request = Request::new(Method::Describe);
            request.id = Some(id);
            let r: Option<ResourceMessage> = self.resource_call(ctx, request).await?;
            r.map(|r| self.resource(r)).transpose()
        })
    }

    fn delete<'a>(&'a self, ctx: &'a Context, id: &'a str) -> Call<'a, ()> {
        Box::pin(async move {
            let mut request = Request::new(Method::Delete);
            request.id = Some(id);
            let _: Value = self.resource_call(ctx, request).await?;
            Ok(())
        })
    }

    fn list<'a>(&'a self, ctx: &'a Context) -> Call<'a, Vec<Resource>> {
        Box::pin(async move {
            let found: Vec<ResourceMessage> =
                self.resource_call(ctx, Request::new(Method::List)).await?;
            found.into_iter().map(|r| self.resource(r)).collect()
        })
    }

    /// One `lookup` call when the plugin offers it, else the run's resources among `list`'s.
    fn lookup<'a>(&'a self, ctx: &'a Context, run: &'a str) -> Call<'a, Vec<Resource>> {
        Box::pin(async move {
            if !self.descriptor().lookups {
                let all = self.list(ctx).await?;
                return Ok(all
                    .into_iter()
                    .filter(|r| r.tags.get(ebb_spi::TAG_RUN).is_some_and(|v| v == run))
                    .collect());
            }
            let mut request = Request::new(Method::Lookup);
            request.run = Some(run);
            let found: Vec<ResourceMessage> = self.resource_call(ctx, request).await?;
            found.into_iter().map(|r| self.resource(r)).collect()
        })
    }

    fn batches_lookups(&self) -> bool {
        self.descriptor().lookups
    }

    fn account(&self, properties: &Properties) -> String {
        self.descriptor()
            .account
            .iter()
            .map(|name| properties.get(name).map(String::as_str).unwrap_or(""))
            .collect::<Vec<_>>()
            .join("/")
    }
}
