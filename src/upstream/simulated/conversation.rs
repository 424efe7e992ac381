//! The default conversation of a simulated session: the ordered items (messages, function calls,
//! function-call outputs) that `previous_item_id`, retrieve/truncate/delete and the next response
//! work from. Audio bytes are never kept, only item metadata (and how much audio the model sent for
//! its items, which a truncate is measured against), so a long session stays small.

use std::collections::HashMap;

use serde_json::Value;

use super::events::new_id;

/// Items kept; older ones are forgotten first (the real service truncates old turns too).
const MAX_ITEMS: usize = 500;
/// Text kept across all items, in bytes of their strings: a client may create items of several
/// MiB each, and 500 of them would hold gigabytes for one simulated session.
const MAX_TEXT_BYTES: usize = 16 * 1024 * 1024;

/// Why an item could not be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    #[error("previous_item_id does not name an item in the conversation")]
    PreviousNotFound,
    #[error("an item with this id already exists")]
    DuplicateId,
}

/// The conversation: items in order.
#[derive(Debug)]
pub struct Conversation {
    /// `conv_…`, reported in every response object.
    pub id: String,
    items: Vec<Value>,
    /// Milliseconds of audio the model sent, by item id. Kept beside the items, not in them: items
    /// go back to the client as they are (`conversation.item.retrieved`).
    audio_ms: HashMap<String, u64>,
}

impl Default for Conversation {
    fn default() -> Self {
        Self { id: new_id("conv"), items: Vec::new(), audio_ms: HashMap::new() }
    }
}

impl Conversation {
    /// Place `item` after `previous` (`None` = at the end, `"root"` = at the start) and return the
    /// id of the item now before it, for `previous_item_id`.
    pub fn place(&mut self, previous: Option<&str>, item: Value) -> Result<Option<String>, PlaceError> {
        if let Some(id) = item_id(&item)
            && self.position(id).is_some()
        {
            return Err(PlaceError::DuplicateId);
        }
        // A new item may reuse the id of a forgotten one; it has sent no audio.
        if let Some(id) = item_id(&item) {
            self.audio_ms.remove(id);
        }
        let at = match previous {
            None => self.items.len(),
            Some("root") => 0,
            Some(id) => self.position(id).ok_or(PlaceError::PreviousNotFound)? + 1,
        };
        self.items.insert(at, item);
        let before = at.checked_sub(1).and_then(|i| self.items.get(i)).and_then(item_id).map(str::to_string);
        if self.items.len() > MAX_ITEMS {
            self.items.remove(0);
        }
        self.forget_beyond_text_budget();
        Ok(before)
    }

    /// Forget the oldest items while the text kept is over [`MAX_TEXT_BYTES`] (the newest stays).
    fn forget_beyond_text_budget(&mut self) {
        let mut kept: usize = self.items.iter().map(text_bytes).sum();
        while kept > MAX_TEXT_BYTES && self.items.len() > 1 {
            kept -= text_bytes(&self.items.remove(0));
        }
    }

    /// Replace the item with the same id (its finished form); returns the id before it.
    /// An item that is not (or no longer) present is appended.
    pub fn finish(&mut self, item: Value) -> Option<String> {
        let Some(position) = item_id(&item).and_then(|id| self.position(id)) else {
            return self.place(None, item).ok().flatten();
        };
        self.items[position] = item;
        let before = position.checked_sub(1).and_then(|i| self.items.get(i)).and_then(item_id).map(str::to_string);
        self.forget_beyond_text_budget();
        before
    }

    /// Count `ms` more audio sent for an item of the conversation (other ids are ignored).
    pub fn add_audio(&mut self, id: &str, ms: u64) {
        if self.position(id).is_none() {
            return;
        }
        *self.audio_ms.entry(id.to_string()).or_default() += ms;
        if self.audio_ms.len() > MAX_ITEMS {
            let items = &self.items;
            self.audio_ms.retain(|id, _| items.iter().any(|item| item_id(item) == Some(id)));
        }
    }

    /// Milliseconds of audio the model sent for an item (`None`: none recorded, e.g. a client's item).
    pub fn audio_ms(&self, id: &str) -> Option<u64> {
        self.audio_ms.get(id).copied()
    }

    /// After a truncate, the item's audio ends at `ms`.
    pub fn set_audio_ms(&mut self, id: &str, ms: u64) {
        self.audio_ms.insert(id.to_string(), ms);
    }

    pub fn get(&self, id: &str) -> Option<&Value> {
        self.position(id).and_then(|i| self.items.get(i))
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut Value> {
        self.position(id).and_then(|i| self.items.get_mut(i))
    }

    /// Remove an item; `false` if there was none with that id.
    pub fn remove(&mut self, id: &str) -> bool {
        match self.position(id) {
            Some(position) => {
                self.items.remove(position);
                self.audio_ms.remove(id);
                true
            }
            None => false,
        }
    }

    /// The `function_call` item with this `call_id`.
    pub fn find_call(&self, call_id: &str) -> Option<&Value> {
        self.items
            .iter()
            .rev()
            .find(|item| item["type"] == "function_call" && item["call_id"].as_str() == Some(call_id))
    }

    /// The parsed output of the latest call to `tool` that has one (for follow-ups such as "read it").
    pub fn latest_output_of(&self, tool: &str) -> Option<Value> {
        self.items.iter().rev().filter(|item| item["type"] == "function_call_output").find_map(|output| {
            let call = output["call_id"].as_str().and_then(|id| self.find_call(id))?;
            (call["name"] == tool).then(|| serde_json::from_str(output["output"].as_str()?).ok()).flatten()
        })
    }

    /// The items since the model last produced anything (an assistant message or a function call):
    /// what the next response has to answer.
    pub fn since_last_model_turn(&self) -> &[Value] {
        let start = self.items.iter().rposition(is_model_output).map_or(0, |i| i + 1);
        &self.items[start..]
    }

    /// Characters of text in the conversation, for the usage estimate.
    pub fn text_chars(&self) -> usize {
        self.items.iter().map(|item| item.to_string().len()).sum()
    }

    fn position(&self, id: &str) -> Option<usize> {
        self.items.iter().position(|item| item_id(item) == Some(id))
    }
}

/// Bytes of the strings (keys included) in a value: its text, counted without serialising it.
fn text_bytes(value: &Value) -> usize {
    match value {
        Value::String(text) => text.len(),
        Value::Array(values) => values.iter().map(text_bytes).sum(),
        Value::Object(fields) => fields.iter().map(|(key, value)| key.len() + text_bytes(value)).sum(),
        _ => 8,
    }
}

/// An item's `id`.
pub fn item_id(item: &Value) -> Option<&str> {
    item.get("id").and_then(Value::as_str)
}

fn is_model_output(item: &Value) -> bool {
    item["type"] == "function_call" || (item["type"] == "message" && item["role"] == "assistant")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn text_beyond_the_budget_is_forgotten_oldest_first() {
        let mut conversation = Conversation::default();
        let big = "x".repeat(4 * 1024 * 1024);
        for n in 0..10 {
            let item = json!({"id": format!("item_{n}"), "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": big}]});
            conversation.place(None, item).unwrap();
        }
        let kept: usize = conversation.items.iter().map(text_bytes).sum();
        assert!(kept <= MAX_TEXT_BYTES, "{kept}");
        // The newest are kept, the oldest forgotten.
        assert!(conversation.get("item_9").is_some() && conversation.get("item_0").is_none());
        assert_eq!(conversation.items.len(), 3);
    }

    fn message(id: &str, role: &str) -> Value {
        json!({"id": id, "type": "message", "role": role, "content": []})
    }

    #[test]
    fn placing_reports_the_previous_item() {
        let mut conversation = Conversation::default();
        assert_eq!(conversation.place(None, message("a", "user")), Ok(None));
        assert_eq!(conversation.place(None, message("b", "assistant")), Ok(Some("a".into())));
        assert_eq!(conversation.place(Some("root"), message("c", "user")), Ok(None));
        assert_eq!(conversation.place(Some("a"), message("d", "user")), Ok(Some("a".into())));
        assert_eq!(conversation.place(Some("zzz"), message("e", "user")), Err(PlaceError::PreviousNotFound));
        assert_eq!(conversation.place(None, message("a", "user")), Err(PlaceError::DuplicateId));
        let order: Vec<&str> = conversation.since_last_model_turn().iter().filter_map(item_id).collect();
        assert!(order.is_empty(), "the assistant item b is last: {order:?}");
    }

    #[test]
    fn trailing_items_start_after_the_last_model_output() {
        let mut conversation = Conversation::default();
        conversation.place(None, message("u1", "user")).expect("placed");
        conversation
            .place(None, json!({"id": "f1", "type": "function_call", "call_id": "call_1", "name": "x"}))
            .expect("placed");
        conversation
            .place(None, json!({"id": "o1", "type": "function_call_output", "call_id": "call_1", "output": "{}"}))
            .expect("placed");
        let trailing: Vec<&str> = conversation.since_last_model_turn().iter().filter_map(item_id).collect();
        assert_eq!(trailing, ["o1"]);
        assert_eq!(conversation.find_call("call_1").and_then(item_id), Some("f1"));
        assert!(conversation.remove("o1"));
        assert!(conversation.since_last_model_turn().is_empty());
    }

    #[test]
    fn finishing_replaces_in_place_and_old_items_are_forgotten() {
        let mut conversation = Conversation::default();
        conversation.place(None, message("a", "user")).expect("placed");
        conversation.place(None, message("b", "assistant")).expect("placed");
        let before =
            conversation.finish(json!({"id": "b", "type": "message", "role": "assistant", "status": "completed"}));
        assert_eq!(before.as_deref(), Some("a"));
        assert_eq!(conversation.get("b").map(|item| item["status"].clone()), Some(json!("completed")));
        for n in 0..MAX_ITEMS + 10 {
            conversation.place(None, message(&format!("m{n}"), "user")).expect("placed");
        }
        assert!(conversation.get("a").is_none());
        assert_eq!(conversation.since_last_model_turn().len(), MAX_ITEMS);
    }
}
