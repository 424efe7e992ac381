//! How records reach the writer: the [`AuditHandle`] sessions queue them through, and the ticker
//! that wakes the writer every second (retries, timed checkpoints) and watches a commit that has
//! hung. Both send [`Job`]s to the writer thread ([`super::Writer::run`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot};

use super::super::AuditError;
use super::super::health::{Health, STALLED_AFTER, StallWatch};
use super::super::record::AuditRecord;
use crate::config::AuditOnError;
use crate::telemetry::metrics::Metrics;

/// How often the writer retries held records and checks whether a checkpoint is due.
const TICK: Duration = Duration::from_secs(1);

pub(super) type Ack = oneshot::Sender<Result<(), AuditError>>;

pub(super) enum Job {
    /// One record, or those of one session turn: the writer wakes once for all of them.
    Records(Vec<(Box<AuditRecord>, DateTime<Utc>, Ack)>),
    /// Retry held records; write a checkpoint when one is due by time.
    Tick,
}

/// Queues records for the writer. Cheap to clone; the writer ends when every clone is dropped.
#[derive(Clone)]
pub struct AuditHandle {
    /// Unbounded so that `record()` enqueues synchronously: records keep the order of the calls
    /// by construction (a `call_finished` can never overtake its `call_started`). The queue is
    /// bounded in practice by the results waiting on their acknowledgements.
    pub(super) tx: mpsc::UnboundedSender<Job>,
    pub(super) health: Arc<Health>,
    pub(super) on_error: AuditOnError,
}

impl AuditHandle {
    /// Queue a record. The record takes its place in the log at once (records keep the order of
    /// `record()` calls); the returned future resolves when it is written and fsynced, or with
    /// [`AuditError::Unavailable`] when that first attempt failed.
    pub fn record(&self, record: impl Into<Box<AuditRecord>>) -> impl Future<Output = Result<(), AuditError>> + Send + 'static {
        let (ack_tx, ack_rx) = oneshot::channel();
        self.queue(vec![(record.into(), Utc::now(), ack_tx)]);
        acknowledged(ack_rx)
    }

    /// Queue several records as one job, in order. Each future resolves like [`Self::record`]'s.
    /// A session turn that both starts and finishes a call hands the writer both records at
    /// once: one wake-up of the writer thread instead of two, and never a group wait for the
    /// second (see [`super::gather_awaited`]).
    pub fn record_all(&self, records: Vec<Box<AuditRecord>>) -> Vec<impl Future<Output = Result<(), AuditError>> + Send + 'static> {
        let made = Utc::now();
        let (jobs, acks): (Vec<_>, Vec<_>) = records
            .into_iter()
            .map(|record| {
                let (ack_tx, ack_rx) = oneshot::channel();
                ((record, made, ack_tx), acknowledged(ack_rx))
            })
            .unzip();
        if !jobs.is_empty() {
            self.queue(jobs);
        }
        acks
    }

    /// A writer that has stopped drops the job, and with it every acknowledgement sender: each
    /// waiting future then resolves to [`AuditError::Closed`].
    fn queue(&self, records: Vec<(Box<AuditRecord>, DateTime<Utc>, Ack)>) {
        let _ = self.tx.send(Job::Records(records));
    }

    /// Are records being made durable? False from a failed write until a write succeeds again,
    /// and while a commit has been running longer than [`STALLED_AFTER`].
    pub fn is_healthy(&self) -> bool {
        self.health.writable.load(Ordering::Relaxed) && !self.is_stalled()
    }

    /// Has the commit under way been running longer than [`STALLED_AFTER`]?
    /// Every call waits on that commit, whatever `audit.on_error` says.
    pub fn is_stalled(&self) -> bool {
        self.health.commit_running().is_some_and(|running| running >= STALLED_AFTER)
    }

    /// `audit.on_error`: whether a record that could not be made durable withholds its result.
    pub fn on_error(&self) -> AuditOnError {
        self.on_error
    }

    /// Are new calls refused at accept? With `fail_closed`, while records are not being made
    /// durable: a tool that ran now would read PHI or send arguments out with no durable trace.
    pub fn refuses_calls(&self) -> bool {
        self.on_error == AuditOnError::FailClosed && !self.is_healthy()
    }
}

/// Resolves when the writer acknowledges a record (see [`AuditHandle::record`]).
async fn acknowledged(ack: oneshot::Receiver<Result<(), AuditError>>) -> Result<(), AuditError> {
    ack.await.map_err(|_| AuditError::Closed)?
}

/// Sends a [`Job::Tick`] every second for as long as the writer has handles (a weak sender does
/// not keep it alive). It also watches the commit under way, which the writer thread, blocked in
/// it, cannot: `voxgate_audit_commit_running_seconds` says how long it has been running, and a
/// commit past [`STALLED_AFTER`] is logged once.
pub(super) fn spawn_ticker(tx: mpsc::WeakUnboundedSender<Job>, health: Arc<Health>, metrics: Option<Metrics>) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(TICK);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut watch = StallWatch::default();
        loop {
            every.tick().await;
            watch.check(&health, metrics.as_ref());
            match tx.upgrade() {
                Some(tx) if tx.send(Job::Tick).is_ok() => {}
                _ => return,
            }
        }
    });
}
