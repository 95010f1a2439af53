use super::*;
use crate::model::plan::ResourceStatus;
use crate::model::run::{ClusterStatus as C, Origin, ProgramStatus as P};
use crate::rules::lifecycle::tests::run;

/// 2026-11-27T00:00:00Z.
const MIDNIGHT: u64 = 1_795_737_600;

fn node(name: &str, created: u64, deleted: Option<u64>, machine: &str) -> NodeRecord {
    let mut n = NodeRecord::new(name, ResourceStatus::Created, 0);
    n.create_time = Some(created);
    n.delete_time = deleted;
    n.properties
        .insert("machineType".to_string(), machine.to_string());
    n
}

/// 1.80 an hour for `big`, 0.36 for `small`, nothing known for anything else.
fn price(n: &NodeRecord) -> Option<u64> {
    match n.properties.get("machineType").map(String::as_str) {
        Some("big") => Some(1_800_000),
        Some("small") => Some(360_000),
        _ => None,
    }
}

#[test]
fn node_time_is_split_by_day_and_priced_node_by_node() {
    let mut r = run(P::Completed, Some(C::Deprovisioned));
    r.end = Some(MIDNIGHT + 100);
    // Made an hour before midnight, gone 100 s after: 3600 s on the 26th, 100 s on the 27th.
    let nodes = [
        node("m", MIDNIGHT - 3600, Some(MIDNIGHT + 100), "big"),
        node("w", MIDNIGHT - 3600, Some(MIDNIGHT + 100), "odd"),
    ];
    let e = settle(&r, &nodes, price, MIDNIGHT + 200);
    assert_eq!(e.dims.profile, "SYSTEM:local");
    let (d26, d27) = (&e.days["2026-11-26"], &e.days["2026-11-27"]);
    assert_eq!((d26.program, d27.program), (7200, 200));
    // The priced node: 3600 s at 1.80 and 100 s (0.05); the other is unknown, not free.
    assert_eq!((d26.cost_micros, d27.cost_micros), (1_800_000, 50_000));
    assert_eq!((d26.unpriced, d27.unpriced), (3600, 100));
    assert_eq!(d27.markets["on-demand"], 200);
    // The run counts once, on the day it ended.
    assert!(d26.runs.is_empty());
    assert_eq!(d27.runs["COMPLETED"], 1);
}

#[test]
fn keepalive_and_idle_time_are_their_own_figures() {
    let t = MIDNIGHT;
    let mut failed = run(P::Failed, Some(C::Deprovisioned));
    failed.end = Some(t + 100);
    failed.cluster.waiting_since = Some(t + 100);
    failed.cluster.waiting_until = Some(t + 400);
    let nodes = [node("m", t, Some(t + 410), "small")];
    let f = &settle(&failed, &nodes, price, t + 500).days["2026-11-27"];
    assert_eq!((f.program, f.kept, f.idle), (110, 300, 0));
    assert_eq!(f.runs["FAILED"], 1);

    // A run that left its cluster IDLE, taken over by the next at t + 1000: it counts up to
    // the claim; the next counts from it.
    let mut left = run(P::Completed, Some(C::Reused));
    left.end = Some(t + 100);
    left.cluster.idle_since = Some(t + 100);
    left.cluster.idle_until = Some(t + 1000);
    let nodes = [node("m", t, Some(t + 5000), "small")];
    let f = &settle(&left, &nodes, price, t + 6000).days["2026-11-27"];
    assert_eq!((f.program, f.idle), (100, 900));
    assert_eq!(f.cost_micros, 100_000);
    let mut taker = run(P::Completed, Some(C::Deprovisioned));
    taker.end = Some(t + 4000);
    taker.cluster.origin = Some(Origin {
        from: "left".into(),
        claimed_at: (t + 1000) * 1000 + 400,
        claim_ms: 3,
        ready: true,
        discarded: None,
        pooled: false,
    });
    let f = &settle(&taker, &nodes, price, t + 6000).days["2026-11-27"];
    assert_eq!((f.program, f.idle), (4000, 0));

    // A pool's run: all its time is the pool's, and it is no program run.
    let mut pooled = left.clone();
    pooled.pooled = true;
    let f = &settle(&pooled, &nodes, price, t + 6000).days["2026-11-27"];
    assert_eq!((f.program, f.idle, f.pool), (0, 0, 1000));
    assert!(f.runs.is_empty());
}

#[test]
fn a_rejected_run_counts_with_no_node_time() {
    let r = run(P::Rejected, None);
    let e = settle(&r, &[], price, MIDNIGHT + 5);
    assert_eq!(e.days["2026-11-27"].runs["REJECTED"], 1);
    assert_eq!(e.days["2026-11-27"].node_seconds(), 0);
    assert!(settles(&r));
    assert!(!settles(&run(P::Running, Some(C::Provisioned))));
    assert!(settles(&run(P::Completed, Some(C::Orphaned))));
}

#[test]
fn a_node_still_there_counts_up_to_now() {
    let r = run(P::Killed, Some(C::Orphaned));
    let nodes = [node("m", MIDNIGHT, None, "big")];
    let e = settle(&r, &nodes, price, MIDNIGHT + 60);
    assert_eq!(e.days["2026-11-27"].program, 60);
    assert_eq!(e.days["2026-11-27"].cost_micros, 30_000);
}

#[test]
fn rows_group_by_time_first_then_the_dimensions_asked() {
    let dims = |ns: &str, program: &str| Dims {
        namespace: ns.into(),
        app: "a".into(),
        program: program.into(),
        profile: "USER:p".into(),
        provisioner: "sim".into(),
    };
    let figures = |program: u64| Figures {
        program,
        cost_micros: program * 10,
        ..Default::default()
    };
    let rows = vec![
        ("2026-11-27".to_string(), dims("x", "p1"), figures(1)),
        ("2026-11-24".to_string(), dims("x", "p2"), figures(2)),
        ("2026-11-22".to_string(), dims("y", "p1"), figures(4)),
        ("2026-10".to_string(), dims("x", "p1"), figures(8)),
    ];
    let query = |group_by: &str| {
        let params = crate::model::usage::UsageParams {
            from: Some("2026-10-01".into()),
            to: Some("2026-12-01".into()),
            group_by: Some(group_by.into()),
            ..Default::default()
        };
        UsageQuery::parse(params, jiff::civil::date(2026, 11, 27)).expect("query")
    };
    let group = |rows: Vec<(String, Dims, Figures)>, q: &UsageQuery| {
        let mut g = Grouping::new(q);
        for (period, dims, figures) in &rows {
            g.add(period, dims, figures)?;
        }
        Ok::<_, TooManyGroups>(g.finish())
    };
    let (groups, total) = group(rows.clone(), &query("namespace,month")).expect("groups");
    assert_eq!(total.program, 15);
    let keys: Vec<(String, String, u64)> = groups
        .iter()
        .map(|g| {
            (
                g.key["month"].clone(),
                g.key["namespace"].clone(),
                g.figures.program_node_seconds,
            )
        })
        .collect();
    assert_eq!(
        keys,
        vec![
            ("2026-10".into(), "x".into(), 8),
            ("2026-11".into(), "x".into(), 3),
            ("2026-11".into(), "y".into(), 4),
        ]
    );
    let day_rows: Vec<_> = rows.into_iter().take(3).collect();
    let (groups, _) = group(day_rows, &query("week")).expect("weeks");
    let weeks: Vec<(&str, u64)> = groups
        .iter()
        .map(|g| (g.key["week"].as_str(), g.figures.node_seconds))
        .collect();
    // Sunday the 22nd is in the week of Monday the 16th.
    assert_eq!(weeks, vec![("2026-11-16", 4), ("2026-11-23", 3)]);
}
