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

use super::plan::SessionUpdate;

/// Updates waiting for an answer at most. An upstream that answers none of so many is broken;
/// past this the oldest is taken as accepted (as every update was before answers were awaited).
const MAX_PENDING: usize = 32;

struct Pending {
    update: SessionUpdate,
    /// Held in a gap, not sent yet.
    held: bool,
}

#[derive(Default)]
pub(super) struct PendingUpdates {
    queue: VecDeque<Pending>,
}

impl PendingUpdates {
    /// An update was sent upstream (`held`: held for the next upstream). Returns one to merge at
    /// once when too many wait.
    pub(super) fn sent(&mut self, update: SessionUpdate, held: bool) -> Option<SessionUpdate> {
        self.queue.push_back(Pending { update, held });
        (self.queue.len() > MAX_PENDING).then(|| self.queue.pop_front().map(|p| p.update)).flatten()
    }

    /// A `session.updated` came: the oldest update sent is accepted.
    pub(super) fn accepted(&mut self) -> Option<SessionUpdate> {
        let at = self.queue.iter().position(|p| !p.held)?;
        self.queue.remove(at).map(|p| p.update)
    }

    /// An `error` named `event_id`: if it is a pending update's, that update is refused (dropped)
    /// and `Some(whether it had been sent)` comes back.
    pub(super) fn refused(&mut self, event_id: &str) -> Option<bool> {
        let at = self.queue.iter().position(|p| p.update.event_id.as_deref() == Some(event_id))?;
        self.queue.remove(at).map(|p| !p.held)
    }

    /// The held updates went out (after a restore, or to the old upstream when a recycle is
    /// postponed): they are now waiting for that upstream's answers.
    pub(super) fn released(&mut self) {
        for pending in &mut self.queue {
            pending.held = false;
        }
    }

    /// Every update not answered yet, sent or held, oldest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = &SessionUpdate> {
        self.queue.iter().map(|p| &p.update)
    }

    /// At a restore: the updates the old upstream never answered, oldest first (they go into the
    /// restored configuration); the held ones stay.
    pub(super) fn take_owed(&mut self) -> Vec<SessionUpdate> {
        let (owed, held): (Vec<Pending>, Vec<Pending>) = self.queue.drain(..).partition(|p| !p.held);
        self.queue = held.into();
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
        assert!(pending.sent(update("a"), false).is_none());
        assert!(pending.sent(update("b"), false).is_none());
        assert!(pending.sent(update("c"), false).is_none());
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
    fn too_many_unanswered_updates_give_up_the_oldest_as_accepted() {
        let mut pending = PendingUpdates::default();
        for i in 0..MAX_PENDING {
            assert!(pending.sent(update(&i.to_string()), false).is_none());
        }
        let oldest = pending.sent(update("one more"), false);
        assert_eq!(oldest.and_then(|u| u.event_id).as_deref(), Some("0"));
    }
}
