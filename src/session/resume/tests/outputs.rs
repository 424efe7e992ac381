//! Outputs and client frames across a resume: what the stalled upstream never took reaches the
//! new upstream once, in order; an output or a client request the upstream refused is pending no
//! more.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{FutureExt, SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::DuplexStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::{self, Message};

use super::{browser_sync, connector, drop_model, function_call, resumable, until_response_create};
use crate::session::harness::{Harness, TOOL, pair, start_with, upstream_conn};
use crate::upstream::UpstreamConn;

/// Audio that fills the upstream's socket and then its queue, then a typed question and the
/// client's request for an answer: what a stalled upstream leaves untaken.
async fn fill_then_ask(h: &mut Harness) {
    let big = |id: &str| json!({"type": "input_audio_buffer.append", "event_id": id, "audio": "A".repeat(crate::session::outbox::OUTBOX_BYTES)});
    h.browser_sends(big("fill_socket")).await;
    h.browser_sends(big("fill_queue")).await;
    h.browser_sends(json!({"type": "conversation.item.create", "event_id": "lost_item",
        "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "And for children?"}]}}))
    .await;
    h.browser_sends(json!({"type": "response.create", "event_id": "client_rc"})).await;
}

/// The new upstream gets the restore, then what [`fill_then_ask`] left untaken in order (the audio
/// that filled the socket went into it), and nothing twice.
async fn carried_in_order_once(h: &mut Harness) {
    let seen = carried_until_the_request(h).await;
    assert_eq!(seen, ["session.update", "fill_queue", "lost_item", "client_rc"]);
    h.browser_expects("voxgate.session.resumed").await;
    let after: Vec<Value> = sent_to_model_by_now(h).await.into_iter().map(|f| f["event_id"].clone()).collect();
    assert!(after.is_empty(), "sent twice: {after:?}");
}

/// What the new upstream gets up to the client's request (`client_rc`): `session.update` for the
/// restore's, else each frame's `event_id`.
async fn carried_until_the_request(h: &mut Harness) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let frame = super::next_json(&mut h.model).await;
        let id = frame["event_id"].as_str().unwrap_or_default().to_string();
        seen.push(if frame["type"] == "session.update" { "session.update".to_string() } else { id.clone() });
        if id == "client_rc" {
            return seen;
        }
    }
}

/// What the model has been sent and not yet read: a delta from the model is passed to the
/// browser first, which shows that voxgate has handled everything before it.
pub(super) async fn sent_to_model_by_now(h: &mut Harness) -> Vec<Value> {
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
    // A window long enough that the audio queued before the stall is not stale yet.
    let mut h = start_with(|c| (c.upstream.resume, c.upstream.resume_audio_ms) = (true, 60_000), 16 * 1024, Some(connect), Vec::new()).await;
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
    // A window long enough that the audio queued before the stall is not stale yet.
    let mut h = start_with(|c| (c.upstream.resume, c.upstream.resume_audio_ms) = (true, 60_000), 16 * 1024, Some(connect), Vec::new()).await;
    fill_then_ask(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    let proxy_side = drop_model(&mut h).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    carried_in_order_once(&mut h).await;
}

/// The upstream goes away (a load balancer resets it) while a client frame waits for room in its
/// full queue: that frame was never taken and is carried like the queue before it and the frames
/// after it, in order and once; the model is not asked to answer a question it never got.
#[tokio::test(start_paused = true)]
async fn a_client_frame_waiting_for_room_when_the_upstream_fails_follows_the_restore_in_order() {
    let (connect, offer, _) = connector();
    let mut h = start_with(|c| c.upstream.resume = true, 16 * 1024, Some(connect), Vec::new()).await;
    fill_then_ask(&mut h).await;
    // The item waits for room (well within the send timeout) when the model's socket is reset.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    carried_in_order_once(&mut h).await;
}

/// Audio the stalled upstream never took is as old as the stall at least (nothing was read while
/// the send waited): past `upstream.resume_audio_ms` it is stale, and dropped and counted like
/// audio held that long in the gap, not sent to the new upstream as if the user had just spoken.
#[tokio::test(start_paused = true)]
async fn audio_the_stalled_upstream_never_took_is_dropped_and_counted_once_past_the_window() {
    let (connect, offer, _) = connector();
    let mut h = start_with(|c| c.upstream.resume = true, 16 * 1024, Some(connect), Vec::new()).await;
    let big = |id: &str| json!({"type": "input_audio_buffer.append", "event_id": id, "audio": "A".repeat(crate::session::outbox::OUTBOX_BYTES)});
    h.browser_sends(big("fill_socket")).await;
    h.browser_sends(big("fill_queue")).await;
    h.browser_sends(json!({"type": "conversation.item.create", "event_id": "lost_item",
        "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "And for children?"}]}}))
    .await;
    h.browser_expects("voxgate.session.resuming").await;
    let proxy_side = drop_model(&mut h).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    assert_eq!(h.model_expects("session.update").await["type"], "session.update");
    assert_eq!(super::next_json(&mut h.model).await["event_id"], "lost_item", "the stale audio went to the new upstream");
    // 1 MiB of base64 PCM16 at 24 kHz: about 16 s.
    let dropped = h.browser_expects("voxgate.session.resumed").await["audio_dropped_ms"].as_u64().unwrap();
    assert!((16_000..17_000).contains(&dropped), "{dropped}");
}

/// An upstream whose writes fail once `broken` is set while its reading side goes on: a reset the
/// session notices on its next write.
struct BreaksOnWrite {
    socket: WebSocketStream<DuplexStream>,
    broken: Arc<AtomicBool>,
}

impl BreaksOnWrite {
    fn check(&self) -> Result<(), tungstenite::Error> {
        if self.broken.load(Ordering::SeqCst) { Err(tungstenite::Error::Io(std::io::ErrorKind::BrokenPipe.into())) } else { Ok(()) }
    }
}

impl futures::Stream for BreaksOnWrite {
    type Item = Result<Message, tungstenite::Error>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.socket.poll_next_unpin(cx)
    }
}

impl futures::Sink<Message> for BreaksOnWrite {
    type Error = tungstenite::Error;
    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.check()?;
        self.socket.poll_ready_unpin(cx)
    }
    fn start_send(mut self: Pin<&mut Self>, item: Message) -> Result<(), Self::Error> {
        self.check()?;
        self.socket.start_send_unpin(item)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.check()?;
        self.socket.poll_flush_unpin(cx)
    }
    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.socket.poll_close_unpin(cx)
    }
}

/// The frame that finds the upstream failed (its socket errs when asked to take it) is carried,
/// and the rest of its burst waits for the loop's next turn, which begins the resume: nothing more
/// is kept behind the failed upstream's queue, past its byte budget.
#[tokio::test(start_paused = true)]
async fn a_burst_stops_at_the_frame_that_finds_the_upstream_failed_and_that_frame_is_carried() {
    let (mut h, offer, _) = resumable(|_| {}).await;
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    let broken = Arc::new(AtomicBool::new(false));
    offer.send(Ok(UpstreamConn::new(BreaksOnWrite { socket: proxy_side, broken: broken.clone() }, Duration::ZERO))).unwrap();
    h.browser_expects("voxgate.session.resumed").await;
    broken.store(true, Ordering::SeqCst);
    // One burst: an append that finds the upstream failed, then a frame voxgate answers itself.
    h.browser.feed(Message::text(json!({"type": "input_audio_buffer.append", "event_id": "first", "audio": "AAAA"}).to_string())).await.unwrap();
    h.browser.feed(Message::text(json!({"type": "voxgate.sync"}).to_string())).await.unwrap();
    h.browser.flush().await.unwrap();
    let next = super::next_json(&mut h.browser).await;
    assert_eq!(next["type"], "voxgate.session.resuming", "the burst went on past the failed upstream: {next}");
    assert_eq!(super::next_json(&mut h.browser).await["type"], "error");
    let proxy_side = drop_model(&mut h).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    assert_eq!(h.model_expects("input_audio_buffer.append").await["event_id"], "first");
    h.browser_expects("voxgate.session.resumed").await;
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
