//! The echo upstream: a stand-in for the realtime model that costs as little as possible, so what
//! the bench measures is the path, not the model.
//!
//! - On connect it sends `session.created`; `session.update` is answered with `session.updated`.
//! - Every `input_audio_buffer.append` is answered at once with a `response.output_audio.delta`
//!   carrying the very same base64 audio (found by search, never decoded).
//! - `input_audio_buffer.commit` is the bench's trigger for one tool call: the echo plays the
//!   model's side of a `calculate_medical_score` call (`response.created`, the function-call item,
//!   `response.function_call_arguments.done`, `response.output_item.done`, `response.done`) and
//!   times from handing those to the socket until the `function_call_output` comes back. The time
//!   is reported to the client as a `bench.tool_timing` event, which voxgate forwards untouched.
//! - `response.create` gets an empty `response.created` + `response.done`, like a model that has
//!   nothing to add, so voxgate's turn tracking sees a well-behaved server.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::Context;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::http::HeaderValue;

use crate::frames::{echo_delta, fast_type};

/// The arguments of the benchmarked tool call (see src/tools/calculators: BMI of 70 kg, 175 cm).
pub const TOOL_NAME: &str = "calculate_medical_score";
pub const TOOL_ARGUMENTS: &str = r#"{"calculator_name":"bmi","parameters":{"weight_kg":70,"height_cm":175}}"#;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Serve until the process ends (the bench stops it with SIGTERM, main.rs). Prints `listening on ADDR` once bound.
pub async fn serve(listener: TcpListener) -> anyhow::Result<()> {
    loop {
        let (stream, _) = listener.accept().await.context("accept")?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            if let Err(err) = connection(stream).await {
                tracing_free_debug(&err);
            }
        });
    }
}

fn tracing_free_debug(err: &anyhow::Error) {
    if std::env::var_os("BENCH_DEBUG").is_some() {
        eprintln!("echo: {err:#}");
    }
}

/// Accept a WebSocket, agreeing to the `realtime` subprotocol when offered. (The error type is
/// tungstenite's callback signature, not ours.)
#[allow(clippy::result_large_err)]
pub fn accept_realtime(request: &Request, mut response: Response) -> Result<Response, tokio_tungstenite::tungstenite::handshake::server::ErrorResponse> {
    let offered = request
        .headers()
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|p| p.trim() == "realtime"));
    if offered {
        response.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static("realtime"));
    }
    Ok(response)
}

struct PendingCall {
    call_id: String,
    sent_at: Instant,
}

async fn connection(stream: TcpStream) -> anyhow::Result<()> {
    let mut ws = tokio_tungstenite::accept_hdr_async_with_config(stream, accept_realtime, Some(crate::client::ws_config())).await.context("handshake")?;
    let created = typed("session.created", json!({
        "event_id": event_id(),
        "session": {"type": "realtime", "object": "realtime.session", "id": format!("sess_{}", NEXT_ID.fetch_add(1, Ordering::Relaxed)), "model": "bench-echo"}
    }));
    ws.send(Message::text(created)).await.context("send session.created")?;
    let mut pending: Option<PendingCall> = None;
    while let Some(frame) = ws.next().await {
        let text = match frame.context("read")? {
            Message::Text(text) => text,
            Message::Close(_) => break,
            _ => continue,
        };
        let bytes = text.as_bytes();
        if fast_type(bytes) == Some("input_audio_buffer.append") {
            if let Some(delta) = echo_delta(bytes) {
                ws.send(Message::text(delta)).await.context("send delta")?;
            }
            continue;
        }
        let Ok(event) = serde_json::from_slice::<Value>(bytes) else { continue };
        match event.get("type").and_then(Value::as_str).unwrap_or_default() {
            "session.update" => {
                let session = event.get("session").cloned().unwrap_or_else(|| json!({}));
                let updated = typed("session.updated", json!({"event_id": event_id(), "session": session}));
                ws.send(Message::text(updated)).await.context("send session.updated")?;
            }
            "input_audio_buffer.commit" => {
                for frame in tool_call_script(&mut pending) {
                    ws.feed(Message::text(frame)).await.context("send tool script")?;
                }
                if let Some(call) = pending.as_mut() {
                    call.sent_at = Instant::now();
                }
                ws.flush().await.context("flush tool script")?;
            }
            "conversation.item.create" => {
                let item = event.get("item");
                let is_output = item.and_then(|i| i.get("type")).and_then(Value::as_str) == Some("function_call_output");
                let call_id = item.and_then(|i| i.get("call_id")).and_then(Value::as_str);
                if let (true, Some(call)) = (is_output, pending.as_ref())
                    && call_id == Some(call.call_id.as_str())
                {
                    let us = call.sent_at.elapsed().as_micros() as u64;
                    let output = item.and_then(|i| i.get("output")).and_then(Value::as_str).unwrap_or_default();
                    // A computed BMI result carries a score; an error output does not.
                    let ok = output.contains("\"score\"");
                    let timing = typed("bench.tool_timing", json!({"event_id": event_id(), "call_id": call.call_id, "us": us, "ok": ok}));
                    pending = None;
                    ws.send(Message::text(timing)).await.context("send timing")?;
                }
            }
            "response.create" => {
                let id = format!("resp_{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
                let created = typed("response.created", json!({"event_id": event_id(), "response": {"id": id, "object": "realtime.response", "status": "in_progress", "output": []}}));
                let done = typed("response.done", json!({"event_id": event_id(), "response": {"id": id, "object": "realtime.response", "status": "completed", "output": []}}));
                ws.feed(Message::text(created)).await.context("send response.created")?;
                ws.send(Message::text(done)).await.context("send response.done")?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// The model's side of one function call, in the order a realtime server sends it.
fn tool_call_script(pending: &mut Option<PendingCall>) -> Vec<String> {
    let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let (response_id, item_id, call_id) = (format!("resp_t{n}"), format!("item_t{n}"), format!("call_t{n}"));
    let item = |status: &str, arguments: &str| {
        json!({"id": item_id, "object": "realtime.item", "type": "function_call", "status": status,
               "name": TOOL_NAME, "call_id": call_id, "arguments": arguments})
    };
    let frames = vec![
        typed("response.created", json!({"event_id": event_id(), "response": {"id": response_id, "object": "realtime.response", "status": "in_progress", "output": []}})),
        typed("response.output_item.added", json!({"event_id": event_id(), "response_id": response_id, "output_index": 0, "item": item("in_progress", "")})),
        typed("response.function_call_arguments.done", json!({"event_id": event_id(), "response_id": response_id, "item_id": item_id,
               "output_index": 0, "call_id": call_id, "name": TOOL_NAME, "arguments": TOOL_ARGUMENTS})),
        typed("response.output_item.done", json!({"event_id": event_id(), "response_id": response_id, "output_index": 0, "item": item("completed", TOOL_ARGUMENTS)})),
        typed("response.done", json!({"event_id": event_id(), "response": {"id": response_id, "object": "realtime.response", "status": "completed", "output": [item("completed", TOOL_ARGUMENTS)]}})),
    ];
    *pending = Some(PendingCall { call_id, sent_at: Instant::now() });
    frames
}

/// A frame with `type` first, the way realtime servers lay their events out (voxgate's classifier
/// reads only that prefix for them).
fn typed(kind: &str, body: Value) -> String {
    let rest = body.to_string();
    match rest.strip_prefix('{') {
        Some("}") | None => format!("{{\"type\":\"{kind}\"}}"),
        Some(fields) => format!("{{\"type\":\"{kind}\",{fields}"),
    }
}

fn event_id() -> String {
    format!("evt_echo_{}", NEXT_ID.fetch_add(1, Ordering::Relaxed))
}
