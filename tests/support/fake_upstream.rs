//! The fake realtime upstream: a WebSocket server on 127.0.0.1:0 that hands each connection it
//! accepts to the test ([`FakeConn`]), or answers by itself ([`FakeMode`]); the model's events for
//! a function call ([`event_args`], [`model_calls`]); and the `proto-fixtures/` transcripts it
//! replays ([`transcript`]).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::{WAIT, read_jsonl};

/// One connection the fake upstream accepted.
pub struct FakeConn {
    pub uri: String,
    pub headers: Vec<(String, String)>,
    pub ws: WebSocketStream<TcpStream>,
}

impl FakeConn {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub async fn send_json(&mut self, value: &Value) {
        self.ws.send(Message::text(value.to_string())).await.unwrap();
    }

    pub async fn send_text(&mut self, text: &str) {
        self.ws.send(Message::text(text.to_string())).await.unwrap();
    }

    pub async fn next_text(&mut self) -> String {
        super::next_text_from(&mut self.ws, "fake").await
    }

    pub async fn next_json(&mut self) -> Value {
        serde_json::from_str(&self.next_text().await).unwrap()
    }

    pub async fn until(&mut self, kind: &str) -> Value {
        loop {
            let event = self.next_json().await;
            if event["type"] == kind {
                return event;
            }
        }
    }

    /// Send `session.created` and take voxgate's tool injection.
    pub async fn open_session(&mut self) -> Value {
        self.send_json(&json!({"type": "session.created", "event_id": "event_1",
            "session": {"type": "realtime", "object": "realtime.session", "id": "sess_1", "model": "gpt-realtime", "tools": []}}))
            .await;
        self.until("session.update").await
    }

    pub async fn closed(&mut self) -> (u16, String) {
        loop {
            match tokio::time::timeout(WAIT, self.ws.next()).await.expect("fake: timed out") {
                Some(Ok(Message::Close(Some(frame)))) => return (frame.code.into(), frame.reason.to_string()),
                Some(Ok(Message::Close(None))) | None => return (1005, String::new()),
                Some(Ok(_)) => {}
                Some(Err(_)) => return (1006, String::new()),
            }
        }
    }
}

/// How the fake upstream answers the upgrade.
#[derive(Clone, Copy, Debug)]
pub enum FakeMode {
    Accept,
    /// Answer the upgrade with this HTTP status and a body voxgate must never show.
    Refuse(u16),
    /// Accept TCP and never answer.
    Hang,
}

/// A fake realtime server on 127.0.0.1:0.
pub struct FakeUpstream {
    pub addr: SocketAddr,
    conns: mpsc::Receiver<FakeConn>,
    /// When non-zero, every new connection is refused with this HTTP status.
    refuse: std::sync::Arc<std::sync::atomic::AtomicU16>,
}

impl FakeUpstream {
    pub async fn start() -> FakeUpstream {
        Self::start_with(FakeMode::Accept).await
    }

    pub async fn start_with(mode: FakeMode) -> FakeUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, conns) = mpsc::channel(16);
        let refuse = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(0));
        let refusing = refuse.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let tx = tx.clone();
                let mode = match refusing.load(std::sync::atomic::Ordering::SeqCst) {
                    0 => mode,
                    status => FakeMode::Refuse(status),
                };
                tokio::spawn(async move { serve_fake(stream, mode, tx).await });
            }
        });
        FakeUpstream { addr, conns, refuse }
    }

    /// From now on, refuse every new connection with `status`.
    pub fn refuse_from_now(&self, status: u16) {
        self.refuse.store(status, std::sync::atomic::Ordering::SeqCst);
    }

    /// The next session voxgate opens.
    pub async fn accept(&mut self) -> FakeConn {
        self.accept_within(WAIT).await
    }

    /// `accept` for a connection whose client is a process still starting (a Python interpreter
    /// importing the OpenAI SDK takes seconds on a loaded CI machine).
    pub async fn accept_within(&mut self, wait: Duration) -> FakeConn {
        tokio::time::timeout(wait, self.conns.recv()).await.expect("no upstream connection").unwrap()
    }
}

async fn serve_fake(stream: TcpStream, mode: FakeMode, tx: mpsc::Sender<FakeConn>) {
    match mode {
        FakeMode::Hang => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(stream);
        }
        FakeMode::Refuse(status) => {
            use tokio::io::AsyncWriteExt;
            let mut stream = stream;
            let mut buf = [0u8; 4096];
            let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut buf).await;
            let body = "{\"error\":\"SECRET-UPSTREAM-BODY internal.host.example\"}";
            let response = format!(
                "HTTP/1.1 {status} Refused\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        }
        FakeMode::Accept => {
            let mut uri = String::new();
            let mut headers = Vec::new();
            // The error type is tungstenite's (an HTTP response); this callback never fails.
            #[allow(clippy::result_large_err)]
            let callback = |req: &Request, resp: Response| {
                uri = req.uri().to_string();
                headers = req
                    .headers()
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string()))
                    .collect();
                Ok(resp)
            };
            let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
                .max_message_size(Some(256 << 20))
                .max_frame_size(Some(256 << 20));
            if let Ok(ws) = tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(config)).await {
                let _ = tx.send(FakeConn { uri, headers, ws }).await;
            }
        }
    }
}

/// One frame of a `proto-fixtures/` transcript.
#[derive(Debug, Clone)]
pub struct TranscriptFrame {
    pub dir: String,
    pub event: Value,
}

/// Load a transcript from `proto-fixtures/`.
pub fn transcript(name: &str) -> Vec<TranscriptFrame> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("proto-fixtures").join(name);
    read_jsonl(&path)
        .into_iter()
        .map(|record| TranscriptFrame { dir: record["dir"].as_str().unwrap().to_string(), event: record["event"].clone() })
        .collect()
}

/// The events a model sends for one function call (GA shapes).
pub fn event_args(call_id: &str, name: &str, args: &str) -> Vec<Value> {
    let item_id = format!("item_{call_id}");
    let half = args.len() / 2;
    let item = |status: &str, arguments: &str| json!({"id": item_id, "type": "function_call", "status": status, "name": name, "call_id": call_id, "arguments": arguments});
    vec![
        json!({"type": "response.output_item.added", "event_id": "event_a", "response_id": "resp_1", "output_index": 0, "item": item("in_progress", "")}),
        json!({"type": "conversation.item.added", "event_id": "event_b", "previous_item_id": null, "item": item("in_progress", "")}),
        json!({"type": "response.function_call_arguments.delta", "event_id": "event_c", "response_id": "resp_1", "item_id": item_id, "output_index": 0, "call_id": call_id, "delta": &args[..half]}),
        json!({"type": "response.function_call_arguments.delta", "event_id": "event_d", "response_id": "resp_1", "item_id": item_id, "output_index": 0, "call_id": call_id, "delta": &args[half..]}),
        json!({"type": "response.function_call_arguments.done", "event_id": "event_e", "response_id": "resp_1", "item_id": item_id, "output_index": 0, "call_id": call_id, "name": name, "arguments": args}),
        json!({"type": "conversation.item.done", "event_id": "event_f", "item": item("completed", args)}),
        json!({"type": "response.output_item.done", "event_id": "event_g", "response_id": "resp_1", "output_index": 0, "item": item("completed", args)}),
    ]
}

/// The model makes these calls in one response.
pub async fn model_calls(up: &mut FakeConn, calls: &[(&str, &str, &str)]) {
    up.send_json(&json!({"type": "response.created", "event_id": "event_rc", "response": {"id": "resp_1", "object": "realtime.response", "status": "in_progress", "output": []}})).await;
    let mut output = Vec::new();
    for (call_id, name, args) in calls {
        for event in event_args(call_id, name, args) {
            up.send_json(&event).await;
        }
        output.push(json!({"id": format!("item_{call_id}"), "type": "function_call", "status": "completed", "name": name, "call_id": call_id, "arguments": args}));
    }
    up.send_json(&json!({"type": "response.done", "event_id": "event_rd", "response": {"id": "resp_1", "object": "realtime.response", "status": "completed", "output": output}})).await;
}
