//! MCP servers as realtime tools, against real servers written with the official Python SDK
//! (tests/mcp/lab_server.py): one over stdio that voxgate starts per test, one over Streamable
//! HTTP started once per test binary on a free 127.0.0.1 port (and, for the listing bounds,
//! tests/mcp/endless_list_server.py, whose `tools/list` never ends). The server writes what
//! reached it to files the tests read, so "nothing was written" and "the server was told to
//! cancel" are checked on the server's side.

#[path = "mcp/late_progress.rs"]
mod late_progress;
#[path = "mcp/listing.rs"]
mod listing;
#[path = "mcp/process.rs"]
mod process;
mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Client, FakeConn, FakeUpstream, TestProxy, model_calls, read_jsonl, test_python};

fn lab_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/lab_server.py")
}

/// The Streamable HTTP lab server, shared by every test of this binary.
struct HttpLab {
    url: String,
    dir: tempfile::TempDir,
    _child: Child,
}

fn http_lab() -> &'static HttpLab {
    static LAB: OnceLock<HttpLab> = OnceLock::new();
    LAB.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(test_python())
            .arg(lab_script())
            .arg("--http")
            .env("LAB_DIR", dir.path())
            // The server exits when its stdin closes, i.e. when this test process ends.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(port) = line.strip_prefix("listening on ") {
                    let _ = tx.send(port.trim().to_string());
                }
            }
        });
        let port = rx.recv_timeout(Duration::from_secs(30)).expect("the HTTP MCP server did not start");
        HttpLab { url: format!("http://127.0.0.1:{port}/mcp"), dir, _child: child }
    })
}

/// `[mcp]` config with the stdio lab server as `lab` (its files in `lab_dir`) and, when `http`,
/// the shared HTTP server as `hlab`; `extra` adds policy tables.
fn mcp_toml(lab_dir: &Path, http: bool, extra: &str) -> String {
    // Start-up waits for the servers (a loaded CI machine may take seconds to start Python).
    let mut toml = format!(
        "[mcp]\nconnect_timeout_ms = 60000\n[mcp.servers.lab]\ncommand = [{python:?}, {script:?}]\nenv = {{ LAB_DIR = {dir:?} }}\n\
         allow = [\"lookup_result\", \"order_test\", \"failing_lookup\", \"crash\", \"slow\", \"count_steps\", \"broken_schema\", \"add_extra\", \"extra\", \"chart_progress\"]\n",
        python = test_python().display().to_string(),
        script = lab_script().display().to_string(),
        dir = lab_dir.display().to_string(),
    );
    if http {
        toml.push_str(&format!(
            "[mcp.servers.hlab]\nurl = {:?}\nheaders = {{ Authorization = \"Bearer lab-token\" }}\nallow = [\"order_test\", \"count_steps\", \"lookup_result\"]\n",
            http_lab().url
        ));
    }
    toml.push_str(extra);
    toml
}

struct Lab {
    proxy: TestProxy,
    fake: FakeUpstream,
    dir: tempfile::TempDir,
}

async fn start(http: bool, extra: &str) -> Lab {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, &mcp_toml(dir.path(), http, extra)).await;
    Lab { proxy, fake, dir }
}

impl Lab {
    /// A session; returns the tool names voxgate injected upstream.
    async fn session(&mut self) -> (Client, FakeConn, Vec<String>) {
        let mut client = self.proxy.client().await;
        let mut up = self.fake.accept().await;
        let injected = up.open_session().await;
        client.until("voxgate.session.ready").await;
        let names = injected["session"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        (client, up, names)
    }

    fn stdio_file(&self, name: &str) -> Vec<Value> {
        read_jsonl(&self.dir.path().join(name))
    }

    /// `GET /admin/tools` with [`ADMIN_TOKEN`] (the lab must have been started with it).
    async fn admin_tools(&self) -> Value {
        let url = format!("http://{}/admin/tools", self.proxy.addr);
        reqwest::Client::new().get(&url).bearer_auth(ADMIN_TOKEN).send().await.unwrap().json().await.unwrap()
    }

    /// Polls `GET /admin/tools` until `done` holds for its body, within `within`.
    async fn until_admin_tools(&self, what: &str, within: Duration, done: impl Fn(&Value) -> bool) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let body = self.admin_tools().await;
            if done(&body) {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "{what}: {body}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until voxgate has restarted MCP server `server` at least once and it is up again.
    async fn until_restarted(&self, server: &str) {
        self.until_admin_tools("not restarted", Duration::from_secs(20), |body| {
            body["mcp_servers"].as_array().unwrap().iter().any(|s| {
                s["server"] == server && s["state"] == "up" && s["restarts"].as_u64() >= Some(1)
            })
        })
        .await;
    }
}

/// The admin token of the labs that use the admin API.
const ADMIN_TOKEN: &str = "admin-secret-token-0123";

fn http_file(name: &str) -> Vec<Value> {
    read_jsonl(&http_lab().dir.path().join(name))
}

/// The model's function_call_output for the call, parsed.
async fn output(up: &mut FakeConn) -> Value {
    let item = up.until("conversation.item.create").await;
    serde_json::from_str(item["item"]["output"].as_str().unwrap()).unwrap()
}

fn finished(proxy: &TestProxy, call_id: &str) -> Vec<Value> {
    proxy.audit_records().into_iter().filter(|r| r["event"] == "call_finished" && r["call_id"] == call_id).collect()
}

/// Wait (bounded) until `check` holds.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn allowed_tools_are_offered_and_a_read_only_tool_runs_inline() {
    let mut lab = start(false, "").await;
    let (mut client, mut up, names) = lab.session().await;
    for offered in ["lab__lookup_result", "lab__order_test", "lab__count_steps", "calculate_medical_score"] {
        assert!(names.iter().any(|n| n == offered), "{offered} missing from {names:?}");
    }
    // Not on the allow-list, or a schema that does not compile: never sent to the model.
    assert!(!names.iter().any(|n| n.contains("secret_export")), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("broken_schema")), "{names:?}");

    model_calls(&mut up, &[("call_look1", "lab__lookup_result", r#"{"order_id":"ord-17"}"#)]).await;
    client.until("voxgate.tool_call.started").await;
    let completed = client.until("voxgate.tool_call.completed").await;
    assert_eq!(completed["name"], "lab__lookup_result");
    let result = output(&mut up).await;
    assert_eq!(result["text"], "Order ord-17: potassium 4.1 mmol/L (normal).");
    assert_eq!(result["truncated"], false);
    let fin = finished(&lab.proxy, "call_look1");
    assert_eq!(fin.len(), 1);
    assert_eq!((fin[0]["status"].as_str(), fin[0]["confirmation"].as_str()), (Some("completed"), Some("not_required")));
    assert_eq!(fin[0]["phi"], true, "MCP tools are PHI tools unless configured otherwise");
    assert_eq!(lab.stdio_file("calls.jsonl"), vec![json!({"tool": "lookup_result", "order_id": "ord-17"})]);
    // Counted under its own name, not as `other`: an operator sees which MCP tool does what.
    let metrics = lab.proxy.http_get("/metrics").await.1;
    assert!(
        metrics.contains(r#"voxgate_tool_calls_total{tool="lab__lookup_result",status="completed"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_write_tool_over_http_waits_for_confirmation() {
    let mut lab = start(true, "").await;
    let (mut client, mut up, names) = lab.session().await;
    assert!(names.iter().any(|n| n == "hlab__order_test"), "{names:?}");
    let code = format!("K-{}", uuid_like());

    // Declined: nothing reaches the server.
    let args = json!({"test_code": code, "priority": "urgent"}).to_string();
    model_calls(&mut up, &[("call_ord1", "hlab__order_test", &args)]).await;
    let request = client.until("voxgate.tool_call.confirmation_requested").await;
    assert_eq!(request["arguments"]["test_code"], code.as_str());
    client.send_json(json!({"type": "voxgate.tool_call.confirm", "call_id": "call_ord1", "approved": false})).await;
    assert_eq!(client.until("voxgate.tool_call.declined").await["reason"], "user_declined");
    assert_eq!(output(&mut up).await["error"]["code"], "user_declined");

    // Approved: written once.
    model_calls(&mut up, &[("call_ord2", "hlab__order_test", &args)]).await;
    client.until("voxgate.tool_call.confirmation_requested").await;
    client.send_json(json!({"type": "voxgate.tool_call.confirm", "call_id": "call_ord2", "approved": true})).await;
    client.until("voxgate.tool_call.completed").await;
    assert_eq!(output(&mut up).await["text"], format!("Ordered {code} (urgent)."));
    let orders: Vec<Value> =
        http_file("orders.jsonl").into_iter().filter(|o| o["test_code"] == code.as_str()).collect();
    assert_eq!(orders.len(), 1, "the declined call wrote nothing, the approved one once");
    let fin = finished(&lab.proxy, "call_ord1");
    assert_eq!((fin[0]["status"].as_str(), fin[0]["confirmation"].as_str()), (Some("declined"), Some("declined")));
}

#[tokio::test]
async fn is_error_fails_backend_error_and_only_the_model_gets_the_servers_text() {
    let mut lab = start(false, "").await;
    let (mut client, mut up, _) = lab.session().await;
    model_calls(&mut up, &[("call_fail1", "lab__failing_lookup", r#"{"order_id":"ord-9"}"#)]).await;
    // CONTRACT §4: a closed list of codes, and no upstream bodies in the client's messages.
    let failed = client.until("voxgate.tool_call.failed").await;
    assert_eq!(failed["error"], json!({"code": "backend_error", "message": "The tool reported an error."}));
    let result = output(&mut up).await;
    assert_eq!(result["error"]["code"], "backend_error");
    assert!(result["error"]["message"].as_str().unwrap().contains("lab system offline for order ord-9"), "{result}");
    assert_eq!(finished(&lab.proxy, "call_fail1")[0]["error_code"], "backend_error");
}

#[tokio::test]
async fn a_server_that_crashes_mid_call_is_restarted() {
    let mut lab = start(false, "[auth]\nadmin_token = \"admin-secret-token-0123\"\n").await;
    let (mut client, mut up, _) = lab.session().await;
    model_calls(&mut up, &[("call_crash", "lab__crash", r#"{"tag":"boom"}"#)]).await;
    let failed = client.until("voxgate.tool_call.failed").await;
    assert_eq!(failed["error"]["code"], "backend_error");
    assert!(!failed["error"]["message"].as_str().unwrap().contains('/'), "no paths in public messages");
    output(&mut up).await;

    // voxgate restarts the server; the next call works.
    lab.until_restarted("lab").await;
    model_calls(&mut up, &[("call_after", "lab__lookup_result", r#"{"order_id":"ord-2"}"#)]).await;
    client.until("voxgate.tool_call.completed").await;
    assert!(output(&mut up).await["text"].as_str().unwrap().starts_with("Order ord-2"));
}

#[tokio::test]
async fn tools_off_the_allow_list_or_outside_the_users_roles_are_neither_offered_nor_run() {
    let extra = "[mcp.servers.lab.policy.order_test]\nroles = [\"pharmacist\"]\n";
    let mut lab = start(false, extra).await;
    let (mut client, mut up, names) = lab.session().await;
    assert!(!names.iter().any(|n| n == "lab__order_test"), "anonymous clinician lacks the role: {names:?}");
    assert!(names.iter().any(|n| n == "lab__lookup_result"));

    model_calls(&mut up, &[("call_role", "lab__order_test", r#"{"test_code":"X","priority":"routine"}"#)]).await;
    assert_eq!(client.until("voxgate.tool_call.failed").await["error"]["code"], "permission_denied");
    assert_eq!(output(&mut up).await["error"]["code"], "permission_denied");

    // A tool the server has but the operator did not allow is unknown to voxgate.
    up.send_json(
        &json!({"type": "response.function_call_arguments.done", "event_id": "e", "response_id": "r", "item_id": "i",
        "output_index": 0, "call_id": "call_secret", "name": "lab__secret_export", "arguments": "{}"}),
    )
    .await;
    let out = up.until("conversation.item.create").await;
    assert!(out["item"]["output"].as_str().unwrap().contains("unknown_tool"), "{out}");
    assert!(lab.stdio_file("calls.jsonl").is_empty(), "nothing reached the server");
}

#[tokio::test]
async fn a_schema_violation_never_reaches_the_server() {
    let mut lab = start(true, "[mcp.servers.hlab.policy.order_test]\nconfirm = false\n").await;
    let (mut client, mut up, _) = lab.session().await;
    let code = format!("V-{}", uuid_like());
    let args = json!({"test_code": code, "priority": "asap"}).to_string();
    model_calls(&mut up, &[("call_bad", "hlab__order_test", &args)]).await;
    let failed = client.until("voxgate.tool_call.failed").await;
    assert_eq!(failed["error"]["code"], "invalid_arguments");
    assert!(!failed["error"]["message"].as_str().unwrap().contains("asap"), "values are never echoed");
    output(&mut up).await;
    assert!(http_file("calls.jsonl").iter().all(|c| c["test_code"] != code.as_str()), "the call reached the server");
}

#[tokio::test]
async fn progress_notifications_reach_the_client() {
    let mut lab = start(true, "").await;
    let (mut client, mut up, _) = lab.session().await;
    model_calls(&mut up, &[("call_steps", "hlab__count_steps", r#"{"steps":3}"#)]).await;
    let seen = client.collect_until("voxgate.tool_call.completed").await;
    let progress: Vec<&Value> = seen.iter().filter(|e| e["type"] == "voxgate.tool_call.progress").collect();
    // Coalesced to at most five a second (the steps are 50 ms apart): the first at once, then the
    // latest, in order, the last one always.
    assert!((2..=3).contains(&progress.len()), "{seen:?}");
    let values: Vec<f64> = progress.iter().map(|e| e["progress"].as_f64().unwrap()).collect();
    assert_eq!((values[0], values[values.len() - 1]), (1.0, 3.0), "{values:?}");
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    for event in &progress {
        let step = event["progress"].as_f64().unwrap();
        assert_eq!(event["call_id"], "call_steps");
        assert_eq!(event["total"], 3.0);
        assert_eq!(event["message"], format!("step {step} of 3"));
    }
    assert_eq!(output(&mut up).await["text"], "counted 3 steps");
}

#[tokio::test]
async fn a_slow_tool_times_out_and_the_server_is_told_to_cancel() {
    let mut lab = start(false, "[mcp.servers.lab.policy.slow]\ntimeout_ms = 400\n").await;
    let (mut client, mut up, _) = lab.session().await;
    model_calls(&mut up, &[("call_slow", "lab__slow", r#"{"tag":"t1","seconds":30}"#)]).await;
    assert_eq!(client.until("voxgate.tool_call.failed").await["error"]["code"], "timeout");
    assert_eq!(output(&mut up).await["error"]["code"], "timeout");
    eventually("the server to record the cancellation", || {
        lab.stdio_file("cancelled.jsonl") == vec![json!({"tag": "t1"})]
    })
    .await;
}

/// The client leaves while an MCP call runs: past the close deadline the call is abandoned, the
/// server is told to cancel it, and the call is audited exactly once.
#[tokio::test]
async fn a_call_running_when_the_session_closes_is_cancelled_on_the_server() {
    let mut lab = start(false, "[server]\ndrain_timeout_ms = 300\n").await;
    let (mut client, mut up, _) = lab.session().await;
    model_calls(&mut up, &[("call_close", "lab__slow", r#"{"tag":"t-close","seconds":30}"#)]).await;
    client.until("voxgate.tool_call.started").await;
    let _ = client.ws.close(None).await;
    drop(client);
    eventually("the server to record the cancellation", || {
        lab.stdio_file("cancelled.jsonl") == vec![json!({"tag": "t-close"})]
    })
    .await;
    eventually("the abandoned call to be audited", || finished(&lab.proxy, "call_close").len() == 1).await;
    // Counted on the final log: stopping the server joins the audit writer, so a duplicate
    // written after the first record would be on disk by now.
    let TestProxy { server, dir, .. } = lab.proxy;
    server.shutdown().await.expect("the audit writer flushed");
    let records = read_jsonl(&dir.path().join("audit.jsonl"));
    let finishes = records.iter().filter(|r| r["event"] == "call_finished" && r["call_id"] == "call_close").count();
    assert_eq!(finishes, 1, "audited exactly once: {records:?}");
}

#[tokio::test]
async fn admin_lists_tools_with_origin_policy_and_health_and_invokes_mcp_tools() {
    let lab = start(false, "[auth]\nadmin_token = \"admin-secret-token-0123\"\n[mcp.servers.lab.policy.lookup_result]\nphi = false\nrate_per_min = 7\n").await;
    let admin = reqwest::Client::new();
    let base = format!("http://{}", lab.proxy.addr);
    let body = lab.admin_tools().await;
    let tool = |name: &str| body["tools"].as_array().unwrap().iter().find(|t| t["name"] == name).cloned();
    let lookup = tool("lab__lookup_result").unwrap();
    assert_eq!(lookup["origin"], "lab");
    assert_eq!(lookup["health"], "up");
    assert_eq!(lookup["policy"]["requires_confirmation"], false, "readOnlyHint");
    assert_eq!(lookup["policy"]["rate_limit_per_minute"], 7);
    assert_eq!(lookup["policy"]["phi"], false);
    assert_eq!(
        tool("lab__order_test").unwrap()["policy"]["requires_confirmation"],
        true,
        "default for a tool that may write"
    );
    assert_eq!(tool("calculate_medical_score").unwrap()["origin"], "builtin");
    assert!(tool("lab__secret_export").is_none());
    assert_eq!(body["mcp_servers"][0]["server"], "lab");
    assert_eq!(body["mcp_servers"][0]["transport"], "stdio");
    let unauthorised = admin.get(format!("{base}/admin/tools")).send().await.unwrap();
    assert_eq!(unauthorised.status(), 401);

    let invoked = admin
        .post(format!("{base}/admin/tools/lab__lookup_result/invoke"))
        .bearer_auth("admin-secret-token-0123")
        .json(&json!({"arguments": {"order_id": "ord-5"}, "sub": "ops", "roles": ["clinician"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(invoked.status(), 200);
    let result: Value = invoked.json().await.unwrap();
    assert!(result["text"].as_str().unwrap().starts_with("Order ord-5"), "{result}");
    let audited = lab.proxy.audit_records();
    let fin = audited.iter().find(|r| r["event"] == "call_finished" && r["tool"] == "lab__lookup_result").unwrap();
    assert_eq!(fin["arguments"]["order_id"], "ord-5", "phi = false: arguments are audited");
}

/// An allowed tool out of the catalogue is still listed (CONTRACT §10: every tool), with why: its
/// server is down, or the server does not offer it (yet). Its effective policy depends on what the
/// server says about it, so it has none until then.
#[tokio::test]
async fn admin_lists_allowed_tools_that_are_not_offered_with_their_health() {
    let extra = "[auth]\nadmin_token = \"admin-secret-token-0123\"\n\
                 [mcp.servers.gone]\nurl = \"http://127.0.0.1:9/mcp\"\nallow = [\"page_on_call\"]\n";
    let lab = start(false, extra).await;
    let body = lab.admin_tools().await;
    let tool = |name: &str| body["tools"].as_array().unwrap().iter().find(|t| t["name"] == name).cloned();
    let down = tool("gone__page_on_call").unwrap_or_else(|| panic!("a down server's tool is listed: {body}"));
    assert_eq!(down["origin"], "gone");
    assert_eq!(down["health"], "down");
    assert!(down["policy"].is_null(), "{down}");
    let server = body["mcp_servers"].as_array().unwrap().iter().find(|s| s["server"] == "gone").unwrap();
    assert_eq!(server["state"], "down");
    // Allowed, but the lab server offers it only after `add_extra`.
    let later = tool("lab__extra").unwrap_or_else(|| panic!("an allowed tool not offered is listed: {body}"));
    assert_eq!((later["origin"].as_str(), later["health"].as_str()), (Some("lab"), Some("not_offered")));
    assert_eq!(tool("lab__lookup_result").unwrap()["health"], "up");
    assert!(tool("lab__secret_export").is_none(), "a tool off the allow-list is never listed");
    let names: Vec<&str> = body["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    let unique: std::collections::HashSet<&&str> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "each tool once: {names:?}");
}

/// An allowed tool stays a server tool name while its server is down: a client may not declare
/// it as its own tool and answer the model's calls to it past validation, confirmation and audit.
#[tokio::test]
async fn a_down_servers_allowed_tool_name_is_refused_as_a_client_tool() {
    let extra = "[mcp.servers.gone]\nurl = \"http://127.0.0.1:9/mcp\"\nallow = [\"page_on_call\"]\n";
    let mut lab = start(false, extra).await;
    let (mut client, mut up, names) = lab.session().await;
    assert!(!names.iter().any(|n| n == "gone__page_on_call"), "{names:?}");
    let tools = support::client_tools::declare_shadowing_tool(&mut client, &mut up, "gone__page_on_call").await;
    assert!(tools.iter().all(|t| t["name"] != "gone__page_on_call"), "{tools:?}");
}

#[tokio::test]
async fn a_tool_the_server_adds_later_joins_new_sessions() {
    let mut lab = start(false, "[auth]\nadmin_token = \"admin-secret-token-0123\"\n").await;
    let (mut client, mut up, names) = lab.session().await;
    assert!(!names.iter().any(|n| n == "lab__extra"), "{names:?}");
    model_calls(&mut up, &[("call_add", "lab__add_extra", "{}")]).await;
    client.until("voxgate.tool_call.completed").await;
    assert_eq!(output(&mut up).await["text"], "added");

    // voxgate follows notifications/tools/list_changed: the new tool is in the catalogue...
    lab.until_admin_tools("lab__extra never joined", Duration::from_secs(15), |body| {
        body["tools"].as_array().unwrap().iter().any(|t| t["name"] == "lab__extra" && t["health"] == "up")
    })
    .await;
    // ...and sessions started from now on are offered it and can call it.
    let (mut client, mut up, names) = lab.session().await;
    assert!(names.iter().any(|n| n == "lab__extra"), "{names:?}");
    model_calls(&mut up, &[("call_extra", "lab__extra", r#"{"note":"hi"}"#)]).await;
    client.until("voxgate.tool_call.completed").await;
    assert_eq!(output(&mut up).await["text"], "extra hi");
}

#[tokio::test]
async fn a_server_down_at_start_does_not_block_start_up() {
    let toml =
        "[mcp]\nconnect_timeout_ms = 2000\n[mcp.servers.gone]\nurl = \"http://127.0.0.1:9/mcp\"\nallow = [\"x\"]\n";
    let started = tokio::time::Instant::now();
    let proxy = TestProxy::start(toml).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    let (status, body) = proxy.http_get("/readyz").await;
    assert_eq!(status, 200);
    assert!(body.contains("mcp.servers.gone: down"), "{body}");
}

/// A short unique suffix, so tests sharing the HTTP server tell their records apart.
fn uuid_like() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    format!("{}-{}", std::process::id(), nanos % 1_000_000_000)
}
