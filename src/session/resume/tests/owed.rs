//! What a restore owes the new upstream beyond the conversation: an answer to tool results whose
//! response never finished, the client's request (and `session.update`) still pending if the new
//! upstream goes too, and no call whose arguments never finished.

use serde_json::json;
use tokio::io::DuplexStream;
use tokio_tungstenite::WebSocketStream;

use super::{browser_sync, drop_model, function_call, message, next_json, resumable, until_response_create};
use crate::session::harness::{Harness, TOOL, upstream_conn};

/// Drop the model end and wait for the client to be told; returns the proxy end of the next one.
async fn lose(h: &mut Harness) -> WebSocketStream<DuplexStream> {
    let proxy_side = drop_model(h).await;
    h.browser_expects("voxgate.session.resuming").await;
    proxy_side
}

/// [`lose`], and hand the session the new model end.
async fn lose_and_reconnect(h: &mut Harness, offer: &super::Offer) {
    let proxy_side = lose(h).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
}

/// The model calls the tool (`call_id`), voxgate sends the output and asks for a response.
pub(super) async fn output_asked_for(h: &mut Harness, call_id: &str) {
    h.model_sends(function_call(call_id)).await;
    h.tool_call(call_id).await;
    h.model_expects("response.create").await;
}

/// [`output_asked_for`], and the response to voxgate's request has started (`r2`).
async fn answer_started(h: &mut Harness, call_id: &str) {
    output_asked_for(h, call_id).await;
    h.acknowledge(call_id).await;
    h.model_sends(json!({"type": "response.created", "event_id": "e", "response": {"id": "r2"}})).await;
    h.browser_expects("response.created").await;
}

/// voxgate's request to speak a tool result had started (`response.created`) when the upstream
/// went: that response is gone with it, so the new upstream is asked again (CONTRACT §4).
#[tokio::test(start_paused = true)]
async fn a_tool_result_whose_answer_had_started_is_asked_for_again_after_the_restore() {
    let (mut h, offer, _) = resumable(|_| {}).await;
    answer_started(&mut h, "c1").await;
    lose_and_reconnect(&mut h, &offer).await;
    let kinds = until_response_create(&mut h.model).await;
    assert_eq!(kinds, ["session.update", "function_call:c1", "function_call_output:c1", "response.create"]);
}

/// The client's request a restore sent again is pending on the new upstream: lost with it before
/// it started, it goes to the next one too.
#[tokio::test(start_paused = true)]
async fn a_client_request_a_restore_sent_survives_a_second_loss_before_it_starts() {
    let (mut h, offer, _) = resumable(|_| {}).await;
    h.browser_sends(json!({"type": "response.create", "event_id": "client_rc"})).await;
    h.model_expects("response.create").await;
    for upstream in 2..=3 {
        lose_and_reconnect(&mut h, &offer).await;
        assert_eq!(h.model_expects("response.create").await["event_id"], "client_rc", "upstream {upstream}");
        h.browser_expects("voxgate.session.resumed").await;
    }
}

/// A `session.update` held in the gap goes to the new upstream after the restore; if that one goes
/// before answering it, the next upstream's answer is the client's.
#[tokio::test(start_paused = true)]
async fn a_session_update_held_in_the_gap_is_answered_though_the_next_upstream_goes_too() {
    let (mut h, offer, _) = resumable(|_| {}).await;
    // voxgate's own update (the tool injection) is answered: none is owed when the upstream goes.
    let injected = json!({"type": "session.updated", "event_id": "e_inj", "session": {"id": "sess_1"}});
    h.model_sends(injected).await;
    h.browser_expects("session.updated").await;
    let proxy_side = lose(&mut h).await;
    h.browser_sends(json!({"type": "session.update", "event_id": "held_su", "session": {"type": "realtime", "instructions": "Be brief."}})).await;
    browser_sync(&mut h).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    assert_eq!(h.model_expects("session.update").await["event_id"], "voxgate_restore_1");
    let held = h.model_expects("session.update").await;
    assert_eq!(held["session"]["instructions"], "Be brief.", "the held update, under voxgate's stand-in: {held}");
    h.browser_expects("voxgate.session.resumed").await;
    lose_and_reconnect(&mut h, &offer).await;
    h.model_expects("session.update").await;
    h.browser_expects("voxgate.session.resumed").await;
    h.model_sends(json!({"type": "session.updated", "event_id": "n1", "session": {"id": "sess_3", "instructions": "Be brief."}})).await;
    h.model_sends(json!({"type": "response.created", "event_id": "n2", "response": {"id": "r3"}})).await;
    let updated = next_json(&mut h.browser).await;
    assert_eq!((updated["type"].as_str(), updated["event_id"].as_str()), (Some("session.updated"), Some("n1")), "{updated}");
}

/// A call whose arguments were still streaming when the upstream died never ran and gets no
/// output: restored, it would be a call the new model waits on forever.
#[tokio::test(start_paused = true)]
async fn a_call_whose_arguments_were_still_streaming_is_not_restored() {
    let (mut h, offer, _) = resumable(|_| {}).await;
    h.model_sends(message("u1", "user", "input_text", "Look it up.")).await;
    h.model_sends(json!({"type": "conversation.item.added", "event_id": "e_fc", "previous_item_id": "u1",
        "item": {"id": "fc_cut", "type": "function_call", "status": "in_progress", "name": TOOL, "call_id": "cut", "arguments": ""}}))
    .await;
    // The call is voxgate's (the client never sees it): a later event shows it was read.
    h.model_sends(json!({"type": "response.output_text.delta", "event_id": "probe", "delta": "x"})).await;
    h.browser_expects("response.output_text.delta").await;
    lose_and_reconnect(&mut h, &offer).await;
    assert_eq!(h.model_expects("session.update").await["type"], "session.update");
    assert_eq!(next_json(&mut h.model).await["item"]["id"], "u1");
    assert_eq!(h.browser_expects("voxgate.session.resumed").await["items_restored"], 1);
    let after = super::outputs::sent_to_model_by_now(&mut h).await;
    assert!(after.is_empty(), "{after:?}");
}

/// A push-to-talk client asks for a response during a gap longer than the gate's wait for a
/// client request, while the answer to a tool result was cut by the loss. The restore sends the
/// result and then the client's request, whose response covers the result: voxgate must not ask
/// for another (the model would answer the result twice).
#[tokio::test(start_paused = true)]
async fn a_client_request_released_after_a_long_gap_holds_voxgates_own() {
    let (mut h, offer, _) = resumable(|_| {}).await;
    answer_started(&mut h, "c1").await;
    let proxy_side = lose(&mut h).await;
    h.browser_sends(json!({"type": "response.create", "event_id": "client_rc"})).await;
    browser_sync(&mut h).await;
    tokio::time::advance(crate::session::turns::REQUEST_ANSWER_TIMEOUT + std::time::Duration::from_secs(1)).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    let kinds = until_response_create(&mut h.model).await;
    assert_eq!(kinds, ["session.update", "function_call:c1", "function_call_output:c1", "response.create"]);
    h.browser_expects("voxgate.session.resumed").await;
    let after = super::outputs::sent_to_model_by_now(&mut h).await;
    assert!(after.is_empty(), "only the client's request is sent: {after:?}");
}
