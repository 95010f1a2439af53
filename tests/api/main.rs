//! Integration tests: the real `ebb` binary, a real store, HTTP on loopback.
//! One test binary (modules below) to keep link time down.

mod harness;
mod runs_support;

mod cli;
mod clusters;
mod crash;
mod namespaces;
mod preferences;
mod profiles;
mod provisioners;
mod runs;
mod server;
mod templates;
