//! What goes into a `RunInstances` request besides the profile's settings: the idempotency
//! token, the tags, and the cloud-side fail-safe.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ebb_spi::{ResourceKey, Tags};

/// How long after the profile's timeout an instance ends itself if ebb has not deleted it.
pub const FAILSAFE_MARGIN: Duration = Duration::from_secs(10 * 60);

/// The `ClientToken` of the create of `key` (at most 64 ASCII characters, as EC2 allows).
///
/// It is the same for every resend of one create, so EC2 answers a resend with the instance
/// the first call made, and different for each generation of the node, so a node replaced
/// after a failed boot gets a new instance rather than the failed one.
pub fn client_token(key: &ResourceKey) -> String {
    let plain = format!("ebb-{}-{}-{}", key.run, key.node, key.generation);
    if plain.len() <= 64 && plain.is_ascii() {
        return plain;
    }
    let digest = fnv1a(&format!("{}\n{}\n{}", key.run, key.node, key.generation));
    let run: String = key
        .run
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(40)
        .collect();
    format!("ebb-{run}-{digest:016x}")
}

/// The subnets of `zoneSubnets` (`zone=subnet-id,...`), by zone.
pub fn zone_subnets(value: &str) -> std::collections::BTreeMap<String, String> {
    value
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(z, s)| (z.trim().to_string(), s.trim().to_string()))
        .filter(|(z, s)| !z.is_empty() && !s.is_empty())
        .collect()
}

/// Checks `zoneSubnets`: `zone=subnet-id` pairs, each zone one of `zones`.
pub fn check_zone_subnets(value: &str, zones: &[String]) -> Result<(), String> {
    for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((zone, subnet)) = pair.split_once('=') else {
            return Err(format!("'{pair}' is not zone=subnet-id"));
        };
        let (zone, subnet) = (zone.trim(), subnet.trim());
        if !subnet.starts_with("subnet-") {
            return Err(format!("'{subnet}' is not a subnet id (subnet-...)"));
        }
        if !zones.iter().any(|z| z == zone) {
            return Err(format!("zone '{zone}' is not one of zones"));
        }
    }
    Ok(())
}

/// The market options of a spot instance: one-time, terminated when the cloud takes it
/// back, at most `max_price` an hour (unset: up to the on-demand price, as AWS advises).
pub fn spot_options(max_price: Option<&str>) -> aws_sdk_ec2::types::InstanceMarketOptionsRequest {
    use aws_sdk_ec2::types::{
        InstanceInterruptionBehavior, InstanceMarketOptionsRequest, MarketType, SpotInstanceType,
        SpotMarketOptions,
    };
    let spot = SpotMarketOptions::builder()
        .spot_instance_type(SpotInstanceType::OneTime)
        .instance_interruption_behavior(InstanceInterruptionBehavior::Terminate)
        .set_max_price(max_price.map(|p| p.trim().to_string()))
        .build();
    InstanceMarketOptionsRequest::builder()
        .market_type(MarketType::Spot)
        .spot_options(spot)
        .build()
}

/// 64-bit FNV-1a: stable across builds, unlike the standard library's hashers.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The user data that makes an instance shut down (and so, launched with shutdown behaviour
/// `terminate`, terminate) [`FAILSAFE_MARGIN`] after `deadline`, and when that is.
///
/// The script names the moment, not a delay, so a resent create carries the same user data
/// (EC2 rejects a reused token whose parameters changed).
pub fn failsafe(deadline: SystemTime) -> (String, SystemTime) {
    let at = deadline + FAILSAFE_MARGIN;
    let epoch = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let script = format!(
        "#!/bin/sh\n\
         # ebb fail-safe: this instance terminates itself at {when} unless ebb deletes it first.\n\
         at={epoch}\n\
         left=$(( (at - $(date +%s) + 59) / 60 ))\n\
         [ \"$left\" -ge 1 ] || left=1\n\
         shutdown -h +$left\n",
        when = humantime::format_rfc3339_seconds(at),
    );
    (script, at)
}

/// The extra tags of property `tags` (`k=v,k2=v2`), or what is wrong with them.
pub fn extra_tags(value: &str) -> Result<Tags, String> {
    let mut tags = Tags::new();
    for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(format!("'{pair}' is not key=value"));
        };
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || k.len() > 128 || v.len() > 256 {
            return Err(format!(
                "'{pair}': a key has 1 to 128 characters and a value up to 256"
            ));
        }
        if k.starts_with("aws:") || k.starts_with("ebb:") {
            return Err(format!(
                "'{k}': keys starting 'aws:' or 'ebb:' are reserved"
            ));
        }
        tags.insert(k.to_string(), v.to_string());
    }
    Ok(tags)
}

/// The console name of `key`'s instance.
pub fn instance_name(key: &ResourceKey) -> String {
    let run: String = key.run.chars().take(13).collect();
    format!("ebb-{}-{run}", key.node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_stable_per_generation_and_fit_ec2() {
        let key = ResourceKey::new("019a6f0e-8c1b-7c3d-9e4f-0a1b2c3d4e5f", "worker-1");
        let token = client_token(&key);
        assert_eq!(token, "ebb-019a6f0e-8c1b-7c3d-9e4f-0a1b2c3d4e5f-worker-1-0");
        assert_eq!(client_token(&key), token);
        let next = ResourceKey {
            generation: 2,
            ..key.clone()
        };
        assert_ne!(client_token(&next), token);
        let long = ResourceKey::new(key.run.clone(), "a-very-long-node-name-from-a-template");
        let t = client_token(&long);
        assert!(t.len() <= 64 && t.is_ascii(), "{t}");
        assert_ne!(
            t,
            client_token(&ResourceKey::new(
                key.run,
                "a-very-long-node-name-from-a-templatf"
            ))
        );
    }

    #[test]
    fn the_failsafe_names_its_moment() {
        let deadline = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let (script, at) = failsafe(deadline);
        assert_eq!(at, deadline + FAILSAFE_MARGIN);
        assert!(script.starts_with("#!/bin/sh\n"), "{script}");
        assert!(script.contains("at=1800000600\n"), "{script}");
        assert!(script.contains("shutdown -h +$left"), "{script}");
        assert_eq!(
            failsafe(deadline).0,
            script,
            "the same deadline gives the same script"
        );
    }

    #[test]
    fn extra_tags_are_checked() {
        assert_eq!(
            extra_tags("team=data, cost-center = 42").expect("tags"),
            [
                ("cost-center".to_string(), "42".to_string()),
                ("team".to_string(), "data".to_string())
            ]
            .into()
        );
        assert!(extra_tags("").expect("none").is_empty());
        for bad in ["team", "=x", "ebb:run=x", "aws:foo=y"] {
            assert!(extra_tags(bad).is_err(), "{bad}");
        }
    }
}
