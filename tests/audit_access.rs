//! Who, where and what (HIPAA §164.312(b)), and the policy order around confirmation: each audit
//! record carries the client's address (from `X-Forwarded-For` only behind a trusted proxy), its
//! user agent, the instance and, for PHI tools, the resource touched; calls through the admin API
//! are audited, counted and marked; a rate limit refuses before the user is asked.

mod support;

use serde_json::{Value, json};
use support::{Client, FakeConn, FakeUpstream, TestProxy, model_calls, read_jsonl};

const ADMIN: &str = "admin-token-0123456789";
const BMI: &str = r#"{"calculator_name":"bmi","parameters":{"weight_kg":70,"height_cm":175}}"#;

fn event_args_for_tomorrow(title: &str) -> String {
    let day = chrono::Utc::now().date_naive() + chrono::Days::new(1);
    json!({"title": title, "start_datetime": format!("{day}T14:00:00Z"), "end_datetime": format!("{day}T15:00:00Z")}).to_string()
}

fn records_of<'a>(records: &'a [Value], call_id: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["call_id"] == call_id).collect()
}

/// A session whose WebSocket request carries `headers`.
async fn session_with_headers(
    proxy: &TestProxy,
    fake: &mut FakeUpstream,
    headers: &[(&str, &str)],
) -> (Client, FakeConn) {
    let mut client = Client::try_connect(&proxy.url(""), &["realtime", "voxgate.v1"], headers)
        .await
        .unwrap();
    let mut up = fake.accept().await;
    up.open_session().await;
    client.until("voxgate.session.ready").await;
    (client, up)
}

#[tokio::test]
async fn records_say_who_from_where_and_which_resource() {
    let mut fake = FakeUpstream::start().await;
    let toml = format!(
        "[server]\ninstance_id = \"vg-a\"\ntrusted_proxies = [\"127.0.0.1\"]\n[auth]\nadmin_token = \"{ADMIN}\"\n"
    );
    let proxy = TestProxy::with_upstream(&fake, &toml).await;
    let headers = [
        ("x-forwarded-for", "198.51.100.1, 203.0.113.7"),
        ("user-agent", "WardTablet/2.1"),
    ];
    let (mut client, mut up) = session_with_headers(&proxy, &mut fake, &headers).await;

    model_calls(
        &mut up,
        &[(
            "cal",
            "create_calendar_event",
            &event_args_for_tomorrow("Ward round Quixote"),
        )],
    )
    .await;
    client
        .until("voxgate.tool_call.confirmation_requested")
        .await;
    client
        .send_json(json!({"type": "voxgate.tool_call.confirm", "call_id": "cal", "approved": true}))
        .await;
    let completed = client.until("voxgate.tool_call.completed").await;
    assert_eq!(completed["call_id"], "cal");

    let records = proxy.audit_records();
    let cal = records_of(&records, "cal");
    let events: Vec<&str> = cal.iter().map(|r| r["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["call_started", "call_approved", "call_finished"]);
    for record in &cal {
        assert_eq!(
            record["client_addr"], "203.0.113.7",
            "the rightmost hop the trusted proxy saw"
        );
        assert_eq!(record["user_agent"], "WardTablet/2.1");
        assert_eq!(record["instance"], "vg-a");
        assert!(record.get("admin").is_none());
    }
    let uid = cal[2]["resource"].as_str().unwrap();
    assert!(
        std::fs::read_to_string(proxy.calendar_path())
            .unwrap()
            .contains(uid),
        "the event UID, not content"
    );
    let text = std::fs::read_to_string(proxy.audit_path()).unwrap();
    assert!(
        !text.contains("Quixote") && !text.contains("Ward round"),
        "never content"
    );

    // The admin API: audited like any call, marked, counted.
    let http = reqwest::Client::new();
    let response = http
        .post(format!("http://{}/admin/tools/calculate_medical_score/invoke", proxy.addr))
        .bearer_auth(ADMIN)
        .header("user-agent", "ops-cli/1")
        .json(&json!({"arguments": serde_json::from_str::<Value>(BMI).unwrap(), "sub": "ops", "roles": ["clinician"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let records = proxy.audit_records();
    let admin: Vec<&Value> = records.iter().filter(|r| r["admin"] == true).collect();
    assert_eq!(admin.len(), 2, "{records:?}");
    assert_eq!(admin[1]["event"], "call_finished");
    assert_eq!(admin[1]["status"], "completed");
    assert_eq!(admin[1]["user_agent"], "ops-cli/1");
    assert_eq!(
        admin[1]["client_addr"], "127.0.0.1",
        "no X-Forwarded-For: the peer"
    );
    let (_, metrics) = proxy.http_get("/metrics").await;
    assert!(
        metrics.contains(
            r#"voxgate_tool_calls_total{tool="calculate_medical_score",status="completed"} 1"#
        ),
        "the admin call is counted: {metrics}"
    );
}

#[tokio::test]
async fn forwarded_for_from_an_untrusted_peer_is_ignored() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let headers = [("x-forwarded-for", "203.0.113.7")];
    let (mut client, mut up) = session_with_headers(&proxy, &mut fake, &headers).await;
    model_calls(&mut up, &[("c1", "calculate_medical_score", BMI)]).await;
    client.until("voxgate.tool_call.completed").await;
    let records = proxy.audit_records();
    assert!(
        records_of(&records, "c1")
            .iter()
            .all(|r| r["client_addr"] == "127.0.0.1"),
        "{records:?}"
    );
}

#[tokio::test]
async fn a_rate_limit_refuses_before_the_user_is_asked() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(
        &fake,
        "[tools.create_calendar_event]\nrate_limit_per_minute = 1\n",
    )
    .await;
    let (mut client, mut up) = proxy.ready_session(&mut fake).await;
    model_calls(
        &mut up,
        &[(
            "first",
            "create_calendar_event",
            &event_args_for_tomorrow("Ward round"),
        )],
    )
    .await;
    client
        .until("voxgate.tool_call.confirmation_requested")
        .await;
    client
        .send_json(
            json!({"type": "voxgate.tool_call.confirm", "call_id": "first", "approved": true}),
        )
        .await;
    client.until("voxgate.tool_call.completed").await;

    model_calls(
        &mut up,
        &[(
            "second",
            "create_calendar_event",
            &event_args_for_tomorrow("Clinic"),
        )],
    )
    .await;
    let seen = client.collect_until("voxgate.tool_call.failed").await;
    assert!(
        !seen
            .iter()
            .any(|e| e["type"] == "voxgate.tool_call.confirmation_requested"),
        "never asked: {seen:?}"
    );
    assert_eq!(seen.last().unwrap()["error"]["code"], "rate_limited");
    let records = proxy.audit_records();
    let second = records_of(&records, "second");
    assert_eq!(second.last().unwrap()["error_code"], "rate_limited");
    assert_eq!(second.last().unwrap()["confirmation"], "not_required");
}

/// An admin whose HTTP client gives up (a load balancer's timeout, Ctrl-C) while the tool runs
/// does not cut the call short of its record: the call finishes and is audited exactly once.
#[tokio::test]
async fn an_admin_call_abandoned_by_its_client_is_still_audited_once() {
    use axum::Router;
    use axum::routing::get;
    use std::time::Duration;
    // A web search backend that answers after 3 s.
    let app = Router::new().fallback(get(|| async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        ([("content-type", "application/json")], r#"{"web":{"results":[]}}"#)
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let brave = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let fake = FakeUpstream::start().await;
    let toml = format!(
        "[auth]\nadmin_token = \"{ADMIN}\"\n[backends.web_search]\nprovider = \"brave\"\nbase_url = \"{brave}\"\napi_key = \"brave-key\"\n"
    );
    let proxy = TestProxy::with_upstream(&fake, &toml).await;
    let url = format!("http://{}/admin/tools/web_search_medical/invoke", proxy.addr);
    let request = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .bearer_auth(ADMIN)
            .json(&json!({"arguments": {"query": "apixaban dosing in renal impairment"}, "sub": "ops"}))
            .send()
            .await
    });
    let admin_records = || {
        proxy
            .audit_records()
            .into_iter()
            .filter(|r| r["admin"] == true)
            .collect::<Vec<Value>>()
    };
    // The client gives up once the call is under way (its start is on disk), long before the
    // tool answers: the connection goes away with the task.
    tokio::time::timeout(Duration::from_secs(10), async {
        while !admin_records().iter().any(|r| r["event"] == "call_started") {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the admin call never started");
    request.abort();
    assert!(request.await.is_err_and(|e| e.is_cancelled()), "the client gave up before the tool answered");
    tokio::time::timeout(Duration::from_secs(10), async {
        while !admin_records().iter().any(|r| r["event"] == "call_finished") {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the abandoned admin call was never finished in the audit log");
    // "Exactly once" is counted on the final log: stopping the server joins the audit writer, so
    // a duplicate written after the first finish would be on disk by now.
    let TestProxy { server, dir, .. } = proxy;
    server.shutdown().await.expect("the audit writer flushed");
    let finished: Vec<Value> = read_jsonl(&dir.path().join("audit.jsonl")).into_iter().filter(|r| r["admin"] == true).collect();
    let events: Vec<&Value> = finished.iter().map(|r| &r["event"]).collect();
    assert_eq!(events, ["call_started", "call_finished"], "{finished:?}");
    assert_eq!(finished[1]["status"], "completed");
}
