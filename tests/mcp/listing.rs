//! A server's tool listing is bounded: voxgate pages through `tools/list` itself, stops after a
//! bounded number of pages or tools, and treats a listing that goes over as failed (the server is
//! restarted like one whose listing failed otherwise), rather than following `nextCursor` for as
//! long as the server likes while keeping every tool it lists.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::support::{TestProxy, read_jsonl, test_python};

/// voxgate's page bound (`mcp/supervisor.rs`, `MAX_LIST_PAGES`).
const MAX_LIST_PAGES: usize = 64;

fn endless_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/endless_list_server.py")
}

#[tokio::test]
async fn a_tool_list_that_never_ends_fails_after_a_bounded_number_of_pages() {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[auth]\nadmin_token = \"admin-secret-token-0123\"\n[mcp]\nconnect_timeout_ms = 5000\n[mcp.servers.endless]\n\
         command = [{python:?}, {script:?}]\nenv = {{ LAB_DIR = {dir:?} }}\nallow = [\"tool_1\"]\n",
        python = test_python().display().to_string(),
        script = endless_script().display().to_string(),
        dir = dir.path().display().to_string(),
    );
    let proxy = TestProxy::start(&toml).await;
    let admin = reqwest::Client::new();
    let tools_url = format!("http://{}/admin/tools", proxy.addr);
    // Before the fix the first listing followed the cursor until the 30 s listing timeout.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let body = loop {
        let body: Value =
            admin.get(&tools_url).bearer_auth("admin-secret-token-0123").send().await.unwrap().json().await.unwrap();
        let health = body["mcp_servers"].as_array().unwrap().iter().find(|s| s["server"] == "endless").unwrap().clone();
        if health["restarts"].as_u64() >= Some(2) {
            break body;
        }
        assert!(tokio::time::Instant::now() < deadline, "the listing was not given up: {health}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let tools = body["tools"].as_array().unwrap();
    // Listed (every allowed tool is), but not offered.
    assert!(
        tools.iter().all(|t| t["origin"] != "endless" || t["health"] != "up"),
        "no tool of a failed listing joins: {tools:?}"
    );
    let pages = read_jsonl(&dir.path().join("pages.jsonl"));
    let listings = pages.iter().filter(|p| p["cursor"].is_null()).count();
    assert!(listings >= 2, "{listings} listings");
    // The listing in progress may have a page more than the finished ones counted.
    assert!(pages.len() <= listings * MAX_LIST_PAGES, "{} pages in {listings} listings", pages.len());
}
