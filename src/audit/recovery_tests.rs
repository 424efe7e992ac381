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
    let dir = tempfile::tempdir().unwrap();
    let cfg = AuditConfig { path: dir.path().join("audit.jsonl"), checkpoint_records: 0, ..AuditConfig::default() };
    let (handle, writer) = open(&cfg, Default::default()).await.unwrap();
    let approved: Vec<String> = (0..20).map(|i| format!("ok{i}")).chain((0..3).map(|i| format!("hang{i}"))).collect();
    for call in &approved {
        handle.record(record(AuditEvent::CallStarted, call)).await.unwrap();
        handle.record(record(AuditEvent::CallApproved, call)).await.unwrap();
    }
    handle.record(record(AuditEvent::CallStarted, "parked")).await.unwrap();
    // The crash: no finish for any of them.
    drop(handle);
    writer.join().await.unwrap();

    let chain = Chain::default();
    let (file, state) = read(&cfg.path, &chain).unwrap();
    let backend = Backend::default();
    let started = Instant::now();
    let closing = close_open_calls_within(file, state, &chain, "i", Some(&backend), Duration::from_secs(1));
    let (_, state) = tokio::time::timeout(Duration::from_secs(5), closing).await.expect("recovery ends at its deadline").unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1800), "one deadline for all of them: {took:?}");
    assert!(state.open.is_empty());
    let most = backend.most.load(Ordering::SeqCst);
    assert!(most > 1 && most <= RECOVERY_CONCURRENCY, "asked {most} at once");

    let finishes: Vec<Line> = std::fs::read_to_string(&cfg.path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Line>(l).unwrap())
        .filter(|l| l.event == AuditEvent::CallFinished)
        .collect();
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
