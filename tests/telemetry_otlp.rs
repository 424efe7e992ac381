//! Trace export end to end: voxgate's telemetry sends its session, upstream-connect and tool spans
//! over OTLP/HTTP to a real receiver (tests/support/otlp_receiver.py, a Jaeger stand-in), with the
//! right parents and attributes, no PHI, and W3C trace context on a tool's outgoing HTTP request;
//! and a dead collector never blocks span creation or shutdown.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::otlp::{one_span, received, start_receiver};
use voxgate::config::{LogFormat, OtlpProtocol, TelemetryConfig};
use voxgate::audit::{AuditStatus, Confirmation};
use voxgate::telemetry::{self, TelemetryError};
use voxgate::tools::ErrorCode;

/// Words that stand for patient data in these tests: none may reach the receiver.
const PHI: [&str; 3] = ["Jane Roe", "1961-07-04", "MRN 4411"];

fn config(endpoint: String, protocol: OtlpProtocol) -> TelemetryConfig {
    TelemetryConfig {
        otlp_endpoint: Some(endpoint),
        otlp_protocol: protocol,
        log_format: LogFormat::Json,
        log_level: "info".into(),
        service_name: "voxgate".into(),
        instance_id: "vg-otlp-test".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_and_tool_spans_reach_the_otlp_receiver_with_parents_and_no_phi() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut receiver = start_receiver(dir.path()).await;
    let endpoint = format!("http://127.0.0.1:{}", receiver.port);
    let guard =
        telemetry::init(&config(endpoint.clone(), OtlpProtocol::HttpProtobuf)).expect("init");
    assert!(guard.exporting());
    // try_init semantics: a second install is an error, not a panic.
    assert!(matches!(
        telemetry::init(&config(endpoint.clone(), OtlpProtocol::HttpProtobuf)),
        Err(TelemetryError::AlreadyInitialized)
    ));

    // --- a scripted session ---
    let session = telemetry::session_span("3f2b8c1e-0d4a-4c55-9a7e-2b1f0e9d8c7b", "gpt-realtime");
    let connect = session.in_scope(|| telemetry::upstream_connect_span("simulated"));
    telemetry::record_upstream_connect(&connect, "connected");
    drop(connect);
    // A log line with patient data inside the session: logs are the callers' duty, but it must
    // never become part of a trace.
    session.in_scope(|| tracing::info!(patient = PHI[0], "transcript {}", PHI[1]));
    // A non-voxgate span with PHI fields (e.g. from a library) is not exported.
    session.in_scope(|| drop(tracing::info_span!("db_query", sql = PHI[2])));

    // Tool spans take a label only the metrics can give: a made-up name becomes `other`.
    let metrics = voxgate::telemetry::metrics::Metrics::new();
    let tool = telemetry::tool_span(&session, metrics.tool_label("get_calendar_events"), "call_cal_1");
    let backend = format!("{endpoint}/backend/calendar");
    let started = Instant::now();
    let mut headers = http::HeaderMap::new();
    telemetry::inject_trace_context(&tool, &mut headers);
    let status = reqwest::Client::new()
        .get(&backend)
        .headers(headers)
        .send()
        .await
        .expect("tool backend request")
        .status();
    assert!(status.is_success());
    telemetry::record_tool_outcome(
        &tool,
        AuditStatus::Completed,
        Confirmation::Approved,
        None,
        Some(started.elapsed()),
    );
    drop(tool);

    // A model-invented tool name and an id carrying text: recorded as `other` / `redacted`.
    let failed = telemetry::tool_span(&session, metrics.tool_label("Jane Roe lookup"), "call Jane Roe");
    telemetry::record_tool_outcome(
        &failed,
        AuditStatus::Failed,
        Confirmation::NotRequired,
        Some(ErrorCode::UnknownTool),
        None,
    );
    drop(failed);

    telemetry::record_session_outcome(&session, "client_closed", Duration::from_secs(3));
    drop(session);

    let t = Instant::now();
    assert!(guard.shutdown().await, "shutdown did not flush all spans");
    assert!(t.elapsed() < telemetry::SHUTDOWN_TIMEOUT);

    // --- what the collector got ---
    let (raw, lines) = received(&receiver.out);
    let spans: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "span").collect();
    for span in &spans {
        assert_eq!(span["resource"]["service.name"], "voxgate", "{span}");
        assert_eq!(span["resource"]["service.instance.id"], "vg-otlp-test", "{span}");
        assert!(
            span["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("voxgate.")),
            "exported {span}"
        );
        assert_eq!(
            span["events"],
            serde_json::json!([]),
            "span events exported: {span}"
        );
    }
    for word in PHI {
        assert!(
            !raw.contains(word),
            "PHI {word:?} reached the collector:\n{raw}"
        );
    }
    let otlp_posts = lines
        .iter()
        .filter(|l| l["kind"] == "request" && l["path"] == "/v1/traces");
    assert!(otlp_posts.clone().count() >= 1);
    assert!(
        otlp_posts
            .clone()
            .all(|l| l["headers"]["content-type"] == "application/x-protobuf")
    );

    let session = one_span(&lines, "voxgate.session", ("model", "gpt-realtime"));
    assert_eq!(session["parent_span_id"], "");
    assert_eq!(
        session["attributes"]["session.id"],
        "3f2b8c1e-0d4a-4c55-9a7e-2b1f0e9d8c7b"
    );
    assert_eq!(session["attributes"]["outcome"], "client_closed");
    let trace_id = session["trace_id"].as_str().expect("trace id");

    let connect = one_span(
        &lines,
        "voxgate.upstream_connect",
        ("upstream.kind", "simulated"),
    );
    assert_eq!(connect["parent_span_id"], session["span_id"]);
    assert_eq!(connect["attributes"]["outcome"], "connected");

    let tool = one_span(&lines, "voxgate.tool_call", ("tool", "get_calendar_events"));
    assert_eq!(tool["trace_id"], trace_id);
    assert_eq!(
        tool["parent_span_id"], session["span_id"],
        "tool span is not the session's child"
    );
    assert_eq!(tool["attributes"]["call.id"], "call_cal_1");
    assert_eq!(tool["attributes"]["status"], "completed");
    assert_eq!(tool["attributes"]["confirmation"], "approved");
    assert!(tool["attributes"]["duration_ms"].is_i64(), "{tool}");
    assert_ne!(tool["status"]["code"], "STATUS_CODE_ERROR");

    let failed = one_span(&lines, "voxgate.tool_call", ("tool", "other"));
    assert_eq!(failed["parent_span_id"], session["span_id"]);
    assert_eq!(failed["attributes"]["call.id"], "redacted");
    assert_eq!(failed["attributes"]["error.code"], "unknown_tool");
    assert_eq!(failed["status"]["code"], "STATUS_CODE_ERROR");

    // The tool's HTTP request carried the tool span's context.
    let backend_call = lines
        .iter()
        .find(|l| l["kind"] == "request" && l["path"] == "/backend/calendar")
        .expect("the backend request was recorded");
    let expected = format!(
        "00-{trace_id}-{}-01",
        tool["span_id"].as_str().unwrap_or_default()
    );
    assert_eq!(backend_call["headers"]["traceparent"], expected.as_str());

    receiver.child.kill().await.expect("stop receiver");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_collector_never_blocks_spans_or_shutdown() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    for protocol in [OtlpProtocol::HttpProtobuf, OtlpProtocol::Grpc] {
        let (dispatch, guard) =
            telemetry::build(&config(format!("http://127.0.0.1:{port}"), protocol)).expect("build");
        let _scoped = tracing::dispatcher::set_default(&dispatch);

        let t = Instant::now();
        let metrics = voxgate::telemetry::metrics::Metrics::new();
        for i in 0..200 {
            let session = telemetry::session_span(&format!("s-{i}"), "gpt-realtime");
            let tool = telemetry::tool_span(&session, metrics.tool_label("search_pubmed"), &format!("call_{i}"));
            telemetry::record_tool_outcome(&tool, AuditStatus::Completed, Confirmation::NotRequired, None, None);
            drop(tool);
            telemetry::record_session_outcome(&session, "client_closed", Duration::ZERO);
        }
        // Give the batch task time to try (and fail) an export while sessions keep going.
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        let session = telemetry::session_span("after-failure", "gpt-realtime");
        assert!(
            !telemetry::trace_headers(&session).is_empty(),
            "spans still get trace context"
        );
        drop(session);
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{protocol:?}: span creation was held up"
        );

        let limit = Duration::from_secs(2);
        let t = Instant::now();
        let _flushed = guard.shutdown_within(limit).await;
        assert!(
            t.elapsed() < limit + Duration::from_millis(500),
            "{protocol:?}: shutdown took {:?}",
            t.elapsed()
        );
    }
}
