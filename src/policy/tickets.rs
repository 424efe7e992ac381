//! Single-use session tickets for browsers: `POST /v1/sessions` (admin-authenticated) mints a
//! short-lived ticket bound to a `sub` and its roles; the browser presents it once.
//!
//! A ticket is self-contained and signed (`vgt.<claims>.<hmac>`), so any instance sharing the key
//! can check it; single use is enforced in memory and, with `redis.url`, in Redis with
//! `SET voxgate:ticket:<id> NX EX <ttl>` — so a ticket minted on one instance is accepted once on
//! any instance. A session refused for a cap asks whether its ticket is spent ([`Tickets::is_spent`],
//! `EXISTS` in Redis), so that a replay is refused as used (401), not for the cap.
//!
//! Without Redis, what was spent lives only in this process: after a restart a ticket minted
//! before it could be presented again. So such an instance accepts only the tickets it minted
//! itself: each carries the minting process's boot id (random, per process), and a ticket from
//! another boot, or from a version before boot ids, is refused as used. Not the minting time
//! against the start time: a clock stepped back after the start (NTP) would then refuse every new
//! ticket for as long as the step. A browser whose ticket was caught by a restart asks for a new
//! one, as after any refusal.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use dashmap::DashMap;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::Principal;
use super::auth::AuthError;
use crate::cluster::{ClusterError, bounded};

const PREFIX: &str = "vgt";

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    roles: Vec<String>,
    /// Expiry, unix seconds.
    exp: u64,
    /// Ticket id: what single use is keyed on.
    jti: String,
    /// When it was minted, unix milliseconds (0 in tickets minted before this claim existed).
    /// Informational: single use no longer rests on clocks.
    #[serde(default)]
    iat_ms: u64,
    /// The minting process's boot id (empty in tickets minted before this claim existed).
    #[serde(default)]
    boot: String,
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
    /// This process's boot id: without Redis, only tickets that carry it can have been spent
    /// where `used` saw them.
    boot: String,
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

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or_default()
}

/// How long Redis remembers a spent ticket: as long as any ticket could still be presented, plus a
/// minute, counted from the spend. Not `exp − now`: on an instance whose clock runs fast, that
/// would forget the ticket before an instance with the right clock stops accepting it.
fn spent_marker_ttl(max_ttl: Duration) -> u64 {
    max_ttl.as_secs() + 60
}

impl Tickets {
    /// `key` signs tickets; every instance that should accept them must share it.
    pub fn new(key: &[u8], max_ttl: Duration, redis: Option<redis::aio::ConnectionManager>) -> Self {
        let boot = uuid::Uuid::new_v4().simple().to_string();
        Self { key: key.to_vec(), max_ttl, used: DashMap::new(), redis, boot }
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
            iat_ms: now_ms(),
            boot: self.boot.clone(),
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
        // Known spent here: refused at once, before any cap is looked at or a cluster seat taken
        // (CONTRACT §2: a used ticket is a 401). `spend` still decides for tickets this instance
        // has not seen.
        if self.used.contains_key(&claims.jti) {
            return Err(AuthError::TicketUsed);
        }
        // Without Redis nothing here remembers what another process (this instance before a
        // restart, another instance) spent.
        if self.redis.is_none() && claims.boot != self.boot {
            return Err(AuthError::TicketUsed);
        }
        Ok(CheckedTicket { claims })
    }

    /// Spend a checked ticket (once, across instances with Redis). Call it only once the session
    /// it opens has been admitted: a refusal before that must leave the ticket spendable.
    ///
    /// The in-memory claim comes first so that two concurrent redemptions on this instance cannot
    /// both reach Redis; `SET NX` then decides across instances. When Redis cannot answer, the
    /// claim is withdrawn: the ticket was not used, so it may be presented again once Redis is back.
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
            match claim_in_redis(redis, &claims.jti, spent_marker_ttl(self.max_ttl)).await {
                Ok(true) => {}
                Ok(false) => return Err(AuthError::TicketUsed),
                Err(err) => {
                    // Without Redis we cannot know whether another instance took it: refuse, but
                    // do not count it as used here. (If the SET did land before the error, Redis
                    // remembers it and a retry is refused there, so single use still holds.)
                    self.used.remove(&claims.jti);
                    tracing::warn!(error = %err, "ticket check: Redis unavailable");
                    return Err(AuthError::Unavailable);
                }
            }
        }
        Ok(Principal::new(claims.sub, claims.roles))
    }

    /// Is this checked ticket already spent, here or (with Redis) on any instance? Asked only for
    /// a session refused for a cap, so that a replayed ticket is answered as used (CONTRACT §2)
    /// rather than with the cap's refusal; an admitted session never pays this round trip. When
    /// Redis cannot answer, `false`: the cap's refusal stands, and the ticket is not spent by it.
    pub async fn is_spent(&self, ticket: &CheckedTicket) -> bool {
        let jti = &ticket.claims.jti;
        if self.used.contains_key(jti) {
            return true;
        }
        let Some(redis) = &self.redis else { return false };
        match spent_in_redis(redis, jti).await {
            Ok(spent) => spent,
            Err(err) => {
                tracing::debug!(error = %err, "ticket check on a refusal: Redis unavailable");
                false
            }
        }
    }
}

/// The Redis key that marks ticket `jti` as spent, for as long as the ticket could be used.
fn redis_key(jti: &str) -> String {
    format!("voxgate:ticket:{jti}")
}

/// `SET voxgate:ticket:<jti> <claim> NX EX <ttl>`, bounded: `Ok(true)` when this call claimed the
/// ticket, `Ok(false)` when some instance already had.
///
/// The value is this claim's own random mark: a SET that landed just before its connection
/// dropped is made again (`bounded`), finds the key set, and the key holding this claim's mark
/// says the ticket was spent by this very call, not replayed.
async fn claim_in_redis(redis: &redis::aio::ConnectionManager, jti: &str, ttl: u64) -> Result<bool, ClusterError> {
    let key = redis_key(jti);
    let claim = uuid::Uuid::new_v4().simple().to_string();
    let mut set = redis::cmd("SET");
    set.arg(&key).arg(&claim).arg("NX").arg("EX").arg(ttl);
    let set = &set;
    if bounded(redis, |mut c| async move { set.query_async::<Option<String>>(&mut c).await }).await?.is_some() {
        return Ok(true);
    }
    let key = &key;
    let holder: Option<String> = bounded(redis, |mut c| async move { redis::cmd("GET").arg(key).query_async(&mut c).await }).await?;
    Ok(holder.as_deref() == Some(claim.as_str()))
}

/// `EXISTS voxgate:ticket:<jti>`, bounded: whether some instance spent the ticket.
async fn spent_in_redis(redis: &redis::aio::ConnectionManager, jti: &str) -> Result<bool, ClusterError> {
    let key = redis_key(jti);
    let key = &key;
    bounded(redis, |mut c| async move { redis::cmd("EXISTS").arg(key).query_async::<bool>(&mut c).await }).await
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

    /// A manager for a Redis that is not there (nothing listens on port 1): every call errors.
    fn unreachable_redis() -> redis::aio::ConnectionManager {
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        let options = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(200)))
            .set_number_of_retries(0);
        redis::aio::ConnectionManager::new_lazy_with_config(client, options).unwrap()
    }

    #[tokio::test]
    async fn a_redis_error_refuses_the_ticket_without_spending_it() {
        let tickets = Tickets::new(b"k", Duration::from_secs(300), Some(unreachable_redis()));
        let minted = tickets.mint(&Principal::new("dr.who", vec![]), Duration::from_secs(60));
        assert_eq!(tickets.redeem(&minted.token).await.unwrap_err(), AuthError::Unavailable);
        // Still unavailable, not "used": once Redis answers, the browser's retry can succeed.
        assert_eq!(tickets.redeem(&minted.token).await.unwrap_err(), AuthError::Unavailable);
        assert!(tickets.used.is_empty(), "a refused ticket is not remembered as spent");
    }

    #[tokio::test]
    async fn a_checked_ticket_is_not_spent_until_spend() {
        let tickets = Tickets::new(b"k", Duration::from_secs(300), None);
        let minted = tickets.mint(&Principal::new("dr.who", vec![]), Duration::from_secs(60));
        // Checked (and then refused, e.g. for a cap): dropped without spending.
        drop(tickets.check(&minted.token).unwrap());
        let checked = tickets.check(&minted.token).unwrap();
        // A second check of the same ticket while the first is not spent yet: both pass the check,
        // and `spend` admits one of them.
        let raced = tickets.check(&minted.token).unwrap();
        assert_eq!(tickets.spend(checked).await.unwrap().sub, "dr.who");
        assert_eq!(tickets.spend(raced).await.unwrap_err(), AuthError::TicketUsed);
        // Once spent, the check itself refuses it: a used ticket is a 401 before any cap.
        assert_eq!(tickets.check(&minted.token).err(), Some(AuthError::TicketUsed));
    }

    #[tokio::test]
    async fn a_ticket_is_known_spent_only_once_spent() {
        let tickets = Tickets::new(b"k", Duration::from_secs(300), None);
        let minted = tickets.mint(&Principal::new("dr.who", vec![]), Duration::from_secs(60));
        let checked = tickets.check(&minted.token).unwrap();
        let replay = tickets.check(&minted.token).unwrap();
        assert!(!tickets.is_spent(&replay).await, "checked, not spent");
        tickets.spend(checked).await.unwrap();
        assert!(tickets.is_spent(&replay).await, "spent here: known in memory");
    }

    #[tokio::test]
    async fn a_redis_error_leaves_a_ticket_not_known_spent() {
        // The cap's refusal then stands: a ticket is never called used on a guess.
        let tickets = Tickets::new(b"k", Duration::from_secs(300), Some(unreachable_redis()));
        let minted = tickets.mint(&Principal::new("dr.who", vec![]), Duration::from_secs(60));
        assert!(!tickets.is_spent(&tickets.check(&minted.token).unwrap()).await);
    }

    #[tokio::test]
    async fn concurrent_spends_on_one_instance_admit_once() {
        let tickets = std::sync::Arc::new(Tickets::new(b"k", Duration::from_secs(300), None));
        let minted = tickets.mint(&Principal::new("dr.who", vec![]), Duration::from_secs(60));
        let attempts: Vec<_> = (0..8)
            .map(|_| {
                let (tickets, token) = (tickets.clone(), minted.token.clone());
                tokio::spawn(async move { tickets.redeem(&token).await })
            })
            .collect();
        let mut admitted = 0;
        for attempt in attempts {
            if attempt.await.unwrap().is_ok() {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 1);
    }

    /// Without Redis, a restart forgets what was spent: tickets minted before it are refused.
    #[tokio::test]
    async fn without_redis_a_restart_refuses_tickets_minted_before_it() {
        let before = Tickets::new(b"k", Duration::from_secs(300), None);
        let minted = before.mint(&Principal::new("dr.who", vec![]), Duration::from_secs(60));
        before.redeem(&minted.token).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
        let restarted = Tickets::new(b"k", Duration::from_secs(300), None);
        assert_eq!(restarted.redeem(&minted.token).await.unwrap_err(), AuthError::TicketUsed);
        // One minted after the restart is good.
        let fresh = restarted.mint(&Principal::new("dr.who", vec![]), Duration::from_secs(60));
        assert_eq!(restarted.redeem(&fresh.token).await.unwrap().sub, "dr.who");
    }

    /// `token` with its claims changed by `edit`, signed again as its minting process would have.
    fn edited(tickets: &Tickets, token: &str, edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> String {
        let (payload, _) = token.rsplit_once('.').unwrap();
        let body = payload.strip_prefix("vgt.").unwrap();
        let mut claims: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(body).unwrap()).unwrap();
        edit(claims.as_object_mut().unwrap());
        let payload = format!("{PREFIX}.{}", URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap()));
        format!("{payload}.{}", URL_SAFE_NO_PAD.encode(tickets.sign(&payload)))
    }

    /// Without Redis, a clock stepped back after the start (NTP) does not refuse the tickets this
    /// process mints: they carry a time before its start, and are still its own.
    #[tokio::test]
    async fn without_redis_a_backward_clock_step_does_not_refuse_new_tickets() {
        let tickets = Tickets::new(b"k", Duration::from_secs(300), None);
        let minted = tickets.mint(&Principal::new("dr.who", vec![]), Duration::from_secs(60));
        let stepped = edited(&tickets, &minted.token, |claims| {
            let iat = claims["iat_ms"].as_u64().unwrap();
            claims.insert("iat_ms".into(), (iat - 3_600_000).into());
        });
        assert_eq!(tickets.redeem(&stepped).await.unwrap().sub, "dr.who");
    }

    /// Without Redis, only this process knows what it spent: a ticket minted by another process
    /// (one before a restart, whatever its clock said) or by a version before boot ids is refused.
    #[tokio::test]
    async fn without_redis_tickets_from_another_process_are_refused() {
        let tickets = Tickets::new(b"k", Duration::from_secs(300), None);
        tokio::time::sleep(Duration::from_millis(2)).await;
        let other = Tickets::new(b"k", Duration::from_secs(300), None);
        let foreign = other.mint(&Principal::new("dr.who", vec![]), Duration::from_secs(60));
        assert_eq!(tickets.redeem(&foreign.token).await.unwrap_err(), AuthError::TicketUsed);
        let own = tickets.mint(&Principal::new("dr.who", vec![]), Duration::from_secs(60));
        let legacy = edited(&tickets, &own.token, |claims| {
            claims.remove("boot");
        });
        assert_eq!(tickets.redeem(&legacy).await.unwrap_err(), AuthError::TicketUsed);
        assert_eq!(tickets.redeem(&own.token).await.unwrap().sub, "dr.who");
    }

    /// Redis remembers a spent ticket for longer than any ticket lives, whatever the clocks say.
    #[test]
    fn a_spent_marker_outlives_every_ticket() {
        let max = Duration::from_secs(300);
        assert!(spent_marker_ttl(max) > max.as_secs());
    }

    #[tokio::test]
    async fn ttl_is_capped() {
        let tickets = Tickets::new(b"k", Duration::from_secs(30), None);
        let minted = tickets.mint(&Principal::new("x", vec![]), Duration::from_secs(3600));
        assert!(minted.expires_at <= now_s() + 30);
    }
}
