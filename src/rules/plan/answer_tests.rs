use super::*;
use crate::rules::plan::resource::next_step;
use ResourceStatus as S;
use TaskKind::{Confirm, Create, Delete};

const NOW: u64 = 100_000;

fn record(status: S, attempts: u32, since: u64) -> NodeRecord {
    let mut r = NodeRecord::new("master", status, since);
    if status != S::RequestingCreate {
        r.id = Some("i-1".into());
    }
    if status == S::Deleted {
        r.delete_time = Some(since / 1000);
    }
    r.attempts = attempts;
    r
}

fn resource(state: ResourceState) -> Resource {
    Resource {
        id: "i-1".into(),
        state,
        tags: Default::default(),
        address: Some("10.0.0.1".into()),
        properties: [("hostname".to_string(), "m1".to_string())].into(),
    }
}

fn described(state: Option<ResourceState>) -> Answer {
    Answer::Described {
        id: "i-1".into(),
        found: state.map(resource),
    }
}

/// What a row expects: the variant, the status saved, and words of the note or message.
#[derive(Debug)]
enum Want {
    Save(S, &'static str),
    Again,
    Poll(&'static str),
    Gone(&'static str),
}

#[test]
fn the_answer_table() {
    use ResourceState::{Deleting, Pending, Running};
    let since = NOW - 60_000;
    let fresh = NOW - 1_000;
    let r = |status, attempts| Some(record(status, attempts, since));
    let rows: Vec<(TaskKind, Option<NodeRecord>, Answer, Want)> = vec![
        // create accepted
        (
            Create,
            r(S::RequestingCreate, 1),
            Answer::Created(resource(Pending)),
            Want::Save(S::PollingCreate, "create accepted: i-1 is pending"),
        ),
        (
            Create,
            r(S::RequestingCreate, 1),
            Answer::Created(resource(Running)),
            Want::Save(S::Created, "created i-1 at 10.0.0.1"),
        ),
        (
            Create,
            None,
            Answer::Created(resource(Pending)),
            Want::Save(S::PollingCreate, "create accepted"),
        ),
        // find after a create that may have been in flight
        (
            Create,
            r(S::RequestingCreate, 1),
            Answer::Found(None),
            Want::Save(
                S::RequestingCreate,
                "no resource from the earlier create; creating",
            ),
        ),
        (
            Confirm,
            r(S::RequestingCreate, 1),
            Answer::Found(None),
            Want::Save(S::RequestingCreate, "creating"),
        ),
        (
            Delete,
            r(S::RequestingCreate, 1),
            Answer::Found(None),
            Want::Save(S::Deleted, "nothing was created; nothing to delete"),
        ),
        (
            Create,
            r(S::RequestingCreate, 1),
            Answer::Found(Some(resource(Pending))),
            Want::Save(S::PollingCreate, "found i-1 made by an earlier create"),
        ),
        (
            Delete,
            r(S::RequestingCreate, 2),
            Answer::Found(Some(resource(Running))),
            Want::Save(S::Created, "found i-1"),
        ),
        (Create, None, Answer::Found(None), Want::Again),
        (
            Delete,
            None,
            Answer::Found(Some(resource(Running))),
            Want::Again,
        ),
        // confirm
        (
            Confirm,
            r(S::PollingCreate, 0),
            described(Some(Running)),
            Want::Save(S::Created, "ready: i-1 at 10.0.0.1"),
        ),
        (
            Confirm,
            r(S::PollingCreate, 0),
            described(Some(Pending)),
            Want::Poll("i-1 is still Pending"),
        ),
        (
            Confirm,
            r(S::PollingCreate, 0),
            described(Some(Deleting)),
            Want::Gone("i-1 shut down instead of coming up"),
        ),
        (
            Confirm,
            Some(record(S::PollingCreate, 0, fresh)),
            described(None),
            Want::Poll("i-1 is not visible"),
        ),
        (
            Confirm,
            Some(record(S::PollingCreate, 0, NOW - INVISIBLE_GRACE_MS)),
            described(None),
            Want::Gone("i-1 is gone: it did not come up"),
        ),
        (Confirm, None, described(None), Want::Again),
        // delete
        (
            Delete,
            r(S::RequestingDelete, 1),
            Answer::DeleteAccepted,
            Want::Again,
        ),
        (
            Delete,
            r(S::PollingDelete, 0),
            described(None),
            Want::Save(S::Deleted, "deleted i-1"),
        ),
        (
            Delete,
            r(S::RequestingDelete, 1),
            described(None),
            Want::Save(S::Deleted, "deleted i-1"),
        ),
        (
            Delete,
            r(S::RequestingDelete, 1),
            described(Some(Deleting)),
            Want::Save(S::PollingDelete, "i-1 is being deleted"),
        ),
        (
            Delete,
            r(S::PollingDelete, 0),
            described(Some(Deleting)),
            Want::Poll("i-1 is still being deleted"),
        ),
        (
            Delete,
            r(S::RequestingDelete, 1),
            described(Some(Running)),
            Want::Save(S::RequestingDelete, "not being deleted; requesting again"),
        ),
        (
            Delete,
            r(S::PollingDelete, 0),
            described(Some(Pending)),
            Want::Save(S::RequestingDelete, "requesting again"),
        ),
    ];
    for (kind, before, answer, want) in rows {
        let case = format!(
            "{kind:?} {:?} {answer:?}",
            before.as_ref().map(|r| r.status)
        );
        let got = learn("master", kind, before.as_ref(), answer, NOW);
        match (&want, &got) {
            (Want::Save(status, words), Progress::Save(r, note)) => {
                assert_eq!(r.status, *status, "{case}");
                assert!(note.contains(words), "{case}: {note}");
                assert_eq!(r.node, "master", "{case}");
                if r.status != before.as_ref().map_or(r.status, |b| b.status) {
                    // A new status starts a new budget, with no call in flight.
                    assert_eq!((r.since_ms, r.attempts), (NOW, 0), "{case}");
                }
                assert_eq!(r.delete_time.is_some(), *status == S::Deleted, "{case}");
                if *status == S::Created {
                    assert_eq!(r.create_time, Some(NOW / 1000), "{case}");
                    assert_eq!(r.address.as_deref(), Some("10.0.0.1"), "{case}");
                    assert_eq!(r.properties.get("hostname").map(String::as_str), Some("m1"));
                }
            }
            (Want::Again, Progress::Again) => {}
            (Want::Poll(words), Progress::Poll(m)) | (Want::Gone(words), Progress::Gone(m)) => {
                assert!(m.contains(words), "{case}: {m}");
            }
            _ => panic!("{case}: wanted {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn every_kind_status_and_answer_is_answered() {
    use ResourceState::{Deleting, Pending, Running};
    let statuses = [
        S::RequestingCreate,
        S::PollingCreate,
        S::Created,
        S::RequestingDelete,
        S::PollingDelete,
        S::Deleted,
    ];
    let answers = || {
        vec![
            Answer::Found(None),
            Answer::Created(resource(Pending)),
            Answer::DeleteAccepted,
            described(None),
        ]
        .into_iter()
        .chain([Pending, Running, Deleting].into_iter().flat_map(|s| {
            [
                Answer::Found(Some(resource(s))),
                Answer::Created(resource(s)),
                described(Some(s)),
            ]
        }))
    };
    for kind in [Create, Confirm, Delete] {
        for before in statuses
            .iter()
            .map(|s| Some(record(*s, 1, 0)))
            .chain([None])
        {
            for answer in answers() {
                // Total: no combination panics, and a saved record stays the node's.
                let case = format!(
                    "{kind:?} {:?} {answer:?}",
                    before.as_ref().map(|r| r.status)
                );
                if let Progress::Save(r, note) = learn("master", kind, before.as_ref(), answer, NOW)
                {
                    assert_eq!(r.node, "master", "{case}");
                    assert!(!note.is_empty(), "{case}");
                    assert_eq!(
                        r.delete_time.is_some(),
                        r.status == S::Deleted,
                        "{case}: {r:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn the_intent_is_recorded_before_a_create_or_a_delete() {
    let (r, note) = announce("master", &Step::Create, None, 0, NOW).expect("a create is announced");
    assert_eq!(
        (r.node.as_str(), r.status, r.attempts),
        ("master", S::RequestingCreate, 1)
    );
    assert_eq!(note, Some("create requested"));
    // A retry counts the call but notes nothing new.
    let (r, note) = announce("master", &Step::Create, Some(&r), 1, NOW).expect("announced");
    assert_eq!((r.attempts, note), (2, None));

    let created = record(S::Created, 0, 0);
    let (r, note) = announce(
        "master",
        &Step::Delete("i-1".into()),
        Some(&created),
        0,
        NOW,
    )
    .expect("a delete is announced");
    assert_eq!(
        (r.status, r.attempts, r.since_ms),
        (S::RequestingDelete, 1, NOW)
    );
    assert_eq!(note, Some("delete requested"));
    // Asking again keeps the budget's start.
    let (again, _) =
        announce("master", &Step::Delete("i-1".into()), Some(&r), 1, NOW + 5).expect("announced");
    assert_eq!((again.attempts, again.since_ms), (2, NOW));
    // Even without a record, the intent names what it deletes.
    let (r, _) = announce("master", &Step::Delete("i-7".into()), None, 0, NOW).expect("announced");
    assert_eq!(
        (r.status, r.id.as_deref()),
        (S::RequestingDelete, Some("i-7"))
    );

    for step in [Step::Find, Step::Describe("i-1".into()), Step::Done] {
        assert_eq!(
            announce("master", &step, Some(&created), 0, NOW),
            None,
            "{step:?}"
        );
    }
}

#[test]
fn facts_carry_the_id_the_address_and_what_the_provider_reported() {
    assert!(facts(None).is_empty());
    let mut r = record(S::Created, 0, 0);
    r.adopt(&resource(ResourceState::Running), NOW);
    let facts = facts(Some(&r));
    assert_eq!(facts.get("id").map(String::as_str), Some("i-1"));
    assert_eq!(facts.get("address").map(String::as_str), Some("10.0.0.1"));
    assert_eq!(facts.get("hostname").map(String::as_str), Some("m1"));
}

/// An outside world holding at most one resource, which is ready on the second look and gone
/// on the second look after a delete.
#[derive(Debug, Default)]
struct World {
    resource: Option<(ResourceState, u32)>,
    creates: u32,
    deletes: u32,
}

impl World {
    fn call(&mut self, step: &Step) -> Answer {
        let snapshot = |w: &World| {
            w.resource.map(|(state, _)| Resource {
                state,
                ..resource(state)
            })
        };
        match step {
            Step::Find => Answer::Found(snapshot(self)),
            Step::Create => {
                // Idempotent by identity, as the framework asks of every provider.
                if self.resource.is_none() {
                    self.creates += 1;
                    self.resource = Some((ResourceState::Pending, 0));
                }
                Answer::Created(snapshot(self).expect("just made"))
            }
            Step::Describe(id) => {
                self.resource = match self.resource {
                    Some((ResourceState::Pending, 0)) => Some((ResourceState::Pending, 1)),
                    Some((ResourceState::Pending, _)) => Some((ResourceState::Running, 0)),
                    Some((ResourceState::Deleting, 0)) => Some((ResourceState::Deleting, 1)),
                    Some((ResourceState::Deleting, _)) => None,
                    other => other,
                };
                Answer::Described {
                    id: id.clone(),
                    found: snapshot(self),
                }
            }
            Step::Delete(_) => {
                if let Some((state, _)) = &mut self.resource
                    && *state != ResourceState::Deleting
                {
                    self.deletes += 1;
                    *state = ResourceState::Deleting;
                }
                Answer::DeleteAccepted
            }
            Step::Done => Answer::DeleteAccepted,
        }
    }
}

/// Walks a node through create, confirm and delete as the task runner does, "crashing" after
/// the `crash_at`-th write or call (losing whatever was not persisted), then resuming from
/// the store.
fn walk(crash_at: usize) -> (World, Option<NodeRecord>) {
    let mut world = World::default();
    let mut stored: Option<NodeRecord> = None;
    let mut events = 0usize;
    let mut crashed = false;
    for kind in [Create, Confirm, Delete] {
        let mut record = stored.clone();
        let mut tries = 0;
        for _ in 0..50 {
            let step = next_step(kind, record.as_ref());
            if step == Step::Done {
                break;
            }
            if let Some((r, _)) = announce("master", &step, record.as_ref(), tries, NOW) {
                stored = Some(r.clone());
                record = Some(r);
            }
            events += 1;
            let answer = world.call(&step);
            if events == crash_at && !crashed {
                // The call happened; its answer is lost with the process.
                crashed = true;
                record = stored.clone();
                tries = 0;
                continue;
            }
            match learn("master", kind, record.as_ref(), answer, NOW) {
                Progress::Save(r, _) => {
                    stored = Some(r.clone());
                    record = Some(r);
                    tries = 0;
                }
                Progress::Again | Progress::Poll(_) => tries += 1,
                Progress::Gone(m) => panic!("crash at {crash_at}: {m}"),
            }
        }
        assert_eq!(
            next_step(kind, record.as_ref()),
            Step::Done,
            "crash at {crash_at}: {kind:?} did not finish"
        );
    }
    (world, stored)
}

#[test]
fn a_crash_after_any_call_neither_repeats_nor_leaks_a_resource() {
    for crash_at in 0..20 {
        let (world, stored) = walk(crash_at);
        assert_eq!(
            world.creates, 1,
            "crash at {crash_at}: created {} times",
            world.creates
        );
        assert_eq!(
            world.deletes, 1,
            "crash at {crash_at}: deleted {} times",
            world.deletes
        );
        assert!(
            world.resource.is_none(),
            "crash at {crash_at}: the resource leaked"
        );
        assert_eq!(
            stored.map(|r| r.status),
            Some(S::Deleted),
            "crash at {crash_at}"
        );
    }
}

#[test]
fn a_delete_asked_again_keeps_the_budget_of_the_first_request() {
    // The delete was requested at 1 000 ms and failed; the resource is still up at NOW.
    let asked = record(S::RequestingDelete, 1, 1_000);
    let Progress::Save(again, note) = learn(
        "master",
        Delete,
        Some(&asked),
        described(Some(ResourceState::Running)),
        NOW,
    ) else {
        panic!("a record to save");
    };
    assert!(note.contains("requesting again"), "{note}");
    // Asked again (not looked up again), and the budget still counts from the first request,
    // so a delete that keeps failing ends.
    assert_eq!(next_step(Delete, Some(&again)), Step::Delete("i-1".into()));
    assert_eq!(again.since_ms, 1_000);
    // A created resource found up by a delete starts its budget now.
    let Progress::Save(first, _) = learn(
        "master",
        Delete,
        Some(&record(S::PollingDelete, 0, 1_000)),
        described(Some(ResourceState::Running)),
        NOW,
    ) else {
        panic!("a record to save");
    };
    assert_eq!((first.status, first.since_ms), (S::RequestingDelete, NOW));
}

/// A node whose resource was deleted and is made again (a name a shrink freed, taken again
/// by an expand) starts a new record: the old id and times are not the new resource's, and
/// a crash during the create finds it rather than making another.
#[test]
fn a_create_over_a_deleted_record_starts_it_over() {
    let mut gone = record(S::Deleted, 2, NOW - 100);
    gone.id = Some("i-old".into());
    gone.delete_time = Some(NOW / 1000);
    let (r, note) = announce("worker-2", &Step::Create, Some(&gone), 0, NOW).expect("announced");
    assert_eq!(note, Some("create requested"));
    assert_eq!(
        (r.status, r.attempts, r.id.as_deref()),
        (S::RequestingCreate, 1, None)
    );
    assert_eq!(r.delete_time, None);
    assert_eq!(
        crate::rules::plan::resource::next_step(TaskKind::Create, Some(&r)),
        Step::Find,
        "after a crash, look before creating again"
    );
}
