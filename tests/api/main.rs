//! Integration tests: the real `ebb` binary, a real store, HTTP on loopback.
//! One test binary (modules below) to keep link time down.

#[path = "../support/mod.rs"]
mod support;

mod access;
mod automators;
#[cfg(feature = "aws")]
mod aws;
mod aws_capacity;
mod capacity;
mod cli;
mod cluster_services;
mod clusters;
mod conformance;
mod crash;
mod engines;
mod etcd;
mod fuzz;
#[cfg(feature = "gcp")]
mod gcp;
#[cfg(feature = "gcp")]
mod gcp_capacity;
mod healing;
mod hosts;
mod janitor;
mod metrics;
mod namespaces;
mod openapi;
mod operations;
#[cfg(target_os = "linux")]
mod partitions;
mod plugins;
mod pools;
mod preferences;
mod profiles;
mod provisioners;
mod queue;
mod retries;
mod reuse;
mod run_token;
mod runs;
mod schedules;
mod security;
mod server;
mod servers;
mod spot_recovery;
mod starts;
mod templates;
mod tls;
mod ui;
mod usage;
