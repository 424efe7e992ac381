//! A server's tool listing is bounded: voxgate pages through `tools/list` itself, stops as soon as
//! it has seen every allowed tool, and otherwise after a bounded number of pages or tools or a
//! bounded time; a listing cut off at the bound offers the allowed tools found within it (the server is not
//! restarted for it), rather than following `nextCursor` for as long as the server likes while
//! keeping every tool it lists.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::ADMIN_TOKEN;
use super::support::{TestProxy, read_jsonl, test_python};

/// voxgate's page bound (`mcp/supervisor.rs`, `MAX_LIST_PAGES`).
const MAX_LIST_PAGES: usize = 64;

fn endless_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/endless_list_server.py")
}

/// voxgate with the endless server allowing `allow`; `extra_page`: the page listing `extra`;
/// `page_delay_ms`: how long the server takes to answer each page; `stall_page`: the page it
/// answers only after an hour.
async fn start(dir: &Path, allow: &[&str], extra_page: usize, page_delay_ms: u64, stall_page: usize) -> TestProxy {
    let toml = format!(
        "[auth]\nadmin_token = \"{ADMIN_TOKEN}\"\n[mcp]\nconnect_timeout_ms = 5000\n[mcp.servers.endless]\n\
         command = [{python:?}, {script:?}]\nenv = {{ LAB_DIR = {dir:?}, EXTRA_TOOL_PAGE = \"{extra_page}\", \
         PAGE_DELAY_MS = \"{page_delay_ms}\", STALL_PAGE = \"{stall_page}\" }}\nallow = {allow:?}\n",
        python = test_python().display().to_string(),
        script = endless_script().display().to_string(),
        dir = dir.display().to_string(),
    );
    TestProxy::start(&toml).await
}

/// `GET /admin/tools`: the server's health and the names of its tools offered (health `up`), sorted.
async fn admin_tools(proxy: &TestProxy) -> (Value, Vec<String>) {
    let url = format!("http://{}/admin/tools", proxy.addr);
    let body: Value =
        reqwest::Client::new().get(&url).bearer_auth(ADMIN_TOKEN).send().await.unwrap().json().await.unwrap();
    let health = body["mcp_servers"].as_array().unwrap().iter().find(|s| s["server"] == "endless").unwrap().clone();
    let mut offered: Vec<String> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["origin"] == "endless" && t["health"] == "up")
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    offered.sort();
    (health, offered)
}

/// Polls until `offered` tools are offered, within 15 s (a first page may take 30 s).
async fn until_offered(proxy: &TestProxy, offered: &[&str]) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (health, now) = admin_tools(proxy).await;
        if now == offered {
            return health;
        }
        assert!(tokio::time::Instant::now() < deadline, "offered {now:?}, server {health}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_listing_ends_once_every_allowed_tool_was_seen() {
    let dir = tempfile::tempdir().unwrap();
    let proxy = start(dir.path(), &["tool_1", "extra"], 3, 0, 0).await;
    // Before the fix no tool of this server was ever offered: the listing failed at the bound.
    let health = until_offered(&proxy, &["endless__extra", "endless__tool_1"]).await;
    assert_eq!((health["state"].as_str(), health["restarts"].as_u64()), (Some("up"), Some(0)), "{health}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Page 3 lists the last allowed tool still missing; its `nextCursor` is not followed.
    let pages = read_jsonl(&dir.path().join("pages.jsonl"));
    assert_eq!(pages.len(), 3, "{pages:?}");
}

#[tokio::test]
async fn a_listing_cut_off_at_the_bound_offers_the_allowed_tools_found_within_it() {
    let dir = tempfile::tempdir().unwrap();
    // `absent` is never listed, so voxgate pages up to its bound.
    let proxy = start(dir.path(), &["tool_1", "absent"], 0, 0, 0).await;
    let health = until_offered(&proxy, &["endless__tool_1"]).await;
    assert_eq!((health["state"].as_str(), health["tools"].as_u64()), (Some("up"), Some(1)), "{health}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (health, _) = admin_tools(&proxy).await;
    assert_eq!(health["restarts"].as_u64(), Some(0), "not restarted for it: {health}");
    let pages = read_jsonl(&dir.path().join("pages.jsonl"));
    assert_eq!(pages.len(), MAX_LIST_PAGES, "one listing, bounded");
}

#[tokio::test]
async fn a_tool_list_that_never_ends_is_read_for_a_bounded_number_of_pages() {
    let dir = tempfile::tempdir().unwrap();
    let proxy = start(dir.path(), &["absent"], 0, 0, 0).await;
    let pages_path = dir.path().join("pages.jsonl");
    // Before the bound the first listing followed the cursor until the 30 s listing timeout.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while read_jsonl(&pages_path).len() < MAX_LIST_PAGES {
        assert!(tokio::time::Instant::now() < deadline, "the listing was not bounded in time");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let pages = read_jsonl(&pages_path);
    assert_eq!(pages.len(), MAX_LIST_PAGES, "one listing of {MAX_LIST_PAGES} pages: {} pages", pages.len());
    // Nothing allowed was found within the bound: the server stays up without tools (restarting
    // it would list the same again), and the allowed tool is listed as not offered.
    let (health, offered) = admin_tools(&proxy).await;
    assert!(offered.is_empty(), "{offered:?}");
    assert_eq!(
        (health["state"].as_str(), health["tools"].as_u64(), health["restarts"].as_u64()),
        (Some("up"), Some(0), Some(0)),
        "{health}"
    );
}

#[tokio::test]
async fn a_listing_cut_off_by_time_offers_the_allowed_tools_found_within_it() {
    let dir = tempfile::tempdir().unwrap();
    // `absent` is never listed and each page takes 1.5 s: the 64 pages would take 96 s. voxgate
    // reads pages after the first for 5 s (`LIST_TIMEOUT`), so it asks for 5 (the last unanswered).
    let proxy = start(dir.path(), &["tool_1", "absent"], 0, 1500, 0).await;
    // Before the fix nothing was offered: the listing failed at the 30 s listing timeout, and the
    // server was reconnected with back-off to list the same again, for ever.
    let health = until_offered(&proxy, &["endless__tool_1"]).await;
    assert_eq!((health["state"].as_str(), health["tools"].as_u64()), (Some("up"), Some(1)), "{health}");
    let pages = read_jsonl(&dir.path().join("pages.jsonl")).len();
    assert!((2..MAX_LIST_PAGES).contains(&pages), "{pages} pages");
    // The page asked for last is cancelled at the cut; what the server still sends for it is ignored.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (health, offered) = admin_tools(&proxy).await;
    assert_eq!(offered, ["endless__tool_1"]);
    assert_eq!((health["state"].as_str(), health["restarts"].as_u64()), (Some("up"), Some(0)), "{health}");
    assert_eq!(read_jsonl(&dir.path().join("pages.jsonl")).len(), pages, "one listing");
}

#[tokio::test]
async fn a_page_cut_off_by_time_is_cancelled_at_the_server() {
    let dir = tempfile::tempdir().unwrap();
    // Page 2 is answered only after an hour: voxgate gives up on it at the 5 s bound.
    let proxy = start(dir.path(), &["tool_1", "absent"], 0, 0, 2).await;
    let health = until_offered(&proxy, &["endless__tool_1"]).await;
    assert_eq!((health["state"].as_str(), health["restarts"].as_u64()), (Some("up"), Some(0)), "{health}");
    let pages = read_jsonl(&dir.path().join("pages.jsonl"));
    assert_eq!(pages.len(), 2, "{pages:?}");
    // Before the fix the page was dropped unannounced: the server kept working on it, and rmcp
    // kept its request pending until an answer that never came.
    let cancelled_path = dir.path().join("cancelled.jsonl");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while read_jsonl(&cancelled_path).is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cancelled = read_jsonl(&cancelled_path);
    assert_eq!(cancelled.len(), 1, "the cut page is cancelled, and only it: {cancelled:?}");
    assert_eq!(cancelled[0]["request_id"], pages[1]["request_id"], "{cancelled:?} {pages:?}");
}
