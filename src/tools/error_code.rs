//! The error codes of a failed tool call: CONTRACT §4's closed list, one enum for every place a
//! code appears — the model's `function_call_output`, the client's `voxgate.tool_call.failed`, the
//! audit record, the `code` label of `voxgate_tool_errors_total` and the admin API's HTTP status.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    UnknownTool,
    InvalidArguments,
    PermissionDenied,
    RateLimited,
    PhiBlocked,
    Timeout,
    BackendError,
    InternalError,
    /// The call's audit record could not be made durable (`audit.on_error = "fail_closed"`).
    AuditUnavailable,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 9] = [
        ErrorCode::UnknownTool,
        ErrorCode::InvalidArguments,
        ErrorCode::PermissionDenied,
        ErrorCode::RateLimited,
        ErrorCode::PhiBlocked,
        ErrorCode::Timeout,
        ErrorCode::BackendError,
        ErrorCode::InternalError,
        ErrorCode::AuditUnavailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::UnknownTool => "unknown_tool",
            ErrorCode::InvalidArguments => "invalid_arguments",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::PhiBlocked => "phi_blocked",
            ErrorCode::Timeout => "timeout",
            ErrorCode::BackendError => "backend_error",
            ErrorCode::InternalError => "internal_error",
            ErrorCode::AuditUnavailable => "audit_unavailable",
        }
    }

    /// The code a text names, if it is one of the list.
    pub fn parse(code: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == code)
    }

    /// Refused by policy before the tool ran (so the call has no duration to count).
    pub fn is_refusal(self) -> bool {
        matches!(
            self,
            ErrorCode::UnknownTool | ErrorCode::InvalidArguments | ErrorCode::PermissionDenied | ErrorCode::RateLimited
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_code_is_its_serialised_name_and_parses_back() {
        for code in ErrorCode::ALL {
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
        }
        assert_eq!(ErrorCode::parse("tool_error"), None, "CONTRACT §4's list is closed");
    }
}
