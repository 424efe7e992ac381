//! Liveness, readiness and the Prometheus scrape.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

use super::state::AppState;

pub async fn healthz() -> impl IntoResponse {
    (StatusCode::OK, "ok\n")
}

/// 503 while draining: load balancers stop sending new sessions before the process goes away.
/// A Redis outage is reported but keeps the instance ready: it degrades to local caps.
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let (status, head) = if state.shutdown.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n")
    } else {
        (StatusCode::OK, "ready\n")
    };
    let redis = match state.cluster.redis_up() {
        None => "",
        Some(true) => "redis: up\n",
        Some(false) => "redis: down (session caps and limits per instance, admin lists this instance only)\n",
    };
    (status, format!("{head}{redis}"))
}

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, crate::telemetry::METRICS_CONTENT_TYPE)],
        state.deps.metrics.render(),
    )
}
