//! The `session.update`s sent upstream (the client's and voxgate's own) that the upstream has
//! not answered yet. An update joins the effective configuration a restore sends only once the
//! upstream accepted it (`session.updated`): one it refused (an `error` naming its `event_id`)
//! never does, or the new upstream would refuse the whole restored configuration for a setting
//! the client was already told was wrong.
//!
//! Answers come in the order the updates were sent, so the oldest update sent is the one a
//! `session.updated` answers. Updates held in a gap have not been sent: they follow the restore
//! and are answered on the new upstream; those the old upstream never answered are owed, and go
//! into the restore's configuration, whose answer answers them all.

use std::collections::VecDeque;

use super::plan::{EffectiveSession, SessionUpdate};

/// The configuration a restore sends: what the upstream accepted, and the updates still waiting
/// for its answer.
#[derive(Default)]
pub(super) struct Configuration {
    accepted: EffectiveSession,
    pending: PendingUpdates,
}

impl Configuration {
    /// voxgate sent this `session.update` frame (`held`: held in a gap for the next upstream).
    pub(super) fn sent(&mut self, frame: &[u8], is_server_tool: impl Fn(&str) -> bool, held: bool) {
        let Some(update) = SessionUpdate::read(frame, is_server_tool) else { return };
        for early in self.pending.sent(update, held) {
            self.accepted.merge(early);
        }
    }

    /// A `session.updated` answered the oldest update sent.
    pub(super) fn accepted(&mut self) {
        if let Some(update) = self.pending.accepted() {
            self.accepted.merge(update);
        }
    }

    /// An `error` named `event_id`: `Some(whether it had been sent)` when it refused an update.
    pub(super) fn refused(&mut self, event_id: &str) -> Option<bool> {
        self.pending.refused(event_id)
    }

    /// The held updates went out (see [`PendingUpdates::released`]).
    pub(super) fn released(&mut self) {
        self.pending.released();
    }

    /// At a restore: what the old upstream never answered joins the configuration, whose answer
    /// answers it; what was held in the gap follows the restore and is answered after it.
    pub(super) fn for_restore(&mut self) -> &EffectiveSession {
        for owed in self.pending.take_owed() {
            self.accepted.merge(owed);
        }
        &self.accepted
    }

    /// The new upstream refused the restored configuration: it runs with the service's defaults,
    /// and so does the configuration the next restore sends (plus what is accepted from now on).
    pub(super) fn reset(&mut self) {
        self.accepted = EffectiveSession::default();
    }

    /// Bytes a millisecond of the client's audio: in the format its latest updates set, answered
    /// or not (the client sends in it from then on).
    pub(super) fn input_audio_bytes_per_ms(&self) -> usize {
        self.accepted.input_audio_bytes_per_ms(self.pending.iter())
    }
}

/// Updates waiting for an answer at most, and their sessions' bytes at most (a client can send
/// frames of megabytes). Past either, the oldest is taken as accepted (as every update was
/// before answers were awaited); its id is kept, so that its answer, when it comes, is passed
/// over, and a refusal of it still counts as its answer (its settings stay merged).
const MAX_PENDING: usize = 32;
const MAX_PENDING_BYTES: usize = 1024 * 1024;

struct Pending {
    update: SessionUpdate,
    /// Held in a gap, not sent yet.
    held: bool,
}

#[derive(Default)]
pub(super) struct PendingUpdates {
    queue: VecDeque<Pending>,
    bytes: usize,
    /// Updates taken as accepted early, still owed their answer: older than every one in
    /// `queue`, so the next answers are theirs. Their ids and whether they are held.
    early: VecDeque<(Option<String>, bool)>,
}

impl PendingUpdates {
    /// An update was sent upstream (`held`: held for the next upstream). Returns one to merge at
    /// once when too many wait.
    pub(super) fn sent(&mut self, update: SessionUpdate, held: bool) -> Vec<SessionUpdate> {
        self.bytes += update.len();
        self.queue.push_back(Pending { update, held });
        let mut early = Vec::new();
        while self.queue.len() > MAX_PENDING || (self.bytes > MAX_PENDING_BYTES && self.queue.len() > 1) {
            let Some(oldest) = self.take(0) else { break };
            if self.early.len() == MAX_PENDING {
                // An upstream this far behind answers nothing; its oldest debts are forgotten.
                self.early.pop_front();
            }
            self.early.push_back((oldest.update.event_id.clone(), oldest.held));
            early.push(oldest.update);
        }
        early
    }

    /// A `session.updated` came: the oldest update sent is accepted (none when the answer is one
    /// an update taken as accepted early was owed).
    pub(super) fn accepted(&mut self) -> Option<SessionUpdate> {
        if let Some(at) = self.early.iter().position(|(_, held)| !held) {
            self.early.remove(at);
            return None;
        }
        let at = self.queue.iter().position(|p| !p.held)?;
        self.take(at).map(|p| p.update)
    }

    /// An `error` named `event_id`: if it is a pending update's, that update is refused (dropped)
    /// and `Some(whether it had been sent)` comes back.
    pub(super) fn refused(&mut self, event_id: &str) -> Option<bool> {
        if let Some(at) = self.early.iter().position(|(id, _)| id.as_deref() == Some(event_id)) {
            return self.early.remove(at).map(|(_, held)| !held);
        }
        let at = self.queue.iter().position(|p| p.update.event_id.as_deref() == Some(event_id))?;
        self.take(at).map(|p| !p.held)
    }

    /// The held updates went out (after a restore, or to the old upstream when a recycle is
    /// postponed): they are now waiting for that upstream's answers.
    pub(super) fn released(&mut self) {
        for pending in &mut self.queue {
            pending.held = false;
        }
        for (_, held) in &mut self.early {
            *held = false;
        }
    }

    fn take(&mut self, at: usize) -> Option<Pending> {
        let pending = self.queue.remove(at)?;
        self.bytes -= pending.update.len();
        Some(pending)
    }

    /// Every update not answered yet, sent or held, oldest first.
    fn iter(&self) -> impl Iterator<Item = &SessionUpdate> {
        self.queue.iter().map(|p| &p.update)
    }

    /// At a restore: the updates the old upstream never answered, oldest first (they go into the
    /// restored configuration); the held ones stay.
    pub(super) fn take_owed(&mut self) -> Vec<SessionUpdate> {
        let (owed, held): (Vec<Pending>, Vec<Pending>) = self.queue.drain(..).partition(|p| !p.held);
        self.queue = held.into();
        self.bytes = self.queue.iter().map(|p| p.update.len()).sum();
        // The old upstream's answers will not come: the restore's one answer is the restore's.
        self.early.retain(|(_, held)| *held);
        owed.into_iter().map(|p| p.update).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(id: &str) -> SessionUpdate {
        let frame = format!(r#"{{"type":"session.update","event_id":"{id}","session":{{"instructions":"{id}"}}}}"#);
        SessionUpdate::read(frame.as_bytes(), |_| false).unwrap()
    }

    fn ids(updates: Vec<SessionUpdate>) -> Vec<String> {
        updates.into_iter().filter_map(|u| u.event_id).collect()
    }

    #[test]
    fn answers_take_the_oldest_sent_and_refusals_take_the_one_they_name() {
        let mut pending = PendingUpdates::default();
        assert!(pending.sent(update("a"), false).is_empty());
        assert!(pending.sent(update("b"), false).is_empty());
        assert!(pending.sent(update("c"), false).is_empty());
        assert_eq!(pending.refused("b"), Some(true));
        assert_eq!(pending.refused("b"), None, "refused once");
        assert_eq!(pending.refused("other"), None);
        assert_eq!(pending.accepted().and_then(|u| u.event_id).as_deref(), Some("a"));
        assert_eq!(pending.accepted().and_then(|u| u.event_id).as_deref(), Some("c"));
        assert!(pending.accepted().is_none());
    }

    #[test]
    fn held_updates_wait_for_their_release_and_stay_out_of_the_owed() {
        let mut pending = PendingUpdates::default();
        pending.sent(update("owed"), false);
        pending.sent(update("held"), true);
        assert_eq!(pending.refused("held"), Some(false), "refused before it was sent");
        pending.sent(update("held2"), true);
        assert_eq!(ids(pending.take_owed()), ["owed"]);
        assert!(pending.accepted().is_none(), "a held update is not answered before it is sent");
        pending.released();
        assert_eq!(pending.accepted().and_then(|u| u.event_id).as_deref(), Some("held2"));
    }

    #[test]
    fn too_many_unanswered_updates_give_up_the_oldest_as_accepted_and_pass_its_answer_over() {
        let mut pending = PendingUpdates::default();
        for i in 0..MAX_PENDING {
            assert!(pending.sent(update(&i.to_string()), false).is_empty());
        }
        assert_eq!(ids(pending.sent(update("one more"), false)), ["0"]);
        assert!(pending.accepted().is_none(), "the answer to 0");
        assert_eq!(pending.accepted().and_then(|u| u.event_id).as_deref(), Some("1"));
        // A refusal of one taken early is its answer: the next answer is the next update's.
        assert!(pending.sent(update("two more"), false).is_empty());
        assert_eq!(ids(pending.sent(update("three more"), false)), ["2"]);
        assert_eq!(pending.refused("2"), Some(true));
        assert_eq!(pending.accepted().and_then(|u| u.event_id).as_deref(), Some("3"));
        // Too many bytes: the oldest go too, the newest stays whatever its size.
        let mut pending = PendingUpdates::default();
        let big = |id: &str| {
            let frame = format!(r#"{{"type":"session.update","event_id":"{id}","session":{{"instructions":"{}"}}}}"#, "x".repeat(MAX_PENDING_BYTES / 2));
            SessionUpdate::read(frame.as_bytes(), |_| false).unwrap()
        };
        assert!(pending.sent(big("b1"), false).is_empty());
        assert_eq!(ids(pending.sent(big("b2"), false)), ["b1"]);
        assert_eq!(ids(pending.sent(big("b3"), true)), ["b2"]);
        assert_eq!(pending.queue.len(), 1);
    }
}
