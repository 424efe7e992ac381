//! What the client sees of a new upstream's echoes: only the restore's own are kept from it.

use serde_json::json;

use super::{connector, drop_model, message, next_json, resumable};
use crate::session::harness::{Harness, TOOL, launch, upstream_conn};

/// The first upstream goes away before its `session.created`: the client has seen none, so the
/// new upstream's is no echo. It is forwarded, and the server tools are injected then (the
/// restore had no configuration to send), so the session ends up configured as without the loss.
#[tokio::test(start_paused = true)]
async fn an_upstream_lost_before_its_session_created_leaves_the_new_one_configured() {
    let (connect, offer, _) = connector();
    let mut h = launch(|c| c.upstream.resume = true, 1 << 20, Some(connect), Vec::new()).await;
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    h.browser_expects("voxgate.session.resumed").await;
    h.model_sends(json!({"type": "session.created", "event_id": "n0", "session": {"id": "sess_2", "tools": []}})).await;
    assert_eq!(next_json(&mut h.browser).await["type"], "session.created");
    let update = h.model_expects("session.update").await;
    assert!(update["session"]["tools"].as_array().unwrap().iter().any(|t| t["name"] == TOOL), "{update}");
    h.browser_expects("voxgate.session.ready").await;
    // A later resume keeps that upstream's successor's `session.created` from the client again.
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    assert_eq!(h.model_expects("session.update").await["session"]["tools"].as_array().map(Vec::len), Some(1));
    h.browser_expects("voxgate.session.resumed").await;
    h.model_sends(json!({"type": "session.created", "event_id": "n1", "session": {"id": "sess_3", "tools": []}})).await;
    h.model_sends(json!({"type": "response.created", "event_id": "n2", "response": {"id": "r3"}})).await;
    assert_eq!(next_json(&mut h.browser).await["type"], "response.created");
}

/// A session whose one item, `u1`, was restored on a new upstream.
async fn restored_u1() -> Harness {
    let (mut h, offer, _) = resumable(|_| {}).await;
    h.model_sends(message("u1", "user", "input_text", "What is the dose?")).await;
    h.browser_expects("conversation.item.done").await;
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    assert_eq!(h.model_expects("conversation.item.create").await["item"]["id"], "u1");
    h.browser_expects("voxgate.session.resumed").await;
    h
}

/// Only the restore's echoes of a restored item (`conversation.item.created/added/done`) are kept
/// from the client: the answer to its own `conversation.item.retrieve` of that item is its own.
#[tokio::test(start_paused = true)]
async fn a_restored_item_the_client_retrieves_reaches_the_client() {
    let mut h = restored_u1().await;
    let item = json!({"id": "u1", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is the dose?"}]});
    h.model_sends(json!({"type": "conversation.item.added", "event_id": "n1", "previous_item_id": null, "item": item})).await;
    h.browser_sends(json!({"type": "conversation.item.retrieve", "event_id": "get_u1", "item_id": "u1"})).await;
    assert_eq!(h.model_expects("conversation.item.retrieve").await["event_id"], "get_u1");
    h.model_sends(json!({"type": "conversation.item.retrieved", "event_id": "n2", "item": item})).await;
    let retrieved = next_json(&mut h.browser).await;
    assert_eq!((retrieved["type"].as_str(), retrieved["item"]["id"].as_str()), (Some("conversation.item.retrieved"), Some("u1")), "{retrieved}");
}

/// A client that deletes a restored item and creates a new one under its id sees the new one:
/// only the restore's echoes are kept from it.
#[tokio::test(start_paused = true)]
async fn an_item_re_created_under_a_restored_items_id_reaches_the_client() {
    let mut h = restored_u1().await;
    let item = |text: &str| json!({"id": "u1", "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]});
    h.model_sends(json!({"type": "conversation.item.added", "event_id": "n1", "previous_item_id": null, "item": item("What is the dose?")})).await;
    h.model_sends(json!({"type": "conversation.item.deleted", "event_id": "n2", "item_id": "u1"})).await;
    assert_eq!(next_json(&mut h.browser).await["event_id"], "n2");
    h.model_sends(json!({"type": "conversation.item.added", "event_id": "n3", "previous_item_id": null, "item": item("For a child?")})).await;
    assert_eq!(next_json(&mut h.browser).await["event_id"], "n3", "the new item is the client's");
}

/// The new upstream's refusal of the restore's `session.update`.
fn restore_refused() -> serde_json::Value {
    json!({"type": "error", "event_id": "n_err", "error": {"type": "invalid_request_error", "code": "invalid_value",
        "message": "Invalid value.", "event_id": "voxgate_restore_1"}})
}

/// The new upstream refused the restore's configuration: it runs on its defaults. voxgate's tools
/// are injected again, the client is told to send its configuration again, and the answer to its
/// next `session.update` is its own (it was kept back as the restore's echo, which never comes).
async fn refused_then_reinjected(h: &mut Harness) {
    h.model_sends(restore_refused()).await;
    let told = next_json(&mut h.browser).await;
    assert_eq!((told["type"].as_str(), told["error"]["code"].as_str()), (Some("error"), Some("voxgate_resume_configuration_refused")), "{told}");
    let injected = h.model_expects("session.update").await;
    assert!(injected["session"]["tools"].as_array().unwrap().iter().any(|t| t["name"] == TOOL), "{injected}");
    h.model_sends(json!({"type": "session.updated", "event_id": "n_inj", "session": {"id": "sess_2"}})).await;
    assert_eq!(next_json(&mut h.browser).await["event_id"], "n_inj", "the injection's answer is forwarded, as on a new session");
    h.browser_sends(json!({"type": "session.update", "event_id": "mine", "session": {"type": "realtime", "instructions": "Be brief."}})).await;
    let mine = h.model_expects("session.update").await;
    assert!(mine["event_id"].as_str().is_some_and(|id| id.starts_with(crate::protocol::voxgate::STAND_IN_PREFIX)), "{mine}");
    h.model_sends(json!({"type": "session.updated", "event_id": "n1", "session": {"id": "sess_2", "instructions": "Be brief."}})).await;
    let next = next_json(&mut h.browser).await;
    assert_eq!((next["type"].as_str(), next["event_id"].as_str()), (Some("session.updated"), Some("n1")), "{next}");
}

/// With every update answered before the loss.
#[tokio::test(start_paused = true)]
async fn a_refused_restore_configuration_is_replaced_by_the_tools_and_told_to_the_client() {
    let (mut h, offer, _) = resumable(|_| {}).await;
    h.model_sends(json!({"type": "session.updated", "event_id": "e_inj", "session": {"id": "sess_1"}})).await;
    h.browser_expects("session.updated").await;
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    assert_eq!(h.model_expects("session.update").await["event_id"], "voxgate_restore_1");
    h.browser_expects("voxgate.session.resumed").await;
    refused_then_reinjected(&mut h).await;
}

/// With an update the old upstream never answered (here voxgate's tool injection): the restore's
/// answer was owed to it, and the refusal takes its place.
#[tokio::test(start_paused = true)]
async fn a_refused_restore_configuration_owed_to_an_update_is_replaced_the_same_way() {
    let mut h = restored_u1().await;
    refused_then_reinjected(&mut h).await;
}

/// After a refused restore the upstream runs on its defaults: the next restore sends those (and
/// voxgate's tools), not the refused configuration again, refused again at every loss.
#[tokio::test(start_paused = true)]
async fn a_refused_configuration_is_not_sent_again_by_the_next_restore() {
    let (mut h, offer, _) = resumable(|_| {}).await;
    h.model_sends(json!({"type": "session.updated", "event_id": "e_inj", "session": {"id": "sess_1"}})).await;
    h.browser_expects("session.updated").await;
    h.browser_sends(json!({"type": "session.update", "event_id": "c1", "session": {"type": "realtime", "audio": {"output": {"voice": "retired-voice"}}}})).await;
    h.model_expects("session.update").await;
    h.model_sends(json!({"type": "session.updated", "event_id": "e1", "session": {"id": "sess_1"}})).await;
    h.browser_expects("session.updated").await;
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    let restore = h.model_expects("session.update").await;
    assert_eq!(restore["session"]["audio"]["output"]["voice"], "retired-voice", "{restore}");
    h.browser_expects("voxgate.session.resumed").await;
    h.model_sends(restore_refused()).await;
    h.browser_expects("error").await;
    h.model_expects("session.update").await;
    h.model_sends(json!({"type": "session.updated", "event_id": "n_inj", "session": {"id": "sess_2"}})).await;
    h.browser_expects("session.updated").await;
    // Past the last restore's settling time, so the next loss starts afresh.
    tokio::time::sleep(std::time::Duration::from_secs(120)).await;
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    let restore = h.model_expects("session.update").await;
    assert!(restore["session"]["audio"].is_null(), "the refused configuration is not sent again: {restore}");
    assert!(restore["session"]["tools"].as_array().unwrap().iter().any(|t| t["name"] == TOOL), "{restore}");
}
