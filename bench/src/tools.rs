//! The inline-tool measurement, client side. The client triggers one call at a time
//! (`input_audio_buffer.commit`, see echo.rs) and waits for the echo's `bench.tool_timing`.
//!
//! Through voxgate the call is server-owned: voxgate hides it from the client, runs
//! `calculate_medical_score` and sends the `function_call_output` upstream itself. On the direct
//! and bare-relay paths nobody owns it, so the client answers at once with a canned output — the
//! fastest a browser-side tool could possibly be — which is the baseline voxgate is compared to.

use std::time::Duration;

use anyhow::{Context, bail};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::client::{Ws, type_of};

#[derive(Debug, Default)]
pub struct ToolTimes {
    /// model's `arguments.done` handed to the socket → `function_call_output` received, µs.
    pub us: Vec<u32>,
    /// Calls whose output was an error instead of a computed score.
    pub not_ok: usize,
}

/// Run `calls` tool calls one after another, `pause` apart.
pub async fn run(mut ws: Ws, calls: usize, answer_locally: bool, pause: Duration) -> anyhow::Result<ToolTimes> {
    let mut times = ToolTimes::default();
    for i in 0..calls {
        let trigger = format!(r#"{{"type":"input_audio_buffer.commit","event_id":"bench_commit_{i}"}}"#);
        ws.send(Message::text(trigger)).await.context("send trigger")?;
        let timing = tokio::time::timeout(Duration::from_secs(10), one_call(&mut ws, answer_locally))
            .await
            .with_context(|| format!("tool call {i} got no answer within 10 s"))??;
        times.us.push(timing.0);
        if !timing.1 {
            times.not_ok += 1;
        }
        tokio::time::sleep(pause).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(None)).await;
    Ok(times)
}

async fn one_call(ws: &mut Ws, answer_locally: bool) -> anyhow::Result<(u32, bool)> {
    while let Some(frame) = ws.next().await {
        let Message::Text(text) = frame.context("socket failed")? else { continue };
        match type_of(text.as_bytes()).as_deref() {
            Some("bench.tool_timing") => {
                let event: Value = serde_json::from_slice(text.as_bytes()).context("bad timing event")?;
                let us = event.get("us").and_then(Value::as_u64).unwrap_or(u64::MAX);
                let ok = event.get("ok").and_then(Value::as_bool).unwrap_or(false);
                return Ok((u32::try_from(us).unwrap_or(u32::MAX), ok));
            }
            Some("response.function_call_arguments.done") if answer_locally => {
                let event: Value = serde_json::from_slice(text.as_bytes()).context("bad arguments event")?;
                let call_id = event.get("call_id").and_then(Value::as_str).unwrap_or_default();
                let output = json!({"type": "conversation.item.create", "item": {
                    "type": "function_call_output", "call_id": call_id,
                    "output": r#"{"calculator_name":"bmi","score":22.9,"risk_category":"normal"}"#}});
                ws.send(Message::text(output.to_string())).await.context("send output")?;
            }
            _ => {}
        }
    }
    bail!("socket ended before the tool timing arrived")
}
