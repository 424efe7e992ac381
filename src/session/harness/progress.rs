//! A call's progress reaches the client before the call's end does. The tool reports its progress
//! before it returns, but the session learns of the two on different arms of its `select!`
//! (the progress queue and the finished task), and the end goes out only after its audit record:
//! the queued progress must not be left behind the `voxgate.tool_call.completed`.

use super::*;
use crate::tools::progress;

const STEPPED: &str = "count_steps";

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
        h.model_sends(json!({"type": "response.function_call_arguments.done", "event_id": format!("e_{call_id}"),
            "response_id": "r1", "item_id": format!("i_{call_id}"), "output_index": 0, "call_id": call_id,
            "name": STEPPED, "arguments": "{}"}))
        .await;
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
