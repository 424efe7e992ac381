//! Liveness, readiness and the Prometheus scrape.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

use super::state::AppState;

pub async fn healthz() -> impl IntoResponse {
    (StatusCode::OK, "ok\n")
}

/// 503 while draining: load balancers stop sending new sessions before the process goes away.
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    if state.shutdown.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n".to_string())
    } else {
        // MCP servers that are down do not make the process unready (their tools are left
        // out until they return), but they are named here.
        (StatusCode::OK, format!("ready\n{}", state.mcp.readiness_detail()))
    }
}

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, crate::telemetry::METRICS_CONTENT_TYPE)],
        state.deps.metrics.render(),
    )
}
