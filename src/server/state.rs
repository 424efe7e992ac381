//! `AppState`: the cheap-to-clone handles every route needs.

use std::sync::Arc;

use super::error::ApiError;
use crate::config::{AuthMode, Config, UpstreamKind};
use crate::policy::Principal;
use crate::policy::auth::{self, AuthError, JwtVerifier};
use crate::policy::tickets::Tickets;
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
    /// The tool catalogue as it is now (built-ins plus the MCP servers that are up).
    pub mcp: Arc<crate::mcp::McpHub>,
}

impl AppState {
    /// What a session starting now gets: the shared deps with the current tool catalogue.
    pub fn session_deps(&self) -> SessionDeps {
        SessionDeps { registry: self.mcp.registry(), ..self.deps.clone() }
    }

    /// Who is opening this session.
    pub async fn authenticate(&self, token: Option<&str>) -> Result<Principal, AuthError> {
        let auth_config = &self.config.auth;
        if auth_config.mode == AuthMode::None {
            return Ok(auth::anonymous(auth_config));
        }
        let token = token.ok_or(AuthError::Missing)?;
        if auth_config.mode == AuthMode::Ticket && Tickets::is_ticket(token) {
            return match &self.tickets {
                Some(tickets) => tickets.redeem(token).await,
                None => Err(AuthError::Invalid),
            };
        }
        match &self.jwt {
            Some(jwt) => jwt.verify(token),
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
            .and_then(|v| v.strip_prefix("Bearer "))
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
