//! Start-up recovery of approved calls a crash interrupted: the tools are asked at once, a few at
//! a time, under one deadline, and the calls still unknown at the deadline are closed `abandoned`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::*;
use crate::audit::{open, verify};
use crate::config::AuditConfig;

fn record(event: AuditEvent, call: &str) -> AuditRecord {
    AuditRecord {
        event,
        session_id: "vgs_1".into(),
        call_id: call.into(),
        tool: "create_calendar_event".into(),
        user: "u_1".into(),
        roles: vec!["clinician".into()],
        status: None,
        error_code: None,
        confirmation: (event == AuditEvent::CallApproved).then_some(Confirmation::Approved),
        duration_ms: None,
        phi: true,
        args_sha256: "ab".repeat(32),
        arguments: None,
        origin: Default::default(),
        resource: None,
    }
}

/// A log holding `records` and nothing after them, as a crash leaves it (no finishes written).
async fn crashed_log(records: Vec<AuditRecord>) -> (tempfile::TempDir, AuditConfig) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = AuditConfig { path: dir.path().join("audit.jsonl"), checkpoint_records: 0, ..AuditConfig::default() };
    let (handle, writer) = open(&cfg, Default::default()).await.unwrap();
    for record in records {
        handle.record(record).await.unwrap();
    }
    drop(handle);
    writer.join().await.unwrap();
    (dir, cfg)
}

/// The `call_finished` lines of the log at `path`.
fn finishes(path: &std::path::Path) -> Vec<Line> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Line>(l).unwrap())
        .filter(|l| l.event == AuditEvent::CallFinished)
        .collect()
}

/// A backend that answers each call after 100 ms, except the calls named `hang…`, which it never
/// answers; it counts the questions it holds at once.
#[derive(Default)]
struct Backend {
    asking: AtomicUsize,
    most: AtomicUsize,
}

#[async_trait::async_trait]
impl Recovery for Backend {
    async fn recover(&self, _tool: &str, _session_id: &str, call_id: &str) -> Recovered {
        let now = self.asking.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        if call_id.starts_with("hang") {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.asking.fetch_sub(1, Ordering::SeqCst);
        Recovered::Completed { resource: Some(format!("ev-{call_id}")) }
    }
}

#[tokio::test]
async fn approved_calls_are_checked_concurrently_under_one_deadline() {
    let approved: Vec<String> = (0..20).map(|i| format!("ok{i}")).chain((0..3).map(|i| format!("hang{i}"))).collect();
    let mut records: Vec<AuditRecord> = approved
        .iter()
        .flat_map(|call| [record(AuditEvent::CallStarted, call), record(AuditEvent::CallApproved, call)])
        .collect();
    records.push(record(AuditEvent::CallStarted, "parked"));
    let (_dir, cfg) = crashed_log(records).await;

    let chain = Chain::default();
    let (_lock, file, state) = read(&cfg.path, &chain).unwrap();
    let backend = Backend::default();
    let started = Instant::now();
    let closing = close_open_calls_within(file, state, &chain, "i", Some(&backend), Duration::from_secs(1));
    let (_, state) = tokio::time::timeout(Duration::from_secs(5), closing).await.expect("recovery ends at its deadline").unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1800), "one deadline for all of them: {took:?}");
    assert!(state.open.is_empty());
    let most = backend.most.load(Ordering::SeqCst);
    assert!(most > 1 && most <= RECOVERY_CONCURRENCY, "asked {most} at once");

    let finishes = finishes(&cfg.path);
    assert_eq!(finishes.len(), approved.len() + 1, "one finish each");
    for finish in &finishes {
        let (status, resource) = if finish.call_id.starts_with("ok") {
            (AuditStatus::Completed, Some(format!("ev-{}", finish.call_id)))
        } else {
            (AuditStatus::Abandoned, None)
        };
        assert_eq!((finish.status, &finish.resource), (Some(status), &resource), "{}", finish.call_id);
    }
    let report = verify(&cfg.path, &chain).unwrap();
    assert!(report.is_ok(), "{report}");
}

/// An admin API call needs no confirmation and runs at once: a crash during it leaves no
/// `call_approved`, yet its tool may have acted, so its backend is asked like an approved call's,
/// and its finish says the confirmation was not required.
#[tokio::test]
async fn an_admin_call_a_crash_interrupted_is_looked_up_in_its_backend() {
    let admin = AuditRecord {
        origin: std::sync::Arc::new(Origin { admin: true, ..Origin::default() }),
        ..record(AuditEvent::CallStarted, "ok_admin")
    };
    let (_dir, cfg) = crashed_log(vec![admin, record(AuditEvent::CallStarted, "parked")]).await;

    let chain = Chain::default();
    let (_lock, file, state) = read(&cfg.path, &chain).unwrap();
    let backend = Backend::default();
    close_open_calls_within(file, state, &chain, "i", Some(&backend), Duration::from_secs(5)).await.unwrap();
    let finishes = finishes(&cfg.path);
    let admin = finishes.iter().find(|f| f.call_id == "ok_admin").unwrap();
    assert_eq!(admin.status, Some(AuditStatus::Completed));
    assert_eq!(admin.resource.as_deref(), Some("ev-ok_admin"));
    assert_eq!(admin.confirmation, Some(Confirmation::NotRequired));
    let parked = finishes.iter().find(|f| f.call_id == "parked").unwrap();
    assert_eq!(parked.status, Some(AuditStatus::Abandoned), "a session's call never approved is not looked up");
    assert!(verify(&cfg.path, &chain).unwrap().is_ok());
}

/// A do-nothing tool, asking for confirmation or not.
fn quiet(name: &'static str, requires_confirmation: bool) -> std::sync::Arc<dyn crate::tools::Tool> {
    std::sync::Arc::new(crate::tools::test_support::Quiet(crate::tools::ToolSpec {
        name,
        description: "quiet".into(),
        parameters: serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false}),
        category: crate::tools::Category::Search,
        phi: false,
        risk: crate::tools::Risk::Low,
        requires_confirmation,
        third_party: false,
        rate_limit_per_minute: 10,
        timeout: Duration::from_secs(1),
    }))
}

/// `session_closed` says the call was parked waiting for the user: an interrupted call of a tool
/// that asks no confirmation was never parked, so its recovered finish says `not_required`.
#[tokio::test]
async fn an_interrupted_call_of_a_tool_without_confirmation_is_not_required() {
    let started = |tool: &str, call: &str| AuditRecord { tool: tool.into(), ..record(AuditEvent::CallStarted, call) };
    let (_dir, cfg) = crashed_log(vec![started("lookup", "running"), started("book", "parked")]).await;
    let tools = vec![quiet("lookup", false), quiet("book", true)];
    let registry = std::sync::Arc::new(crate::tools::registry::ToolRegistry::from_tools(tools, &Default::default()).unwrap());
    let recovery = crate::session::calls::recover::ToolRecovery(registry);

    let chain = Chain::default();
    let (_lock, file, state) = read(&cfg.path, &chain).unwrap();
    close_open_calls_within(file, state, &chain, "i", Some(&recovery), Duration::from_secs(5)).await.unwrap();
    let finishes = finishes(&cfg.path);
    let confirmation = |call: &str| finishes.iter().find(|f| f.call_id == call).unwrap().confirmation;
    assert_eq!(confirmation("running"), Some(Confirmation::NotRequired));
    assert_eq!(confirmation("parked"), Some(Confirmation::SessionClosed));
    assert!(finishes.iter().all(|f| f.status == Some(AuditStatus::Abandoned)));
    assert!(verify(&cfg.path, &chain).unwrap().is_ok());
}
