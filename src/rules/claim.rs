//! Which live runs a server takes on, when several servers share the store: a pure choice over
//! what the store says (the live runs, their owners, the servers up) and what the server knows
//! (its name and lease, the runs it supervises, since when each run has been without an owner).
//!
//! A run without an owner goes first to the server its key hashes to among those up, so that
//! servers do not race for it; once it has gone a lease's time to live without one (that server
//! is slow, or gone too), any server takes it. A run this server owns but no longer supervises
//! (its supervisor stopped at a fenced write) gets a supervisor again.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::server::Owner;

/// What the store says, as one claim round reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Census {
    /// The live runs' keys.
    pub active: BTreeSet<String>,
    /// The owner of each owned run.
    pub owners: BTreeMap<String, Owner>,
    /// The servers up and not draining, by name.
    pub servers: Vec<String>,
}

/// The server choosing, and what it knows.
#[derive(Debug, Clone, Copy)]
pub struct Chooser<'a> {
    pub name: &'a str,
    pub lease: i64,
    /// How long a run waits for the server it hashes to before any takes it (epoch ms).
    pub ttl_ms: u64,
}

/// A run to take on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// It has no owner: record this server as its owner (if it still has none), then
    /// supervise it.
    Take(String),
    /// This server owns it but does not supervise it: supervise it again.
    Resupervise(String),
}

/// The claims of one round at `now_ms`, and the runs still without an owner with since when
/// (`orphaned` is the previous round's; a run taken or gone leaves it).
pub fn claims(
    census: &Census,
    me: &Chooser<'_>,
    supervises: impl Fn(&str) -> bool,
    orphaned: &BTreeMap<String, u64>,
    now_ms: u64,
) -> (Vec<Claim>, BTreeMap<String, u64>) {
    let mut claims = Vec::new();
    let mut still = BTreeMap::new();
    for key in &census.active {
        let run_id = key.rsplit('/').next().unwrap_or(key);
        match census.owners.get(key) {
            Some(owner) if owner.server == me.name && owner.lease == me.lease => {
                if !supervises(run_id) {
                    claims.push(Claim::Resupervise(key.clone()));
                }
            }
            // Another server's, or an earlier lease of this one's, which the store ends.
            Some(_) => {}
            None => {
                let since = orphaned.get(key).copied().unwrap_or(now_ms);
                let mine = preferred(key, &census.servers) == Some(me.name);
                if mine || now_ms.saturating_sub(since) >= me.ttl_ms {
                    claims.push(Claim::Take(key.clone()));
                } else {
                    still.insert(key.clone(), since);
                }
            }
        }
    }
    (claims, still)
}

/// The server a run without an owner goes to first: one of those up, by a hash of its key.
pub fn preferred<'a>(key: &str, servers: &'a [String]) -> Option<&'a str> {
    if servers.is_empty() {
        return None;
    }
    // FNV-1a: the same on every server.
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let i = usize::try_from(hash % servers.len() as u64).unwrap_or(0);
    servers.get(i).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(server: &str, lease: i64) -> Owner {
        Owner {
            server: server.into(),
            lease,
            since: 0,
        }
    }

    /// A run key that hashes to `server` among `servers`.
    fn key_for(server: &str, servers: &[String]) -> String {
        (0..1000)
            .map(|i| format!("ns/app/p/run-{i}"))
            .find(|k| preferred(k, servers) == Some(server))
            .expect("some key hashes to every server")
    }

    #[test]
    fn a_run_goes_first_to_the_same_server_everywhere() {
        let servers: Vec<String> = ["a", "b", "c"].into_iter().map(String::from).collect();
        let first = preferred("ns/app/p/run-1", &servers);
        assert!(first.is_some());
        assert_eq!(first, preferred("ns/app/p/run-1", &servers));
        assert_eq!(preferred("ns/app/p/run-1", &[]), None);
        // Spread: among many runs, every server is preferred for some.
        let mut seen = BTreeSet::new();
        for i in 0..100 {
            seen.extend(preferred(&format!("ns/app/p/run-{i}"), &servers));
        }
        assert_eq!(seen.len(), 3);
    }

    #[test]
    fn the_claim_table() {
        let servers: Vec<String> = ["a", "b"].into_iter().map(String::from).collect();
        let me = Chooser {
            name: "a",
            lease: 7,
            ttl_ms: 10_000,
        };
        let now = 100_000;
        let mine = key_for("a", &servers);
        let theirs = key_for("b", &servers);
        let census = |owners: Vec<(&String, Owner)>| Census {
            active: [mine.clone(), theirs.clone()].into(),
            owners: owners.into_iter().map(|(k, o)| (k.clone(), o)).collect(),
            servers: servers.clone(),
        };
        let none = |_: &str| false;
        let all = |_: &str| true;
        let fresh = BTreeMap::new();
        let long_ago: BTreeMap<String, u64> = [(theirs.clone(), now - 10_000)].into();
        let lately: BTreeMap<String, u64> = [(theirs.clone(), now - 9_999)].into();
        type Row<'a> = (
            Census,
            &'a dyn Fn(&str) -> bool,
            &'a BTreeMap<String, u64>,
            Vec<Claim>,
            Vec<(&'a String, u64)>,
        );
        let rows: Vec<Row<'_>> = vec![
            // Unowned: the one this server hashes to now; the other waits, noted since now.
            (
                census(vec![]),
                &none,
                &fresh,
                vec![Claim::Take(mine.clone())],
                vec![(&theirs, now)],
            ),
            // ...and is taken by any once it has waited a time to live.
            (
                census(vec![]),
                &none,
                &long_ago,
                vec![Claim::Take(mine.clone()), Claim::Take(theirs.clone())],
                vec![],
            ),
            (
                census(vec![]),
                &none,
                &lately,
                vec![Claim::Take(mine.clone())],
                vec![(&theirs, now - 9_999)],
            ),
            // Owned here and supervised: nothing; not supervised: supervised again.
            (
                census(vec![(&mine, owner("a", 7)), (&theirs, owner("b", 9))]),
                &all,
                &fresh,
                vec![],
                vec![],
            ),
            (
                census(vec![(&mine, owner("a", 7)), (&theirs, owner("b", 9))]),
                &none,
                &fresh,
                vec![Claim::Resupervise(mine.clone())],
                vec![],
            ),
            // An owner record of an earlier lease of this server: the store ends it; wait.
            (
                census(vec![(&mine, owner("a", 3)), (&theirs, owner("b", 9))]),
                &none,
                &fresh,
                vec![],
                vec![],
            ),
        ];
        for (i, (census, supervises, orphaned, want, still)) in rows.into_iter().enumerate() {
            let (got, left) = claims(&census, &me, supervises, orphaned, now);
            assert_eq!(got, want, "row {i}");
            let still: BTreeMap<String, u64> =
                still.into_iter().map(|(k, t)| (k.clone(), t)).collect();
            assert_eq!(left, still, "row {i}");
        }
        // No server up (every one draining): a run waits out the time to live, then any takes it.
        let draining = Census {
            servers: vec![],
            ..census(vec![(&theirs, owner("b", 9))])
        };
        let (got, left) = claims(&draining, &me, none, &fresh, now);
        assert_eq!((got, left.len()), (vec![], 1));
        let (got, _) = claims(&draining, &me, none, &left, now + 10_000);
        assert_eq!(got, vec![Claim::Take(mine.clone())]);
        // A run that ended or found an owner leaves the waiting list.
        let ended = Census {
            active: [].into(),
            ..census(vec![])
        };
        assert_eq!(
            claims(&ended, &me, none, &lately, now),
            (vec![], BTreeMap::new())
        );
    }
}
