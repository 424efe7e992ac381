//! The client-facing edge: one axum router for the realtime WebSocket, health, metrics, tickets,
//! the admin API and the browser client's assets; [`start`] builds everything a session needs and
//! binds the listener, [`RunningServer::shutdown`] drains it (CONTRACT §1).
//!
//! - [`realtime`]: `GET /v1/realtime`, everything decided before the upgrade, then the session.
//! - [`admin`]: `POST /v1/sessions` (tickets) and `/admin/*`.
//! - [`health`]: `/healthz`, `/readyz`, `/metrics`.
//! - [`assets`]: `GET /` and the JS client module, compiled into the binary.
//! - [`state`]: the handles every route shares.

pub mod admin;
mod client_addr;
pub mod assets;
mod error;
pub mod health;
mod listener;
pub mod realtime;
mod shards;
pub mod state;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{delete, get, post};
use tokio::task::JoinHandle;

use crate::audit::{self, AuditWriter};
use crate::cluster::{Cluster, RedisLink};
use crate::config::{AuthMode, Config, UpstreamKind};
use crate::policy::auth::JwtVerifier;
use crate::policy::phi::UserHasher;
use crate::policy::rate_limit::{LocalLimiter, RateLimiter};
use crate::policy::shared_limit::RedisLimiter;
use crate::policy::tickets::{self, Tickets};
use crate::session::live::LiveSessions;
use crate::session::{SessionDeps, SessionSettings};
use crate::shutdown::Shutdown;
use crate::telemetry::metrics::Metrics;
use crate::tools::registry::ToolRegistry;
pub use error::ApiError;
use state::AppState;

/// Why the server could not start. Messages name the part that failed, never a secret.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("tool registry: {0}")]
    Registry(#[from] crate::tools::registry::RegistryError),
    #[error("audit log: {0}")]
    Audit(#[from] crate::audit::AuditError),
    #[error("auth: {0}")]
    Auth(String),
    #[error(transparent)]
    Shards(#[from] shards::ShardError),
    /// `redis.url` cannot be used at all, or Redis refuses its credentials (configuration errors).
    /// Redis being unreachable is not an error at start: the instance starts degraded and connects
    /// when Redis answers.
    #[error("redis.url is not usable ({0})")]
    Redis(String),
}

/// A server that is accepting connections.
pub struct RunningServer {
    local_addr: SocketAddr,
    state: AppState,
    /// The accept loop; it hands the session threads back when it ends.
    serve: JoinHandle<shards::Shards>,
    audit_writer: AuditWriter,
}

/// The full router over `state`.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/realtime", get(realtime::realtime))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/v1/sessions", post(admin::mint_ticket))
        .route("/admin/sessions", get(admin::list_sessions))
        .route("/admin/sessions/{id}", delete(admin::end_session))
        .route("/admin/tools/{name}/invoke", post(admin::invoke_tool))
        .route("/admin/tools", get(admin::list_tools))
        .merge(assets::routes())
        .with_state(state)
}

/// Build the shared state from `config`, bind `server.listen` and start serving.
pub async fn start(config: Config) -> Result<RunningServer, StartError> {
    let config = Arc::new(config);
    let mcp_names = crate::mcp::intern_names(&config.mcp);
    let metrics = Metrics::with_tools(&crate::mcp::all_names(&mcp_names));
    let redis = match &config.redis.url {
        Some(url) => Some(connect_redis(url.expose()).await?),
        None => None,
    };
    let registry = Arc::new(ToolRegistry::from_config(&config)?);
    let recovery = crate::session::calls::recover::ToolRecovery(registry.clone());
    let audit_options = audit::OpenOptions {
        redis_url: config.redis.url.as_ref(),
        instance: config.server.instance_id(),
        recovery: Some(&recovery),
        metrics: Some(metrics.clone()),
    };
    let (audit, audit_writer) = audit::open(&config.audit, audit_options).await?;
    let hasher = user_hasher(&config);
    let jwt = JwtVerifier::from_config(&config.auth).map_err(StartError::Auth)?.map(Arc::new);
    // Only `ticket` mode redeems tickets: in any other, `POST /v1/sessions` is off (404) rather
    // than minting tickets every session would refuse.
    let ticket_mode = config.auth.mode == AuthMode::Ticket;
    let tickets = config.auth.admin_token.as_ref().filter(|_| ticket_mode).map(|token| {
        let max_ttl = Duration::from_secs(config.auth.max_ticket_ttl_s);
        Arc::new(Tickets::new(&tickets::signing_key(token.expose()), max_ttl, redis.clone()))
    });
    let limiter: Arc<dyn RateLimiter> = match redis.clone() {
        Some(conn) => Arc::new(RedisLimiter::new(conn, config.redis.rate_limit_fail_closed, metrics.clone())),
        None => Arc::new(LocalLimiter::new()),
    };
    let shutdown = Shutdown::new();
    let mcp = crate::mcp::McpHub::start(&config.mcp, &mcp_names, registry.clone()).await;
    let deps = SessionDeps {
        registry,
        audit,
        metrics,
        limiter,
        settings: Arc::new(SessionSettings::from_config(&config)),
        drain: shutdown.token().clone(),
    };
    let live = LiveSessions::new(config.server.max_sessions, config.server.max_sessions_per_user);
    let cluster_link = match (&config.redis.url, redis) {
        (Some(url), Some(conn)) => Some(RedisLink {
            client: redis::Client::open(url.expose()).map_err(|e| StartError::Redis(format!("{:?}", e.kind())))?,
            conn,
            ttl: Duration::from_millis(config.redis.session_ttl_ms),
        }),
        _ => None,
    };
    let cluster = Cluster::start(config.server.instance_id(), cluster_link, live.clone(), deps.metrics.clone());
    let state = AppState { config: config.clone(), deps, live, shutdown, hasher, jwt, tickets, cluster, mcp };

    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .map_err(|source| StartError::Bind { addr: config.server.listen, source })?;
    let local_addr = listener.local_addr().map_err(|source| StartError::Bind { addr: config.server.listen, source })?;
    announce(&config, &state, local_addr);

    let app = router(state.clone());
    let drained = state.shutdown.token().clone();
    let handshake_timeout = Duration::from_millis(config.server.handshake_timeout_ms);
    let shards = shards::Shards::start(config.server.session_threads, &state.deps.metrics)?;
    let serve = tokio::spawn(listener::serve(listener, app, handshake_timeout, config.server.trusted_proxies.clone(), drained, shards));
    Ok(RunningServer { local_addr, state, serve, audit_writer })
}

impl RunningServer {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Drain (CONTRACT §1): stop accepting, tell every session to finish (parked calls are
    /// declined, running ones get until `server.drain_timeout_ms`, admin calls too), wait for
    /// them and for requests still being admitted or answering an admin (`Shutdown::enter`), then
    /// flush the audit log.
    /// Returns the audit writer's result.
    pub async fn shutdown(self) -> Result<(), crate::audit::AuditError> {
        let RunningServer { state, serve, audit_writer, .. } = self;
        tracing::info!(sessions = state.live.len(), "draining");
        state.shutdown.begin();
        let limit = Duration::from_millis(state.config.server.drain_timeout_ms) + Duration::from_secs(5);
        if tokio::time::timeout(limit, state.shutdown.tracker().wait()).await.is_err() {
            tracing::warn!(sessions = state.live.len(), "drain timed out; dropping the remaining sessions");
        }
        // Give up the instance id's claim (one renewal may be in flight before it, each bounded).
        // Before the session threads stop: the Redis connection may be reconnecting under a timer
        // of one of their runtimes, which cannot be polled once that runtime is gone.
        if tokio::time::timeout(Duration::from_secs(1), state.cluster.leave()).await.is_err() {
            tracing::debug!("the instance id's claim was not given up in time; it expires within one TTL");
        }
        match serve.await {
            // What still runs on them outlived the drain: the threads drop it, with its sockets,
            // admissions and audit handles, before the writer is joined below.
            Ok(shards) => shards.stop().await,
            Err(_) => tracing::warn!("the accept loop ended abnormally"),
        }
        // The sessions held the last audit handles; the writer ends once they are gone.
        drop(state);
        // Bounded: something still holding an audit handle must not keep the process alive.
        let result = match tokio::time::timeout(Duration::from_secs(10), audit_writer.join()).await {
            Ok(result) => result,
            Err(_) => {
                tracing::error!("the audit writer did not finish in time");
                Err(crate::audit::AuditError::Closed)
            }
        };
        tracing::info!("stopped");
        result
    }
}

/// The keyed hash of user ids must agree across instances (shared rate-limit windows, session
/// caps) and restarts (audit): `auth.user_hash_key`, else a key derived from a secret every
/// instance shares anyway, else a per-process key.
fn user_hasher(config: &Config) -> UserHasher {
    let shared = config.auth.user_hash_key.as_ref().map(|k| k.expose().as_bytes().to_vec()).or_else(|| {
        let secret = config.auth.admin_token.as_ref().or(config.auth.jwt_secret.as_ref())?;
        let mut derived = tickets::signing_key(secret.expose());
        derived.extend_from_slice(b"/user-hash");
        Some(derived)
    });
    match shared {
        Some(key) => UserHasher::new(&key),
        None => {
            if config.redis.url.is_some() {
                tracing::warn!("auth.user_hash_key is unset: user hashes differ per instance, so shared rate limits do not share");
            }
            UserHasher::ephemeral()
        }
    }
}

/// A connection manager that connects on first use, not here: a pod (re)scheduled while Redis is
/// away must start and serve degraded (docs/operations.md, "When Redis is down") rather than
/// crash-loop. Every caller bounds its Redis calls and falls back; the cluster's refresh tick
/// notices the outage at once and `/readyz` reports it. Only a URL that cannot be used at all, or
/// credentials that Redis refuses ([`probe_redis`]), fail the start.
async fn connect_redis(url: &str) -> Result<redis::aio::ConnectionManager, StartError> {
    // The URL may hold a password: errors are reported by kind only.
    let client = redis::Client::open(url).map_err(|e| StartError::Redis(format!("{:?}", e.kind())))?;
    let options = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_millis(500)))
        .set_number_of_retries(2);
    let conn = redis::aio::ConnectionManager::new_lazy_with_config(client, options)
        .map_err(|e| StartError::Redis(format!("{:?}", e.kind())))?;
    probe_redis(&conn).await?;
    Ok(conn)
}

/// How long the start waits for Redis's answer to its one `PING`.
const REDIS_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One bounded `PING` at start. Credentials Redis refuses are a configuration error that no wait
/// will mend (the instance would run degraded forever): the start fails. Any other failure is an
/// outage, which the instance starts through, degraded, as documented.
async fn probe_redis(conn: &redis::aio::ConnectionManager) -> Result<(), StartError> {
    let mut conn = conn.clone();
    match tokio::time::timeout(REDIS_PROBE_TIMEOUT, redis::cmd("PING").query_async::<String>(&mut conn)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => match crate::cluster::credentials_refused(&err) {
            Some(kind) => Err(StartError::Redis(format!("Redis refused the credentials: {kind}"))),
            None => {
                tracing::warn!(kind = ?err.kind(), "redis does not answer at start: starting degraded");
                Ok(())
            }
        },
        Err(_) => {
            tracing::warn!("redis did not answer in time at start: starting degraded");
            Ok(())
        }
    }
}

fn announce(config: &Config, state: &AppState, addr: SocketAddr) {
    let tools: Vec<&str> = state.mcp.registry().iter().map(|t| t.name()).collect();
    tracing::info!(
        %addr,
        upstream = state.upstream_kind_name(),
        auth = ?config.auth.mode,
        redis = config.redis.url.is_some(),
        tools = %tools.join(","),
        "listening on {addr}"
    );
    if config.upstream.effective_kind() == UpstreamKind::Simulated {
        tracing::warn!(
            "upstream is the SIMULATED model: answers are scripted, not from OpenAI; \
             set upstream.api_key (or OPENAI_API_KEY) to use a real realtime model"
        );
    }
    if config.auth.mode == AuthMode::None {
        tracing::warn!("auth.mode = \"none\": every session is anonymous");
        if config.server.allowed_origins.is_empty() {
            // CONTRACT §1: `[]` admits any origin. Without a token that includes any web page open
            // in a browser that can reach this address (docs/security.md, "Origins").
            tracing::warn!(
                "server.allowed_origins is empty: any web page in a browser that can reach this address \
                 can open sessions; list the page's origin there"
            );
        }
    }
}
