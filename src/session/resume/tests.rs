//! Resumes driven through the real session loop (see `session::harness`): the "model" end is
//! dropped or refused, a new one is handed to the session's connector, and the tests read what
//! each end sees, in order, under tokio's paused clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::DuplexStream;
use tokio::sync::{Mutex, mpsc};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::Connect;
use crate::session::SessionOutcome;
use crate::session::harness::{Harness, TOOL, close_code, expect, pair, start_with, upstream_conn};
use crate::tools::{CallContext, Category, Risk, Tool, ToolError, ToolOutput, ToolSpec};
use crate::upstream::{UpstreamConn, UpstreamError};

mod audio;
mod echoes;
mod outputs;
mod owed;
mod recycle;
mod updates;

type Offer = mpsc::UnboundedSender<Result<UpstreamConn, UpstreamError>>;

/// A connector that hands out what the test offers, and counts the attempts.
fn connector() -> (Connect, Offer, Arc<AtomicUsize>) {
    let (offer, offered) = mpsc::unbounded_channel();
    let offered = Arc::new(Mutex::new(offered));
    let attempts = Arc::new(AtomicUsize::new(0));
    let counted = attempts.clone();
    let connect: Connect = Arc::new(move || {
        let offered = offered.clone();
        counted.fetch_add(1, Ordering::SeqCst);
        async move {
            match tokio::time::timeout(Duration::from_secs(30), async { offered.lock().await.recv().await }).await {
                Ok(Some(result)) => result,
                _ => Err(UpstreamError::Timeout),
            }
        }
        .boxed()
    });
    (connect, offer, attempts)
}

async fn resumable(configure: impl FnOnce(&mut crate::config::Config)) -> (Harness, Offer, Arc<AtomicUsize>) {
    let (connect, offer, attempts) = connector();
    let h = start_with(
        |c| {
            c.upstream.resume = true;
            configure(c);
        },
        1 << 20,
        Some(connect),
        vec![
            Arc::new(Gated { spec: gated_spec(GATED, false), release: RELEASE.clone() }),
            Arc::new(Gated { spec: gated_spec(CONFIRMED, true), release: Arc::new(tokio::sync::Notify::const_new()) }),
        ],
    )
    .await;
    (h, offer, attempts)
}

/// A tool that runs until the test releases it.
const GATED: &str = "search_medical_guidelines";
/// The same, asking the user first; released at once (its notify holds a permit).
const CONFIRMED: &str = "create_calendar_event";

static RELEASE: std::sync::LazyLock<Arc<tokio::sync::Notify>> = std::sync::LazyLock::new(Default::default);

struct Gated {
    spec: ToolSpec,
    release: Arc<tokio::sync::Notify>,
}

fn gated_spec(name: &'static str, requires_confirmation: bool) -> ToolSpec {
    ToolSpec {
        name,
        description: "test tool that waits".into(),
        parameters: json!({"type": "object", "additionalProperties": false, "properties": {}}),
        category: Category::Search,
        phi: false,
        risk: Risk::Low,
        requires_confirmation,
        third_party: false,
        rate_limit_per_minute: 1000,
        timeout: Duration::from_secs(3600),
    }
}

#[async_trait::async_trait]
impl Tool for Gated {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        if !self.spec.requires_confirmation {
            self.release.notified().await;
        }
        Ok(ToolOutput::new(json!({"finished": "in the gap"})))
    }
}

/// The next text frame, whatever its type.
async fn next_json(ws: &mut WebSocketStream<DuplexStream>) -> Value {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(text))) => return serde_json::from_str(&text).unwrap(),
                Some(Ok(_)) => {}
                other => panic!("socket ended: {other:?}"),
            }
        }
    })
    .await
    .expect("no frame")
}

/// What the new model end receives up to voxgate's `response.create`: event types, items as
/// `type:call_id`.
async fn until_response_create(ws: &mut WebSocketStream<DuplexStream>) -> Vec<String> {
    let mut kinds = Vec::new();
    loop {
        let frame = next_json(ws).await;
        let kind = frame["type"].as_str().unwrap_or_default().to_string();
        let done = kind == "response.create";
        if kind == "conversation.item.create" {
            kinds.push(format!("{}:{}", frame["item"]["type"].as_str().unwrap_or_default(), frame["item"]["call_id"].as_str().unwrap_or_default()));
        } else {
            kinds.push(kind);
        }
        if done {
            return kinds;
        }
    }
}

fn message(id: &str, role: &str, part: &str, text: &str) -> Value {
    json!({"type": "conversation.item.done", "event_id": format!("e_{id}"), "previous_item_id": null,
        "item": {"id": id, "type": "message", "role": role, "status": "completed", "content": [{"type": part, "text": text}]}})
}

fn function_call(call_id: &str) -> Value {
    json!({"type": "conversation.item.done", "event_id": "e_fc", "previous_item_id": null,
        "item": {"id": format!("fc_{call_id}"), "type": "function_call", "status": "completed", "name": TOOL, "call_id": call_id, "arguments": "{}"}})
}

/// The browser has sent everything before this (the loop answers frames in order).
async fn browser_sync(h: &mut Harness) {
    h.browser_sends(json!({"type": "voxgate.sync"})).await;
    h.browser_expects("error").await;
}

/// Drop the model end; returns the proxy end of the next one (not yet offered).
async fn drop_model(h: &mut Harness) -> WebSocketStream<DuplexStream> {
    let (proxy_side, model) = pair(1 << 20).await;
    drop(std::mem::replace(&mut h.model, model));
    proxy_side
}

#[tokio::test(start_paused = true)]
async fn a_dropped_upstream_gets_the_session_and_items_in_order_then_the_held_frames() {
    let (mut h, offer, _) = resumable(|_| {}).await;
    h.browser_sends(json!({"type": "session.update", "session": {"type": "realtime", "instructions": "Be brief."}})).await;
    h.model_expects("session.update").await;
    // Both updates (voxgate's tool injection and the browser's) are answered before the drop.
    for _ in 0..2 {
        h.model_sends(json!({"type": "session.updated", "event_id": "e_su", "session": {"id": "sess_1"}})).await;
        h.browser_expects("session.updated").await;
    }
    h.model_sends(message("u1", "user", "input_text", "What is the dose?")).await;
    h.model_sends(message("a1", "assistant", "output_text", "Five milligrams.")).await;
    h.model_sends(function_call("c1")).await;
    h.tool_call("c1").await;
    h.acknowledge("c1").await;
    h.model_sends(json!({"type": "response.created", "event_id": "e", "response": {"id": "r2"}})).await;
    h.browser_expects("response.created").await;

    let proxy_side = drop_model(&mut h).await;
    let resuming = h.browser_expects("voxgate.session.resuming").await;
    assert!(["upstream_closed", "upstream_error"].contains(&resuming["reason"].as_str().unwrap()), "{resuming}");
    // Sent during the gap: held, in order.
    h.browser_sends(json!({"type": "input_audio_buffer.append", "event_id": "held_audio", "audio": "AAAA"})).await;
    h.browser_sends(json!({"type": "conversation.item.create", "event_id": "held_item",
        "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "And for children?"}]}}))
    .await;
    browser_sync(&mut h).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();

    let update = next_json(&mut h.model).await;
    assert_eq!(update["type"], "session.update");
    assert_eq!(update["session"]["instructions"], "Be brief.");
    assert!(update["session"]["tools"].as_array().unwrap().iter().any(|t| t["name"] == TOOL), "{update}");
    let mut restored = Vec::new();
    for _ in 0..4 {
        let create = next_json(&mut h.model).await;
        assert_eq!(create["type"], "conversation.item.create");
        restored.push(create["item"]["id"].as_str().unwrap().to_string());
    }
    assert_eq!(restored, ["u1", "a1", "fc_c1", "item_c1"]);
    assert_eq!(next_json(&mut h.model).await["event_id"], "held_audio");
    assert_eq!(next_json(&mut h.model).await["event_id"], "held_item");

    let resumed = h.browser_expects("voxgate.session.resumed").await;
    assert_eq!(resumed["items_restored"], 4);
    assert_eq!(resumed["audio_dropped_ms"], 0);
    // The new upstream's echoes of the restore never reach the client.
    h.model_sends(json!({"type": "session.created", "event_id": "n0", "session": {"id": "sess_2"}})).await;
    h.model_sends(json!({"type": "session.updated", "event_id": "n1", "session": {"id": "sess_2"}})).await;
    h.model_sends(json!({"type": "conversation.item.added", "event_id": "n2", "item": {"id": "u1", "type": "message", "role": "user", "content": []}}))
        .await;
    h.model_sends(json!({"type": "response.created", "event_id": "n3", "response": {"id": "r3"}})).await;
    assert_eq!(next_json(&mut h.browser).await["type"], "response.created");
    assert!(h.metrics.render().lines().any(|l| l.starts_with("voxgate_upstream_resumes_total") && l.contains("outcome=\"resumed\"") && l.ends_with(" 1")));
}

#[tokio::test(start_paused = true)]
async fn an_update_the_old_upstream_never_answered_is_answered_by_the_new_one() {
    let (mut h, offer, _) = resumable(|_| {}).await;
    h.model_sends(json!({"type": "session.updated", "event_id": "e_inj", "session": {"id": "sess_1"}})).await;
    h.browser_expects("session.updated").await;
    h.browser_sends(json!({"type": "session.update", "session": {"type": "realtime", "instructions": "Be brief."}})).await;
    h.model_expects("session.update").await;
    // Gone before answering the browser's update (a dropped connection loses what was in flight).
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    assert_eq!(next_json(&mut h.model).await["type"], "session.update");
    h.browser_expects("voxgate.session.resumed").await;
    h.model_sends(json!({"type": "session.created", "event_id": "n0", "session": {"id": "sess_2"}})).await;
    h.model_sends(json!({"type": "session.updated", "event_id": "n1", "session": {"id": "sess_2", "instructions": "Be brief."}})).await;
    h.model_sends(json!({"type": "response.created", "event_id": "n2", "response": {"id": "r3"}})).await;
    // The client gets its answer once, and never the new upstream's `session.created`.
    let updated = next_json(&mut h.browser).await;
    assert_eq!((updated["type"].as_str(), updated["event_id"].as_str()), (Some("session.updated"), Some("n1")), "{updated}");
    assert_eq!(next_json(&mut h.browser).await["type"], "response.created");
}

#[tokio::test(start_paused = true)]
async fn an_output_the_old_upstream_never_acknowledged_is_delivered_once_with_its_response() {
    let (mut h, offer, _) = resumable(|_| {}).await;
    owed::output_asked_for(&mut h, "c2").await;
    // Gone before acknowledging the output or answering the request.
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    let kinds = until_response_create(&mut h.model).await;
    assert_eq!(kinds, ["session.update", "function_call:c2", "function_call_output:c2", "response.create"]);
}

#[tokio::test(start_paused = true)]
async fn an_upstream_that_refuses_every_reconnect_ends_the_session_after_the_bounded_attempts() {
    let (mut h, offer, attempts) = resumable(|c| c.upstream.resume_attempts = 3).await;
    for _ in 0..5 {
        offer.send(Err(UpstreamError::Refused { status: 503 })).unwrap();
    }
    drop(drop_model(&mut h).await);
    h.browser_expects("voxgate.session.resuming").await;
    assert_eq!(close_code(&mut h.browser).await, Some(1011));
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    assert!(h.metrics.render().lines().any(|l| l.starts_with("voxgate_upstream_resumes_total") && l.contains("outcome=\"failed\"") && l.ends_with(" 1")));
    let outcome = h.ends_within(Duration::from_secs(30)).await;
    assert!(matches!(outcome, SessionOutcome::UpstreamClosed | SessionOutcome::UpstreamError), "{outcome:?}");
}

#[tokio::test(start_paused = true)]
async fn an_old_session_is_recycled_at_the_next_quiet_moment_only() {
    let (mut h, offer, _) = resumable(|c| c.upstream.max_session_age_s = 10).await;
    h.model_sends(message("u1", "user", "input_text", "Hello")).await;
    h.model_sends(json!({"type": "response.created", "event_id": "e", "response": {"id": "r1"}})).await;
    h.browser_expects("response.created").await;
    // Past the age while the model answers: nothing happens.
    let early = tokio::time::timeout(Duration::from_secs(15), expect(&mut h.browser, "voxgate.session.resuming")).await;
    assert!(early.is_err(), "recycled in the middle of a response");
    let (proxy_side, model) = pair(1 << 20).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    h.model_sends(json!({"type": "response.done", "event_id": "e", "response": {"id": "r1", "output": []}})).await;
    assert_eq!(h.browser_expects("voxgate.session.resuming").await["reason"], "max_age");
    assert_eq!(close_code(&mut h.model).await, Some(1000), "the old upstream is closed normally");
    h.model = model;
    assert_eq!(h.model_expects("conversation.item.create").await["item"]["id"], "u1");
    let resumed = h.browser_expects("voxgate.session.resumed").await;
    assert_eq!((resumed["reason"].as_str(), resumed["items_restored"].as_u64()), (Some("max_age"), Some(1)));
}

#[tokio::test(start_paused = true)]
async fn a_call_finishing_while_the_upstream_is_away_is_answered_once_after_the_restore() {
    let (mut h, offer, _) = resumable(|_| {}).await;
    h.model_sends(json!({"type": "conversation.item.done", "event_id": "e_fc", "previous_item_id": null,
        "item": {"id": "fc_slow", "type": "function_call", "status": "completed", "name": GATED, "call_id": "slow", "arguments": "{}"}}))
    .await;
    h.model_sends(json!({"type": "response.function_call_arguments.done", "event_id": "e_slow", "response_id": "r1",
        "item_id": "fc_slow", "output_index": 0, "call_id": "slow", "name": GATED, "arguments": "{}"}))
    .await;
    h.browser_expects("voxgate.tool_call.started").await;
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    RELEASE.notify_one();
    // The call completes while there is no upstream; its output waits for the new one.
    assert_eq!(h.browser_expects("voxgate.tool_call.completed").await["call_id"], "slow");
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    let kinds = until_response_create(&mut h.model).await;
    assert_eq!(kinds, ["session.update", "function_call:slow", "function_call_output:slow", "response.create"]);
    h.browser_expects("voxgate.session.resumed").await;
}

#[tokio::test(start_paused = true)]
async fn a_session_expired_error_resumes_without_reaching_the_client() {
    let (mut h, offer, _) = resumable(|_| {}).await;
    h.model_sends(json!({"type": "error", "event_id": "e_x", "error": {"type": "invalid_request_error", "code": "session_expired",
        "message": "Your session hit the maximum duration of 60 minutes.", "param": null, "event_id": null}}))
    .await;
    let first = next_json(&mut h.browser).await;
    assert_eq!((first["type"].as_str(), first["reason"].as_str()), (Some("voxgate.session.resuming"), Some("upstream_error")));
    let (proxy_side, model) = pair(1 << 20).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    h.model = model;
    h.model_expects("session.update").await;
    assert_eq!(next_json(&mut h.browser).await["type"], "voxgate.session.resumed");
}

#[tokio::test(start_paused = true)]
async fn a_confirmation_given_while_the_upstream_is_away_is_answered_once_and_audited_once() {
    let (mut h, offer, _) = resumable(|_| {}).await;
    h.model_sends(json!({"type": "conversation.item.done", "event_id": "e_fc", "previous_item_id": null,
        "item": {"id": "fc_conf", "type": "function_call", "status": "completed", "name": CONFIRMED, "call_id": "conf", "arguments": "{}"}}))
    .await;
    h.model_sends(json!({"type": "response.function_call_arguments.done", "event_id": "e_conf", "response_id": "r1",
        "item_id": "fc_conf", "output_index": 0, "call_id": "conf", "name": CONFIRMED, "arguments": "{}"}))
    .await;
    h.browser_expects("voxgate.tool_call.confirmation_requested").await;
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    // The parked call is still parked: the user approves it while there is no upstream.
    h.browser_sends(json!({"type": "voxgate.tool_call.confirm", "call_id": "conf", "approved": true})).await;
    assert_eq!(h.browser_expects("voxgate.tool_call.completed").await["call_id"], "conf");
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    let kinds = until_response_create(&mut h.model).await;
    assert_eq!(kinds.iter().filter(|k| k.starts_with("function_call_output:")).collect::<Vec<_>>(), ["function_call_output:conf"]);
    let report = crate::audit::verify(&h.audit_path(), &crate::audit::Chain::default()).unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert_eq!(report.calls, 1);
}

/// A connector whose every upstream takes the upgrade and the restore's first frame, then closes
/// with 1011 (a server or load balancer that accepts and drops at once); it records when each
/// connection was asked for.
fn flapping_connector() -> (Connect, Arc<std::sync::Mutex<Vec<tokio::time::Instant>>>) {
    let connects = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = connects.clone();
    let connect: Connect = Arc::new(move || {
        recorded.lock().unwrap().push(tokio::time::Instant::now());
        async move {
            let (proxy_side, mut model) = pair(1 << 20).await;
            tokio::spawn(async move {
                let _ = model.next().await;
                let _ = model.close(Some(CloseFrame { code: CloseCode::Error, reason: "overloaded".into() })).await;
                while model.next().await.is_some() {}
            });
            Ok(upstream_conn(proxy_side))
        }
        .boxed()
    });
    (connect, connects)
}

/// A session that resumes with three attempts, each connecting through `connect`.
async fn resuming_with_three_attempts(connect: Connect) -> Harness {
    start_with(
        |c| {
            c.upstream.resume = true;
            c.upstream.resume_attempts = 3;
        },
        1 << 20,
        Some(connect),
        Vec::new(),
    )
    .await
}

#[tokio::test(start_paused = true)]
async fn an_upstream_that_closes_right_after_every_restore_ends_the_session_after_the_bounded_attempts() {
    let (connect, connects) = flapping_connector();
    let mut h = resuming_with_three_attempts(connect).await;
    h.model.close(Some(CloseFrame { code: CloseCode::Error, reason: "overloaded".into() })).await.unwrap();
    h.browser_expects("voxgate.session.resuming").await;
    // Each resume "succeeds" and its upstream closes at once: a resume that did not last continues
    // the previous one's attempts and back-off, so the session ends instead of reconnecting forever.
    assert_eq!(close_code(&mut h.browser).await, Some(1011));
    let at = connects.lock().unwrap().clone();
    assert_eq!(at.len(), 3, "one connection per attempt, then the session closes");
    // The back-off carried over: the second attempt after the first retry's back-off, the last
    // after what is left of the retry window, not at once each time.
    assert!(at[1] - at[0] >= Duration::from_millis(250), "{:?}", at[1] - at[0]);
    assert!(at[2] - at[1] >= Duration::from_millis(9_750), "{:?}", at[2] - at[1]);
    assert!(h.metrics.render().lines().any(|l| l.starts_with("voxgate_upstream_resumes_total") && l.contains("outcome=\"failed\"") && l.ends_with(" 1")));
    let outcome = h.ends_within(Duration::from_secs(30)).await;
    assert!(matches!(outcome, SessionOutcome::UpstreamClosed | SessionOutcome::UpstreamError), "{outcome:?}");
    // Nothing more was tried after the close.
    assert_eq!(connects.lock().unwrap().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_resumed_upstream_that_lasted_resumes_at_once_when_it_goes_away() {
    // One attempt per resume: a second loss soon after the first would end the session.
    let (mut h, offer, attempts) = resumable(|c| c.upstream.resume_attempts = 1).await;
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    h.browser_expects("voxgate.session.resumed").await;
    // A healthy stretch (a network blip after a long call, the provider's cap): the next loss is a
    // fresh resume, from its first attempt (after a jitter of at most 500 ms).
    tokio::time::sleep(Duration::from_secs(31)).await;
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    h.browser_expects("voxgate.session.resumed").await;
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_loss_soon_after_a_restore_continues_its_attempts_and_a_later_one_starts_afresh() {
    use super::Reason;
    use super::timing::{MAX_RETRY_DELAY, RETRY_WINDOW, Restored, SETTLED_AFTER, delay_before, first_attempt};
    let at = tokio::time::Instant::now();
    let last = Some(Restored { at, attempts: 2 });
    assert_eq!(first_attempt(None, Reason::UpstreamClosed, at), 1, "the session's first loss");
    assert_eq!(first_attempt(last, Reason::UpstreamClosed, at + Duration::from_secs(1)), 3);
    assert_eq!(first_attempt(last, Reason::UpstreamError, at + SETTLED_AFTER - Duration::from_millis(1)), 3);
    assert_eq!(first_attempt(last, Reason::UpstreamClosed, at + SETTLED_AFTER), 1, "a resume that held is done");
    assert_eq!(first_attempt(last, Reason::MaxAge, at + Duration::from_secs(1)), 1, "a recycle is no failure");
    // The first attempt: jittered, so sessions that lost their upstream together spread out.
    let firsts: Vec<Duration> = (0..50).map(|_| delay_before(1, 3)).collect();
    assert!(firsts.iter().all(|d| *d <= Duration::from_millis(500)), "{firsts:?}");
    assert!(firsts.iter().any(|d| *d != firsts[0]), "no jitter: {firsts:?}");
    for _ in 0..20 {
        // Three attempts: the first retry soon (a connect that failed once), the last waiting
        // for what is left of the retry window.
        let (second, third) = (delay_before(2, 3), delay_before(3, 3));
        assert!(second >= Duration::from_millis(250) && second <= Duration::from_millis(375), "{second:?}");
        assert!(third >= Duration::from_millis(9_750) && third <= Duration::from_millis(14_625), "{third:?}");
        assert!(second + third >= RETRY_WINDOW);
        // Many attempts: the doubling back-off up to its ceiling, the last one too.
        let (early, late) = (delay_before(2, 11), delay_before(8, 11));
        assert!(early >= Duration::from_millis(250) && early <= Duration::from_millis(375), "{early:?}");
        assert!(late >= Duration::from_secs(16) && late <= Duration::from_secs(24), "{late:?}");
        let capped = [9, 11].map(|attempt| delay_before(attempt, 11));
        assert!(capped.iter().all(|d| *d >= MAX_RETRY_DELAY && *d <= MAX_RETRY_DELAY * 3 / 2), "{capped:?}");
    }
}

/// After an upstream-wide blip every session resumes at once; a provider answering 429/503 must
/// not end them all a second later. The first attempt is jittered, and the attempts are spread
/// over at least [`RETRY_WINDOW`].
#[tokio::test(start_paused = true)]
async fn a_refused_resume_spreads_its_attempts_over_the_retry_window() {
    let connects = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = connects.clone();
    let connect: Connect = Arc::new(move || {
        recorded.lock().unwrap().push(tokio::time::Instant::now());
        async { Err(UpstreamError::Refused { status: 503 }) }.boxed()
    });
    let mut h = resuming_with_three_attempts(connect).await;
    let lost = tokio::time::Instant::now();
    drop(drop_model(&mut h).await);
    h.browser_expects("voxgate.session.resuming").await;
    assert_eq!(close_code(&mut h.browser).await, Some(1011));
    let at = connects.lock().unwrap().clone();
    assert_eq!(at.len(), 3, "one connection per attempt, then the session closes");
    // The harness clock runs ten times faster than real time: a little slack for the loop's own work.
    assert!(at[0] - lost <= Duration::from_millis(700), "first attempt after {:?}", at[0] - lost);
    assert!(at[2] - lost >= Duration::from_secs(10), "the attempts took only {:?}", at[2] - lost);
}
