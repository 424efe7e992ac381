//! A tool that panics or hangs fails only its own call: the session (driven here through
//! `voxgate::session::run` with in-memory sockets and purpose-built tools) goes on, the model and
//! the client learn what happened, and the audit log holds each call exactly once.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::DuplexStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_util::sync::CancellationToken;
use voxgate::config::{AuditConfig, Config};
use voxgate::policy::Principal;
use voxgate::policy::rate_limit::LocalLimiter;
use voxgate::session::{SessionDeps, SessionInfo, SessionSettings};
use voxgate::telemetry::metrics::Metrics;
use voxgate::tools::registry::ToolRegistry;
use voxgate::tools::{CallContext, Category, Risk, Tool, ToolError, ToolOutput, ToolSpec};
use voxgate::upstream::UpstreamConn;

/// Misbehaves on purpose: `mode` "panic" panics, "hang" never returns, anything else echoes.
struct Unruly {
    spec: ToolSpec,
}

impl Unruly {
    fn new() -> Self {
        let parameters = json!({"type": "object", "additionalProperties": false, "required": ["mode"],
            "properties": {"mode": {"type": "string", "enum": ["panic", "hang", "ok"]}}});
        Self {
            spec: ToolSpec {
                name: "calculate_medical_score",
                description: "test tool".into(),
                parameters,
                category: Category::Calculation,
                phi: false,
                risk: Risk::Low,
                requires_confirmation: false,
                third_party: false,
                rate_limit_per_minute: 1000,
                timeout: Duration::from_millis(300),
            },
        }
    }
}

#[async_trait::async_trait]
impl Tool for Unruly {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        match args["mode"].as_str() {
            Some("panic") => panic!("a tool bug"),
            Some("hang") => std::future::pending().await,
            _ => Ok(ToolOutput::new(json!({"ok": true}))),
        }
    }
}

async fn socket_pair() -> (WebSocketStream<DuplexStream>, WebSocketStream<DuplexStream>) {
    let (a, b) = tokio::io::duplex(1 << 20);
    let a = WebSocketStream::from_raw_socket(a, Role::Client, None).await;
    let b = WebSocketStream::from_raw_socket(b, Role::Server, None).await;
    (a, b)
}

async fn next_json(ws: &mut WebSocketStream<DuplexStream>, kind: &str) -> Value {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(Ok(Message::Text(text))) = ws.next().await {
                let value: Value = serde_json::from_str(&text).unwrap();
                if value["type"] == kind {
                    return value;
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {kind}"))
}

#[tokio::test]
async fn panicking_and_hanging_tools_fail_only_their_call() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::default();
    let registry = Arc::new(ToolRegistry::from_tools(vec![Arc::new(Unruly::new())], &config.tools).unwrap());
    let audit_config = AuditConfig { path: dir.path().join("audit.jsonl"), rotate_bytes: 0, ..AuditConfig::default() };
    let (audit, writer) = voxgate::audit::open(&audit_config, Default::default()).await.unwrap();
    let deps = SessionDeps {
        registry,
        audit,
        metrics: Metrics::new(),
        limiter: Arc::new(LocalLimiter::new()),
        settings: Arc::new(SessionSettings::from_config(&config)),
        drain: CancellationToken::new(),
    };
    let (mut browser, proxy_client_side) = socket_pair().await;
    let (proxy_upstream_side, mut model) = socket_pair().await;
    let upstream = UpstreamConn::new(proxy_upstream_side, Duration::ZERO);
    let info = SessionInfo {
        id: "vgs_test".into(),
        principal: Principal::new("dr.test", vec!["clinician".into()]),
        user: "u_test".into(),
        wants_events: true,
        model: "test".into(),
        origin: Default::default(),
    };
    let session = tokio::spawn(voxgate::session::run(info, tracing::Span::none(), proxy_client_side, upstream, deps, CancellationToken::new(), None));

    model.send(Message::text(json!({"type": "session.created", "event_id": "e0", "session": {"id": "sess_1", "tools": []}}).to_string())).await.unwrap();
    next_json(&mut model, "session.update").await;
    for (call_id, mode) in [("c_panic", "panic"), ("c_hang", "hang"), ("c_ok", "ok")] {
        let done = json!({"type": "response.function_call_arguments.done", "event_id": format!("e_{call_id}"), "response_id": "r1",
            "item_id": format!("i_{call_id}"), "output_index": 0, "call_id": call_id, "name": "calculate_medical_score",
            "arguments": json!({"mode": mode}).to_string()});
        model.send(Message::text(done.to_string())).await.unwrap();
    }
    let mut outputs = std::collections::HashMap::new();
    while outputs.len() < 3 {
        let item = next_json(&mut model, "conversation.item.create").await;
        let output: Value = serde_json::from_str(item["item"]["output"].as_str().unwrap()).unwrap();
        outputs.insert(item["item"]["call_id"].as_str().unwrap().to_string(), output);
    }
    assert_eq!(outputs["c_panic"]["error"]["code"], "internal_error");
    assert_eq!(outputs["c_hang"]["error"]["code"], "timeout");
    assert_eq!(outputs["c_ok"]["ok"], true);
    let mut failed = Vec::new();
    while failed.len() < 2 {
        let event = next_json(&mut browser, "voxgate.tool_call.failed").await;
        failed.push(event["error"]["code"].as_str().unwrap().to_string());
    }
    failed.sort();
    assert_eq!(failed, ["internal_error", "timeout"]);

    // The session is still alive: audio still passes, byte for byte.
    let audio = r#"{"type":"input_audio_buffer.append","audio":"AAAA"}"#;
    browser.send(Message::text(audio)).await.unwrap();
    let forwarded = next_json(&mut model, "input_audio_buffer.append").await;
    assert_eq!(forwarded.to_string(), serde_json::from_str::<Value>(audio).unwrap().to_string());

    browser.close(None).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), session).await.unwrap().unwrap();
    writer.join().await.unwrap();
    let records: Vec<Value> = std::fs::read_to_string(dir.path().join("audit.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for call_id in ["c_panic", "c_hang", "c_ok"] {
        let count = |event: &str| records.iter().filter(|r| r["call_id"] == call_id && r["event"] == event).count();
        assert_eq!((count("call_started"), count("call_finished")), (1, 1), "{call_id}");
    }
}
