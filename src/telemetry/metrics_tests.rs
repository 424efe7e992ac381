//! Unit tests for [`super::Metrics`]: every CONTRACT name renders, and increments show up in the
//! scrape as the series and histogram buckets an operator's PromQL reads.

use std::time::Duration;

use super::*;

/// Every metric family as the Prometheus text format declares it (`# TYPE` line).
const FAMILIES: &[(&str, &str)] = &[
    ("voxgate_sessions_active", "gauge"),
    ("voxgate_sessions_total", "counter"),
    ("voxgate_tool_calls_total", "counter"),
    ("voxgate_tool_errors_total", "counter"),
    ("voxgate_tool_duration_seconds", "histogram"),
    ("voxgate_tool_confirmations_total", "counter"),
    ("voxgate_frames_total", "counter"),
    ("voxgate_upstream_connect_seconds", "histogram"),
    ("voxgate_upstream_connect_failures_total", "counter"),
    ("voxgate_rate_limited_total", "counter"),
    ("voxgate_redis_fallback_total", "counter"),
    ("voxgate_phi_blocked_total", "counter"),
    ("voxgate_client_errors_total", "counter"),
    ("voxgate_audit_records_total", "counter"),
    ("voxgate_audit_errors_total", "counter"),
    ("voxgate_audit_commit_seconds", "histogram"),
    ("voxgate_http_rejections_total", "counter"),
];

fn line<'a>(body: &'a str, prefix: &str) -> Option<&'a str> {
    body.lines().find(|l| l.starts_with(prefix))
}

fn value(body: &str, series: &str) -> Option<f64> {
    let l = line(body, &format!("{series} "))?;
    l.rsplit(' ').next()?.parse().ok()
}

/// The CONTRACT §6 names, which must be in the very first scrape.
const CONTRACT_FAMILIES: &[&str] = &[
    "voxgate_sessions_active",
    "voxgate_sessions_total",
    "voxgate_tool_calls_total",
    "voxgate_tool_duration_seconds",
    "voxgate_tool_confirmations_total",
    "voxgate_frames_total",
    "voxgate_upstream_connect_seconds",
];

fn assert_families(body: &str, names: &[&str]) {
    for name in names {
        let (_, kind) = FAMILIES
            .iter()
            .find(|(n, _)| n == name)
            .copied()
            .unwrap_or((*name, "?"));
        assert!(
            body.contains(&format!("# TYPE {name} {kind}\n")),
            "missing {name} {kind}:\n{body}"
        );
    }
}

#[test]
fn first_scrape_has_every_contract_name() {
    let body = Metrics::new().render();
    assert_families(&body, CONTRACT_FAMILIES);
    for series in [
        r#"voxgate_sessions_total{outcome="client_closed"}"#,
        r#"voxgate_tool_calls_total{tool="search_pubmed",status="completed"}"#,
        r#"voxgate_tool_confirmations_total{tool="create_calendar_event",decision="approved"}"#,
        r#"voxgate_tool_duration_seconds_count{tool="get_calendar_events"}"#,
    ] {
        assert_eq!(value(&body, series), Some(0.0), "{series}");
    }
    assert!(
        !body.contains("# EOF") && !body.contains("# UNIT"),
        "not Prometheus text"
    );
    // Frames exist at zero before any session, so rate() works from the first scrape.
    assert_eq!(
        value(
            &body,
            r#"voxgate_frames_total{direction="client_to_upstream"}"#
        ),
        Some(0.0)
    );
    assert_eq!(
        value(
            &body,
            r#"voxgate_frames_total{direction="upstream_to_client"}"#
        ),
        Some(0.0)
    );
    assert_eq!(value(&body, "voxgate_sessions_active"), Some(0.0));
    assert_eq!(value(&body, "voxgate_audit_errors_total"), Some(0.0));
}

#[test]
fn increments_show_in_the_scrape() {
    let metrics = Metrics::new();
    let mut frames = metrics.frame_counters();
    let active = metrics.session_started();
    for _ in 0..3 {
        frames.client_to_upstream();
    }
    frames.upstream_to_client();
    frames.flush();
    metrics.upstream_connected(Duration::from_millis(40));
    metrics.upstream_connect_failed("timeout");
    metrics.tool_call_finished("search_pubmed", "completed", Some(Duration::from_millis(7)));
    metrics.tool_call_finished("search_pubmed", "failed", Some(Duration::from_secs(2)));
    metrics.tool_error("search_pubmed", "backend_error");
    metrics.tool_call_finished("create_calendar_event", "declined", None);
    metrics.tool_confirmation("create_calendar_event", "declined");
    metrics.rate_limited("search_pubmed");
    metrics.redis_fallback("rate_limit");
    metrics.phi_blocked("web_search_medical");
    metrics.client_error("voxgate_invalid_json");
    metrics.audit_record("call_started");
    metrics.audit_error();
    metrics.audit_commit(Duration::from_micros(300));
    metrics.audit_commit(Duration::from_millis(300));
    metrics.http_rejection("bad_origin");

    let body = metrics.render();
    let all: Vec<&str> = FAMILIES.iter().map(|(name, _)| *name).collect();
    assert_families(&body, &all);
    let expect = [
        (
            r#"voxgate_frames_total{direction="client_to_upstream"}"#,
            3.0,
        ),
        (
            r#"voxgate_frames_total{direction="upstream_to_client"}"#,
            1.0,
        ),
        ("voxgate_sessions_active", 1.0),
        (
            r#"voxgate_tool_calls_total{tool="search_pubmed",status="completed"}"#,
            1.0,
        ),
        (
            r#"voxgate_tool_calls_total{tool="search_pubmed",status="failed"}"#,
            1.0,
        ),
        (
            r#"voxgate_tool_calls_total{tool="create_calendar_event",status="declined"}"#,
            1.0,
        ),
        (
            r#"voxgate_tool_errors_total{tool="search_pubmed",code="backend_error"}"#,
            1.0,
        ),
        (
            r#"voxgate_tool_confirmations_total{tool="create_calendar_event",decision="declined"}"#,
            1.0,
        ),
        (
            r#"voxgate_tool_duration_seconds_count{tool="search_pubmed"}"#,
            2.0,
        ),
        (
            r#"voxgate_tool_duration_seconds_bucket{le="0.005",tool="search_pubmed"}"#,
            0.0,
        ),
        (
            r#"voxgate_tool_duration_seconds_bucket{le="0.01",tool="search_pubmed"}"#,
            1.0,
        ),
        (
            r#"voxgate_tool_duration_seconds_bucket{le="1.0",tool="search_pubmed"}"#,
            1.0,
        ),
        (
            r#"voxgate_tool_duration_seconds_bucket{le="2.5",tool="search_pubmed"}"#,
            2.0,
        ),
        (
            r#"voxgate_tool_duration_seconds_bucket{le="+Inf",tool="search_pubmed"}"#,
            2.0,
        ),
        (
            r#"voxgate_upstream_connect_seconds_bucket{le="0.025"}"#,
            0.0,
        ),
        (r#"voxgate_upstream_connect_seconds_bucket{le="0.05"}"#, 1.0),
        (
            r#"voxgate_upstream_connect_failures_total{reason="timeout"}"#,
            1.0,
        ),
        (r#"voxgate_rate_limited_total{tool="search_pubmed"}"#, 1.0),
        (
            r#"voxgate_redis_fallback_total{component="rate_limit"}"#,
            1.0,
        ),
        (
            r#"voxgate_phi_blocked_total{tool="web_search_medical"}"#,
            1.0,
        ),
        (
            r#"voxgate_client_errors_total{code="voxgate_invalid_json"}"#,
            1.0,
        ),
        (r#"voxgate_audit_records_total{event="call_started"}"#, 1.0),
        ("voxgate_audit_errors_total", 1.0),
        ("voxgate_audit_commit_seconds_count", 2.0),
        (r#"voxgate_audit_commit_seconds_bucket{le="0.0005"}"#, 1.0),
        (r#"voxgate_audit_commit_seconds_bucket{le="0.25"}"#, 1.0),
        (r#"voxgate_audit_commit_seconds_bucket{le="0.5"}"#, 2.0),
        (r#"voxgate_http_rejections_total{reason="bad_origin"}"#, 1.0),
    ];
    for (series, want) in expect {
        assert_eq!(value(&body, series), Some(want), "{series}:\n{body}");
    }
    // Declined calls never ran: no duration observed for that tool.
    assert_eq!(
        value(
            &body,
            r#"voxgate_tool_duration_seconds_count{tool="create_calendar_event"}"#
        ),
        Some(0.0)
    );

    drop(active);
    metrics.session_ended("client_closed");
    let body = metrics.render();
    assert_eq!(value(&body, "voxgate_sessions_active"), Some(0.0));
    assert_eq!(
        value(&body, r#"voxgate_sessions_total{outcome="client_closed"}"#),
        Some(1.0)
    );
}

#[test]
fn unknown_tool_names_never_become_labels() {
    let metrics = Metrics::new();
    metrics.tool_call_finished("Patient John Doe 1970-01-01", "failed", None);
    metrics.rate_limited("drop table");
    let body = metrics.render();
    assert!(
        !body.contains("John"),
        "model text leaked into a label:\n{body}"
    );
    assert_eq!(
        value(
            &body,
            r#"voxgate_tool_calls_total{tool="other",status="failed"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&body, r#"voxgate_rate_limited_total{tool="other"}"#),
        Some(1.0)
    );
    assert_eq!(metrics.tool_label("search_pubmed").as_str(), "search_pubmed");
}

/// The MCP tools the configuration allows are labelled by name (operators see which one fails),
/// with their series at zero from the first scrape; a name nobody configured is still `other`.
#[test]
fn configured_mcp_tools_are_labels() {
    let metrics = Metrics::with_tools(&["lab__order_test"]);
    let body = metrics.render();
    assert!(body.contains(r#"voxgate_tool_calls_total{tool="lab__order_test",status="completed"} 0"#), "{body}");
    metrics.tool_call_finished("lab__order_test", "failed", None);
    metrics.tool_call_finished("lab__made_up", "failed", None);
    let body = metrics.render();
    assert_eq!(value(&body, r#"voxgate_tool_calls_total{tool="lab__order_test",status="failed"}"#), Some(1.0));
    assert_eq!(value(&body, r#"voxgate_tool_calls_total{tool="other",status="failed"}"#), Some(1.0));
    assert_eq!(metrics.tool_label("lab__order_test").as_str(), "lab__order_test");
    assert_eq!(Metrics::new().tool_label("lab__order_test").as_str(), "other");
}

#[test]
fn clones_share_the_registry() {
    let metrics = Metrics::new();
    let clone = metrics.clone();
    clone.audit_error();
    assert_eq!(
        value(&metrics.render(), "voxgate_audit_errors_total"),
        Some(1.0)
    );
}

#[test]
fn openmetrics_rendering_is_offered_too() {
    let metrics = Metrics::new();
    metrics.session_ended("drained");
    let body = metrics.render_openmetrics();
    assert!(
        body.ends_with("# EOF\n"),
        "OpenMetrics body must end with # EOF"
    );
    assert!(body.contains("# TYPE voxgate_sessions counter\n"));
    assert_eq!(
        value(&body, r#"voxgate_sessions_total{outcome="drained"}"#),
        Some(1.0)
    );
}

#[test]
fn a_sessions_frame_counts_reach_the_scrape_in_batches_and_at_its_end() {
    let metrics = Metrics::new();
    let up = |body: &str| value(body, r#"voxgate_frames_total{direction="client_to_upstream"}"#);
    let turns = |body: &str| value(body, "voxgate_session_loop_turns_total");
    let mut frames = metrics.frame_counters();
    for _ in 0..FLUSH_EVERY - 1 {
        frames.client_to_upstream();
    }
    assert_eq!(up(&metrics.render()), Some(0.0), "held by the session until the batch is full");
    frames.client_to_upstream();
    assert_eq!(up(&metrics.render()), Some(f64::from(FLUSH_EVERY)));
    frames.loop_turn();
    frames.upstream_to_client();
    frames.flush();
    let body = metrics.render();
    assert_eq!(turns(&body), Some(1.0));
    assert_eq!(value(&body, r#"voxgate_frames_total{direction="upstream_to_client"}"#), Some(1.0));
    frames.client_to_upstream();
    drop(frames);
    assert_eq!(up(&metrics.render()), Some(f64::from(FLUSH_EVERY) + 1.0), "the end of a session flushes it");
}
