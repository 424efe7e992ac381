//! The session loop never freezes on a stalled peer, never spins, and its response gate never
//! leaves tool results unspoken; each case under paused time, the loop's turns counted.

use super::*;

#[tokio::test(start_paused = true)]
async fn an_upstream_that_stops_reading_ends_the_session_in_bounded_time() {
    let mut h = start(|_| {}, 16 * 1024).await;
    // The model stops reading; the browser keeps streaming audio.
    let audio = json!({"type": "input_audio_buffer.append", "audio": "A".repeat(32 * 1024)});
    for _ in 0..200 {
        if tokio::time::timeout(
            Duration::from_millis(50),
            h.browser.send(Message::text(audio.to_string())),
        )
        .await
        .is_err()
        {
            break;
        }
    }
    let close = close_code(&mut h.browser).await;
    assert_eq!(close, Some(1011));
    assert_eq!(
        h.ends_within(Duration::from_secs(30)).await,
        SessionOutcome::UpstreamError
    );
}

#[tokio::test(start_paused = true)]
async fn an_admin_kill_ends_a_session_stuck_on_a_stalled_upstream() {
    let mut h = start(|_| {}, 16 * 1024).await;
    let audio = json!({"type": "input_audio_buffer.append", "audio": "A".repeat(32 * 1024)});
    for _ in 0..4 {
        let _ = tokio::time::timeout(
            Duration::from_millis(10),
            h.browser.send(Message::text(audio.to_string())),
        )
        .await;
    }
    h.cancel.cancel();
    let outcome = h.ends_within(Duration::from_secs(30)).await;
    assert!(
        matches!(
            outcome,
            SessionOutcome::Killed | SessionOutcome::UpstreamError
        ),
        "{outcome:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_silent_upstream_that_never_answers_pings_is_closed() {
    let h = start(|c| c.server.ping_interval_ms = 1_000, 1 << 20).await;
    // The model end is never read, so its WebSocket never answers voxgate's pings.
    assert_eq!(
        h.ends_within(Duration::from_secs(40)).await,
        SessionOutcome::UpstreamError
    );
}

#[tokio::test(start_paused = true)]
async fn the_idle_timeout_has_its_own_deadline_with_pings_off() {
    let h = start(|c| c.server.idle_timeout_ms = 2_000, 1 << 20).await;
    assert_eq!(
        h.ends_within(Duration::from_secs(5)).await,
        SessionOutcome::IdleTimeout
    );
}


// --- spin ---

#[tokio::test(start_paused = true)]
async fn the_loop_sleeps_while_a_response_and_a_speaking_user_hold_the_gate() {
    let mut h = start(|_| {}, 1 << 20).await;
    h.call_while_the_user_speaks("call_1").await;
    h.model_sends(VAD_RESPONSE.clone()).await;
    h.browser_expects("response.created").await;
    // Well past the speech grace, with the gate still shut by the active response.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = h.turns();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let spent = h.turns() - before;
    assert!(
        spent <= 3,
        "the loop turned {spent} times in 5 s with nothing to do"
    );
}

/// Answers after `for_s` seconds of (virtual) time: a backend call that takes a while.
struct Slow {
    spec: ToolSpec,
    for_s: u64,
}

#[async_trait::async_trait]
impl Tool for Slow {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        tokio::time::sleep(Duration::from_secs(self.for_s)).await;
        Ok(ToolOutput::new(json!({"ok": true})))
    }
}

fn slow_tool(name: &'static str, for_s: u64) -> Arc<dyn Tool> {
    let mut spec = quick_tool().spec().clone();
    spec.name = name;
    spec.category = Category::Search;
    spec.timeout = Duration::from_secs(60);
    Arc::new(Slow { spec, for_s })
}

#[tokio::test(start_paused = true)]
async fn a_closing_session_does_not_spin_on_a_speech_grace_that_has_passed() {
    let mut h = start_with(|_| {}, 1 << 20, None, vec![slow_tool("fast_lookup", 1), slow_tool("slow_lookup", 8)]).await;
    // The user spoke: the gate holds voxgate's own response.create for the speech grace, which
    // only voxgate's next request clears (server VAD answers on its own, so none comes).
    h.model_sends(json!({"type": "input_audio_buffer.speech_started", "event_id": "e", "audio_start_ms": 0, "item_id": "u1"})).await;
    h.model_sends(json!({"type": "input_audio_buffer.speech_stopped", "event_id": "e", "audio_end_ms": 900, "item_id": "u1"})).await;
    for (call_id, name) in [("call_fast", "fast_lookup"), ("call_slow", "slow_lookup")] {
        h.model_sends(json!({"type": "response.function_call_arguments.done", "event_id": format!("e_{call_id}"),
            "response_id": "r1", "item_id": format!("i_{call_id}"), "output_index": 0, "call_id": call_id,
            "name": name, "arguments": "{}"}))
        .await;
    }
    h.browser_expects("voxgate.tool_call.started").await;
    h.browser_expects("voxgate.tool_call.started").await;
    // The session closes (a kill) with both calls running; the fast one finishes while it closes,
    // and its output goes upstream: an output no response covers, and a grace long past.
    h.cancel.cancel();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = h.turns();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let spent = h.turns() - before;
    assert!(spent <= 5, "the closing loop turned {spent} times in 3 s waiting for the slow call");
}

// --- gate ---

#[tokio::test(start_paused = true)]
async fn any_error_answering_voxgates_response_create_frees_the_gate() {
    let mut h = start(|_| {}, 1 << 20).await;
    h.tool_call("call_1").await;
    let create = h.model_expects("response.create").await;
    h.model_sends(
        json!({"type": "error", "event_id": "e", "error": {"type": "invalid_request_error",
        "code": "invalid_value", "message": "no", "param": null, "event_id": create["event_id"]}}),
    )
    .await;
    // Asked again (not left pending forever).
    let again = h.model_expects("response.create").await;
    assert_ne!(again["event_id"], create["event_id"]);
    h.model_sends(
        json!({"type": "response.created", "event_id": "e", "response": {"id": "resp_1"}}),
    )
    .await;
    h.model_sends(json!({"type": "response.done", "event_id": "e", "response": {"id": "resp_1", "output": []}})).await;
    // A later output gets its own request: the gate is open again.
    h.tool_call("call_2").await;
    h.model_expects("response.create").await;
}

/// A session `tool_choice` that forces a tool (`required`, or one tool named) is not inherited by
/// voxgate's own `response.create` after a server call: the model would have to call a tool again,
/// round after round, with nobody speaking. One that leaves tools to the model, or turns them off,
/// is (nothing is added). A later update that does not set `tool_choice` keeps the last one.
#[tokio::test(start_paused = true)]
async fn voxgates_response_create_does_not_inherit_a_forced_tool_choice() {
    let mut h = start(|_| {}, 1 << 20).await;
    let weather = json!([{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}]);
    let rounds = [
        (json!({"type": "realtime", "tool_choice": "required"}), json!({"tool_choice": "auto"})),
        (json!({"type": "realtime", "instructions": "Be brief."}), json!({"tool_choice": "auto"})),
        (json!({"type": "realtime", "tools": weather, "tool_choice": {"type": "function", "name": TOOL}}), json!({"tool_choice": "auto"})),
        (json!({"type": "realtime", "tool_choice": "none"}), Value::Null),
        (json!({"type": "realtime", "tool_choice": "required"}), json!({"tool_choice": "auto"})),
        (json!({"type": "realtime", "tools": weather, "tool_choice": "auto"}), Value::Null),
    ];
    for (i, (session, expected)) in rounds.into_iter().enumerate() {
        h.browser_sends(json!({"type": "session.update", "event_id": format!("c{i}"), "session": session})).await;
        h.model_expects("session.update").await;
        h.model_sends(json!({"type": "session.updated", "event_id": format!("u{i}"), "session": session})).await;
        h.tool_call(&format!("call_{i}")).await;
        let create = h.model_expects("response.create").await;
        assert_eq!(create["response"], expected, "round {i}: {create}");
        let response = format!("resp_{i}");
        h.model_sends(json!({"type": "response.created", "event_id": "e", "response": {"id": response}})).await;
        h.model_sends(json!({"type": "response.done", "event_id": "e", "response": {"id": response, "output": []}})).await;
        h.browser_expects("response.done").await;
    }
}

/// The choice is the upstream's account of its session, not the client's update: one the
/// upstream refuses leaves the session forcing a tool, and voxgate still asks for `auto`.
#[tokio::test(start_paused = true)]
async fn a_refused_update_does_not_change_the_tool_choice_voxgate_sees() {
    let mut h = start(|_| {}, 1 << 20).await;
    let required = json!({"type": "realtime", "tool_choice": "required"});
    h.browser_sends(json!({"type": "session.update", "event_id": "c1", "session": required})).await;
    h.model_expects("session.update").await;
    h.model_sends(json!({"type": "session.updated", "event_id": "u1", "session": required})).await;
    h.browser_sends(json!({"type": "session.update", "event_id": "c2", "session": {"type": "realtime", "tool_choice": "auto", "temperature": 0.8}})).await;
    h.model_expects("session.update").await;
    h.model_sends(json!({"type": "error", "event_id": "e1", "error": {"type": "invalid_request_error",
        "code": "unknown_parameter", "message": "Unknown parameter: 'session.temperature'.", "event_id": "c2"}}))
    .await;
    h.browser_expects("error").await;
    h.tool_call("call_1").await;
    let create = h.model_expects("response.create").await;
    assert_eq!(create["response"], json!({"tool_choice": "auto"}), "{create}");
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_response_create_is_given_up_and_retried() {
    let mut h = start(|_| {}, 1 << 20).await;
    h.tool_call("call_1").await;
    let first = h.model_expects("response.create").await;
    let again = h.model_expects("response.create").await;
    assert_ne!(again["event_id"], first["event_id"]);
}

#[tokio::test(start_paused = true)]
async fn a_server_response_covers_only_outputs_it_had_acknowledged() {
    let mut h = start(|_| {}, 1 << 20).await;
    h.call_while_the_user_speaks("call_1").await;
    // Server VAD starts a response before it has taken voxgate's output in.
    h.model_sends(VAD_RESPONSE.clone()).await;
    h.acknowledge("call_1").await;
    h.model_sends(json!({"type": "response.done", "event_id": "e", "response": {"id": "resp_vad", "output": []}})).await;
    h.model_expects("response.create").await;
}

#[tokio::test(start_paused = true)]
async fn a_server_response_after_the_acknowledgement_covers_the_output() {
    let mut h = start(|_| {}, 1 << 20).await;
    h.model_sends(json!({"type": "input_audio_buffer.speech_started", "event_id": "e", "audio_start_ms": 0, "item_id": "u1"})).await;
    h.tool_call("call_1").await;
    h.acknowledge("call_1").await;
    h.model_sends(json!({"type": "input_audio_buffer.speech_stopped", "event_id": "e", "audio_end_ms": 900, "item_id": "u1"})).await;
    h.model_sends(VAD_RESPONSE.clone()).await;
    h.model_sends(json!({"type": "response.done", "event_id": "e", "response": {"id": "resp_vad", "output": []}})).await;
    h.browser_expects("response.done").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    h.model_gets_nothing_from_voxgate("voxgate asked for a covered response").await;
}

// --- trust boundaries ---
