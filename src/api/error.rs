//! The one place errors become HTTP responses.
//!
//! [`ApiError::status`] is the table from every error of every layer to a status code. Its
//! matches have no catch-all arm, so a new error variant does not compile until someone
//! decides its status. Bodies are always `{"code": <status>, "message": "..."}`.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

use crate::model::invalid::Invalid;
use crate::model::run::RunError;
use crate::runtime::error::RuntimeError;
use crate::service::error::ServiceError;
use crate::store::StoreError;

/// Why an HTTP request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Service(#[from] ServiceError),
    #[error("{field}: {message}")]
    Body { field: String, message: String },
    #[error("request body is larger than the limit of {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("query parameter {0}")]
    Query(String),
    #[error("missing or wrong bearer token; send 'Authorization: Bearer <token>'")]
    Unauthorized,
    #[error("no endpoint at {path}; see the README for the API")]
    NoRoute { path: String },
    #[error("{method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// Another server that has to answer cannot be reached.
    #[error("{0}")]
    Unavailable(String),
    /// The request cannot be done in the server's present state.
    #[error("{0}")]
    Conflict(String),
}

impl From<Invalid> for ApiError {
    fn from(e: Invalid) -> Self {
        ApiError::Service(e.into())
    }
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        ApiError::Service(e.into())
    }
}

/// The JSON body of every error response.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ErrorBody {
    /// The HTTP status.
    #[schemars(range(min = 400, max = 599))]
    pub code: u16,
    /// What went wrong, naming the field at fault.
    pub message: String,
}

impl ApiError {
    /// The status code of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Service(e) => service_status(e),
            ApiError::Body { .. } | ApiError::Query(_) => StatusCode::BAD_REQUEST,
            ApiError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::NoRoute { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
        }
    }
}

fn service_status(e: &ServiceError) -> StatusCode {
    match e {
        ServiceError::Invalid(_) | ServiceError::Resolve(_) => StatusCode::BAD_REQUEST,
        ServiceError::Run(e) => run_status(e),
        ServiceError::Runtime(e) => runtime_status(e),
        ServiceError::NamespaceNotFound(_)
        | ServiceError::ProvisionerNotFound(_)
        | ServiceError::ServerNotFound(_)
        | ServiceError::ProfileNotFound(_)
        | ServiceError::AppNotFound { .. }
        | ServiceError::ProgramNotFound { .. }
        | ServiceError::RunNotFound(_)
        | ServiceError::ScheduleNotFound(_)
        | ServiceError::OperationNotFound { .. }
        | ServiceError::TemplateNotFound(_)
        | ServiceError::SecureKeyNotFound { .. }
        | ServiceError::TokenNotFound(_) => StatusCode::NOT_FOUND,
        ServiceError::NotAllowed(_) => StatusCode::FORBIDDEN,
        ServiceError::DefaultNamespace
        | ServiceError::BuiltinProfile(_)
        | ServiceError::NativeProfile(_)
        | ServiceError::BuiltinTemplate(_) => StatusCode::METHOD_NOT_ALLOWED,
        ServiceError::NamespaceNotEmpty { .. }
        | ServiceError::ProfileStatusUnchanged { .. }
        | ServiceError::ProfileEnabled(_)
        | ServiceError::ProfileDisabled(_)
        | ServiceError::ProfileAssigned { .. }
        | ServiceError::ProfileInUse { .. }
        | ServiceError::AppActive { .. }
        | ServiceError::TokenExists(_)
        | ServiceError::ScheduleExists(_)
        | ServiceError::IdempotencyKeyReused { .. }
        | ServiceError::RefusedBefore(_)
        | ServiceError::ScheduleStatusUnchanged { .. }
        | ServiceError::TooManySchedules { .. }
        | ServiceError::Quota { .. }
        | ServiceError::Changed(_) => StatusCode::CONFLICT,
        ServiceError::TooManySignIns { .. } => StatusCode::TOO_MANY_REQUESTS,
        ServiceError::Store(e) => store_status(e),
        ServiceError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn run_status(e: &RunError) -> StatusCode {
    match e {
        RunError::ExpireInPast { .. }
        | RunError::ExpireBeyondTimeout { .. }
        | RunError::ExpireTooFar { .. }
        | RunError::BadProperty { .. } => StatusCode::BAD_REQUEST,
        RunError::WrongState { .. }
        | RunError::ExtendShortens { .. }
        | RunError::NotCancellable { .. }
        | RunError::ConcurrencyLimit { .. }
        | RunError::Quota { .. }
        | RunError::QueueFull { .. } => StatusCode::CONFLICT,
        RunError::HostPrograms { .. } => StatusCode::FORBIDDEN,
    }
}

fn runtime_status(e: &RuntimeError) -> StatusCode {
    match e {
        RuntimeError::RunNotFound(_) => StatusCode::NOT_FOUND,
        RuntimeError::Run(e) => run_status(e),
        RuntimeError::Store(e) => store_status(e),
        // Ownership is moving (a forwarded command that met a non-owner): worth retrying.
        RuntimeError::Elsewhere { .. } | RuntimeError::Unowned(_) | RuntimeError::Draining(_) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}

/// A store that cannot take a read or a write now is a 503: nothing was changed, and the
/// same request may succeed later. A store that is damaged or from a newer ebb is a 500.
fn store_status(e: &StoreError) -> StatusCode {
    match e {
        StoreError::Closed
        | StoreError::Storage(_)
        | StoreError::Unavailable { .. }
        | StoreError::Contended { .. }
        | StoreError::Fenced { .. } => StatusCode::SERVICE_UNAVAILABLE,
        StoreError::Open { .. }
        | StoreError::InUse { .. }
        | StoreError::SchemaTooNew { .. }
        | StoreError::Corrupt { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status()
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        }
        HttpResponse::build(status).json(ErrorBody {
            code: status.as_u16(),
            message: self.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(e: impl Into<ServiceError>) -> u16 {
        ApiError::Service(e.into()).status().as_u16()
    }

    #[test]
    fn bad_values_are_400_state_is_409_and_an_unreachable_store_is_503() {
        assert_eq!(status(RunError::ExpireTooFar { limit: 1, given: 2 }), 400);
        assert_eq!(status(RunError::ExpireInPast { now: 2, given: 1 }), 400);
        assert_eq!(status(RunError::ExpireBeyondTimeout { deadline: 1 }), 400);
        let bad = RunError::BadProperty {
            property: "p".into(),
            message: "m".into(),
        };
        assert_eq!(status(bad), 400);
        let wrong = RunError::WrongState {
            run: "r".into(),
            action: "stopped",
            reason: "it ended".into(),
        };
        assert_eq!(status(RuntimeError::from(wrong)), 409);
        assert_eq!(status(RuntimeError::RunNotFound("r".into())), 404);
        let down = StoreError::Storage("disk gone".into());
        assert_eq!(status(RuntimeError::Store(down.clone())), 503);
        assert_eq!(status(down), 503);
        assert_eq!(status(StoreError::Closed), 503);
    }
}
