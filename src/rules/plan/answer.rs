//! How a provider's answer changes a node's resource record: the other half of
//! [`next_step`](super::resource::next_step).
//!
//! A node task asks `next_step` which call comes next, persists what [`announce`] says before
//! a call that changes the outside world (the intent, so a crash during the call leaves a
//! trace to find the resource by), makes the call, and persists what [`learn`] makes of the
//! answer. Both are plain functions of (task kind, stored record, answer, now): the task runner
//! only calls the provider and writes the store.

use std::collections::BTreeMap;

use ebb_spi::{Resource, ResourceState};

use super::resource::Step;
use crate::model::plan::{NodeRecord, ResourceStatus, TaskKind};

/// How long a resource just made may stay invisible before a confirm counts it as gone
/// (clouds are eventually consistent: a describe right after a create may not see it yet).
pub const INVISIBLE_GRACE_MS: u64 = 5_000;

/// What the provider answered to a step's call.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// `find` by the node's identity: the resource an earlier create made, if any.
    Found(Option<Resource>),
    /// `create` accepted: the resource as it is so far.
    Created(Resource),
    /// `describe` of resource `id`: the resource, if it is still there.
    Described { id: String, found: Option<Resource> },
    /// `delete` accepted.
    DeleteAccepted,
}

/// What an answer taught the task.
#[derive(Debug, Clone, PartialEq)]
// One is made per answer and moved into a save at once: boxing the record would allocate
// for nothing.
#[allow(clippy::large_enum_variant)]
pub enum Progress {
    /// A new record to persist, with a note for the run's history.
    Save(NodeRecord, String),
    /// Decide again right away (a delete was accepted: look at the resource now).
    Again,
    /// Not there yet; poll again after a pause.
    Poll(String),
    /// The resource being confirmed is gone: this attempt failed.
    Gone(String),
}

/// The record to persist before `step` asks the provider to create or delete something for
/// node `node`, with a note for the history on the first try; `None` for steps that change
/// nothing outside.
pub fn announce(
    node: &str,
    step: &Step,
    record: Option<&NodeRecord>,
    tries: u32,
    now: u64,
) -> Option<(NodeRecord, Option<&'static str>)> {
    match step {
        Step::Create => {
            // A deleted resource's record starts over: nothing of it is the new one's, and a
            // crash during this create must find the create (REQUESTING_CREATE with a try),
            // not make another.
            let mut r = match record {
                Some(r) if r.status != ResourceStatus::Deleted => r.clone(),
                Some(_) | None => NodeRecord::new(node, ResourceStatus::RequestingCreate, now),
            };
            r.attempts += 1;
            Some((r, (tries == 0).then_some("create requested")))
        }
        Step::Delete(id) => {
            // `next_step` deletes only what a record names; without one, the intent is
            // recorded all the same, with the id it is about.
            let mut r = record.cloned().unwrap_or_else(|| {
                let mut r = NodeRecord::new(node, ResourceStatus::RequestingDelete, now);
                r.id = Some(id.clone());
                r
            });
            if r.status != ResourceStatus::RequestingDelete {
                r.enter(ResourceStatus::RequestingDelete, now);
            }
            r.attempts += 1;
            Some((r, (tries == 0).then_some("delete requested")))
        }
        Step::Find | Step::Describe(_) | Step::Done => None,
    }
}

/// What task `kind` makes of `answer` for node `node`, whose stored record is `record`, at
/// `now` (epoch milliseconds).
pub fn learn(
    node: &str,
    kind: TaskKind,
    record: Option<&NodeRecord>,
    answer: Answer,
    now: u64,
) -> Progress {
    match answer {
        Answer::Created(resource) => {
            let (r, note) = adopt(node, record, &resource, now);
            Progress::Save(r, note)
        }
        Answer::DeleteAccepted => Progress::Again,
        // Nothing recorded: nothing to learn about; decide again from the store.
        Answer::Found(_) | Answer::Described { .. } if record.is_none() => Progress::Again,
        Answer::Found(Some(resource)) => {
            let (r, _) = adopt(node, record, &resource, now);
            Progress::Save(
                r,
                format!("found {} made by an earlier create", resource.id),
            )
        }
        Answer::Found(None) => {
            let mut r = record
                .cloned()
                .unwrap_or_else(|| NodeRecord::new(node, ResourceStatus::RequestingCreate, now));
            match kind {
                // Nothing was made: the next step creates (once more).
                TaskKind::Create | TaskKind::Confirm => {
                    r.attempts = 0;
                    Progress::Save(r, "no resource from the earlier create; creating".into())
                }
                TaskKind::Delete => {
                    gone(&mut r, now);
                    Progress::Save(r, "nothing was created; nothing to delete".into())
                }
            }
        }
        Answer::Described { id, found } => {
            let r = record
                .cloned()
                .unwrap_or_else(|| NodeRecord::new(node, ResourceStatus::PollingCreate, now));
            described(kind, r, &id, found, now)
        }
    }
}

/// What a node's record tells later tasks: the provider's id, the address, its facts.
pub fn facts(record: Option<&NodeRecord>) -> BTreeMap<String, String> {
    let Some(r) = record else {
        return BTreeMap::new();
    };
    let mut out = r.properties.clone();
    if let Some(id) = &r.id {
        out.insert("id".into(), id.clone());
    }
    if let Some(address) = &r.address {
        out.insert("address".into(), address.clone());
    }
    out
}

fn describe_resource(r: &Resource) -> String {
    match &r.address {
        Some(a) => format!("{} at {a}", r.id),
        None => r.id.clone(),
    }
}

/// The record taking what a create (or a find) reported, with the note that says so.
fn adopt(
    node: &str,
    record: Option<&NodeRecord>,
    resource: &Resource,
    now: u64,
) -> (NodeRecord, String) {
    let mut r = record
        .cloned()
        .unwrap_or_else(|| NodeRecord::new(node, ResourceStatus::RequestingCreate, now));
    r.adopt(resource, now);
    let note = match r.status {
        ResourceStatus::Created => format!("created {}", describe_resource(resource)),
        ResourceStatus::RequestingCreate
        | ResourceStatus::PollingCreate
        | ResourceStatus::RequestingDelete
        | ResourceStatus::PollingDelete
        | ResourceStatus::Deleted => format!("create accepted: {} is pending", resource.id),
    };
    (r, note)
}

/// The resource is confirmed gone at `now`.
fn gone(r: &mut NodeRecord, now: u64) {
    r.enter(ResourceStatus::Deleted, now);
    r.delete_time = Some(now / 1000);
}

fn described(
    kind: TaskKind,
    mut r: NodeRecord,
    id: &str,
    found: Option<Resource>,
    now: u64,
) -> Progress {
    use ResourceState::{Deleting, Pending, Running};
    match (kind, found) {
        (TaskKind::Confirm, Some(res)) => match res.state {
            Running => {
                r.adopt(&res, now);
                Progress::Save(r, format!("ready: {}", describe_resource(&res)))
            }
            // Shutting down though nobody asked: it failed to come up.
            Deleting => Progress::Gone(format!("{id} shut down instead of coming up")),
            Pending => Progress::Poll(format!("{} is still {:?}", res.id, res.state)),
        },
        // Just made and not yet visible is normal for a while; gone for longer, it failed.
        (TaskKind::Confirm, None) if now.saturating_sub(r.since_ms) < INVISIBLE_GRACE_MS => {
            Progress::Poll(format!("{id} is not visible"))
        }
        (TaskKind::Confirm, None) => Progress::Gone(format!("{id} is gone: it did not come up")),
        (TaskKind::Create | TaskKind::Delete, None) => {
            gone(&mut r, now);
            Progress::Save(r, format!("deleted {id}"))
        }
        (TaskKind::Create | TaskKind::Delete, Some(res)) => match res.state {
            Deleting if r.status == ResourceStatus::PollingDelete => {
                Progress::Poll(format!("{id} is still being deleted"))
            }
            Deleting => {
                r.enter(ResourceStatus::PollingDelete, now);
                Progress::Save(r, format!("{id} is being deleted"))
            }
            // Still there and not being deleted: the delete request did not land; ask again.
            // A delete asked before keeps its budget, counted from the first request: one
            // that keeps failing must end (ORPHANED), not start its budget over each time.
            Pending | Running if r.status == ResourceStatus::RequestingDelete => {
                r.attempts = 0;
                Progress::Save(r, format!("{id} is not being deleted; requesting again"))
            }
            Pending | Running => {
                r.enter(ResourceStatus::RequestingDelete, now);
                Progress::Save(r, format!("{id} is not being deleted; requesting again"))
            }
        },
    }
}

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;
