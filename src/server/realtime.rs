//! `GET /v1/realtime`: everything decided before the upgrade (origin, token, subprotocol, model,
//! session caps — refusals are HTTP errors, never a socket that closes at once), then the upgrade
//! itself, the upstream connection, and the session task.
//!
//! Order matters: a single-use ticket is spent only after the session is admitted (this instance's
//! caps, then the per-user cap across instances), so a browser refused for a cap can retry with the
//! same ticket (unless it is already spent: then the answer is 401, not the cap's). The drain
//! tracks the request from its start ([`crate::shutdown::Shutdown::enter`]): one that was being
//! admitted when the drain began is refused with 503 `draining` before its ticket is spent, and
//! one already past that point runs and closes with the drain (`session.closing`, 1012). A
//! `Sec-WebSocket-Key` must be 16 bytes in base64 (RFC 6455 §4.2.1). A subprotocol
//! is echoed only when the client offered it (RFC 6455: a client fails a handshake that selects one
//! it did not offer).
//!
//! The upgrade is done here rather than with axum's `WebSocketUpgrade` so the client socket is a
//! plain tokio-tungstenite stream over the TCP socket itself: the same frame type as the
//! upstream's, so frames pass from one to the other without conversion or copy.

use std::collections::HashMap;
use std::time::Instant;

use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use futures::SinkExt;
use tracing::Instrument;

use super::error::ApiError;
use super::state::{AppState, Authenticated};
use crate::cluster::{Seat, SessionEntry};
use crate::config::AuthMode;
use crate::policy::auth::{self, AuthError};
use crate::protocol::voxgate::{self as events, codes};
use crate::session::live::AdmitError;
use crate::session::{self, SessionInfo};
use crate::upstream;

/// The subprotocol that asks for `voxgate.*` events.
pub const EVENTS_PROTOCOL: &str = "voxgate.v1";

pub async fn realtime(
    State(state): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
    mut request: Request,
) -> Result<Response, ApiError> {
    let headers = request.headers().clone();
    // Held until the session task is spawned (that task is tracked itself): the awaits on Redis
    // below must not let a drain that begins meanwhile drop this request unanswered.
    let Some(_entered) = state.shutdown.enter() else {
        state.deps.metrics.http_rejection("draining");
        return Err(ApiError::draining());
    };
    let accept = websocket_accept(&headers)?;
    check_origin(&state, &headers)?;

    let protocols = auth::offered_protocols(&headers);
    let token = auth::presented_token(&headers, &protocols);
    let authenticated = state.authenticate(token.as_deref()).map_err(|err| {
        state.deps.metrics.http_rejection("unauthorized");
        ApiError::unauthorized(err.to_string())
    })?;
    let principal = authenticated.principal.clone();
    let offers_events = protocols.iter().any(|p| p == EVENTS_PROTOCOL);
    let wants_events = offers_events || query.get("voxgate_events").is_some_and(|v| v == "1" || v == "true");
    let selected = if protocols.iter().any(|p| p == "realtime") {
        Some("realtime")
    } else if offers_events {
        Some(EVENTS_PROTOCOL)
    } else {
        None
    };
    let model = allowed_model(&state, query.get("model"))?;

    let id = format!("vgs_{}", uuid::Uuid::new_v4().simple());
    let user = state.hasher.hash(&principal.sub);
    let cancel = state.shutdown.token().child_token();
    // In `none` mode every session is the same anonymous user; only the process cap applies.
    let cap_key = if state.config.auth.mode == AuthMode::None { id.clone() } else { user.clone() };
    let model_name = model.clone().unwrap_or_else(|| state.config.upstream.model.clone());
    let admission = match state.live.admit(&id, &cap_key, &model_name, cancel.clone()) {
        Ok(admission) => admission,
        Err(err) => return Err(refused_for_cap(&state, &authenticated, err).await),
    };
    let seat = match admit_in_cluster(&state, &id, &user, &model_name).await {
        Ok(seat) => seat,
        Err(err) => return Err(refused_for_cap(&state, &authenticated, err).await),
    };
    // The drain may have begun while Redis was asked: refused now, the ticket is still good on
    // another instance. From here on the session starts, and closes with the drain.
    if state.shutdown.is_draining() {
        state.deps.metrics.http_rejection("draining");
        return Err(ApiError::draining());
    }
    // Admitted here and across instances: only now is the ticket (if any) spent, so a refusal for
    // either cap leaves it usable. Single use does not depend on this order (`Tickets::spend`
    // claims it atomically); refused here, the admission and the seat are dropped with it.
    authenticated.spend().await.map_err(|err| {
        state.deps.metrics.http_rejection("unauthorized");
        ApiError::unauthorized(err.to_string())
    })?;

    // The session outlives its connection's future: it counts on its shard itself, from now (not
    // from its task's first poll, which on a busy thread comes after hyper has stopped counting
    // the connection). Dropped with the task if it never runs.
    let on_shard = request.extensions().get::<super::shards::ShardLoad>().map(super::shards::ShardLoad::hold);
    let on_upgrade = hyper::upgrade::on(&mut request);
    let origin = super::client_addr::origin(&state.config.server.trusted_proxies, request.extensions(), &headers, false);
    let info = SessionInfo { id, principal, user, wants_events, model: model_name, origin };
    let task_state = state.clone();
    state.shutdown.tracker().spawn(async move {
        let _admission = admission;
        let _seat = seat;
        let _on_shard = on_shard;
        let upgraded = match on_upgrade.await {
            Ok(upgraded) => upgraded,
            Err(err) => {
                tracing::debug!(error = %err, "client upgrade failed");
                return;
            }
        };
        let Some((stream, read_ahead)) = take_socket(upgraded) else {
            tracing::error!("the upgraded connection is not a TCP socket; session dropped");
            return;
        };
        let config = client_ws_config(task_state.config.server.max_frame_bytes);
        let mut client = WebSocketStream::from_partially_read(stream, read_ahead, Role::Server, Some(config)).await;
        let started = Instant::now();
        let session_span = crate::telemetry::session_span(&info.id, &info.model);
        let Some(upstream) = connect_upstream(&task_state, &info, &mut client, model.as_deref(), &session_span, started).await else {
            return;
        };
        // The session is awaited here, not inside a helper `async fn`: each such layer keeps a
        // second copy of every argument it passed on beside the session's state, for the
        // session's life (docs/performance-history.md, twelfth pass).
        let _active = task_state.deps.metrics.session_started();
        let reconnect = reconnector(&task_state, model);
        let deps = task_state.session_deps();
        // A session still running when the drain gives up is dropped with its session thread
        // (`Shards::stop`): its sockets and its admission go with it, so the process can exit.
        let outcome = session::run(info, session_span, client, upstream, deps, cancel, Some(reconnect)).await;
        task_state.deps.metrics.session_ended(outcome.as_str());
    });

    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let out = response.headers_mut();
    out.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    out.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    out.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    // Never echo a token-bearing subprotocol.
    if let Some(protocol) = selected {
        out.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(protocol));
    }
    Ok(response)
}

/// The TCP socket under hyper's upgraded connection, and the bytes hyper read past the request
/// (they go to the WebSocket first). The session reads and writes the socket itself, as a bare
/// relay does: through `Upgraded` (a boxed socket behind a buffer of what hyper read ahead, adapted
/// once more to tokio's I/O traits) every read and write cost an indirect call and two buffer
/// conversions. The read-ahead bytes are copied out here so that hyper's whole read buffer, which
/// they point into, is freed now and not kept for the session's life.
fn take_socket(upgraded: hyper::upgrade::Upgraded) -> Option<(TcpStream, Vec<u8>)> {
    let parts = upgraded.downcast::<super::listener::ClientIo>().ok()?;
    let read_ahead = parts.read_buf.to_vec();
    Some((parts.io.into_inner(), read_ahead))
}

/// The answer to a session refused for a cap (this instance's, or the per-user cap across
/// instances). A ticket already spent, here or on another instance, is refused as used (401,
/// CONTRACT §2) rather than for the cap: only this path asks, so an admitted session pays no extra
/// Redis round trip. When Redis cannot say, the cap's refusal stands.
async fn refused_for_cap(state: &AppState, authenticated: &Authenticated, err: AdmitError) -> ApiError {
    if authenticated.ticket_spent().await {
        state.deps.metrics.http_rejection("unauthorized");
        return ApiError::unauthorized(AuthError::TicketUsed.to_string());
    }
    let (status, code) = match err {
        AdmitError::Full => (StatusCode::SERVICE_UNAVAILABLE, "too_many_sessions"),
        AdmitError::UserLimit => (StatusCode::TOO_MANY_REQUESTS, "too_many_user_sessions"),
    };
    state.deps.metrics.http_rejection(code);
    ApiError::new(status, code, err.to_string())
}

/// Register the session with the cluster: the per-user cap across instances (not in `none`
/// mode, where every session is the same anonymous user) and the registry the admin API lists.
/// Its only refusal is [`AdmitError::UserLimit`].
async fn admit_in_cluster(state: &AppState, id: &str, user: &str, model: &str) -> Result<Seat, AdmitError> {
    let started_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let entry = SessionEntry {
        id: id.to_string(),
        instance: state.cluster.instance().to_string(),
        user: user.to_string(),
        model: model.to_string(),
        started_at,
    };
    let cap = (state.config.auth.mode != AuthMode::None).then(|| (user.to_string(), state.config.server.max_sessions_per_user));
    state.cluster.admit(entry, cap).await
}

/// Connect the session's upstream. One that cannot be reached is reported to the client (an
/// `error` event, close 1013), to the metrics and to the session's span, and `None` comes back.
async fn connect_upstream<S>(
    state: &AppState,
    info: &SessionInfo,
    client: &mut WebSocketStream<S>,
    model: Option<&str>,
    session_span: &tracing::Span,
    started: Instant,
) -> Option<upstream::UpstreamConn>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let metrics = &state.deps.metrics;
    let span = session_span.in_scope(|| crate::telemetry::upstream_connect_span(state.upstream_kind_name()));
    // Boxed: the TLS connect state machine is larger than the session loop's, and inline it would
    // size the task's allocation for the whole life of the session.
    let connect = Box::pin(upstream::connect(&state.config.upstream, model).instrument(span.clone()));
    match connect.await {
        Ok(upstream) => {
            crate::telemetry::record_upstream_connect(&span, "connected");
            metrics.upstream_connected(started.elapsed());
            Some(upstream)
        }
        Err(err) => {
            crate::telemetry::record_upstream_connect(&span, err.reason());
            metrics.upstream_connect_failed(err.reason());
            tracing::warn!(session.id = %info.id, reason = err.reason(), detail = err.detail(), "upstream connection failed");
            let message = format!("{err}. Try again later.");
            metrics.client_error(codes::UPSTREAM_UNAVAILABLE);
            let _ = client.send(Message::text(events::error_event(codes::UPSTREAM_UNAVAILABLE, &message, None))).await;
            let frame = CloseFrame { code: CloseCode::Again, reason: "realtime service unavailable".into() };
            let _ = client.close(Some(frame)).await;
            let outcome = session::SessionOutcome::UpstreamError.as_str();
            metrics.session_ended(outcome);
            crate::telemetry::record_session_outcome(session_span, outcome, started.elapsed());
            None
        }
    }
}

/// How a session opens a new upstream for a resume: as its first one, same URL, auth and model.
fn reconnector(state: &AppState, model: Option<String>) -> session::resume::Connect {
    let config = std::sync::Arc::new(state.config.upstream.clone());
    std::sync::Arc::new(move || {
        let (config, model) = (config.clone(), model.clone());
        Box::pin(async move { upstream::connect(&config, model.as_deref()).await })
    })
}

/// Client sockets: frames up to twice `server.max_frame_bytes` are read whole so that an oversize
/// one can be refused with an `error` event while the session goes on; small buffers keep idle
/// sessions cheap.
fn client_ws_config(max_frame_bytes: usize) -> WebSocketConfig {
    let hard_limit = max_frame_bytes.saturating_mul(2);
    WebSocketConfig::default()
        .read_buffer_size(4 * 1024)
        .write_buffer_size(crate::session::outbox::SOCKET_WRITE_BUFFER)
        .max_write_buffer_size(64 * 1024 * 1024)
        .max_message_size(Some(hard_limit))
        .max_frame_size(Some(hard_limit))
}

/// The model a client asked for with `?model=`: `upstream.model` or one of
/// `upstream.allowed_models`; anything else is refused (HTTP 400) before the upgrade. `None` means
/// the default.
fn allowed_model(state: &AppState, asked: Option<&String>) -> Result<Option<String>, ApiError> {
    let Some(asked) = asked.filter(|m| !m.is_empty()) else { return Ok(None) };
    let upstream = &state.config.upstream;
    if *asked == upstream.model || upstream.allowed_models.iter().any(|m| m == asked) {
        return Ok(Some(asked.clone()));
    }
    state.deps.metrics.http_rejection("model_not_allowed");
    // The asked-for name is not echoed: an error never repeats what the client sent.
    Err(ApiError::bad_request("model_not_allowed", "this model is not available on this server"))
}

/// The `Sec-WebSocket-Accept` answer to a well-formed WebSocket handshake; 426 or 400 otherwise.
fn websocket_accept(headers: &HeaderMap) -> Result<HeaderValue, ApiError> {
    let has_token = |name: header::HeaderName, token: &str| {
        headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).any(|v| {
            v.split(',').any(|part| part.trim().eq_ignore_ascii_case(token))
        })
    };
    if !has_token(header::UPGRADE, "websocket") || !has_token(header::CONNECTION, "upgrade") {
        return Err(ApiError::new(StatusCode::UPGRADE_REQUIRED, "upgrade_required", "this endpoint needs a WebSocket upgrade"));
    }
    if headers.get(header::SEC_WEBSOCKET_VERSION).and_then(|v| v.to_str().ok()) != Some("13") {
        return Err(ApiError::bad_request("bad_handshake", "Sec-WebSocket-Version must be 13"));
    }
    let key = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| ApiError::bad_request("bad_handshake", "Sec-WebSocket-Key is missing"))?;
    // RFC 6455 §4.2.1: a nonce of 16 bytes in base64. Anything else is not a WebSocket client's.
    let nonce = base64::engine::general_purpose::STANDARD.decode(key);
    if !nonce.is_ok_and(|nonce| nonce.len() == 16) {
        return Err(ApiError::bad_request("bad_handshake", "Sec-WebSocket-Key is invalid"));
    }
    // Base64 of a SHA-1: always a valid header value.
    HeaderValue::from_str(&derive_accept_key(key.as_bytes()))
        .map_err(|_| ApiError::bad_request("bad_handshake", "Sec-WebSocket-Key is invalid"))
}

fn check_origin(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let allowed = &state.config.server.allowed_origins;
    if allowed.is_empty() {
        return Ok(());
    }
    // Non-browser clients send no Origin; the allow-list is about browsers.
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return Ok(()) };
    if allowed.iter().any(|a| a.trim_end_matches('/').eq_ignore_ascii_case(origin)) {
        Ok(())
    } else {
        state.deps.metrics.http_rejection("bad_origin");
        Err(ApiError::forbidden("origin_not_allowed", "this origin may not open sessions"))
    }
}

impl From<AuthError> for ApiError {
    fn from(err: AuthError) -> Self {
        ApiError::unauthorized(err.to_string())
    }
}
