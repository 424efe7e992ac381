//! Sessions that outlive their upstream (CONTRACT §9), against the fake upstream on 127.0.0.1:
//! a drop after three turns (with and without `voxgate.*` events), a confirmation parked across a
//! drop, a call finishing while the upstream is away, a proactive recycle at a tiny `max_session_age_s`, client audio held while the upstream
//! refuses, and an upstream that refuses every reconnect.

mod support;

use serde_json::{Value, json};
use support::{Client, FakeConn, FakeUpstream, TestProxy, model_calls};

const TURNS: usize = 3;

/// The model answers in text: `response.created` … `response.done`, the item in both.
async fn answer(up: &mut FakeConn, item_id: &str, text: &str) {
    let response_id = format!("resp_{item_id}");
    let item = json!({"id": item_id, "type": "message", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": text}]});
    up.send_json(&json!({"type": "response.created", "event_id": "e_rc", "response": {"id": response_id, "object": "realtime.response", "status": "in_progress", "output": []}})).await;
    up.send_json(&json!({"type": "response.output_text.delta", "event_id": "e_d", "response_id": response_id, "item_id": item_id, "output_index": 0, "content_index": 0, "delta": text})).await;
    up.send_json(&json!({"type": "response.output_item.done", "event_id": "e_oid", "response_id": response_id, "output_index": 0, "item": item})).await;
    up.send_json(&json!({"type": "response.done", "event_id": "e_rd", "response": {"id": response_id, "object": "realtime.response", "status": "completed", "output": [item]}})).await;
}

/// The upstream takes a `conversation.item.create` and acknowledges it under `id`.
async fn take_item(up: &mut FakeConn, id: &str) -> Value {
    let create = up.until("conversation.item.create").await;
    let mut item = create["item"].clone();
    item["id"] = json!(id);
    up.send_json(&json!({"type": "conversation.item.added", "event_id": "e_ia", "previous_item_id": null, "item": item})).await;
    create
}

/// One exchange: the client asks in text, the model answers; returns the client's frames.
async fn turn(client: &mut Client, up: &mut FakeConn, n: usize) -> Vec<Value> {
    let question = format!("Question {n}");
    client.send_json(json!({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": question}]}})).await;
    let create = take_item(up, &format!("item_u{n}")).await;
    assert_eq!(create["item"]["content"][0]["text"], question);
    client.send_json(json!({"type": "response.create"})).await;
    up.until("response.create").await;
    answer(up, &format!("item_a{n}"), &format!("Answer {n}")).await;
    client.collect_until("response.done").await
}

/// The new upstream after a drop: it opens its session and acknowledges the restore; returns the
/// restore's session configuration and item ids.
async fn restored(fake: &mut FakeUpstream) -> (FakeConn, Value, Vec<String>) {
    let mut up = fake.accept().await;
    up.send_json(&json!({"type": "session.created", "event_id": "n0", "session": {"type": "realtime", "object": "realtime.session", "id": "sess_2", "tools": []}})).await;
    let update = up.next_json().await;
    assert_eq!(update["type"], "session.update", "{update}");
    up.send_json(&json!({"type": "session.updated", "event_id": "n1", "session": update["session"]})).await;
    let mut ids = Vec::new();
    for _ in 0..2 * TURNS {
        let create = up.next_json().await;
        assert_eq!(create["type"], "conversation.item.create", "{create}");
        let id = create["item"]["id"].as_str().unwrap().to_string();
        // Acknowledged like any item (the client must not see these echoes).
        up.send_json(&json!({"type": "conversation.item.added", "event_id": "n2", "previous_item_id": null, "item": create["item"]})).await;
        up.send_json(&json!({"type": "conversation.item.done", "event_id": "n3", "previous_item_id": null, "item": create["item"]})).await;
        ids.push(id);
    }
    (up, update["session"].clone(), ids)
}

fn expected_ids() -> Vec<String> {
    (1..=TURNS).flat_map(|n| [format!("item_u{n}"), format!("item_a{n}")]).collect()
}

/// Three turns, a drop, the restore, the next question answered; returns what the client saw
/// from the drop on.
async fn three_turns_then_a_drop(events: bool) -> Vec<Value> {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let protocols: &[&str] = if events { &["realtime", "voxgate.v1"] } else { &["realtime"] };
    let mut client = Client::connect(&proxy.url(""), protocols).await;
    let mut up = fake.accept().await;
    up.open_session().await;
    client.until("session.created").await;
    client.send_json(json!({"type": "session.update", "session": {"type": "realtime", "instructions": "Answer briefly.", "output_modalities": ["text"]}})).await;
    up.until("session.update").await;
    // A realtime server answers every update: voxgate's tool injection and the client's. (One the
    // old upstream never answered is answered after the restore: the unit tests in
    // src/session/resume/tests.rs.)
    for _ in 0..2 {
        up.send_json(&json!({"type": "session.updated", "event_id": "e_su", "session": {"type": "realtime", "id": "sess_1"}})).await;
    }
    for n in 1..=TURNS {
        turn(&mut client, &mut up, n).await;
    }

    drop(up);
    let (mut up, session, ids) = restored(&mut fake).await;
    assert_eq!(session["instructions"], "Answer briefly.");
    assert_eq!(session["output_modalities"], json!(["text"]));
    assert!(session["tools"].as_array().unwrap().iter().any(|t| t["name"] == "calculate_medical_score"), "{session}");
    assert_eq!(ids, expected_ids());

    let mut seen = turn(&mut client, &mut up, TURNS + 1).await;
    assert!(seen.iter().any(|e| e["type"] == "response.output_text.delta" && e["delta"] == "Answer 4"), "{seen:?}");
    client.send_json(json!({"type": "voxgate.sync"})).await;
    seen.extend(client.collect_until("error").await);
    seen
}

fn kinds(seen: &[Value]) -> Vec<&str> {
    seen.iter().map(|e| e["type"].as_str().unwrap_or_default()).collect()
}

#[tokio::test]
async fn a_drop_after_three_turns_restores_the_conversation_and_the_next_question_is_answered() {
    let seen = three_turns_then_a_drop(true).await;
    let resuming = seen.iter().find(|e| e["type"] == "voxgate.session.resuming").expect("resuming");
    assert!(["upstream_closed", "upstream_error"].contains(&resuming["reason"].as_str().unwrap()), "{resuming}");
    let resumed = seen.iter().find(|e| e["type"] == "voxgate.session.resumed").expect("resumed");
    assert_eq!(resumed["items_restored"], 2 * TURNS);
    assert_eq!(resumed["reason"], resuming["reason"]);
    let kinds = kinds(&seen);
    for hidden in ["session.created", "session.updated", "voxgate.session.ready"] {
        assert!(!kinds.contains(&hidden), "{hidden} reached the client: {kinds:?}");
    }
    assert_eq!(kinds.iter().filter(|k| **k == "error").count(), 1, "only the sync's: {seen:?}");
}

#[tokio::test]
async fn on_a_pure_stream_a_resume_shows_nothing_but_a_pause() {
    let seen = three_turns_then_a_drop(false).await;
    let kinds = kinds(&seen);
    assert!(kinds.iter().all(|k| !k.starts_with("voxgate.")), "{kinds:?}");
    for hidden in ["session.created", "session.updated"] {
        assert!(!kinds.contains(&hidden), "{hidden} reached the client: {kinds:?}");
    }
    // Only the new question's echo, never the restored items'.
    let added: Vec<&Value> = seen.iter().filter(|e| e["type"] == "conversation.item.added").map(|e| &e["item"]["id"]).collect();
    assert_eq!(added, [&json!(format!("item_u{}", TURNS + 1))]);
    assert_eq!(kinds.iter().filter(|k| **k == "error").count(), 1, "only the sync's: {seen:?}");
}

#[tokio::test]
async fn a_confirmation_parked_across_a_drop_is_answered_once_on_the_new_upstream() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let (mut client, mut up) = proxy.ready_session(&mut fake).await;
    let day = chrono::Utc::now().date_naive() + chrono::Days::new(1);
    let args = json!({"title": "Ward round", "start_datetime": format!("{day}T09:00:00Z"), "end_datetime": format!("{day}T10:00:00Z")}).to_string();
    model_calls(&mut up, &[("call_parked", "create_calendar_event", &args)]).await;
    client.until("voxgate.tool_call.confirmation_requested").await;

    drop(up);
    let mut up = fake.accept().await;
    up.send_json(&json!({"type": "session.created", "event_id": "n0", "session": {"type": "realtime", "id": "sess_2", "tools": []}})).await;
    client.until("voxgate.session.resumed").await;
    client.send_json(json!({"type": "voxgate.tool_call.confirm", "call_id": "call_parked", "approved": true})).await;
    assert_eq!(client.until("voxgate.tool_call.completed").await["call_id"], "call_parked");

    let mut outputs = 0;
    let mut restored_call = false;
    loop {
        let event = up.next_json().await;
        match (event["type"].as_str().unwrap(), event["item"]["type"].as_str()) {
            ("conversation.item.create", Some("function_call")) => restored_call |= event["item"]["call_id"] == "call_parked",
            ("conversation.item.create", Some("function_call_output")) => {
                assert_eq!(event["item"]["call_id"], "call_parked");
                outputs += 1;
            }
            ("response.create", _) => break,
            _ => {}
        }
    }
    assert!(restored_call, "the call is part of the restored conversation");
    assert_eq!(outputs, 1);
    let ics = std::fs::read_to_string(proxy.calendar_path()).unwrap();
    assert_eq!(ics.matches("Ward round").count(), 1, "exactly one event written");
    let finished: Vec<Value> = proxy.audit_records().into_iter().filter(|r| r["call_id"] == "call_parked" && r["event"] == "call_finished").collect();
    assert_eq!(finished.len(), 1);
    assert_eq!((finished[0]["status"].as_str(), finished[0]["confirmation"].as_str()), (Some("completed"), Some("approved")));
    let report = voxgate::audit::verify(&proxy.audit_path(), &voxgate::audit::Chain::default()).unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
}

#[tokio::test]
async fn an_old_upstream_session_is_recycled_at_a_quiet_moment() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "max_session_age_s = 1\n").await;
    let (mut client, mut up) = proxy.ready_session(&mut fake).await;
    turn(&mut client, &mut up, 1).await;
    assert_eq!(client.until("voxgate.session.resuming").await["reason"], "max_age");
    assert_eq!(up.closed().await.0, 1000, "the old upstream is closed normally");
    let mut up = fake.accept().await;
    let update = up.next_json().await;
    assert_eq!(update["type"], "session.update");
    let ids: Vec<Value> = [up.next_json().await, up.next_json().await].iter().map(|c| c["item"]["id"].clone()).collect();
    assert_eq!(ids, [json!("item_u1"), json!("item_a1")]);
    let resumed = client.until("voxgate.session.resumed").await;
    assert_eq!((resumed["reason"].as_str(), resumed["items_restored"].as_u64()), (Some("max_age"), Some(2)));
}

#[tokio::test]
async fn an_upstream_that_refuses_every_reconnect_ends_the_session_cleanly() {
    let mut fake = FakeUpstream::start().await;
    // The attempts are spread over at least 10 s (the retry window): the client's pings keep
    // the wait for the close from timing out meanwhile.
    let proxy = TestProxy::with_upstream(&fake, "resume_attempts = 2\n[server]\nping_interval_ms = 2000\n").await;
    let (mut client, up) = proxy.ready_session(&mut fake).await;
    fake.refuse_from_now(503);
    drop(up);
    client.until("voxgate.session.resuming").await;
    let refused_at = std::time::Instant::now();
    let (code, reason) = client.closed().await;
    assert!(refused_at.elapsed() >= std::time::Duration::from_secs(9), "gave up after {:?}", refused_at.elapsed());
    assert_eq!(code, 1011);
    assert!(reason.contains("could not be resumed"), "{reason}");
    let (_, metrics) = proxy.http_get("/metrics").await;
    assert!(metrics.lines().any(|l| l.starts_with("voxgate_upstream_resumes_total") && l.contains("outcome=\"failed\"")), "{metrics}");
}

#[tokio::test]
async fn client_frames_sent_while_the_upstream_refuses_follow_the_restore_in_order() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "resume_attempts = 8\n").await;
    let (mut client, up) = proxy.ready_session(&mut fake).await;
    fake.refuse_from_now(503);
    drop(up);
    client.until("voxgate.session.resuming").await;
    let sent: Vec<String> = (0..5).map(|i| format!("audio_{i}")).collect();
    for id in &sent {
        client.send_json(json!({"type": "input_audio_buffer.append", "event_id": id, "audio": "AAAA"})).await;
    }
    client.send_json(json!({"type": "input_audio_buffer.commit", "event_id": "commit"})).await;
    fake.refuse_from_now(0);
    let mut up = fake.accept().await;
    assert_eq!(up.next_json().await["type"], "session.update", "the restore comes first");
    let mut received = Vec::new();
    while received.last().map(String::as_str) != Some("commit") {
        received.push(up.next_json().await["event_id"].as_str().unwrap_or_default().to_string());
    }
    let mut expected = sent.clone();
    expected.push("commit".into());
    assert_eq!(received, expected);
    let resumed = client.until("voxgate.session.resumed").await;
    assert_eq!(resumed["audio_dropped_ms"], 0);
}

/// A PubMed stand-in that holds its answer until told: an esearch with no hits, in NCBI's format.
async fn held_pubmed() -> (u16, tokio::sync::oneshot::Sender<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut request = vec![0u8; 8192];
        let _ = stream.read(&mut request).await.unwrap();
        let _ = released.await;
        let body = r#"<?xml version="1.0" encoding="UTF-8" ?><eSearchResult><Count>0</Count><RetMax>0</RetMax><RetStart>0</RetStart><IdList></IdList></eSearchResult>"#;
        let response = format!("HTTP/1.1 200 OK\r\ncontent-type: text/xml\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
        stream.write_all(response.as_bytes()).await.unwrap();
    });
    (port, release)
}

/// The upstream drops while a tool runs; the call finishes during the gap. Its output reaches the
/// new upstream exactly once, after the restored call, followed by the `response.create` that
/// was due; the call is audited once.
#[tokio::test]
async fn a_call_finishing_while_the_upstream_is_away_is_answered_once_on_the_new_upstream() {
    let mut fake = FakeUpstream::start().await;
    let (port, release) = held_pubmed().await;
    let toml = format!("[backends.pubmed]\nbase_url = \"http://127.0.0.1:{port}/eutils\"\n");
    let proxy = TestProxy::with_upstream(&fake, &toml).await;
    let (mut client, mut up) = proxy.ready_session(&mut fake).await;
    model_calls(&mut up, &[("call_running", "search_pubmed", r#"{"query":"statins"}"#)]).await;
    client.until("voxgate.tool_call.started").await;

    drop(up);
    let mut up = fake.accept().await;
    // The new upstream is connected but not yet restored when the call finishes.
    release.send(()).unwrap();
    assert_eq!(client.until("voxgate.tool_call.completed").await["call_id"], "call_running");
    up.send_json(&json!({"type": "session.created", "event_id": "n0", "session": {"type": "realtime", "id": "sess_2", "tools": []}})).await;

    let mut order = Vec::new();
    loop {
        let event = up.next_json().await;
        match (event["type"].as_str().unwrap(), event["item"]["type"].as_str()) {
            ("conversation.item.create", Some(kind @ ("function_call" | "function_call_output"))) => {
                assert_eq!(event["item"]["call_id"], "call_running", "{event}");
                order.push(kind.to_string());
            }
            ("response.create", _) => break,
            _ => {}
        }
    }
    assert_eq!(order, ["function_call", "function_call_output"], "the call, then its one output");
    let finished: Vec<Value> = proxy.audit_records().into_iter().filter(|r| r["call_id"] == "call_running" && r["event"] == "call_finished").collect();
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0]["status"], "completed");
}
