//! The single audit writer task. Sessions queue records through an [`AuditHandle`]; the writer
//! takes everything queued (group commit), writes the lines, fsyncs once, and only then
//! acknowledges each record — the caller releases a tool's result on that acknowledgement. A batch
//! of `call_started` records alone waits up to 2 ms for a record a call waits on, so a fast call's
//! two records share one fsync (see [`gather_awaited`]).
//!
//! A bad day never leaves a torn or half-counted log: a batch whose write or fsync fails is cut
//! back to the last durable offset, acknowledged as failed ([`AuditError::Unavailable`]), and kept
//! in order to be written again before anything newer — so sequence numbers are never reused and
//! no record is lost while the process lives. A held record is serialised once: every retry writes
//! the line made at its first attempt (see [`pending`]). With `audit.on_error = "fail_closed"` a
//! `call_finished` that missed its first write is rewritten as failed `audit_unavailable` (the
//! caller withheld the result); with `fail_open` it is written as it happened (the result went
//! out). The writer retries every second, so health comes back on its own once space returns.
//! A commit still running after [`STALLED_AFTER`] (a hung volume: `fdatasync` never returns) makes
//! the writer unhealthy too, for as long as it runs; the ticker task watches it, since the writer
//! thread is blocked in it, and exports how long it has been running. A record's `ts` is the time
//! it was queued, however long it is then held.
//!
//! On open it continues the hash chain and sequence of the existing file, repairs a line a crash
//! cut short, and closes every call a crash left open (see [`super::recovery`]).

mod handle;
mod pending;

use std::collections::HashSet;
use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, watch};

pub use self::handle::AuditHandle;
use self::handle::{Ack, Job, spawn_ticker};
use self::pending::Pending;
use super::AuditError;
use super::chain::Chain;
use super::files::{FileOp, Faults, LogLock, first_seq, io, last_line_end, open_append, piece_end, rotated_name, sync_dir};
pub use super::health::STALLED_AFTER;
use super::health::Health;
use super::record::{AuditEvent, AuditRecord, AuditStatus};
use super::recovery::{self, Recovery};
use crate::config::{AuditConfig, AuditOnError, Secret};
use crate::tools::ErrorCode;
use crate::telemetry::metrics::Metrics;

/// Jobs taken per fsync at most (a job is one record, or the few of one session turn).
const BATCH: usize = 512;
/// Records held for a retry while the disk refuses them; beyond this, new records are refused
/// (and counted by the caller) rather than exhausting memory.
pub(super) const MAX_BACKLOG: usize = 100_000;

/// A record as the writer holds it: with the time it was made, which its line's `ts` says however
/// long the disk then refuses it. Its line, once made, is in [`Writer::pending`].
struct Held {
    record: AuditRecord,
    made: DateTime<Utc>,
}

/// The running writer task.
pub struct AuditWriter {
    task: tokio::task::JoinHandle<Result<(), AuditError>>,
    mirror: Option<tokio::task::JoinHandle<()>>,
}

impl AuditWriter {
    /// Wait until every handle is dropped and everything queued is on disk.
    pub async fn join(self) -> Result<(), AuditError> {
        let result = self.task.await.map_err(|_| AuditError::Closed)?;
        if let Some(mirror) = self.mirror {
            // The mirror catches up with what is on disk, bounded, then stops.
            let _ = tokio::time::timeout(Duration::from_secs(3), mirror).await;
        }
        result
    }
}

/// What `open` needs besides the audit section.
#[derive(Default)]
pub struct OpenOptions<'a> {
    /// `redis.url`: mirror every line to the audit stream.
    pub redis_url: Option<&'a Secret>,
    /// `server.instance_id`, stamped on every line and naming the default stream.
    pub instance: String,
    /// Asks the tools what became of approved calls a crash interrupted.
    pub recovery: Option<&'a dyn Recovery>,
    /// Where commit times go (`voxgate_audit_commit_seconds`).
    pub metrics: Option<Metrics>,
}

/// Open the log (recovering what a crash left), then start the writer and, with a Redis URL, the
/// stream mirror.
pub async fn open(config: &AuditConfig, options: OpenOptions<'_>) -> Result<(AuditHandle, AuditWriter), AuditError> {
    open_with(config, options, None).await
}

/// [`open`], with a test's [`Faults`] on the file operations.
pub(super) async fn open_with(
    config: &AuditConfig,
    options: OpenOptions<'_>,
    faults: Option<Faults>,
) -> Result<(AuditHandle, AuditWriter), AuditError> {
    let chain = Chain::new(config.chain_key.as_ref());
    let path = config.path.clone();
    let (lock, file, state) = {
        let (path, chain) = (path.clone(), chain.clone());
        tokio::task::spawn_blocking(move || recovery::read(&path, &chain)).await.map_err(|_| AuditError::Closed)??
    };
    let instance = options.instance;
    let (file, state) = recovery::close_open_calls(file, state, &chain, &instance, options.recovery).await?;
    let len = file.metadata().map_err(io)?.len();
    let (tx, rx) = mpsc::unbounded_channel();
    let (flushed_tx, flushed_rx) = watch::channel(state.seq);
    let mirror = options.redis_url.map(|url| {
        let stream = config.redis_stream.clone().unwrap_or_else(|| format!("voxgate:audit:{instance}"));
        let sink = super::mirror::Target { stream, maxlen: config.redis_stream_maxlen, metrics: options.metrics.clone() };
        super::mirror::spawn(url.expose().to_string(), sink, path.clone(), flushed_rx)
    });
    let health = Arc::new(Health::new());
    spawn_ticker(tx.downgrade(), health.clone(), options.metrics.clone());
    let writer = Writer {
        _lock: lock,
        path,
        file,
        len,
        seq: state.seq,
        pending: Pending::new(state.seq, state.prev, 0),
        chain,
        instance,
        rotate_bytes: config.rotate_bytes,
        on_error: config.on_error,
        health: health.clone(),
        backlog: Vec::new(),
        prepared: 0,
        reopen: false,
        open: HashSet::new(),
        checkpoint_records: config.checkpoint_records,
        checkpoint_interval: Duration::from_secs(config.checkpoint_interval_s),
        last_checkpoint: Instant::now(),
        flushed: flushed_tx,
        metrics: options.metrics,
        faults,
    };
    let task = tokio::task::spawn_blocking(move || writer.run(rx));
    Ok((AuditHandle { tx, health, on_error: config.on_error }, AuditWriter { task, mirror }))
}

/// A batch of nothing but `call_started` records releases nothing: the call runs without waiting
/// for it (CONTRACT §5 orders it before execution in the log; only `call_finished` and
/// `call_approved` gate what the call does next). A fast tool's `call_finished` follows within a
/// millisecond, and would otherwise wait for the `call_started` fsync already under way and then
/// for its own. So such a batch waits up to [`GROUP_WINDOW`] for a record someone waits on, and
/// one fsync makes both durable; any other record ends the wait at once.
fn gather_awaited(runtime: &tokio::runtime::Handle, rx: &mut mpsc::UnboundedReceiver<Job>, jobs: &mut Vec<Job>) {
    let deadline = tokio::time::Instant::now() + GROUP_WINDOW;
    while jobs.len() < BATCH && jobs.iter().all(releases_nothing) {
        let room = BATCH - jobs.len();
        match runtime.block_on(tokio::time::timeout_at(deadline, rx.recv_many(jobs, room))) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// How long a batch of `call_started` records waits for a record that gates a call (see
/// [`gather_awaited`]): the most its durability is put off.
const GROUP_WINDOW: Duration = Duration::from_millis(2);

fn releases_nothing(job: &Job) -> bool {
    match job {
        Job::Records(records) => records.iter().all(|(record, _, _)| record.event == AuditEvent::CallStarted),
        Job::Tick => false,
    }
}

struct Writer {
    /// Held until the writer ends (`files::LogLock`).
    _lock: LogLock,
    path: PathBuf,
    file: std::fs::File,
    /// Bytes of the file known durable: everything after this is cut on a failure.
    len: u64,
    /// `seq` of the last durable line.
    seq: u64,
    /// The lines of the held records (and checkpoints among them), made once and written by every
    /// retry; the chain head after them.
    pending: Pending,
    chain: Chain,
    instance: String,
    rotate_bytes: u64,
    on_error: AuditOnError,
    health: Arc<Health>,
    /// Records whose write failed, in order, written before anything newer.
    backlog: Vec<Held>,
    /// How many of `backlog`, from the start, have their line in `pending`.
    prepared: usize,
    /// A rotation renamed the file but could not open the new one: `file` is the rotated file,
    /// which must not take one more line; the next commit opens the new file first.
    reopen: bool,
    /// Calls whose `call_started` is written or held, and not yet their `call_finished`: a record
    /// of any other call would be a finish without a start (see [`Writer::admit`]).
    open: HashSet<(String, String)>,
    checkpoint_records: u64,
    checkpoint_interval: Duration,
    last_checkpoint: Instant,
    flushed: watch::Sender<u64>,
    metrics: Option<Metrics>,
    faults: Option<Faults>,
}

impl Writer {
    /// The writer loop, on a blocking thread: file I/O and fsync never stall the runtime.
    fn run(mut self, mut rx: mpsc::UnboundedReceiver<Job>) -> Result<(), AuditError> {
        let mut jobs = Vec::with_capacity(BATCH);
        let runtime = tokio::runtime::Handle::current();
        while rx.blocking_recv_many(&mut jobs, BATCH) > 0 {
            gather_awaited(&runtime, &mut rx, &mut jobs);
            let mut records = Vec::with_capacity(jobs.len());
            let mut acks = Vec::with_capacity(jobs.len());
            for job in jobs.drain(..) {
                if let Job::Records(batch) = job {
                    for (record, made, ack) in batch {
                        records.push(Held { record: *record, made });
                        acks.push(ack);
                    }
                }
            }
            let (records, acks) = self.admit(records, acks);
            let result = self.commit(records);
            for ack in acks {
                let _ = ack.send(result.clone());
            }
        }
        // Every handle is gone: one last attempt at what the disk refused so far.
        match self.commit(Vec::new()) {
            Ok(()) => Ok(()),
            Err(err) => {
                tracing::error!(records = self.backlog.len(), "audit records could not be written before exit");
                Err(err)
            }
        }
    }

    /// The records that may join the log, and their acknowledgements; the others are refused
    /// here. When the backlog is full, new calls are refused: a `call_started` is. The approval and
    /// the finish of a call already open are still taken, so a held start is never written without
    /// its one finish; they are bounded by the calls in flight. A `call_approved` or
    /// `call_finished` is refused when its call's `call_started` is not in the log or held: that
    /// start was refused (a full backlog), and the finish alone would be a call with no start
    /// (`audit verify` reports it as a break), as would a second `call_started` of one call. The
    /// session treats it as any refused record (`audit.on_error`); the call is missing from the
    /// log, as are all calls while the disk refuses them.
    fn admit(&mut self, records: Vec<Held>, acks: Vec<Ack>) -> (Vec<Held>, Vec<Ack>) {
        let mut held = self.backlog.len();
        let mut full = false;
        let mut admitted = (Vec::with_capacity(records.len()), Vec::with_capacity(acks.len()));
        for (held_record, ack) in records.into_iter().zip(acks) {
            let record = &held_record.record;
            let call = (record.session_id.clone(), record.call_id.clone());
            let fits = match record.event {
                AuditEvent::CallStarted if held >= MAX_BACKLOG => {
                    full = true;
                    false
                }
                // A second start of one call would be a break too.
                AuditEvent::CallStarted => self.open.insert(call),
                AuditEvent::CallApproved => self.open.contains(&call),
                AuditEvent::CallFinished => self.open.remove(&call),
                AuditEvent::Checkpoint => true,
            };
            if fits {
                held += 1;
                admitted.0.push(held_record);
                admitted.1.push(ack);
            } else {
                if record.event != AuditEvent::CallStarted || !full {
                    tracing::error!(event = record.event.as_str(), "audit record of a call whose start was refused: refused too");
                }
                let _ = ack.send(Err(AuditError::Unavailable));
            }
        }
        if full {
            tracing::error!("audit backlog full: new calls refused");
        }
        admitted
    }

    /// Write the held records, then `fresh`, in one fsynced batch. Held records keep the lines
    /// made for them at their first attempt (see [`pending`]): only `fresh` is serialised.
    fn commit(&mut self, fresh: Vec<Held>) -> Result<(), AuditError> {
        // One checkpoint held at a time: an outage holds its lines, and the interval restarts
        // only once they are durable, so every commit after the interval would add another.
        let timed = self.checkpoint_interval > Duration::ZERO
            && self.pending.since > 0
            && !self.pending.checkpointed
            && self.last_checkpoint.elapsed() >= self.checkpoint_interval;
        // Held lines with no record behind them (a checkpoint whose write failed) are retried too.
        if self.backlog.is_empty() && fresh.is_empty() && !timed && self.pending.bytes.is_empty() {
            return Ok(());
        }
        // Read by the handles and the ticker while this thread may be blocked in the disk.
        let health = Arc::clone(&self.health);
        let _running = health.commit_started();
        let fresh_from = self.backlog.len();
        self.backlog.extend(fresh);
        // Where the lines of `fresh` begin, to make them again should their records be rewritten.
        let mut fresh_mark = None;
        let result = self
            .prepare(fresh_from, false)
            .and_then(|()| {
                fresh_mark = Some(self.pending.mark());
                self.prepare(self.backlog.len(), timed)
            })
            .and_then(|()| self.write());
        match result {
            Ok(()) => {
                if !self.health.writable.swap(true, Ordering::Relaxed) {
                    tracing::warn!("audit log writable again; held records written");
                }
                self.backlog.clear();
                self.prepared = 0;
                if let Err(err) = self.rotate_if_due() {
                    tracing::error!(error = %err, "audit log rotation failed");
                }
                Ok(())
            }
            Err(err) => {
                if self.health.writable.swap(false, Ordering::Relaxed) {
                    tracing::error!(error = %err, held = self.backlog.len(), "audit write failed; records held and retried");
                }
                self.rollback();
                if self.on_error == AuditOnError::FailClosed {
                    // The caller withholds these calls' results: the record says so.
                    let mut rewritten = false;
                    for Held { record, .. } in &mut self.backlog[fresh_from..] {
                        if record.event == AuditEvent::CallFinished {
                            record.status = Some(AuditStatus::Failed);
                            record.error_code = Some(ErrorCode::AuditUnavailable);
                            rewritten = true;
                        }
                    }
                    // Their lines say otherwise: this commit's lines are made again, once.
                    if rewritten && let Some(mark) = fresh_mark {
                        self.pending.truncate(mark);
                        self.prepared = fresh_from;
                    }
                }
                Err(AuditError::Unavailable)
            }
        }
    }

    /// Write the held lines ([`Writer::pending`]) and fsync. The durable length and seq move on
    /// only when all of them are on disk; on a failure the lines stay, to be written as they are.
    fn write(&mut self) -> Result<(), AuditError> {
        self.reopen_if_rotated()?;
        // A previous rollback may have failed: never append after a torn tail.
        let found = self.file.metadata().map_err(io)?.len();
        if found > self.len {
            self.file.set_len(self.len).map_err(io)?;
        } else if found < self.len {
            // Cut outside voxgate (a `copytruncate` rotation, a hand edit): those records are gone.
            // Appended after its last whole line, never padded back to the old length with NULs (a
            // line no parser reads, which stopped the next start), nor glued onto a line cut in
            // the middle (one line that does not parse, which the next start would take for an
            // unsynced tail and set aside with every record after it). The chain and the sequence
            // go on from the writer's last record.
            let kept = last_line_end(&self.file, found).map_err(io)?;
            tracing::error!(durable_bytes = self.len, found_bytes = found, kept_bytes = kept, "the audit log was cut outside voxgate: records are lost; appending after its last whole line");
            if kept < found {
                self.file.set_len(kept).map_err(io)?;
            }
            self.len = kept;
        }
        let started = Instant::now();
        // After a failed fsync the kernel may have dropped the pages: nothing of this batch is
        // claimed durable, the caller cuts it off (pieces already synced too) and writes it again.
        // In pieces, each synced before the next is written: a power loss leaves at most one
        // piece unsynced at the end, which recovery can tell from corruption (`files::piece_end`).
        let written = (|| {
            let (file, bytes, faults) = (&mut self.file, &self.pending.bytes, &self.faults);
            let mut from = 0;
            loop {
                faults.as_ref().map_or(Ok(()), |faults| faults(FileOp::Write))?;
                let end = piece_end(bytes, from);
                file.write_all(&bytes[from..end])?;
                file.sync_data()?;
                from = end;
                if from == bytes.len() {
                    return Ok::<(), std::io::Error>(());
                }
            }
        })();
        if let Some(metrics) = &self.metrics {
            metrics.audit_commit(started.elapsed());
        }
        written.map_err(io)?;
        self.len += self.pending.bytes.len() as u64;
        self.seq = self.pending.seq;
        if self.pending.checkpointed {
            self.last_checkpoint = Instant::now();
        }
        self.pending.written();
        let _ = self.flushed.send(self.seq);
        Ok(())
    }

    /// A test's fault for `op` (see [`Faults`]); none in service.
    fn fault(&self, op: FileOp) -> std::io::Result<()> {
        self.faults.as_ref().map_or(Ok(()), |faults| faults(op))
    }

    /// Cut the file back to its last durable length: no torn line, no record written twice.
    fn rollback(&mut self) {
        // Only ever shortened: a file cut shorter by someone else is `write`'s to take as it is.
        let longer = self.file.metadata().is_ok_and(|m| m.len() > self.len);
        let cut = if longer { self.file.set_len(self.len).and_then(|()| self.file.sync_data()) } else { Ok(()) };
        if let Err(err) = cut {
            // Tried again before the next write (see `write`).
            tracing::error!(error.kind = %err.kind(), "audit log could not be cut back yet");
        }
        let _ = self.file.seek(SeekFrom::End(0));
    }

    fn rotate_if_due(&mut self) -> Result<(), AuditError> {
        if self.rotate_bytes == 0 || self.len < self.rotate_bytes {
            return Ok(());
        }
        let first = first_seq(&self.path)?.unwrap_or(self.seq);
        let rotated = rotated_name(&self.path, first, self.seq);
        std::fs::rename(&self.path, &rotated).map_err(io)?;
        // From here `file` is the rotated file, whose name ends at this seq: nothing more goes
        // into it. Should the new file not open (EMFILE), or its directory not sync, records are
        // held until it does.
        self.reopen = true;
        self.reopen_if_rotated()?;
        tracing::info!(last_seq = self.seq, "audit log rotated");
        Ok(())
    }

    /// Open the new file a rotation could not open (see [`Writer::reopen`]).
    fn reopen_if_rotated(&mut self) -> Result<(), AuditError> {
        if !self.reopen {
            return Ok(());
        }
        self.fault(FileOp::Open).map_err(io)?;
        let file = open_append(&self.path)?;
        // The rename and the new name are durable only once the directory is: until then nothing
        // is acknowledged into the new file (`reopen` stays set, the records are held).
        self.fault(FileOp::SyncDir).and_then(|()| sync_dir(&self.path)).map_err(io)?;
        // Whatever is there already is kept, never cut (it is new: the old file was renamed).
        self.len = file.metadata().map_err(io)?.len();
        self.file = file;
        self.reopen = false;
        Ok(())
    }
}
