//! The OTLP receiver (`otlp_receiver.py`, a Jaeger stand-in built on opentelemetry-proto) and
//! helpers to read what it received.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub struct Receiver {
    pub child: Child,
    pub port: u16,
    pub out: PathBuf,
}

/// Starts the Python receiver on a free port and waits for its `PORT <n>` line.
pub async fn start_receiver(dir: &Path) -> Receiver {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join(".venv-test/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/test (it creates .venv-test with opentelemetry-proto and \
         protobuf), or: python3 -m venv .venv-test && .venv-test/bin/pip install \
         opentelemetry-proto protobuf",
        python.display()
    );
    let out = dir.join("received.jsonl");
    let mut child = Command::new(python)
        .arg(root.join("tests/support/otlp_receiver.py"))
        .arg("0")
        .arg(&out)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start otlp_receiver.py");
    let stdout = child.stdout.take().expect("receiver stdout");
    let mut first = String::new();
    tokio::time::timeout(
        Duration::from_secs(20),
        BufReader::new(stdout).read_line(&mut first),
    )
    .await
    .expect("receiver printed no PORT line within 20 s")
    .expect("read receiver stdout");
    let port = first
        .trim()
        .strip_prefix("PORT ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| {
            panic!("unexpected first receiver line {first:?} (is opentelemetry-proto installed?)")
        });
    Receiver { child, port, out }
}

pub fn received(path: &Path) -> (String, Vec<Value>) {
    let text = std::fs::read_to_string(path).expect("read receiver output");
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("receiver line is JSON"))
        .collect();
    (text, lines)
}

pub fn one_span<'a>(lines: &'a [Value], name: &str, attr: (&str, &str)) -> &'a Value {
    let found: Vec<&Value> = lines
        .iter()
        .filter(|l| l["kind"] == "span" && l["name"] == name && l["attributes"][attr.0] == attr.1)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one {name} span with {attr:?}, got {found:?}"
    );
    found[0]
}

