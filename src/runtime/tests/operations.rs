//! Cluster operations in process: a planner and its task runners against a scripted
//! provisioner, in virtual time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use ebb_spi::ResourceState::{Deleting, Pending, Running};
use ebb_spi::{Context, ProvisionError};

use super::{Ends, Expect, Scripted, deps, paused, resource};
use crate::model::operation::OpOutcome;
use crate::model::plan::{ClusterOperation, NodeRecord, ResourceStatus};
use crate::runtime::deps::Deps;
use crate::runtime::planner::{Cancel, OpDone, OpSpec, Planner};
use crate::store::{Read, Table, keys};

const RUN: &str = "r-1";

/// Operation `operation` on run [`RUN`]'s one node, `master`, with `provisioner`.
fn spec(deps: &Deps, operation: ClusterOperation, provisioner: Arc<Scripted>) -> OpSpec {
    OpSpec {
        operation,
        resume: false,
        run: RUN.into(),
        cluster: RUN.into(),
        namespace: "default".into(),
        nodes: vec!["master".into()],
        template: None,
        layout: BTreeMap::new(),
        config: serde_json::json!({}),
        previous_config: serde_json::json!({}),
        request: serde_json::Value::Null,
        changed: Default::default(),
        selection: Default::default(),
        provisioner,
        context: Arc::new(Context::new(Default::default(), deps.work_dir.clone())),
        node_properties: BTreeMap::new(),
        budget: Duration::from_secs(60),
        act: None,
    }
}

/// Starts a planner for `spec`; answers its address and where its end arrives.
fn start(
    deps: &Deps,
    spec: OpSpec,
) -> (Addr<Planner>, tokio::sync::mpsc::UnboundedReceiver<OpDone>) {
    let (sender, ends) = tokio::sync::mpsc::unbounded_channel();
    let report = Ends(sender).start().recipient();
    (Planner::new(deps.clone(), spec, report).start(), ends)
}

async fn node(deps: &Deps) -> Option<NodeRecord> {
    let key = keys::node(RUN, "master");
    deps.store
        .read(move |r| r.get::<NodeRecord>(Table::Resources, &key))
        .await
        .expect("read")
}

#[test]
fn retried_calls_back_off_in_virtual_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cloud = Scripted::new(vec![
        Expect::Create {
            node: "master",
            generation: 0,
            after: Duration::ZERO,
            answer: Err(ProvisionError::retryable("throttled")),
        },
        // A create that failed may have gone through: it is looked for before another.
        Expect::Find {
            node: "master",
            answer: Ok(None),
        },
        Expect::Create {
            node: "master",
            generation: 0,
            after: Duration::ZERO,
            answer: Err(ProvisionError::retryable("throttled")),
        },
        Expect::Find {
            node: "master",
            answer: Ok(None),
        },
        Expect::Create {
            node: "master",
            generation: 0,
            after: Duration::ZERO,
            answer: Ok(resource("i-1", Pending)),
        },
        Expect::Describe {
            id: "i-1",
            answer: Ok(Some(resource("i-1", Running))),
        },
    ]);
    let deps = deps(dir.path(), cloud.clone());
    paused(|| async {
        let began = tokio::time::Instant::now();
        let (_, mut ends) = start(&deps, spec(&deps, ClusterOperation::Create, cloud.clone()));
        let done = ends.recv().await.expect("the operation ends");
        assert_eq!(done.outcome, OpOutcome::Done);
        // Two retries, each after 100 ms less up to a quarter of jitter; no real time passed.
        let took = began.elapsed();
        assert!(
            took >= Duration::from_millis(150) && took < Duration::from_secs(1),
            "{took:?}"
        );
        let record = node(&deps).await.expect("a record");
        assert_eq!(
            (record.status, record.id.as_deref()),
            (ResourceStatus::Created, Some("i-1"))
        );
    });
    cloud.finished();
}

#[test]
fn a_confirm_that_keeps_failing_makes_the_node_anew_then_rolls_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let create = |generation, id: &'static str| Expect::Create {
        node: "master",
        generation,
        after: Duration::ZERO,
        answer: Ok(resource(id, Pending)),
    };
    let shuts_down = |id: &'static str| Expect::Describe {
        id,
        answer: Ok(Some(resource(id, Deleting))),
    };
    let deleted = |id: &'static str| {
        [
            Expect::Delete { id, answer: Ok(()) },
            Expect::Describe {
                id,
                answer: Ok(None),
            },
        ]
    };
    let mut script = vec![create(0, "i-1"), shuts_down("i-1")];
    // Each later attempt deletes what the last one made and makes a new incarnation.
    script.extend(deleted("i-1"));
    script.extend([create(1, "i-2"), shuts_down("i-2")]);
    script.extend(deleted("i-2"));
    script.extend([create(2, "i-3"), shuts_down("i-3")]);
    // Out of attempts: the rollback deletes the last one.
    script.extend(deleted("i-3"));
    let cloud = Scripted::new(script);
    let deps = deps(dir.path(), cloud.clone());
    paused(|| async {
        let (_, mut ends) = start(&deps, spec(&deps, ClusterOperation::Create, cloud.clone()));
        let done = ends.recv().await.expect("the operation ends");
        let OpOutcome::Failed(why) = &done.outcome else {
            panic!("{:?}", done.outcome);
        };
        assert!(why.contains("shut down instead of coming up"), "{why}");
        let record = node(&deps).await.expect("a record");
        assert_eq!(record.status, ResourceStatus::Deleted, "{record:?}");
    });
    cloud.finished();
}

#[test]
fn a_cancelled_create_records_what_its_call_made_and_a_delete_finds_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cloud = Scripted::new(vec![Expect::Create {
        node: "master",
        generation: 0,
        after: Duration::from_secs(10),
        answer: Ok(resource("i-1", Pending)),
    }]);
    let deps = deps(dir.path(), cloud.clone());
    paused(|| async {
        let (planner, mut ends) =
            start(&deps, spec(&deps, ClusterOperation::Create, cloud.clone()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        planner.do_send(Cancel);
        let done = ends.recv().await.expect("the operation ends");
        assert_eq!(done.outcome, OpOutcome::Cancelled);
        // The call in flight finished and was recorded; the confirm never started.
        let record = node(&deps).await.expect("a record");
        assert_eq!(
            (record.status, record.id.as_deref()),
            (ResourceStatus::PollingCreate, Some("i-1"))
        );
        cloud.then(vec![
            Expect::Delete {
                id: "i-1",
                answer: Ok(()),
            },
            Expect::Describe {
                id: "i-1",
                answer: Ok(None),
            },
        ]);
        let (_, mut ends) = start(&deps, spec(&deps, ClusterOperation::Delete, cloud.clone()));
        let done = ends.recv().await.expect("the delete ends");
        assert_eq!(done.outcome, OpOutcome::Done);
        let record = node(&deps).await.expect("a record");
        assert_eq!(record.status, ResourceStatus::Deleted);
    });
    cloud.finished();
}

#[test]
fn after_a_restart_a_create_in_flight_is_looked_for_not_repeated() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The cloud makes the resource, but its answer never arrives: the server dies first.
    let cloud = Scripted::new(vec![Expect::Create {
        node: "master",
        generation: 0,
        after: Duration::from_secs(3600),
        answer: Ok(resource("i-1", Pending)),
    }]);
    {
        let deps = deps(dir.path(), cloud.clone());
        paused(|| async {
            let (_planner, _ends) =
                start(&deps, spec(&deps, ClusterOperation::Create, cloud.clone()));
            tokio::time::sleep(Duration::from_secs(5)).await;
            let record = node(&deps)
                .await
                .expect("the intent is recorded before the call");
            assert_eq!(
                (record.status, record.attempts),
                (ResourceStatus::RequestingCreate, 1)
            );
        });
        // The system and its actors are gone here, mid-call, as after a kill; the store's
        // file is let go, as a dead process's is.
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(deps.store.close()).expect("closed");
    }
    // A new server resumes the operation from the store: it looks the resource up by its
    // identity, finds it, and confirms it.
    let again = Scripted::new(vec![
        Expect::Find {
            node: "master",
            answer: Ok(Some(resource("i-1", Pending))),
        },
        Expect::Describe {
            id: "i-1",
            answer: Ok(Some(resource("i-1", Running))),
        },
    ]);
    let deps = deps(dir.path(), again.clone());
    paused(|| async {
        let resumed = OpSpec {
            resume: true,
            ..spec(&deps, ClusterOperation::Create, again.clone())
        };
        let (_, mut ends) = start(&deps, resumed);
        let done = ends.recv().await.expect("the operation ends");
        assert_eq!(done.outcome, OpOutcome::Done);
        let record = node(&deps).await.expect("a record");
        assert_eq!(
            (record.status, record.id.as_deref()),
            (ResourceStatus::Created, Some("i-1"))
        );
    });
    again.finished();
    assert_eq!(cloud.seen(), vec!["create master/0"], "created once");
}
