//! The provisioner's calls against a real moto server (started from the virtualenv that
//! `tests/support/moto/setup.sh` makes): what each call answers, as the framework relies on.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use ebb_aws::Ec2;
use ebb_spi::{Context, Provisioner, ResourceKey, ResourceState, TAG_SERVER};

#[path = "../../../tests/support/process.rs"]
mod process;

/// The moto server, killed when dropped, and its URL.
fn moto() -> (process::Process, String) {
    process::start_moto(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

fn context(url: &str, extra: &[(&str, &str)]) -> Context {
    let mut props = ebb_spi::properties([
        ("region", "us-east-1"),
        ("accessKeyId", "testing"),
        ("secretAccessKey", "testing"),
        ("endpointUrl", url),
        ("imageId", "ami-1e749f67"),
    ]);
    props.extend(ebb_spi::properties(extra.iter().copied()));
    let mut ctx = Context::new(props, std::env::temp_dir());
    ctx.labels = [(TAG_SERVER.to_string(), "ebb".to_string())].into();
    ctx
}

#[tokio::test]
async fn calls_answer_as_the_framework_expects() {
    let moto = moto();
    let ec2 = Ec2::default();
    let ctx = context(&moto.1, &[("tags", "team=data"), ("sshUser", "admin")]);
    let key = ResourceKey::new("run-1", "master");

    assert_eq!(
        ec2.find(&ctx, &key).await,
        Ok(None),
        "nothing before a create"
    );
    let made = ec2.create(&ctx, &key).await.expect("create");
    assert!(made.id.starts_with("i-"), "{made:?}");
    assert_eq!(made.tags.get("ebb:run").map(String::as_str), Some("run-1"));
    assert_eq!(made.tags.get("team").map(String::as_str), Some("data"));
    let address = made.address.clone().expect("an address");
    assert_eq!(
        made.properties.get("ssh"),
        Some(&format!("admin@{address}:22")),
        "reached over SSH as sshUser"
    );

    let found = ec2
        .find(&ctx, &key)
        .await
        .expect("find")
        .expect("found by tags");
    assert_eq!(found.id, made.id);
    let other = ResourceKey::new("run-1", "worker-1");
    assert_eq!(
        ec2.find(&ctx, &other).await,
        Ok(None),
        "another node of the run"
    );
    let described = ec2
        .describe(&ctx, &made.id)
        .await
        .expect("describe")
        .expect("live");
    assert_eq!(described.state, ResourceState::Running);
    assert_eq!(ec2.list(&ctx).await.expect("list").len(), 1);

    ec2.delete(&ctx, &made.id).await.expect("terminate");
    assert_eq!(
        ec2.describe(&ctx, &made.id).await,
        Ok(None),
        "terminated is gone"
    );
    assert_eq!(
        ec2.find(&ctx, &key).await,
        Ok(None),
        "a terminated node is not found"
    );
    assert!(ec2.list(&ctx).await.expect("list").is_empty());
    // Deleting what is gone, or never was, succeeds.
    ec2.delete(&ctx, &made.id).await.expect("terminate again");
    ec2.delete(&ctx, "i-0123456789abcdef0")
        .await
        .expect("unknown id");
    assert_eq!(ec2.describe(&ctx, "i-0123456789abcdef0").await, Ok(None));
}

#[tokio::test]
async fn bad_requests_are_fatal_and_the_failsafe_is_set_from_the_deadline() {
    let moto = moto();
    let ec2 = Ec2::default();
    let key = ResourceKey::new("run-2", "master");

    let bad_ami = context(&moto.1, &[("imageId", "ami-00000000")]);
    let e = ec2.create(&bad_ami, &key).await.expect_err("bad AMI");
    assert!(!e.retryable && e.message.contains("InvalidAMIID"), "{e:?}");
    let bad_type = context(&moto.1, &[("instanceType", "t3.enormous")]);
    let e = ec2.create(&bad_type, &key).await.expect_err("bad type");
    assert!(!e.retryable, "{e:?}");
    let no_ami = {
        let mut c = context(&moto.1, &[]);
        c.properties.remove("imageId");
        c
    };
    let e = ec2.create(&no_ami, &key).await.expect_err("no AMI");
    assert!(!e.retryable && e.message.contains("imageId"), "{e:?}");

    let unreachable = context("http://127.0.0.1:9", &[]);
    let e = ec2
        .create(&unreachable, &key)
        .await
        .expect_err("no endpoint");
    assert!(e.retryable, "a network error is retryable: {e:?}");

    let mut ctx = context(&moto.1, &[]);
    ctx.deadline = Some(SystemTime::now() + Duration::from_secs(3600));
    let made = ec2.create(&ctx, &key).await.expect("create");
    assert!(made.properties.contains_key("failsafeAt"), "{made:?}");
}
