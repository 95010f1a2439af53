//! A network of the test's own, to cut links in: a bridge in the host's namespace and
//! network namespaces joined to it by veth pairs (`ip netns`, `ip link`), on a /24 of
//! 10.213.0.0/16 that no other test holds. A process started in a namespace (`ip netns exec`)
//! reaches the host and the other namespaces through the bridge; a cut sets the host's end of
//! its veth down, so its packets are dropped, as a switch that failed drops them; a heal sets
//! it up again. Everything is deleted when the network is dropped. Needs root.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

fn ip(args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("ip {args:?}: {e}"));
    assert!(
        out.status.success(),
        "ip {}: {} (these tests make network namespaces and need root)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One namespace on the network.
pub struct Space {
    /// The namespace's name, for `ip netns exec`.
    pub name: String,
    /// Its address on the bridge.
    pub address: String,
    /// The host's end of its veth pair (the one a cut sets down).
    host_end: String,
}

/// The bridge and its namespaces.
pub struct Network {
    bridge: String,
    /// `10.213.N`: the /24's first three octets.
    prefix: String,
    tag: String,
    spaces: Vec<String>,
    next: AtomicUsize,
}

impl Network {
    /// A bridge on a /24 of its own, the host at `.1`.
    pub fn new() -> Network {
        // Tests in other processes make networks too: one chooses at a time, and takes the
        // first /24 no address of the host's is on.
        let lock = std::fs::File::create("/tmp/ebb-netns.lock").expect("lock file");
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).expect("flock");
        let taken = ip(&["-4", "-o", "addr", "show"]);
        let n = (1..=254)
            .find(|n| !taken.contains(&format!(" 10.213.{n}.")))
            .expect("a free /24 in 10.213.0.0/16");
        let tag = format!("{:x}{n:x}", std::process::id() % 0xfff);
        let network = Network {
            bridge: format!("ebr{tag}"),
            prefix: format!("10.213.{n}"),
            tag,
            spaces: Vec::new(),
            next: AtomicUsize::new(10),
        };
        ip(&["link", "add", &network.bridge, "type", "bridge"]);
        ip(&[
            "addr",
            "add",
            &format!("{}.1/24", network.prefix),
            "dev",
            &network.bridge,
        ]);
        ip(&["link", "set", &network.bridge, "up"]);
        network
    }

    /// The host's address on the bridge.
    pub fn host(&self) -> String {
        format!("{}.1", self.prefix)
    }

    /// A new namespace on the bridge, its loopback up.
    pub fn space(&mut self) -> Space {
        let i = self.next.fetch_add(1, Ordering::SeqCst);
        let name = format!("ebb-{}-{i}", self.tag);
        let (host_end, inner) = (format!("ebh{}{i}", self.tag), format!("ebn{}{i}", self.tag));
        let address = format!("{}.{i}", self.prefix);
        ip(&["netns", "add", &name]);
        self.spaces.push(name.clone());
        ip(&[
            "link", "add", &host_end, "type", "veth", "peer", "name", &inner,
        ]);
        ip(&["link", "set", &inner, "netns", &name]);
        ip(&["link", "set", &host_end, "master", &self.bridge]);
        ip(&["link", "set", &host_end, "up"]);
        ip(&[
            "-n",
            &name,
            "addr",
            "add",
            &format!("{address}/24"),
            "dev",
            &inner,
        ]);
        ip(&["-n", &name, "link", "set", &inner, "up"]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        Space {
            name,
            address,
            host_end,
        }
    }

    /// Cuts `space` off: its packets are dropped from now on.
    pub fn cut(&self, space: &Space) {
        ip(&["link", "set", &space.host_end, "down"]);
    }

    /// Joins `space` again.
    pub fn heal(&self, space: &Space) {
        ip(&["link", "set", &space.host_end, "up"]);
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for name in &self.spaces {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .status();
    }
}
