//! The real binary: `check-config`, refusing a bad config with exit 2, and a SIGTERM drain with an
//! open session (closing event, 1012, exit 0, audit flushed).

mod support;

use std::io::Write;
use std::time::Duration;

use serde_json::json;
use support::{Client, binary, spawn_voxgate};

fn write_config(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

#[test]
fn check_config_accepts_a_good_file_and_hides_secrets() {
    let file = write_config("[server]\nlisten = \"127.0.0.1:9999\"\n[upstream]\napi_key = \"sk-live-TOPSECRET\"\n");
    let out = std::process::Command::new(binary())
        .arg("check-config")
        .arg(file.path())
        .env("VOXGATE_AUTH__ADMIN_TOKEN", "admin-TOPSECRET-0123456789")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("server.listen = 127.0.0.1:9999"), "{stdout}");
    assert!(stdout.contains("upstream.kind = openai"), "{stdout}");
    assert!(stdout.contains("auth.admin_token = (set)"), "{stdout}");
    assert!(!stdout.contains("TOPSECRET"), "{stdout}");
}

#[test]
fn check_config_hides_credentials_inside_urls() {
    let file = write_config(
        "[upstream]\nkind = \"azure\"\nurl = \"wss://az.example/openai/v1/realtime?api-key=TOPSECRET1\"\n\
         [telemetry]\notlp_endpoint = \"https://collector:TOPSECRET2@otel.example:4318\"\n",
    );
    let out = std::process::Command::new(binary())
        .arg("check-config")
        .arg(file.path())
        .env("VOXGATE_UPSTREAM__API_KEY", "az-key-0123")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("upstream.url = wss://az.example/openai/v1/realtime?***"), "{stdout}");
    assert!(stdout.contains("telemetry.otlp_endpoint = https://***@otel.example:4318/"), "{stdout}");
    assert!(!stdout.contains("TOPSECRET") && !stdout.contains("collector"), "{stdout}");
}

/// An "unlimited" `max_sessions` is a bad setting like any other (exit 2), not a panic at start.
#[test]
fn a_huge_max_sessions_is_refused_at_start_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_config(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nmax_sessions = 9223372036854775807\n[audit]\npath = \"{}\"\n\
         [backends.calendar]\npath = \"{}\"\n[backends.files]\nroot = \"{}\"\n",
        dir.path().join("audit.jsonl").display(),
        dir.path().join("cal.ics").display(),
        dir.path().join("files").display(),
    ));
    let mut child = std::process::Command::new(binary())
        .arg("--config")
        .arg(file.path())
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Should it start after all, it must not outlive the test.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid configuration: server.max_sessions:"), "{stderr}");
}

#[test]
fn a_bad_config_names_the_key_and_exits_2() {
    let file = write_config("[server]\nmax_sessions = 0\n");
    for args in [vec!["check-config".to_string(), file.path().display().to_string()], vec!["--config".into(), file.path().display().to_string()]] {
        let out = std::process::Command::new(binary()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("voxgate: invalid configuration: server.max_sessions:"), "{stderr}");
        assert_eq!(stderr.matches("invalid configuration").count(), 1, "{stderr}");
    }
    let out = std::process::Command::new(binary())
        .arg("check-config")
        .arg("/nonexistent.toml")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = std::process::Command::new(binary())
        .env("VOXGATE_SERVER__LISTEN", "not-an-address")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("server.listen"));
}

#[tokio::test]
async fn sigterm_drains_an_open_session() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[audit]\npath = \"{}\"\n[backends.calendar]\npath = \"{}\"\n",
        dir.path().join("audit.jsonl").display(),
        dir.path().join("cal.ics").display()
    );
    let (mut child, addr) = spawn_voxgate(&config, dir.path()).await;
    let mut client = Client::connect(&format!("ws://{addr}/v1/realtime"), &["realtime", "voxgate.v1"]).await;
    client.until("voxgate.session.ready").await;
    // Ask for a calculation so the audit log has something to flush.
    client
        .send_json(json!({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Calculate the BMI for 70 kg and 175 cm"}]}}))
        .await;
    client.send_json(json!({"type": "response.create"})).await;
    client.until("voxgate.tool_call.completed").await;

    let pid = child.id().unwrap();
    let status = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status().unwrap();
    assert!(status.success());
    let closing = client.until("voxgate.session.closing").await;
    assert_eq!(closing["reason"], "service restart");
    assert_eq!(client.closed().await.0, 1012);
    let exit = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.unwrap().unwrap();
    assert!(exit.success(), "{exit:?}");
    let records = support::read_jsonl(&dir.path().join("audit.jsonl"));
    assert_eq!(records.iter().filter(|r| r["event"] == "call_finished").count(), 1);
    let verify = std::process::Command::new(binary())
        .args(["audit", "verify"])
        .arg(dir.path().join("audit.jsonl"))
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));
}

/// `voxgate extract-pdf`, the worker the server reads PDFs with: the document on stdin, its text
/// on stdout; one that would need more memory than the worker may map fails the worker alone.
#[test]
fn the_pdf_worker_reads_a_document_and_dies_alone_on_one_too_large_for_it() {
    use std::process::{Command, Stdio};
    let run = |pdf: &[u8]| {
        let mut child = Command::new(binary())
            .arg("extract-pdf")
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let pdf = pdf.to_vec();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&pdf);
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        out
    };
    let sample = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/data/files/Protocols/diabetes-management-protocol.pdf")).unwrap();
    let out = run(&sample);
    assert!(out.status.success(), "{:?}", out.status);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Metformin"));

    // One page whose content is the same 48 MiB stream (≈ 50 KiB deflated, under the decode
    // budget once) referenced 64 times: the parser inflates it once per reference, 3 GiB in all.
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(b"BT /F1 12 Tf 72 712 Td (Hello) Tj ET\n").unwrap();
    let spaces = vec![b' '; 1 << 20];
    for _ in 0..48 {
        encoder.write_all(&spaces).unwrap();
    }
    let stream = encoder.finish().unwrap();
    let refs = vec!["4 0 R"; 64].join(" ");
    let mut content = format!("<< /Filter /FlateDecode /Length {} >>\nstream\n", stream.len()).into_bytes();
    content.extend_from_slice(&stream);
    content.extend_from_slice(b"\nendstream");
    let objects: Vec<Vec<u8>> = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        format!("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >> /Contents [{refs}] >>")
            .into_bytes(),
        content,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
    ];
    let pdf = pdf_file(&objects);
    // The same document with the stream referenced once is read, 48 MiB decoded and all.
    let mut once = objects.clone();
    once[2] = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>".to_vec();
    let out = run(&pdf_file(&once));
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("Hello"), "{:?}", out.status);
    let started = std::time::Instant::now();
    let out = run(&pdf);
    assert!(!out.status.success(), "the worker read 3 GiB of content: {:?}", out.status);
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
}

/// A PDF file of `objects` (numbered from 1; the first is the catalog), with its xref table.
fn pdf_file(objects: &[Vec<u8>]) -> Vec<u8> {
    let mut out = b"%PDF-1.7\n".to_vec();
    let mut offsets = Vec::new();
    for (n, object) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", n + 1).as_bytes());
        out.extend_from_slice(object);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for offset in offsets {
        out.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(format!("trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n", objects.len() + 1).as_bytes());
    out
}

/// gRPC to an `https://` collector cannot work in this build (no TLS in the gRPC exporter): it is
/// refused as a config error, exit 2 for `check-config` and `run` alike, never printing the URL's
/// credentials.
#[test]
fn a_grpc_collector_over_https_is_a_config_error() {
    let file = write_config(
        "[server]\nlisten = \"127.0.0.1:0\"\n[telemetry]\notlp_protocol = \"grpc\"\n\
         otlp_endpoint = \"https://collector:TOPSECRET9@otel.example:4317\"\n",
    );
    for args in [vec!["check-config".to_string(), file.path().display().to_string()], vec!["--config".into(), file.path().display().to_string()]] {
        let out = std::process::Command::new(binary()).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("invalid configuration: telemetry.otlp_endpoint:"), "{stderr}");
        assert!(stderr.contains("http/protobuf"), "{stderr}");
        assert!(!stderr.contains("TOPSECRET9"), "{stderr}");
    }
}
