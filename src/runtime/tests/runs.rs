//! Runs in process: a supervisor, its planners and their task runners against a scripted
//! provisioner, in virtual time.

use std::time::Duration;

use actix::prelude::*;
use ebb_spi::ResourceState::Pending;

use super::{Expect, SCRIPTED, Scripted, deps, paused, resource};
use crate::model::access::Act;
use crate::model::plan::{NodeRecord, ResourceStatus};
use crate::model::profile::Keepalive;
use crate::model::run::{
    ClusterState, ClusterStatus, Launch, ProgramStatus, RunKey, RunRecord, StopReason,
};
use crate::rules::lifecycle::Event;
use crate::runtime::deps::Deps;
use crate::runtime::supervisor::{Command, RunSupervisor, Supervisors};
use crate::store::clock::now_secs;
use crate::store::{Read, StoreError, Table, keys};

/// A run of the scripted provisioner with one node, `master`.
pub(crate) fn run(status: ProgramStatus, cluster: Option<ClusterStatus>) -> RunRecord {
    RunRecord {
        key: RunKey {
            namespace: "default".into(),
            app: "a".into(),
            program: "p".into(),
            run: "r-1".into(),
        },
        status,
        starting: now_secs(),
        start: None,
        end: None,
        args: Default::default(),
        profile: "SYSTEM:scripted".into(),
        provisioner: SCRIPTED.into(),
        profile_properties: Vec::new(),
        keepalive: Keepalive {
            killed: 600,
            failed: 600,
        },
        timeout: None,
        launch: Launch {
            command: vec!["true".into()],
            env: Default::default(),
            engine: None,
        },
        cluster: ClusterState {
            status: cluster,
            nodes: vec!["master".into()],
            ..Default::default()
        },
        failure: None,
        stop: None,
        exit: None,
        template: None,
        layout: Default::default(),
        node_types: Default::default(),
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
        format: crate::model::run::RUN_FORMAT,
    }
}

/// Writes `run` (and its node's resource, if any) as a start or an earlier server left it.
async fn store(deps: &Deps, run: &RunRecord, node: Option<NodeRecord>) {
    let run = run.clone();
    deps.store
        .write(move |tx| {
            let key = run.key.key();
            tx.put(Table::Runs, &key, &run)?;
            tx.put(Table::Active, &key, &serde_json::json!({ "nodes": 1 }))?;
            if let Some(node) = &node {
                tx.put(Table::Resources, &keys::node(&run.key.run, "master"), node)?;
            }
            Ok::<_, StoreError>(())
        })
        .await
        .expect("write");
}

async fn read(deps: &Deps, key: &RunKey) -> RunRecord {
    let key = key.key();
    deps.store
        .read(move |r| r.get::<RunRecord>(Table::Runs, &key))
        .await
        .expect("read")
        .expect("the run")
}

/// Waits (in virtual time, up to a day) until the run's cluster is DEPROVISIONED.
async fn deprovisioned(deps: &Deps, key: &RunKey) -> RunRecord {
    for _ in 0..86_400 {
        let run = read(deps, key).await;
        if run.cluster.status == Some(ClusterStatus::Deprovisioned) {
            return run;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("never deprovisioned: {:?}", read(deps, key).await);
}

#[test]
fn a_stop_while_the_cluster_is_made_deletes_what_the_create_made() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cloud = Scripted::new(vec![
        Expect::Create {
            node: "master",
            generation: 0,
            after: Duration::from_secs(30),
            answer: Ok(resource("i-1", Pending)),
        },
        Expect::Delete {
            id: "i-1",
            answer: Ok(()),
        },
        Expect::Describe {
            id: "i-1",
            answer: Ok(None),
        },
    ]);
    let deps = deps(dir.path(), cloud.clone());
    paused(|| async {
        let pending = run(ProgramStatus::Pending, None);
        store(&deps, &pending, None).await;
        let supervisor =
            RunSupervisor::new(deps.clone(), Supervisors::default(), pending.clone()).start();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let stop = Command(
            Event::Stop { keepalive: false },
            Act::by_server("run.stop", "r-1"),
        );
        let stopping = supervisor.send(stop).await.expect("sent").expect("stopped");
        assert_eq!(stopping.cluster.status, Some(ClusterStatus::Provisioning));
        let ended = deprovisioned(&deps, &pending.key).await;
        assert_eq!(ended.status, ProgramStatus::Killed, "{ended:?}");
        assert_eq!(ended.stop.map(|s| s.reason), Some(StopReason::Requested));
    });
    // The create in flight finished and was recorded, then deleted; nothing was confirmed.
    cloud.finished();
}

#[test]
fn a_waiting_cluster_goes_when_its_keepalive_ends_not_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cloud = Scripted::new(vec![
        Expect::Delete {
            id: "i-1",
            answer: Ok(()),
        },
        Expect::Describe {
            id: "i-1",
            answer: Ok(None),
        },
    ]);
    let deps = deps(dir.path(), cloud.clone());
    paused(|| async {
        let began = tokio::time::Instant::now();
        let mut waiting = run(ProgramStatus::Killed, Some(ClusterStatus::Waiting));
        waiting.cluster.expires_at = Some(now_secs() + 600);
        let mut node = NodeRecord::new("master", ResourceStatus::Created, 0);
        node.id = Some("i-1".into());
        store(&deps, &waiting, Some(node)).await;
        // As after a restart: the supervisor resumes from the record and arms its deadline.
        let _supervisor =
            RunSupervisor::new(deps.clone(), Supervisors::default(), waiting.clone()).start();
        tokio::time::sleep(Duration::from_secs(595)).await;
        assert_eq!(
            cloud.seen(),
            Vec::<String>::new(),
            "nothing goes before its time"
        );
        let ended = deprovisioned(&deps, &waiting.key).await;
        let took = began.elapsed();
        assert!(
            took >= Duration::from_secs(600) && took < Duration::from_secs(605),
            "{took:?}"
        );
        assert_eq!(ended.status, ProgramStatus::Killed);
    });
    cloud.finished();
}
