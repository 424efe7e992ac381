//! Liveness, readiness and the Prometheus scrape.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

use super::state::AppState;

pub async fn healthz() -> impl IntoResponse {
    (StatusCode::OK, "ok\n")
}

/// 503 while draining: load balancers stop sending new sessions before the process goes away;
/// and, with `audit.on_error = "fail_closed"`, while audit records cannot be made durable (calls
/// would fail `audit_unavailable`). The writer retries on its own, so readiness comes back.
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let audit = &state.deps.audit;
    if state.shutdown.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n")
    } else if audit.on_error() == crate::config::AuditOnError::FailClosed && !audit.is_healthy() {
        (StatusCode::SERVICE_UNAVAILABLE, "audit log unavailable\n")
    } else {
        (StatusCode::OK, "ready\n")
    }
}

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, crate::telemetry::METRICS_CONTENT_TYPE)],
        state.deps.metrics.render(),
    )
}
