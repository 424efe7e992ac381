//! When voxgate may ask the model to speak: the `response.create` sequencing of CONTRACT §4, as a
//! small sans-I/O gate.
//!
//! voxgate sends `response.create` only when outputs it added are not yet covered by a response,
//! no response is in progress, the user is not speaking, and its previous request has been
//! answered. Several outputs ready together share one request. A request the upstream refuses
//! because a response is active (a race with server VAD) is retried after that response; any other
//! refusal, or no answer at all within [`REQUEST_ANSWER_TIMEOUT`], frees the gate too, so tool
//! results are never left unspoken behind a request nobody will answer.
//!
//! Coverage follows the server's order, not ours: a response the server started on its own (server
//! VAD) covers only the outputs it had acknowledged (`conversation.item.created/added`) before it
//! began; an output still in flight when it starts needs a turn of its own.
//!
//! Responses are told apart by id: an out-of-band one (`conversation: "none"`, `conversation_id:
//! null`) may run beside the default conversation's, and its end is not that one's; it holds the
//! gate too (it may be speaking), but covers no output and answers no request of voxgate's. The
//! client's own `response.create` holds the gate until a response starts, the upstream refuses it,
//! or [`REQUEST_ANSWER_TIMEOUT`] passes: a request of voxgate's meanwhile would race it into
//! `conversation_already_has_active_response`. One the client sent without an `event_id` goes with
//! a stand-in of voxgate's (client_frames.rs), so any refusal of it names it and opens the gate.

use std::time::Duration;

use tokio::time::Instant;

/// After the user stops speaking, give server VAD this long to start its own response (which then
/// covers our outputs) before voxgate asks for one.
pub const AFTER_SPEECH_GRACE: Duration = Duration::from_millis(700);

/// voxgate's `response.create` unanswered (neither `response.created` nor an error) for this long
/// is given up, so the gate does not stay shut on a lost request.
pub const REQUEST_ANSWER_TIMEOUT: Duration = Duration::from_secs(15);

/// Refusals (other than the VAD race) of requests for the same outputs before voxgate stops
/// asking: the outputs are in the conversation, and the next response covers them anyway.
const MAX_REFUSALS: u8 = 2;

/// Responses in a row that failed (`response.done` with status `failed`: a server error) with
/// voxgate's outputs in them before voxgate stops asking again: the outputs are in the
/// conversation, and the user's next turn covers them anyway; a server failing every response
/// must not be asked forever.
const MAX_FAILED_IN_A_ROW: u8 = 2;

/// Responses in a row voxgate asks for only to hand the model errors (every output of the batch
/// an error: an unknown tool, bad arguments, a decline, a log that refuses calls), with no user turn
/// between: a model that answers each error with another failing call would otherwise loop
/// unattended, each round a call audited and answered. Past it the errors wait in the
/// conversation for the user's next turn.
const MAX_ERROR_ROUNDS: u8 = 3;

/// Responses under way remembered at most: an upstream that starts responses and never ends them
/// must not grow the gate without bound (the oldest is forgotten).
const MAX_ACTIVE: usize = 8;

/// What the outputs owed to the model are, for [`MAX_ERROR_ROUNDS`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Owed {
    /// Nothing but errors (declines included), each sent once.
    Errors,
    /// At least one result: always asked for.
    Results,
    /// Owed again after a request or a response that did not deliver them (refused, unanswered,
    /// failed, lost with its upstream), results among them or not: asked for, not counted.
    #[default]
    Unknown,
}

#[derive(Debug, Default)]
pub struct ResponseGate {
    /// Responses under way (`response.created` with no `response.done` yet), by id; `""` for one
    /// whose id voxgate does not know (none given, or the upstream's refusal says one runs). Each
    /// with the outputs it covers: owed again if the upstream goes before it ends.
    active: Vec<(String, usize)>,
    /// The client's own `response.create` that no `response.created` has followed yet: its
    /// `event_id`, and when voxgate stops waiting for it.
    client_request: Option<(Option<String>, Instant)>,
    user_speaking: bool,
    /// Outputs voxgate added that no response has started after yet.
    uncovered: usize,
    /// Outputs sent whose item the server has not acknowledged yet.
    unacknowledged: usize,
    /// Consecutive refusals of voxgate's requests (not counting the VAD race).
    refusals: u8,
    /// Consecutive responses with outputs in them that failed (see [`MAX_FAILED_IN_A_ROW`]).
    failed_in_a_row: u8,
    /// What the outputs not yet covered are (see [`MAX_ERROR_ROUNDS`]).
    owed: Owed,
    /// voxgate's requests in a row for nothing but errors since the user's last turn (speech, a
    /// typed message, a push-to-talk commit, a decision on a parked call).
    error_rounds: u8,
    /// Outputs added while voxgate's own request was pending: the response it starts was created
    /// before they arrived, so it does not cover them.
    after_request: usize,
    /// voxgate's last request and how many outputs it was for, in case the upstream refuses it
    /// (even after a response started: that response may have begun before our outputs arrived).
    last_request: Option<(String, usize)>,
    /// voxgate's `response.create` whose `response.created` has not arrived yet.
    pending_request: Option<String>,
    /// When the pending request is given up if nothing answers it.
    pending_until: Option<Instant>,
    /// Do not request before this instant (speech grace).
    not_before: Option<Instant>,
}

impl ResponseGate {
    /// voxgate sent the model an output (`failed`: an error, not a result).
    pub fn on_output_sent(&mut self, failed: bool) {
        self.owed = match (failed, self.uncovered + self.after_request == 0) {
            (false, _) => Owed::Results,
            (true, true) => Owed::Errors,
            (true, false) => self.owed,
        };
        self.unacknowledged += 1;
        if self.pending_request.is_some() {
            self.after_request += 1;
        } else {
            self.uncovered += 1;
        }
    }

    /// Outputs a request or a response did not deliver are owed again; whether results are
    /// among them is not known any more, so they are asked for without counting as an error round.
    fn owe_again(&mut self, outputs: usize) {
        self.uncovered += outputs;
        if outputs > 0 && self.owed == Owed::Errors {
            self.owed = Owed::Unknown;
        }
    }

    /// voxgate has asked for [`MAX_ERROR_ROUNDS`] responses in a row for nothing but errors, and
    /// what is owed now is errors too: it asks no more until the user takes a turn.
    fn errors_capped(&self) -> bool {
        self.owed == Owed::Errors && self.error_rounds >= MAX_ERROR_ROUNDS
    }

    /// The server acknowledged one of voxgate's output items (`conversation.item.created/added`).
    pub fn on_output_acknowledged(&mut self) {
        self.unacknowledged = self.unacknowledged.saturating_sub(1);
    }

    /// A response started (`id`; `out_of_band` when its `conversation_id` is null).
    pub fn on_response_created(&mut self, id: Option<&str>, out_of_band: bool) {
        // The client's request started, or gave way to this response: either way, no race now.
        self.client_request = None;
        if out_of_band {
            // Not voxgate's request (always the default conversation's), and what it says goes
            // into no conversation: it covers nothing.
            self.mark_active(id.unwrap_or_default(), 0);
            return;
        }
        // The outputs voxgate's own request asked for, when this response is that request's.
        let requested = match (&self.pending_request, &self.last_request) {
            (Some(pending), Some((last, n))) if pending == last => *n,
            _ => 0,
        };
        let owed = self.uncovered + requested;
        let covers = if self.pending_request.is_some() {
            // Our own request: the server read it after every output sent before it, so its
            // response covers them all; outputs sent after the request (counted apart) do not
            // make it in.
            self.refusals = 0;
            self.uncovered = self.after_request;
            owed
        } else {
            // A response the server started on its own covers what it had acknowledged, not
            // what is still on the wire.
            self.uncovered = self.uncovered.min(self.unacknowledged);
            owed - self.uncovered
        };
        self.after_request = 0;
        self.pending_request = None;
        self.pending_until = None;
        self.mark_active(id.unwrap_or_default(), covers);
    }

    /// Response `id` ended; `None` when its `response.done` could not be read (then which one
    /// ended is unknown, and none is taken to run any more). `failed`: its status is `failed` (a
    /// server error, not the user's barge-in nor a token limit): the outputs it covered were
    /// never spoken, and are owed again, up to [`MAX_FAILED_IN_A_ROW`] times in a row.
    pub fn on_response_done(&mut self, id: Option<&str>, failed: bool) {
        let Some(id) = id else {
            self.active.clear();
            return;
        };
        let at = self.active.iter().position(|(a, _)| a == id).or_else(|| self.active.iter().position(|(a, _)| a.is_empty()));
        let Some(at) = at else { return };
        let (_, covers) = self.active.remove(at);
        if covers == 0 {
            return;
        }
        if !failed {
            self.failed_in_a_row = 0;
            return;
        }
        self.failed_in_a_row = self.failed_in_a_row.saturating_add(1);
        if self.failed_in_a_row <= MAX_FAILED_IN_A_ROW {
            self.owe_again(covers);
        }
    }

    fn mark_active(&mut self, id: &str, covers: usize) {
        if self.active.len() >= MAX_ACTIVE {
            self.active.remove(0);
        }
        self.active.push((id.to_string(), covers));
    }

    /// The client sent its own `response.create` (`event_id`) upstream.
    /// Not a user turn by itself (see [`MAX_ERROR_ROUNDS`]): a client's code sends one after
    /// answering a call to one of its own tools, or for a side request, with nobody there.
    pub fn on_client_request(&mut self, event_id: Option<&str>, now: Instant) {
        self.client_request = Some((event_id.map(str::to_string), now + REQUEST_ANSWER_TIMEOUT));
    }

    /// The upstream answered a client event with an `error` naming `event_id` (code `code`): the
    /// client's request is over if it was that one, or if the error is the active-response refusal
    /// with no `event_id` (only a `response.create` gets it; voxgate's and the client's carry one).
    pub fn on_client_error(&mut self, event_id: Option<&str>, code: Option<&str>) {
        let ends = match (&self.client_request, event_id) {
            (Some((Some(ours), _)), Some(id)) => ours == id,
            (Some(_), None) => code == Some("conversation_already_has_active_response"),
            _ => false,
        };
        if ends {
            self.client_request = None;
        }
    }

    pub fn on_speech_started(&mut self) {
        self.user_speaking = true;
        self.on_user_turn();
    }

    /// The user did something: spoke, or decided on a parked call. voxgate may ask for responses
    /// about errors again (see [`MAX_ERROR_ROUNDS`]).
    pub fn on_user_turn(&mut self) {
        self.error_rounds = 0;
    }

    /// The client sent the user's input itself: a typed message, or push-to-talk audio committed.
    /// A turn (see [`Self::on_user_turn`]), and the client's own `response.create` for it usually
    /// follows in a later read: voxgate holds its own request back as after speech, so the two do
    /// not race (the second would be refused and the client ask again: two answers). If the
    /// client sends none, voxgate asks once the grace is over.
    pub fn on_user_input(&mut self, now: Instant) {
        self.on_user_turn();
        self.not_before = self.not_before.max(Some(now + AFTER_SPEECH_GRACE));
    }

    pub fn on_speech_stopped(&mut self, now: Instant) {
        self.user_speaking = false;
        self.not_before = Some(now + AFTER_SPEECH_GRACE);
    }

    /// The upstream refused voxgate's request (`conversation_already_has_active_response`): a
    /// response is running that may not have our outputs; ask again after it.
    pub fn on_request_refused(&mut self, event_id: &str) -> bool {
        match self.last_request.take() {
            Some((id, count)) if id == event_id => {
                self.release_pending(event_id);
                self.owe_again(count);
                if self.active.is_empty() {
                    self.mark_active("", 0);
                }
                true
            }
            other => {
                self.last_request = other;
                false
            }
        }
    }

    /// The upstream answered voxgate's request with any other error: the request is over. Its
    /// outputs are asked for again, up to [`MAX_REFUSALS`] times in a row. True when the error
    /// was about voxgate's request (and so is not the client's business).
    pub fn on_request_failed(&mut self, event_id: &str) -> bool {
        match self.last_request.take() {
            Some((id, count)) if id == event_id => {
                self.release_pending(event_id);
                self.refusals = self.refusals.saturating_add(1);
                if self.refusals < MAX_REFUSALS {
                    self.owe_again(count);
                }
                true
            }
            other => {
                self.last_request = other;
                false
            }
        }
    }

    /// Nothing answered the pending request in time (see [`Self::wake_at`]): stop waiting for it.
    pub fn on_tick(&mut self, now: Instant) {
        if self.client_request.as_ref().is_some_and(|(_, until)| now >= *until) {
            self.client_request = None;
        }
        if self.pending_until.is_some_and(|t| now >= t)
            && let Some(id) = self.pending_request.clone()
        {
            self.on_request_failed(&id);
        }
    }

    fn release_pending(&mut self, event_id: &str) {
        if self.pending_request.as_deref() == Some(event_id) {
            self.pending_request = None;
            self.pending_until = None;
            self.uncovered += self.after_request;
            self.after_request = 0;
        }
    }

    /// No response running, no user speaking nor within the grace after speech (the server may
    /// still commit that speech and answer it), no request of voxgate's waiting for an answer: a
    /// moment the upstream session can be replaced without cutting anything off.
    pub fn is_quiet(&self, now: Instant) -> bool {
        self.active.is_empty()
            && !self.user_speaking
            && self.pending_request.is_none()
            && self.not_before.is_none_or(|t| now >= t)
    }

    /// The end of the grace after the user's speech, if one was given.
    pub fn speech_grace_until(&self) -> Option<Instant> {
        self.not_before
    }

    /// The upstream was replaced (a resume): its response and speech state are gone with it. A
    /// request it never answered is due again on the new upstream, and so are the outputs of a
    /// response it never finished: the restore carries them, but nothing asks the new model to
    /// speak them.
    pub fn on_upstream_replaced(&mut self) {
        let covered = self.active.drain(..).map(|(_, covers)| covers).sum::<usize>();
        self.owe_again(covered);
        self.user_speaking = false;
        self.not_before = None;
        if let Some(id) = self.pending_request.clone() {
            if let Some((_, count)) = self.last_request.take().filter(|(last, _)| *last == id) {
                self.owe_again(count);
            }
            self.release_pending(&id);
        }
    }

    /// The next instant at which time alone changes what the gate decides: the end of the
    /// speech grace or the give-up time of the client's request when nothing else holds the gate
    /// shut, or the give-up time of voxgate's unanswered request. `None` when only an event can
    /// open it: a timer armed then would fire at once, change nothing, and fire again (a spinning
    /// loop).
    pub fn wake_at(&self) -> Option<Instant> {
        if let Some(until) = self.pending_until {
            return Some(until);
        }
        let held_by_events = !self.active.is_empty() || self.user_speaking || self.errors_capped();
        if self.uncovered > 0 && !held_by_events {
            self.not_before.max(self.client_request.as_ref().map(|(_, until)| *until))
        } else {
            None
        }
    }

    /// Should voxgate send `response.create` now? If so, the caller sends it with `event_id`.
    pub fn try_request(&mut self, now: Instant, event_id: impl FnOnce() -> String) -> Option<String> {
        if self.client_request.as_ref().is_some_and(|(_, until)| now >= *until) {
            self.client_request = None;
        }
        if self.uncovered == 0 || !self.active.is_empty() || self.user_speaking || self.pending_request.is_some() || self.client_request.is_some() {
            return None;
        }
        if self.not_before.is_some_and(|t| now < t) || self.errors_capped() {
            return None;
        }
        self.not_before = None;
        match self.owed {
            Owed::Errors => self.error_rounds = self.error_rounds.saturating_add(1),
            Owed::Results => self.error_rounds = 0,
            Owed::Unknown => {}
        }
        let id = event_id();
        self.last_request = Some((id.clone(), self.uncovered));
        self.uncovered = 0;
        self.pending_request = Some(id.clone());
        self.pending_until = Some(now + REQUEST_ANSWER_TIMEOUT);
        Some(id)
    }
}

#[cfg(test)]
mod tests;
