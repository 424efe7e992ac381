//! Who may open a session and call what: JWTs (HS256, RS256, ES256) in every transport, every
//! rejection before the upgrade, single-use tickets across instances on real Redis, roles, rate
//! limits (local, shared, and Redis failure), and the admin API.

mod support;

use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use support::redis::RedisServer;
use support::{Client, FakeUpstream, TestProxy, model_calls};

const SECRET: &str = "an-hs256-secret-of-at-least-32-bytes!!";
const ADMIN: &str = "admin-token-0123456789abcdef";

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

fn hs256(claims: Value) -> String {
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(SECRET.as_bytes())).unwrap()
}

fn claims(sub: &str, roles: &[&str]) -> Value {
    json!({"sub": sub, "roles": roles, "exp": now() + 300})
}

fn jwt_toml() -> String {
    format!("[auth]\nmode = \"ticket\"\njwt_secret = \"{SECRET}\"\nadmin_token = \"{ADMIN}\"\n")
}

async fn status_of(url: &str, protocols: &[&str], headers: &[(&str, &str)]) -> u16 {
    match Client::try_connect(url, protocols, headers).await {
        Ok(_) => 101,
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("unexpected: {other}"),
    }
}

#[tokio::test]
async fn jwt_in_every_transport_and_every_rejection() {
    let proxy = TestProxy::start(&jwt_toml()).await;
    let url = proxy.url("");
    let good = hs256(claims("dr.a", &["clinician"]));
    assert_eq!(status_of(&url, &[], &[("authorization", &format!("Bearer {good}"))]).await, 101);
    assert_eq!(status_of(&url, &["realtime", &format!("voxgate-token.{good}")], &[]).await, 101);
    assert_eq!(status_of(&url, &["realtime", &format!("openai-insecure-api-key.{good}")], &[]).await, 101);

    let wrong_key = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims("x", &[]), &EncodingKey::from_secret(b"another-secret-another-secret-32b")).unwrap();
    let expired = hs256(json!({"sub": "x", "exp": now() - 600}));
    // Within jsonwebtoken's 5 s leeway: still refused before the upgrade, not opened and closed.
    let just_expired = hs256(json!({"sub": "x", "exp": now() - 2}));
    let not_yet = hs256(json!({"sub": "x", "exp": now() + 600, "nbf": now() + 300}));
    let wrong_alg = jsonwebtoken::encode(&Header::new(Algorithm::HS384), &claims("x", &[]), &EncodingKey::from_secret(SECRET.as_bytes())).unwrap();
    let b64 = |v: &Value| base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, v.to_string());
    let none_alg = format!("{}.{}.", b64(&json!({"alg": "none", "typ": "JWT"})), b64(&claims("x", &[])));
    let mut tampered = good.clone();
    tampered.pop();
    for (name, token) in [("wrong key", wrong_key), ("expired", expired), ("just expired", just_expired), ("nbf", not_yet), ("HS384", wrong_alg), ("none", none_alg), ("tampered", tampered), ("garbage", "abc".into())] {
        assert_eq!(status_of(&url, &[], &[("authorization", &format!("Bearer {token}"))]).await, 401, "{name}");
    }
    assert_eq!(status_of(&url, &["realtime"], &[]).await, 401, "missing token");
}

#[tokio::test]
async fn rs256_and_es256_public_keys() {
    let dir = tempfile::tempdir().unwrap();
    for (alg, keygen) in [(Algorithm::RS256, vec!["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"]), (Algorithm::ES256, vec!["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"])] {
        let private = dir.path().join("key.pem");
        let public = dir.path().join("pub.pem");
        assert!(std::process::Command::new("openssl").args(&keygen).arg("-out").arg(&private).status().unwrap().success());
        assert!(std::process::Command::new("openssl").args(["pkey", "-pubout", "-in"]).arg(&private).arg("-out").arg(&public).status().unwrap().success());
        let pem = std::fs::read_to_string(&public).unwrap();
        let private_pem = std::fs::read(&private).unwrap();
        let toml = format!("[auth]\nmode = \"jwt\"\njwt_public_key_pem = '''\n{pem}'''\n");
        let proxy = TestProxy::start(&toml).await;
        let key = match alg {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(&private_pem).unwrap(),
            _ => EncodingKey::from_ec_pem(&private_pem).unwrap(),
        };
        let token = jsonwebtoken::encode(&Header::new(alg), &claims("dr.k", &[]), &key).unwrap();
        assert_eq!(status_of(&proxy.url(""), &[], &[("authorization", &format!("Bearer {token}"))]).await, 101, "{alg:?}");
        let hs = hs256(claims("dr.k", &[]));
        assert_eq!(status_of(&proxy.url(""), &[], &[("authorization", &format!("Bearer {hs}"))]).await, 401, "HS256 against a {alg:?} key");
    }
}

async fn mint(addr: std::net::SocketAddr, body: Value, token: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new().post(format!("http://{addr}/v1/sessions")).json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn tickets_are_single_use_and_admin_only() {
    let proxy = TestProxy::start(&jwt_toml()).await;
    assert_eq!(mint(proxy.addr, json!({"sub": "dr.t"}), None).await.status(), 401);
    assert_eq!(mint(proxy.addr, json!({"sub": "dr.t"}), Some("wrong-token-0123456789")).await.status(), 401);
    let response = mint(proxy.addr, json!({"sub": "dr.t", "roles": ["clinician"], "ttl_s": 60}), Some(ADMIN)).await;
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    let ticket = body["token"].as_str().unwrap();
    assert!(body["expires_at"].as_u64().unwrap() > now());
    let protocol = format!("voxgate-token.{ticket}");
    assert_eq!(status_of(&proxy.url(""), &["realtime", &protocol], &[]).await, 101);
    assert_eq!(status_of(&proxy.url(""), &["realtime", &protocol], &[]).await, 401, "reused ticket");
}

/// Outside `ticket` mode no ticket could ever be redeemed: the endpoint is off (404), as without
/// an admin token, instead of minting a ticket that then gets 401.
#[tokio::test]
async fn no_tickets_are_minted_outside_ticket_mode() {
    for mode in ["jwt", "none"] {
        let toml = format!("[auth]\nmode = \"{mode}\"\njwt_secret = \"{SECRET}\"\nadmin_token = \"{ADMIN}\"\n");
        let proxy = TestProxy::start(&toml).await;
        assert_eq!(mint(proxy.addr, json!({"sub": "dr.t"}), Some(ADMIN)).await.status(), 404, "{mode}");
        assert_eq!(mint(proxy.addr, json!({"sub": "dr.t"}), None).await.status(), 401, "{mode}: admin token first");
    }
}

#[tokio::test]
async fn a_ticket_minted_on_one_instance_is_accepted_once_on_any() {
    let redis = RedisServer::start();
    let toml = format!("{}[redis]\nurl = \"{}\"\n", jwt_toml(), redis.url());
    let a = TestProxy::start(&toml).await;
    let b = TestProxy::start(&toml).await;
    let body: Value = mint(a.addr, json!({"sub": "dr.r"}), Some(ADMIN)).await.json().await.unwrap();
    let protocol = format!("voxgate-token.{}", body["token"].as_str().unwrap());
    assert_eq!(status_of(&b.url(""), &["realtime", &protocol], &[]).await, 101, "redeemed on B");
    assert_eq!(status_of(&a.url(""), &["realtime", &protocol], &[]).await, 401, "refused on A the second time");
    assert_eq!(status_of(&b.url(""), &["realtime", &protocol], &[]).await, 401, "refused on B the second time");
}

async fn session_with_roles(fake: &mut FakeUpstream, proxy: &TestProxy, roles: &[&str]) -> (Client, support::FakeConn, Value) {
    let token = hs256(claims("dr.roles", roles));
    let client = Client::connect(&proxy.url(""), &["realtime", "voxgate.v1", &format!("voxgate-token.{token}")]).await;
    let mut up = fake.accept().await;
    let injected = up.open_session().await;
    (client, up, injected)
}

#[tokio::test]
async fn a_tool_outside_the_users_roles_is_neither_injected_nor_callable() {
    let mut fake = FakeUpstream::start().await;
    let toml = format!("{}[tools.create_calendar_event]\nroles = [\"scheduler\"]\n", jwt_toml());
    let proxy = TestProxy::with_upstream(&fake, &toml).await;
    let (mut client, mut up, injected) = session_with_roles(&mut fake, &proxy, &["clinician"]).await;
    let names: Vec<&str> = injected["session"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(!names.contains(&"create_calendar_event"), "{names:?}");
    assert!(names.contains(&"calculate_medical_score"));
    let ready = client.until("voxgate.session.ready").await;
    assert!(ready["tools"].as_array().unwrap().iter().all(|t| t["name"] != "create_calendar_event"));
    // The model calls it anyway.
    let args = json!({"title": "x", "start_datetime": "2030-01-01T10:00:00Z", "end_datetime": "2030-01-01T11:00:00Z"}).to_string();
    up.send_json(&json!({"type": "response.function_call_arguments.done", "event_id": "e", "response_id": "r", "item_id": "i", "output_index": 0, "call_id": "call_denied", "name": "create_calendar_event", "arguments": args})).await;
    let failed = client.until("voxgate.tool_call.failed").await;
    assert_eq!(failed["error"]["code"], "permission_denied");
    let output = up.until("conversation.item.create").await;
    assert!(output["item"]["output"].as_str().unwrap().contains("permission_denied"));
}

async fn call_calculator(up: &mut support::FakeConn, call_id: &str) -> Value {
    let args = r#"{"calculator_name":"bmi","parameters":{"weight_kg":70,"height_cm":175}}"#;
    up.send_json(&json!({"type": "response.function_call_arguments.done", "event_id": "e", "response_id": "r", "item_id": format!("i_{call_id}"), "output_index": 0, "call_id": call_id, "name": "calculate_medical_score", "arguments": args})).await;
    let output = up.until("conversation.item.create").await;
    serde_json::from_str(output["item"]["output"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn local_rate_limit() {
    let mut fake = FakeUpstream::start().await;
    let toml = format!("{}[tools.calculate_medical_score]\nrate_limit_per_minute = 2\n", jwt_toml());
    let proxy = TestProxy::with_upstream(&fake, &toml).await;
    let (_client, mut up, _) = session_with_roles(&mut fake, &proxy, &[]).await;
    assert!(call_calculator(&mut up, "c1").await.get("error").is_none());
    assert!(call_calculator(&mut up, "c2").await.get("error").is_none());
    let limited = call_calculator(&mut up, "c3").await;
    assert_eq!(limited["error"]["code"], "rate_limited");
    assert!(limited["error"]["message"].as_str().unwrap().contains("seconds"));
}

#[tokio::test]
async fn shared_rate_limit_on_redis_with_fallback_and_fail_closed() {
    let mut redis = RedisServer::start();
    let mut fake = FakeUpstream::start().await;
    let toml = format!("{}[tools.calculate_medical_score]\nrate_limit_per_minute = 3\n[redis]\nurl = \"{}\"\n", jwt_toml(), redis.url());
    let a = TestProxy::with_upstream(&fake, &toml).await;
    let b = TestProxy::with_upstream(&fake, &toml).await;
    let (_ca, mut ua, _) = session_with_roles(&mut fake, &a, &[]).await;
    let (_cb, mut ub, _) = session_with_roles(&mut fake, &b, &[]).await;
    assert!(call_calculator(&mut ua, "a1").await.get("error").is_none());
    assert!(call_calculator(&mut ub, "b1").await.get("error").is_none());
    assert!(call_calculator(&mut ua, "a2").await.get("error").is_none());
    assert_eq!(call_calculator(&mut ub, "b2").await["error"]["code"], "rate_limited", "the window is shared");

    // Redis goes away: instance-local limits apply, and it is counted.
    redis.stop();
    assert!(call_calculator(&mut ua, "a3").await.get("error").is_none(), "local window of A has room");
    let (_, metrics) = a.http_get("/metrics").await;
    assert!(metrics.lines().any(|l| l.starts_with("voxgate_redis_fallback_total{component=\"rate_limit\"}") && !l.ends_with(" 0")), "{metrics}");

    let closed_toml = format!("{}[redis]\nurl = \"{}\"\nrate_limit_fail_closed = true\n", jwt_toml(), redis.url());
    redis.restart();
    let c = TestProxy::with_upstream(&fake, &closed_toml).await;
    let (_cc, mut uc, _) = session_with_roles(&mut fake, &c, &[]).await;
    redis.stop();
    assert_eq!(call_calculator(&mut uc, "c1").await["error"]["code"], "rate_limited", "fail closed");
}

#[tokio::test]
async fn admin_api() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, &jwt_toml()).await;
    let http = reqwest::Client::new();
    let base = format!("http://{}", proxy.addr);
    for (method, path) in [("GET", "/admin/sessions"), ("DELETE", "/admin/sessions/x"), ("POST", "/admin/tools/calculate_medical_score/invoke")] {
        let response = http.request(method.parse().unwrap(), format!("{base}{path}")).json(&json!({})).send().await.unwrap();
        assert_eq!(response.status(), 401, "{method} {path} without the token");
    }
    let (mut client, mut up, _) = session_with_roles(&mut fake, &proxy, &[]).await;
    client.until("voxgate.session.ready").await;
    let list: Value = http.get(format!("{base}/admin/sessions")).bearer_auth(ADMIN).send().await.unwrap().json().await.unwrap();
    let sessions = list["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1);
    assert!(!sessions[0]["user"].as_str().unwrap().contains("dr.roles"), "the user is a keyed hash");

    let invoke = invoke_bmi(&http, &base).await;
    assert_eq!(invoke.status(), 200);
    let result: Value = invoke.json().await.unwrap();
    assert_eq!(result["score"], 25.0);
    let bad = http
        .post(format!("{base}/admin/tools/calculate_medical_score/invoke"))
        .bearer_auth(ADMIN)
        .json(&json!({"arguments": {"calculator_name": "bmi"}, "sub": "ops"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 422);
    let records = proxy.audit_records();
    assert_eq!(records.iter().filter(|r| r["event"] == "call_finished" && r["session_id"].as_str().unwrap().starts_with("admin_")).count(), 2);

    // A call parked for confirmation when the administrator ends the session is declined.
    let day = chrono::Utc::now().date_naive() + chrono::Days::new(1);
    let args = json!({"title": "Ward round", "start_datetime": format!("{day}T09:00:00Z"), "end_datetime": format!("{day}T10:00:00Z")}).to_string();
    model_calls(&mut up, &[("call_parked", "create_calendar_event", &args)]).await;
    client.until("voxgate.tool_call.confirmation_requested").await;

    let id = sessions[0]["id"].as_str().unwrap();
    let response = http.delete(format!("{base}/admin/sessions/{id}")).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(response.status(), 204);
    assert_eq!(client.until("voxgate.session.closing").await["reason"], "ended by an administrator");
    assert_eq!(client.until("voxgate.tool_call.declined").await["call_id"], "call_parked");
    let (code, _) = client.closed().await;
    assert_eq!(code, 1000);
    let _ = up.closed().await;
    // The session leaves the table when its task ends, just after both peers saw their close
    // frames; nothing outside the process can await that moment, so it is polled, bounded.
    let gone = async {
        loop {
            let list: Value = http.get(format!("{base}/admin/sessions")).bearer_auth(ADMIN).send().await.unwrap().json().await.unwrap();
            if list["sessions"].as_array().is_some_and(|s| s.is_empty()) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(5), gone).await.expect("the ended session is still listed");
    assert_eq!(http.delete(format!("{base}/admin/sessions/{id}")).bearer_auth(ADMIN).send().await.unwrap().status(), 404);
    let parked: Vec<Value> = proxy.audit_records().into_iter().filter(|r| r["call_id"] == "call_parked" && r["event"] == "call_finished").collect();
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0]["status"], "declined");
    assert_eq!(parked[0]["confirmation"], "session_closed");
    assert!(!std::fs::read_to_string(proxy.calendar_path()).unwrap_or_default().contains("Ward round"));
}

#[tokio::test]
async fn sdk_passes_its_key_as_the_token() {
    let python = std::env::var_os("VOXGATE_TEST_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-test/bin/python"));
    assert!(python.exists(), "run scripts/test to create the test venv");
    let proxy = TestProxy::start(&jwt_toml()).await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/sdk_client.py");
    let token = hs256(claims("dr.sdk", &["clinician"]));
    let run = |token: String| {
        let python = python.clone();
        let script = script.clone();
        let port = proxy.addr.port().to_string();
        async move {
            tokio::process::Command::new(python).arg(script).arg(port).arg("Hello").arg("--token").arg(token).arg("--timeout").arg("15").output().await.unwrap()
        }
    };
    let ok = run(token).await;
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let refused = run("not-a-valid-token".into()).await;
    assert!(!refused.status.success());
    let _ = Duration::from_secs(1);
}

#[tokio::test]
async fn session_caps_refuse_before_the_upgrade() {
    let toml = format!("{}[server]\nmax_sessions = 3\nmax_sessions_per_user = 2\n", jwt_toml());
    let proxy = TestProxy::start(&toml).await;
    let url = proxy.url("");
    let bearer = |sub: &str| format!("Bearer {}", hs256(claims(sub, &["clinician"])));
    let a = bearer("dr.a");
    let first = Client::try_connect(&url, &["realtime"], &[("authorization", &a)]).await.unwrap();
    let second = Client::try_connect(&url, &["realtime"], &[("authorization", &a)]).await.unwrap();
    assert_eq!(status_of(&url, &["realtime"], &[("authorization", &a)]).await, 429, "per-user cap");
    let b = bearer("dr.b");
    let third = Client::try_connect(&url, &["realtime"], &[("authorization", &b)]).await.unwrap();
    assert_eq!(status_of(&url, &["realtime"], &[("authorization", &bearer("dr.c"))]).await, 503, "process cap");
    // A session that ends frees its place.
    drop(first);
    let mut admitted = false;
    for _ in 0..50 {
        if status_of(&url, &["realtime"], &[("authorization", &a)]).await == 101 {
            admitted = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(admitted, "the freed place is given again");
    drop((second, third));
}

/// A session ends with the JWT that admitted it: `voxgate.session.closing` says why and not to
/// reconnect with it, then a 1008 close.
#[tokio::test]
async fn a_session_ends_when_its_token_expires() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, &jwt_toml()).await;
    let exp = now() + 2;
    let token = hs256(json!({"sub": "dr.short", "roles": ["clinician"], "exp": exp}));
    let mut client = Client::connect(&proxy.url(""), &["realtime", "voxgate.v1", &format!("voxgate-token.{token}")]).await;
    let mut up = fake.accept().await;
    up.open_session().await;
    client.until("voxgate.session.ready").await;
    let closing = client.until("voxgate.session.closing").await;
    assert_eq!(closing["reason"], "authorisation expired", "{closing}");
    assert_eq!(closing["reconnect"], false);
    let (code, _) = client.closed().await;
    assert_eq!(code, 1008);
    // `exp` has whole-second precision: the close comes within the second it names, not before.
    assert!(now() + 1 >= exp, "closed before the token's exp");
}

/// Sends a request head that announces a body and then sends none; the status line of the
/// answer, or `None` if nothing came back within `wait`.
async fn announce_a_body_and_stall(addr: std::net::SocketAddr, path: &str, token: Option<&str>, wait: std::time::Duration) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token.map(|t| format!("authorization: Bearer {t}\r\n")).unwrap_or_default();
    let head = format!("POST {path} HTTP/1.1\r\nhost: voxgate\r\ncontent-type: application/json\r\ncontent-length: 2000000\r\n{auth}\r\n");
    socket.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 256];
    match tokio::time::timeout(wait, socket.read(&mut answer)).await {
        Ok(Ok(n)) if n > 0 => String::from_utf8_lossy(&answer[..n]).lines().next().map(str::to_string),
        _ => None,
    }
}

/// The admin API's bodies are read only from the admin, and within the handshake timeout: a
/// client that announces a body and never sends it cannot hold a connection (and a descriptor).
#[tokio::test]
async fn an_admin_body_that_never_arrives_does_not_hold_the_connection() {
    let fake = FakeUpstream::start().await;
    let toml = format!("[server]\nhandshake_timeout_ms = 500\n{}", jwt_toml());
    let proxy = TestProxy::with_upstream(&fake, &toml).await;
    let wait = std::time::Duration::from_secs(3);
    for path in ["/v1/sessions", "/admin/tools/calculate_medical_score/invoke"] {
        let anonymous = announce_a_body_and_stall(proxy.addr, path, None, wait).await;
        assert!(anonymous.as_deref().is_some_and(|l| l.contains(" 401 ")), "{path} without the token: {anonymous:?}");
        let admin = announce_a_body_and_stall(proxy.addr, path, Some(ADMIN), wait).await;
        assert!(admin.as_deref().is_some_and(|l| l.contains(" 408 ")), "{path} with the token: {admin:?}");
    }
}

/// RFC 7235: the auth scheme is case-insensitive. Session auth accepted `bearer`; the admin API
/// refused it with 401.
#[tokio::test]
async fn the_admin_token_scheme_is_case_insensitive() {
    let proxy = TestProxy::start(&jwt_toml()).await;
    let http = reqwest::Client::new();
    let url = format!("http://{}/admin/tools", proxy.addr);
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let response = http.get(&url).header("authorization", format!("{scheme} {ADMIN}")).send().await.unwrap();
        assert_eq!(response.status(), 200, "{scheme}");
    }
    // Still the token that counts, and still a scheme.
    for value in [format!("bearer {ADMIN}x"), format!("Basic {ADMIN}"), format!("bearer{ADMIN}"), ADMIN.to_string()] {
        let response = http.get(&url).header("authorization", &value).send().await.unwrap();
        assert_eq!(response.status(), 401, "{value}");
    }
}

/// `POST /admin/tools/calculate_medical_score/invoke` of a BMI (25.0) as the admin, on `base`.
async fn invoke_bmi(http: &reqwest::Client, base: &str) -> reqwest::Response {
    http.post(format!("{base}/admin/tools/calculate_medical_score/invoke"))
        .bearer_auth(ADMIN)
        .json(&json!({"arguments": {"calculator_name": "bmi", "parameters": {"weight_kg": 64, "height_cm": 160}}, "sub": "ops", "roles": []}))
        .send()
        .await
        .unwrap()
}

/// An admin-invoked call is one tool call like a session's: its `voxgate.tool_call` span gets the
/// outcome and the "tool call finished" line is logged (docs/operations.md, Logs).
#[tokio::test]
async fn an_admin_call_logs_its_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{}[audit]\npath = \"{}\"\n[backends.calendar]\npath = \"{}\"\n",
        jwt_toml(),
        dir.path().join("audit.jsonl").display(),
        dir.path().join("cal.ics").display()
    );
    let (mut child, addr, logs) = support::spawn_voxgate_logged(&config, dir.path(), Some("info"), &[]).await;
    let invoke = invoke_bmi(&reqwest::Client::new(), &format!("http://{addr}")).await;
    assert_eq!(invoke.status(), 200);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let finished = loop {
        let text = logs.lock().unwrap().clone();
        let lines: Vec<String> = text.lines().filter(|l| l.contains("tool call finished")).map(str::to_string).collect();
        if !lines.is_empty() || tokio::time::Instant::now() > deadline {
            break lines;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(finished.len(), 1, "one line per call: {finished:?}");
    assert!(finished[0].contains("completed"), "{}", finished[0]);
    child.kill().await.unwrap();
}
