//! Outputs and client frames across a resume: what the stalled upstream never took reaches the
//! new upstream once, in order; an output or a client request the upstream refused is pending no
//! more.

use futures::{FutureExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use super::{browser_sync, connector, drop_model, function_call, resumable, until_response_create};
use crate::session::harness::{Harness, TOOL, pair, start_with, upstream_conn};

/// What the model has been sent and not yet read: a delta from the model is passed to the
/// browser first, which shows that voxgate has handled everything before it.
async fn sent_to_model_by_now(h: &mut Harness) -> Vec<Value> {
    h.model_sends(json!({"type": "response.output_text.delta", "event_id": "probe", "delta": "x"})).await;
    h.browser_expects("response.output_text.delta").await;
    let mut sent = Vec::new();
    while let Some(Some(Ok(Message::Text(text)))) = h.model.next().now_or_never() {
        sent.push(serde_json::from_str::<Value>(&text).unwrap());
    }
    sent
}

/// An upstream that stops reading with its queue full of audio: a call's output that then cannot
/// be queued (the bounded send times out) is not lost. The stall starts a resume, and the new
/// upstream gets the output exactly once after the restore, then voxgate's `response.create`.
#[tokio::test(start_paused = true)]
async fn an_output_whose_send_timed_out_on_a_stalled_upstream_is_delivered_once_after_the_resume() {
    let (connect, offer, _) = connector();
    let mut h = start_with(|c| c.upstream.resume = true, 16 * 1024, Some(connect), Vec::new()).await;
    h.model_sends(function_call("c1")).await;
    // The model stops reading. The first frame fills the socket; the second, costing the whole
    // queue, waits in it: the upstream queue is full, yet no send has timed out.
    let big = |id: &str| json!({"type": "input_audio_buffer.append", "event_id": id, "audio": "A".repeat(crate::session::outbox::OUTBOX_BYTES)});
    h.browser_sends(big("fill_socket")).await;
    h.browser_sends(big("fill_queue")).await;
    browser_sync(&mut h).await;
    // The call finishes; its output finds no room and its send times out.
    h.model_sends(json!({"type": "response.function_call_arguments.done", "event_id": "e_c1", "response_id": "r1",
        "item_id": "fc_c1", "output_index": 0, "call_id": "c1", "name": TOOL, "arguments": "{}"}))
    .await;
    assert_eq!(h.browser_expects("voxgate.tool_call.completed").await["call_id"], "c1");
    h.browser_expects("voxgate.session.resuming").await;
    let proxy_side = drop_model(&mut h).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    let kinds = until_response_create(&mut h.model).await;
    // The audio queued behind the stall was never taken either: it follows the restore.
    assert_eq!(kinds, ["session.update", "function_call:c1", "function_call_output:c1", "input_audio_buffer.append", "response.create"]);
    h.browser_expects("voxgate.session.resumed").await;
}

/// Client frames the stalled upstream never took (the audio in the old queue, the typed question
/// whose send timed out) reach the new upstream after the restore, in order and once, before the
/// `response.create` that followed them: the model answers the question it was asked.
#[tokio::test(start_paused = true)]
async fn client_frames_the_stalled_upstream_never_took_follow_the_restore_in_order() {
    let (connect, offer, _) = connector();
    let mut h = start_with(|c| c.upstream.resume = true, 16 * 1024, Some(connect), Vec::new()).await;
    let big = |id: &str| json!({"type": "input_audio_buffer.append", "event_id": id, "audio": "A".repeat(crate::session::outbox::OUTBOX_BYTES)});
    h.browser_sends(big("fill_socket")).await;
    h.browser_sends(big("fill_queue")).await;
    h.browser_sends(json!({"type": "conversation.item.create", "event_id": "lost_item",
        "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "And for children?"}]}}))
    .await;
    h.browser_sends(json!({"type": "response.create", "event_id": "client_rc"})).await;
    h.browser_expects("voxgate.session.resuming").await;
    let proxy_side = drop_model(&mut h).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    let mut seen = Vec::new();
    loop {
        let frame = super::next_json(&mut h.model).await;
        let id = frame["event_id"].as_str().unwrap_or_default().to_string();
        seen.push(if frame["type"] == "session.update" { "session.update".to_string() } else { id.clone() });
        if id == "client_rc" {
            break;
        }
    }
    assert_eq!(seen, ["session.update", "fill_queue", "lost_item", "client_rc"]);
    h.browser_expects("voxgate.session.resumed").await;
    // Nothing is sent twice.
    let after: Vec<Value> = sent_to_model_by_now(&mut h).await.into_iter().map(|f| f["event_id"].clone()).collect();
    assert!(after.is_empty(), "{after:?}");
}

/// A client `response.create` the upstream refused (an `error` naming its `event_id`) started
/// nothing and never will: a later resume must not send it again, or the model would speak
/// unprompted.
#[tokio::test(start_paused = true)]
async fn a_client_request_the_upstream_refused_is_not_sent_again_after_a_resume() {
    let (mut h, offer, _) = resumable(|_| {}).await;
    h.model_sends(json!({"type": "response.created", "event_id": "e_rc", "response": {"id": "r1"}})).await;
    h.browser_expects("response.created").await;
    h.browser_sends(json!({"type": "response.create", "event_id": "client_rc"})).await;
    assert_eq!(h.model_expects("response.create").await["event_id"], "client_rc");
    h.model_sends(json!({"type": "error", "event_id": "e_err", "error": {"type": "invalid_request_error",
        "code": "conversation_already_has_active_response", "message": "Conversation already has an active response.",
        "param": null, "event_id": "client_rc"}}))
    .await;
    h.browser_expects("error").await;
    h.model_sends(json!({"type": "response.done", "event_id": "e_rd", "response": {"id": "r1", "output": []}})).await;
    h.browser_expects("response.done").await;
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    h.browser_expects("voxgate.session.resumed").await;
    let sent = sent_to_model_by_now(&mut h).await;
    assert!(!sent.iter().any(|f| f["type"] == "response.create"), "{sent:?}");
}

/// An output the upstream refuses (an `error` naming the output's `event_id`, say an unknown
/// `call_id`) will never be acknowledged: it must not stay pending, or the session would never be
/// quiet enough to recycle again and every later resume would send it once more.
#[tokio::test(start_paused = true)]
async fn an_output_the_upstream_refused_no_longer_holds_up_the_recycle() {
    let (mut h, offer, _) = resumable(|c| c.upstream.max_session_age_s = 10).await;
    let output = h.tool_call("c_refused").await;
    let request = h.model_expects("response.create").await;
    h.model_sends(json!({"type": "error", "event_id": "e_err", "error": {"type": "invalid_request_error",
        "code": "invalid_value", "message": "Tool call ID 'c_refused' not found in conversation.", "param": "item.call_id",
        "event_id": output["event_id"]}}))
    .await;
    h.browser_expects("error").await;
    h.model_sends(json!({"type": "response.created", "event_id": "e_rc", "response": {"id": "r_1"}})).await;
    h.model_sends(json!({"type": "response.done", "event_id": "e_rd", "response": {"id": "r_1", "output": []}})).await;
    assert!(request["event_id"].as_str().is_some());
    let (proxy_side, model) = pair(1 << 20).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    assert_eq!(h.browser_expects("voxgate.session.resuming").await["reason"], "max_age");
    h.model = model;
    h.browser_expects("voxgate.session.resumed").await;
    // The refused output is not sent again on the new upstream.
    let sent = sent_to_model_by_now(&mut h).await;
    assert!(!sent.iter().any(|f| f["item"]["type"] == "function_call_output"), "{sent:?}");
}
