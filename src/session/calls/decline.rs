//! Why a parked call was declined, as the client (`reason`) and the model (an error code and a
//! message it can act on) are told.

/// Why a call was declined (CONTRACT §4 `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeclineReason {
    UserDeclined,
    Expired,
    SessionClosed,
    ClientCannotConfirm,
}

impl DeclineReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DeclineReason::UserDeclined => "user_declined",
            DeclineReason::Expired => "expired",
            DeclineReason::SessionClosed => "session_closed",
            DeclineReason::ClientCannotConfirm => "client_cannot_confirm",
        }
    }

    /// The error code the model receives.
    pub(crate) fn model_code(self) -> &'static str {
        match self {
            DeclineReason::UserDeclined => "user_declined",
            DeclineReason::Expired => "confirmation_expired",
            DeclineReason::SessionClosed => "session_closed",
            DeclineReason::ClientCannotConfirm => "client_cannot_confirm",
        }
    }

    pub(super) fn model_message(self) -> &'static str {
        match self {
            DeclineReason::UserDeclined => {
                "The user declined this action. Do not retry it unless the user asks again."
            }
            DeclineReason::Expired => {
                "The user did not confirm this action in time; it was not carried out."
            }
            DeclineReason::SessionClosed => {
                "The session ended before the user confirmed; it was not carried out."
            }
            DeclineReason::ClientCannotConfirm => {
                "This action needs the user's confirmation, which this client cannot give; it was not carried out."
            }
        }
    }
}
