//! Errors of the HTTP API: a status and a JSON body `{"error": {"code", "message"}}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::bodies::{ErrorBody, ErrorDetail};

/// An API error: nothing was changed by the request that got it.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    status: StatusCode,
    code: std::borrow::Cow<'static, str>,
    message: String,
}

impl ApiError {
    /// An error with this status, machine-readable code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code: code.into(),
            message: message.into(),
        }
    }

    /// An error another node answered (see `cluster`).
    pub(crate) fn relayed(status: StatusCode, code: String, message: String) -> Self {
        ApiError {
            status,
            code: code.into(),
            message,
        }
    }

    /// Its machine-readable code.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// Its message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// 404: no such session.
    pub fn no_session(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "session_not_found",
            format!("no session {id:?}"),
        )
    }

    /// 409: the request conflicts with the session's state.
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// 400: the request itself is wrong.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 500: the store or the agent failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// Whether another writer holds the session.
    pub(crate) fn is_session_busy(&self) -> bool {
        self.code == "session_busy"
    }

    /// Whether the session does not exist.
    pub(crate) fn is_not_found(&self) -> bool {
        self.status == StatusCode::NOT_FOUND
    }
}

impl From<agentry_store::StoreError> for ApiError {
    fn from(e: agentry_store::StoreError) -> Self {
        use agentry_store::StoreError;
        match &e {
            StoreError::SessionNotFound(id) => Self::no_session(id),
            StoreError::SessionBusy { .. } => Self::conflict("session_busy", e.to_string()),
            StoreError::NameTaken(_) => Self::conflict("name_taken", e.to_string()),
            StoreError::LeaseLost { .. } => Self::conflict("session_taken_over", e.to_string()),
            StoreError::Unreachable { .. } => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unreachable",
                e.to_string(),
            ),
            _ => Self::internal(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.into_owned(),
                message: self.message,
            },
        };
        (self.status, Json(body)).into_response()
    }
}
