//! The file tools end to end through the real proxy (admin invoke path: schema validation, policy,
//! audit): against a real wsgidav WebDAV server with basic auth, started once for this binary, and
//! against the local backend on the same fixture tree (PDF, DOCX, HTML, Markdown, CSV, text in
//! nested folders, a corrupt PDF, a file over the size bound, a folder named `Ärzte & Co (Team)`,
//! and a symlink out of the root).
//! Also: a name read from a file blocks a later PubMed query in the same session.
//!
//! This file holds the fixture tree, the servers and the helpers; the tests are in
//! [`scenarios`] (both backends alike), [`failures`] (wrong password, unreachable or stalling server),
//! [`phi`] (a name read from a file taints the session) and [`nextcloud`] (server-side search).

#[path = "../support/mod.rs"]
mod support;

mod failures;
mod nextcloud;
mod phi;
mod scenarios;
mod walk;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use support::{FakeUpstream, TestProxy};

const ADMIN: &str = "files-test-admin-token";
const USER: &str = "alice";
const PASSWORD: &str = "correct-horse-battery";
/// `backends.files.max_file_bytes` in these tests: `big.txt` is over it.
const MAX_FILE_BYTES: u64 = 64 * 1024;
const OUTSIDE_SECRET: &str = "OUTSIDE-THE-ROOT-SECRET";

/// The fixture tree: `<tmp>/tree` is the root, `<tmp>/outside` is not.
fn fixture_tree() -> &'static Path {
    static TREE: OnceLock<PathBuf> = OnceLock::new();
    TREE.get_or_init(|| {
        let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("files-fixtures-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let tree = base.join("tree");
        let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/files");
        for (from, to) in [
            ("Protocols/diabetes-management-protocol.md", "Protocols/diabetes-management-protocol.md"),
            ("Protocols/diabetes-management-protocol.pdf", "Protocols/diabetes-management-protocol.pdf"),
            ("Templates/referral-letter-template.docx", "Templates/referral-letter-template.docx"),
            ("Reference/hypoglycaemia-quick-guide.html", "Reference/hypoglycaemia-quick-guide.html"),
            ("Reference/clinic-phone-list.csv", "Reference/clinic-phone-list.csv"),
        ] {
            std::fs::create_dir_all(tree.join(to).parent().unwrap()).unwrap();
            std::fs::copy(samples.join(from), tree.join(to)).unwrap();
        }
        let letters = tree.join("Clinic/Letters/2026");
        std::fs::create_dir_all(&letters).unwrap();
        std::fs::write(
            letters.join("discharge-summary.txt"),
            "Discharge summary\nPatient: Zebulon Quixote\nStarted insulin glargine 10 units at night.\n",
        )
        .unwrap();
        // A folder whose name servers percent-encode each their own way (see `scenarios`).
        let team = tree.join("Ärzte & Co (Team)/Leitlinien");
        std::fs::create_dir_all(&team).unwrap();
        std::fs::write(team.join("sepsis-leitfaden.txt"), "Sepsis: Blutkulturen vor Antibiotika.\n").unwrap();
        std::fs::write(tree.join("broken.pdf"), b"%PDF-1.4\n1 0 obj << /Type /Catalog >> garbage without xref").unwrap();
        std::fs::write(tree.join("big.txt"), "x".repeat(MAX_FILE_BYTES as usize + 10)).unwrap();
        let outside = base.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), OUTSIDE_SECRET).unwrap();
        std::os::unix::fs::symlink(outside.join("secret.txt"), tree.join("escape.txt")).unwrap();
        tree
    })
}

/// wsgidav serving the fixture tree at `/dav/`, started once for this binary; it exits when this
/// process ends (it watches its stdin).
fn wsgidav_url() -> &'static str {
    static SERVER: OnceLock<(Child, String)> = OnceLock::new();
    &SERVER.get_or_init(|| wsgidav_over(fixture_tree())).1
}

/// A wsgidav serving `tree` at `/dav/` with the test account, and its URL; it exits when the child
/// is dropped or this process ends (it watches its stdin).
fn wsgidav_over(tree: &Path) -> (Child, String) {
    let python = std::env::var_os("VOXGATE_TEST_PYTHON").map(PathBuf::from).unwrap_or_else(|| {
        let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-test/bin/python");
        if venv.exists() { venv } else { PathBuf::from("python3") }
    });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/wsgidav_server.py");
    let mut child = Command::new(python)
        .arg(script)
        .arg(tree)
        .args([USER, PASSWORD])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python with wsgidav (tests/requirements.txt; scripts/test installs it)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port: u16 = line.trim().strip_prefix("PORT ").and_then(|p| p.parse().ok()).expect("wsgidav did not start");
    (child, format!("http://127.0.0.1:{port}/dav/"))
}

fn webdav_toml(password: &str) -> String {
    format!(
        "[backends.files]\nkind = \"webdav\"\nurl = \"{}\"\nusername = \"{USER}\"\npassword = \"{password}\"\nmax_file_bytes = {MAX_FILE_BYTES}\n{}",
        wsgidav_url(),
        common_toml()
    )
}

fn local_toml() -> String {
    format!(
        "[backends.files]\nroot = \"{}\"\nmax_file_bytes = {MAX_FILE_BYTES}\n{}",
        fixture_tree().display(),
        common_toml()
    )
}

/// Admin invoke on, and rate limits out of the way of a scenario's many calls.
fn common_toml() -> String {
    format!(
        "[auth]\nadmin_token = \"{ADMIN}\"\n[tools.search_nextcloud_files]\nrate_limit_per_minute = 1000\n\
         [tools.retrieve_nextcloud_file]\nrate_limit_per_minute = 1000\n"
    )
}

async fn invoke(proxy: &TestProxy, tool: &str, arguments: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("http://{}/admin/tools/{tool}/invoke", proxy.addr))
        .bearer_auth(ADMIN)
        .json(&json!({"arguments": arguments, "sub": "dr.files", "roles": ["clinician"]}))
        .timeout(std::time::Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn search(proxy: &TestProxy, arguments: Value) -> Vec<Value> {
    let (status, result) = invoke(proxy, "search_nextcloud_files", arguments.clone()).await;
    assert_eq!(status, 200, "{arguments}: {result}");
    assert_eq!(result["query"], arguments["query"]);
    assert!(
        result["total_count"].as_u64().unwrap() >= result["files"].as_array().unwrap().len() as u64
    );
    result["files"].as_array().unwrap().clone()
}

fn paths(files: &[Value]) -> Vec<&str> {
    files.iter().map(|f| f["path"].as_str().unwrap()).collect()
}

async fn id_of(proxy: &TestProxy, query: &str, path: &str) -> String {
    let files = search(proxy, json!({"query": query})).await;
    let file = files
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("{path} not in {files:?}"));
    file["file_id"].as_str().unwrap().to_string()
}

async fn retrieve(proxy: &TestProxy, arguments: Value) -> (u16, Value) {
    invoke(proxy, "retrieve_nextcloud_file", arguments).await
}

/// The extracted text of the file at `path`, found by searching for `query`.
async fn text_of(proxy: &TestProxy, query: &str, path: &str) -> String {
    let file_id = id_of(proxy, query, path).await;
    let (status, read) = retrieve(proxy, json!({ "file_id": file_id })).await;
    assert_eq!(status, 200, "{path}: {read}");
    read["content"].as_str().unwrap().to_string()
}
