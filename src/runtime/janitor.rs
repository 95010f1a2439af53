//! The janitor: a sweep from the clouds back to the store, for resources nothing else would
//! ever delete.
//!
//! The runtime reconciles from the store outward: it only knows resources it recorded. The
//! janitor goes the other way. For every account the profiles (and the live runs) point at,
//! it lists the resources carrying ebb's tags and judges each against the store. A resource
//! is an orphan when its run is unknown (a lost store, another tool), deprovisioned or given
//! up on, when it has outlived its profile's timeout, or when it is not the resource ebb
//! recorded for its node. Orphans are reported, and deleted when the janitor acts: on a
//! schedule with `--janitor-delete`, or on request (`POST /v3/janitor/run`). Resources tagged
//! by another ebb server (`ebb:server`) are never touched. The last sweep is kept in the store.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use ebb_spi::{Context, Provisioner, Resource, ResourceState, TAG_NODE, TAG_RUN, TAG_SERVER};

use super::duty::Work;
use super::membership::Duty;
use super::retention::namespaces_with_runs;
use crate::model::access::Trust;
use crate::model::event::EventKind;
use crate::model::plan::{NodeRecord, ResourceStatus};
use crate::model::profile::StoredProfile;
use crate::model::run::{ClusterStatus, RunRecord};
use crate::model::sweep::{AccountSweep, Orphan, SOURCES_SHOWN, Settings, Sweep};
use crate::runtime::deps::Deps;
use crate::runtime::error::RuntimeError;
use crate::store::clock::now_secs;
use crate::store::events;
use crate::store::keys;
use crate::store::{Read, Reader, StoreError, Table};

/// How often each server sweeps the `local` sandboxes on its own host.
pub const LOCAL_EVERY: Duration = Duration::from_secs(60);

/// The provisioner whose nodes are sandboxes on a server's own host.
const LOCAL_PROVISIONER: &str = "local";

/// Where the last sweep is kept in the `Meta` table.
const LAST: &str = "janitor/last";

/// A run is not judged too old until this long after its profile's timeout: its own timer
/// and the cloud-side fail-safe come first.
pub const AGE_GRACE: Duration = Duration::from_secs(15 * 60);

/// An account to list, and a context that reaches it.
struct Target {
    provisioner: Arc<dyn Provisioner>,
    account: String,
    sources: Vec<String>,
    context: Result<Context, String>,
}

/// The janitor of one server.
#[derive(Debug, Clone)]
pub struct Janitor {
    deps: Deps,
    pub settings: Settings,
    /// One sweep at a time.
    running: Arc<tokio::sync::Mutex<()>>,
}

impl Janitor {
    pub fn new(deps: Deps, settings: Settings) -> Self {
        Self {
            deps,
            settings,
            running: Arc::default(),
        }
    }

    /// Sweeps the `local` sandboxes on this server's host at its start and every
    /// [`LOCAL_EVERY`] after, on every server (each host's own), deleting those the store no
    /// longer accounts for whatever `--janitor-delete` says: they are this host's processes
    /// and directories, which no cloud bills and no other server can reach. A run taken over
    /// by another server while this one was gone had its sandboxes counted as deleted; this
    /// is where they are.
    pub async fn run_local_sweeps(self) {
        loop {
            match self.sweep_local().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(
                    deleted = n,
                    "local sandboxes no run accounts for were deleted"
                ),
                Err(e) => tracing::warn!(error = %e, "local sandboxes not swept this time"),
            }
            tokio::time::sleep(LOCAL_EVERY).await;
        }
    }

    /// Deletes the `local` sandboxes on this host that no run accounts for; how many.
    async fn sweep_local(&self) -> Result<usize, RuntimeError> {
        let _one = self.running.lock().await;
        let targets = self.targets(Some(LOCAL_PROVISIONER)).await?;
        if targets.is_empty() {
            return Ok(0);
        }
        let (_, orphans) = self.sweep_targets(&targets, false).await?;
        Ok(orphans.iter().filter(|o| o.action == "deleted").count())
    }

    /// The last sweep, if there was one; fails soon when the store cannot be reached.
    pub async fn last(&self) -> Result<Option<Sweep>, RuntimeError> {
        Ok(self
            .deps
            .store
            .impatient()
            .read(|r| r.get::<Sweep>(Table::Meta, LAST))
            .await?)
    }

    /// Sweeps now, for a request: fails soon when the store cannot be reached (a sweep
    /// writes patiently, and would hold the request until the store is back).
    pub async fn sweep_now(&self, dry_run: bool) -> Result<Sweep, RuntimeError> {
        self.deps.store.impatient().reachable().await?;
        self.sweep(dry_run, "request").await
    }

    /// Sweeps now: lists every account, judges what it holds, deletes orphans unless
    /// `dry_run`, and keeps the result.
    async fn sweep(&self, dry_run: bool, trigger: &str) -> Result<Sweep, RuntimeError> {
        let _one = self.running.lock().await;
        let started = now_secs();
        let targets = self.targets(None).await?;
        let (accounts, orphans) = self.sweep_targets(&targets, dry_run).await?;
        let sweep = Sweep {
            started,
            finished: now_secs(),
            trigger: trigger.to_string(),
            dry_run,
            accounts,
            orphans,
        };
        let kept = sweep.clone();
        self.deps
            .store
            .write(move |tx| tx.put(Table::Meta, LAST, &kept))
            .await?;
        Ok(sweep)
    }

    /// Lists `targets`, judges what they hold that a server of this installation made, and
    /// deletes the orphans unless `dry_run` (their runs hear of it): each account's summary
    /// and the orphans.
    async fn sweep_targets(
        &self,
        targets: &[Target],
        dry_run: bool,
    ) -> Result<(Vec<AccountSweep>, Vec<Orphan>), RuntimeError> {
        let ours = self.server_names().await?;
        let (accounts, seen) = self.list(targets, &ours).await;
        let runs: BTreeSet<String> = seen
            .iter()
            .filter_map(|(_, r)| r.tags.get(TAG_RUN).cloned())
            .collect();
        let known = self.deps.store.read(move |r| known_runs(r, &runs)).await?;
        let now = now_secs();
        let mut orphans = Vec::new();
        for (i, resource) in seen {
            if let Some(reason) = judge(&resource, &known, now) {
                orphans.push(take(&targets[i], resource, reason, dry_run).await);
            }
        }
        self.tell_runs(&orphans, &known).await?;
        Ok((accounts, orphans))
    }

    /// Lists every target's account: what each holds that this server made, and a summary per
    /// account (a listing that fails is kept as its error).
    async fn list(
        &self,
        targets: &[Target],
        ours: &BTreeSet<String>,
    ) -> (Vec<AccountSweep>, Vec<(usize, Resource)>) {
        let mut accounts = Vec::new();
        let mut seen: Vec<(usize, Resource)> = Vec::new();
        for (i, t) in targets.iter().enumerate() {
            let listed = match &t.context {
                Ok(ctx) => t
                    .provisioner
                    .list(ctx)
                    .await
                    .map_err(|e| ctx.redact(&e.message)),
                Err(e) => Err(e.clone()),
            };
            let (count, error) = match listed {
                Ok(resources) => {
                    let mine: Vec<Resource> =
                        resources.into_iter().filter(|r| is_ours(r, ours)).collect();
                    let n = mine.len();
                    seen.extend(mine.into_iter().map(|r| (i, r)));
                    (n, None)
                }
                Err(e) => (0, Some(e)),
            };
            let shown = t.sources.len().min(SOURCES_SHOWN);
            accounts.push(AccountSweep {
                provisioner: t.provisioner.spec().name.to_string(),
                account: t.account.clone(),
                sources: t.sources[..shown].to_vec(),
                more_sources: t.sources.len() - shown,
                listed: count,
                error,
            });
        }
        (accounts, seen)
    }

    /// A run the store knows hears what the janitor did to its resources.
    async fn tell_runs(
        &self,
        orphans: &[Orphan],
        known: &HashMap<String, Known>,
    ) -> Result<(), StoreError> {
        let notes: Vec<Orphan> = orphans
            .iter()
            .filter(|o| known.contains_key(&o.run) && o.action != "reported")
            .cloned()
            .collect();
        if notes.is_empty() {
            return Ok(());
        }
        self.deps
            .store
            .write(move |tx| {
                for o in &notes {
                    let message = format!("janitor: {} {} ({})", o.action, o.id, o.reason);
                    events::append(tx, &o.run, EventKind::Task, o.node.as_deref(), message)?;
                }
                Ok::<_, StoreError>(())
            })
            .await
    }

    /// The names the servers of this installation tag their resources with: this server's,
    /// and every other that ever joined it (a dead server's resources are still the
    /// installation's).
    async fn server_names(&self) -> Result<BTreeSet<String>, RuntimeError> {
        let mine = self.deps.server_name.clone();
        Ok(self
            .deps
            .store
            .read(move |r| {
                let mut names: BTreeSet<String> = r
                    .scan::<String>(Table::Meta, crate::store::keys::MEMBERS)?
                    .into_iter()
                    .map(|(_, tag)| tag)
                    .collect();
                names.insert(mine.clone());
                Ok::<_, StoreError>(names)
            })
            .await?)
    }

    /// Every account the profiles and live runs point at, once each; only those of
    /// provisioner `only` when given (their secrets alone are resolved).
    async fn targets(&self, only: Option<&'static str>) -> Result<Vec<Target>, RuntimeError> {
        let registry = Arc::clone(&self.deps.registry);
        let cipher = Arc::clone(&self.deps.cipher);
        let work_dir = self.deps.work_dir.clone();
        self.deps
            .store
            .read(move |r| {
                let mut sources: Vec<(String, String, String, ebb_spi::Properties)> = Vec::new();
                let wanted = |name: &str| only.is_none_or(|o| o == name);
                for (key, p) in r.scan::<StoredProfile>(Table::Profiles, "")? {
                    if !wanted(&p.profile.provisioner.name) {
                        continue;
                    }
                    let ns = key.split('/').next().unwrap_or_default().to_string();
                    let props: ebb_spi::Properties = p.profile.properties();
                    // A directory on this host that no instance admin chose is nobody's to
                    // sweep (a profile written before only they could choose one).
                    let host_path = registry
                        .get(&p.profile.provisioner.name)
                        .and_then(|pr| pr.spec().first_host_path(props.keys()));
                    if p.author() < Trust::InstanceAdmin && host_path.is_some() {
                        continue;
                    }
                    let label = format!("profile {key}");
                    sources.push((p.profile.provisioner.name.clone(), ns, label, props));
                }
                for (key, _) in r.scan::<serde_json::Value>(Table::Active, "")? {
                    if let Some(run) = r
                        .get::<RunRecord>(Table::Runs, &key)?
                        .filter(|run| wanted(&run.provisioner))
                    {
                        let label = format!("run {}", run.key.run);
                        let ns = run.key.namespace.clone();
                        sources.push((run.provisioner.clone(), ns, label, run.properties()));
                    }
                }
                let mut targets: Vec<Target> = Vec::new();
                let mut index: HashMap<(String, String), usize> = HashMap::new();
                for (name, ns, label, props) in sources {
                    // A provisioner that makes no nodes (native) has nothing to sweep.
                    let Some(provisioner) =
                        registry.get(&name).filter(|p| !p.nodes(&props).is_empty())
                    else {
                        continue;
                    };
                    let account = provisioner.account(&props);
                    if let Some(&i) = index.get(&(name.clone(), account.clone())) {
                        targets[i].sources.push(label);
                        continue;
                    }
                    let context = crate::store::secure::resolve(r, &cipher, &ns, &props)
                        .map(|res| res.into_context(Context::new(props, work_dir.clone())));
                    index.insert((name, account.clone()), targets.len());
                    targets.push(Target {
                        provisioner: Arc::clone(provisioner),
                        account,
                        sources: vec![label],
                        context,
                    });
                }
                Ok::<_, RuntimeError>(targets)
            })
            .await
    }
}

/// The janitor's scheduled sweeps, as a duty ([`super::duty`] runs it): every `every`,
/// deleting orphans when its settings say so.
#[derive(Debug)]
pub struct Sweeps {
    pub janitor: Janitor,
    pub every: Duration,
}

impl Work for Sweeps {
    fn duty(&self) -> Duty {
        Duty::Janitor
    }

    fn idle(&self) -> Duration {
        self.every
    }

    async fn tick(&mut self) -> Duration {
        let dry_run = !self.janitor.settings.delete;
        match self.janitor.sweep(dry_run, "schedule").await {
            Ok(s) => tracing::info!(
                orphans = s.orphans.len(),
                accounts = s.accounts.len(),
                "janitor sweep done"
            ),
            Err(e) => tracing::error!(error = %e, "janitor sweep failed"),
        }
        self.every
    }
}

/// Deletes orphan `resource` of target `t` (or only reports it on a dry run) and logs it.
async fn take(t: &Target, resource: Resource, reason: String, dry_run: bool) -> Orphan {
    let action = match (&t.context, dry_run) {
        (_, true) => "reported".to_string(),
        (Ok(ctx), false) => match t.provisioner.delete(ctx, &resource.id).await {
            Ok(()) => "deleted".to_string(),
            Err(e) => format!("delete failed: {}", ctx.redact(&e.message)),
        },
        (Err(e), false) => format!("delete failed: {e}"),
    };
    use crate::model::metrics::{JANITOR_ORPHANS_DELETED, JANITOR_ORPHANS_FOUND};
    let provisioner = t.provisioner.spec().name;
    metrics::counter!(JANITOR_ORPHANS_FOUND.name, "provisioner" => provisioner).increment(1);
    if action == "deleted" {
        metrics::counter!(JANITOR_ORPHANS_DELETED.name, "provisioner" => provisioner).increment(1);
    }
    tracing::warn!(
        provisioner = t.provisioner.spec().name,
        id = %resource.id,
        %reason,
        %action,
        "janitor found an orphan"
    );
    Orphan {
        provisioner: t.provisioner.spec().name.to_string(),
        account: t.account.clone(),
        run: resource.tags.get(TAG_RUN).cloned().unwrap_or_default(),
        node: resource.tags.get(TAG_NODE).cloned(),
        id: resource.id,
        reason,
        action,
    }
}

/// Whether a server of this installation made `r`: it carries one of their names. A
/// resource without a server tag is never taken for ours: it may be anyone's.
fn is_ours(r: &Resource, ours: &BTreeSet<String>) -> bool {
    r.tags.contains_key(TAG_RUN)
        && r.tags.get(TAG_SERVER).is_some_and(|s| ours.contains(s))
        && r.state != ResourceState::Deleting
}

/// What the store knows of a run a resource names.
struct Known {
    run: RunRecord,
    nodes: BTreeMap<String, NodeRecord>,
}

/// The runs among `wanted` (run ids) the store knows, looked up through each namespace's run
/// index rather than by reading every run record.
fn known_runs(
    r: &Reader,
    wanted: &BTreeSet<String>,
) -> Result<HashMap<String, Known>, RuntimeError> {
    let mut out = HashMap::new();
    if wanted.is_empty() {
        return Ok(out);
    }
    for ns in namespaces_with_runs(r)? {
        for id in wanted {
            if out.contains_key(id) {
                continue;
            }
            let Some(key) = r.get::<String>(Table::RunIndex, &keys::run_index(&ns, id))? else {
                continue;
            };
            let Some(mut run) = r.get::<RunRecord>(Table::Runs, &key)? else {
                continue;
            };
            // A cluster another run took over is judged by the run that holds it now.
            if run.cluster.status == Some(ClusterStatus::Reused)
                && let Some(holder) = crate::store::idle::holder(r, id)?
                && let Some(holding) = r.get::<RunRecord>(Table::Runs, &holder)?
            {
                run = holding;
            }
            let nodes = r
                .scan::<NodeRecord>(Table::Resources, &keys::of_run(id))?
                .into_iter()
                .map(|(_, n)| (n.node.clone(), n))
                .collect();
            out.insert(id.clone(), Known { run, nodes });
        }
    }
    Ok(out)
}

/// Why `resource` is an orphan, or `None` when the store accounts for it.
fn judge(resource: &Resource, known: &HashMap<String, Known>, now: u64) -> Option<String> {
    let run_id = resource.tags.get(TAG_RUN)?;
    let Some(Known { run, nodes }) = known.get(run_id) else {
        return Some(format!("its run {run_id} is not in the store"));
    };
    match run.cluster.status {
        Some(ClusterStatus::Deprovisioned) => {
            return Some(format!("its run {run_id} is deprovisioned"));
        }
        Some(ClusterStatus::Orphaned) => {
            return Some(format!("its run {run_id} gave up deleting it (ORPHANED)"));
        }
        None
        | Some(
            ClusterStatus::Provisioning
            | ClusterStatus::Provisioned
            | ClusterStatus::Waiting
            | ClusterStatus::Idle
            | ClusterStatus::Reused
            | ClusterStatus::Deprovisioning,
        ) => {}
    }
    if let Some(deadline) = run.deadline()
        && now > deadline + AGE_GRACE.as_secs()
    {
        return Some(format!(
            "it outlived its profile's timeout: run {run_id} had to be gone by {}",
            humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + Duration::from_secs(deadline)
            )
        ));
    }
    let node = resource.tags.get(TAG_NODE)?;
    match nodes.get(node) {
        None => Some(format!("run {run_id} has no node {node}")),
        Some(n) if n.status == ResourceStatus::Deleted => Some(format!(
            "ebb recorded node {node} of run {run_id} as deleted"
        )),
        Some(n) => match &n.id {
            Some(id) if *id != resource.id => Some(format!(
                "it is not the resource ebb recorded for node {node} of run {run_id} ({id})"
            )),
            // The recorded one, or a create still in flight: not an orphan.
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::profile::Keepalive;
    use crate::model::run::{ClusterState, Launch, ProgramStatus, RunKey};

    fn resource(id: &str, run: &str, node: &str) -> Resource {
        Resource {
            id: id.into(),
            state: ResourceState::Running,
            tags: ebb_spi::ResourceKey::new(run, node).tags(),
            address: None,
            properties: BTreeMap::new(),
        }
    }

    fn run(id: &str, status: Option<ClusterStatus>, timeout: Option<u64>) -> RunRecord {
        RunRecord {
            key: RunKey {
                namespace: "default".into(),
                app: "a".into(),
                program: "p".into(),
                run: id.into(),
            },
            status: ProgramStatus::Running,
            starting: 1_000,
            start: None,
            end: None,
            args: Default::default(),
            profile: "USER:p".into(),
            provisioner: "sim".into(),
            profile_properties: Vec::new(),
            keepalive: Keepalive::default(),
            timeout,
            launch: Launch {
                command: Vec::new(),
                env: BTreeMap::new(),
                engine: None,
            },
            cluster: ClusterState {
                status,
                ..Default::default()
            },
            failure: None,
            stop: None,
            exit: None,
            template: None,
            layout: BTreeMap::new(),
            node_types: BTreeMap::new(),
            config: None,
            launcher: None,
            started_by: None,
            queue: None,
            retry: None,
            attempts: Vec::new(),
            relaunch_at: None,
            reuse: None,
            application: None,
            pooled: false,
            settled: false,
            format: 0,
        }
    }

    fn node(name: &str, id: Option<&str>, status: ResourceStatus) -> (String, NodeRecord) {
        let mut n = NodeRecord::new(name, status, 0);
        n.id = id.map(str::to_string);
        (name.to_string(), n)
    }

    #[test]
    fn judges_each_case() {
        let mut known = HashMap::new();
        let live = Known {
            run: run("live", Some(ClusterStatus::Provisioned), Some(3600)),
            nodes: [
                node("master", Some("i-1"), ResourceStatus::Created),
                node("worker-1", None, ResourceStatus::RequestingCreate),
                node("worker-2", Some("i-3"), ResourceStatus::Deleted),
            ]
            .into(),
        };
        known.insert("live".to_string(), live);
        known.insert(
            "gone".to_string(),
            Known {
                run: run("gone", Some(ClusterStatus::Deprovisioned), None),
                nodes: BTreeMap::new(),
            },
        );
        let now = 2_000;
        let verdict = |r: Resource| judge(&r, &known, now);
        assert_eq!(verdict(resource("i-1", "live", "master")), None);
        assert_eq!(
            verdict(resource("i-2", "live", "worker-1")),
            None,
            "in flight"
        );
        assert!(
            verdict(resource("i-9", "live", "master"))
                .is_some_and(|m| m.contains("not the resource"))
        );
        assert!(
            verdict(resource("i-3", "live", "worker-2")).is_some_and(|m| m.contains("as deleted"))
        );
        assert!(
            verdict(resource("i-4", "live", "worker-7")).is_some_and(|m| m.contains("no node"))
        );
        assert!(
            verdict(resource("i-5", "gone", "master")).is_some_and(|m| m.contains("deprovisioned"))
        );
        assert!(
            verdict(resource("i-6", "lost", "master"))
                .is_some_and(|m| m.contains("not in the store"))
        );
        let late = 1_000 + 3600 + AGE_GRACE.as_secs() + 1;
        assert!(
            judge(&resource("i-1", "live", "master"), &known, late)
                .is_some_and(|m| m.contains("outlived"))
        );
    }
}
