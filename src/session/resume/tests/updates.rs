//! A `session.update` the upstream refused is answered (by its `error`) and is no part of the
//! session: a restore neither carries its settings (the new upstream would refuse the whole
//! restored configuration) nor treats it as owed an answer.

use serde_json::json;

use super::{drop_model, next_json, resumable};
use crate::session::harness::{Harness, upstream_conn};

/// A session whose client had `Be brief.` accepted and then a voice refused (`bad`, with or
/// without an `event_id` of its own); its upstream answered voxgate's tool injection.
async fn with_a_refused_update(own_id: bool) -> (Harness, super::Offer) {
    let (mut h, offer, _) = resumable(|_| {}).await;
    h.model_sends(json!({"type": "session.updated", "event_id": "e_inj", "session": {"id": "sess_1"}})).await;
    h.browser_expects("session.updated").await;
    h.browser_sends(json!({"type": "session.update", "event_id": "good", "session": {"type": "realtime", "instructions": "Be brief."}})).await;
    h.model_expects("session.update").await;
    h.model_sends(json!({"type": "session.updated", "event_id": "e1", "session": {"id": "sess_1", "instructions": "Be brief."}})).await;
    h.browser_expects("session.updated").await;
    let mut bad = json!({"type": "session.update", "session": {"type": "realtime", "audio": {"output": {"voice": "no-such-voice"}}}});
    if own_id {
        bad["event_id"] = json!("bad");
    }
    h.browser_sends(bad).await;
    let sent = h.model_expects("session.update").await;
    // Under voxgate's own id: a refusal names this update alone, whatever id the client used.
    let named = sent["event_id"].as_str().expect("a refusal must be able to name it").to_string();
    assert!(named.starts_with(crate::protocol::voxgate::STAND_IN_PREFIX), "{sent}");
    let error = json!({"type": "error", "event_id": "e2", "error": {"type": "invalid_request_error", "code": "invalid_value", "message": "Invalid voice", "param": "session.audio.output.voice", "event_id": named}});
    h.model_sends(error).await;
    let told = h.browser_expects("error").await;
    assert_eq!(told["error"]["event_id"], if own_id { json!("bad") } else { json!(null) }, "the client's own id: {told}");
    (h, offer)
}

#[tokio::test(start_paused = true)]
async fn a_setting_the_upstream_refused_is_not_restored() {
    for own_id in [true, false] {
        let (mut h, offer) = with_a_refused_update(own_id).await;
        let proxy_side = drop_model(&mut h).await;
        h.browser_expects("voxgate.session.resuming").await;
        offer.send(Ok(upstream_conn(proxy_side))).unwrap();
        let restore = h.model_expects("session.update").await;
        assert_eq!(restore["session"]["instructions"], "Be brief.", "the accepted update is restored: {restore}");
        assert!(restore["session"]["audio"]["output"]["voice"].is_null(), "the refused one is not: {restore}");
    }
}

/// The refused update was answered: the restore's `session.updated` is an echo of the restore,
/// kept from the client, not an answer the client is owed.
#[tokio::test(start_paused = true)]
async fn a_refused_update_is_not_owed_an_answer_after_a_resume() {
    let (mut h, offer) = with_a_refused_update(true).await;
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    h.model_expects("session.update").await;
    h.browser_expects("voxgate.session.resumed").await;
    h.model_sends(json!({"type": "session.created", "event_id": "n0", "session": {"id": "sess_2"}})).await;
    h.model_sends(json!({"type": "session.updated", "event_id": "n1", "session": {"id": "sess_2"}})).await;
    h.model_sends(json!({"type": "response.created", "event_id": "n2", "response": {"id": "r3"}})).await;
    let next = next_json(&mut h.browser).await;
    assert_eq!(next["type"], "response.created", "the restore's answer is kept from the client: {next}");
}

/// A client that reuses its event ids (OpenAI's examples use fixed ones): a refusal of another
/// event under the same id is not taken for a refusal of its update.
#[tokio::test(start_paused = true)]
async fn a_refusal_of_another_event_under_the_same_id_leaves_the_update_alone() {
    let (mut h, offer, _) = resumable(|_| {}).await;
    h.model_sends(json!({"type": "session.updated", "event_id": "e_inj", "session": {"id": "sess_1"}})).await;
    h.browser_expects("session.updated").await;
    h.browser_sends(json!({"type": "session.update", "event_id": "event_123", "session": {"type": "realtime", "instructions": "Be brief."}})).await;
    h.model_expects("session.update").await;
    h.browser_sends(json!({"type": "input_audio_buffer.commit", "event_id": "event_123"})).await;
    h.model_expects("input_audio_buffer.commit").await;
    let error = json!({"type": "error", "event_id": "e1", "error": {"type": "invalid_request_error", "code": "input_audio_buffer_commit_empty", "message": "buffer too small", "event_id": "event_123"}});
    h.model_sends(error).await;
    assert_eq!(h.browser_expects("error").await["error"]["event_id"], "event_123");
    h.model_sends(json!({"type": "session.updated", "event_id": "e2", "session": {"id": "sess_1", "instructions": "Be brief."}})).await;
    h.browser_expects("session.updated").await;
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    let restore = h.model_expects("session.update").await;
    assert_eq!(restore["session"]["instructions"], "Be brief.", "{restore}");
}
