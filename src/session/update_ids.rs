//! The client's own `event_id`s of the `session.update`s voxgate forwarded under ids of its own.
//!
//! Every `session.update` goes upstream with a fresh stand-in id (`voxgate_client_…`): a refusal
//! then names that one update, also when a client reuses its ids (OpenAI's examples use fixed
//! ones) or gave none. The resume relies on it to leave a refused setting out of the session it
//! restores (`resume/updates.rs`). The client's copy of the refusal names the client's own id
//! again, as the client sent it (or `null`).

use std::collections::VecDeque;

use serde_json::Value;

use crate::protocol::voxgate::MAX_ECHOED_EVENT_ID;

/// Updates remembered: as many as may wait for an answer at once (`resume/updates.rs`).
const KEPT: usize = 32;

#[derive(Default)]
pub(super) struct UpdateIds(VecDeque<(String, Value)>);

impl UpdateIds {
    /// A `session.update` went upstream as `stand_in`; `client` is its own `event_id` (`Null`
    /// when it had none). Kept only as far as it is ever echoed: a string of at most
    /// [`MAX_ECHOED_EVENT_ID`] bytes, a number or a boolean; anything else (a client may send an
    /// id of megabytes, or an array) as `Null`.
    pub(super) fn forwarded(&mut self, stand_in: String, client: Value) {
        let client = match client {
            Value::String(id) if id.len() > MAX_ECHOED_EVENT_ID => Value::Null,
            Value::Array(_) | Value::Object(_) => Value::Null,
            small => small,
        };
        if self.0.len() == KEPT {
            self.0.pop_front();
        }
        self.0.push_back((stand_in, client));
    }

    /// The client's id for `stand_in` (`Null` for one it did not send, or that is not echoed);
    /// `None` when `stand_in` is no update's.
    pub(super) fn client_id(&self, stand_in: &str) -> Option<Value> {
        self.0.iter().find(|(id, _)| id == stand_in).map(|(_, client)| client.clone())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_clients_id_comes_back_as_it_was_sent() {
        let mut ids = UpdateIds::default();
        ids.forwarded("voxgate_client_1".into(), json!("mine"));
        ids.forwarded("voxgate_client_2".into(), json!(5));
        ids.forwarded("voxgate_client_3".into(), Value::Null);
        ids.forwarded("voxgate_client_4".into(), json!("x".repeat(MAX_ECHOED_EVENT_ID + 1)));
        ids.forwarded("voxgate_client_5".into(), json!([0, 0, 0]));
        assert_eq!(ids.client_id("voxgate_client_1"), Some(json!("mine")));
        assert_eq!(ids.client_id("voxgate_client_2"), Some(json!(5)));
        assert_eq!(ids.client_id("voxgate_client_3"), Some(Value::Null));
        assert_eq!(ids.client_id("voxgate_client_4"), Some(Value::Null));
        assert_eq!(ids.client_id("voxgate_client_5"), Some(Value::Null), "not kept, not echoed");
        assert_eq!(ids.client_id("voxgate_client_9"), None);
        for i in 10..10 + KEPT {
            ids.forwarded(format!("voxgate_client_{i}"), json!(i));
        }
        assert_eq!(ids.client_id("voxgate_client_1"), None, "bounded");
    }
}
