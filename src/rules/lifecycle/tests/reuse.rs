//! A reusing profile's runs: a completed run's cluster left IDLE, an IDLE cluster's end, and
//! one taken over made ready or replaced.

use super::*;

fn reusing(status: P, cluster: Option<C>) -> RunRecord {
    RunRecord {
        reuse: Some(crate::model::profile::Reuse { idle: 600 }),
        ..run(status, cluster)
    }
}

#[test]
fn a_completed_run_of_a_reusing_profile_leaves_its_cluster_idle() {
    let t = on(&reusing(P::Running, Some(C::Provisioned)), exit(0), NOW).expect("applies");
    assert_eq!(
        (t.run.status, t.run.cluster.status),
        (P::Completed, Some(C::Idle))
    );
    assert_eq!(t.run.cluster.expires_at, Some(NOW + 600));
    assert_eq!(t.run.cluster.reuse_key, t.run.reuse_key());
    assert!(t.run.cluster.reuse_key.is_some());
    assert!(t.effects.is_empty(), "{:?}", t.effects);
    // Bounded by the profile's timeout (900 + 3600).
    let late = on(&reusing(P::Running, Some(C::Provisioned)), exit(0), 4_200).expect("applies");
    assert_eq!(late.run.cluster.expires_at, Some(4_500));
    // A failed or killed run keeps its cluster under keepalive, never for reuse.
    let failed = on(&reusing(P::Running, Some(C::Provisioned)), exit(3), NOW).expect("applies");
    assert_eq!(failed.run.cluster.status, Some(C::Waiting));
    let mut stopped = reusing(P::Running, Some(C::Provisioned));
    stopped.stop = Some(Stop {
        reason: StopReason::Requested,
        keepalive: false,
    });
    let killed = on(&stopped, exit(0), NOW).expect("applies");
    assert_eq!(killed.run.cluster.status, Some(C::Deprovisioning));
    // A cluster that needs attention is never offered.
    let mut broken = reusing(P::Running, Some(C::Provisioned));
    broken.cluster.attention = Some(crate::model::run::Attention {
        reason: "x".into(),
        since: 1,
    });
    let t = on(&broken, exit(0), NOW).expect("applies");
    assert_eq!(t.run.cluster.status, Some(C::Deprovisioning));
    // Without reuse a completed run deprovisions.
    let t = on(&run(P::Running, Some(C::Provisioned)), exit(0), NOW).expect("applies");
    assert_eq!(t.run.cluster.status, Some(C::Deprovisioning));
}

#[test]
fn an_idle_cluster_expires_is_deprovisioned_or_extended_like_a_waiting_one() {
    let mut idle = reusing(P::Completed, Some(C::Idle));
    idle.cluster.expires_at = Some(NOW + 10);
    assert_eq!(next_deadline(&idle), Some((NOW + 10, Event::Expired)));
    assert!(resume(&idle).is_empty());
    for event in [Event::Expired, Event::Deprovision, Event::TimedOut] {
        let t = on(&idle, event.clone(), NOW).expect("applies");
        assert_eq!(t.run.cluster.status, Some(C::Deprovisioning), "{event:?}");
        assert_eq!(t.effects, vec![Effect::DeleteCluster]);
    }
    let t = on(
        &idle,
        Event::Extend {
            expire_at: NOW + 60,
            shorten: false,
        },
        NOW,
    )
    .expect("applies");
    assert_eq!(t.run.cluster.expires_at, Some(NOW + 60));
    assert!(on(&idle, Event::Stop { keepalive: false }, NOW).is_err());
}

#[test]
fn a_taken_over_cluster_is_made_ready_or_replaced() {
    let mut taker = reusing(P::Starting, Some(C::Provisioning));
    taker.cluster.id = Some("maker".into());
    taker.cluster.origin = Some(crate::model::run::Origin {
        from: "maker".into(),
        claimed_at: 1,
        claim_ms: 2,
        ready: false,
        discarded: None,
        pooled: false,
    });
    assert_eq!(resume(&taker), vec![Effect::PrepareCluster]);
    let ready = on(&taker, Event::Provisioned, NOW).expect("applies");
    assert_eq!(ready.run.cluster.status, Some(C::Provisioned));
    assert!(ready.run.cluster.origin.as_ref().expect("applies").ready);
    assert_eq!(ready.effects, vec![Effect::Launch]);

    let bad = on(&taker, Event::ReuseFailed("db is down".into()), NOW).expect("applies");
    assert_eq!(bad.run.cluster.status, Some(C::Deprovisioning));
    assert_eq!(bad.effects, vec![Effect::DeleteCluster]);
    assert_eq!(
        bad.run.cluster_id(),
        "maker",
        "the taken cluster is deleted"
    );
    assert_eq!(resume(&bad.run), vec![Effect::DeleteCluster]);
    let own = on(&bad.run, Event::Deprovisioned, NOW).expect("applies");
    assert_eq!(
        (own.run.status, own.run.cluster.status),
        (P::Starting, Some(C::Provisioning))
    );
    assert_eq!(own.effects, vec![Effect::CreateCluster]);
    assert_eq!(own.run.cluster_id(), "r", "then it makes its own");
    assert_eq!(resume(&own.run), vec![Effect::CreateCluster]);

    // A stop while the unusable cluster goes ends the run once it is gone.
    let stopping = on(&bad.run, Event::Stop { keepalive: false }, NOW).expect("applies");
    let gone = on(&stopping.run, Event::Deprovisioned, NOW).expect("applies");
    assert_eq!(
        (gone.run.status, gone.run.cluster.status),
        (P::Killed, Some(C::Deprovisioned))
    );
    assert_eq!(gone.effects, vec![Effect::Finish]);
    // One that cannot be deleted fails the run.
    let stuck = on(&bad.run, Event::DeprovisionFailed("x".into()), NOW).expect("applies");
    assert_eq!(
        (stuck.run.status, stuck.run.cluster.status),
        (P::Failed, Some(C::Orphaned))
    );
}
