//! Closing a session never loses a call's finish record: a call still running, or approved and
//! waiting for its `call_approved` flush, at the close deadline is abandoned (its `call_finished`
//! handed to the audit writer) before the session ends, even when the writer never answers.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::audit::AuditEvent;
use crate::session::closing::{CloseStep, close_step};
use crate::session::calls::{Action, CallTable};

/// The same answer-at-once tool, but asking the user first.
fn confirmed_tool() -> Arc<dyn Tool> {
    let mut spec = quick_tool().spec().clone();
    spec.name = "create_calendar_event";
    spec.requires_confirmation = true;
    Arc::new(Quick { spec })
}

#[test]
fn a_call_approved_but_not_yet_flushed_counts_as_running_and_is_abandoned_with_a_finish_record() {
    let registry = Arc::new(ToolRegistry::from_tools(vec![confirmed_tool()], &Default::default()).unwrap());
    let principal = Principal::new("dr.test", vec!["clinician".into()]);
    let mut table = CallTable::new("vgs_t".into(), principal, "u_t".into(), true, Duration::from_secs(60), registry);
    let accepted = table.accept("c1", "create_calendar_event", r#"{}"#, Instant::now());
    assert!(accepted.iter().any(|a| matches!(a, Action::CheckLimit { .. })), "{accepted:?}");
    let parked = table.on_limit_checked("c1", Ok(()), 1_000);
    assert!(parked.iter().any(|a| matches!(a, Action::Expire { .. })), "{parked:?}");
    let approved = table.on_confirm("c1", true).unwrap();
    assert!(matches!(&approved[..], [Action::Audit { .. }]), "the call_approved record: {approved:?}");
    // Its `call_approved` is never acknowledged: the call stays approving.
    assert_eq!(table.running(), 1, "an approving call is abandoned at the deadline like a running one");
    let abandoned = table.abandon_running();
    let finished = abandoned.iter().any(|a| matches!(a, Action::Audit { record, .. } if record.event == AuditEvent::CallFinished));
    assert!(finished, "{abandoned:?}");
}

#[test]
fn the_close_deadline_abandons_and_the_grace_ends_the_session_only_after_abandoning() {
    let deadline = Instant::now();
    let before = deadline - Duration::from_millis(1);
    let after_grace = deadline + Duration::from_secs(3);
    assert_eq!(close_step(before, deadline, 0, 0, false), CloseStep::Done);
    assert_eq!(close_step(before, deadline, 1, 1, false), CloseStep::Wait);
    assert_eq!(close_step(deadline, deadline, 1, 1, true), CloseStep::Abandon);
    assert_eq!(close_step(deadline, deadline, 1, 0, true), CloseStep::Wait);
    // Past the grace with an approving call whose acknowledgement never came: abandoned first.
    assert_eq!(close_step(after_grace, deadline, 1, 1, true), CloseStep::End { abandon: true });
    assert_eq!(close_step(after_grace, deadline, 1, 0, true), CloseStep::End { abandon: false });
}

const GATED: &str = "gated";

/// Answers `{"ok": true}` once the test lets it.
struct GatedTool {
    spec: ToolSpec,
    go: Arc<tokio::sync::Notify>,
}

#[async_trait::async_trait]
impl Tool for GatedTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        self.go.notified().await;
        Ok(ToolOutput::new(json!({"ok": true})))
    }
}

/// A call whose tool ended just as the close deadline passed, before the loop took its result,
/// keeps that result: the loop sees the deadline at the top of its turn, before its `select!`
/// would have taken the finished task. It was abandoned as timed out (a calendar event created,
/// and recorded and told as not). With no drain time at all, the kill and the tool's end come
/// in the same turn, and the `select!` picks either first: eight sessions, so the old order
/// shows (each had an even chance to take the result first).
#[tokio::test(start_paused = true)]
async fn a_call_that_ended_as_the_close_deadline_passed_keeps_its_result() {
    for round in 0..8 {
        let go = Arc::new(tokio::sync::Notify::new());
        let mut spec = quick_tool().spec().clone();
        spec.name = GATED;
        let tool: Arc<dyn Tool> = Arc::new(GatedTool { spec, go: go.clone() });
        let mut h = start_with(|c| c.server.drain_timeout_ms = 0, 1 << 20, None, vec![tool]).await;
        h.model_calls("c1", GATED).await;
        h.browser_expects("voxgate.tool_call.started").await;
        // The tool ends and the session is killed before the session's next turn.
        go.notify_one();
        h.cancel.cancel();
        let mut ends = Vec::new();
        while let Some(Ok(message)) = h.browser.next().await {
            let Message::Text(text) = message else { continue };
            let event: Value = serde_json::from_str(&text).unwrap();
            if let Some(kind @ ("voxgate.tool_call.completed" | "voxgate.tool_call.failed")) = event["type"].as_str() {
                ends.push(kind.to_string());
            }
        }
        assert_eq!(ends, ["voxgate.tool_call.completed"], "round {round}");
        let audit = std::fs::read_to_string(h.audit_path()).unwrap();
        let finish: Value = audit.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|l| l["event"] == "call_finished").unwrap();
        assert_eq!(finish["status"], "completed", "round {round}");
    }
}
