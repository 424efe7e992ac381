//! Running one tool call in its own task: the per-call policy phase that needs I/O (the rate
//! limit), then the tool itself under its timeout. A panic or a hang fails only this call.
//! Outbound PHI screening is pure and runs before the task exists (`calls.rs`).

use std::sync::Arc;

use serde_json::Value;
use tracing::Instrument;

use crate::policy::rate_limit::RateLimiter;
use crate::tools::registry::RegisteredTool;
use crate::tools::{CallContext, ToolError, ToolOutput};

/// Everything a tool task owns.
pub struct ToolJob {
    pub tool: Arc<RegisteredTool>,
    pub args: Value,
    pub ctx: CallContext,
    pub user: String,
    pub limiter: Arc<dyn RateLimiter>,
    pub span: tracing::Span,
}

impl ToolJob {
    pub async fn run(self) -> Result<ToolOutput, ToolError> {
        let ToolJob { tool, args, ctx, user, limiter, span } = self;
        async move {
            let policy = &tool.policy;
            limiter
                .check(&user, tool.name(), policy.rate_limit_per_minute)
                .await
                .map_err(|limited| ToolError::RateLimited { retry_after_s: limited.retry_after_s })?;
            match tokio::time::timeout(policy.timeout, tool.tool.call(args, ctx)).await {
                Ok(result) => result,
                Err(_) => Err(ToolError::Timeout),
            }
        }
        .instrument(span)
        .await
    }
}
