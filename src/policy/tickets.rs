//! Single-use session tickets for browsers: `POST /v1/sessions` (admin-authenticated) mints a
//! short-lived ticket bound to a `sub` and its roles; the browser presents it once.
//!
//! A ticket is self-contained and signed (`vgt.<claims>.<hmac>`), so any instance sharing the key
//! can check it; single use is enforced in memory and, with `redis.url`, in Redis with
//! `SET voxgate:ticket:<id> NX EX <ttl>` — so a ticket minted on one instance is accepted once on
//! any instance.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use dashmap::DashMap;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::Principal;
use super::auth::AuthError;

const PREFIX: &str = "vgt";

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    roles: Vec<String>,
    /// Expiry, unix seconds.
    exp: u64,
    /// Ticket id: what single use is keyed on.
    jti: String,
}

/// A freshly minted ticket.
#[derive(Debug, Serialize)]
pub struct Minted {
    pub token: String,
    pub expires_at: u64,
}

/// A ticket whose signature and expiry are good, not spent yet.
#[derive(Debug)]
pub struct CheckedTicket {
    claims: Claims,
}

impl CheckedTicket {
    /// Who the ticket was minted for.
    pub fn principal(&self) -> Principal {
        Principal::new(self.claims.sub.clone(), self.claims.roles.clone())
    }
}

/// Mints and redeems tickets.
pub struct Tickets {
    key: Vec<u8>,
    max_ttl: Duration,
    used: DashMap<String, u64>,
    redis: Option<redis::aio::ConnectionManager>,
}

/// The ticket-signing key derived from the admin token (every instance shares the admin token).
pub fn signing_key(admin_token: &str) -> Vec<u8> {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(admin_token.as_bytes()) else { return Vec::new() };
    mac.update(b"voxgate ticket signing key v1");
    mac.finalize().into_bytes().to_vec()
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default()
}

impl Tickets {
    /// `key` signs tickets; every instance that should accept them must share it.
    pub fn new(key: &[u8], max_ttl: Duration, redis: Option<redis::aio::ConnectionManager>) -> Self {
        Self { key: key.to_vec(), max_ttl, used: DashMap::new(), redis }
    }

    fn sign(&self, payload: &str) -> Vec<u8> {
        // HMAC takes keys of any length.
        match Hmac::<Sha256>::new_from_slice(&self.key) {
            Ok(mut mac) => {
                mac.update(payload.as_bytes());
                mac.finalize().into_bytes().to_vec()
            }
            Err(_) => Vec::new(),
        }
    }

    pub fn mint(&self, principal: &Principal, ttl: Duration) -> Minted {
        let ttl = ttl.min(self.max_ttl).max(Duration::from_secs(1));
        let claims = Claims {
            sub: principal.sub.clone(),
            roles: principal.roles.clone(),
            exp: now_s() + ttl.as_secs(),
            jti: uuid::Uuid::new_v4().simple().to_string(),
        };
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap_or_default());
        let payload = format!("{PREFIX}.{body}");
        let signature = URL_SAFE_NO_PAD.encode(self.sign(&payload));
        Minted { token: format!("{payload}.{signature}"), expires_at: claims.exp }
    }

    /// Does this look like a ticket (rather than a JWT)?
    pub fn is_ticket(token: &str) -> bool {
        token.starts_with("vgt.")
    }

    /// Check a ticket and spend it.
    pub async fn redeem(&self, token: &str) -> Result<Principal, AuthError> {
        let checked = self.check(token)?;
        self.spend(checked).await
    }

    /// Check a ticket's signature and expiry without spending it: a session refused for its cap
    /// must not use up the ticket (the browser could not retry).
    pub fn check(&self, token: &str) -> Result<CheckedTicket, AuthError> {
        let (payload, signature) = token.rsplit_once('.').ok_or(AuthError::Invalid)?;
        let body = payload.strip_prefix("vgt.").ok_or(AuthError::Invalid)?;
        let given = URL_SAFE_NO_PAD.decode(signature).map_err(|_| AuthError::Invalid)?;
        use subtle::ConstantTimeEq;
        if !bool::from(self.sign(payload).ct_eq(&given)) {
            return Err(AuthError::Invalid);
        }
        let raw = URL_SAFE_NO_PAD.decode(body).map_err(|_| AuthError::Invalid)?;
        let claims: Claims = serde_json::from_slice(&raw).map_err(|_| AuthError::Invalid)?;
        if claims.exp <= now_s() {
            return Err(AuthError::Expired);
        }
        Ok(CheckedTicket { claims })
    }

    /// Spend a checked ticket (once, across instances with Redis).
    pub async fn spend(&self, ticket: CheckedTicket) -> Result<Principal, AuthError> {
        let CheckedTicket { claims } = ticket;
        let now = now_s();
        if claims.exp <= now {
            return Err(AuthError::Expired);
        }
        // Forget spent tickets once they could no longer be used anyway.
        self.used.retain(|_, exp| *exp > now);
        if self.used.insert(claims.jti.clone(), claims.exp).is_some() {
            return Err(AuthError::TicketUsed);
        }
        if let Some(redis) = &self.redis {
            let mut conn = redis.clone();
            let ttl = (claims.exp - now).max(1);
            let set: redis::RedisResult<Option<String>> = redis::cmd("SET")
                .arg(format!("voxgate:ticket:{}", claims.jti))
                .arg(1)
                .arg("NX")
                .arg("EX")
                .arg(ttl)
                .query_async(&mut conn)
                .await;
            match set {
                Ok(Some(_)) => {}
                Ok(None) => return Err(AuthError::TicketUsed),
                Err(err) => {
                    // Without Redis we cannot know whether another instance took it: refuse.
                    tracing::warn!(error.kind = ?err.kind(), "ticket check: Redis unavailable");
                    return Err(AuthError::Unavailable);
                }
            }
        }
        Ok(Principal::new(claims.sub, claims.roles))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_ticket_is_single_use_and_bound_to_its_principal() {
        let tickets = Tickets::new(b"k", Duration::from_secs(300), None);
        let minted = tickets.mint(&Principal::new("dr.who", vec!["clinician".into()]), Duration::from_secs(60));
        assert!(Tickets::is_ticket(&minted.token));
        let principal = tickets.redeem(&minted.token).await.unwrap();
        assert_eq!(principal.sub, "dr.who");
        assert_eq!(principal.roles, vec!["clinician"]);
        assert_eq!(tickets.redeem(&minted.token).await.unwrap_err(), AuthError::TicketUsed);
    }

    #[tokio::test]
    async fn forged_or_foreign_tickets_are_refused() {
        let tickets = Tickets::new(b"k", Duration::from_secs(300), None);
        let other = Tickets::new(b"other-key", Duration::from_secs(300), None);
        let minted = other.mint(&Principal::new("x", vec![]), Duration::from_secs(60));
        assert_eq!(tickets.redeem(&minted.token).await.unwrap_err(), AuthError::Invalid);
        let mut tampered = tickets.mint(&Principal::new("x", vec![]), Duration::from_secs(60)).token;
        tampered.insert(5, 'A');
        assert_eq!(tickets.redeem(&tampered).await.unwrap_err(), AuthError::Invalid);
        assert_eq!(tickets.redeem("vgt.garbage").await.unwrap_err(), AuthError::Invalid);
    }

    #[tokio::test]
    async fn ttl_is_capped() {
        let tickets = Tickets::new(b"k", Duration::from_secs(30), None);
        let minted = tickets.mint(&Principal::new("x", vec![]), Duration::from_secs(3600));
        assert!(minted.expires_at <= now_s() + 30);
    }
}
