//! Several servers as one installation on a real etcd: each on its own data dir, all with
//! the installation's key file, for the several-server tests and benchmark.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::etcd::Cluster;
#[cfg(target_os = "linux")]
use super::netns::Space;
use super::server::{Options, Server};

/// Servers of one installation on `cluster`, each on its own data dir under `dir`, sharing
/// the secure store's key file (as every server of an installation must).
pub struct Installation {
    /// How a server reaches the cluster: `ebb serve`'s etcd arguments and the library's
    /// location.
    access_args: Vec<String>,
    /// The same, for a server in a network namespace: the members on the other address they
    /// listen on.
    access_args_away: Option<Vec<String>>,
    pub location: ebb::store::Location,
    pub prefix: String,
    dir: PathBuf,
    ttl: Duration,
    /// The first token, which the first server started wrote to its data dir.
    token: std::sync::OnceLock<String>,
}

impl Installation {
    /// Servers on `cluster` under key prefix `prefix`, with data dirs under `dir`, each
    /// keeping a lease of `ttl`.
    pub fn new(cluster: &Cluster, dir: &Path, ttl: Duration, prefix: &str) -> Installation {
        Installation {
            access_args: ["--etcd-endpoints".to_string(), cluster.endpoints()]
                .into_iter()
                .chain(cluster.access_args())
                .collect(),
            access_args_away: cluster.also_on().map(|also| {
                ["--etcd-endpoints".to_string(), cluster.endpoints_at(also)]
                    .into_iter()
                    .chain(cluster.access_args())
                    .collect()
            }),
            location: cluster.location(prefix),
            prefix: prefix.to_string(),
            dir: dir.to_path_buf(),
            ttl,
            token: std::sync::OnceLock::new(),
        }
    }

    /// Starts server `name` (its data dir too, the first time).
    pub fn server(&self, name: &str) -> Server {
        self.server_with(name, &[])
    }

    /// A server with more `ebb serve` arguments.
    pub fn server_with(&self, name: &str, more: &[&str]) -> Server {
        self.server_with_options(name, more, Options::default())
    }

    /// A server with more `ebb serve` arguments and harness `options` (its store, name and
    /// key are the installation's).
    pub fn server_with_options(&self, name: &str, more: &[&str], options: Options) -> Server {
        let access = match &options.netns {
            Some(_) => self
                .access_args_away
                .as_ref()
                .expect("a server in a namespace needs a cluster started also on its bridge"),
            None => &self.access_args,
        };
        let data = sub_dir(&self.dir, name);
        let key = self.dir.join("secure.key");
        let server = Server::start_at(
            &data,
            Options {
                args: ["--store".to_string(), "etcd".into()]
                    .into_iter()
                    .chain(access.iter().cloned())
                    .chain([
                        "--etcd-prefix".into(),
                        self.prefix.clone(),
                        "--server-name".into(),
                        name.into(),
                        "--lease-ttl".into(),
                        format!("{}s", self.ttl.as_secs()),
                        "--secure-key-file".into(),
                        key.to_string_lossy().into_owned(),
                    ])
                    .chain(more.iter().map(|a| a.to_string()))
                    .collect(),
                client_token: self.token.get().cloned(),
                // The benchmarks may measure another build (`EBB_BENCH_BIN`).
                binary: super::bench::other_build(),
                ..options
            },
        );
        if let Some(token) = server.token() {
            let _ = self.token.set(token);
        }
        // A server listens first (its URL names its port), then joins: the others list it
        // once it has.
        let started = std::time::Instant::now();
        while !server
            .logs()
            .iter()
            .any(|l| l.contains("joined the installation"))
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "server {name} never joined"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }
}

impl Installation {
    /// Starts server `name` in network namespace `space` (of a test's [`Network`]), bound to
    /// its address there and reaching etcd through the bridge.
    #[cfg(target_os = "linux")]
    pub fn server_in(&self, name: &str, space: &Space) -> Server {
        let bind = format!("{}:0", space.address);
        self.server_with_options(
            name,
            &["--bind", &bind, "--insecure-http"],
            Options {
                netns: Some(space.name.clone()),
                ..Options::default()
            },
        )
    }

    /// Starts server `name` in the host's namespace, bound to `address` (the host's on a
    /// test's bridge) so that servers in namespaces reach it too.
    pub fn server_on(&self, name: &str, address: &str) -> Server {
        let bind = format!("{address}:0");
        self.server_with(name, &["--bind", &bind, "--insecure-http"])
    }
}

fn sub_dir(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(&path).expect("dir");
    path
}
