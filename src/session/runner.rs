//! Running one tool call in its own task: the per-call policy phases that need I/O (rate limit,
//! outbound PHI screening), then the tool itself under its timeout. A panic or a hang fails only
//! this call.

use std::sync::Arc;

use serde_json::Value;
use tracing::Instrument;

use crate::policy::rate_limit::RateLimiter;
use crate::policy::screening::{TaintSet, screen_call};
use crate::tools::registry::RegisteredTool;
use crate::tools::{CallContext, ToolError, ToolOutput};

/// Everything a tool task owns.
pub struct ToolJob {
    pub tool: Arc<RegisteredTool>,
    pub args: Value,
    pub ctx: CallContext,
    pub user: String,
    pub limiter: Arc<dyn RateLimiter>,
    /// What this session's PHI tools have returned so far (screened against outbound text).
    pub taint: Arc<TaintSet>,
    pub span: tracing::Span,
}

impl ToolJob {
    pub async fn run(self) -> Result<ToolOutput, ToolError> {
        let ToolJob { tool, args, ctx, user, limiter, taint, span } = self;
        async move {
            let policy = &tool.policy;
            // Screen before anything leaves: a blocked call never reaches the third party.
            if tool.spec().third_party {
                screen_call(tool.tool.as_ref(), &args, &taint)?;
            }
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
