//! Liveness, readiness and the Prometheus scrape.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

use super::state::AppState;

pub async fn healthz() -> impl IntoResponse {
    (StatusCode::OK, "ok\n")
}

/// 503 while draining: load balancers stop sending new sessions before the process goes away;
/// with `audit.on_error = "fail_closed"`, while audit records cannot be made durable (calls
/// would fail `audit_unavailable`; the writer retries on its own, so readiness comes back); and,
/// whatever `on_error` says, while an audit commit has hung past `audit::writer::STALLED_AFTER`
/// (every tool answer waits on it).
/// A tool whose remote backend cannot be reached is reported degraded, still 200: every other tool
/// and the voice session itself keep working. A Redis outage is reported but keeps the instance
/// ready: it degrades to local caps. So does another instance under this one's id (its sessions
/// are served; only admin kills and the registry suffer).
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let audit = &state.deps.audit;
    let (status, head) = if state.shutdown.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n".to_string())
    } else if audit.is_stalled() {
        (StatusCode::SERVICE_UNAVAILABLE, "audit log stalled\n".to_string())
    } else if audit.on_error() == crate::config::AuditOnError::FailClosed && !audit.is_healthy() {
        (StatusCode::SERVICE_UNAVAILABLE, "audit log unavailable\n".to_string())
    } else {
        let degraded: Vec<&str> = state
            .mcp
            .registry()
            .iter()
            .filter(|t| t.tool.backend_reachable() == Some(false))
            .map(|t| t.name())
            .collect();
        if degraded.is_empty() {
            (StatusCode::OK, "ready\n".to_string())
        } else {
            (StatusCode::OK, format!("ready, degraded: backend unreachable for {}\n", degraded.join(", ")))
        }
    };
    let redis = match state.cluster.redis_up() {
        None => "",
        Some(true) => "redis: up\n",
        Some(false) => "redis: down (session caps and limits per instance, admin lists this instance only)\n",
    };
    let id = if state.cluster.id_conflict() { "instance_id: also claimed by another running instance (see the logs)\n" } else { "" };
    // MCP servers that are down do not make the process unready (their tools are left out until
    // they return), but they are named here.
    (status, format!("{head}{redis}{id}{}", state.mcp.readiness_detail()))
}

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, crate::telemetry::METRICS_CONTENT_TYPE)],
        state.deps.metrics.render(),
    )
}
