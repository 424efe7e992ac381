//! Liveness, readiness and the Prometheus scrape.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

use super::state::AppState;

pub async fn healthz() -> impl IntoResponse {
    (StatusCode::OK, "ok\n")
}

/// 503 while draining: load balancers stop sending new sessions before the process goes away.
/// Tools whose backend cannot be reached are named as degraded, with 200: the other tools work.
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    if state.shutdown.is_draining() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining\n".to_string());
    }
    let degraded: Vec<&str> =
        state.deps.registry.iter().filter(|t| t.tool.degraded()).map(|t| t.name()).collect();
    if degraded.is_empty() {
        (StatusCode::OK, "ready\n".to_string())
    } else {
        (StatusCode::OK, format!("ready (degraded: {})\n", degraded.join(", ")))
    }
}

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, crate::telemetry::METRICS_CONTENT_TYPE)],
        state.deps.metrics.render(),
    )
}
