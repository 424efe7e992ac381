//! What the call table does when its session closes: calls waiting for a decision are declined,
//! and at the drain deadline calls still running fail as timed out. Either way each call gets its
//! one `call_finished` through the same terminal transition as every other end.

use super::{Action, CallTable, Confirmation, DeclineReason, Outcome, State, ToolError};

impl CallTable {
    /// The session is closing: every parked call is declined; running calls may still finish.
    /// A call still in its rate-limit check is declined too, but only one that was going to be
    /// put to the user is recorded as closed before a decision: the others never needed one
    /// (their `confirmation` stays `not_required`, and no confirmation decision is counted).
    pub fn close_parked(&mut self) -> Vec<Action> {
        let skip_confirmation = self.skip_confirmation;
        let parked: Vec<(String, bool)> = self
            .calls
            .iter()
            .filter(|(_, c)| matches!(c.state, State::AwaitingConfirmation | State::CheckingLimit))
            .map(|(id, c)| {
                let undecided = c.state == State::AwaitingConfirmation
                    || (!skip_confirmation && c.tool.as_ref().is_some_and(|t| t.policy.requires_confirmation));
                (id.clone(), undecided)
            })
            .collect();
        let mut actions = Vec::new();
        for (call_id, undecided) in parked {
            if undecided {
                self.set_confirmation(&call_id, Confirmation::SessionClosed);
            }
            actions.extend(self.finish(&call_id, Outcome::Declined(DeclineReason::SessionClosed)));
        }
        actions
    }

    /// The drain deadline passed: calls still running fail as timed out.
    pub fn abandon_running(&mut self) -> Vec<Action> {
        let running: Vec<String> = self
            .calls
            .iter()
            .filter(|(_, c)| matches!(c.state, State::Running | State::Approving))
            .map(|(id, _)| id.clone())
            .collect();
        let mut actions = Vec::new();
        for call_id in running {
            actions.extend(self.finish(&call_id, Outcome::Failed(ToolError::Timeout)));
        }
        actions
    }
}
