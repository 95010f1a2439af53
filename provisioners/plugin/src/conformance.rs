//! The conformance kit: the contract's cases, driven through any [`Provisioner`].
//!
//! `ebb plugin test <dir>` runs them on a plugin; the test suite runs them on every built-in
//! through the same trait, so a plugin is held to exactly what the built-ins are. Each case
//! says what holds or what did not; the kit deletes what it made, and checks that too.

use std::time::{Duration, Instant};

use ebb_spi::{
    Context, Properties, PropertyKind, Provisioner, Resource, ResourceKey, ResourceState, TAG_RUN,
};

use crate::provisioner::PluginProvisioner;

/// One case's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    pub name: &'static str,
    pub passed: bool,
    /// What was seen: the figures of a pass, the reason of a failure.
    pub detail: String,
}

/// How the kit waits on a provisioner.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// How long a resource may take to be running, or gone.
    pub wait: Duration,
    /// How often it is looked at meanwhile.
    pub poll: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            wait: Duration::from_secs(120),
            poll: Duration::from_millis(100),
        }
    }
}

type Outcome = Result<String, String>;

struct Kit<'a> {
    p: &'a dyn Provisioner,
    ctx: &'a Context,
    options: Options,
    run: String,
    cases: Vec<Case>,
    made: Vec<String>,
}

/// Runs every case on `p` with `ctx` (the properties a profile would give it).
pub async fn run(p: &dyn Provisioner, ctx: &Context, options: Options) -> Vec<Case> {
    let mut kit = Kit::new(p, ctx, options);
    kit.contract().await;
    kit.finish().await
}

/// Runs every case on a plugin, and the plugin's own: its `validate`, and a call cut off
/// mid-way (a lost answer) that the next calls recover from.
pub async fn run_plugin(p: &PluginProvisioner, ctx: &Context, options: Options) -> Vec<Case> {
    let mut kit = Kit::new(p, ctx, options);
    let checked = p
        .check(ctx)
        .await
        .map(|()| "the profile's properties pass".to_string());
    kit.record(
        "validate accepts good properties",
        checked.map_err(|e| e.to_string()),
    );
    kit.contract().await;
    let cut = kit.cut_off(p).await;
    kit.record(
        "a call cut off mid-way is recovered by find, not made twice",
        cut,
    );
    kit.finish().await
}

/// The case names, in the order they run (for documentation and the CLI's listing).
pub const CASES: &[&str] = &[
    "bad properties are refused, naming the property",
    "create twice with one key makes one resource",
    "a created resource becomes running, with its tags",
    "find after a lost answer returns the resource",
    "find of a key never created finds nothing",
    "list returns ebb's resources with their tags",
    "delete, and delete again, succeed",
    "a deleted resource leaves describe, find and list",
    "nothing is left behind",
];

impl<'a> Kit<'a> {
    fn new(p: &'a dyn Provisioner, ctx: &'a Context, options: Options) -> Self {
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or_default();
        Self {
            p,
            ctx,
            options,
            run: format!("conformance{nonce:x}"),
            cases: Vec::new(),
            made: Vec::new(),
        }
    }

    fn record(&mut self, name: &'static str, outcome: Outcome) {
        let (passed, detail) = match outcome {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        self.cases.push(Case {
            name,
            passed,
            detail,
        });
    }

    /// The key of the kit's resource `n`: a run of its own (a provisioner may make one
    /// resource per run, as a managed cluster does), on the cluster's first node.
    fn key(&self, n: &str) -> ResourceKey {
        let node = self
            .p
            .nodes(&self.ctx.properties)
            .into_iter()
            .next()
            .unwrap_or_else(|| "master".to_string());
        ResourceKey::new(format!("{}-{n}", self.run), node)
    }

    /// Whether `r` is one of the kit's (its run is one of the kit's).
    fn is_ours(&self, r: &Resource) -> bool {
        r.tags
            .get(TAG_RUN)
            .is_some_and(|run| run.starts_with(&format!("{}-", self.run)))
    }

    async fn contract(&mut self) {
        let bad = self.bad_properties();
        self.record(CASES[0], bad);
        let first = self.key("1");
        let (made, id) = self.create_twice(&first).await;
        self.record(CASES[1], made);
        let running = match &id {
            Some(id) => self.becomes_running(&first, id).await,
            None => Err("no resource to watch".into()),
        };
        self.record(CASES[2], running);
        let second = self.key("2");
        let found = self.find_after_lost_answer(&second).await;
        self.record(CASES[3], found);
        let nothing = self.find_nothing().await;
        self.record(CASES[4], nothing);
        let listed = self.list_has_ours().await;
        self.record(CASES[5], listed);
        let (deleted, gone) = match &id {
            Some(id) => (self.delete_twice(id).await, self.gone(&first, id).await),
            None => (
                Err("no resource to delete".into()),
                Err("no resource".into()),
            ),
        };
        self.record(CASES[6], deleted);
        self.record(CASES[7], gone);
    }

    async fn finish(mut self) -> Vec<Case> {
        let clean = self.clean_up().await;
        self.record(CASES[8], clean);
        self.cases
    }

    fn bad_properties(&self) -> Outcome {
        let spec = self.p.spec();
        let mut tried = 0;
        let mut unknown = self.ctx.properties.clone();
        unknown.insert("noSuchProperty".into(), "1".into());
        match self.p.validate(&unknown) {
            Err(e) if e.property == "noSuchProperty" => tried += 1,
            Err(e) => {
                return Err(format!(
                    "an unknown property was refused as '{}'",
                    e.property
                ));
            }
            Ok(()) => return Err("an unknown property was accepted".into()),
        }
        for prop in spec.properties {
            let bad = match &prop.kind {
                PropertyKind::Integer { .. } | PropertyKind::Number { .. } => "many",
                PropertyKind::Boolean => "perhaps",
                PropertyKind::Duration { .. } => "a while",
                PropertyKind::OneOf(_) => "none-of-these-\u{2603}",
                PropertyKind::JsonObject { .. } => "[1]",
                PropertyKind::Text => continue,
            };
            let mut props: Properties = self.ctx.properties.clone();
            props.insert(prop.name.to_string(), bad.to_string());
            match self.p.validate(&props) {
                Err(e) if e.property == prop.name => tried += 1,
                Err(e) => {
                    return Err(format!(
                        "{}={bad} was refused as property '{}'",
                        prop.name, e.property
                    ));
                }
                Ok(()) => return Err(format!("{}={bad} was accepted", prop.name)),
            }
        }
        self.p
            .validate(&self.ctx.properties)
            .map_err(|e| format!("the kit's own properties were refused: {e}"))?;
        Ok(format!("{tried} bad values refused"))
    }

    /// The outcome, and the first create's resource for the cases after it (even when the
    /// second create made another).
    async fn create_twice(&mut self, key: &ResourceKey) -> (Outcome, Option<String>) {
        let a = match self.create(key).await {
            Ok(a) => a,
            Err(e) => return (Err(e), None),
        };
        let outcome = async {
            let b = self.create(key).await?;
            if a.id != b.id {
                return Err(format!("the second create made {} besides {}", b.id, a.id));
            }
            let same = self.ours(key).await?;
            if same.len() != 1 {
                return Err(format!("list shows {} resources for one key", same.len()));
            }
            Ok(format!("one resource, {}", a.id))
        }
        .await;
        (outcome, Some(a.id))
    }

    async fn create(&mut self, key: &ResourceKey) -> Result<Resource, String> {
        let r = self
            .p
            .create(self.ctx, key)
            .await
            .map_err(|e| format!("create {}: {e}", key.node))?;
        if !self.made.contains(&r.id) {
            self.made.push(r.id.clone());
        }
        if !key.matches(&r.tags) {
            return Err(format!("create returned {} without the key's tags", r.id));
        }
        Ok(r)
    }

    /// The listed resources that carry `key`'s tags.
    async fn ours(&self, key: &ResourceKey) -> Result<Vec<Resource>, String> {
        let all = self
            .p
            .list(self.ctx)
            .await
            .map_err(|e| format!("list: {e}"))?;
        Ok(all.into_iter().filter(|r| key.matches(&r.tags)).collect())
    }

    async fn becomes_running(&self, key: &ResourceKey, id: &str) -> Outcome {
        let start = Instant::now();
        loop {
            let seen = self
                .p
                .describe(self.ctx, id)
                .await
                .map_err(|e| format!("describe: {e}"))?;
            match seen {
                Some(r) if r.state == ResourceState::Running => {
                    if !key.matches(&r.tags) {
                        return Err("describe shows it without its key's tags".into());
                    }
                    if let Some((k, _)) = self
                        .ctx
                        .labels
                        .iter()
                        .find(|(k, v)| r.tags.get(*k) != Some(*v))
                    {
                        return Err(format!("it lacks the framework's tag '{k}'"));
                    }
                    return Ok(format!("running after {} ms", start.elapsed().as_millis()));
                }
                Some(r) if r.state == ResourceState::Deleting => {
                    return Err("it is being deleted".into());
                }
                Some(_) => {}
                None => return Err("describe says it is gone".into()),
            }
            if start.elapsed() > self.options.wait {
                return Err(format!("still pending after {:?}", self.options.wait));
            }
            tokio::time::sleep(self.options.poll).await;
        }
    }

    async fn find_after_lost_answer(&mut self, key: &ResourceKey) -> Outcome {
        let made = self.create(key).await?;
        let found = self
            .p
            .find(self.ctx, key)
            .await
            .map_err(|e| format!("find: {e}"))?
            .ok_or("find does not see what create made")?;
        if found.id != made.id {
            return Err(format!("find saw {}, create made {}", found.id, made.id));
        }
        Ok(format!("found {}", found.id))
    }

    async fn find_nothing(&self) -> Outcome {
        let key = self.key("never-made");
        match self.p.find(self.ctx, &key).await {
            Ok(None) => Ok("none".into()),
            Ok(Some(r)) => Err(format!("found {}", r.id)),
            Err(e) => Err(format!("find: {e}")),
        }
    }

    async fn list_has_ours(&self) -> Outcome {
        let all = self
            .p
            .list(self.ctx)
            .await
            .map_err(|e| format!("list: {e}"))?;
        if let Some(stray) = all.iter().find(|r| !r.tags.contains_key(TAG_RUN)) {
            return Err(format!(
                "list shows {}, which has no '{TAG_RUN}' tag",
                stray.id
            ));
        }
        let ours = all.iter().filter(|r| self.is_ours(r)).count();
        if ours != self.made.len() {
            return Err(format!(
                "list shows {ours} of the kit's resources, it made {}",
                self.made.len()
            ));
        }
        if self.p.batches_lookups() {
            // A lookup answers one cluster's resources, all of them and nothing else.
            for key in [self.key("1"), self.key("2")] {
                let want = all
                    .iter()
                    .filter(|r| r.tags.get(TAG_RUN) == Some(&key.run))
                    .count();
                let found = self
                    .p
                    .lookup(self.ctx, &key.run)
                    .await
                    .map_err(|e| format!("lookup: {e}"))?;
                if let Some(other) = found.iter().find(|r| r.tags.get(TAG_RUN) != Some(&key.run)) {
                    return Err(format!(
                        "lookup of {} shows {}, of another run",
                        key.run, other.id
                    ));
                }
                if found.len() != want {
                    return Err(format!(
                        "lookup of {} shows {} resources, list {want}",
                        key.run,
                        found.len()
                    ));
                }
            }
        }
        Ok(format!("{ours} of {} listed are the kit's", all.len()))
    }

    async fn delete_twice(&self, id: &str) -> Outcome {
        self.p
            .delete(self.ctx, id)
            .await
            .map_err(|e| format!("delete: {e}"))?;
        self.wait_gone(id).await?;
        self.p
            .delete(self.ctx, id)
            .await
            .map_err(|e| format!("delete of what is gone: {e}"))?;
        Ok("both succeeded".into())
    }

    async fn wait_gone(&self, id: &str) -> Result<(), String> {
        let start = Instant::now();
        while self
            .p
            .describe(self.ctx, id)
            .await
            .map_err(|e| format!("describe: {e}"))?
            .is_some()
        {
            if start.elapsed() > self.options.wait {
                return Err(format!("{id} still there after {:?}", self.options.wait));
            }
            tokio::time::sleep(self.options.poll).await;
        }
        Ok(())
    }

    async fn gone(&self, key: &ResourceKey, id: &str) -> Outcome {
        if let Some(r) = self
            .p
            .find(self.ctx, key)
            .await
            .map_err(|e| format!("find: {e}"))?
        {
            return Err(format!("find still sees {}", r.id));
        }
        if self.ours(key).await?.iter().any(|r| r.id == id) {
            return Err("list still shows it".into());
        }
        Ok("gone".into())
    }

    async fn cut_off(&mut self, p: &PluginProvisioner) -> Outcome {
        let key = self.key("3");
        // A create whose answer is never read: the kit drops the call once it is under way,
        // as a crash of the server would.
        let cut = tokio::time::timeout(Duration::from_millis(1), p.create(self.ctx, &key)).await;
        if let Ok(Ok(r)) = &cut {
            self.made.push(r.id.clone());
        }
        let found = p
            .find(self.ctx, &key)
            .await
            .map_err(|e| format!("find after the cut: {e}"))?;
        let made = self.create(&key).await?;
        if let Some(found) = found.filter(|f| f.id != made.id) {
            self.made.push(found.id.clone());
            return Err(format!(
                "find saw {}, the create then made {}",
                found.id, made.id
            ));
        }
        let ours = self.ours(&key).await?;
        if ours.len() != 1 {
            for r in &ours {
                if !self.made.contains(&r.id) {
                    self.made.push(r.id.clone());
                }
            }
            return Err(format!("{} resources for one key", ours.len()));
        }
        Ok(format!("one resource, {}", made.id))
    }

    async fn clean_up(&self) -> Outcome {
        for id in &self.made {
            self.p
                .delete(self.ctx, id)
                .await
                .map_err(|e| format!("delete {id}: {e}"))?;
        }
        for id in &self.made {
            self.wait_gone(id).await?;
        }
        let all = self
            .p
            .list(self.ctx)
            .await
            .map_err(|e| format!("list: {e}"))?;
        let left: Vec<&str> = all
            .iter()
            .filter(|r| self.is_ours(r))
            .map(|r| r.id.as_str())
            .collect();
        if !left.is_empty() {
            return Err(format!("left behind: {}", left.join(", ")));
        }
        Ok(format!("{} made, all deleted", self.made.len()))
    }
}

/// The kit's report as text: a line per case, and a last line with the count.
pub fn report(cases: &[Case]) -> String {
    let mut out = String::new();
    for c in cases {
        let mark = if c.passed { "ok  " } else { "FAIL" };
        out.push_str(&format!("{mark} {}: {}\n", c.name, c.detail));
    }
    let passed = cases.iter().filter(|c| c.passed).count();
    out.push_str(&format!("{passed} of {} cases hold\n", cases.len()));
    out
}

/// The actions an automator plugin is tested with (its `conformance.json`): fields of an
/// action that succeeds, of one that fails, and of one that runs past a short time limit.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixtures {
    pub succeeds: serde_json::Map<String, serde_json::Value>,
    pub fails: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pub slow: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The automator cases, in the order they run.
pub const AUTOMATOR_CASES: &[&str] = &[
    "fields it does not declare are refused, and required ones asked for",
    "an action that succeeds answers with its output",
    "the same action run again succeeds",
    "an action that fails is an error the plugin reports",
    "an action past its time limit is stopped, and the next one runs",
];

/// Runs the automator cases on `p`, on a node in `work_dir` (a directory on this host).
pub async fn run_automator(
    p: &crate::PluginAutomator,
    fixtures: &Fixtures,
    work_dir: &std::path::Path,
) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut record = |name: &'static str, outcome: Outcome| {
        let (passed, detail) = match outcome {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        cases.push(Case {
            name,
            passed,
            detail,
        });
    };
    let mut unknown = fixtures.succeeds.clone();
    unknown.insert("noSuchField".into(), "1".into());
    let required = p.descriptor().spec.properties.iter().find(|f| f.required);
    let fields = match (p.check_fields(&unknown), p.check_fields(&fixtures.succeeds)) {
        (Err(e), Ok(())) if e.property == "noSuchField" => match required {
            None => Ok("an unknown field refused".to_string()),
            Some(req) => {
                let mut missing = fixtures.succeeds.clone();
                missing.remove(req.name);
                match p.check_fields(&missing) {
                    Err(e) if e.property == req.name => Ok(format!(
                        "an unknown field refused; '{}' asked for",
                        req.name
                    )),
                    other => Err(format!("without '{}': {other:?}", req.name)),
                }
            }
        },
        (unknown, good) => Err(format!(
            "an unknown field gave {unknown:?}; the fixture's fields gave {good:?}"
        )),
    };
    record(AUTOMATOR_CASES[0], fields);
    let node_dir = work_dir.join("node");
    if let Err(e) = std::fs::create_dir_all(&node_dir) {
        record(
            AUTOMATOR_CASES[1],
            Err(format!("cannot make the node's directory: {e}")),
        );
        return cases;
    }
    let run = |fields: &serde_json::Map<String, serde_json::Value>, timeout: Duration| {
        let call = crate::automator::ActionCall {
            work_dir,
            action: serde_json::json!({"service": "svc", "action": "install", "fields": fields}),
            node: serde_json::json!({
                "name": "master", "id": "conformance", "address": "127.0.0.1", "facts": {},
                "workDir": node_dir.display().to_string(),
            }),
            cluster: serde_json::json!({
                "run": "conformance", "config": {},
                "nodes": [{"name": "master", "id": "conformance", "ipAddress": "127.0.0.1",
                           "properties": {}, "services": ["svc"]}],
            }),
            timeout,
        };
        async move { p.run(call, &|t: &str| t.to_string()).await }
    };
    let minute = Duration::from_secs(60);
    let shown = |r: &crate::protocol::RunResult| {
        format!(
            "{} facts, {} bytes of output",
            r.facts.len(),
            r.output.len()
        )
    };
    record(
        AUTOMATOR_CASES[1],
        run(&fixtures.succeeds, minute)
            .await
            .map(|r| shown(&r))
            .map_err(|e| format!("{e:?}")),
    );
    record(
        AUTOMATOR_CASES[2],
        run(&fixtures.succeeds, minute)
            .await
            .map(|r| shown(&r))
            .map_err(|e| format!("{e:?}")),
    );
    record(
        AUTOMATOR_CASES[3],
        match run(&fixtures.fails, minute).await {
            Err(crate::process::CallError::Answered { message, .. }) => Ok(message),
            Err(broken) => Err(format!("the plugin broke instead of answering: {broken:?}")),
            Ok(_) => Err("it succeeded".into()),
        },
    );
    let slow = match &fixtures.slow {
        None => Err("conformance.json gives no slow action".to_string()),
        Some(slow) => {
            let start = Instant::now();
            let stopped = run(slow, Duration::from_secs(4)).await;
            let took = start.elapsed();
            match (stopped, run(&fixtures.succeeds, minute).await) {
                (Ok(_), _) => Err("the slow action succeeded".into()),
                (Err(_), Ok(_)) => Ok(format!("stopped after {} ms", took.as_millis())),
                (Err(_), Err(e)) => Err(format!("the next action failed: {e:?}")),
            }
        }
    };
    record(AUTOMATOR_CASES[4], slow);
    cases
}
