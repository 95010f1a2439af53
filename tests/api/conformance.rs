//! The conformance kit on every built-in provisioner that makes resources, through the same
//! trait a plugin is driven through (`ebb plugin test`): a plugin is held to exactly what the
//! built-ins hold. Each runs against its real backend or best stand-in (a real sshd for hosts,
//! moto for aws-ec2, the Compute and Dataproc stand-in for gcp-compute and gcp-dataproc).

use ebb_plugin::conformance::{self, Options};
use ebb_spi::{Context, Properties, Provisioner, TAG_NAMESPACE, TAG_PROFILE, TAG_SERVER};

/// Runs the kit on `p` with `properties`; every case must hold.
#[track_caller]
fn holds(p: &dyn Provisioner, properties: &[(&str, &str)], work_dir: &std::path::Path) {
    holds_but(p, properties, work_dir, &[]);
}

/// Runs the kit on `p`; the cases named in `fails` must fail, every other must hold.
#[track_caller]
fn holds_but(
    p: &dyn Provisioner,
    properties: &[(&str, &str)],
    work_dir: &std::path::Path,
    fails: &[&str],
) {
    let properties: Properties = ebb_spi::properties(properties.iter().copied());
    let mut ctx = Context::new(properties, work_dir.to_path_buf());
    ctx.labels = [
        (TAG_SERVER, "ebb-conformance"),
        (TAG_NAMESPACE, "default"),
        (TAG_PROFILE, "conformance"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let cases = runtime.block_on(conformance::run(p, &ctx, Options::default()));
    assert_eq!(cases.len(), conformance::CASES.len());
    let failed: Vec<&str> = cases.iter().filter(|c| !c.passed).map(|c| c.name).collect();
    assert!(
        failed == fails,
        "{}: {}",
        p.spec().name,
        conformance::report(&cases)
    );
}

#[test]
fn local_passes_the_kit() {
    let dir = tempfile::tempdir().expect("tempdir");
    holds(&ebb_local::Local, &[], dir.path());
}

/// The sim models a cloud without idempotency tokens on purpose (a create is never
/// deduplicated), so that the framework's own find-before-create is what the crash tests
/// prove: that case fails, and the one that then finds the second resource under the key.
#[test]
fn sim_passes_the_kit_but_for_idempotency_tokens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("sim").display().to_string();
    holds_but(
        &ebb_sim::Sim,
        &[("stateDir", &state), ("createLatency", "200ms")],
        dir.path(),
        &[conformance::CASES[1], conformance::CASES[7]],
    );
}

#[cfg(feature = "aws")]
#[test]
fn aws_ec2_passes_the_kit_on_moto() {
    use crate::support::moto::{AMI, Moto, REGION};
    let moto = Moto::start();
    let dir = tempfile::tempdir().expect("tempdir");
    holds(
        &ebb_aws::Ec2::default(),
        &[
            ("region", REGION),
            ("accessKeyId", "testing"),
            ("secretAccessKey", "testing"),
            ("endpointUrl", &moto.url),
            ("imageId", AMI),
            ("instanceType", "t3.micro"),
        ],
        dir.path(),
    );
}

/// One host: the test's "machines" are loopback addresses of one sshd on one filesystem, so
/// several would each list the same directories.
#[test]
fn hosts_passes_the_kit_over_a_real_sshd() {
    let sshd = crate::support::sshd::Sshd::start(&["127.0.1.41"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let remote = sshd.remote_dir().display().to_string();
    holds(
        &ebb_hosts::Hosts,
        &[
            ("hosts", &sshd.hosts()),
            ("sshPrivateKey", &sshd.client_key),
            ("remoteDir", &remote),
        ],
        dir.path(),
    );
}

#[cfg(feature = "gcp")]
#[test]
fn gcp_dataproc_passes_the_kit_on_the_stand_in() {
    use crate::support::gcp::{Gcp, PROJECT, REGION, ZONE};
    let gcp = Gcp::start();
    let dir = tempfile::tempdir().expect("tempdir");
    holds(
        &ebb_gcp_dataproc::Dataproc::default(),
        &[
            ("projectId", PROJECT),
            ("endpoint", &gcp.url),
            ("anonymous", "true"),
            ("region", REGION),
            ("zone", ZONE),
        ],
        dir.path(),
    );
}

#[cfg(feature = "gcp")]
#[test]
fn gcp_compute_passes_the_kit_on_the_stand_in() {
    use crate::support::gcp::{Gcp, PROJECT, ZONE};
    let gcp = Gcp::start();
    let dir = tempfile::tempdir().expect("tempdir");
    holds(
        &ebb_gcp_compute::Compute::default(),
        &[
            ("projectId", PROJECT),
            ("endpoint", &gcp.url),
            ("anonymous", "true"),
            ("zone", ZONE),
            ("machineType", "e2-small"),
        ],
        dir.path(),
    );
}
