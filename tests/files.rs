//! The file tools end to end through the real proxy (admin invoke path: schema validation, policy,
//! audit): against a real wsgidav WebDAV server with basic auth, started once for this binary, and
//! against the local backend on the same fixture tree (PDF, DOCX, HTML, Markdown, CSV, text in
//! nested folders, a corrupt PDF, a file over the size bound, and a symlink out of the root).
//! Also: a name read from a file blocks a later PubMed query in the same session.

mod support;

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
    &SERVER
        .get_or_init(|| {
            let python = std::env::var_os("VOXGATE_TEST_PYTHON")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-test/bin/python");
                    if venv.exists() {
                        venv
                    } else {
                        PathBuf::from("python3")
                    }
                });
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/wsgidav_server.py");
            let mut child = Command::new(python)
                .arg(script)
                .arg(fixture_tree())
                .args([USER, PASSWORD])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("python with wsgidav (tests/requirements.txt; scripts/test installs it)");
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            let port: u16 = line
                .trim()
                .strip_prefix("PORT ")
                .and_then(|p| p.parse().ok())
                .expect("wsgidav did not start");
            (child, format!("http://127.0.0.1:{port}/dav/"))
        })
        .1
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

/// Everything both backends must do alike.
async fn scenarios(proxy: &TestProxy, backend: &str) {
    // By name: every word of the query counts, both protocol files come first, seed fields present.
    let files = search(proxy, json!({"query": "diabetes protocol"})).await;
    let found = paths(&files);
    assert!(found.len() >= 2, "{backend}: {found:?}");
    assert!(
        found[..2].contains(&"/Protocols/diabetes-management-protocol.pdf"),
        "{backend}: {found:?}"
    );
    assert!(
        found[..2].contains(&"/Protocols/diabetes-management-protocol.md"),
        "{backend}: {found:?}"
    );
    let pdf = files
        .iter()
        .find(|f| f["name"] == "diabetes-management-protocol.pdf")
        .unwrap();
    for field in ["file_id", "name", "path", "mime_type", "modified", "url"] {
        assert!(
            pdf[field].as_str().is_some_and(|v| !v.is_empty()),
            "{backend}: {field} in {pdf}"
        );
    }
    assert_eq!(pdf["mime_type"], "application/pdf");
    assert!(pdf["size"].as_u64().unwrap() > 1000);
    assert!(pdf["modified"].as_str().unwrap().ends_with('Z'));
    assert!(
        !pdf["file_id"].as_str().unwrap().contains("Protocols"),
        "file_id is opaque"
    );

    // By type.
    let pdfs = search(proxy, json!({"query": "protocol", "file_type": "pdf"})).await;
    assert_eq!(
        paths(&pdfs),
        ["/Protocols/diabetes-management-protocol.pdf"],
        "{backend}"
    );
    let docx = search(
        proxy,
        json!({"query": "letter", "file_type": "docx", "max_results": 5}),
    )
    .await;
    assert_eq!(
        paths(&docx),
        ["/Templates/referral-letter-template.docx"],
        "{backend}"
    );

    // By content: only with include_content, and inside PDF and DOCX too; nested folders walked.
    assert!(
        search(proxy, json!({"query": "glargine"})).await.is_empty(),
        "{backend}"
    );
    let by_text = search(proxy, json!({"query": "glargine", "include_content": true})).await;
    assert_eq!(
        paths(&by_text),
        ["/Clinic/Letters/2026/discharge-summary.txt"],
        "{backend}"
    );
    let hba1c = search(proxy, json!({"query": "SGLT2", "include_content": true})).await;
    let hba1c = paths(&hba1c);
    for expected in [
        "/Protocols/diabetes-management-protocol.pdf",
        "/Templates/referral-letter-template.docx",
    ] {
        assert!(
            hba1c.contains(&expected),
            "{backend}: {expected} not in {hba1c:?}"
        );
    }

    // The link out of the root is never listed, and its id does not read it.
    let all = search(proxy, json!({"query": "*", "max_results": 50})).await;
    assert!(
        !paths(&all).iter().any(|p| p.contains("escape")),
        "{backend}: {:?}",
        paths(&all)
    );
    let escape_id = format!("f1.{}", URL_SAFE_NO_PAD.encode("escape.txt"));
    let (status, body) = retrieve(proxy, json!({"file_id": escape_id})).await;
    assert_ne!(status, 200, "{backend}: {body}");
    assert!(!body.to_string().contains(OUTSIDE_SECRET), "{backend}");

    // Traversal and forged ids are refused before anything is read.
    for forged in [
        "../outside/secret.txt",
        "/etc/passwd",
        "Protocols/../../outside/secret.txt",
        "http://127.0.0.2/x",
    ] {
        let (status, body) = retrieve(
            proxy,
            json!({"file_id": format!("f1.{}", URL_SAFE_NO_PAD.encode(forged))}),
        )
        .await;
        assert_eq!(status, 422, "{backend}: {forged}: {body}");
        assert_eq!(body["error"]["code"], "invalid_arguments");
        assert!(!body.to_string().contains(OUTSIDE_SECRET));
    }
    let (status, _) = retrieve(proxy, json!({"file_id": "../../etc/passwd"})).await;
    assert_eq!(status, 422, "{backend}: not an id at all");

    // Extraction: PDF, DOCX, HTML (text only), with truncation.
    let pdf_id = pdf["file_id"].as_str().unwrap();
    let (status, read) = retrieve(proxy, json!({"file_id": pdf_id})).await;
    assert_eq!(status, 200, "{backend}: {read}");
    let text = read["content"].as_str().unwrap();
    assert!(
        text.contains("Metformin") && text.contains("Sick-day rules"),
        "{backend}: {text}"
    );
    assert_eq!(read["content_truncated"], false);
    assert_eq!(read["name"], "diabetes-management-protocol.pdf");
    assert_eq!(read["file_id"], pdf_id);
    assert_eq!(read["url"], pdf["url"]);
    let (_, cut) = retrieve(proxy, json!({"file_id": pdf_id, "max_chars": 40})).await;
    assert_eq!(
        cut["content"].as_str().unwrap().chars().count(),
        40,
        "{backend}: {cut}"
    );
    assert_eq!(cut["content_truncated"], true);
    let (_, raw) = retrieve(proxy, json!({"file_id": pdf_id, "extract_text": false})).await;
    assert_eq!(
        raw["content"],
        Value::Null,
        "{backend}: no text without extraction for a PDF"
    );

    let text = text_of(
        proxy,
        "referral",
        "/Templates/referral-letter-template.docx",
    )
    .await;
    assert!(
        text.contains("Referral letter (template)") && text.contains("Dear Dr [Name],"),
        "{backend}: {text}"
    );

    let text = text_of(
        proxy,
        "hypoglycaemia",
        "/Reference/hypoglycaemia-quick-guide.html",
    )
    .await;
    assert!(
        text.contains("15–20 g fast-acting carbohydrate"),
        "{backend}: {text}"
    );
    assert!(
        !text.contains('<') && !text.contains("console.log"),
        "{backend}: {text}"
    );

    // Bad days: a damaged PDF and a file over the size bound are clear backend errors.
    let broken_id = id_of(proxy, "broken", "/broken.pdf").await;
    let (status, broken) = retrieve(proxy, json!({"file_id": broken_id})).await;
    assert_eq!(
        (status, broken["error"]["code"].as_str()),
        (502, Some("backend_error")),
        "{backend}: {broken}"
    );
    assert!(
        broken["error"]["message"]
            .as_str()
            .unwrap()
            .contains("could not be read")
    );
    let big_id = id_of(proxy, "big", "/big.txt").await;
    let (status, big) = retrieve(proxy, json!({"file_id": big_id})).await;
    assert_eq!(status, 502, "{backend}: {big}");
    assert!(
        big["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too large"),
        "{backend}: {big}"
    );

    // Schema bounds.
    let (status, _) = invoke(
        proxy,
        "search_nextcloud_files",
        json!({"query": "x", "max_results": 500}),
    )
    .await;
    assert_eq!(status, 422);
    let (status, _) = invoke(
        proxy,
        "search_nextcloud_files",
        json!({"query": "x", "sneaky": true}),
    )
    .await;
    assert_eq!(status, 422);
}

#[tokio::test]
async fn webdav_backend_against_wsgidav() {
    let proxy = TestProxy::start(&webdav_toml(PASSWORD)).await;
    scenarios(&proxy, "webdav").await;
    let (_, readyz) = proxy.http_get("/readyz").await;
    assert_eq!(readyz, "ready\n");
    let files = search(&proxy, json!({"query": "protocol", "file_type": "pdf"})).await;
    assert!(
        files[0]["url"].as_str().unwrap().starts_with(wsgidav_url()),
        "{files:?}"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn local_backend_on_the_same_tree() {
    let proxy = TestProxy::start(&local_toml()).await;
    scenarios(&proxy, "local").await;
    proxy.stop().await;
}

#[tokio::test]
async fn a_wrong_password_is_a_clear_error_and_readiness_is_degraded() {
    let wrong = "not-the-password-42";
    let proxy = TestProxy::start(&webdav_toml(wrong)).await;
    let (status, body) = invoke(
        &proxy,
        "search_nextcloud_files",
        json!({"query": "protocol"}),
    )
    .await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "backend_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("credentials"), "{message}");
    assert!(
        !message.contains(wrong) && !message.contains(USER) && !message.contains("127.0.0.1"),
        "{message}"
    );
    let (status, readyz) = proxy.http_get("/readyz").await;
    assert_eq!(status, 200, "degraded, not failing");
    assert!(
        readyz.contains("degraded") && readyz.contains("search_nextcloud_files"),
        "{readyz}"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn an_unreachable_server_is_retried_then_reported() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let toml = format!(
        "[backends.files]\nkind = \"webdav\"\nurl = \"http://127.0.0.1:{port}/remote.php/dav/files/{USER}/\"\nusername = \"{USER}\"\npassword = \"{PASSWORD}\"\n{}",
        common_toml()
    );
    let proxy = TestProxy::start(&toml).await;
    let started = std::time::Instant::now();
    let (status, body) = invoke(
        &proxy,
        "search_nextcloud_files",
        json!({"query": "protocol"}),
    )
    .await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unavailable"),
        "{body}"
    );
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(500),
        "retried with back-off"
    );
    let (status, readyz) = proxy.http_get("/readyz").await;
    assert_eq!(status, 200);
    assert!(readyz.contains("degraded"), "{readyz}");
    proxy.stop().await;
}

/// A name read from a file taints the session: a PubMed query that reuses it never leaves.
#[tokio::test]
async fn a_name_read_from_a_file_blocks_a_later_pubmed_query() {
    let mut fake = FakeUpstream::start().await;
    // PubMed points at a closed port: a query that got past screening would fail differently.
    let pubmed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let toml = format!(
        "{}[backends.pubmed]\nbase_url = \"http://127.0.0.1:{pubmed_port}/eutils\"\n",
        local_toml()
    );
    let proxy = TestProxy::with_upstream(&fake, &toml).await;
    let file_id = id_of(
        &proxy,
        "discharge",
        "/Clinic/Letters/2026/discharge-summary.txt",
    )
    .await;
    let (mut client, mut up) = proxy.ready_session(&mut fake).await;

    let args = json!({"file_id": file_id}).to_string();
    support::model_calls(&mut up, &[("call_f1", "retrieve_nextcloud_file", &args)]).await;
    client.until("voxgate.tool_call.completed").await;
    let output = up.until("conversation.item.create").await;
    assert!(
        output["item"]["output"]
            .as_str()
            .unwrap()
            .contains("Zebulon Quixote"),
        "the model may read it"
    );

    let query = json!({"query": "Quixote insulin dosing"}).to_string();
    support::model_calls(&mut up, &[("call_p1", "search_pubmed", &query)]).await;
    let failed = client.until("voxgate.tool_call.failed").await;
    assert_eq!(failed["error"]["code"], "phi_blocked", "{failed}");
    assert!(!failed.to_string().contains("Quixote"));
    let output = up.until("conversation.item.create").await;
    assert!(
        output["item"]["output"]
            .as_str()
            .unwrap()
            .contains("phi_blocked")
    );
    let audit = std::fs::read_to_string(proxy.audit_path()).unwrap();
    assert!(
        !audit.contains("Quixote") && !audit.contains("discharge"),
        "no PHI in the audit log"
    );
    proxy.stop().await;
}

/// What a fake Nextcloud saw: `(method, path, body)` of every request.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, String, String)>>>;

/// A Nextcloud-shaped WebDAV server: it advertises SEARCH (`DASL`) at `/remote.php/dav/` and
/// answers it as Nextcloud does (hrefs under `/remote.php/dav/files/USER/`), including one result
/// outside the user's root that voxgate must drop. Any other method fails, so a folder walk shows.
async fn fake_nextcloud() -> (String, Seen) {
    let seen: Seen = Default::default();
    let answer = r#"<?xml version="1.0"?>
<d:multistatus xmlns:d="DAV:" xmlns:s="http://sabredav.org/ns" xmlns:oc="http://owncloud.org/ns" xmlns:nc="http://nextcloud.org/ns">
 <d:response><d:href>/remote.php/dav/files/alice/Protocols/diabetes-management-protocol.pdf</d:href>
  <d:propstat><d:prop><d:getcontentlength>1844</d:getcontentlength><d:getlastmodified>Mon, 23 Nov 2026 18:25:54 GMT</d:getlastmodified><d:getcontenttype>application/pdf</d:getcontenttype><d:resourcetype/></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
 <d:response><d:href>/remote.php/dav/files/alice/Diabetes/</d:href>
  <d:propstat><d:prop><d:resourcetype><d:collection/></d:resourcetype></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
 <d:response><d:href>/remote.php/dav/files/bob/diabetes-private.pdf</d:href>
  <d:propstat><d:prop><d:getcontentlength>10</d:getcontentlength><d:resourcetype/></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
</d:multistatus>"#;
    let record = seen.clone();
    let app = axum::Router::new().fallback(
        move |method: axum::http::Method,
              uri: axum::http::Uri,
              headers: axum::http::HeaderMap,
              body: String| {
            let record = record.clone();
            async move {
                record
                    .lock()
                    .unwrap()
                    .push((method.to_string(), uri.path().to_string(), body));
                let authorized = headers
                    .get("authorization")
                    .is_some_and(|v| v.to_str().unwrap_or_default().starts_with("Basic "));
                let response = |status: u16,
                                extra: Option<(&'static str, &'static str)>,
                                text: &'static str| {
                    let mut builder = axum::http::Response::builder().status(status);
                    if let Some((name, value)) = extra {
                        builder = builder.header(name, value);
                    }
                    builder.body(axum::body::Body::from(text)).unwrap()
                };
                match (method.as_str(), uri.path()) {
                    _ if !authorized => response(
                        401,
                        Some(("WWW-Authenticate", "Basic realm=\"Nextcloud\"")),
                        "",
                    ),
                    ("OPTIONS", "/remote.php/dav/") => {
                        response(200, Some(("DASL", "<DAV:basicsearch>")), "")
                    }
                    ("OPTIONS", _) => response(200, None, ""),
                    ("SEARCH", "/remote.php/dav/") => response(
                        207,
                        Some(("Content-Type", "application/xml; charset=utf-8")),
                        answer,
                    ),
                    _ => response(500, None, "no walking here"),
                }
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/remote.php/dav/files/{USER}/"), seen)
}

#[tokio::test]
async fn nextcloud_search_is_used_when_the_server_offers_it() {
    let (url, seen) = fake_nextcloud().await;
    let toml = format!(
        "[backends.files]\nkind = \"webdav\"\nurl = \"{url}\"\nusername = \"{USER}\"\npassword = \"{PASSWORD}\"\n{}",
        common_toml()
    );
    let proxy = TestProxy::start(&toml).await;
    let files = search(&proxy, json!({"query": "diabetes protocol"})).await;
    assert_eq!(
        paths(&files),
        ["/Protocols/diabetes-management-protocol.pdf"],
        "folders and other users' files dropped"
    );
    assert_eq!(
        files[0]["url"],
        format!("{url}Protocols/diabetes-management-protocol.pdf")
    );
    assert_eq!(files[0]["size"], 1844);
    let requests = seen.lock().unwrap().clone();
    let searches: Vec<&(String, String, String)> =
        requests.iter().filter(|(m, _, _)| m == "SEARCH").collect();
    assert_eq!(searches.len(), 1, "{requests:?}");
    let body = &searches[0].2;
    assert!(
        body.contains("<d:href>/files/alice/</d:href>"),
        "scoped to the user's files: {body}"
    );
    assert!(
        body.contains("%diabetes%") && body.contains("%protocol%"),
        "{body}"
    );
    assert!(
        !requests.iter().any(|(m, _, _)| m == "PROPFIND"),
        "no folder walk: {requests:?}"
    );
    proxy.stop().await;
}
