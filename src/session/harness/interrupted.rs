//! Calls cut off by the end of their response (a barge-in, `max_output_tokens`, a failure): the
//! API sends `response.function_call_arguments.done` for them too, and only the item's status
//! (`conversation.item.done`, `response.output_item.done`) or the response's (`response.done`)
//! tells them apart. Such a call is never accepted: not audited, not run, not answered.

use super::*;

/// The events of one server call in response `resp`, its item ending with `status`.
fn call_events(resp: &str, call_id: &str, status: &str) -> Vec<Value> {
    let item_id = format!("item_{call_id}");
    let item = |status: &str| json!({"id": item_id, "type": "function_call", "status": status, "name": TOOL, "call_id": call_id, "arguments": "{}"});
    vec![
        json!({"type": "response.output_item.added", "event_id": "e_a", "response_id": resp, "output_index": 0, "item": item("in_progress")}),
        json!({"type": "response.function_call_arguments.done", "event_id": "e_d", "response_id": resp, "item_id": item_id,
            "output_index": 0, "call_id": call_id, "name": TOOL, "arguments": "{}"}),
        json!({"type": "conversation.item.done", "event_id": "e_cd", "previous_item_id": null, "item": item(status)}),
        json!({"type": "response.output_item.done", "event_id": "e_od", "response_id": resp, "output_index": 0, "item": item(status)}),
    ]
}

async fn response(h: &mut Harness, resp: &str, call_id: &str, item_status: &str, status: &str) {
    h.model_sends(json!({"type": "response.created", "event_id": "e_rc", "response": {"id": resp, "status": "in_progress", "output": []}})).await;
    for event in call_events(resp, call_id, item_status) {
        h.model_sends(event).await;
    }
    let item = json!({"id": format!("item_{call_id}"), "type": "function_call", "status": item_status, "name": TOOL, "call_id": call_id, "arguments": "{}"});
    h.model_sends(json!({"type": "response.done", "event_id": "e_rd", "response": {"id": resp, "status": status, "output": [item]}})).await;
}

fn audited_calls(h: &Harness) -> Vec<String> {
    let log = std::fs::read_to_string(h.audit_path()).unwrap_or_default();
    log.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter_map(|r| r["call_id"].as_str().map(str::to_string)).collect()
}

#[tokio::test(start_paused = true)]
async fn a_call_cut_off_by_a_barge_in_is_neither_run_nor_audited_nor_answered() {
    let mut h = start(|_| {}, 1 << 20).await;
    // The user barges in: the call's arguments happen to be complete, but its item ends incomplete.
    response(&mut h, "resp_1", "c_cut", "incomplete", "cancelled").await;
    // A later, completed call: its output is the first the model gets, its events the first the
    // client gets.
    response(&mut h, "resp_2", "c_ok", "completed", "completed").await;
    let output = h.model_expects("conversation.item.create").await;
    assert_eq!(output["item"]["call_id"], "c_ok", "the cut-off call was answered");
    assert_eq!(h.browser_expects("voxgate.tool_call.started").await["call_id"], "c_ok", "the cut-off call was run");
    h.browser_expects("voxgate.tool_call.completed").await;
    assert!(!audited_calls(&h).iter().any(|c| c == "c_cut"), "the cut-off call was audited");
}

#[tokio::test(start_paused = true)]
async fn a_completed_call_is_answered_before_its_response_ends() {
    let mut h = start(|_| {}, 1 << 20).await;
    h.model_sends(json!({"type": "response.created", "event_id": "e_rc", "response": {"id": "resp_1", "status": "in_progress", "output": []}})).await;
    for event in call_events("resp_1", "c1", "completed") {
        h.model_sends(event).await;
    }
    // No `response.done` yet: the completed item is enough.
    let output = h.model_expects("conversation.item.create").await;
    assert_eq!(output["item"]["call_id"], "c1");
}

#[tokio::test(start_paused = true)]
async fn a_call_of_a_failed_response_that_never_reports_its_item_is_not_run() {
    let mut h = start(|_| {}, 1 << 20).await;
    h.model_sends(json!({"type": "response.created", "event_id": "e_rc", "response": {"id": "resp_1", "status": "in_progress", "output": []}})).await;
    h.model_sends(call_events("resp_1", "c_cut", "incomplete").swap_remove(1)).await;
    h.model_sends(json!({"type": "response.done", "event_id": "e_rd", "response": {"id": "resp_1", "status": "failed", "output": []}})).await;
    response(&mut h, "resp_2", "c_ok", "completed", "completed").await;
    assert_eq!(h.model_expects("conversation.item.create").await["item"]["call_id"], "c_ok");
    assert!(!audited_calls(&h).iter().any(|c| c == "c_cut"), "the call of the failed response was audited");
}
