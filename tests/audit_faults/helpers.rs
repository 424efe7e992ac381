//! What the audit fault tests share: a tmpfs to fill, the binary's config, a session, one call,
//! and the verify command.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::support::{Client, FakeConn, FakeUpstream, binary, model_calls};

pub const BMI: &str = r#"{"calculator_name":"bmi","parameters":{"weight_kg":70,"height_cm":175}}"#;

/// A tmpfs mounted for one test, unmounted when dropped.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    /// `None` (with a message saying why the test is skipped) where mounting is not permitted.
    pub fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .stderr(Stdio::null())
            .status();
        if status.is_ok_and(|s| s.success()) {
            Some(Tmpfs(dir.to_path_buf()))
        } else {
            eprintln!(
                "SKIPPED: mounting a tmpfs is not permitted here (needs root or CAP_SYS_ADMIN)"
            );
            None
        }
    }

    /// Fill the file system; returns the filler to delete when space should come back.
    pub fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        for chunk in [65536usize, 4096, 512, 64, 1] {
            let block = vec![b'x'; chunk];
            while file.write_all(&block).is_ok() {}
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

pub fn config(upstream: &FakeUpstream, audit: &Path, calendar: &Path, audit_extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ninstance_id = \"itest-1\"\n\
         [upstream]\nkind = \"openai\"\nurl = \"ws://{}/v1/realtime\"\napi_key = \"sk-test\"\n\
         [audit]\npath = \"{}\"\n{audit_extra}\n[backends.calendar]\npath = \"{}\"\n",
        upstream.addr,
        audit.display(),
        calendar.display()
    )
}

pub async fn session(addr: &str, fake: &mut FakeUpstream) -> (Client, FakeConn) {
    let mut client = Client::connect(
        &format!("ws://{addr}/v1/realtime"),
        &["realtime", "voxgate.v1"],
    )
    .await;
    let mut up = fake.accept().await;
    up.open_session().await;
    client.until("voxgate.session.ready").await;
    (client, up)
}

/// One BMI call: the output the model got and the client's terminal event.
pub async fn bmi_call(client: &mut Client, up: &mut FakeConn, call_id: &str) -> (Value, Value) {
    model_calls(up, &[(call_id, "calculate_medical_score", BMI)]).await;
    let item = up.until("conversation.item.create").await;
    let output: Value = serde_json::from_str(item["item"]["output"].as_str().unwrap()).unwrap();
    let events = client
        .collect_until_any(&["voxgate.tool_call.completed", "voxgate.tool_call.failed"])
        .await;
    (output, events.last().cloned().unwrap())
}

pub async fn readyz(addr: &str) -> u16 {
    reqwest::get(format!("http://{addr}/readyz"))
        .await
        .unwrap()
        .status()
        .as_u16()
}

pub async fn metrics(addr: &str) -> String {
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

pub async fn stop(child: &mut tokio::process::Child) {
    let pid = child.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(20), child.wait())
            .await
            .unwrap()
            .unwrap()
            .success()
    );
}

pub fn verify(audit: &Path, env: &[(&str, &str)]) -> (bool, String) {
    let out = std::process::Command::new(binary())
        .args(["audit", "verify"])
        .arg(audit)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

pub fn finish<'a>(records: &'a [Value], call_id: &str) -> Vec<&'a Value> {
    records
        .iter()
        .filter(|r| r["event"] == "call_finished" && r["call_id"] == call_id)
        .collect()
}

pub trait CollectAny {
    async fn collect_until_any(&mut self, kinds: &[&str]) -> Vec<Value>;
}

impl CollectAny for Client {
    async fn collect_until_any(&mut self, kinds: &[&str]) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let event = self.next_json().await;
            let done = kinds.iter().any(|k| event["type"] == *k);
            seen.push(event);
            if done {
                return seen;
            }
        }
    }
}

/// Calls until one hits the full disk (the audit file's last page may still take a line or two).
pub async fn call_until_refused(
    client: &mut Client,
    up: &mut FakeConn,
    prefix: &str,
) -> (String, Value, Value) {
    for n in 0..20 {
        let call_id = format!("{prefix}{n}");
        let (output, event) = bmi_call(client, up, &call_id).await;
        if output.get("error").is_some() {
            return (call_id, output, event);
        }
    }
    panic!("the full disk never refused a record");
}

/// voxgate whose audit log is on a 256 KiB tmpfs (`audit_extra`: more `[audit]` settings), with its
/// fake upstream; `None` where a tmpfs cannot be mounted.
pub struct OnSmallDisk {
    pub work: tempfile::TempDir,
    pub disk: Tmpfs,
    pub fake: FakeUpstream,
    pub audit: PathBuf,
    pub child: tokio::process::Child,
    pub addr: String,
}

pub async fn on_small_disk(audit_extra: &str) -> Option<OnSmallDisk> {
    let work = tempfile::tempdir().unwrap();
    let disk = Tmpfs::mount(&work.path().join("audit"), "256k")?;
    let fake = FakeUpstream::start().await;
    let audit = disk.0.join("audit.jsonl");
    let config = config(&fake, &audit, &work.path().join("cal.ics"), audit_extra);
    let (child, addr) = crate::support::spawn_voxgate(&config, work.path()).await;
    Some(OnSmallDisk { work, disk, fake, audit, child, addr })
}
