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

/// A client `response.create` without an `event_id` that the upstream refuses for a reason other
/// than an active response (`invalid_value`) frees the gate at once: voxgate forwards it with a
/// stand-in id, the upstream's `error` names that, and the tool output's answer is asked for then,
/// not after `REQUEST_ANSWER_TIMEOUT`. The client sees the error naming what it sent: nothing.
#[tokio::test(start_paused = true)]
async fn a_refused_client_request_without_an_event_id_frees_the_gate_at_once() {
    let mut h = start(|_| {}, 1 << 20).await;
    let response = json!({"instructions": "Be brief.", "max_output_tokens": 0});
    h.browser_sends(json!({"type": "response.create", "response": response})).await;
    let forwarded = h.model_expects("response.create").await;
    assert_eq!(forwarded["response"], response, "{forwarded}");
    h.tool_call("call_1").await;
    h.acknowledge("call_1").await;
    h.model_gets_nothing_from_voxgate("voxgate asked over the client's request").await;
    let refused = tokio::time::Instant::now();
    h.model_sends(json!({"type": "error", "event_id": "e", "error": {"type": "invalid_request_error", "code": "invalid_value",
        "message": "Invalid 'response.max_output_tokens'.", "param": "response.max_output_tokens", "event_id": forwarded["event_id"]}}))
    .await;
    let error = h.browser_expects("error").await;
    assert_eq!(error["error"]["code"], "invalid_value", "{error}");
    assert_eq!(error["error"]["event_id"], Value::Null, "the client sent no event_id: {error}");
    h.model_expects("response.create").await;
    let waited = refused.elapsed();
    let fallback = crate::session::turns::REQUEST_ANSWER_TIMEOUT;
    assert!(waited < fallback / 3, "voxgate's response.create came {waited:?} after the refusal (fallback {fallback:?})");
}

/// A client `response.create` with an `event_id` goes upstream as the client wrote it, byte for
/// byte: only one without gets a stand-in.
#[tokio::test(start_paused = true)]
async fn a_client_request_with_an_event_id_goes_byte_for_byte() {
    let mut h = start(|_| {}, 1 << 20).await;
    let raw = r#"{ "type" : "response.create", "event_id":"c1", "response":{"instructions":"Be \u0062rief.", "temperature":0.80} }"#;
    h.browser.send(Message::text(raw)).await.unwrap();
    let forwarded = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match h.model.next().await {
                Some(Ok(Message::Text(text))) => return text,
                Some(Ok(_)) => {}
                other => panic!("model socket ended: {other:?}"),
            }
        }
    })
    .await
    .expect("nothing reached the model");
    assert_eq!(forwarded.as_str(), raw);
}

/// A model that answers each error with another failing call (here an unknown tool) is asked to
/// respond three times, then not again until the user takes a turn. A client's `response.create`
/// alone is not one (a client's code sends one after answering its own tool, with nobody there);
/// a typed message is, and voxgate then leaves the client's own `response.create` for it to go
/// first, asking itself only when none comes.
#[tokio::test(start_paused = true)]
async fn a_model_calling_an_unknown_tool_again_and_again_is_asked_three_times_then_waits_for_the_user() {
    let mut h = start(|_| {}, 1 << 20).await;
    for n in 0..4 {
        fails(&mut h, n).await;
        if n < 3 {
            h.model_expects("response.create").await;
            let id = format!("r{n}");
            h.model_sends(created(&id, json!("conv_1"))).await;
            h.model_sends(done(&id)).await;
        }
    }
    h.model_gets_nothing_from_voxgate("a fourth request for nothing but errors").await;
    // The client's code asks for a response on its own: it is forwarded, and covers the errors,
    // but it is no turn of the user's: the next failing call is not asked about.
    h.browser_sends(json!({"type": "response.create", "event_id": "client_rc"})).await;
    assert_eq!(h.model_expects("response.create").await["event_id"], "client_rc");
    h.model_sends(created("rc", json!("conv_1"))).await;
    h.model_sends(done("rc")).await;
    fails(&mut h, 4).await;
    h.model_gets_nothing_from_voxgate("a request after the client's own response.create").await;
    // The user types, and the client asks for the answer right after: its request goes first,
    // not voxgate's (which would have it refused, and the question answered twice).
    let typed = json!({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "What went wrong?"}]}});
    // (The request sent once the message is through: in a read of its own, as it often is.)
    h.browser_sends(typed).await;
    h.model_expects("conversation.item.create").await;
    h.browser_sends(json!({"type": "response.create", "event_id": "client_rc2"})).await;
    assert_eq!(h.model_expects("response.create").await["event_id"], "client_rc2", "the client's request first");
    h.model_sends(created("rc2", json!("conv_1"))).await;
    h.model_sends(done("rc2")).await;
    h.model_gets_nothing_from_voxgate("a request of voxgate's beside the client's").await;
}

/// The model calls an unknown tool as call `u{n}`; its error output is acknowledged.
async fn fails(h: &mut Harness, n: usize) {
    let call = format!("u{n}");
    h.model_calls(&call, "no_such_tool").await;
    let output = h.model_expects("conversation.item.create").await;
    assert_eq!(output["item"]["call_id"], call.as_str(), "{output}");
    h.acknowledge(&call).await;
}
