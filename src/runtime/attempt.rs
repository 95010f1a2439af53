//! What the task runner, the automator and the remote launcher share: a task's spec, how
//! one attempt ended, and the facts an attempt reports.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ebb_spi::Provisioner;

use super::deps::Deps;
use crate::model::operation::AttemptRecord;
use crate::model::plan::{ClusterOperation, ClusterTask, NodeRecord};
use crate::model::template::Template;
use crate::store::keys;
use crate::store::{Read, StoreError, Table};

/// Attempts of a node task (create, confirm, delete) before the operation fails.
const NODE_ATTEMPTS: u32 = 3;

/// How much longer than the retry budget one node-task attempt may take before it times out.
const NODE_GRACE: Duration = Duration::from_secs(60);

/// Everything a task needs.
#[derive(Debug, Clone)]
pub struct TaskSpec {
    /// The operation's id in the audit log.
    pub op: u32,
    pub operation: ClusterOperation,
    pub task: ClusterTask,
    /// Attempts already recorded (by a run of this operation before a restart).
    pub prior_attempts: u32,
    /// The last of those that failed (one a restart cut short does not count).
    pub prior_failure: Option<u32>,
    /// Whether the same operation deletes this task's node afterwards (a stop that keeps
    /// failing is then noted and passed over).
    pub node_goes: bool,
    pub template: Option<Arc<Template>>,
    /// Every node's services.
    pub layout: BTreeMap<String, BTreeSet<String>>,
    /// The cluster's config, as this operation applies it.
    pub config: serde_json::Value,
    pub run: String,
    /// The cluster's id, which its resources and services are kept under.
    pub cluster: String,
    pub provisioner: Arc<dyn Provisioner>,
    pub context: Arc<ebb_spi::Context>,
    pub budget: Duration,
    pub cancel: Arc<AtomicBool>,
    /// The node is the cluster's master (where the program runs).
    pub master: bool,
    /// The record of the attempt under way, until it is in the store.
    pub opening: Opening,
}

/// The record of an attempt that has begun, while it is not yet in the store (its key and
/// the record). The attempt's first write of the node's record carries it (a resource task
/// records the node before the call that creates or deletes it), or it is written alone just
/// before a script runs or the attempt waits (a poll, a retry): either way it is stored before
/// anything outside changes, and while the attempt takes time. An attempt that ends before
/// either (a confirm whose first look finds the node ready) has its record written once, as
/// it ends.
#[derive(Debug, Clone, Default)]
pub struct Opening(Arc<std::sync::Mutex<Option<(String, AttemptRecord)>>>);

impl Opening {
    /// Attempt `record`, under `key`, has begun.
    pub fn begin(&self, key: String, record: AttemptRecord) {
        *self.lock() = Some((key, record));
    }

    /// The record still to write, if any: whoever takes it writes it.
    pub fn take(&self) -> Option<(String, AttemptRecord)> {
        self.lock().take()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(String, AttemptRecord)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Writes the opening record of `spec`'s attempt, unless it is written already: due before an
/// outside change and before a wait.
pub async fn open_attempt(deps: &Deps, spec: &TaskSpec) -> Result<(), StoreError> {
    let Some((key, record)) = spec.opening.take() else {
        return Ok(());
    };
    deps.store
        .write(move |tx| tx.put(Table::Attempts, &key, &record))
        .await
}

impl TaskSpec {
    pub fn node(&self) -> &str {
        &self.task.node
    }

    /// How many attempts the task gets and how long each may take.
    pub fn policy(&self) -> (u32, Duration) {
        let action = self
            .task
            .action
            .service_action()
            .zip(self.task.service.as_ref())
            .and_then(|(kind, service)| {
                self.template
                    .as_ref()?
                    .services
                    .get(service)?
                    .actions
                    .get(&kind)
            });
        match action {
            Some(a) => (a.attempts(), a.timeout()),
            None => (NODE_ATTEMPTS, self.budget + NODE_GRACE),
        }
    }
}

/// How a script that ran ended: its exit code (`None`: killed by a signal), the facts it
/// reported and its output's tail.
#[derive(Debug)]
pub struct Ended {
    pub code: Option<i32>,
    pub facts: BTreeMap<String, String>,
    pub tail: String,
    /// How it ended, in words.
    pub status: String,
}

impl Ended {
    /// The facts and output of a script that exited 0; else why not, with its output.
    pub fn succeeded(self) -> Result<(BTreeMap<String, String>, String), (String, String)> {
        match self.code {
            Some(0) => Ok((self.facts, self.tail)),
            _ => {
                let said = last_words(&self.tail);
                let message = if said.is_empty() {
                    format!("the script {}", self.status)
                } else {
                    format!("the script {}: {said}", self.status)
                };
                Err((message, self.tail))
            }
        }
    }
}

/// The last few lines a failed script wrote (at most 3, and 400 characters), joined by
/// ` / `: usually why it failed, said where the failure is shown.
fn last_words(tail: &str) -> String {
    let lines: Vec<&str> = tail
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let said = lines[lines.len().saturating_sub(3)..].join(" / ");
    let n = said.chars().count();
    if n <= 400 {
        return said;
    }
    let from = said.char_indices().nth(n - 400).map_or(0, |(i, _)| i);
    format!("…{}", &said[from..])
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOutcome {
    Done {
        result: BTreeMap<String, String>,
        output: Option<String>,
    },
    Cancelled,
    Failed {
        message: String,
        /// Whether another attempt may help.
        retry: bool,
        output: Option<String>,
    },
    /// A create found no room in any of the node's places within its retry budget: the
    /// planner gives the node up (`minNodes`) or fails the operation.
    NoRoom(String),
}

impl AttemptOutcome {
    pub fn done() -> Self {
        AttemptOutcome::Done {
            result: BTreeMap::new(),
            output: None,
        }
    }

    pub fn failed(message: impl Into<String>, retry: bool) -> Self {
        AttemptOutcome::Failed {
            message: message.into(),
            retry,
            output: None,
        }
    }
}

/// Merges `facts` into node `node`'s properties, where every later task sees them.
pub async fn merge_properties(
    deps: &Deps,
    run: &str,
    node: &str,
    facts: BTreeMap<String, String>,
) -> Result<(), StoreError> {
    let key = keys::node(run, node);
    deps.store
        .write(move |tx| {
            if let Some(mut r) = tx.get::<NodeRecord>(Table::Resources, &key)? {
                for (name, value) in &facts {
                    let known = r.properties.contains_key(name);
                    if known || r.properties.len() < MAX_NODE_FACTS {
                        r.properties.insert(name.clone(), value.clone());
                    }
                }
                tx.put(Table::Resources, &key, &r)?;
            }
            Ok::<_, StoreError>(())
        })
        .await
}

/// Bytes of an attempt's output kept in the audit log.
pub const TAIL: usize = 2048;

/// The end of `text`, at most [`TAIL`] bytes.
pub fn tail_of(text: &str) -> String {
    let mut start = text.len().saturating_sub(TAIL);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].trim().to_string()
}

/// Set on a node's record when a replace began its new resource: the operation's id.
pub const REPLACED: &str = "replacedBy";
/// Set on a node's properties when a failed confirm replaced its resource: the failed attempt.
pub const RECREATED: &str = "recreated";

/// Most bytes of a result file read.
pub const RESULT_MAX: usize = 64 * 1024;
/// Most facts one attempt reports; more are dropped.
pub const MAX_FACTS: usize = 64;
/// Longest fact name and value kept.
const MAX_FACT_NAME: usize = 128;
const MAX_FACT_VALUE: usize = 4096;
/// Most facts a node keeps: an attempt adds new names only while it has fewer.
pub const MAX_NODE_FACTS: usize = 256;

/// Whether a script or program on a node may report fact `name`: not one of ebb's own
/// ([`ebb_spi::RESERVED_FACTS`], the marks ebb keeps on a node's record, anything `ebb`…).
fn reportable(name: &str) -> bool {
    !ebb_spi::RESERVED_FACTS.contains(&name)
        && ![REPLACED, RECREATED].contains(&name)
        && !name.to_ascii_lowercase().starts_with("ebb")
        && name.len() <= MAX_FACT_NAME
}

/// `key=value` lines of a result file; blank lines and `#` comments are skipped. What a
/// node reports is bounded and never one of ebb's own facts: at most [`MAX_FACTS`], from
/// the first [`RESULT_MAX`] bytes, names and values of bounded length.
pub fn parse_facts(text: &str) -> BTreeMap<String, String> {
    let mut end = text.len().min(RESULT_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end]
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim()))
        .filter(|(k, v)| !k.is_empty() && reportable(k) && v.len() <= MAX_FACT_VALUE)
        .take(MAX_FACTS)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The facts of `facts` a node may report (as [`parse_facts`] keeps them from a result file):
/// an automator plugin's answer is held to the same bounds as a script's result file.
pub fn reportable_facts(facts: BTreeMap<String, String>) -> BTreeMap<String, String> {
    facts
        .into_iter()
        .filter(|(k, v)| !k.is_empty() && reportable(k) && v.len() <= MAX_FACT_VALUE)
        .take(MAX_FACTS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_scripts_last_lines_say_why() {
        assert_eq!(last_words(""), "");
        assert_eq!(last_words("a\n\n b \nc\nd\n"), "b / c / d");
        let long = "x".repeat(1000);
        let said = last_words(&long);
        assert_eq!(said.chars().count(), 401);
        assert!(said.starts_with('…'));
        assert_eq!(last_words("é".repeat(500).as_str()).chars().count(), 401);
    }

    #[test]
    fn facts_are_key_value_lines() {
        let facts = parse_facts("# reported\nport = 2181\n\nbroken line\nleader=n1\n=x\n");
        assert_eq!(facts.len(), 2);
        assert_eq!(facts["port"], "2181");
        assert_eq!(facts["leader"], "n1");
    }

    #[test]
    fn a_node_reports_none_of_ebbs_own_facts_and_only_so_many() {
        let steer = "ssh=attacker@10.9.9.9:22\nsshHostKey=SHA256:x\nremoteDir=/etc\n\
                     workDir=/\nreplacedBy=op-1\nrecreated=1\nebb:run=x\nEBB_X=1\nport=1\n";
        let facts = parse_facts(steer);
        assert_eq!(facts.keys().collect::<Vec<_>>(), ["port"], "{facts:?}");
        let many: String = (0..1000).map(|i| format!("k{i}=v\n")).collect();
        assert_eq!(parse_facts(&many).len(), MAX_FACTS);
        let long = format!("{}=v\nk={}\nok=1\n", "n".repeat(200), "v".repeat(5000));
        assert_eq!(parse_facts(&long).keys().collect::<Vec<_>>(), ["ok"]);
    }
}
