//! Screening and taint across calls: what a PHI result taints, and what is then neither sent to a
//! third party nor written to the audit log.

use super::*;

/// A third-party tool the user must approve (an MCP tool that is not read-only, or a built-in with
/// `tools.<name>.requires_confirmation = true`).
fn third_party_confirmed() -> Arc<dyn Tool> {
    let mut spec = third_party_echo().spec().clone();
    spec.name = "third_party_confirmed";
    spec.requires_confirmation = true;
    Arc::new(Echo { spec })
}

/// Taint the session with what a PHI tool returned, through the table as a session would.
fn taint_with(t: &mut CallTable, id: &str, result: Value) {
    accept(t, id, "lab__lookup_result", r#"{"text":"ord-9"}"#);
    t.on_tool_finished(id, Ok(ToolOutput::new(result)));
    t.on_audited(id);
    assert!(!t.taint().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_query_blocked_after_approval_is_not_audited() {
    let mut t = table_with(true, vec![lab_lookup(), third_party_confirmed()]);
    let actions = accept(&mut t, "c1", "third_party_confirmed", r#"{"text":"Zebulon heart failure"}"#);
    assert_eq!(client_events(&actions)[0]["type"], "voxgate.tool_call.confirmation_requested");
    // While the user decides, a PHI result names the patient the query is about.
    taint_with(&mut t, "c2", json!({"text": "Follow-up Zebulon Quixote"}));

    let approved = t.on_confirm("c1", true).unwrap();
    assert_eq!(audits(&approved)[0].arguments, None);
    let actions = t.on_audited("c1");
    assert!(!actions.iter().any(|a| matches!(a, Action::Spawn { .. })));
    let finished = audits(&actions);
    assert_eq!(finished[0].error_code.map(crate::tools::ErrorCode::as_str), Some("phi_blocked"));
    assert_eq!(finished[0].arguments, None, "the text judged PHI is not written down");
    let sent = format!("{actions:?}");
    assert!(!sent.contains("Zebulon"), "{sent}");
}

#[tokio::test(start_paused = true)]
async fn a_parked_query_tainted_meanwhile_is_not_audited_when_it_never_runs() {
    let mut t = table_with(true, vec![lab_lookup(), third_party_confirmed()]);
    accept(&mut t, "c1", "third_party_confirmed", r#"{"text":"Zebulon heart failure"}"#);
    accept(&mut t, "c2", "third_party_confirmed", r#"{"text":"beta blockers"}"#);
    taint_with(&mut t, "c3", json!({"text": "Follow-up Zebulon Quixote"}));
    let declined = t.on_confirm("c1", false).unwrap();
    assert_eq!(audits(&declined)[0].status, Some(AuditStatus::Declined));
    assert_eq!(audits(&declined)[0].arguments, None, "screening would block it now");
    let declined = t.on_confirm("c2", false).unwrap();
    assert_eq!(audits(&declined)[0].arguments, Some(json!({"text": "beta blockers"})));
}

#[tokio::test(start_paused = true)]
async fn arguments_of_local_non_phi_tools_are_screened_for_the_audit_but_not_blocked() {
    let mut t = table_with(true, vec![lab_lookup()]);
    // search_pubmed here is a plain echo: neither PHI nor third-party, like
    // search_medical_guidelines. The data does not leave, so the call runs.
    let actions = accept(&mut t, "c1", "search_pubmed", r#"{"text":"Mr. Quixote DOB"}"#);
    assert!(actions.iter().any(|a| matches!(a, Action::Spawn { .. })), "a local tool is not blocked");
    let actions = t.on_tool_finished("c1", Ok(ToolOutput::new(json!({}))));
    assert_eq!(audits(&actions)[0].status, Some(AuditStatus::Completed));
    assert_eq!(audits(&actions)[0].arguments, None, "identifiers: the digest alone");
    assert_eq!(audits(&actions)[0].args_sha256.len(), 64);

    // Taint counts too: a word a PHI tool returned is not written down either.
    taint_with(&mut t, "c2", json!({"text": "Follow-up Zebulon Quixote"}));
    accept(&mut t, "c3", "search_pubmed", r#"{"text":"zebulon statins"}"#);
    let actions = t.on_tool_finished("c3", Ok(ToolOutput::new(json!({}))));
    assert_eq!(audits(&actions)[0].arguments, None);
    accept(&mut t, "c4", "search_pubmed", r#"{"text":"statins"}"#);
    let actions = t.on_tool_finished("c4", Ok(ToolOutput::new(json!({}))));
    assert_eq!(audits(&actions)[0].arguments, Some(json!({"text": "statins"})));
}

#[tokio::test(start_paused = true)]
async fn numbers_and_keys_of_phi_results_taint_and_numbers_are_screened() {
    let tool = third_party_echo();
    let phone = json!({"n": 5558675309u64});
    let blocked = crate::policy::screening::screen_call(tool.as_ref(), &phone, &TaintSet::default());
    assert_eq!(blocked, Err(ToolError::PhiBlocked), "a phone number sent as a JSON number");

    let mut t = table_with(true, vec![lab_lookup()]);
    taint_with(&mut t, "c1", json!({"structured": {"Zebulon Quixote": 48213377}}));
    assert!(t.taint().matches("Zebulon"));
    assert!(t.taint().matches("48213377"));
    let screened = crate::policy::screening::screen_call(tool.as_ref(), &json!({"case": 48213377}), t.taint());
    assert_eq!(screened, Err(ToolError::PhiBlocked), "a tainted number sent as a number");
}

#[tokio::test(start_paused = true)]
async fn a_full_taint_tells_the_model_and_the_client_to_start_a_new_session() {
    let mut t = table_with(true, vec![lab_lookup()]);
    // One result of 110,000 distinct rare words: with their pairs, past MAX_TAINT_ENTRIES.
    let words: Vec<String> = (0..110_000).map(|i| format!("zq{i}x")).collect();
    taint_with(&mut t, "c1", json!({"text": words.join(" ")}));
    let actions = accept(&mut t, "c2", "third_party_echo", r#"{"text":"beta blockers in heart failure"}"#);
    assert!(!actions.iter().any(|a| matches!(a, Action::Spawn { .. })));
    let finished = audits(&actions);
    assert_eq!(finished.last().and_then(|r| r.error_code.map(crate::tools::ErrorCode::as_str)), Some("phi_blocked"));
    assert_eq!(finished.last().and_then(|r| r.arguments.clone()), None);
    let actions = t.on_audited("c2");
    // Not "ask again without names": no wording would pass, so the model and the user would loop.
    let out = output(&actions);
    assert_eq!(out["error"]["code"], "phi_blocked");
    let message = out["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("Start a new session"), "{out}");
    let failed = &client_events(&actions)[0];
    assert_eq!(failed["error"]["code"], "phi_blocked");
    assert_eq!(failed["error"]["message"], message);
}
