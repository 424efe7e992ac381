//! The two file tools over a fake backend that misbehaves as a broken or hostile server might: a
//! content type far longer than any real one, reads that take long or never end, and arguments
//! the schema admits as integers though they are written as floats.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::tools::files::backend::{Candidates, FileEntry, FilesBackend};
use crate::tools::files::{FilesError, RelPath, RetrieveNextcloudFile, SearchNextcloudFiles};
use crate::tools::http::within_deadline;
use crate::tools::test_support::ctx;
use crate::tools::text::MAX_RESULT_BYTES;
use crate::tools::{DEFAULT_TOOL_TIMEOUT, Tool, ToolError, ToolOutput};

/// Every file's text: it matches both words of the queries below.
const TEXT: &str = "diabetes protocol";

/// Files `/protocol-NN.txt` (even NN: their names match one query word of two) and `/note-NN.txt`
/// (odd NN: found by their text only), each read after `delay` (`None`: never), with `mime_type` as
/// the server's content type.
struct Fake {
    files: usize,
    delay: Option<Duration>,
    mime_type: String,
}

impl Fake {
    fn entry(&self, path: RelPath) -> FileEntry {
        FileEntry {
            path,
            size: TEXT.len() as u64,
            modified: None,
            mime_type: self.mime_type.clone(),
            url: String::new(),
        }
    }
}

#[async_trait::async_trait]
impl FilesBackend for Fake {
    async fn candidates(&self, _words: &[String], _by_content: bool) -> Result<Candidates, FilesError> {
        let files = (0..self.files)
            .map(|i| {
                let name = if i % 2 == 0 { "protocol" } else { "note" };
                self.entry(RelPath::parse(&format!("{name}-{i:02}.txt")).unwrap())
            })
            .collect();
        Ok(Candidates { files, truncated: false })
    }

    async fn read(&self, path: &RelPath, _max_bytes: u64) -> Result<(FileEntry, Vec<u8>), FilesError> {
        match self.delay {
            Some(delay) => tokio::time::sleep(delay).await,
            None => std::future::pending().await,
        }
        Ok((self.entry(path.clone()), TEXT.as_bytes().to_vec()))
    }
}

fn fake(files: usize, delay: Option<Duration>) -> Fake {
    Fake { files, delay, mime_type: "text/plain".into() }
}

/// A call as the session runs it: inside its deadline, cut off there.
async fn call(tool: &dyn Tool, args: Value) -> Result<ToolOutput, ToolError> {
    let deadline = Instant::now() + DEFAULT_TOOL_TIMEOUT;
    tokio::time::timeout_at(deadline, within_deadline(deadline, tool.call(args, ctx())))
        .await
        .unwrap_or(Err(ToolError::Timeout))
}

fn search_tool(backend: Fake) -> SearchNextcloudFiles {
    SearchNextcloudFiles::new(Arc::new(backend), 1024 * 1024)
}

fn retrieve_tool(backend: Fake) -> RetrieveNextcloudFile {
    RetrieveNextcloudFile::new(Arc::new(backend), 1024 * 1024)
}

fn file_id(name: &str) -> String {
    RelPath::parse(name).unwrap().file_id()
}

/// A content type of 40 KiB (a broken server) leaves no room for any text: the result is still
/// answered, at once, not cut again and again while a runtime thread spins. The loop never awaits,
/// so no timer in its own runtime could stop it: the call runs on a thread of its own, watched.
#[test]
fn a_huge_content_type_does_not_spin_the_retrieval() {
    let backend = Fake { mime_type: "x".repeat(40 * 1024), ..fake(1, Some(Duration::ZERO)) };
    let tool = retrieve_tool(backend);
    let args = json!({"file_id": file_id("protocol-00.txt")});
    let (answer, answered) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let _ = answer.send(runtime.block_on(tool.call(args, ctx())));
    });
    let output = answered
        .recv_timeout(Duration::from_secs(10))
        .expect("the retrieval spun instead of answering")
        .unwrap();
    assert_eq!(output.result["content"], json!(""));
    assert_eq!(output.result["content_truncated"], json!(true));
}

/// The ordinary case still fits: escaping-heavy text is cut until the result is under the bound.
#[tokio::test]
async fn a_retrieval_is_cut_to_fit() {
    let tool = retrieve_tool(fake(1, Some(Duration::ZERO)));
    let output = call(&tool, json!({"file_id": file_id("protocol-00.txt"), "max_chars": 5.0})).await.unwrap();
    // 5.0 is the integer the schema let through, not "absent" (which would be 10,000).
    assert_eq!(output.result["content"], json!("diabe"));
    assert_eq!(output.result["content_truncated"], json!(true));
    assert!(output.result.to_string().len() <= MAX_RESULT_BYTES);
}

/// 40 files whose reads take 5 s each, 4 at a time, would take 50 s: the search reads what it can
/// in the call's 30 s and answers with every name match and the files read, marked as incomplete.
#[tokio::test(start_paused = true)]
async fn a_slow_content_search_answers_before_the_deadline() {
    let tool = search_tool(fake(40, Some(Duration::from_secs(5))));
    let started = Instant::now();
    let args = json!({"query": "diabetes protocol", "include_content": true, "max_results": 50});
    let output = call(&tool, args).await.expect("the search ended as a timeout");
    assert!(started.elapsed() < DEFAULT_TOOL_TIMEOUT);
    // The 20 names, and the 10 notes among the 20 files read by 25 s; the 4 reads started then are
    // cut off a second before the deadline, and no more are started.
    assert_eq!(output.result["total_count"], json!(30));
    assert_eq!(output.result["truncated"], json!(true));
    assert_eq!(output.result["files"].as_array().unwrap().len(), 30);
}

/// Reads that never end (a PDF worker at its limit, a server that stalls) are given up in time.
#[tokio::test(start_paused = true)]
async fn a_content_search_whose_reads_hang_answers_with_the_names() {
    let tool = search_tool(fake(6, None));
    let args = json!({"query": "diabetes protocol", "include_content": true});
    let output = call(&tool, args).await.expect("the search ended as a timeout");
    assert_eq!(output.result["total_count"], json!(3));
    assert_eq!(output.result["truncated"], json!(true));
}

/// A content search with time to spare reads every file and is complete.
#[tokio::test(start_paused = true)]
async fn a_content_search_in_time_reads_every_file() {
    let tool = search_tool(fake(8, Some(Duration::from_secs(1))));
    let args = json!({"query": "diabetes protocol", "include_content": true, "max_results": 3.0});
    let output = call(&tool, args).await.unwrap();
    assert_eq!(output.result["total_count"], json!(8));
    assert!(output.result.get("truncated").is_none(), "{}", output.result);
    // max_results 3.0 is 3, not the default 20.
    assert_eq!(output.result["files"].as_array().unwrap().len(), 3);
}

/// The audit names the file a retrieval read by a digest of its canonical file id (the id decodes
/// to the path, which may itself be PHI): the same file gives the same digest however its id was
/// padded, and neither the id nor the path appears.
#[test]
fn a_retrieval_is_audited_by_a_digest_of_its_file_id() {
    use sha2::{Digest, Sha256};

    let tool = retrieve_tool(fake(1, Some(Duration::ZERO)));
    let id = file_id("/Clinic/protocol-00.txt");
    let expected = format!("sha256:{}", hex::encode(Sha256::digest(format!("f1.{}", base64_of("Clinic/protocol-00.txt")))));
    let resource = tool.audit_resource(&json!({"file_id": id}), &ctx());
    assert_eq!(resource.as_deref(), Some(expected.as_str()));
    // Surrounded by blanks (which the backend ignores too), it is the same file.
    let other_spelling = format!(" {id} ");
    assert_eq!(tool.audit_resource(&json!({"file_id": other_spelling}), &ctx()).as_deref(), Some(expected.as_str()));
    let resource = resource.unwrap();
    assert!(!resource.contains(&id) && !resource.contains("protocol"), "{resource}");
}

fn base64_of(path: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(path)
}
