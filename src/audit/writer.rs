//! The single audit writer task. Sessions queue records through an [`AuditHandle`]; the writer
//! takes everything queued (group commit), writes the lines, fsyncs once, and only then
//! acknowledges each record — the caller releases a tool's result on that acknowledgement.
//!
//! On open it continues the hash chain and sequence of the existing file, repairs a line a crash
//! cut short, and appends an `abandoned` finish for every call a crash left open.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use tokio::sync::{mpsc, oneshot, watch};

use super::AuditError;
use super::record::{AuditEvent, AuditRecord, AuditStatus, Confirmation, GENESIS, Line, line_hash};
use crate::config::AuditConfig;

/// Records queued before `record()` callers wait.
const QUEUE: usize = 4096;
/// Records written per fsync at most.
const BATCH: usize = 512;

type Job = (AuditRecord, oneshot::Sender<Result<(), AuditError>>);

/// Queues records for the writer. Cheap to clone; the writer ends when every clone is dropped.
#[derive(Clone)]
pub struct AuditHandle {
    tx: mpsc::Sender<Job>,
}

impl AuditHandle {
    /// Queue a record. The record takes its place in the log at once (records keep the order of
    /// `record()` calls); the returned future resolves when it is written and fsynced.
    pub fn record(&self, record: AuditRecord) -> impl Future<Output = Result<(), AuditError>> + Send + 'static {
        let (ack_tx, ack_rx) = oneshot::channel();
        let pending = match self.tx.try_send((record, ack_tx)) {
            Ok(()) => Ok(None),
            Err(mpsc::error::TrySendError::Full(job)) => Ok(Some(job)),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(AuditError::Closed),
        };
        let tx = self.tx.clone();
        async move {
            if let Some(job) = pending? {
                // A full queue is backpressure; the channel's fair semaphore keeps the order.
                tx.send(job).await.map_err(|_| AuditError::Closed)?;
            }
            ack_rx.await.map_err(|_| AuditError::Closed)?
        }
    }
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
            let _ = tokio::time::timeout(std::time::Duration::from_secs(3), mirror).await;
        }
        result
    }
}

/// Where the chain stands.
#[derive(Debug)]
pub(super) struct ChainState {
    pub seq: u64,
    pub prev: String,
    /// Calls with a start and no finish: (session_id, call_id) → the start line's fields.
    pub open: HashMap<(String, String), Line>,
}

/// Open the log (recovering what a crash left), then start the writer and, with a Redis URL, the
/// stream mirror.
pub async fn open(
    config: &AuditConfig,
    redis_url: Option<&crate::config::Secret>,
) -> Result<(AuditHandle, AuditWriter), AuditError> {
    let path = config.path.clone();
    let rotate_bytes = config.rotate_bytes;
    let (file, state) = tokio::task::spawn_blocking(move || recover(&path).map(|(f, s)| (f, s, path)))
        .await
        .map_err(|_| AuditError::Closed)?
        .map(|(file, state, path)| ((file, path), state))?;
    let (file, path) = file;
    let (tx, rx) = mpsc::channel(QUEUE);
    let (flushed_tx, flushed_rx) = watch::channel(state.seq);
    let mirror = redis_url.map(|url| super::mirror::spawn(url.expose().to_string(), path.clone(), flushed_rx));
    let writer = Writer { path, file, seq: state.seq, prev: state.prev, rotate_bytes, flushed: flushed_tx };
    let task = tokio::task::spawn_blocking(move || writer.run(rx));
    Ok((AuditHandle { tx }, AuditWriter { task, mirror }))
}

struct Writer {
    path: PathBuf,
    file: std::fs::File,
    seq: u64,
    prev: String,
    rotate_bytes: u64,
    flushed: watch::Sender<u64>,
}

impl Writer {
    /// The writer loop, on a blocking thread: file I/O and fsync never stall the runtime.
    fn run(mut self, mut rx: mpsc::Receiver<Job>) -> Result<(), AuditError> {
        let mut batch = Vec::with_capacity(BATCH);
        while rx.blocking_recv_many(&mut batch, BATCH) > 0 {
            let result = self.write_batch(batch.iter().map(|(record, _)| record.clone()).collect());
            let shared = result.as_ref().map(|_| ()).map_err(|e| e.clone());
            for (_, ack) in batch.drain(..) {
                let _ = ack.send(shared.clone());
            }
            if let Err(err) = result {
                tracing::error!(error = %err, "audit write failed");
            }
        }
        Ok(())
    }

    fn write_batch(&mut self, records: Vec<AuditRecord>) -> Result<(), AuditError> {
        let mut buffer = Vec::with_capacity(records.len() * 512);
        let (mut seq, mut prev) = (self.seq, self.prev.clone());
        for record in records {
            seq += 1;
            let line = serde_json::to_vec(&Line::new(record, seq, prev)).map_err(|e| AuditError::Io(e.to_string()))?;
            prev = line_hash(&line);
            buffer.extend_from_slice(&line);
            buffer.push(b'\n');
        }
        self.file.write_all(&buffer).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        // Only a flushed batch moves the chain on: a failed write is not half-counted.
        self.seq = seq;
        self.prev = prev;
        let _ = self.flushed.send(seq);
        self.rotate_if_due()
    }

    fn rotate_if_due(&mut self) -> Result<(), AuditError> {
        if self.rotate_bytes == 0 || self.file.metadata().map_err(io)?.len() < self.rotate_bytes {
            return Ok(());
        }
        let first = first_seq(&self.path)?.unwrap_or(self.seq);
        let rotated = rotated_name(&self.path, first, self.seq);
        std::fs::rename(&self.path, &rotated).map_err(io)?;
        self.file = open_append(&self.path)?;
        sync_dir(&self.path);
        tracing::info!(last_seq = self.seq, "audit log rotated");
        Ok(())
    }
}

/// `<path>.<first seq>-<last seq>`: sorts by sequence, and `verify` finds the predecessors by it.
pub fn rotated_name(path: &Path, first: u64, last: u64) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".{first:012}-{last:012}"));
    PathBuf::from(name)
}

fn io(err: std::io::Error) -> AuditError {
    AuditError::Io(err.kind().to_string())
}

fn open_append(path: &Path) -> Result<std::fs::File, AuditError> {
    std::fs::OpenOptions::new().create(true).append(true).read(true).open(path).map_err(io)
}

fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if let Ok(dir) = std::fs::File::open(dir) {
            let _ = dir.sync_all();
        }
    }
}

fn first_seq(path: &Path) -> Result<Option<u64>, AuditError> {
    let file = std::fs::File::open(path).map_err(io)?;
    let mut first = String::new();
    BufReader::new(file).read_line(&mut first).map_err(io)?;
    Ok(serde_json::from_str::<Line>(first.trim_end()).ok().map(|l| l.seq))
}

/// Read the existing log: continue its chain, cut a torn last line, and close open calls.
fn recover(path: &Path) -> Result<(std::fs::File, ChainState), AuditError> {
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut file = open_append(path)?;
    let mut state = super::rotated_predecessor_state(path)?;
    let mut good_len = 0u64;
    let mut reader = BufReader::new(&file);
    let mut raw = Vec::new();
    loop {
        raw.clear();
        let read = reader.read_until(b'\n', &mut raw).map_err(io)?;
        if read == 0 {
            break;
        }
        let complete = raw.ends_with(b"\n");
        let body = raw.strip_suffix(b"\n").unwrap_or(&raw);
        match serde_json::from_slice::<Line>(body) {
            Ok(line) if complete => {
                state.seq = line.seq;
                state.prev = line_hash(body);
                track_open(&mut state.open, line);
                good_len += read as u64;
            }
            // A torn last line: the crash happened mid-write; that record was never acknowledged.
            _ if !complete => break,
            _ => return Err(AuditError::Corrupt { line: state.seq + 1 }),
        }
    }
    drop(reader);
    if file.metadata().map_err(io)?.len() != good_len {
        tracing::warn!("audit log ended with a partial line (crash mid-write); it was cut off");
        file.set_len(good_len).map_err(io)?;
        file.seek(SeekFrom::End(0)).map_err(io)?;
    }
    if !state.open.is_empty() {
        let mut open: Vec<Line> = state.open.drain().map(|(_, line)| line).collect();
        open.sort_by_key(|l| l.seq);
        let mut buffer = Vec::new();
        for start in &open {
            let record = AuditRecord {
                event: AuditEvent::CallFinished,
                session_id: start.session_id.clone(),
                call_id: start.call_id.clone(),
                tool: start.tool.clone(),
                user: start.user.clone(),
                roles: start.roles.clone(),
                status: Some(AuditStatus::Abandoned),
                error_code: None,
                confirmation: Some(Confirmation::SessionClosed),
                duration_ms: None,
                phi: start.phi,
                args_sha256: start.args_sha256.clone(),
                arguments: None,
            };
            state.seq += 1;
            let line = serde_json::to_vec(&Line::new(record, state.seq, state.prev.clone()))
                .map_err(|e| AuditError::Io(e.to_string()))?;
            state.prev = line_hash(&line);
            buffer.extend_from_slice(&line);
            buffer.push(b'\n');
        }
        file.write_all(&buffer).map_err(io)?;
        file.sync_data().map_err(io)?;
        tracing::warn!(calls = open.len(), "audit: calls left open by a crash were recorded as abandoned");
    }
    Ok((file, state))
}

/// Keep the start lines of calls that have not finished.
pub(super) fn track_open(open: &mut HashMap<(String, String), Line>, line: Line) {
    let key = (line.session_id.clone(), line.call_id.clone());
    match line.event {
        AuditEvent::CallStarted => {
            open.insert(key, line);
        }
        AuditEvent::CallFinished => {
            open.remove(&key);
        }
    }
}

/// An empty chain.
pub(super) fn genesis() -> ChainState {
    ChainState { seq: 0, prev: GENESIS.to_string(), open: HashMap::new() }
}
