//! A call's progress reaches the client before the call's end does. The tool reports its progress
//! before it returns, but the session learns of the two on different arms of its `select!`
//! (the progress queue and the finished task), and the end goes out only after its audit record:
//! the queued progress must not be left behind the `voxgate.tool_call.completed`.

use super::*;
use crate::tools::progress;

const STEPPED: &str = "count_steps";
const ENDLESS: &str = "endless";

/// Reports three steps of progress, then answers.
struct Stepped {
    spec: ToolSpec,
}

#[async_trait::async_trait]
impl Tool for Stepped {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        // Not finished on its first poll: it runs as a task of its own, as a slow tool does.
        tokio::task::yield_now().await;
        let sink = progress::current().expect("the harness's client wants progress");
        for step in 1..=3 {
            sink.report(f64::from(step), Some(3.0), None);
        }
        Ok(ToolOutput::new(json!({"steps": 3})))
    }
}

fn stepped_tool() -> Arc<dyn Tool> {
    let mut spec = quick_tool().spec().clone();
    spec.name = STEPPED;
    Arc::new(Stepped { spec })
}

#[tokio::test(start_paused = true)]
async fn progress_a_tool_reported_goes_out_before_its_call_completes() {
    let mut h = start_with(|_| {}, 1 << 20, None, vec![stepped_tool()]).await;
    for n in 0..20 {
        let call_id = format!("c{n}");
        h.model_calls(&call_id, STEPPED).await;
        let mut steps = Vec::new();
        loop {
            let event = match h.browser.next().await {
                Some(Ok(Message::Text(text))) => serde_json::from_str::<Value>(&text).unwrap(),
                Some(Ok(_)) => continue,
                other => panic!("browser socket ended: {other:?}"),
            };
            match event["type"].as_str() {
                Some("voxgate.tool_call.progress") => steps.push(event["progress"].as_f64().unwrap()),
                Some("voxgate.tool_call.completed") => break,
                _ => {}
            }
        }
        assert_eq!(steps, vec![1.0, 2.0, 3.0], "call {call_id}: the progress before its end");
        h.model_expects("conversation.item.create").await;
    }
}

/// Reports progress every 100 ms until it is dropped, and once more then, as an MCP call's
/// progress route reports what is still waiting when the call ends.
struct Endless {
    spec: ToolSpec,
}

struct LastWord(progress::ProgressSink);

impl Drop for LastWord {
    fn drop(&mut self) {
        self.0.report(99.0, None, None);
    }
}

#[async_trait::async_trait]
impl Tool for Endless {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        let sink = progress::current().expect("the harness's client wants progress");
        let _last = LastWord(sink.clone());
        for step in 1.. {
            sink.report(f64::from(step), None, None);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        unreachable!()
    }
}

fn endless_tool() -> Arc<dyn Tool> {
    let mut spec = quick_tool().spec().clone();
    spec.name = ENDLESS;
    spec.timeout = Duration::from_secs(600);
    Arc::new(Endless { spec })
}

#[tokio::test(start_paused = true)]
async fn a_call_abandoned_at_the_close_deadline_reports_nothing_after_its_end() {
    let mut h = start_with(|c| c.server.drain_timeout_ms = 1_000, 1 << 20, None, vec![endless_tool()]).await;
    h.model_calls("c1", ENDLESS).await;
    h.browser_expects("voxgate.tool_call.progress").await;
    // The session is closed (a kill) with the call running; at the deadline the call is abandoned.
    h.cancel.cancel();
    let mut ended = false;
    while let Some(Ok(message)) = h.browser.next().await {
        let Message::Text(text) = message else { continue };
        let event: Value = serde_json::from_str(&text).unwrap();
        match event["type"].as_str() {
            Some("voxgate.tool_call.failed") => ended = true,
            Some("voxgate.tool_call.progress") => assert!(!ended, "progress after the call's end: {event}"),
            _ => {}
        }
    }
    assert!(ended, "the abandoned call's end reached the client");
}
