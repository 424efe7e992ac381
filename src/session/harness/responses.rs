//! The response gate with more than one response in sight: an out-of-band response
//! (`conversation: "none"`) runs beside the default conversation's; its end does not open the gate
//! while that one still runs, and it covers none of voxgate's outputs.

use super::*;

fn created(id: &str, conversation_id: Value) -> Value {
    json!({"type": "response.created", "event_id": "e", "response": {"id": id, "status": "in_progress", "conversation_id": conversation_id, "output": []}})
}

fn done(id: &str) -> Value {
    json!({"type": "response.done", "event_id": "e", "response": {"id": id, "status": "completed", "output": []}})
}

#[tokio::test(start_paused = true)]
async fn an_out_of_band_response_ending_does_not_open_the_gate_while_the_conversations_runs() {
    let mut h = start(|_| {}, 1 << 20).await;
    h.model_sends(created("resp_main", json!("conv_1"))).await;
    h.model_sends(created("resp_oob", Value::Null)).await;
    h.tool_call("call_1").await;
    h.acknowledge("call_1").await;
    h.model_sends(done("resp_oob")).await;
    h.browser_expects("response.done").await;
    h.model_gets_nothing_from_voxgate("voxgate sent").await;
    h.model_sends(done("resp_main")).await;
    h.model_expects("response.create").await;
}

#[tokio::test(start_paused = true)]
async fn an_out_of_band_response_covers_no_output() {
    let mut h = start(|_| {}, 1 << 20).await;
    h.model_sends(json!({"type": "input_audio_buffer.speech_started", "event_id": "e", "audio_start_ms": 0, "item_id": "u1"})).await;
    h.tool_call("call_1").await;
    h.acknowledge("call_1").await;
    // The client's classification, say, out of band: the output still needs its turn.
    h.model_sends(created("resp_oob", Value::Null)).await;
    h.model_sends(json!({"type": "input_audio_buffer.speech_stopped", "event_id": "e", "audio_end_ms": 900, "item_id": "u1"})).await;
    h.model_sends(done("resp_oob")).await;
    h.model_expects("response.create").await;
}

/// The client's own `response.create`, not yet answered, holds voxgate's back: two requests at
/// once would have the upstream refuse one (`conversation_already_has_active_response`). The
/// client's response, started after the output was taken in, covers it: voxgate asks for none.
/// Refused, the client's request frees the gate at once.
#[tokio::test(start_paused = true)]
async fn the_clients_request_in_flight_holds_voxgates_back() {
    let mut h = start(|_| {}, 1 << 20).await;
    h.browser_sends(json!({"type": "response.create", "event_id": "c1"})).await;
    h.model_expects("response.create").await;
    h.tool_call("call_1").await;
    h.acknowledge("call_1").await;
    h.model_gets_nothing_from_voxgate("voxgate sent").await;
    h.model_sends(created("resp_client", json!("conv_1"))).await;
    h.model_sends(done("resp_client")).await;
    h.browser_expects("response.done").await;
    h.model_gets_nothing_from_voxgate("voxgate sent").await;

    h.browser_sends(json!({"type": "response.create", "event_id": "c2"})).await;
    h.model_expects("response.create").await;
    h.tool_call("call_2").await;
    h.acknowledge("call_2").await;
    h.model_gets_nothing_from_voxgate("voxgate sent").await;
    h.model_sends(json!({"type": "error", "event_id": "e", "error": {"type": "invalid_request_error", "code": "x", "message": "no", "event_id": "c2"}})).await;
    h.model_expects("response.create").await;
}
