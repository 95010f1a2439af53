//! The lifecycle of one resource, persisted before and after every outside call.
//!
//! ```text
//! REQUESTING_CREATE ─create()→ POLLING_CREATE ─ready→ CREATED ─→ REQUESTING_DELETE ─delete()→ POLLING_DELETE ─gone→ DELETED
//! ```
//! [`next_step`] is the whole decision table: given a task and the stored record, which call
//! comes next. After a crash the same table resumes: a create or delete that may have been in
//! flight (`attempts > 0`) is first looked up (`find`, `describe`) instead of repeated, so a
//! resource is never created or deleted twice. [`Backoff`] spaces retries and polls within a
//! time budget counted from when the step began (kept in the record, so a restart does not
//! reset it).

use std::time::Duration;

use crate::model::plan::{NodeRecord, ResourceStatus, TaskKind};

/// The next outside call of a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Look the resource up by its identity (an earlier create may have gone through).
    Find,
    /// Request a create.
    Create,
    /// Read the resource's state.
    Describe(String),
    /// Request a delete.
    Delete(String),
    /// Nothing left to do.
    Done,
}

/// What task `kind` does next for a node whose stored record is `record`.
pub fn next_step(kind: TaskKind, record: Option<&NodeRecord>) -> Step {
    use ResourceStatus as S;
    let Some(r) = record else {
        return match kind {
            TaskKind::Create => Step::Create,
            // Nothing was ever requested for this node: nothing to confirm or delete.
            TaskKind::Confirm | TaskKind::Delete => Step::Done,
        };
    };
    let id = r.id.clone();
    match (kind, r.status, id) {
        // A create may have been in flight: look before creating again.
        (TaskKind::Create | TaskKind::Delete, S::RequestingCreate, _) if r.attempts > 0 => {
            Step::Find
        }
        (TaskKind::Create, S::RequestingCreate, _) => Step::Create,
        // A node whose resource was deleted (a name a shrink freed and an expand took again, a
        // node a rollback deleted): a new one.
        (TaskKind::Create, S::Deleted, _) => Step::Create,
        (TaskKind::Delete, S::RequestingCreate, _) => Step::Done,
        (TaskKind::Create, _, _) => Step::Done,
        (TaskKind::Confirm, S::PollingCreate, Some(id)) => Step::Describe(id),
        // A node whose delete did not finish, taken back (a shrink's rollback): see whether
        // it is still there (ready again) or gone (then made anew).
        (TaskKind::Confirm, S::RequestingDelete | S::PollingDelete, Some(id)) => Step::Describe(id),
        (TaskKind::Confirm, _, _) => Step::Done,
        (TaskKind::Delete, S::Deleted, _) => Step::Done,
        // A delete may have been in flight: see whether it is under way before asking again.
        (TaskKind::Delete, S::RequestingDelete, Some(id)) if r.attempts > 0 => Step::Describe(id),
        (TaskKind::Delete, S::RequestingDelete, Some(id)) => Step::Delete(id),
        (TaskKind::Delete, S::PollingDelete, Some(id)) => Step::Describe(id),
        (TaskKind::Delete, S::PollingCreate | S::Created, Some(id)) => Step::Delete(id),
        // No id recorded past REQUESTING_CREATE cannot happen; look it up to be safe.
        (TaskKind::Delete, _, None) => Step::Find,
    }
}

/// Exponential backoff with jitter inside a time budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
    pub budget: Duration,
}

impl Backoff {
    /// Retries of failed calls: 100 ms doubling to 10 s.
    pub fn retries(budget: Duration) -> Self {
        Self {
            first: Duration::from_millis(100),
            max: Duration::from_secs(10),
            budget,
        }
    }

    /// Polls of a resource on its way up or down: 10 ms growing to 2 s.
    pub fn polls(budget: Duration) -> Self {
        Self {
            first: Duration::from_millis(10),
            max: Duration::from_secs(2),
            budget,
        }
    }

    /// The pause before try number `attempt` (1 is the first retry), with `jitter` in 0..1
    /// taking off up to a quarter; `None` when the budget since `since_ms` is spent at `now_ms`.
    pub fn delay(&self, attempt: u32, since_ms: u64, now_ms: u64, jitter: f64) -> Option<Duration> {
        let spent = Duration::from_millis(now_ms.saturating_sub(since_ms));
        if spent >= self.budget {
            return None;
        }
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(20));
        let full = self.first.saturating_mul(factor).min(self.max);
        let delay = full.mul_f64(1.0 - jitter.clamp(0.0, 1.0) / 4.0);
        Some(delay.min(self.budget - spent))
    }
}

/// Incarnations one operation may make of a node: its create (or replace), then one per
/// failed confirm.
const GENERATIONS_PER_OP: u32 = 4096;

/// The incarnation operation `op` makes of a node: its first (`failed` 0), or the one that
/// replaces the resource whose confirm failed in attempt `failed`. Distinct for every
/// operation and attempt, so no cloud answers a create with an earlier incarnation's
/// resource: not a node replaced twice, nor a name a shrink freed and an expand took again.
/// The cluster's create (operation 1) makes 0, then 1, 2, 3... as it always did.
pub fn generation(op: u32, failed: u32) -> u32 {
    op.saturating_sub(1)
        .saturating_mul(GENERATIONS_PER_OP)
        .saturating_add(failed.min(MOVE_STRIDE - 1))
}

/// Incarnations between two places of one node: a failed confirm's replacements fit in it.
const MOVE_STRIDE: u32 = 64;

/// The incarnation of `generation` moved `moves` places on (a create that found no room and
/// asks elsewhere): the cloud must not take the new request for the old one.
pub fn moved(generation: u32, moves: u32) -> u32 {
    generation.saturating_add(moves.min(GENERATIONS_PER_OP / MOVE_STRIDE - 1) * MOVE_STRIDE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ResourceStatus as S;
    use ebb_spi::{Resource, ResourceState};

    fn record(status: S, id: Option<&str>, attempts: u32) -> NodeRecord {
        let mut r = NodeRecord::new("master", status, 0);
        r.id = id.map(str::to_string);
        r.attempts = attempts;
        r
    }

    #[test]
    fn every_operation_and_failed_confirm_makes_its_own_incarnation() {
        // The cluster's create: 0, then one per failed confirm, as before.
        assert_eq!(generation(1, 0), 0);
        assert_eq!(generation(1, 2), 2);
        // A later operation (an expand taking a freed name again, a replace, their failed
        // confirms) never meets an earlier one's.
        let mut seen = std::collections::BTreeSet::new();
        for op in 1..=50 {
            for failed in 0..=20 {
                // ... nor does a node moved to other places (zones, markets).
                for moves in 0..=63 {
                    assert!(
                        seen.insert(moved(generation(op, failed), moves)),
                        "op {op}, attempt {failed}, move {moves}"
                    );
                }
            }
        }
        assert_eq!(moved(generation(1, 0), 0), 0);
        assert!(moved(generation(2, 63), 1000) < generation(3, 0));
        // Bounded: no overflow however many operations or attempts.
        assert_eq!(generation(u32::MAX, u32::MAX), u32::MAX);
        assert!(generation(2, u32::MAX) < generation(3, 0));
    }

    #[test]
    fn the_decision_table() {
        use TaskKind::*;
        let id = || "i-1".to_string();
        let cases: Vec<(TaskKind, Option<NodeRecord>, Step)> = vec![
            (Create, None, Step::Create),
            (
                Create,
                Some(record(S::RequestingCreate, None, 0)),
                Step::Create,
            ),
            (
                Create,
                Some(record(S::RequestingCreate, None, 1)),
                Step::Find,
            ),
            (
                Create,
                Some(record(S::PollingCreate, Some("i-1"), 0)),
                Step::Done,
            ),
            (
                Confirm,
                Some(record(S::PollingCreate, Some("i-1"), 0)),
                Step::Describe(id()),
            ),
            (
                Confirm,
                Some(record(S::Created, Some("i-1"), 0)),
                Step::Done,
            ),
            (Confirm, None, Step::Done),
            // A node whose delete did not finish, taken back by a shrink's rollback.
            (
                Confirm,
                Some(record(S::RequestingDelete, Some("i-1"), 1)),
                Step::Describe(id()),
            ),
            (
                Confirm,
                Some(record(S::PollingDelete, Some("i-1"), 0)),
                Step::Describe(id()),
            ),
            (
                Confirm,
                Some(record(S::Deleted, Some("i-1"), 0)),
                Step::Done,
            ),
            (
                Create,
                Some(record(S::Deleted, Some("i-1"), 3)),
                Step::Create,
            ),
            (Delete, None, Step::Done),
            (
                Delete,
                Some(record(S::RequestingCreate, None, 0)),
                Step::Done,
            ),
            (
                Delete,
                Some(record(S::RequestingCreate, None, 2)),
                Step::Find,
            ),
            (
                Delete,
                Some(record(S::PollingCreate, Some("i-1"), 0)),
                Step::Delete(id()),
            ),
            (
                Delete,
                Some(record(S::Created, Some("i-1"), 0)),
                Step::Delete(id()),
            ),
            (
                Delete,
                Some(record(S::RequestingDelete, Some("i-1"), 0)),
                Step::Delete(id()),
            ),
            (
                Delete,
                Some(record(S::RequestingDelete, Some("i-1"), 1)),
                Step::Describe(id()),
            ),
            (
                Delete,
                Some(record(S::PollingDelete, Some("i-1"), 0)),
                Step::Describe(id()),
            ),
            (Delete, Some(record(S::Deleted, Some("i-1"), 0)), Step::Done),
        ];
        for (kind, record, step) in cases {
            assert_eq!(
                next_step(kind, record.as_ref()),
                step,
                "{kind:?} {record:?}"
            );
        }
    }

    #[test]
    fn adopting_a_resource_sets_the_status_its_state_implies() {
        let mut r = record(S::RequestingCreate, None, 1);
        let mut resource = Resource {
            id: "i-9".into(),
            state: ResourceState::Pending,
            tags: Default::default(),
            address: Some("10.0.0.1".into()),
            properties: Default::default(),
        };
        r.adopt(&resource, 5_000);
        assert_eq!(
            (r.status, r.attempts, r.since_ms),
            (S::PollingCreate, 0, 5_000)
        );
        resource.state = ResourceState::Running;
        r.adopt(&resource, 7_000);
        assert_eq!((r.status, r.create_time), (S::Created, Some(7)));
    }

    #[test]
    fn backoff_grows_and_stops_at_the_budget() {
        let b = Backoff::retries(Duration::from_secs(1));
        assert_eq!(b.delay(1, 0, 0, 0.0), Some(Duration::from_millis(100)));
        assert_eq!(b.delay(2, 0, 0, 0.0), Some(Duration::from_millis(200)));
        assert_eq!(b.delay(4, 0, 0, 1.0), Some(Duration::from_millis(600)));
        assert_eq!(b.delay(9, 0, 900, 0.0), Some(Duration::from_millis(100)));
        assert_eq!(b.delay(1, 0, 1_000, 0.0), None);
        assert_eq!(b.delay(40, 0, 0, 0.0), Some(Duration::from_secs(1)));
    }
}
