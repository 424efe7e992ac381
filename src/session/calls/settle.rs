//! Calls whose arguments are final but whose item has not ended yet.
//!
//! The API sends `response.function_call_arguments.done` also for a call cut off with its response
//! (a barge-in, `max_output_tokens`, a failure); only the item's status, in `conversation.item.done`
//! and `response.output_item.done` right after it, or the response's in `response.done`, tells the
//! two apart (PROTOCOL-NOTES §3.4, §4.6). So a call is held at `.done` ([`CallTable::hold`]) and
//! accepted once its item is `completed`; one whose item or response ends otherwise is forgotten.
//! A forgotten call was never accepted, so it is not a call in the sense of CONTRACT §5: no audit
//! record, no tool run, no confirmation prompt, nothing sent to a third party, no output. Nothing
//! waits for that output: the item did not complete, and the turn that cut it (the user's speech,
//! or the client) starts the next response.
//!
//! Every realtime server reports the item's end within the same moment; for a peer that never
//! does, the held call is accepted after [`SETTLE_WAIT`] (one entry in the confirmation deadline
//! queue, under a key no call id has), as it was at `.done` before.

use std::time::Duration;

use tokio::time::Instant;

use super::{Action, CallTable};

/// A held call whose item's end never came is accepted this long after its `.done`.
pub const SETTLE_WAIT: Duration = Duration::from_secs(1);

/// Deadline-queue keys of held calls start with this; call ids from the API do not.
const SETTLE_KEY: &str = "\u{0}settle\u{0}";

/// A call held between its `.done` and the end of its item.
#[derive(Debug)]
pub(super) struct Held {
    name: String,
    arguments: String,
    response_id: Option<String>,
}

impl CallTable {
    /// The model finished a call's arguments (in response `response_id`): hold it until its item
    /// ends. A call already held or accepted is ignored.
    pub fn hold(&mut self, call_id: &str, name: &str, arguments: &str, response_id: Option<&str>) -> Vec<Action> {
        if self.calls.contains_key(call_id) || self.held.contains_key(call_id) {
            return Vec::new();
        }
        let held = Held { name: name.to_string(), arguments: arguments.to_string(), response_id: response_id.map(str::to_string) };
        self.held.insert(call_id.to_string(), held);
        vec![Action::Expire { call_id: format!("{SETTLE_KEY}{call_id}"), after: SETTLE_WAIT }]
    }

    /// A held call's item ended: accepted when it `completed`, forgotten otherwise.
    pub fn settle(&mut self, call_id: &str, completed: bool, now: Instant) -> Vec<Action> {
        let Some(held) = self.held.remove(call_id) else { return Vec::new() };
        if completed {
            return self.accept(call_id, &held.name, &held.arguments, now);
        }
        // The name may be the model's invention: none of it is logged.
        tracing::debug!("a call cut off with its response was not accepted");
        Vec::new()
    }

    /// Response `response_id` ended: the calls of it still held (its `response.done` did not
    /// list them as ended) end with it, accepted only when it `completed`.
    pub fn settle_response(&mut self, response_id: Option<&str>, completed: bool, now: Instant) -> Vec<Action> {
        let of_it: Vec<String> = self
            .held
            .iter()
            .filter(|(_, held)| response_id.is_none() || held.response_id.is_none() || held.response_id.as_deref() == response_id)
            .map(|(call_id, _)| call_id.clone())
            .collect();
        of_it.iter().flat_map(|call_id| self.settle(call_id, completed, now)).collect()
    }

    /// The session is closing: nothing more is read from the upstream, so no held call's item
    /// can end. They are forgotten, not accepted by their timers while the session closes (a
    /// call accepted then would start after the parked ones were declined, and could outlive the
    /// close with no `call_finished`).
    pub fn forget_held(&mut self) {
        self.held.clear();
    }

    /// A deadline came due: a held call's ([`SETTLE_WAIT`]), accepted now; `None` for any other.
    /// Only while that call is held: the upstream picks call ids, and one spelled like a key must
    /// still have its confirmation expire.
    pub(super) fn settle_expired(&mut self, key: &str) -> Option<Vec<Action>> {
        let call_id = key.strip_prefix(SETTLE_KEY).filter(|call_id| self.held.contains_key(*call_id))?;
        Some(self.settle(call_id, true, Instant::now()))
    }
}
