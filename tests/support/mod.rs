//! What the integration tests and the benchmarks share:
//! - `server`: the real `ebb serve` on loopback, and the `ebb` CLI;
//! - `profiles`: profile bodies; `runs`: apps, runs, waiting, and the sim cloud's files;
//! - `bench`: the benchmarks' server, profile and app;
//! - `process`: child processes, and stand-ins that print their port;
//! - `etcd`: real etcd servers (over TLS, with etcd's users), and the etcd store of every test server with
//!   `EBB_TEST_STORE=etcd`; `installation`: several servers on one etcd; `pki`: certificates
//!   made at test time; `clock`: a server's wall clock stepped (libfaketime); `netns`: network
//!   namespaces on a bridge, to cut a server or a machine off;
//! - the stand-ins for clouds and machines: moto for EC2 (`moto`), the Google Cloud stand-in
//!   (`gcp`) and OpenSSH (`sshd`).
//!
//! `tests/api/main.rs` and each benchmark include it with `#[path]`; a provisioner crate's
//! tests include `process.rs` alone.

// Only the benchmarks use it.
#[allow(dead_code)]
pub mod bench;
pub mod clock;
pub mod contract;
pub mod etcd;
#[cfg(feature = "gcp")]
pub mod gcp;
pub mod installation;
#[cfg(feature = "aws")]
pub mod moto;
#[cfg(target_os = "linux")]
pub mod netns;
pub mod pki;
pub mod process;
pub mod profiles;
pub mod runs;
pub mod server;
pub mod sshd;
