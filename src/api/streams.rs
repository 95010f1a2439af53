//! The live event streams (the web UI's run pages hold them), bounded: [`MAX_STREAMS`] on a
//! server, of which one token holds at most [`PER_TOKEN`] and one address at most
//! [`PER_PEER`] (the UI's `events` page says what a page without room gets).

use std::net::IpAddr;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::runtime::shares::{Share, Shares};

/// Most event streams one server keeps open at once (each is one browser tab on a run).
pub const MAX_STREAMS: usize = 256;
/// Most streams one token keeps open on a server.
pub const PER_TOKEN: usize = 16;
/// Most streams one address keeps open on a server (several people behind one address).
pub const PER_PEER: usize = 64;

/// The server's event streams: the global cap, and each token's and address's share.
#[derive(Debug, Clone)]
pub struct Streams {
    total: Arc<Semaphore>,
    tokens: Shares<String>,
    peers: Shares<IpAddr>,
}

/// One open stream's places, given back when it closes.
#[derive(Debug)]
pub struct Open {
    _total: OwnedSemaphorePermit,
    _token: Share<String>,
    _peer: Option<Share<IpAddr>>,
}

impl Default for Streams {
    fn default() -> Self {
        Streams {
            total: Arc::new(Semaphore::new(MAX_STREAMS)),
            tokens: Shares::new(PER_TOKEN),
            peers: Shares::new(PER_PEER),
        }
    }
}

impl Streams {
    /// Places for a stream of `token` from `peer`, if its shares and the server have room.
    pub fn open(&self, token: &str, peer: Option<IpAddr>) -> Option<Open> {
        let token = self.tokens.try_take(token.to_string())?;
        let peer = match peer {
            Some(p) => Some(self.peers.try_take(p)?),
            None => None,
        };
        let total = Arc::clone(&self.total).try_acquire_owned().ok()?;
        Some(Open {
            _total: total,
            _token: token,
            _peer: peer,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_and_an_address_hold_at_most_their_shares() {
        let streams = Streams::default();
        let me: IpAddr = [10, 0, 0, 1].into();
        let mine: Vec<Open> = (0..PER_TOKEN)
            .map(|_| streams.open("viewer", Some(me)).expect("room"))
            .collect();
        assert!(
            streams.open("viewer", Some(me)).is_none(),
            "the token's share"
        );
        assert!(
            streams.open("other", Some(me)).is_some(),
            "another token has room"
        );
        let others: Vec<Open> = (0..PER_PEER - PER_TOKEN)
            .map(|i| streams.open(&format!("t{i}"), Some(me)).expect("room"))
            .collect();
        assert!(
            streams.open("fresh", Some(me)).is_none(),
            "the address's share"
        );
        assert!(streams.open("fresh", Some([10, 0, 0, 2].into())).is_some());
        drop((mine, others));
        assert!(streams.open("viewer", Some(me)).is_some());
    }
}
