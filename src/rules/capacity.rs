//! Where a node's create goes when places run out of room, as pure functions.
//!
//! Each node has its places in order ([`ebb_spi::Provisioner::placements`]: spot before
//! on-demand, then the profile's zones in order). A create answered with a capacity error
//! blocks that place (or, region-wide, that market) for the rest of the operation, recorded
//! in the operation ([`Blocked`]), and the node moves to its first place not blocked
//! ([`next_placement`]); every move is a new incarnation, so no cloud answers it with the
//! failed request. When every place is blocked the node waits a backoff inside its retry
//! budget and walks its places again from the first, counting only blocks from that walk
//! on. A node whose budget runs out that way is given up if the cluster keeps at least
//! `minNodes` without it ([`may_drop`]); the master never is.

use ebb_spi::{CapacityScope, Placement, Properties};

use crate::model::operation::Blocked;
use crate::model::plan::NodePlacement;

/// The most blocks one operation keeps (a place is blocked once however often it fails).
pub const MAX_BLOCKED: usize = 256;

/// Whether `block` rules out `place`.
fn blocks(block: &Blocked, place: &Placement) -> bool {
    block.market == place.market.as_str() && (block.region || block.zone == place.zone)
}

/// The first of `candidates` no block from `round_ms` on rules out.
pub fn next_placement(
    candidates: &[Placement],
    blocked: &[Blocked],
    round_ms: u64,
) -> Option<Placement> {
    candidates
        .iter()
        .find(|place| {
            !blocked
                .iter()
                .any(|b| b.at_ms >= round_ms && blocks(b, place))
        })
        .cloned()
}

/// Records that `place` had no room (`scope`) when `node` asked at `now_ms`: a block already
/// there for the same place is renewed, not repeated.
pub fn block(
    blocked: &mut Vec<Blocked>,
    place: &Placement,
    scope: CapacityScope,
    node: &str,
    error: &str,
    now_ms: u64,
) {
    let region = scope == CapacityScope::Region;
    let entry = Blocked {
        zone: if region { None } else { place.zone.clone() },
        market: place.market.as_str().to_string(),
        region,
        node: node.to_string(),
        at_ms: now_ms,
        error: error.chars().take(500).collect(),
    };
    if let Some(same) = blocked
        .iter_mut()
        .find(|b| b.zone == entry.zone && b.market == entry.market && b.region == entry.region)
    {
        *same = entry;
    } else if blocked.len() < MAX_BLOCKED {
        blocked.push(entry);
    }
}

/// Where a node goes after its create at `current` found no room and the operation's blocks
/// became `blocked`: the next place of this walk (one more move), or, with every place
/// blocked, `None` and the start of a new walk at `now_ms` (from the first place, after a
/// backoff).
pub fn after_full(
    candidates: &[Placement],
    blocked: &[Blocked],
    current: &NodePlacement,
    now_ms: u64,
) -> (Option<NodePlacement>, NodePlacement) {
    let moved = |at: Placement, round_ms| NodePlacement {
        at,
        moves: current.moves.saturating_add(1),
        round_ms,
    };
    match next_placement(candidates, blocked, current.round_ms) {
        Some(next) => {
            let next = moved(next, current.round_ms);
            (Some(next.clone()), next)
        }
        None => {
            let first = candidates.first().cloned().unwrap_or_default();
            (None, moved(first, now_ms))
        }
    }
}

/// How many times the cloud may reclaim one node before, with `spot-with-fallback`, it is
/// made anew on-demand, when the profile does not say (`spotRetries`).
pub const DEFAULT_SPOT_RETRIES: u32 = 2;

/// A node's places once the cloud reclaimed it `reclaims` times: with `spot-with-fallback`,
/// on-demand only once `spotRetries` is reached (plain `spot` stays on spot).
pub fn after_reclaims(
    candidates: Vec<Placement>,
    properties: &Properties,
    reclaims: u32,
) -> Vec<Placement> {
    use ebb_spi::capacity::{MarketType, SPOT_RETRIES};
    let market = MarketType::of(properties);
    let retries = properties
        .get(SPOT_RETRIES.name)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_SPOT_RETRIES);
    if market != MarketType::SpotWithFallback || reclaims < retries {
        return candidates;
    }
    let on_demand: Vec<Placement> = candidates
        .iter()
        .filter(|p| p.market == ebb_spi::Market::OnDemand)
        .cloned()
        .collect();
    if on_demand.is_empty() {
        candidates
    } else {
        on_demand
    }
}

/// The places every block of `blocked` names, for a message ("zone a (spot), zone b (spot)").
pub fn describe(blocked: &[Blocked]) -> String {
    blocked
        .iter()
        .map(|b| match (&b.zone, b.region) {
            (_, true) => format!("every zone ({})", b.market),
            (Some(zone), false) => format!("zone {zone} ({})", b.market),
            (None, false) => b.market.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The fewest nodes the cluster of a run with `properties` may be left with (`minNodes`;
/// unset: every node asked for).
pub fn min_nodes(properties: &Properties, asked: usize) -> usize {
    properties
        .get(ebb_spi::capacity::MIN_NODES.name)
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map_or(asked, |min| min.min(asked))
}

/// The sizes a resize may leave the cluster of a run with `properties` at: from `minNodes`
/// (else 1) to `maxNodes` (else, for the run's own `program`, the size asked for, and for an
/// operator, the provisioner's `max_nodes`), never above `max_nodes`.
pub fn resize_bounds(properties: &Properties, program: bool, max_nodes: u32) -> (usize, usize) {
    use ebb_spi::capacity::{MAX_NODES, MIN_NODES};
    let number = |name: &str| {
        properties
            .get(name)
            .and_then(|v| v.trim().parse::<usize>().ok())
    };
    let ceiling = max_nodes as usize;
    let max = match (number(MAX_NODES.name), program) {
        (Some(max), _) => max,
        (None, true) => number("nodes").unwrap_or(1),
        (None, false) => ceiling,
    };
    (number(MIN_NODES.name).unwrap_or(1).max(1), max.min(ceiling))
}

/// Whether an expand or shrink leaving `size` nodes keeps the cluster within `(min, max)`;
/// why not, naming the bound. Other operations do not change the size.
pub fn check_size(
    operation: crate::model::plan::ClusterOperation,
    size: usize,
    (min, max): (usize, usize),
) -> Result<(), String> {
    use crate::model::plan::ClusterOperation as Op;
    if operation == Op::Expand && size > max {
        return Err(format!(
            "the cluster would have {size} nodes, more than its maxNodes ({max})"
        ));
    }
    if operation == Op::Shrink && size < min {
        return Err(format!(
            "the cluster would have {size} nodes, fewer than its minNodes ({min})"
        ));
    }
    Ok(())
}

/// Whether node `node` (`master` or not), which found no room anywhere, may be given up: the
/// cluster keeps `remaining` other nodes (not given up yet), at least `min`.
pub fn may_drop(master: bool, remaining: usize, min: usize) -> bool {
    !master && remaining >= min.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebb_spi::Market::{OnDemand, Spot};

    fn at(zone: &str, market: ebb_spi::Market) -> Placement {
        Placement {
            zone: Some(zone.to_string()),
            market,
        }
    }

    fn candidates() -> Vec<Placement> {
        vec![
            at("a", Spot),
            at("b", Spot),
            at("a", OnDemand),
            at("b", OnDemand),
        ]
    }

    #[test]
    fn a_full_zone_is_skipped_by_the_rest_of_the_operation() {
        let mut blocked = Vec::new();
        assert_eq!(
            next_placement(&candidates(), &blocked, 0),
            Some(at("a", Spot))
        );
        block(
            &mut blocked,
            &at("a", Spot),
            CapacityScope::Zone,
            "worker-1",
            "full",
            10,
        );
        // Another node starting now skips it too.
        assert_eq!(
            next_placement(&candidates(), &blocked, 0),
            Some(at("b", Spot))
        );
        block(
            &mut blocked,
            &at("b", Spot),
            CapacityScope::Zone,
            "worker-2",
            "full",
            20,
        );
        assert_eq!(
            next_placement(&candidates(), &blocked, 0),
            Some(at("a", OnDemand)),
            "spot is out everywhere: on-demand, the fallback"
        );
        // The same place blocked again is renewed, not repeated.
        block(
            &mut blocked,
            &at("b", Spot),
            CapacityScope::Zone,
            "worker-3",
            "full",
            30,
        );
        assert_eq!(blocked.len(), 2);
        assert_eq!(blocked[1].at_ms, 30);
        assert_eq!(describe(&blocked), "zone a (spot), zone b (spot)");
    }

    #[test]
    fn a_region_wide_block_rules_out_every_zone_of_its_market() {
        let mut blocked = Vec::new();
        block(
            &mut blocked,
            &at("a", Spot),
            CapacityScope::Region,
            "w",
            "no spot",
            5,
        );
        assert_eq!(
            next_placement(&candidates(), &blocked, 0),
            Some(at("a", OnDemand))
        );
        assert_eq!(describe(&blocked), "every zone (spot)");
    }

    #[test]
    fn with_every_place_full_a_new_walk_begins_from_the_first() {
        let only_spot = vec![at("a", Spot), at("b", Spot)];
        let mut blocked = Vec::new();
        let first = NodePlacement {
            at: at("a", Spot),
            moves: 0,
            round_ms: 0,
        };
        block(
            &mut blocked,
            &first.at,
            CapacityScope::Zone,
            "w",
            "full",
            10,
        );
        let (next, record) = after_full(&only_spot, &blocked, &first, 11);
        assert_eq!(next.as_ref(), Some(&record));
        assert_eq!(
            (record.at.clone(), record.moves, record.round_ms),
            (at("b", Spot), 1, 0)
        );
        block(
            &mut blocked,
            &record.at,
            CapacityScope::Zone,
            "w",
            "full",
            12,
        );
        let (next, again) = after_full(&only_spot, &blocked, &record, 13);
        assert_eq!(next, None, "every place is full");
        assert_eq!(
            (again.at.clone(), again.moves, again.round_ms),
            (at("a", Spot), 2, 13)
        );
        // The new walk counts only blocks from its start: zone a may be tried again.
        assert_eq!(
            next_placement(&only_spot, &blocked, again.round_ms),
            Some(at("a", Spot))
        );
    }

    #[test]
    fn a_node_reclaimed_spot_retries_times_falls_back_to_on_demand() {
        let fallback = ebb_spi::properties([("marketType", "spot-with-fallback")]);
        assert_eq!(after_reclaims(candidates(), &fallback, 1), candidates());
        assert_eq!(
            after_reclaims(candidates(), &fallback, 2),
            [at("a", OnDemand), at("b", OnDemand)]
        );
        let once =
            ebb_spi::properties([("marketType", "spot-with-fallback"), ("spotRetries", "0")]);
        assert_eq!(after_reclaims(candidates(), &once, 0).len(), 2);
        let spot = ebb_spi::properties([("marketType", "spot")]);
        let only_spot = vec![at("a", Spot)];
        assert_eq!(
            after_reclaims(only_spot.clone(), &spot, 9),
            only_spot,
            "spot stays spot"
        );
    }

    #[test]
    fn a_resize_stays_within_min_and_max_nodes() {
        use crate::model::plan::ClusterOperation::{Expand, Shrink};
        let p = ebb_spi::properties([("nodes", "3"), ("minNodes", "2"), ("maxNodes", "6")]);
        assert_eq!(resize_bounds(&p, true, 100), (2, 6));
        assert_eq!(
            resize_bounds(&p, false, 5),
            (2, 5),
            "never past the provisioner's"
        );
        let bare = ebb_spi::properties([("nodes", "3")]);
        assert_eq!(
            resize_bounds(&bare, true, 100),
            (1, 3),
            "a program may not grow it"
        );
        assert_eq!(resize_bounds(&bare, false, 100), (1, 100));
        assert_eq!(check_size(Expand, 6, (2, 6)), Ok(()));
        let err = check_size(Expand, 7, (2, 6)).expect_err("too big");
        assert!(err.contains("maxNodes (6)"), "{err}");
        let err = check_size(Shrink, 1, (2, 6)).expect_err("too small");
        assert!(err.contains("minNodes (2)"), "{err}");
    }

    #[test]
    fn only_workers_are_given_up_and_never_below_the_minimum() {
        assert!(may_drop(false, 3, 3));
        assert!(!may_drop(false, 2, 3));
        assert!(!may_drop(true, 10, 1), "the master is never given up");
        assert!(!may_drop(false, 0, 0), "a cluster keeps at least one node");
        let p = ebb_spi::properties([("minNodes", "2")]);
        assert_eq!(min_nodes(&p, 5), 2);
        assert_eq!(min_nodes(&p, 1), 1);
        assert_eq!(min_nodes(&Properties::new(), 5), 5);
    }
}
