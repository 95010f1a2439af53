use super::*;
use crate::model::profile::Keepalive;
use crate::model::profile::Reuse;
use crate::model::property::{EffectiveProperty, Origin as From};
use crate::model::run::{ClusterState, Launch, RunKey};

const NOW_MS: u64 = 1_000_000;

fn run(id: &str, status: P, cluster: Option<C>) -> RunRecord {
    let mut r = RunRecord {
        key: RunKey {
            namespace: "default".into(),
            app: "a".into(),
            program: "p".into(),
            run: id.into(),
        },
        status,
        starting: 900,
        start: None,
        end: None,
        args: Default::default(),
        profile: "USER:warm".into(),
        provisioner: "sim".into(),
        profile_properties: vec![EffectiveProperty {
            name: "nodes".into(),
            value: "2".into(),
            origin: From::Profile,
        }],
        keepalive: Keepalive::default(),
        timeout: Some(3600),
        launch: Launch {
            command: vec!["true".into()],
            env: Default::default(),
            engine: None,
        },
        cluster: ClusterState {
            status: cluster,
            nodes: vec!["m".into(), "w".into()],
            ..Default::default()
        },
        failure: None,
        stop: None,
        node_types: Default::default(),
        config: None,
        launcher: None,
        started_by: None,
        queue: None,
        retry: None,
        attempts: Vec::new(),
        relaunch_at: None,
        reuse: Some(Reuse { idle: 600 }),
        application: None,
        pooled: false,
        settled: false,
        format: 0,
        exit: None,
        template: None,
        layout: Default::default(),
    };
    if cluster == Some(C::Idle) {
        r.cluster.reuse_key = r.reuse_key();
        r.cluster.expires_at = Some(NOW_MS / 1000 + 600);
    }
    r
}

#[test]
fn a_pending_run_that_matches_takes_the_idle_cluster_over() {
    let left = run("left", P::Completed, Some(C::Idle));
    let taker = run("taker", P::Pending, None);
    let claim = claim(&left, &taker, NOW_MS, NOW_MS - 7).expect("applies");
    let gone = &claim.left.run;
    assert_eq!(gone.cluster.status, Some(C::Reused));
    assert_eq!(gone.cluster.reused_by.as_deref(), Some("taker"));
    assert!(!gone.is_active() && !gone.needs_supervisor());
    let took = &claim.taker.run;
    assert_eq!(
        (took.status, took.cluster.status),
        (P::Starting, Some(C::Provisioning))
    );
    assert_eq!(took.cluster_id(), "left");
    let origin = took.cluster.origin.as_ref().expect("applies");
    assert_eq!(
        (origin.from.as_str(), origin.claim_ms, origin.ready),
        ("left", 7, false)
    );
    assert_eq!(claim.taker.effects, vec![Effect::PrepareCluster]);

    // Taken over again, the cluster keeps the id of the run that made it.
    let mut again = took.clone();
    again.status = P::Completed;
    again.cluster.status = Some(C::Idle);
    again.cluster.reuse_key = again.reuse_key();
    again.cluster.expires_at = Some(NOW_MS / 1000 + 60);
    let third = run("third", P::Pending, None);
    let claim = super::claim(&again, &third, NOW_MS, NOW_MS).expect("applies");
    assert_eq!(claim.taker.run.cluster_id(), "left");
    assert_eq!(
        claim.taker.run.cluster.origin.expect("origin").from,
        "taker"
    );
}

#[test]
fn what_does_not_match_or_is_not_idle_is_refused() {
    let left = run("left", P::Completed, Some(C::Idle));
    let taker = run("taker", P::Pending, None);
    let refused = |l: &RunRecord, t: &RunRecord| claim(l, t, NOW_MS, NOW_MS).err();

    let mut other_ns = taker.clone();
    other_ns.key.namespace = "other".into();
    assert_eq!(refused(&left, &other_ns), Some(Refusal::Mismatch));
    let mut more_nodes = taker.clone();
    more_nodes.profile_properties[0].value = "3".into();
    assert_eq!(refused(&left, &more_nodes), Some(Refusal::Mismatch));
    let mut other_secret = taker.clone();
    other_secret.profile_properties.push(EffectiveProperty {
        name: "accessKey".into(),
        value: "${secure(other)}".into(),
        origin: From::Profile,
    });
    assert_eq!(refused(&left, &other_secret), Some(Refusal::Mismatch));
    let mut other_profile = taker.clone();
    other_profile.profile = "USER:cold".into();
    assert_eq!(refused(&left, &other_profile), Some(Refusal::Mismatch));
    // The same value set at another level is the same cluster.
    let mut overridden = taker.clone();
    overridden.profile_properties[0].origin = From::Level(crate::model::property::Level::Runtime);
    assert!(refused(&left, &overridden).is_none());

    let waiting = run("left", P::Failed, Some(C::Waiting));
    assert_eq!(refused(&waiting, &taker), Some(Refusal::NotIdle));
    let mut broken = left.clone();
    broken.cluster.attention = Some(crate::model::run::Attention {
        reason: "x".into(),
        since: 1,
    });
    assert_eq!(refused(&broken, &taker), Some(Refusal::NotIdle));
    let mut expiring = left.clone();
    expiring.cluster.expires_at = Some(NOW_MS / 1000 + MARGIN);
    assert_eq!(refused(&expiring, &taker), Some(Refusal::Expiring));
    let begun = run("taker", P::Starting, Some(C::Provisioning));
    assert_eq!(refused(&left, &begun), Some(Refusal::NotPending));
    let mut no_reuse = taker.clone();
    no_reuse.reuse = None;
    assert_eq!(refused(&left, &no_reuse), Some(Refusal::Mismatch));
}
