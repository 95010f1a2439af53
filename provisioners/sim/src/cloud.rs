//! The simulated cloud itself: instances as files in a state directory, and a call log.
//!
//! Like EC2, every create makes a new instance with a fresh id and the tags it was given; it
//! never dedupes, so a caller that creates twice gets two instances. Time drives state: an
//! instance is `pending` until its `readyAt`, `shutting-down` until its `goneAt`. All calls
//! hold an exclusive lock on the state directory, so several servers or threads see one
//! consistent cloud. Blocking IO throughout; the provisioner runs it off the async threads.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ebb_spi::{
    CapacityScope, Market, Placement, ProvisionError, Resource, ResourceState, Tags,
    resource::TAG_RUN,
};
use serde::{Deserialize, Serialize};

/// An instance's state, named as EC2 names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceState {
    Pending,
    Running,
    ShuttingDown,
    Terminated,
}

/// One instance, as stored in `resources/<id>.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    pub id: String,
    pub tags: Tags,
    pub state: InstanceState,
    pub created_at: f64,
    pub deleted_at: Option<f64>,
    pub ready_at: f64,
    pub gone_at: Option<f64>,
    pub address: String,
    /// Delete requests this instance received, counted in the same write as their effect
    /// (the call log is appended after it, so a crash between the two can miss a line).
    #[serde(default)]
    pub delete_calls: u32,
    /// Set on an instance that fails to boot: at its ready time it shuts down by itself, as
    /// an EC2 instance does after an internal error on launch.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub boot_fails: bool,
    /// EC2's `disableApiTermination`: a delete is refused (fatally) while it is set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_api_termination: bool,
    /// The machine type and zone asked for (what prices the node).
    #[serde(default)]
    pub machine_type: String,
    #[serde(default)]
    pub zone: String,
    /// The market it was bought on (`on-demand`, `spot`).
    #[serde(default)]
    pub market: String,
    /// Why the cloud ended it, when it did so by itself (EC2's `StateReason`: a reclaimed spot
    /// instance says `Server.SpotInstanceTermination`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_reason: Option<String>,
    /// When the cloud takes this spot instance back by itself (`spotReclaimRate`), drawn at
    /// its create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_at: Option<f64>,
}

impl Instance {
    /// The state at time `now`.
    fn state_at(&self, now: f64) -> InstanceState {
        if self.boot_fails && self.gone_at.is_none() {
            return match now - self.ready_at {
                t if t < 0.0 => InstanceState::Pending,
                t if t < BOOT_FAILURE_SHUTDOWN => InstanceState::ShuttingDown,
                _ => InstanceState::Terminated,
            };
        }
        match self.gone_at {
            Some(gone) if now >= gone => InstanceState::Terminated,
            Some(_) => InstanceState::ShuttingDown,
            None if now >= self.ready_at => InstanceState::Running,
            None => InstanceState::Pending,
        }
    }

    fn resource(&self) -> Option<Resource> {
        let state = match self.state {
            InstanceState::Pending => ResourceState::Pending,
            InstanceState::Running => ResourceState::Running,
            InstanceState::ShuttingDown => ResourceState::Deleting,
            InstanceState::Terminated => return None,
        };
        Some(Resource {
            id: self.id.clone(),
            state,
            tags: self.tags.clone(),
            address: Some(self.address.clone()),
            properties: [
                ("instanceId", &self.id),
                ("machineType", &self.machine_type),
                ("zone", &self.zone),
                ("market", &self.market),
            ]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        })
    }
}

/// EC2's state reason for a spot instance it took back.
const SPOT_TERMINATION: &str = "Server.SpotInstanceTermination";

/// How long an instance that failed to boot shows as shutting down before it is terminated.
const BOOT_FAILURE_SHUTDOWN: f64 = 0.5;
/// The least time before an instance that fails to boot does so (so a create returns it live).
const BOOT_FAILURE_AFTER: f64 = 0.05;

/// One line of `calls.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Call {
    pub time: f64,
    pub op: String,
    pub id: Option<String>,
    pub tags: Option<Tags>,
    pub ok: bool,
    pub error: Option<String>,
    /// The process that made the call (which server, in a test of several).
    #[serde(default)]
    pub pid: u32,
}

/// Latency and faults, from the run's properties.
#[derive(Debug, Clone, Default)]
pub struct Behaviour {
    pub create_latency: Duration,
    pub delete_latency: Duration,
    pub transient_error_rate: f64,
    pub lost_create_rate: f64,
    /// Chance that a delete is refused (retryably) while the instance stays up.
    pub delete_error_rate: f64,
    pub fail_create: bool,
    pub quota: Option<usize>,
    /// The first this many instances made in the state directory fail to boot.
    pub boot_failures: usize,
    /// The machine type of the instances it makes, and their zone when a create names none.
    pub machine_type: String,
    pub zone: String,
    /// The most a spot instance may cost per hour (`maxSpotPrice`).
    pub max_spot_price: Option<f64>,
    /// How often, per hour, the cloud takes back a running spot instance by itself
    /// (`spotReclaimRate`): each one's moment is drawn from an exponential distribution.
    pub spot_reclaim_rate: f64,
    /// The account's request buckets (`throttle`): a call past them is refused with EC2's
    /// `RequestLimitExceeded`.
    pub rates: ebb_spi::CallRates,
}

/// Which of an account's request buckets a call draws on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Read,
    Create,
    Delete,
}

impl Class {
    fn name(self) -> &'static str {
        match self {
            Class::Read => "read",
            Class::Create => "create",
            Class::Delete => "delete",
        }
    }

    fn rate(self, rates: &ebb_spi::CallRates) -> Option<ebb_spi::Rate> {
        match self {
            Class::Read => rates.read,
            Class::Create => rates.create,
            Class::Delete => rates.delete,
        }
    }
}

/// A bucket's level at a time, as `throttle.json` keeps it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct Level {
    tokens: f64,
    at: f64,
}

/// What each zone has room for, as the cloud's operator (a test) sets it in `capacity.json`;
/// a zone not listed has room for anything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Capacity {
    #[serde(default)]
    pub zones: std::collections::BTreeMap<String, ZoneCapacity>,
}

/// One zone's room: the most live instances on each market (none: no limit), and the spot
/// price per hour.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ZoneCapacity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_demand: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_price: Option<f64>,
}

impl ZoneCapacity {
    fn limit(&self, market: Market) -> Option<usize> {
        match market {
            Market::OnDemand => self.on_demand,
            Market::Spot => self.spot,
        }
    }
}

/// A handle on a state directory.
#[derive(Debug, Clone)]
pub struct Cloud {
    dir: PathBuf,
    behaviour: Behaviour,
}

/// The index of instances by run tag: `by-run/<the tag's value in hex>/<instance id>`, one
/// empty file each.
const BY_RUN: &str = "by-run";

/// The index directory's name for run tag `run` (hex: any value makes a valid file name);
/// `None` for a value too long for a file name, which is never indexed (its lists scan).
fn index_name(run: &str) -> Option<String> {
    (run.len() <= 100).then(|| run.bytes().map(|b| format!("{b:02x}")).collect())
}

/// Indexes instance `id` under run tag `run` in index `index`, unless the tag is too long.
fn index_instance(index: &Path, run: &str, id: &str) -> Result<(), ProvisionError> {
    let Some(name) = index_name(run) else {
        return Ok(());
    };
    let dir = index.join(name);
    fs::create_dir_all(&dir).map_err(|e| io("index instance", e))?;
    File::create(dir.join(id)).map_err(|e| io("index instance", e))?;
    Ok(())
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn io(what: &str, e: std::io::Error) -> ProvisionError {
    ProvisionError::retryable(format!("sim state directory: {what}: {e}"))
}

impl Cloud {
    /// Opens (creating if needed) the cloud kept in `dir`.
    pub fn open(dir: &Path, behaviour: Behaviour) -> Result<Cloud, ProvisionError> {
        fs::create_dir_all(dir.join("resources")).map_err(|e| {
            ProvisionError::fatal(format!(
                "cannot create sim state dir {}: {e}",
                dir.display()
            ))
        })?;
        let cloud = Cloud {
            dir: dir.to_path_buf(),
            behaviour,
        };
        if !cloud.dir.join(BY_RUN).exists() {
            cloud.index_runs()?;
        }
        Ok(cloud)
    }

    /// Indexes every instance by its run tag, for a state directory made before the index
    /// was (or a new one): built aside and renamed into place, so it is whole or absent.
    fn index_runs(&self) -> Result<(), ProvisionError> {
        let _lock = self.lock()?;
        let index = self.dir.join(BY_RUN);
        if index.exists() {
            return Ok(());
        }
        let aside = self.dir.join(".by-run.tmp");
        let _ = fs::remove_dir_all(&aside);
        fs::create_dir_all(&aside).map_err(|e| io("index runs", e))?;
        for instance in Cloud::instances(&self.dir).map_err(|e| io("index runs", e))? {
            if let Some(run) = instance.tags.get(TAG_RUN) {
                index_instance(&aside, run, &instance.id)?;
            }
        }
        fs::rename(&aside, &index).map_err(|e| io("index runs", e))
    }

    /// The instances a list with `filter` may find: those indexed under its run tag when it
    /// has one (as a cloud finds by an indexed tag), else every instance.
    fn candidates(&self, filter: &Tags) -> Result<Vec<Instance>, ProvisionError> {
        let Some(name) = filter.get(TAG_RUN).and_then(|run| index_name(run)) else {
            return self.all();
        };
        let ids = match fs::read_dir(self.dir.join(BY_RUN).join(name)) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("read run index", e)),
        };
        let mut found = Vec::new();
        for entry in ids {
            let entry = entry.map_err(|e| io("read run index", e))?;
            // An id indexed by a create that stopped before writing its instance: no instance.
            if let Some(instance) = self.read(&entry.file_name().to_string_lossy())? {
                found.push(self.refresh(instance)?);
            }
        }
        found.sort_by(|a, b| a.created_at.total_cmp(&b.created_at));
        Ok(found)
    }

    /// Every call made so far, in order.
    pub fn calls(dir: &Path) -> std::io::Result<Vec<Call>> {
        let text = match fs::read_to_string(dir.join("calls.jsonl")) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }

    /// Every instance ever made, terminated ones included.
    pub fn instances(dir: &Path) -> std::io::Result<Vec<Instance>> {
        let mut out = Vec::new();
        let entries = match fs::read_dir(dir.join("resources")) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let path = entry?.path();
            if path.extension().is_some_and(|x| x == "json")
                && let Ok(bytes) = fs::read(&path)
                && let Ok(instance) = serde_json::from_slice(&bytes)
            {
                out.push(instance);
            }
        }
        out.sort_by(|a: &Instance, b| a.created_at.total_cmp(&b.created_at));
        Ok(out)
    }

    /// Sets what each zone has room for (written whole, so a create sees the old or the new).
    pub fn set_capacity(dir: &Path, capacity: &Capacity) -> std::io::Result<()> {
        fs::create_dir_all(dir)?;
        let tmp = dir.join(".capacity.json.tmp");
        fs::write(
            &tmp,
            serde_json::to_vec_pretty(capacity).map_err(std::io::Error::other)?,
        )?;
        fs::rename(tmp, dir.join("capacity.json"))
    }

    fn capacity(&self) -> Result<Capacity, ProvisionError> {
        match fs::read(self.dir.join("capacity.json")) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| ProvisionError::fatal(format!("sim capacity.json is not valid: {e}"))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Capacity::default()),
            Err(e) => Err(io("read capacity", e)),
        }
    }

    /// Reclaims spot instance `id` as a cloud does when it needs the room back: it is
    /// terminated at once with reason `Server.SpotInstanceTermination`. False if there is no
    /// such live spot instance.
    pub fn reclaim(dir: &Path, id: &str) -> Result<bool, ProvisionError> {
        let cloud = Cloud::open(dir, Behaviour::default())?;
        let _lock = cloud.lock()?;
        let Some(instance) = cloud.read(id)? else {
            return Ok(false);
        };
        let mut instance = cloud.refresh(instance)?;
        if instance.market != Market::Spot.as_str() || instance.gone_at.is_some() {
            return Ok(false);
        }
        let at = now();
        instance.deleted_at = Some(at);
        instance.gone_at = Some(at);
        instance.state = InstanceState::Terminated;
        instance.state_reason = Some(SPOT_TERMINATION.into());
        cloud.write(&instance)?;
        cloud.log("reclaim", Some(id), None, None);
        Ok(true)
    }

    /// Whether `placement` has room for one more instance; the cloud's error when not.
    fn room(&self, placement: &Placement, zone: &str) -> Result<(), String> {
        let capacity = self.capacity().map_err(|e| e.message)?;
        let Some(room) = capacity.zones.get(zone) else {
            return Ok(());
        };
        let market = placement.market;
        if market == Market::Spot
            && let (Some(price), Some(max)) = (room.spot_price, self.behaviour.max_spot_price)
            && price > max
        {
            return Err(format!(
                "SpotMaxPriceTooLow: the spot price in {zone} ({price}) is above your maximum ({max})"
            ));
        }
        let Some(limit) = room.limit(market) else {
            return Ok(());
        };
        let live = self
            .all()
            .map_err(|e| e.message)?
            .iter()
            .filter(|i| i.state != InstanceState::Terminated)
            .filter(|i| i.zone == zone && i.market == market.as_str())
            .count();
        if live >= limit {
            return Err(match market {
                Market::OnDemand => format!(
                    "InsufficientInstanceCapacity: We currently do not have sufficient {} capacity in the Availability Zone you requested ({zone})",
                    self.behaviour.machine_type
                ),
                Market::Spot => format!(
                    "InsufficientInstanceCapacity: There is no Spot capacity available that matches your request in {zone}"
                ),
            });
        }
        Ok(())
    }

    fn lock(&self) -> Result<File, ProvisionError> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join(".lock"))
            .map_err(|e| io("open lock", e))?;
        file.lock().map_err(|e| io("lock", e))?;
        Ok(file)
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join("resources").join(format!("{id}.json"))
    }

    fn log(&self, op: &str, id: Option<&str>, tags: Option<&Tags>, error: Option<&str>) {
        let call = Call {
            time: now(),
            op: op.to_string(),
            id: id.map(str::to_string),
            tags: tags.cloned(),
            ok: error.is_none(),
            error: error.map(str::to_string),
            pid: std::process::id(),
        };
        let mut line = serde_json::to_vec(&call).expect("a call serializes");
        line.push(b'\n');
        // One write on an O_APPEND file: lines never interleave.
        if let Ok(mut f) = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("calls.jsonl"))
        {
            let _ = f.write_all(&line);
        }
    }

    /// Takes a token from the account's bucket for `class` (under the lock), or refuses the
    /// call as EC2 does when it is empty.
    fn throttle(
        &self,
        class: Class,
        op: &str,
        id: Option<&str>,
        tags: Option<&Tags>,
    ) -> Result<(), ProvisionError> {
        let Some(rate) = class.rate(&self.behaviour.rates) else {
            return Ok(());
        };
        let path = self.dir.join("throttle.json");
        let mut levels: std::collections::BTreeMap<String, Level> = fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let now = now();
        let burst = f64::from(rate.burst);
        let level = levels.entry(class.name().to_string()).or_insert(Level {
            tokens: burst,
            at: now,
        });
        level.tokens = (level.tokens + (now - level.at).max(0.0) * rate.per_second).min(burst);
        level.at = now;
        let allowed = level.tokens >= 1.0;
        if allowed {
            level.tokens -= 1.0;
        }
        let bytes = serde_json::to_vec(&levels).map_err(|e| io("throttle", e.into()))?;
        fs::write(&path, bytes).map_err(|e| io("throttle", e))?;
        if allowed {
            return Ok(());
        }
        let message = "RequestLimitExceeded: Request limit exceeded.";
        self.log(op, id, tags, Some(message));
        Err(ProvisionError::throttled(None, message))
    }

    /// Fails the call now and then, as `transientErrorRate` asks, before it does anything.
    fn transient(
        &self,
        op: &str,
        id: Option<&str>,
        tags: Option<&Tags>,
    ) -> Result<(), ProvisionError> {
        if self.behaviour.transient_error_rate > 0.0
            && fastrand::f64() < self.behaviour.transient_error_rate
        {
            let message = "RequestLimitExceeded: simulated transient error";
            self.log(op, id, tags, Some(message));
            return Err(ProvisionError::retryable(message));
        }
        Ok(())
    }

    /// Instance `id` as stored. An empty file is a create killed between making the file and
    /// its one write ([`Cloud::write`]): that instance was never made.
    fn read(&self, id: &str) -> Result<Option<Instance>, ProvisionError> {
        match fs::read(self.path(id)) {
            Ok(bytes) if bytes.is_empty() => Ok(None),
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                ProvisionError::fatal(format!("sim instance {id} is unreadable: {e}"))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("read instance", e)),
        }
    }

    /// Writes an instance file with one `write` at offset 0, padded with spaces to at least
    /// its old length (still valid JSON), so no truncate is needed: a process killed at any
    /// instant leaves the old content or the new, never a torn file. (A temporary file and a
    /// rename would do the same at the cost of an inode per write.)
    fn write(&self, instance: &Instance) -> Result<(), ProvisionError> {
        use std::os::unix::fs::FileExt;
        let path = self.path(&instance.id);
        let mut bytes = serde_json::to_vec_pretty(instance).expect("an instance serializes");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| io("write instance", e))?;
        let old_len = file.metadata().map_err(|e| io("write instance", e))?.len() as usize;
        if bytes.len() < old_len {
            bytes.resize(old_len, b' ');
        }
        file.write_all_at(&bytes, 0)
            .map_err(|e| io("write instance", e))
    }

    /// Brings the stored state up to date with the clock.
    fn refresh(&self, mut instance: Instance) -> Result<Instance, ProvisionError> {
        let now = now();
        if let Some(at) = instance.reclaim_at
            && instance.gone_at.is_none()
            && now >= at
        {
            // Its moment came: reclaimed as `reclaim` does it.
            instance.deleted_at = Some(at);
            instance.gone_at = Some(at);
            instance.state_reason = Some(SPOT_TERMINATION.into());
        }
        let state = instance.state_at(now);
        if state != instance.state {
            instance.state = state;
            self.write(&instance)?;
        }
        Ok(instance)
    }

    fn all(&self) -> Result<Vec<Instance>, ProvisionError> {
        Cloud::instances(&self.dir)
            .map_err(|e| io("list instances", e))?
            .into_iter()
            .map(|i| self.refresh(i))
            .collect()
    }

    /// Makes a new instance carrying `tags` (never deduplicated), where `placement` asks (its
    /// zone, else the profile's `zone`), if that zone has room on its market.
    pub fn create(&self, tags: &Tags, placement: &Placement) -> Result<Resource, ProvisionError> {
        let _lock = self.lock()?;
        self.throttle(Class::Create, "create", None, Some(tags))?;
        self.transient("create", None, Some(tags))?;
        let zone = placement
            .zone
            .clone()
            .unwrap_or_else(|| self.behaviour.zone.clone());
        if let Err(message) = self.room(placement, &zone) {
            self.log("create", None, Some(tags), Some(&message));
            return Err(ProvisionError::capacity(CapacityScope::Zone, message));
        }
        if self.behaviour.fail_create {
            let message = "InsufficientInstanceCapacity: failCreate is set";
            self.log("create", None, Some(tags), Some(message));
            return Err(ProvisionError::fatal(message));
        }
        if let Some(quota) = self.behaviour.quota {
            let live = self
                .all()?
                .iter()
                .filter(|i| i.state != InstanceState::Terminated)
                .count();
            if live >= quota {
                let message =
                    format!("InstanceLimitExceeded: the quota of {quota} live instances is used");
                self.log("create", None, Some(tags), Some(&message));
                return Err(ProvisionError::quota(message));
            }
        }
        let bits = fastrand::u64(..);
        let id = format!("i-{bits:016x}");
        let boot_fails = self.behaviour.boot_failures > 0
            && Cloud::instances(&self.dir)
                .map_err(|e| io("list instances", e))?
                .len()
                < self.behaviour.boot_failures;
        let created = now();
        let latency = self.behaviour.create_latency.as_secs_f64();
        let mut instance = Instance {
            id: id.clone(),
            tags: tags.clone(),
            state: InstanceState::Pending,
            created_at: created,
            deleted_at: None,
            ready_at: created
                + if boot_fails {
                    latency.max(BOOT_FAILURE_AFTER)
                } else {
                    latency
                },
            gone_at: None,
            address: format!(
                "10.{}.{}.{}",
                (bits >> 8) as u8,
                (bits >> 16) as u8,
                (bits >> 24) as u8 | 1
            ),
            delete_calls: 0,
            boot_fails,
            disable_api_termination: false,
            machine_type: self.behaviour.machine_type.clone(),
            zone,
            market: placement.market.as_str().to_string(),
            state_reason: None,
            reclaim_at: None,
        };
        let rate = self.behaviour.spot_reclaim_rate;
        if placement.market == Market::Spot && rate > 0.0 {
            // Reclaims as a Poisson process: the wait to the first is exponential.
            let hours = -(1.0 - fastrand::f64()).ln() / rate;
            instance.reclaim_at = Some(instance.ready_at + hours * 3600.0);
        }
        instance.state = instance.state_at(created);
        // Indexed first: a create stopped in between leaves an index entry with no instance.
        if let Some(run) = tags.get(TAG_RUN) {
            index_instance(&self.dir.join(BY_RUN), run, &id)?;
        }
        self.write(&instance)?;
        if self.behaviour.lost_create_rate > 0.0
            && fastrand::f64() < self.behaviour.lost_create_rate
        {
            let message = "RequestTimeout: the instance was created but the response was lost";
            self.log("create", Some(&id), Some(tags), Some(message));
            return Err(ProvisionError::retryable(message));
        }
        self.log("create", Some(&id), Some(tags), None);
        Ok(instance.resource().expect("a new instance is live"))
    }

    /// The instance `id`; `None` when it is terminated or never existed.
    pub fn describe(&self, id: &str) -> Result<Option<Resource>, ProvisionError> {
        let _lock = self.lock()?;
        self.throttle(Class::Read, "describe", Some(id), None)?;
        self.transient("describe", Some(id), None)?;
        let found = match self.read(id)? {
            Some(instance) => self.refresh(instance)?.resource(),
            None => None,
        };
        self.log("describe", Some(id), None, None);
        Ok(found)
    }

    /// The live instances whose tags include every tag in `filter`.
    pub fn list(&self, filter: &Tags) -> Result<Vec<Resource>, ProvisionError> {
        let _lock = self.lock()?;
        self.throttle(Class::Read, "list", None, Some(filter))?;
        self.transient("list", None, Some(filter))?;
        let found = self
            .candidates(filter)?
            .iter()
            .filter(|i| filter.iter().all(|(k, v)| i.tags.get(k) == Some(v)))
            .filter(|i| i.tags.contains_key(TAG_RUN))
            .filter_map(Instance::resource)
            .collect();
        self.log("list", None, Some(filter), None);
        Ok(found)
    }

    /// Sets or clears instance `id`'s termination protection (EC2's `disableApiTermination`
    /// attribute), as an administrator of the cloud would; false if there is no such instance.
    pub fn protect(&self, id: &str, on: bool) -> Result<bool, ProvisionError> {
        let _lock = self.lock()?;
        let Some(mut instance) = self.read(id)? else {
            return Ok(false);
        };
        instance.disable_api_termination = on;
        self.write(&instance)?;
        self.log("modify-attribute", Some(id), None, None);
        Ok(true)
    }

    /// Starts terminating instance `id`. Terminating a terminated or unknown instance succeeds;
    /// a protected one is refused, for good.
    pub fn delete(&self, id: &str) -> Result<(), ProvisionError> {
        let _lock = self.lock()?;
        self.throttle(Class::Delete, "delete", Some(id), None)?;
        self.transient("delete", Some(id), None)?;
        if self.read(id)?.is_some_and(|i| i.disable_api_termination) {
            let message = format!(
                "OperationNotPermitted: the instance '{id}' may not be terminated; modify its 'disableApiTermination' instance attribute and try again"
            );
            self.log("delete", Some(id), None, Some(&message));
            return Err(ProvisionError::fatal(message));
        }
        if self.behaviour.delete_error_rate > 0.0
            && fastrand::f64() < self.behaviour.delete_error_rate
        {
            let message = "IncorrectInstanceState: the instance cannot be terminated now";
            self.log("delete", Some(id), None, Some(message));
            return Err(ProvisionError::retryable(message));
        }
        if let Some(instance) = self.read(id)? {
            let mut instance = self.refresh(instance)?;
            instance.delete_calls += 1;
            if instance.gone_at.is_none() {
                let at = now();
                instance.deleted_at = Some(at);
                instance.gone_at = Some(at + self.behaviour.delete_latency.as_secs_f64());
                instance.state = instance.state_at(at);
            }
            self.write(&instance)?;
        }
        self.log("delete", Some(id), None, None);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebb_spi::ResourceKey;

    fn tags(node: &str) -> Tags {
        ResourceKey::new("r1", node).tags()
    }

    #[test]
    fn creates_never_dedupe_and_every_call_is_logged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cloud = Cloud::open(dir.path(), Behaviour::default()).expect("open");
        let a = cloud
            .create(&tags("master"), &Placement::default())
            .expect("create");
        let b = cloud
            .create(&tags("master"), &Placement::default())
            .expect("create again");
        assert_ne!(a.id, b.id);
        assert_eq!(a.state, ResourceState::Running);
        assert_eq!(cloud.list(&tags("master")).expect("list").len(), 2);
        cloud.delete(&a.id).expect("delete");
        assert_eq!(cloud.describe(&a.id).expect("describe"), None);
        cloud.delete(&a.id).expect("deleting again succeeds");
        let ops: Vec<String> = Cloud::calls(dir.path())
            .expect("calls")
            .into_iter()
            .map(|c| c.op)
            .collect();
        assert_eq!(
            ops,
            ["create", "create", "list", "delete", "describe", "delete"]
        );
        let states: Vec<InstanceState> = Cloud::instances(dir.path())
            .expect("instances")
            .into_iter()
            .map(|i| i.state)
            .collect();
        assert_eq!(states, [InstanceState::Terminated, InstanceState::Running]);
    }

    /// A list by run reads that run's instances only (as a cloud's indexed tag filter does),
    /// and a state directory made before the index is indexed when opened.
    #[test]
    fn a_list_by_run_reads_that_runs_instances_and_old_dirs_are_indexed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cloud = Cloud::open(dir.path(), Behaviour::default()).expect("open");
        let mine = cloud
            .create(&tags("master"), &Placement::default())
            .expect("create");
        let other = ResourceKey::new("r2", "master").tags();
        cloud
            .create(&other, &Placement::default())
            .expect("create another run's");
        // An instance file the index does not name is not read by a list of r1.
        let mut stray = Cloud::instances(dir.path()).expect("instances")[1].clone();
        stray.id = "i-stray".into();
        stray.tags = tags("worker");
        cloud.write(&stray).expect("write");
        let run = |r: &str| Tags::from([(TAG_RUN.to_string(), r.to_string())]);
        let ids = |found: Vec<Resource>| found.into_iter().map(|r| r.id).collect::<Vec<_>>();
        assert_eq!(
            ids(cloud.list(&run("r1")).expect("list")),
            std::slice::from_ref(&mine.id)
        );
        // Without the index (a directory from before it), opening builds it.
        fs::remove_dir_all(dir.path().join(BY_RUN)).expect("drop index");
        let cloud = Cloud::open(dir.path(), Behaviour::default()).expect("reopen");
        assert_eq!(
            ids(cloud.list(&run("r1")).expect("list")),
            [mine.id, "i-stray".to_string()]
        );
        assert_eq!(cloud.list(&run("r3")).expect("list").len(), 0);
        assert!(!dir.path().join(".by-run.tmp").exists());
    }

    /// A server killed while the sim makes an instance can leave its file made but never
    /// written: that instance was never made. Every call reads it so: a list by run, a
    /// describe and a delete, as `Cloud::instances` always did.
    #[test]
    fn an_instance_file_never_written_is_no_instance() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cloud = Cloud::open(dir.path(), Behaviour::default()).expect("open");
        let made = cloud
            .create(&tags("master"), &Placement::default())
            .expect("create");
        // What a kill between the file's creation and its one write leaves: indexed, empty.
        index_instance(&dir.path().join(BY_RUN), "r1", "i-torn").expect("index");
        File::create(cloud.path("i-torn")).expect("empty file");
        let run = Tags::from([(TAG_RUN.to_string(), "r1".to_string())]);
        let found: Vec<String> = cloud
            .list(&run)
            .expect("a list by run")
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(found, [made.id]);
        assert_eq!(cloud.describe("i-torn").expect("describe"), None);
        cloud
            .delete("i-torn")
            .expect("deleting it succeeds, as for any gone instance");
    }

    #[test]
    fn latency_keeps_instances_pending_then_shutting_down() {
        let dir = tempfile::tempdir().expect("tempdir");
        let slow = Behaviour {
            create_latency: Duration::from_secs(3600),
            delete_latency: Duration::from_secs(3600),
            ..Behaviour::default()
        };
        let cloud = Cloud::open(dir.path(), slow).expect("open");
        let r = cloud
            .create(&tags("master"), &Placement::default())
            .expect("create");
        assert_eq!(r.state, ResourceState::Pending);
        cloud.delete(&r.id).expect("delete");
        let seen = cloud
            .describe(&r.id)
            .expect("describe")
            .expect("still there");
        assert_eq!(seen.state, ResourceState::Deleting);
    }

    #[test]
    fn faults_fail_as_asked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lost = Behaviour {
            lost_create_rate: 1.0,
            ..Behaviour::default()
        };
        let err = Cloud::open(dir.path(), lost)
            .expect("open")
            .create(&tags("master"), &Placement::default())
            .expect_err("lost");
        assert!(err.retryable, "{err}");
        assert_eq!(Cloud::instances(dir.path()).expect("instances").len(), 1);

        let quota = Behaviour {
            quota: Some(1),
            ..Behaviour::default()
        };
        let err = Cloud::open(dir.path(), quota)
            .expect("open")
            .create(&tags("worker-1"), &Placement::default())
            .expect_err("over quota");
        assert!(
            !err.retryable && err.message.contains("quota of 1"),
            "{err}"
        );

        let fail = Behaviour {
            fail_create: true,
            ..Behaviour::default()
        };
        let err = Cloud::open(dir.path(), fail)
            .expect("open")
            .create(&tags("worker-1"), &Placement::default())
            .expect_err("fatal");
        assert!(!err.retryable, "{err}");

        let flaky = Behaviour {
            transient_error_rate: 1.0,
            ..Behaviour::default()
        };
        let err = Cloud::open(dir.path(), flaky)
            .expect("open")
            .describe("i-1")
            .expect_err("transient");
        assert!(err.retryable, "{err}");
        assert_eq!(Cloud::instances(dir.path()).expect("instances").len(), 1);
    }

    #[test]
    fn a_full_zone_refuses_with_a_capacity_error_and_spot_is_reclaimed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spot_a = Placement {
            zone: Some("a".into()),
            market: Market::Spot,
        };
        let capacity = Capacity {
            zones: [(
                "a".to_string(),
                ZoneCapacity {
                    on_demand: Some(0),
                    spot: Some(1),
                    spot_price: Some(0.05),
                },
            )]
            .into(),
        };
        Cloud::set_capacity(dir.path(), &capacity).expect("capacity");
        let cloud = Cloud::open(dir.path(), Behaviour::default()).expect("open");
        let first = cloud
            .create(&tags("worker-1"), &spot_a)
            .expect("room for one");
        assert_eq!(first.properties["market"], "spot");
        assert_eq!(first.properties["zone"], "a");
        let full = cloud.create(&tags("worker-2"), &spot_a).expect_err("full");
        assert_eq!(full.capacity_scope(), Some(CapacityScope::Zone), "{full}");
        assert!(full.message.contains("no Spot capacity"), "{full}");
        let on_demand = Placement {
            market: Market::OnDemand,
            ..spot_a.clone()
        };
        let full = cloud
            .create(&tags("worker-2"), &on_demand)
            .expect_err("none");
        assert!(
            full.message.contains("InsufficientInstanceCapacity"),
            "{full}"
        );
        // Another zone is not listed: room for anything.
        let b = Placement {
            zone: Some("b".into()),
            market: Market::Spot,
        };
        cloud
            .create(&tags("worker-2"), &b)
            .expect("zone b has room");
        // Reclaimed: gone at once, and its room is free again.
        assert!(Cloud::reclaim(dir.path(), &first.id).expect("reclaim"));
        assert_eq!(cloud.describe(&first.id).expect("describe"), None);
        let gone = Cloud::instances(dir.path()).expect("instances");
        assert_eq!(
            gone[0].state_reason.as_deref(),
            Some("Server.SpotInstanceTermination")
        );
        cloud
            .create(&tags("worker-3"), &spot_a)
            .expect("room again");
        // Over the profile's price.
        let pricey = Behaviour {
            max_spot_price: Some(0.01),
            ..Behaviour::default()
        };
        let err = Cloud::open(dir.path(), pricey)
            .expect("open")
            .create(&tags("worker-4"), &spot_a)
            .expect_err("too dear");
        assert!(err.message.contains("SpotMaxPriceTooLow"), "{err}");
    }

    #[test]
    fn spot_instances_are_reclaimed_at_the_rate_asked_and_on_demand_ones_never() {
        let dir = tempfile::tempdir().expect("tempdir");
        // 3,600 an hour: about one a second per spot instance.
        let often = Behaviour {
            spot_reclaim_rate: 3600.0,
            ..Behaviour::default()
        };
        let cloud = Cloud::open(dir.path(), often).expect("open");
        let spot = Placement {
            zone: None,
            market: Market::Spot,
        };
        let made: Vec<Resource> = (0..20)
            .map(|i| cloud.create(&tags(&format!("w{i}")), &spot).expect("spot"))
            .collect();
        let steady = cloud
            .create(&tags("master"), &Placement::default())
            .expect("on-demand");
        let drawn: Vec<f64> = Cloud::instances(dir.path())
            .expect("instances")
            .iter()
            .filter_map(|i| i.reclaim_at.map(|at| at - i.ready_at))
            .collect();
        assert_eq!(drawn.len(), 20, "each spot instance draws its moment");
        let mean = drawn.iter().sum::<f64>() / drawn.len() as f64;
        assert!((0.1..10.0).contains(&mean), "mean wait {mean} s for 1 s");
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let gone = made
            .iter()
            .filter(|r| cloud.describe(&r.id).expect("describe").is_none())
            .count();
        assert!(gone > 0, "none of 20 reclaimed after 1.5 s at one a second");
        assert!(cloud.describe(&steady.id).expect("describe").is_some());
        let reclaimed = Cloud::instances(dir.path()).expect("instances");
        assert!(
            reclaimed
                .iter()
                .filter(|i| i.gone_at.is_some())
                .all(|i| i.state_reason.as_deref() == Some(SPOT_TERMINATION))
        );
    }
}
