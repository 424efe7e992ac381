//! Server-owned tools end to end against a scripted fake upstream: injection, hiding, validation,
//! inline and parked calls, confirmation decisions, expiry, forgeries, response sequencing, and the
//! audit log holding every call exactly once.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Client, FakeConn, FakeUpstream, TestProxy, model_calls};

const WELLS: &str = r#"{"calculator_name":"wells_dvt","parameters":{"active_cancer":true,"paralysis_recent":false,"bedridden_3days":true,"localized_tenderness":true,"entire_leg_swollen":false,"calf_swelling_3cm":true,"pitting_edema":true,"collateral_veins":false,"alternative_diagnosis":false}}"#;

async fn session(fake: &mut FakeUpstream, proxy: &TestProxy) -> (Client, FakeConn, Value) {
    let mut client = proxy.client().await;
    let mut up = fake.accept().await;
    let injected = up.open_session().await;
    client.until("voxgate.session.ready").await;
    (client, up, injected)
}

fn tomorrow_at(hour: u32) -> String {
    let day = chrono::Utc::now().date_naive() + chrono::Days::new(1);
    format!("{day}T{hour:02}:00:00Z")
}

fn create_event_args(title: &str) -> String {
    json!({"title": title, "start_datetime": tomorrow_at(14), "end_datetime": tomorrow_at(15), "location": "Room 4"}).to_string()
}

fn finished(proxy: &TestProxy, call_id: &str) -> Vec<Value> {
    proxy.audit_records().into_iter().filter(|r| r["call_id"] == call_id && r["event"] == "call_finished").collect()
}

fn started(proxy: &TestProxy, call_id: &str) -> Vec<Value> {
    proxy.audit_records().into_iter().filter(|r| r["call_id"] == call_id && r["event"] == "call_started").collect()
}

#[tokio::test]
async fn tools_are_injected_and_listed() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let mut client = proxy.client().await;
    let mut up = fake.accept().await;
    up.send_json(&json!({"type": "session.created", "event_id": "e", "session": {"type": "realtime"}})).await;
    assert_eq!(client.next_json().await["type"], "session.created");
    let ready = client.next_json().await;
    assert_eq!(ready["type"], "voxgate.session.ready");
    let names: Vec<&str> = ready["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"calculate_medical_score"));
    assert!(names.contains(&"create_calendar_event"));
    let update = up.until("session.update").await;
    assert_eq!(update["session"]["type"], "realtime");
    let tools = update["session"]["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == "calculate_medical_score" && t["type"] == "function" && t["parameters"].is_object()));
}

#[tokio::test]
async fn inline_call_is_hidden_run_audited_and_answered() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let (mut client, mut up, _) = session(&mut fake, &proxy).await;
    model_calls(&mut up, &[("call_calc1", "calculate_medical_score", WELLS)]).await;

    let seen = client.collect_until("voxgate.tool_call.completed").await;
    let types: Vec<&str> = seen.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert!(types.contains(&"voxgate.tool_call.started"), "{types:?}");
    for hidden in ["response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "conversation.item.added"] {
        assert!(!types.contains(&hidden), "{hidden} leaked: {types:?}");
    }
    // The rewritten response.done may come before or after the call completes.
    let done = match seen.iter().find(|e| e["type"] == "response.done") {
        Some(done) => done.clone(),
        None => client.until("response.done").await,
    };
    assert_eq!(done["response"]["output"], json!([]), "call removed from response.done");

    let output = up.until("conversation.item.create").await;
    assert_eq!(output["item"]["type"], "function_call_output");
    assert_eq!(output["item"]["call_id"], "call_calc1");
    let result: Value = serde_json::from_str(output["item"]["output"].as_str().unwrap()).unwrap();
    assert_eq!(result["score"], 5);
    assert_eq!(result["risk_category"], "high");
    let create = up.next_json().await;
    assert_eq!(create["type"], "response.create", "one response.create after the output");

    assert_eq!(started(&proxy, "call_calc1").len(), 1);
    let fin = finished(&proxy, "call_calc1");
    assert_eq!(fin.len(), 1);
    assert_eq!(fin[0]["status"], "completed");
    assert_eq!(fin[0]["confirmation"], "not_required");
    assert_eq!(fin[0]["phi"], true);
    assert!(fin[0].get("arguments").is_none_or(Value::is_null), "PHI tool arguments must not be audited");
}

async fn park_event(fake: &mut FakeUpstream, proxy: &TestProxy, call_id: &str) -> (Client, FakeConn, Value) {
    let (mut client, mut up, _) = session(fake, proxy).await;
    model_calls(&mut up, &[(call_id, "create_calendar_event", &create_event_args("Meeting with Dr. Smith"))]).await;
    let request = client.until("voxgate.tool_call.confirmation_requested").await;
    assert_eq!(request["call_id"], call_id);
    assert!(request["prompt"].as_str().unwrap().starts_with("I'd like to create a calendar event:"));
    assert_eq!(request["arguments"]["title"], "Meeting with Dr. Smith");
    assert!(request["expires_at_ms"].as_u64().unwrap() > 1_700_000_000_000);
    (client, up, request)
}

#[tokio::test]
async fn approved_call_runs_once() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let (mut client, mut up, _) = park_event(&mut fake, &proxy, "call_cal1").await;
    client.send_json(json!({"type": "voxgate.tool_call.confirm", "call_id": "call_cal1", "approved": true})).await;
    client.until("voxgate.tool_call.started").await;
    let completed = client.until("voxgate.tool_call.completed").await;
    assert_eq!(completed["name"], "create_calendar_event");
    let output = up.until("conversation.item.create").await;
    let result: Value = serde_json::from_str(output["item"]["output"].as_str().unwrap()).unwrap();
    assert_eq!(result["created"], true);
    assert_eq!(up.next_json().await["type"], "response.create");
    let ics = std::fs::read_to_string(proxy.calendar_path()).unwrap();
    assert_eq!(ics.matches("BEGIN:VEVENT").count(), 1);
    assert!(ics.contains("Meeting with Dr. Smith"));
    // A second decision for the same call is an error.
    client.send_json(json!({"type": "voxgate.tool_call.confirm", "call_id": "call_cal1", "approved": true})).await;
    assert_eq!(client.until("error").await["error"]["code"], "voxgate_not_awaiting_confirmation");
    let fin = finished(&proxy, "call_cal1");
    assert_eq!(fin.len(), 1);
    assert_eq!((fin[0]["status"].as_str(), fin[0]["confirmation"].as_str()), (Some("completed"), Some("approved")));
}

#[tokio::test]
async fn declined_call_never_runs_and_the_model_is_told() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let (mut client, mut up, _) = park_event(&mut fake, &proxy, "call_cal2").await;
    client.send_json(json!({"type": "voxgate.tool_call.confirm", "call_id": "call_cal2", "approved": false})).await;
    let declined = client.until("voxgate.tool_call.declined").await;
    assert_eq!(declined["reason"], "user_declined");
    let output = up.until("conversation.item.create").await;
    let result: Value = serde_json::from_str(output["item"]["output"].as_str().unwrap()).unwrap();
    assert_eq!(result["error"]["code"], "user_declined");
    let ics = std::fs::read_to_string(proxy.calendar_path()).unwrap_or_default();
    assert_eq!(ics.matches("BEGIN:VEVENT").count(), 0);
    let fin = finished(&proxy, "call_cal2");
    assert_eq!((fin.len(), fin[0]["status"].as_str(), fin[0]["confirmation"].as_str()), (1, Some("declined"), Some("declined")));
}

#[tokio::test]
async fn unanswered_call_expires() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "[tools]\nconfirmation_timeout_ms = 1000\n").await;
    let (mut client, mut up, _) = park_event(&mut fake, &proxy, "call_cal3").await;
    let declined = client.until("voxgate.tool_call.declined").await;
    assert_eq!(declined["reason"], "expired");
    let output = up.until("conversation.item.create").await;
    assert!(output["item"]["output"].as_str().unwrap().contains("confirmation_expired"));
    client.send_json(json!({"type": "voxgate.tool_call.confirm", "call_id": "call_cal3", "approved": true})).await;
    assert_eq!(client.until("error").await["error"]["code"], "voxgate_not_awaiting_confirmation");
    let fin = finished(&proxy, "call_cal3");
    assert_eq!((fin.len(), fin[0]["status"].as_str(), fin[0]["confirmation"].as_str()), (1, Some("expired"), Some("expired")));
}

#[tokio::test]
async fn closing_the_session_declines_parked_calls() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let (client, _up, _) = park_event(&mut fake, &proxy, "call_cal4").await;
    drop(client);
    for _ in 0..100 {
        if !finished(&proxy, "call_cal4").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fin = finished(&proxy, "call_cal4");
    assert_eq!((fin.len(), fin[0]["status"].as_str(), fin[0]["confirmation"].as_str()), (1, Some("declined"), Some("session_closed")));
}

#[tokio::test]
async fn a_client_without_voxgate_events_cannot_confirm() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let mut client = Client::connect(&proxy.url(""), &["realtime"]).await;
    let mut up = fake.accept().await;
    up.open_session().await;
    model_calls(&mut up, &[("call_cal5", "create_calendar_event", &create_event_args("X"))]).await;
    let output = up.until("conversation.item.create").await;
    assert!(output["item"]["output"].as_str().unwrap().contains("client_cannot_confirm"));
    // The strict client saw no voxgate event and no trace of the call.
    let seen = client.collect_until("response.done").await;
    assert!(seen.iter().all(|e| !e["type"].as_str().unwrap().starts_with("voxgate.")), "{seen:?}");
    let fin = finished(&proxy, "call_cal5");
    assert_eq!(fin[0]["confirmation"], "client_cannot_confirm");
}

#[tokio::test]
async fn parallel_inline_and_parked_calls() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let (mut client, mut up, _) = session(&mut fake, &proxy).await;
    let bmi = r#"{"calculator_name":"bmi","parameters":{"weight_kg":64,"height_cm":160}}"#;
    model_calls(
        &mut up,
        &[("call_p1", "calculate_medical_score", WELLS), ("call_p2", "calculate_medical_score", bmi), ("call_p3", "create_calendar_event", &create_event_args("Rounds"))],
    )
    .await;
    client.until("voxgate.tool_call.confirmation_requested").await;
    // Both inline outputs, then exactly one response.create for them.
    let mut outputs = Vec::new();
    let mut creates = 0;
    while outputs.len() < 2 || creates == 0 {
        let event = up.next_json().await;
        match event["type"].as_str().unwrap() {
            "conversation.item.create" => outputs.push(event["item"]["call_id"].as_str().unwrap().to_string()),
            "response.create" => creates += 1,
            _ => {}
        }
    }
    outputs.sort();
    assert_eq!(outputs, vec!["call_p1", "call_p2"]);
    up.send_json(&json!({"type": "response.created", "event_id": "e", "response": {"id": "resp_2", "status": "in_progress", "output": []}})).await;
    client.send_json(json!({"type": "voxgate.tool_call.confirm", "call_id": "call_p3", "approved": true})).await;
    let output = up.until("conversation.item.create").await;
    assert_eq!(output["item"]["call_id"], "call_p3");
    // A response is active: no response.create until it is done.
    up.send_json(&json!({"type": "response.done", "event_id": "e2", "response": {"id": "resp_2", "status": "completed", "output": []}})).await;
    assert_eq!(up.next_json().await["type"], "response.create");
    for call in ["call_p1", "call_p2", "call_p3"] {
        assert_eq!(finished(&proxy, call).len(), 1, "{call}");
        assert_eq!(started(&proxy, call).len(), 1, "{call}");
    }
}

#[tokio::test]
async fn invalid_arguments_and_unknown_tools_fail_cleanly() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let (mut client, mut up, _) = session(&mut fake, &proxy).await;
    let bad = r#"{"calculator_name":"bmi","parameters":{"weight_kg":"Zebulon Quixote","height_cm":160}}"#;
    model_calls(&mut up, &[("call_bad", "calculate_medical_score", bad)]).await;
    let failed = client.until("voxgate.tool_call.failed").await;
    assert_eq!(failed["error"]["code"], "invalid_arguments");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(message.contains("weight_kg"), "{message}");
    assert!(!message.contains("Zebulon"), "{message}");
    let output = up.until("conversation.item.create").await;
    assert!(output["item"]["output"].as_str().unwrap().contains("invalid_arguments"));
    up.until("response.create").await;
    up.send_json(&json!({"type": "response.created", "event_id": "e", "response": {"id": "resp_x"}})).await;
    up.send_json(&json!({"type": "response.done", "event_id": "e", "response": {"id": "resp_x", "output": []}})).await;

    model_calls(&mut up, &[("call_unk", "launch_rockets", "{}")]).await;
    let failed = client.until("voxgate.tool_call.failed").await;
    assert_eq!(failed["error"]["code"], "unknown_tool");
    let output = up.until("conversation.item.create").await;
    assert!(output["item"]["output"].as_str().unwrap().contains("unknown_tool"));
    assert_eq!(finished(&proxy, "call_unk")[0]["error_code"], "unknown_tool");
    assert_eq!(finished(&proxy, "call_bad")[0]["error_code"], "invalid_arguments");
}

#[tokio::test]
async fn client_tools_pass_through_and_collisions_are_refused() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let (mut client, mut up, _) = session(&mut fake, &proxy).await;
    let tools = support::client_tools::declare_shadowing_tool(&mut client, &mut up, "search_pubmed").await;
    assert!(tools.iter().any(|t| t["name"] == "calculate_medical_score"));

    model_calls(&mut up, &[("call_w", "get_weather", r#"{"city":"Oslo"}"#)]).await;
    let done = client.until("response.function_call_arguments.done").await;
    assert_eq!(done["call_id"], "call_w");
    let done = client.until("response.done").await;
    assert_eq!(done["response"]["output"][0]["call_id"], "call_w");
    client.send_json(json!({"type": "conversation.item.create", "item": {"type": "function_call_output", "call_id": "call_w", "output": "{\"t\":3}"}})).await;
    assert_eq!(up.until("conversation.item.create").await["item"]["call_id"], "call_w");
}

#[tokio::test]
async fn forged_outputs_and_confirmations_are_refused() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let (mut client, mut up, _) = park_event(&mut fake, &proxy, "call_f1").await;
    client.send_json(json!({"type": "conversation.item.create", "event_id": "c9", "item": {"type": "function_call_output", "call_id": "call_f1", "output": "{\"created\":true}"}})).await;
    let error = client.until("error").await;
    assert_eq!(error["error"]["code"], "voxgate_server_call");
    client.send_json(json!({"type": "conversation.item.create", "item": {"type": "function_call", "name": "create_calendar_event", "call_id": "call_new", "arguments": "{}"}})).await;
    assert_eq!(client.until("error").await["error"]["code"], "voxgate_server_call");
    client.send_json(json!({"type": "voxgate.tool_call.confirm", "call_id": "call_someone_else", "approved": true})).await;
    assert_eq!(client.until("error").await["error"]["code"], "voxgate_not_awaiting_confirmation");
    // The model cannot confirm: nothing it sends is a decision. The call is still parked.
    up.send_json(&json!({"type": "voxgate.tool_call.confirm", "call_id": "call_f1", "approved": true})).await;
    client.send_json(json!({"type": "voxgate.tool_call.confirm", "call_id": "call_f1", "approved": false})).await;
    assert_eq!(client.until("voxgate.tool_call.declined").await["reason"], "user_declined");
    let ics = std::fs::read_to_string(proxy.calendar_path()).unwrap_or_default();
    assert_eq!(ics.matches("BEGIN:VEVENT").count(), 0);
}

#[tokio::test]
async fn no_response_create_over_a_speaking_user() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let (_client, mut up, _) = session(&mut fake, &proxy).await;
    up.send_json(&json!({"type": "input_audio_buffer.speech_started", "event_id": "e", "audio_start_ms": 10, "item_id": "item_u"})).await;
    model_calls(&mut up, &[("call_b1", "calculate_medical_score", WELLS)]).await;
    // The result is delivered even though the user is speaking...
    let output = up.until("conversation.item.create").await;
    assert_eq!(output["item"]["call_id"], "call_b1");
    // ...but no response.create while they speak; server VAD's own response, started after the
    // server acknowledged the output, then covers it.
    up.send_json(&json!({"type": "conversation.item.added", "event_id": "e", "previous_item_id": null,
        "item": {"id": "item_o1", "type": "function_call_output", "call_id": "call_b1", "output": "{}"}})).await;
    up.send_json(&json!({"type": "input_audio_buffer.speech_stopped", "event_id": "e", "audio_end_ms": 900, "item_id": "item_u"})).await;
    up.send_json(&json!({"type": "response.created", "event_id": "e", "response": {"id": "resp_vad"}})).await;
    up.send_json(&json!({"type": "response.done", "event_id": "e", "response": {"id": "resp_vad", "output": []}})).await;
    let next = tokio::time::timeout(Duration::from_millis(1500), up.next_json()).await;
    assert!(next.is_err(), "unexpected frame: {next:?}");
}

#[tokio::test]
async fn a_refused_response_create_is_retried_after_the_active_response() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let (mut client, mut up, _) = session(&mut fake, &proxy).await;
    model_calls(&mut up, &[("call_r1", "calculate_medical_score", WELLS)]).await;
    up.until("conversation.item.create").await;
    let create = up.until("response.create").await;
    let event_id = create["event_id"].as_str().unwrap();
    // A VAD response raced ours: the upstream refuses voxgate's request.
    up.send_json(&json!({"type": "response.created", "event_id": "e", "response": {"id": "resp_vad"}})).await;
    up.send_json(&json!({"type": "error", "event_id": "e", "error": {"type": "invalid_request_error", "code": "conversation_already_has_active_response", "message": "busy", "param": null, "event_id": event_id}})).await;
    up.send_json(&json!({"type": "response.done", "event_id": "e", "response": {"id": "resp_vad", "output": []}})).await;
    assert_eq!(up.next_json().await["type"], "response.create", "retried once the response is done");
    // The client never saw voxgate's own error.
    let mut seen = client.collect_until("response.done").await;
    seen.extend(client.collect_until("response.done").await);
    assert!(seen.iter().all(|e| e["type"] != "error"), "{seen:?}");
}
