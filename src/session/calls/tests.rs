//! The call state machine driven through every transition, with no sockets and paused time.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::*;
use super::audit_record::MAX_AUDIT_ARGUMENTS;
use crate::audit::AuditStatus;
use crate::policy::rate_limit::Limited;
use crate::config::{ToolOverride, ToolsConfig};
use crate::tools::{CallContext, Category, Risk, Tool, ToolSpec};

struct Echo {
    spec: ToolSpec,
}

#[async_trait::async_trait]
impl Tool for Echo {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn confirmation_prompt(&self, args: &Value) -> String {
        format!("I'd like to echo {}", args["text"].as_str().unwrap_or_default())
    }
    async fn call(&self, args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::new(json!({"echo": args["text"]})))
    }
}

fn echo(name: &'static str, confirm: bool, phi: bool) -> Arc<dyn Tool> {
    Arc::new(Echo {
        spec: ToolSpec {
            name,
            description: "echo".into(),
            parameters: json!({"type": "object", "properties": {"text": {"type": "string", "maxLength": 20}},
                "required": ["text"], "additionalProperties": false}),
            category: Category::Calculation,
            phi,
            risk: Risk::Low,
            requires_confirmation: confirm,
            third_party: false,
            rate_limit_per_minute: 10,
            timeout: Duration::from_secs(1),
        },
    })
}

fn third_party_echo() -> Arc<dyn Tool> {
    let mut spec = echo("x", false, false).spec().clone();
    spec.name = "third_party_echo";
    spec.third_party = true;
    spec.parameters["properties"]["text"]["maxLength"] = json!(100_000);
    Arc::new(Echo { spec })
}

/// A PHI tool of an MCP server: its results (and its error texts) name people.
fn lab_lookup() -> Arc<dyn Tool> {
    let mut spec = echo("x", false, true).spec().clone();
    spec.name = "lab__lookup_result";
    spec.category = Category::Mcp;
    Arc::new(Echo { spec })
}

fn table(can_confirm: bool) -> CallTable {
    table_with(can_confirm, Vec::new())
}

fn table_with(can_confirm: bool, extra: Vec<Arc<dyn Tool>>) -> CallTable {
    let mut tools = ToolsConfig::default();
    tools.per_tool.insert("web_search_medical".into(), ToolOverride { roles: Some(vec!["admin".into()]), ..Default::default() });
    let registry = ToolRegistry::from_tools(
        vec![
            echo("calculate_medical_score", false, true),
            echo("create_calendar_event", true, true),
            echo("search_pubmed", false, false),
            echo("web_search_medical", false, false),
            third_party_echo(),
        ]
        .into_iter()
        .chain(extra)
        .collect(),
        &tools,
    )
    .unwrap();
    CallTable::new(
        "vgs_1".into(),
        Principal::new("dr", vec!["clinician".into()]),
        "u_hash".into(),
        can_confirm,
        Duration::from_secs(60),
        Arc::new(registry),
    )
}

fn audits(actions: &[Action]) -> Vec<&AuditRecord> {
    actions.iter().filter_map(|a| if let Action::Audit { record, .. } = a { Some(&**record) } else { None }).collect()
}

fn client_events(actions: &[Action]) -> Vec<Value> {
    actions
        .iter()
        .filter_map(|a| if let Action::Client(e) = a { serde_json::from_str(e).ok() } else { None })
        .collect()
}

fn output(actions: &[Action]) -> Value {
    actions
        .iter()
        .find_map(|a| if let Action::Output { output, .. } = a { serde_json::from_str(output).ok() } else { None })
        .expect("an output")
}

/// Accept a call; the session's rate limiter allows it.
fn accept(t: &mut CallTable, id: &str, name: &str, args: &str) -> Vec<Action> {
    accept_limited(t, id, name, args, Ok(()))
}

fn accept_limited(t: &mut CallTable, id: &str, name: &str, args: &str, limit: Result<(), Limited>) -> Vec<Action> {
    let mut actions = t.accept(id, name, args, Instant::now());
    if let Some(at) = actions.iter().position(|a| matches!(a, Action::CheckLimit { .. })) {
        let Action::CheckLimit { call_id, .. } = actions.remove(at) else { unreachable!() };
        actions.extend(t.on_limit_checked(&call_id, limit, 1_000));
    }
    actions
}

#[tokio::test(start_paused = true)]
async fn inline_call_runs_then_answers_after_the_audit_flush() {
    let mut t = table(true);
    let actions = accept(&mut t, "c1", "calculate_medical_score", r#"{"text":"hi"}"#);
    assert_eq!(audits(&actions).len(), 1);
    assert_eq!(audits(&actions)[0].event, AuditEvent::CallStarted);
    assert!(audits(&actions)[0].arguments.is_none(), "PHI tool: no arguments in the audit");
    assert_eq!(client_events(&actions)[0]["type"], "voxgate.tool_call.started");
    assert!(actions.iter().any(|a| matches!(a, Action::Spawn { .. })));
    assert_eq!(t.running(), 1);

    let actions = t.on_tool_finished("c1", Ok(ToolOutput::new(json!({"score": 5}))));
    let records = audits(&actions);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].status, Some(AuditStatus::Completed));
    assert_eq!(records[0].confirmation, Some(Confirmation::NotRequired));
    assert!(!actions.iter().any(|a| matches!(a, Action::Output { .. })), "nothing leaves before the flush");

    let actions = t.on_audited("c1");
    assert_eq!(output(&actions)["score"], 5);
    assert_eq!(client_events(&actions)[0]["type"], "voxgate.tool_call.completed");
    assert!(t.taint().is_empty(), "a calculator's advice text names no one: no taint");
    assert_eq!(t.unfinished(), 0);
    assert!(t.on_audited("c1").is_empty(), "exactly one answer");
    assert!(accept(&mut t, "c1", "calculate_medical_score", "{}").is_empty(), "a repeated call id is ignored");
}

#[tokio::test(start_paused = true)]
async fn non_phi_arguments_are_audited_once_validated() {
    let mut t = table(true);
    let actions = accept(&mut t, "c1", "search_pubmed", r#"{"text":"asthma"}"#);
    assert_eq!(audits(&actions)[0].arguments, None, "not before validation");
    assert_eq!(audits(&actions)[0].args_sha256.len(), 64);
    let actions = t.on_tool_finished("c1", Ok(ToolOutput::new(json!({}))));
    assert_eq!(audits(&actions)[0].arguments, Some(json!({"text": "asthma"})));
}

#[tokio::test(start_paused = true)]
async fn validation_permission_and_unknown_tool_fail_without_running() {
    let mut t = table(true);
    for (id, name, args, code) in [
        ("c1", "calculate_medical_score", r#"{"text": 5}"#, "invalid_arguments"),
        ("c2", "calculate_medical_score", "not json", "invalid_arguments"),
        ("c3", "web_search_medical", r#"{"text":"x"}"#, "permission_denied"),
        ("c4", "launch_rockets", "{}", "unknown_tool"),
    ] {
        let actions = accept(&mut t, id, name, args);
        assert!(!actions.iter().any(|a| matches!(a, Action::Spawn { .. })), "{id} must not run");
        let records = audits(&actions);
        assert_eq!(records.len(), 2, "{id}: started + finished");
        assert_eq!(records[1].status, Some(AuditStatus::Failed));
        assert_eq!(records[1].error_code.map(crate::tools::ErrorCode::as_str), Some(code));
        let actions = t.on_audited(id);
        assert_eq!(output(&actions)["error"]["code"], code);
        let failed = &client_events(&actions)[0];
        assert_eq!(failed["type"], "voxgate.tool_call.failed");
        assert_eq!(failed["error"]["code"], code);
    }
}

#[tokio::test(start_paused = true)]
async fn parked_call_approved_runs() {
    let mut t = table(true);
    let actions = accept(&mut t, "c1", "create_calendar_event", r#"{"text":"standup"}"#);
    let requested = &client_events(&actions)[0];
    assert_eq!(requested["type"], "voxgate.tool_call.confirmation_requested");
    assert_eq!(requested["prompt"], "I'd like to echo standup");
    assert_eq!(requested["expires_at_ms"], 61_000);
    assert_eq!(requested["expires_in_ms"], 60_000);
    assert!(actions.iter().any(|a| matches!(a, Action::Expire { after, .. } if *after == Duration::from_secs(60))));
    assert!(!actions.iter().any(|a| matches!(a, Action::Spawn { .. })));

    let actions = t.on_confirm("c1", true).unwrap();
    assert!(!actions.iter().any(|a| matches!(a, Action::Spawn { .. })), "not before the approval is on disk");
    let approved = audits(&actions);
    assert_eq!((approved[0].event, approved[0].confirmation), (AuditEvent::CallApproved, Some(Confirmation::Approved)));
    assert!(matches!(&actions[0], Action::Audit { gates: Some(id), .. } if id == "c1"));
    assert_eq!(t.on_confirm("c1", true).unwrap_err(), NotAwaitingConfirmation);
    let actions = t.on_audited("c1");
    assert_eq!(client_events(&actions)[0]["type"], "voxgate.tool_call.started");
    assert!(actions.iter().any(|a| matches!(a, Action::Spawn { .. })));
    assert!(t.on_expired("c1").is_empty(), "a decided call does not expire");
    let actions = t.on_tool_finished("c1", Ok(ToolOutput::new(json!({}))));
    assert_eq!(audits(&actions)[0].confirmation, Some(Confirmation::Approved));
}

#[tokio::test(start_paused = true)]
async fn parked_call_declined_expired_or_closed_never_runs() {
    let mut t = table(true);
    accept(&mut t, "c1", "create_calendar_event", r#"{"text":"a"}"#);
    accept(&mut t, "c2", "create_calendar_event", r#"{"text":"b"}"#);
    accept(&mut t, "c3", "create_calendar_event", r#"{"text":"c"}"#);

    let actions = t.on_confirm("c1", false).unwrap();
    assert_eq!(audits(&actions)[0].status, Some(AuditStatus::Declined));
    assert_eq!(audits(&actions)[0].confirmation, Some(Confirmation::Declined));
    let actions = t.on_audited("c1");
    assert_eq!(output(&actions)["error"]["code"], "user_declined");
    assert_eq!(client_events(&actions)[0]["reason"], "user_declined");

    tokio::time::advance(Duration::from_secs(61)).await;
    let actions = t.on_expired("c2");
    assert_eq!(audits(&actions)[0].status, Some(AuditStatus::Expired));
    assert_eq!(audits(&actions)[0].confirmation, Some(Confirmation::Expired));
    let actions = t.on_audited("c2");
    assert_eq!(output(&actions)["error"]["code"], "confirmation_expired");
    assert_eq!(client_events(&actions)[0]["reason"], "expired");
    assert_eq!(t.on_confirm("c2", true).unwrap_err(), NotAwaitingConfirmation);

    let actions = t.close_parked();
    assert_eq!(audits(&actions).len(), 1);
    assert_eq!(audits(&actions)[0].confirmation, Some(Confirmation::SessionClosed));
    let actions = t.on_audited("c3");
    assert_eq!(client_events(&actions)[0]["reason"], "session_closed");
    assert!(!actions.iter().any(|a| matches!(a, Action::Spawn { .. })));
    assert_eq!(t.unfinished(), 0);
    assert_eq!(t.on_confirm("nope", true).unwrap_err(), NotAwaitingConfirmation);
}

#[tokio::test(start_paused = true)]
async fn a_client_that_cannot_confirm_declines_at_once() {
    let mut t = table(false);
    let actions = accept(&mut t, "c1", "create_calendar_event", r#"{"text":"a"}"#);
    assert!(!actions.iter().any(|a| matches!(a, Action::Spawn { .. } | Action::Expire { .. })));
    assert_eq!(audits(&actions)[1].confirmation, Some(Confirmation::ClientCannotConfirm));
    assert_eq!(output(&t.on_audited("c1"))["error"]["code"], "client_cannot_confirm");
}

#[tokio::test(start_paused = true)]
async fn failures_timeouts_and_drain_abandon() {
    let mut t = table(true);
    accept(&mut t, "c1", "calculate_medical_score", r#"{"text":"a"}"#);
    accept(&mut t, "c2", "calculate_medical_score", r#"{"text":"b"}"#);
    let actions = t.on_tool_finished("c1", Err(ToolError::Timeout));
    assert_eq!(audits(&actions)[0].error_code.map(crate::tools::ErrorCode::as_str), Some("timeout"));
    assert_eq!(output(&t.on_audited("c1"))["error"]["code"], "timeout");
    let actions = t.abandon_running();
    assert_eq!(audits(&actions).len(), 1);
    assert!(t.on_tool_finished("c2", Ok(ToolOutput::new(json!({})))).is_empty(), "late result after abandon is ignored");
    assert_eq!(t.unfinished(), 1, "waiting for the flush");
    t.on_audited("c2");
    assert_eq!(t.unfinished(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_rate_limit_refuses_before_the_user_is_asked() {
    let mut t = table(true);
    let actions = t.accept("c1", "create_calendar_event", r#"{"text":"a"}"#, Instant::now());
    assert!(client_events(&actions).is_empty(), "no confirmation before the limit is checked");
    assert!(matches!(actions.last(), Some(Action::CheckLimit { call_id, .. }) if call_id == "c1"));
    let actions = t.on_limit_checked("c1", Err(Limited { retry_after_s: 30 }), 1_000);
    assert!(client_events(&actions).is_empty(), "the user is never asked");
    assert_eq!(audits(&actions)[0].error_code.map(crate::tools::ErrorCode::as_str), Some("rate_limited"));
    assert_eq!(output(&t.on_audited("c1"))["error"]["code"], "rate_limited");
    assert!(t.on_limit_checked("c1", Ok(()), 1_000).is_empty(), "one answer per call");
}

#[tokio::test(start_paused = true)]
async fn a_call_closed_while_its_limit_is_checked_was_decided_only_if_it_needed_a_decision() {
    // A session's calls: a tool that needs no confirmation was never going to be asked about.
    let mut t = table(true);
    t.accept("c1", "search_pubmed", r#"{"text":"a"}"#, Instant::now());
    t.accept("c2", "create_calendar_event", r#"{"text":"b"}"#, Instant::now());
    let actions = t.close_parked();
    let records = audits(&actions);
    let confirmation = |id: &str| records.iter().find(|r| r.call_id == id).and_then(|r| r.confirmation);
    assert_eq!(confirmation("c1"), Some(Confirmation::NotRequired));
    assert_eq!(confirmation("c2"), Some(Confirmation::SessionClosed));
    assert!(records.iter().all(|r| r.status == Some(AuditStatus::Declined)));

    // The admin API's calls are never asked about (CONTRACT §2), whatever the tool.
    let mut t = table(true).without_confirmation();
    t.accept("c3", "create_calendar_event", r#"{"text":"c"}"#, Instant::now());
    let actions = t.close_parked();
    assert_eq!(audits(&actions)[0].confirmation, Some(Confirmation::NotRequired));
    assert_eq!(audits(&actions)[0].status, Some(AuditStatus::Declined));
}

#[tokio::test(start_paused = true)]
async fn fail_closed_withholds_results_and_approved_calls() {
    let mut t = table(true);
    accept(&mut t, "c1", "calculate_medical_score", r#"{"text":"a"}"#);
    t.on_tool_finished("c1", Ok(ToolOutput::new(json!({"score": "SECRET-RESULT"}))));
    let actions = t.on_audit_failed("c1");
    let sent = format!("{actions:?}");
    assert!(!sent.contains("SECRET-RESULT"), "{sent}");
    assert_eq!(output(&actions)["error"]["code"], "audit_unavailable");
    assert_eq!(client_events(&actions)[0]["error"]["code"], "audit_unavailable");

    accept(&mut t, "c2", "create_calendar_event", r#"{"text":"a"}"#);
    t.on_confirm("c2", true).unwrap();
    let actions = t.on_audit_failed("c2");
    assert!(!actions.iter().any(|a| matches!(a, Action::Spawn { .. })), "an approval not on disk does not run");
    assert_eq!(audits(&actions)[0].error_code.map(crate::tools::ErrorCode::as_str), Some("audit_unavailable"));
    assert_eq!(output(&t.on_audited("c2"))["error"]["code"], "audit_unavailable");
}

#[tokio::test(start_paused = true)]
async fn invented_tool_names_are_hashed_everywhere() {
    let mut t = table(true);
    let actions = accept(&mut t, "c1", "lookup_john_smith_1961_03_12", "{}");
    let sent = format!("{actions:?}{:?}", t.on_audited("c1"));
    assert!(!sent.contains("john"), "{sent}");
    assert!(audits(&actions)[0].tool.starts_with("unknown_"));
    let again = accept(&mut t, "c2", "lookup_john_smith_1961_03_12", "{}");
    assert_eq!(audits(&again)[0].tool, audits(&actions)[0].tool, "equal names correlate within a run");
}

#[tokio::test(start_paused = true)]
async fn audited_arguments_are_screened_and_bounded() {
    let mut t = table(true);
    let long = "a".repeat(MAX_AUDIT_ARGUMENTS);
    for (id, text) in [("c1", long.as_str()), ("c2", "Mr. Quixote")] {
        let args = json!({"text": text}).to_string();
        let mut actions = t.accept(id, "third_party_echo", &args, Instant::now());
        let Some(Action::CheckLimit { .. }) = actions.pop() else { panic!("{actions:?}") };
        actions.extend(t.on_limit_checked(id, Ok(()), 1_000));
        let finished = audits(&actions);
        assert_eq!(finished.last().unwrap().arguments, None, "{id}");
    }
}

/// Every string argument of every third-party tool voxgate ships (and any added later with
/// `third_party: true`) is screened: an identifier in any of them blocks the call.
#[test]
fn identifiers_in_any_string_argument_of_any_third_party_tool_are_blocked() {
    // A calendar file of this test's own: the default one is locked by whichever process opens it
    // first (nextest runs each test as a process).
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::config::Config::default();
    config.backends.calendar.path = dir.path().join("calendar.ics");
    let registry = ToolRegistry::from_config(&config).unwrap();
    let taint = TaintSet::default();
    let identifiers = ["born 12 March 1961", "1961-03-12", "1961/03/12", "Mr. Quixote", "MRN 4471123", "patient Zebulon"];
    let mut screened = 0;
    for tool in registry.iter().filter(|t| t.spec().third_party) {
        let properties = tool.spec().parameters["properties"].as_object().cloned().unwrap_or_default();
        for (name, schema) in properties {
            let array = schema["type"] == "array";
            if schema["type"] != "string" && !(array && schema["items"]["type"] == "string") {
                continue;
            }
            for identifier in identifiers {
                let value = if array { json!([identifier]) } else { json!(identifier) };
                let args = json!({ name.clone(): value });
                assert_eq!(
                    crate::policy::screening::screen_call(tool.tool.as_ref(), &args, &taint),
                    Err(ToolError::PhiBlocked),
                    "{}.{name} = {identifier}",
                    tool.name()
                );
                screened += 1;
            }
        }
        let nested = json!({"filters": {"deep": ["Dr Quixote"]}});
        assert_eq!(crate::policy::screening::screen_call(tool.tool.as_ref(), &nested, &taint), Err(ToolError::PhiBlocked));
    }
    assert!(screened >= 3 * identifiers.len(), "search_pubmed: query, date_from, date_to at least ({screened})");
}

#[tokio::test(start_paused = true)]
async fn nothing_is_released_before_every_gating_record_is_on_disk() {
    let mut t = table(true);
    accept(&mut t, "c1", "create_calendar_event", r#"{"text":"a"}"#);
    t.on_confirm("c1", true).unwrap();
    // The drain deadline passes while the approval is being flushed: the call finishes as
    // timed out, and its finish may be acknowledged before the approval.
    assert_eq!(audits(&t.abandon_running())[0].error_code.map(crate::tools::ErrorCode::as_str), Some("timeout"));
    assert!(t.on_audited("c1").is_empty(), "one of two records acknowledged: nothing goes out");
    let actions = t.on_audited("c1");
    assert!(!actions.iter().any(|a| matches!(a, Action::Spawn { .. })));
    assert_eq!(output(&actions)["error"]["code"], "timeout");
    assert!(t.on_audited("c1").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_tools_own_error_text_reaches_only_the_model_and_taints_like_a_result() {
    let server_text = "No order ord-9 for patient Zebulon Quixote (db01.lab.internal)";
    let mut t = table_with(true, vec![lab_lookup()]);
    accept(&mut t, "c1", "lab__lookup_result", r#"{"text":"ord-9"}"#);
    let actions = t.on_tool_finished("c1", Err(ToolError::Reported(server_text.into())));
    assert_eq!(audits(&actions)[0].error_code.map(crate::tools::ErrorCode::as_str), Some("backend_error"), "CONTRACT §4's closed list");
    let actions = t.on_audited("c1");

    // The client: a fixed sentence, no upstream body (CONTRACT §4).
    let failed = &client_events(&actions)[0];
    assert_eq!(failed["type"], "voxgate.tool_call.failed");
    assert_eq!(failed["error"], json!({"code": "backend_error", "message": "The tool reported an error."}));
    // The model: the server's words, which it can act on.
    let out = output(&actions);
    assert_eq!(out["error"]["code"], "backend_error");
    assert!(out["error"]["message"].as_str().unwrap_or_default().contains(server_text), "{out}");

    // What the model got taints the session as a completed result's would.
    assert!(!t.taint().is_empty());
    let actions = accept(&mut t, "c2", "third_party_echo", r#"{"text":"Zebulon heart failure"}"#);
    assert_eq!(audits(&actions).last().and_then(|r| r.error_code.map(crate::tools::ErrorCode::as_str)), Some("phi_blocked"));
    assert!(!actions.iter().any(|a| matches!(a, Action::Spawn { .. })));
    assert!(client_events(&actions).is_empty(), "a blocked call never started: {actions:?}");
    let actions = accept(&mut t, "c3", "third_party_echo", r#"{"text":"beta blockers in heart failure"}"#);
    assert!(actions.iter().any(|a| matches!(a, Action::Spawn { .. })), "ordinary words stay usable");

    // A tool whose results name no one taints with neither (as for its results).
    let mut t = table(true);
    accept(&mut t, "c1", "calculate_medical_score", r#"{"text":"a"}"#);
    t.on_tool_finished("c1", Err(ToolError::Reported(server_text.into())));
    let actions = t.on_audited("c1");
    assert_eq!(client_events(&actions)[0]["error"]["message"], "The tool reported an error.");
    assert!(t.taint().is_empty());
}

mod taint;

/// A call is held from its `.done` until its item ends: accepted when it completed (or when no end
/// ever comes), forgotten with no record when it was cut off with its response.
#[test]
fn a_held_call_is_accepted_only_when_its_item_completed() {
    let mut t = table(true);
    let now = Instant::now();
    let held = t.hold("c1", "calculate_medical_score", "{}", Some("r1"));
    let Some(Action::Expire { call_id: key, .. }) = held.first() else { panic!("{held:?}") };
    assert!(t.hold("c1", "calculate_medical_score", "{}", Some("r1")).is_empty(), "held once");
    assert!(t.settle("c1", false, now).is_empty(), "cut off: no record, nothing run");
    assert!(!t.owns("c1"));
    assert!(t.on_expired(key).is_empty(), "a settled call's wait ends with nothing");

    t.hold("c2", "calculate_medical_score", "{}", Some("r1"));
    assert!(audits(&t.settle("c2", true, now)).iter().any(|r| r.event == AuditEvent::CallStarted));
    t.hold("c3", "calculate_medical_score", "{}", Some("r2"));
    t.hold("c4", "calculate_medical_score", "{}", Some("r3"));
    assert!(t.settle_response(Some("r2"), false, now).is_empty(), "its response was cancelled");
    assert!(!t.owns("c3"));
    let key = match &t.hold("c5", "calculate_medical_score", "{}", None)[..] {
        [Action::Expire { call_id, .. }] => call_id.clone(),
        other => panic!("{other:?}"),
    };
    assert!(!audits(&t.on_expired(&key)).is_empty(), "no end ever came: accepted");
    assert!(!t.owns("c4"), "another response's call is still held");
    assert!(!audits(&t.settle_response(Some("r3"), true, now)).is_empty(), "its response completed");
}

/// A closing session reads no more of the upstream, so no held call's item can end: held calls
/// are forgotten, and their waits coming due accept nothing.
#[test]
fn a_closing_session_forgets_its_held_calls() {
    let mut t = table(true);
    let key = match &t.hold("c1", "calculate_medical_score", "{}", Some("r1"))[..] {
        [Action::Expire { call_id, .. }] => call_id.clone(),
        other => panic!("{other:?}"),
    };
    t.forget_held();
    assert!(t.on_expired(&key).is_empty(), "accepted after the close began");
    assert!(!t.owns("c1"));
}

/// The upstream picks call ids: one spelled like a held call's deadline key still has its
/// confirmation expire.
#[tokio::test(start_paused = true)]
async fn a_call_id_spelled_like_a_settle_key_still_expires() {
    let mut t = table(true);
    let id = "\u{0}settle\u{0}x";
    accept(&mut t, id, "create_calendar_event", r#"{"text":"a"}"#);
    let actions = t.on_expired(id);
    assert_eq!(audits(&actions)[0].status, Some(AuditStatus::Expired));
}
