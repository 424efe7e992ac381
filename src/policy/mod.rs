//! Who may do what: the authenticated [`Principal`], role permissions, PHI rules, rate limits and
//! which calls need the user's confirmation.

pub mod auth;
pub mod phi;
pub mod rate_limit;
pub mod screening;
pub mod shared_limit;
pub mod tickets;

/// An authenticated user of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The subject (user id). Never logged raw: logs and audit carry a keyed hash.
    pub sub: String,
    pub roles: Vec<String>,
    /// When the credential that admitted the session expires (a JWT's `exp`, Unix seconds): the
    /// session ends then. `None` for tickets (single-use admission) and anonymous sessions.
    pub expires_at: Option<u64>,
}

impl Principal {
    pub fn new(sub: impl Into<String>, roles: Vec<String>) -> Self {
        Self { sub: sub.into(), roles, expires_at: None }
    }

    /// This principal, ending with its credential at `exp` (Unix seconds).
    pub fn expiring_at(self, exp: u64) -> Self {
        Self { expires_at: Some(exp), ..self }
    }
}
