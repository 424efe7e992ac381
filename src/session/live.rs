//! The live sessions of this process: admission (the process and per-user caps, answered before
//! the upgrade) and the handles the admin API lists and ends.

use std::sync::Arc;
use std::time::SystemTime;

use dashmap::DashMap;
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// Why a new session was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    #[error("the server is at its session limit")]
    Full,
    #[error("this user has too many open sessions")]
    UserLimit,
}

/// A live session as the admin API shows it (no PHI: the user is the keyed hash).
#[derive(Debug, Clone, Serialize)]
pub struct SessionSummary {
    pub id: String,
    pub user: String,
    pub model: String,
    pub started_at: u64,
}

struct Entry {
    summary: SessionSummary,
    cancel: CancellationToken,
}

/// Every live session, by id.
pub struct LiveSessions {
    sessions: DashMap<String, Entry>,
    per_user: DashMap<String, usize>,
    permits: Arc<Semaphore>,
    max_per_user: usize,
}

/// A session's place in the registry; dropping it frees the place.
pub struct Admission {
    live: Arc<LiveSessions>,
    id: String,
    user: String,
    _permit: OwnedSemaphorePermit,
}

impl LiveSessions {
    pub fn new(max_sessions: usize, max_per_user: usize) -> Arc<Self> {
        Arc::new(Self {
            sessions: DashMap::new(),
            per_user: DashMap::new(),
            permits: Arc::new(Semaphore::new(max_sessions)),
            max_per_user,
        })
    }

    /// Take a place for a new session, or say why not (without waiting).
    pub fn admit(
        self: &Arc<Self>,
        id: &str,
        user: &str,
        model: &str,
        cancel: CancellationToken,
    ) -> Result<Admission, AdmitError> {
        let permit = self.permits.clone().try_acquire_owned().map_err(|_| AdmitError::Full)?;
        {
            let mut count = self.per_user.entry(user.to_string()).or_insert(0);
            if *count >= self.max_per_user {
                return Err(AdmitError::UserLimit);
            }
            *count += 1;
        }
        let started_at = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let summary = SessionSummary { id: id.to_string(), user: user.to_string(), model: model.to_string(), started_at };
        self.sessions.insert(id.to_string(), Entry { summary, cancel });
        Ok(Admission { live: self.clone(), id: id.to_string(), user: user.to_string(), _permit: permit })
    }

    pub fn list(&self) -> Vec<SessionSummary> {
        let mut list: Vec<_> = self.sessions.iter().map(|e| e.summary.clone()).collect();
        list.sort_by(|a, b| a.started_at.cmp(&b.started_at).then(a.id.cmp(&b.id)));
        list
    }

    /// End a session cleanly (its parked calls are declined). False when there is no such session.
    pub fn kill(&self, id: &str) -> bool {
        match self.sessions.get(id) {
            Some(entry) => {
                entry.cancel.cancel();
                true
            }
            None => false,
        }
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.live.sessions.remove(&self.id);
        if let Some(mut count) = self.live.per_user.get_mut(&self.user) {
            *count = count.saturating_sub(1);
        }
        self.live.per_user.remove_if(&self.user, |_, count| *count == 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_and_release() {
        let live = LiveSessions::new(2, 1);
        let a = live.admit("a", "u1", "m", CancellationToken::new()).unwrap();
        assert_eq!(live.admit("b", "u1", "m", CancellationToken::new()).err(), Some(AdmitError::UserLimit));
        let _b = live.admit("b", "u2", "m", CancellationToken::new()).unwrap();
        assert_eq!(live.admit("c", "u3", "m", CancellationToken::new()).err(), Some(AdmitError::Full));
        assert_eq!(live.list().len(), 2);
        drop(a);
        assert_eq!(live.len(), 1);
        assert!(live.admit("c", "u1", "m", CancellationToken::new()).is_ok());
    }

    #[test]
    fn kill_cancels_the_session_token() {
        let live = LiveSessions::new(2, 2);
        let token = CancellationToken::new();
        let _a = live.admit("a", "u", "m", token.clone()).unwrap();
        assert!(live.kill("a"));
        assert!(token.is_cancelled());
        assert!(!live.kill("nope"));
    }
}
