//! `AppState`: the cheap-to-clone handles every route needs.

use std::sync::Arc;

use super::error::ApiError;
use crate::cluster::Cluster;
use crate::config::{AuthMode, Config, UpstreamKind};
use crate::policy::Principal;
use crate::policy::auth::{self, AuthError, JwtVerifier};
use crate::policy::tickets::{CheckedTicket, Tickets};
use crate::policy::phi::UserHasher;
use crate::session::SessionDeps;
use crate::session::live::LiveSessions;
use crate::shutdown::Shutdown;

#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub deps: SessionDeps,
    pub live: Arc<LiveSessions>,
    pub shutdown: Shutdown,
    pub hasher: UserHasher,
    pub jwt: Option<Arc<JwtVerifier>>,
    /// Present when `auth.admin_token` is set (tickets are minted with it).
    pub tickets: Option<Arc<Tickets>>,
    /// This instance's identity and, with Redis, the cross-instance registry and caps.
    pub cluster: Arc<Cluster>,
    /// The tool catalogue as it is now (built-ins plus the MCP servers that are up).
    pub mcp: Arc<crate::mcp::McpHub>,
}

impl AppState {
    /// What a session starting now gets: the shared deps with the current tool catalogue.
    pub fn session_deps(&self) -> SessionDeps {
        SessionDeps { registry: self.mcp.registry(), ..self.deps.clone() }
    }

    /// Who is opening this session. A ticket is checked but not spent: the caller spends it
    /// once the session has been admitted ([`Authenticated::spend`]).
    pub fn authenticate(&self, token: Option<&str>) -> Result<Authenticated, AuthError> {
        let auth_config = &self.config.auth;
        if auth_config.mode == AuthMode::None {
            return Ok(Authenticated { principal: auth::anonymous(auth_config), ticket: None });
        }
        let token = token.ok_or(AuthError::Missing)?;
        if auth_config.mode == AuthMode::Ticket && Tickets::is_ticket(token) {
            let tickets = self.tickets.clone().ok_or(AuthError::Invalid)?;
            let checked = tickets.check(token)?;
            return Ok(Authenticated { principal: checked.principal(), ticket: Some((tickets, checked)) });
        }
        match &self.jwt {
            Some(jwt) => jwt.verify(token).map(|principal| Authenticated { principal, ticket: None }),
            None => Err(AuthError::Invalid),
        }
    }

    /// Check the admin bearer token (constant-time); admin routes are off when none is configured.
    pub fn require_admin(&self, headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
        let Some(expected) = &self.config.auth.admin_token else {
            return Err(ApiError::not_found());
        };
        let presented = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_credentials)
            .unwrap_or_default();
        use subtle::ConstantTimeEq;
        if bool::from(presented.as_bytes().ct_eq(expected.expose().as_bytes())) {
            Ok(())
        } else {
            Err(ApiError::unauthorized("a valid admin token is required"))
        }
    }

    pub fn upstream_kind_name(&self) -> &'static str {
        match self.config.upstream.effective_kind() {
            UpstreamKind::Openai => "openai",
            UpstreamKind::Azure => "azure",
            UpstreamKind::Simulated => "simulated",
        }
    }
}

/// The credentials of a `Bearer` authorization value. The scheme is case-insensitive (RFC 7235
/// §2.1), as session auth already takes `bearer`; the token itself is compared by the caller.
fn bearer_credentials(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_at_checked("Bearer ".len())?;
    scheme.eq_ignore_ascii_case("Bearer ").then_some(token)
}

/// An authenticated session opener; a ticket is spent only by [`Authenticated::spend`].
pub struct Authenticated {
    pub principal: Principal,
    ticket: Option<(Arc<Tickets>, CheckedTicket)>,
}

impl Authenticated {
    /// Spend the ticket, if the session was opened with one (single use, across instances).
    pub async fn spend(self) -> Result<Principal, AuthError> {
        match self.ticket {
            Some((tickets, checked)) => tickets.spend(checked).await,
            None => Ok(self.principal),
        }
    }

    /// Was the session opened with a ticket that is already spent, here or on another instance?
    /// Only for a session refused for a cap: a used ticket is answered as such (CONTRACT §2).
    pub async fn ticket_spent(&self) -> bool {
        match &self.ticket {
            Some((tickets, checked)) => tickets.is_spent(checked).await,
            None => false,
        }
    }
}
