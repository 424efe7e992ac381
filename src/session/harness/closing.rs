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
