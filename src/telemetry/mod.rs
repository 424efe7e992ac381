//! Logs, Prometheus metrics and OpenTelemetry traces.
//!
//! [`init`] installs the process-wide `tracing` subscriber once at start: the log layer (`logs.rs`)
//! and, when `telemetry.otlp_endpoint` is set, the OTLP span pipeline (`traces.rs`). [`Metrics`]
//! is independent of it and travels as a cheap clone in the app state. Only `voxgate.*` spans reach
//! a collector, i.e. those made by the helpers in [`spans`], none of which carries PHI.

mod exposition;
mod frame_counters;
mod logs;
pub mod metrics;
pub mod spans;
mod traces;

use std::time::Duration;

use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Registry;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::TelemetryConfig;

pub use metrics::{
    ActiveSession, CONTENT_TYPE as METRICS_CONTENT_TYPE, FrameCounters, Metrics,
    OPENMETRICS_CONTENT_TYPE,
};
pub use spans::{
    inject_trace_context, record_session_outcome, record_tool_outcome, record_upstream_connect,
    session_span, tool_span, trace_headers, upstream_connect_span,
};

/// Upper bound on flushing spans at exit, so a dead collector never holds up shutdown.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Why telemetry could not be set up. Messages name the setting, never a secret.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("invalid log filter in {source_key}: {reason}")]
    LogFilter {
        source_key: &'static str,
        reason: String,
    },
    #[error("telemetry.otlp_endpoint: cannot build the OTLP exporter: {0}")]
    Exporter(String),
    #[error("telemetry.otlp_endpoint: trace export needs a running tokio runtime")]
    NoRuntime,
    #[error("a global tracing subscriber is already installed")]
    AlreadyInitialized,
}

/// Holds the tracer provider so spans still queued can be flushed at exit.
#[derive(Debug)]
#[must_use = "call shutdown() at exit, or queued spans are lost"]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl TelemetryGuard {
    /// Whether an OTLP exporter is running.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Flushes queued spans and stops the exporter, within [`SHUTDOWN_TIMEOUT`]. Returns whether
    /// everything was sent; a `false` has already been logged and needs no handling.
    pub async fn shutdown(self) -> bool {
        self.shutdown_within(SHUTDOWN_TIMEOUT).await
    }

    /// [`TelemetryGuard::shutdown`] with another bound (e.g. what is left of a drain deadline).
    pub async fn shutdown_within(self, limit: Duration) -> bool {
        match self.provider {
            Some(provider) => traces::shutdown_provider(provider, limit).await,
            None => true,
        }
    }
}

/// Builds the subscriber for `config` without installing it, for tests that scope it with
/// `tracing::dispatcher::with_default`/`set_default`. Also sets the global W3C TraceContext
/// propagator (idempotent). With an OTLP endpoint this must run inside a tokio runtime.
pub fn build(
    config: &TelemetryConfig,
) -> Result<(tracing::Dispatch, TelemetryGuard), TelemetryError> {
    let mut layers = vec![logs::layer(config)?];
    let mut provider = None;
    if let Some(endpoint) = config
        .otlp_endpoint
        .as_deref()
        .filter(|e| !e.trim().is_empty())
    {
        let (layer, built) = traces::pipeline(config, endpoint)?;
        layers.push(layer);
        provider = Some(built);
    }
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let dispatch = tracing::Dispatch::new(Registry::default().with(layers));
    Ok((dispatch, TelemetryGuard { provider }))
}

/// Installs the global subscriber (and `log` bridge) for `config`. Call once, inside the tokio
/// runtime, before serving. A second call returns [`TelemetryError::AlreadyInitialized`] instead
/// of panicking, so tests may call it freely.
pub fn init(config: &TelemetryConfig) -> Result<TelemetryGuard, TelemetryError> {
    let (dispatch, guard) = build(config)?;
    if dispatch.try_init().is_err() {
        // The provider built above was never used; stop its batch task off this thread (its
        // shutdown blocks until the task answers, which a runtime worker must not wait for).
        if let Some(provider) = guard.provider {
            let stopper = std::thread::Builder::new().name("voxgate-otel-shutdown".into());
            if let Err(err) = stopper.spawn(move || provider.shutdown()) {
                tracing::debug!(error = %err, "could not stop the unused trace exporter");
            }
        }
        return Err(TelemetryError::AlreadyInitialized);
    }
    // `try_init` opens the `log` bridge at `trace` (the layers' filters give no level hint), so
    // every `log::trace!` of a library — tungstenite has several per WebSocket frame — went
    // through a dispatcher lookup only to be dropped (≈ 4 % of voxgate's CPU at N = 100 in
    // `perf`). The bridge now stops at the most verbose level the log filter can let through.
    log::set_max_level(logs::log_max_level(config)?);
    if let Some(provider) = &guard.provider {
        // For libraries that use the OTel API directly; our own spans go through the layer.
        opentelemetry::global::set_tracer_provider(provider.clone());
        tracing::info!(
            protocol = ?config.otlp_protocol,
            service = %config.service_name,
            "exporting traces over OTLP"
        );
    }
    Ok(guard)
}
