//! The spans voxgate exports (session, tool call, upstream connect), the functions that finish
//! them with one log line each, and W3C trace-context injection for a tool's outgoing HTTP.
//!
//! The field lists below are the whole set of attributes a collector can ever see: a `record` of an
//! undeclared field is ignored by `tracing`. Never add arguments, results, transcripts, tokens or
//! user ids here; identifiers are checked to look like identifiers before they are recorded.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::Injector;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::metrics::ToolLabel;
use crate::audit::{AuditStatus, Confirmation};
use crate::tools::ErrorCode;


/// Recorded instead of an identifier that does not look like one (it might carry user text).
const REDACTED: &str = "redacted";
/// Longest identifier recorded as is (UUIDs, `call_…` ids, model names fit easily).
const MAX_ID_LEN: usize = 128;

/// An id or model name as given when it is short and made of `[A-Za-z0-9._:-]`, else
/// `"redacted"`. The model name comes from the client's query string, so it is not trusted.
pub fn safe_id(value: &str) -> &str {
    let ok = !value.is_empty()
        && value.len() <= MAX_ID_LEN
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    if ok { value } else { REDACTED }
}

/// The root span of one voice session (`voxgate.session`); logs "session started" inside it.
/// Finish it with [`record_session_outcome`]. Keep it alive (or `.instrument` the session task
/// with it) for the whole session: the span ends when its last handle drops.
pub fn session_span(session_id: &str, model: &str) -> Span {
    let span = tracing::info_span!(
        target: "voxgate::session",
        "voxgate.session",
        session.id = safe_id(session_id),
        model = safe_id(model),
        outcome = Empty,
        otel.status_code = Empty,
    );
    tracing::info!(target: "voxgate::session", parent: &span, "session started");
    span
}

/// Records how the session ended and logs "session ended". Outcomes containing `error`
/// (`client_error`, `upstream_error`) mark the span as failed in Jaeger.
pub fn record_session_outcome(span: &Span, outcome: &'static str, duration: Duration) {
    span.record("outcome", outcome);
    if outcome.contains("error") {
        span.record("otel.status_code", "error");
    }
    tracing::info!(
        target: "voxgate::session",
        parent: span,
        outcome,
        duration_ms = duration_ms(duration),
        "session ended"
    );
}

/// A child span of `parent` for one server tool call (`voxgate.tool_call`). Run the call inside it
/// (`.instrument(span)`) and finish it with [`record_tool_outcome`]. `tool` is the tool's label
/// ([`super::metrics::Metrics::tool_label`]): its name when this process knows the tool, else
/// `other`, so a name the model made up never reaches a trace.
pub fn tool_span(parent: &Span, tool: ToolLabel, call_id: &str) -> Span {
    let tool = tool.as_str();
    tracing::info_span!(
        target: "voxgate::tool",
        parent: parent,
        "voxgate.tool_call",
        tool,
        call.id = safe_id(call_id),
        status = Empty,
        confirmation = Empty,
        error.code = Empty,
        duration_ms = Empty,
        otel.status_code = Empty,
    )
}

/// Records the terminal state of a tool call and logs "tool call finished" (one line per call).
/// `error_code` is set for failed calls; `duration` is how long the tool ran, `None` if it never did.
pub fn record_tool_outcome(
    span: &Span,
    status: AuditStatus,
    confirmation: Confirmation,
    error_code: Option<ErrorCode>,
    duration: Option<Duration>,
) {
    let (status_name, confirmation) = (status.as_str(), confirmation.as_str());
    let error_code = error_code.map(ErrorCode::as_str);
    span.record("status", status_name);
    span.record("confirmation", confirmation);
    if let Some(code) = error_code {
        span.record("error.code", code);
    }
    if let Some(duration) = duration {
        span.record("duration_ms", duration_ms(duration));
    }
    if status == AuditStatus::Failed {
        span.record("otel.status_code", "error");
    }
    tracing::info!(
        target: "voxgate::tool",
        parent: span,
        status = status_name,
        confirmation,
        error_code,
        duration_ms = duration.map(duration_ms),
        "tool call finished"
    );
}

/// A span around opening the upstream WebSocket (`voxgate.upstream_connect`), a child of the
/// current span: create it while the session span is entered, e.g.
/// `session_span.in_scope(|| upstream_connect_span("openai"))`. `kind`: openai, azure, simulated.
pub fn upstream_connect_span(kind: &str) -> Span {
    tracing::info_span!(
        target: "voxgate::upstream",
        "voxgate.upstream_connect",
        upstream.kind = safe_id(kind),
        outcome = Empty,
        otel.status_code = Empty,
    )
}

/// Records how the connect ended: `"connected"` or a failure reason (timeout, refused, tls, ...),
/// which also marks the span as failed.
pub fn record_upstream_connect(span: &Span, outcome: &'static str) {
    span.record("outcome", outcome);
    if outcome != "connected" {
        span.record("otel.status_code", "error");
    }
}

/// Writes W3C `traceparent` (and `tracestate`) for `span` into `headers`, through the global
/// propagator that [`super::init`] installs. Call it for every HTTP request a tool makes, with the
/// tool's span. Without telemetry (or for a disabled span) nothing is written.
pub fn inject_trace_context(span: &Span, headers: &mut HeaderMap) {
    let context = span.context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut HeaderInjector(headers));
    });
}

/// The trace-context headers for `span` as a fresh map, for `RequestBuilder::headers`.
pub fn trace_headers(span: &Span) -> HeaderMap {
    let mut headers = HeaderMap::new();
    inject_trace_context(span, &mut headers);
    headers
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        // The propagator only produces valid header names and values; anything else is skipped
        // rather than sent malformed.
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// Milliseconds as `i64`: tracing-opentelemetry turns `u64` fields into strings, `i64` into ints.
fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_id_keeps_ids_and_redacts_text() {
        assert_eq!(safe_id("call_AbC-123"), "call_AbC-123");
        assert_eq!(
            safe_id("gpt-realtime-2025-08-28"),
            "gpt-realtime-2025-08-28"
        );
        assert_eq!(
            safe_id("3f2b8c1e-0d4a-4c55-9a7e-2b1f0e9d8c7b"),
            "3f2b8c1e-0d4a-4c55-9a7e-2b1f0e9d8c7b"
        );
        assert_eq!(safe_id("John Doe, born 1970"), REDACTED);
        assert_eq!(safe_id(""), REDACTED);
        assert_eq!(safe_id(&"a".repeat(MAX_ID_LEN + 1)), REDACTED);
    }

    #[test]
    fn no_subscriber_means_no_headers() {
        let span = tool_span(&Span::none(), crate::telemetry::metrics::Metrics::new().tool_label("search_pubmed"), "call_1");
        assert!(trace_headers(&span).is_empty());
    }
}
