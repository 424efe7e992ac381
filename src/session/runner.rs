//! Running one tool call under its timeout, in its own task (a calculator that awaits nothing is
//! answered in the session task; see `tool_actions.rs`). A panic or a hang fails only this call. The policy phase (rate limit, outbound PHI screening) has run before the task exists
//! (`calls.rs`).

use std::sync::Arc;

use serde_json::Value;
use tracing::Instrument;

use crate::tools::registry::RegisteredTool;
use crate::tools::{CallContext, ToolError, ToolOutput};

/// Everything a tool task owns.
pub struct ToolJob {
    pub tool: Arc<RegisteredTool>,
    pub args: Value,
    pub ctx: CallContext,
    pub span: tracing::Span,
}

impl ToolJob {
    pub async fn run(self) -> Result<ToolOutput, ToolError> {
        let ToolJob { tool, args, ctx, span } = self;
        async move {
            // The deadline goes with the call, so its backend retries stop in time to report a
            // failure instead of being cut off (`tools::http`).
            let deadline = tokio::time::Instant::now() + tool.policy.timeout;
            let call = crate::tools::http::within_deadline(deadline, tool.tool.call(args, ctx));
            match tokio::time::timeout_at(deadline, call).await {
                Ok(result) => result,
                Err(_) => Err(ToolError::Timeout),
            }
        }
        .instrument(span)
        .await
    }
}
