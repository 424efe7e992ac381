//! The admin API (bearer `auth.admin_token`; off when unset): list and end sessions, and invoke a
//! tool through the same validation, policy (rate limit included), audit and metrics path as a
//! model's call, without confirmation; its records are marked `admin`. The drain bounds such a
//! call as it bounds a session's: refused with 503 `draining` once the drain has begun, and one
//! still running then gets `server.drain_timeout_ms` before it fails as timed out, with its
//! `call_finished` record and an answer to the admin.
//! Also `POST /v1/sessions`, which mints single-use session tickets for browsers.

use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tracing::Instrument;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::error::ApiError;
use super::state::AppState;
use crate::audit::AuditEvent;
use crate::config::AuditOnError;
use crate::cluster::{KillOutcome, ListingScope};
use crate::policy::Principal;
use crate::session::calls::observe::count;
use crate::session::calls::{Action, CallTable, DeclineReason, unix_ms};
use crate::session::SessionDeps;
use crate::session::runner::ToolJob;
use crate::tools::{CallContext, ErrorCode, ToolError};

/// The largest request body the admin API reads.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// Reads a JSON body, once the caller is known to be the admin, within the handshake timeout.
/// Not axum's `Json` extractor: that reads the body before the handler checks the token, and with
/// no time limit, so anyone could hold connections open by announcing a body and sending none.
async fn read_json<T: serde::de::DeserializeOwned>(state: &AppState, body: Body, shape: &'static str) -> Result<T, ApiError> {
    let limit = Duration::from_millis(state.config.server.handshake_timeout_ms);
    let bytes = match tokio::time::timeout(limit, axum::body::to_bytes(body, MAX_BODY_BYTES)).await {
        Err(_) => return Err(ApiError::new(StatusCode::REQUEST_TIMEOUT, "request_timeout", "the request body did not arrive in time")),
        Ok(Err(_)) => return Err(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", "the request body is too large or was cut off")),
        Ok(Ok(bytes)) => bytes,
    };
    serde_json::from_slice(&bytes).map_err(|_| ApiError::bad_request("invalid_request", shape))
}

/// `GET /admin/sessions`: every instance's sessions (from the Redis registry), or this
/// instance's when there is no Redis or it is down (`scope` says which). Tracked by the drain
/// while it waits on Redis; once the drain has begun, this instance's own, at once.
pub async fn list_sessions(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    state.require_admin(&headers)?;
    let Some(_entered) = state.shutdown.enter() else {
        let sessions = state.cluster.list_local();
        return Ok(Json(json!({"sessions": sessions, "scope": ListingScope::Instance})).into_response());
    };
    let (sessions, scope) = state.cluster.list().await;
    Ok(Json(json!({"sessions": sessions, "scope": scope})).into_response())
}

/// `DELETE /admin/sessions/{id}`: end the session on whichever instance holds it. 204 only for a
/// session that ended (here, or confirmed by its instance); 404 when none holds it; 503 when that
/// cannot be known now ([`crate::cluster::Cluster::kill`]). Tracked by the drain while it waits
/// for an answer (else the drain cuts it, unanswered, though the kill may have gone out); once the
/// drain has begun, only a session of this instance is ended, at once, and others are 503.
pub async fn end_session(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    state.require_admin(&headers)?;
    // Session ids are ours (`vgs_` + hex): anything else names no session and never reaches Redis.
    let plausible = id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !plausible {
        return Err(ApiError::not_found());
    }
    let Some(_entered) = state.shutdown.enter() else {
        return match state.live.kill(&id) {
            true => Ok(StatusCode::NO_CONTENT.into_response()),
            false => Err(ApiError::draining()),
        };
    };
    match state.cluster.kill(&state.live, &id).await {
        KillOutcome::Ended | KillOutcome::Forwarded => Ok(StatusCode::NO_CONTENT.into_response()),
        KillOutcome::NotFound => Err(ApiError::not_found()),
        KillOutcome::Unreachable => {
            Err(ApiError::unavailable("cluster_unavailable", "the instance holding this session cannot be reached now; try again"))
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvokeRequest {
    #[serde(default)]
    arguments: Value,
    sub: String,
    #[serde(default)]
    roles: Vec<String>,
}

pub async fn invoke_tool(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    extensions: axum::http::Extensions,
    body: Body,
) -> Result<Response, ApiError> {
    state.require_admin(&headers)?;
    // Tracked from here, body included: a drain that begins meanwhile waits for this request
    // (bounded by the body's timeout and the call's drain deadline) instead of dropping it.
    let Some(_entered) = state.shutdown.enter() else { return Err(ApiError::draining()) };
    let request: InvokeRequest =
        read_json(&state, body, "body must be {\"arguments\":{…},\"sub\":\"…\",\"roles\":[…]}").await?;
    // The body may have arrived after the drain began: no call starts then.
    if state.shutdown.is_draining() {
        return Err(ApiError::draining());
    }
    if request.sub.is_empty() || request.sub.len() > 256 {
        return Err(ApiError::bad_request("invalid_request", "sub must be 1–256 characters"));
    }
    let principal = Principal::new(request.sub, request.roles);
    let user = state.hasher.hash(&principal.sub);
    let session_id = format!("admin_{}", uuid::Uuid::new_v4().simple());
    let call_id = format!("call_admin_{}", uuid::Uuid::new_v4().simple());
    let deps = state.session_deps();
    let origin = super::client_addr::origin(&state.config.server.trusted_proxies, &extensions, &headers, true);
    let mut table = CallTable::new(
        session_id.clone(),
        principal.clone(),
        user.clone(),
        true,
        deps.settings.confirmation_timeout,
        deps.registry.clone(),
    )
    .without_confirmation()
    .with_origin(origin)
    .with_audit(deps.audit.clone());
    let pending = table.accept(&call_id, &name, &request.arguments.to_string(), Instant::now());
    // The call runs as its own task, tracked by the drain: if the admin's HTTP client goes away
    // (a load balancer's timeout, Ctrl-C), hyper drops this handler, and the tool would finish
    // without its `call_finished` record.
    let call = Invocation { deps, table, session_id, principal, user };
    let output = state.shutdown.tracker().spawn(call.run(pending).instrument(tracing::Span::current())).await.ok().flatten();
    let Some(text) = output else {
        return Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "the call did not finish"));
    };
    let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let status = match value.pointer("/error/code").and_then(Value::as_str) {
        None => StatusCode::OK,
        // Declined because the drain began before the tool started.
        Some(code) if code == DeclineReason::SessionClosed.model_code() => StatusCode::SERVICE_UNAVAILABLE,
        Some(code) => ErrorCode::parse(code).map_or(StatusCode::BAD_GATEWAY, http_status),
    };

    Ok((status, Json(value)).into_response())
}

/// An admin call: the same actions a session performs, in order, awaited one by one.
struct Invocation {
    deps: SessionDeps,
    table: CallTable,
    session_id: String,
    principal: Principal,
    user: String,
}

impl Invocation {
    /// Performs `pending` and what follows from it until the call is answered; the output.
    async fn run(mut self, mut pending: Vec<Action>) -> Option<String> {
        let deps = &self.deps;
        let mut output = None;
        // The call's `voxgate.tool_call` span, from its `call_started` record to its outcome, as a
        // session's (`tool_actions::observe`).
        let mut span: Option<tracing::Span> = None;
        while !pending.is_empty() {
            let mut next = Vec::new();
            for action in pending {
                match action {
                    Action::Audit { record, gates } => {
                        let tool_span = || crate::telemetry::tool_span(&tracing::Span::current(), deps.metrics.tool_label(&record.tool), &record.call_id);
                        if record.event == AuditEvent::CallStarted {
                            span = Some(tool_span());
                        }
                        if let Some(c) = count(&deps.metrics, &record) {
                            // A call refused before it started has no span yet: it still gets its line.
                            let span = span.take().unwrap_or_else(tool_span);
                            crate::telemetry::record_tool_outcome(&span, c.status, c.confirmation, c.error_code, c.duration);
                        }
                        let written = deps.audit.record(record);
                        let Some(call) = gates else {
                            // Gating nothing, it is not waited for here, as a session does not wait
                            // for it: a call refused because the log is hung would otherwise answer
                            // only when the disk does. Handed over now, so its order is kept.
                            let metrics = deps.metrics.clone();
                            tokio::spawn(
                                async move {
                                    if let Err(err) = written.await {
                                        tracing::error!(error = %err, "audit record could not be written");
                                        metrics.audit_error();
                                    }
                                }
                                .in_current_span(),
                            );
                            continue;
                        };
                        let written = written.await;
                        if let Err(err) = &written {
                            tracing::error!(error = %err, "audit record could not be written");
                            deps.metrics.audit_error();
                        }
                        next.extend(match written {
                            Err(_) if deps.audit.on_error() == AuditOnError::FailClosed => self.table.on_audit_failed(&call),
                            _ => self.table.on_audited(&call),
                        });
                    }
                    Action::CheckLimit { call_id, tool } => {
                        let limit = deps.limiter.check(&self.user, tool.name(), tool.policy.rate_limit_per_minute).await;
                        // The drain may have begun while the limit was checked (a slow Redis): no
                        // tool starts then, as a closing session declines its calls still here.
                        if deps.drain.is_cancelled() {
                            next.extend(self.table.close_parked());
                        } else {
                            next.extend(self.table.on_limit_checked(&call_id, limit, unix_ms()));
                        }
                    }
                    Action::Spawn { call_id, tool, args } => {
                        let span = span
                            .clone()
                            .unwrap_or_else(|| crate::telemetry::tool_span(&tracing::Span::current(), deps.metrics.tool_label(tool.name()), &call_id));
                        let ctx = CallContext {
                            session_id: self.session_id.clone(),
                            call_id: call_id.clone(),
                            principal: self.principal.clone(),
                        };
                        let job = ToolJob { tool, args, ctx, span };
                        let mut task = tokio::spawn(job.run());
                        // Past the drain's deadline the call fails as timed out, its record
                        // written, as a session's does (`abandon_running`); left running, it would
                        // be dropped with its session thread when the drain gives up, unrecorded.
                        let result = tokio::select! {
                            // A task that ended as the deadline passed keeps its result.
                            biased;
                            joined = &mut task => joined.unwrap_or(Err(ToolError::Internal)),
                            () = drain_deadline(deps) => {
                                task.abort();
                                next.extend(self.table.abandon_running());
                                continue;
                            }
                        };
                        next.extend(self.table.on_tool_finished(&call_id, result));
                    }
                    Action::Output { output: text, .. } => output = Some(text),
                    Action::Client(_) | Action::Expire { .. } => {}
                }
            }
            pending = next;
        }
        output
    }
}

/// Resolves `server.drain_timeout_ms` after the drain begins: the same deadline a session gives its
/// running calls (`session::closing`).
async fn drain_deadline(deps: &SessionDeps) {
    deps.drain.cancelled().await;
    tokio::time::sleep(deps.settings.drain_timeout).await;
}

/// The admin API's answer to a call that failed with `code`.
fn http_status(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::UnknownTool => StatusCode::NOT_FOUND,
        ErrorCode::InvalidArguments | ErrorCode::PhiBlocked => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::PermissionDenied => StatusCode::FORBIDDEN,
        ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorCode::AuditUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::BackendError | ErrorCode::InternalError => StatusCode::BAD_GATEWAY,
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TicketRequest {
    sub: String,
    #[serde(default)]
    roles: Vec<String>,
    #[serde(default = "default_ttl")]
    ttl_s: u64,
}

fn default_ttl() -> u64 {
    60
}

/// `POST /v1/sessions`: a short-lived single-use ticket for a browser. Off (404) without an admin
/// token and outside `ticket` mode, where no ticket could be redeemed (`state.tickets` is `None`).
pub async fn mint_ticket(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    state.require_admin(&headers)?;
    let Some(tickets) = &state.tickets else { return Err(ApiError::not_found()) };
    let request: TicketRequest = read_json(&state, body, "body must be {\"sub\":\"…\",\"roles\":[…],\"ttl_s\":60}").await?;
    if request.sub.is_empty() || request.sub.len() > 256 {
        return Err(ApiError::bad_request("invalid_request", "sub must be 1–256 characters"));
    }
    let minted = tickets.mint(&Principal::new(request.sub, request.roles), Duration::from_secs(request.ttl_s));
    Ok((StatusCode::CREATED, Json(minted)).into_response())
}

/// A tool's `health` in `GET /admin/tools`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
enum ToolHealth {
    Up,
    /// Its MCP server's first connection attempt has not finished.
    Starting,
    /// Its MCP server is down: out of the catalogue until the server returns.
    Down,
    /// Allowed and its server up, yet out of the catalogue: the server does not offer it (now), or
    /// voxgate left it out (its schema too large or not compiling; the log names it).
    NotOffered,
}

impl ToolHealth {
    fn of(server: crate::mcp::LinkState) -> Self {
        match server {
            crate::mcp::LinkState::Up => ToolHealth::Up,
            crate::mcp::LinkState::Starting => ToolHealth::Starting,
            crate::mcp::LinkState::Down => ToolHealth::Down,
        }
    }
}

/// `GET /admin/tools`: every tool with its origin (`builtin` or the MCP server's name), effective
/// policy and health, and the health of every configured MCP server. An allowed MCP tool out of the
/// catalogue (its server down or starting, or not offering it) is listed too, with that health and
/// `policy: null`: its effective policy depends on what the server says about the tool.
pub async fn list_tools(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    state.require_admin(&headers)?;
    let servers = state.mcp.health();
    let server_state = |server: &str| servers.iter().find(|s| s.server == server).map(|s| s.state);
    let registry = state.mcp.registry();
    let mut tools: Vec<Value> = registry
        .iter()
        .map(|tool| {
            let spec = tool.spec();
            let origin = state.mcp.origin(tool.name());
            let health = server_state(origin).map_or(ToolHealth::Up, ToolHealth::of);
            json!({
                "name": tool.name(),
                "origin": origin,
                "category": spec.category,
                "policy": {
                    "roles": tool.policy.roles,
                    "requires_confirmation": tool.policy.requires_confirmation,
                    "rate_limit_per_minute": tool.policy.rate_limit_per_minute,
                    "timeout_ms": tool.policy.timeout.as_millis() as u64,
                    "phi": spec.phi,
                    "third_party": spec.third_party,
                },
                "health": health,
            })
        })
        .collect();
    for (server, config) in &state.config.mcp.servers {
        let health = match server_state(server).map(ToolHealth::of) {
            Some(ToolHealth::Up) | None => ToolHealth::NotOffered,
            Some(down) => down,
        };
        // The model-facing name (CONTRACT §10: `SERVER__TOOL`).
        let names = config.allow.iter().map(|tool| format!("{server}__{tool}"));
        tools.extend(names.filter(|name| registry.get(name).is_none()).map(|name| {
            json!({"name": name, "origin": server, "category": crate::tools::Category::Mcp, "policy": null, "health": health})
        }));
    }
    Ok(Json(json!({"tools": tools, "mcp_servers": servers})).into_response())
}
