//! Integration tests: the real `ebb` binary, a real store, HTTP on loopback.
//! One test binary (modules below) to keep link time down.

mod harness;
#[cfg(feature = "aws")]
mod moto;
mod runs_support;
mod sshd;

#[cfg(feature = "aws")]
mod aws;
mod cli;
mod clusters;
mod crash;
mod hosts;
mod janitor;
mod namespaces;
mod preferences;
mod profiles;
mod provisioners;
mod runs;
mod server;
mod templates;
