//! The recycle for `upstream.max_session_age_s`: only at a moment nothing is cut off (the user's
//! turn included), and one that cannot connect leaves the session on its old upstream.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::FutureExt;
use serde_json::json;
use tokio::time::Instant;

use super::{browser_sync, resumable};
use tokio::io::DuplexStream;
use tokio_tungstenite::WebSocketStream;

use crate::session::harness::{Harness, close_code, expect, pair, upstream_conn};
use crate::upstream::UpstreamError;

/// Not recycled within `within` (the browser has been told of no resume).
async fn no_recycle_within(h: &mut crate::session::harness::Harness, within: Duration) {
    let early = tokio::time::timeout(within, expect(&mut h.browser, "voxgate.session.resuming")).await;
    assert!(early.is_err(), "recycled: {early:?}");
}

/// The recycle happens now, onto `model` (the new upstream's end, already offered).
async fn recycled_onto(h: &mut Harness, model: WebSocketStream<DuplexStream>) -> serde_json::Value {
    assert_eq!(h.browser_expects("voxgate.session.resuming").await["reason"], "max_age");
    h.model = model;
    h.browser_expects("voxgate.session.resumed").await
}

/// Push-to-talk (`turn_detection: null`): no speech events say the user is talking, the audio
/// appended since the last commit does. A recycle then would leave the start of the utterance in
/// the old upstream's buffer and commit only its tail on the new one. The commit does not end the
/// turn either: the `response.create` that follows it may come in a later read, and a recycle in
/// between would never read the old upstream's item for the committed audio, so the new upstream
/// would answer without the question. Nor does the response: with input transcription on, the
/// item comes with `transcript: null` and its text may follow the response's `response.done`.
#[tokio::test(start_paused = true)]
async fn a_push_to_talk_utterance_is_not_cut_in_two_by_the_recycle() {
    let (mut h, offer, _) = resumable(|c| c.upstream.max_session_age_s = 10).await;
    let start = Instant::now();
    let input = json!({"turn_detection": null, "transcription": {"model": "gpt-4o-transcribe"}});
    h.browser_sends(json!({"type": "session.update", "session": {"type": "realtime", "audio": {"input": input}}})).await;
    h.model_expects("session.update").await;
    // The user holds the button from 7 s (before the age, whatever its jitter) to 12 s.
    tokio::time::sleep_until(start + Duration::from_secs(7)).await;
    while start.elapsed() < Duration::from_secs(12) {
        h.browser_sends(json!({"type": "input_audio_buffer.append", "audio": "AAAA"})).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    no_recycle_within(&mut h, Duration::from_millis(50)).await;
    let (proxy_side, model) = pair(1 << 20).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    h.browser_sends(json!({"type": "input_audio_buffer.commit", "event_id": "ptt_commit"})).await;
    assert_eq!(h.model_expects("input_audio_buffer.commit").await["event_id"], "ptt_commit", "the whole utterance on the old upstream");
    no_recycle_within(&mut h, Duration::from_millis(20)).await;
    h.browser_sends(json!({"type": "response.create", "event_id": "ptt_rc"})).await;
    assert_eq!(h.model_expects("response.create").await["event_id"], "ptt_rc", "the request on the old upstream too");
    h.model_sends(json!({"type": "input_audio_buffer.committed", "event_id": "e_c", "item_id": "u1"})).await;
    h.model_sends(json!({"type": "conversation.item.created", "event_id": "e_i", "item": {"id": "u1", "type": "message", "role": "user",
        "content": [{"type": "input_audio", "transcript": null}]}})).await;
    h.browser_expects("conversation.item.created").await;
    no_recycle_within(&mut h, Duration::from_secs(1)).await;
    h.model_sends(json!({"type": "response.created", "event_id": "e_rc", "response": {"id": "r1"}})).await;
    h.model_sends(json!({"type": "response.done", "event_id": "e_rd", "response": {"id": "r1", "output": []}})).await;
    h.browser_expects("response.done").await;
    no_recycle_within(&mut h, Duration::from_secs(1)).await;
    h.model_sends(json!({"type": "conversation.item.input_audio_transcription.completed", "event_id": "e_t", "item_id": "u1",
        "content_index": 0, "transcript": "Which ward is bed 12 on?"})).await;
    assert_eq!(h.browser_expects("voxgate.session.resuming").await["reason"], "max_age");
    h.model = model;
    let restored = h.model_expects("conversation.item.create").await;
    assert_eq!(restored["item"]["id"], "u1");
    assert_eq!(restored["item"]["content"][0]["text"], "Which ward is bed 12 on?", "the question is restored");
    h.browser_expects("voxgate.session.resumed").await;
}

/// A push-to-talk commit holds the recycle like a request, and as briefly: one the upstream refused
/// (an `error` naming it: the buffer was empty) holds it no more, and one no request follows holds
/// it for the request answer time only.
#[tokio::test(start_paused = true)]
async fn a_push_to_talk_commit_holds_the_recycle_until_refused_or_for_the_answer_time_only() {
    let (mut h, offer, _) = resumable(|c| c.upstream.max_session_age_s = 10).await;
    h.browser_sends(json!({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {"turn_detection": null}}}}))
        .await;
    h.model_expects("session.update").await;
    h.browser_sends(json!({"type": "input_audio_buffer.append", "audio": "AAAA"})).await;
    tokio::time::sleep(Duration::from_secs(11)).await;
    h.browser_sends(json!({"type": "input_audio_buffer.commit", "event_id": "empty"})).await;
    h.model_expects("input_audio_buffer.commit").await;
    no_recycle_within(&mut h, Duration::from_secs(1)).await;
    let (proxy_side, model) = pair(1 << 20).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    h.model_sends(json!({"type": "error", "event_id": "e", "error": {"type": "invalid_request_error",
        "code": "input_audio_buffer_commit_empty", "message": "empty", "event_id": "empty"}})).await;
    h.browser_expects("error").await;
    let refused = Instant::now();
    recycled_onto(&mut h, model).await;
    assert!(refused.elapsed() < Duration::from_secs(1), "recycled {:?} after the refusal", refused.elapsed());

    // On the new upstream, just before its age (9 s at the earliest), a commit no request follows.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (proxy_side, model) = pair(1 << 20).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    let committed = Instant::now();
    h.browser_sends(json!({"type": "input_audio_buffer.commit", "event_id": "alone"})).await;
    h.model_expects("input_audio_buffer.commit").await;
    h.browser_expects("voxgate.session.resuming").await;
    assert!(committed.elapsed() >= Duration::from_secs(15) && committed.elapsed() < Duration::from_secs(16), "after {:?}", committed.elapsed());
    h.model = model;
    h.browser_expects("voxgate.session.resumed").await;
}

/// The upstream reports the user's audio item `item` (its transcript still to come, as OpenAI
/// sends it), then a response to it.
async fn answered_without_transcript(h: &mut Harness, item: &str) {
    h.model_sends(json!({"type": "conversation.item.created", "event_id": "e_i", "item": {"id": item, "type": "message", "role": "user",
        "content": [{"type": "input_audio", "transcript": null}]}})).await;
    h.model_sends(json!({"type": "response.created", "event_id": "e_rc", "response": {"id": "r"}})).await;
    h.model_sends(json!({"type": "response.done", "event_id": "e_rd", "response": {"id": "r", "output": []}})).await;
}

/// A transcript the upstream never sends (or reports `.failed`) holds the recycle for a while
/// only: a failure ends the wait at once, and without either the recycle happens 15 s after the
/// item, with no frame needed. Input transcription must be on: without it no transcript is owed.
#[tokio::test(start_paused = true)]
async fn a_transcript_that_never_comes_holds_the_recycle_for_a_while_only() {
    let (mut h, offer, _) = resumable(|c| c.upstream.max_session_age_s = 10).await;
    let transcribed = |on: bool| {
        let transcription = if on { json!({"model": "gpt-4o-transcribe"}) } else { json!(null) };
        json!({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {"transcription": transcription}}}})
    };
    h.browser_sends(transcribed(true)).await;
    h.model_expects("session.update").await;
    // Just before the age (9 s at the earliest): the recycle falls due while the transcript is owed.
    tokio::time::sleep(Duration::from_secs(8)).await;
    answered_without_transcript(&mut h, "u1").await;
    h.browser_expects("response.done").await;
    no_recycle_within(&mut h, Duration::from_secs(4)).await;
    let (proxy_side, model) = pair(1 << 20).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    h.model_sends(json!({"type": "conversation.item.input_audio_transcription.failed", "event_id": "e_f", "item_id": "u1",
        "content_index": 0, "error": {"type": "transcription_error", "message": "failed"}})).await;
    let failed = Instant::now();
    recycled_onto(&mut h, model).await;
    assert!(failed.elapsed() < Duration::from_secs(1), "recycled {:?} after the failure", failed.elapsed());

    // On the new upstream, just before its age (9 s at the earliest), a transcript that never comes.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (proxy_side, model) = pair(1 << 20).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    let created = Instant::now();
    answered_without_transcript(&mut h, "u2").await;
    h.browser_expects("voxgate.session.resuming").await;
    assert!(created.elapsed() >= Duration::from_secs(15) && created.elapsed() < Duration::from_secs(16), "after {:?}", created.elapsed());
    h.model = model;
    h.browser_expects("voxgate.session.resumed").await;

    // Transcription off: an audio item with no transcript is owed none, and holds nothing.
    h.browser_sends(transcribed(false)).await;
    h.model_expects("session.update").await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (proxy_side, model) = pair(1 << 20).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    answered_without_transcript(&mut h, "u3").await;
    h.browser_expects("response.done").await;
    let done = Instant::now();
    recycled_onto(&mut h, model).await;
    assert!(done.elapsed() < Duration::from_secs(3), "recycled {:?} after the response", done.elapsed());
}

/// Transcripts that never come, for items less than 15 s apart (audio items the client created
/// itself, or an update the upstream refused), hold the recycle off 15 s past its due time at
/// most, not for good.
#[tokio::test(start_paused = true)]
async fn owed_transcripts_hold_the_recycle_at_most_a_while_past_its_due_time() {
    let (mut h, offer, _) = resumable(|c| c.upstream.max_session_age_s = 10).await;
    let start = Instant::now();
    h.browser_sends(json!({"type": "session.update", "session": {"type": "realtime", "audio": {"input":
        {"transcription": {"model": "gpt-4o-transcribe"}}}}}))
    .await;
    h.model_expects("session.update").await;
    let (proxy_side, _model) = pair(1 << 20).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let mut recycled = None;
    for item in ["u1", "u2", "u3", "u4"] {
        answered_without_transcript(&mut h, item).await;
        if tokio::time::timeout(Duration::from_secs(10), expect(&mut h.browser, "voxgate.session.resuming")).await.is_ok() {
            recycled = Some(start.elapsed());
            break;
        }
    }
    // Due at 9-10 s (the age less its jitter): by 25 s at the latest.
    let at = recycled.expect("recycled while transcripts kept being owed");
    assert!(at <= Duration::from_secs(25) + Duration::from_millis(500), "recycled at {at:?}");
}

/// Server VAD: when speech stops the server commits the audio and starts its response a moment
/// later; the recycle waits out the same grace voxgate gives the server before asking for a
/// response, and then needs no other event to happen.
#[tokio::test(start_paused = true)]
async fn the_recycle_waits_out_the_speech_grace() {
    let (mut h, offer, _) = resumable(|c| c.upstream.max_session_age_s = 10).await;
    h.model_sends(json!({"type": "input_audio_buffer.speech_started", "event_id": "e", "audio_start_ms": 0, "item_id": "u1"})).await;
    h.browser_expects("input_audio_buffer.speech_started").await;
    tokio::time::sleep(Duration::from_secs(11)).await;
    no_recycle_within(&mut h, Duration::from_millis(50)).await;
    let (proxy_side, model) = pair(1 << 20).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    h.model_sends(json!({"type": "input_audio_buffer.speech_stopped", "event_id": "e", "audio_end_ms": 9000, "item_id": "u1"})).await;
    h.browser_expects("input_audio_buffer.speech_stopped").await;
    no_recycle_within(&mut h, Duration::from_millis(500)).await;
    recycled_onto(&mut h, model).await;
}

/// A client `response.create` the upstream has not started yet holds the recycle too, until its
/// response is created.
#[tokio::test(start_paused = true)]
async fn a_client_request_not_yet_started_holds_the_recycle() {
    let (mut h, offer, _) = resumable(|c| c.upstream.max_session_age_s = 10).await;
    h.model_sends(json!({"type": "input_audio_buffer.speech_started", "event_id": "e", "audio_start_ms": 0, "item_id": "u1"})).await;
    h.browser_expects("input_audio_buffer.speech_started").await;
    tokio::time::sleep(Duration::from_secs(11)).await;
    h.model_sends(json!({"type": "input_audio_buffer.speech_stopped", "event_id": "e", "audio_end_ms": 9000, "item_id": "u1"})).await;
    h.browser_sends(json!({"type": "response.create", "event_id": "client_rc"})).await;
    assert_eq!(h.model_expects("response.create").await["event_id"], "client_rc");
    no_recycle_within(&mut h, Duration::from_secs(2)).await;
    let (proxy_side, model) = pair(1 << 20).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    h.model_sends(json!({"type": "response.created", "event_id": "e_rc", "response": {"id": "r1"}})).await;
    h.model_sends(json!({"type": "response.done", "event_id": "e_rd", "response": {"id": "r1", "output": []}})).await;
    h.browser_expects("response.done").await;
    recycled_onto(&mut h, model).await;
}

/// A recycle is planned: the old upstream still works. One that cannot connect (the provider
/// answers 429) goes back to the old upstream, with what the client sent meanwhile, and is tried
/// again later; the session is not closed.
#[tokio::test(start_paused = true)]
async fn a_recycle_that_cannot_connect_goes_back_to_the_old_upstream_and_tries_again_later() {
    let (mut h, offer, attempts) = resumable(|c| c.upstream.max_session_age_s = 10).await;
    assert_eq!(h.browser_expects("voxgate.session.resuming").await["reason"], "max_age");
    h.browser_sends(json!({"type": "input_audio_buffer.append", "event_id": "in_gap", "audio": "AAAA"})).await;
    browser_sync(&mut h).await;
    offer.send(Err(UpstreamError::Refused { status: 429 })).unwrap();
    let resumed = h.browser_expects("voxgate.session.resumed").await;
    assert_eq!((resumed["reason"].as_str(), resumed["items_restored"].as_u64()), (Some("max_age"), Some(0)));
    assert_eq!(h.model_expects("input_audio_buffer.append").await["event_id"], "in_gap");
    // The old upstream is the session's again: read and written.
    h.model_sends(json!({"type": "response.output_text.delta", "event_id": "probe", "delta": "x"})).await;
    h.browser_expects("response.output_text.delta").await;
    h.browser_sends(json!({"type": "input_audio_buffer.append", "event_id": "after", "audio": "AAAA"})).await;
    assert_eq!(h.model_expects("input_audio_buffer.append").await["event_id"], "after");
    // Tried again later, and then it works.
    let (proxy_side, model) = pair(1 << 20).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    assert_eq!(h.browser_expects("voxgate.session.resuming").await["reason"], "max_age");
    assert_eq!(close_code(&mut h.model).await, Some(1000), "the old upstream is closed normally");
    h.model = model;
    h.browser_expects("voxgate.session.resumed").await;
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
}

/// A recycle that cannot connect goes back to an old upstream that may be dead (half-open TCP,
/// every connect refused meanwhile): the ping left unanswered before the recycle still counts, so
/// retries that come more often than the pong timeout do not hide it, and the session resumes for
/// an upstream error instead of going silent.
#[tokio::test(start_paused = true)]
async fn a_postponed_recycle_keeps_the_unanswered_ping_so_a_dead_old_upstream_is_found() {
    let connect: super::Connect = std::sync::Arc::new(|| async { Err(UpstreamError::Refused { status: 429 }) }.boxed());
    let mut h = crate::session::harness::start_with(
        |c| {
            c.upstream.resume = true;
            c.upstream.max_session_age_s = 10;
            c.server.ping_interval_ms = 20_000;
        },
        1 << 20,
        Some(connect),
        Vec::new(),
    )
    .await;
    let start = Instant::now();
    // The model never reads again, so never answers a ping.
    let reason = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let resuming = expect(&mut h.browser, "voxgate.session.resuming").await;
            if resuming["reason"] != "max_age" {
                return resuming["reason"].clone();
            }
        }
    })
    .await
    .expect("the dead upstream was never noticed");
    assert_eq!(reason, "upstream_error");
    // Pinged at 20 s, found unanswered on the tick at 60 s.
    assert!(start.elapsed() <= Duration::from_secs(70), "noticed after {:?}", start.elapsed());
}

/// A client `session.update` still in the old upstream's queue when a recycle begins (its kernel
/// buffer full for a moment) is not dropped when the recycle cannot connect: with no restore to
/// carry the configuration, the old upstream must still get the update, in its place.
#[tokio::test(start_paused = true)]
async fn a_queued_session_update_reaches_the_old_upstream_when_the_recycle_cannot_connect() {
    let (connect, offer, _) = super::connector();
    let mut h = crate::session::harness::start_with(
        |c| {
            c.upstream.resume = true;
            c.upstream.max_session_age_s = 10;
        },
        16 * 1024,
        Some(connect),
        Vec::new(),
    )
    .await;
    // The model reads nothing for now: the first frame fills the socket, the update waits in the queue.
    let big = json!({"type": "input_audio_buffer.append", "event_id": "fill_socket", "audio": "A".repeat(crate::session::outbox::OUTBOX_BYTES)});
    h.browser_sends(big).await;
    h.browser_sends(json!({"type": "session.update", "event_id": "queued_update", "session": {"type": "realtime", "instructions": "Queued."}}))
        .await;
    browser_sync(&mut h).await;
    assert_eq!(h.browser_expects("voxgate.session.resuming").await["reason"], "max_age");
    offer.send(Err(UpstreamError::Refused { status: 429 })).unwrap();
    h.browser_expects("voxgate.session.resumed").await;
    h.browser_sends(json!({"type": "input_audio_buffer.append", "event_id": "after", "audio": "AAAA"})).await;
    let mut seen = Vec::new();
    loop {
        let frame = super::next_json(&mut h.model).await;
        let id = frame["event_id"].as_str().unwrap_or_default().to_string();
        seen.push(if frame["type"] == "session.update" { format!("session.update:{}", frame["session"]["instructions"].as_str().unwrap_or_default()) } else { id.clone() });
        if id == "after" {
            break;
        }
    }
    assert_eq!(seen, ["fill_socket", "session.update:Queued.", "after"]);
}

/// Push-to-talk audio holds the recycle off for a while only: a client whose button is stuck (or
/// that streams all the time and commits on its own VAD) must not keep the session from ever
/// being recycled, or it meets the provider's cap mid-turn. The cap needs no frame to fire.
#[tokio::test(start_paused = true)]
async fn push_to_talk_audio_left_uncommitted_holds_the_recycle_off_only_for_a_while() {
    let (mut h, offer, _) = resumable(|c| c.upstream.max_session_age_s = 10).await;
    let start = Instant::now();
    h.browser_sends(json!({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {"turn_detection": null}}}}))
        .await;
    h.model_expects("session.update").await;
    h.browser_sends(json!({"type": "input_audio_buffer.append", "audio": "AAAA"})).await;
    let (proxy_side, model) = pair(1 << 20).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    // Nothing more from either end: the hold's end alone lets the recycle happen.
    let resuming = tokio::time::timeout(Duration::from_secs(40), h.browser_expects("voxgate.session.resuming")).await;
    assert!(resuming.is_ok(), "never recycled");
    assert!(start.elapsed() >= Duration::from_secs(23) && start.elapsed() <= Duration::from_secs(26), "recycled after {:?}", start.elapsed());
    h.model = model;
    h.browser_expects("voxgate.session.resumed").await;
}

/// A push-to-talk client that streams audio all the time is recycled too, once the hold is over.
#[tokio::test(start_paused = true)]
async fn a_push_to_talk_client_streaming_all_the_time_is_still_recycled() {
    let (mut h, offer, _) = resumable(|c| c.upstream.max_session_age_s = 10).await;
    let start = Instant::now();
    h.browser_sends(json!({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {"turn_detection": null}}}}))
        .await;
    h.model_expects("session.update").await;
    let (proxy_side, model) = pair(1 << 20).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    loop {
        h.browser_sends(json!({"type": "input_audio_buffer.append", "audio": "AAAA"})).await;
        if tokio::time::timeout(Duration::from_millis(100), expect(&mut h.browser, "voxgate.session.resuming")).await.is_ok() {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(40), "never recycled");
    }
    assert!(start.elapsed() <= Duration::from_secs(26), "recycled after {:?}", start.elapsed());
    h.model = model;
    h.browser_expects("voxgate.session.resumed").await;
}

/// Sessions that began together (reconnected together after a drain) do not all recycle at the
/// same moment: each upstream's age is the setting less up to a tenth of it, at random.
#[test]
fn the_recycle_age_is_jittered_within_the_last_tenth_of_the_setting() {
    let max_age = Duration::from_secs(3300);
    let ages: Vec<Duration> = (0..50).map(|_| super::super::recycle_age(max_age)).collect();
    assert!(ages.iter().all(|age| *age <= max_age && *age >= max_age - max_age / 10), "{ages:?}");
    assert!(ages.iter().any(|age| *age != ages[0]), "no jitter: {ages:?}");
}
