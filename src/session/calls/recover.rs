//! The audit log's recovery asks the tools what became of approved calls a crash interrupted:
//! this connects [`crate::audit::Recovery`] to each tool's [`crate::tools::Tool::recover`] hook,
//! and says whether a tool asks for confirmation (the confirmation its recovered finish records).

use std::sync::Arc;

use crate::audit::{Recovered, Recovery};
use crate::policy::Principal;
use crate::tools::CallContext;
use crate::tools::registry::ToolRegistry;

/// Recovery over the configured tools; a tool that is no longer configured cannot tell.
pub struct ToolRecovery(pub Arc<ToolRegistry>);

#[async_trait::async_trait]
impl Recovery for ToolRecovery {
    async fn recover(&self, tool: &str, session_id: &str, call_id: &str) -> Recovered {
        let Some(tool) = self.0.get(tool) else {
            return Recovered::Unknown;
        };
        // Only the call's identity survives a crash (never the user's id or the arguments).
        let ctx = CallContext {
            session_id: session_id.into(),
            call_id: call_id.into(),
            principal: Principal::new(String::new(), Vec::new()),
        };
        // The tool's own limit; recovery also stops asking at its overall deadline.
        match tokio::time::timeout(tool.policy.timeout, tool.tool.recover(&ctx)).await {
            Ok(found) => found,
            Err(_) => Recovered::Unknown,
        }
    }

    fn requires_confirmation(&self, tool: &str) -> Option<bool> {
        self.0.get(tool).map(|tool| tool.policy.requires_confirmation)
    }
}
