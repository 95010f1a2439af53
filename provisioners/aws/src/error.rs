//! What an EC2 failure means for ebb: retry it, or give up with the cloud's own words.

use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use ebb_spi::ProvisionError;

/// Codes that say the place asked for (a zone, a market) has no room: the node moves to its
/// next place. `MaxSpotInstanceCountExceeded` also comes back on on-demand calls while recently
/// ended spot requests have not cleared, so it is capacity, not quota.
const CAPACITY: &[&str] = &[
    "InsufficientInstanceCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "InsufficientCapacity",
    "UnfulfillableCapacity",
    "MaxSpotInstanceCountExceeded",
    "SpotMaxPriceTooLow",
    "InsufficientFreeAddressesInSubnet",
];

/// Codes that say the account's quota is used: the same in every zone, so fatal.
const QUOTA: &[&str] = &["InstanceLimitExceeded", "VcpuLimitExceeded"];

/// Codes that ask the caller to slow down.
const THROTTLED: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
];

/// Error codes a retry can fix: the service's own trouble. Any 5xx is retryable too.
const RETRYABLE: &[&str] = &[
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
    "RequestExpired",
];

/// Codes that mean "the thing asked about does not exist" (a delete of it succeeds). A
/// malformed id is not among them: it says the request was wrong, not that the instance is
/// gone, and taking it for gone could leak an instance.
pub const NOT_FOUND: &[&str] = &["InvalidInstanceID.NotFound"];

/// Classifies an SDK error from call `what` (`RunInstances`...).
pub fn classify<E>(what: &str, err: &SdkError<E, HttpResponse>) -> ProvisionError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match err {
        SdkError::ConstructionFailure(_) => ProvisionError::fatal(format!(
            "{what}: the request could not be built: {}",
            chain(err)
        )),
        SdkError::TimeoutError(_) => {
            ProvisionError::retryable(format!("{what}: no answer in time"))
        }
        SdkError::DispatchFailure(_) => {
            ProvisionError::retryable(format!("{what}: cannot reach EC2: {}", chain(err)))
        }
        SdkError::ResponseError(e) => {
            let status = e.raw().status().as_u16();
            ProvisionError::retryable(format!(
                "{what}: unreadable answer from EC2 (HTTP {status})"
            ))
        }
        SdkError::ServiceError(e) => {
            let status = e.raw().status().as_u16();
            by_code(what, status, err.code(), err.message())
        }
        _ => ProvisionError::retryable(format!("{what}: {}", chain(err))),
    }
}

/// Classifies an error answer from its HTTP status and EC2 error code.
pub fn by_code(
    what: &str,
    status: u16,
    code: Option<&str>,
    message: Option<&str>,
) -> ProvisionError {
    let code_text = code.unwrap_or("no error code");
    let text = match message {
        Some(m) if !m.is_empty() => format!("{what}: {code_text}: {m}"),
        _ => format!("{what}: {code_text} (HTTP {status})"),
    };
    let of = |codes: &[&str]| code.is_some_and(|c| codes.contains(&c));
    if of(CAPACITY) {
        return ProvisionError::capacity(ebb_spi::CapacityScope::Zone, text);
    }
    if of(QUOTA) {
        return ProvisionError::quota(text);
    }
    if of(THROTTLED) {
        return ProvisionError::throttled(None, text);
    }
    let retryable = status >= 500 || of(RETRYABLE);
    if retryable {
        ProvisionError::retryable(text)
    } else {
        ProvisionError::fatal(text)
    }
}

/// Whether an SDK error says the instance asked about does not exist.
pub fn is_not_found<E, R>(err: &SdkError<E, R>) -> bool
where
    E: ProvideErrorMetadata,
{
    matches!(err, SdkError::ServiceError(_)) && err.code().is_some_and(|c| NOT_FOUND.contains(&c))
}

/// An error and its causes on one line.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_capacity_and_5xx_are_retried_the_rest_is_fatal() {
        for (status, code) in [
            (503, Some("RequestLimitExceeded")),
            (400, Some("RequestLimitExceeded")),
            (500, Some("InsufficientInstanceCapacity")),
            (500, Some("InternalError")),
            (502, None),
        ] {
            assert!(
                by_code("RunInstances", status, code, None).retryable,
                "{code:?}"
            );
        }
        let kind = |code| by_code("RunInstances", 400, Some(code), None).kind;
        for code in [
            "InsufficientInstanceCapacity",
            "UnfulfillableCapacity",
            "SpotMaxPriceTooLow",
        ] {
            assert_eq!(
                kind(code),
                ebb_spi::ErrorKind::Capacity(ebb_spi::CapacityScope::Zone)
            );
        }
        assert_eq!(kind("VcpuLimitExceeded"), ebb_spi::ErrorKind::Quota);
        assert_eq!(
            kind("RequestLimitExceeded"),
            ebb_spi::ErrorKind::Throttled(None)
        );
        for code in [
            "InvalidAMIID.NotFound",
            "InvalidAMIID.Malformed",
            "InvalidParameterValue",
            "UnauthorizedOperation",
            "AuthFailure",
            "InstanceLimitExceeded",
            "VcpuLimitExceeded",
            "InvalidSubnetID.NotFound",
            "InvalidKeyPair.NotFound",
        ] {
            let e = by_code("RunInstances", 400, Some(code), Some("the cloud's words"));
            assert!(!e.retryable, "{code}");
            assert_eq!(
                e.message,
                format!("RunInstances: {code}: the cloud's words")
            );
        }
    }
}
