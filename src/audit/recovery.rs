//! What a crash left behind, made true on the next start: the chain and sequence continue where
//! the durable file ends, a line cut short mid-write is removed (it was never acknowledged), and
//! every call with a start and no finish gets one. A call that was approved and then interrupted
//! may have had its side effect: the tool is asked ([`Recovery`]) and the finish says `completed`
//! when the backend holds the call's result (an idempotent write keyed by the call), `abandoned`
//! otherwise. The tools are asked concurrently under one deadline for all of them (the listener
//! waits for this): a call still unanswered then is `abandoned` too. An interrupted call that was
//! not approved says `confirmation: session_closed` only when its tool asks for confirmation (it
//! may have been parked waiting for the user), `not_required` otherwise.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;

use futures::StreamExt;

use super::AuditError;
use super::chain::Chain;
use super::record::{AuditEvent, AuditRecord, AuditStatus, Confirmation, GENESIS, Line, Origin};
use super::files::{LogLock, UNSYNCED_TAIL_BYTES, io, lock, open_append, set_aside_name, sync_dir};

/// How long start-up waits in all for the tools to say what became of interrupted calls.
const RECOVERY_DEADLINE: Duration = Duration::from_secs(10);
/// Tools asked at once.
const RECOVERY_CONCURRENCY: usize = 8;
/// How often a recovery still waiting on the tools says how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// Where the chain stands.
#[derive(Debug)]
pub(crate) struct ChainState {
    pub seq: u64,
    pub prev: String,
    /// Calls with a start and no finish: (session_id, call_id) → what is known of them.
    pub open: HashMap<(String, String), OpenCall>,
}

impl Default for ChainState {
    fn default() -> Self {
        ChainState {
            seq: 0,
            prev: GENESIS.to_string(),
            open: HashMap::new(),
        }
    }
}

/// A call a crash interrupted.
#[derive(Debug)]
pub struct OpenCall {
    pub start: Line,
    /// The tool may have run: a `call_approved` was written, or it is an admin API call (which
    /// needs no confirmation and runs at once, so its backend is asked too).
    pub approved: bool,
}

/// What the backend says about an interrupted, approved call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovered {
    /// The call's result is in the backend; `resource` names it (an event UID), never content.
    Completed { resource: Option<String> },
    /// The backend does not hold it, or cannot tell.
    Unknown,
}

/// Asks a tool what became of an interrupted call (implemented over the tool registry).
#[async_trait::async_trait]
pub trait Recovery: Send + Sync {
    async fn recover(&self, tool: &str, session_id: &str, call_id: &str) -> Recovered;

    /// Whether `tool` puts its calls to the user before they run; `None` when it cannot tell (a
    /// tool no longer configured). The log does not say whether an interrupted call was parked:
    /// a call of a tool that asks no confirmation never was, so its finish says `not_required`,
    /// not `session_closed`.
    fn requires_confirmation(&self, _tool: &str) -> Option<bool> {
        None
    }
}

/// Keep what is known of calls that have not finished.
pub(super) fn track_open(open: &mut HashMap<(String, String), OpenCall>, line: Line) {
    let key = (line.session_id.clone(), line.call_id.clone());
    match line.event {
        AuditEvent::CallStarted => {
            let approved = line.admin;
            open.insert(key, OpenCall { start: line, approved });
        }
        AuditEvent::CallApproved => {
            if let Some(call) = open.get_mut(&key) {
                call.approved = true;
            }
        }
        AuditEvent::CallFinished => {
            open.remove(&key);
        }
        AuditEvent::Checkpoint => {}
    }
}

/// The chain state at the end of the newest rotated predecessor of `path`, if any.
fn rotated_predecessor_state(path: &Path, chain: &Chain) -> Result<ChainState, AuditError> {
    let mut state = ChainState::default();
    for file in super::verify::rotated_files(path)? {
        let text = std::fs::read(&file).map_err(io)?;
        for raw in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let line: Line = serde_json::from_slice(raw).map_err(|_| AuditError::Corrupt {
                line: state.seq + 1,
            })?;
            state.seq = line.seq;
            state.prev = chain.link(raw);
            track_open(&mut state.open, line);
        }
    }
    Ok(state)
}

/// Move the log's bytes from `from` on into `<path>.torn-<seq>-<unix ms>`, made durable, before
/// the caller cuts them off. Called for a line that does not parse within
/// [`UNSYNCED_TAIL_BYTES`] of the end; one further back is corruption of acknowledged records,
/// and the start fails on it.
///
/// A power loss during a group commit can leave its bytes on the disk in part and out of order
/// (the file's new length committed before all its pages): a run of NULs or stale bytes followed
/// by the rest of a line and its newline, which no parser reads. Those bytes were never synced
/// (no `fdatasync` returned for them; the writer syncs every `COMMIT_PIECE_BYTES`), so cutting
/// them is as safe as cutting a torn last line; the start used to fail on them until someone
/// edited the log by hand. They are kept beside the log for whoever investigates, never deleted.
fn set_aside(path: &Path, file: &std::fs::File, from: u64, seq: u64) -> Result<(), AuditError> {
    let mut tail = Vec::new();
    let mut reader = file;
    reader.seek(SeekFrom::Start(from)).map_err(io)?;
    std::io::Read::read_to_end(&mut reader, &mut tail).map_err(io)?;
    let aside = set_aside_name(path, seq, chrono::Utc::now().timestamp_millis());
    let mut out = std::fs::OpenOptions::new().write(true).create_new(true).open(&aside).map_err(io)?;
    out.write_all(&tail).and_then(|()| out.sync_all()).map_err(io)?;
    sync_dir(&aside).map_err(io)?;
    tracing::error!(
        from_seq = seq,
        bytes = tail.len(),
        kept_in = %aside.display(),
        "audit log ends with lines that do not parse, from this seq on: cut off and kept aside. \
         After a power loss during a write they were never synced; otherwise (damage, an edit) they \
         may hold acknowledged records: inspect the file (`voxgate audit verify` reports it until it is moved away)"
    );
    Ok(())
}

/// Take the log's lock, read the existing log: continue its chain and cut a torn last line.
pub(super) fn read(path: &Path, chain: &Chain) -> Result<(LogLock, std::fs::File, ChainState), AuditError> {
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty())
        && !dir.is_dir()
    {
        std::fs::create_dir_all(dir).map_err(io)?;
        sync_dir(dir).map_err(io)?;
    }
    // Before anything is read or cut: the file may be another process's.
    let lock = lock(path)?;
    let mut file = open_append(path)?;
    // A file just created (a fresh volume, or a crash between a rotation's rename and the new
    // file's open) keeps its name through a power loss only once its directory is synced.
    sync_dir(path).map_err(io)?;
    let mut state = rotated_predecessor_state(path, chain)?;
    let mut good_len = 0u64;
    let mut set_aside_done = false;
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
                state.prev = chain.link(body);
                track_open(&mut state.open, line);
                good_len += read as u64;
            }
            // A torn last line: the crash happened mid-write; that record was never acknowledged.
            _ if !complete => break,
            _ => {
                let size = file.metadata().map_err(io)?.len();
                if size - good_len > UNSYNCED_TAIL_BYTES {
                    return Err(AuditError::Corrupt {
                        line: state.seq + 1,
                    });
                }
                set_aside(path, &file, good_len, state.seq + 1)?;
                set_aside_done = true;
                break;
            }
        }
    }
    drop(reader);
    if file.metadata().map_err(io)?.len() != good_len {
        if !set_aside_done {
            tracing::warn!("audit log ended with a partial line (crash mid-write); it was cut off");
        }
        file.set_len(good_len).map_err(io)?;
        file.sync_data().map_err(io)?;
        file.seek(SeekFrom::End(0)).map_err(io)?;
    }
    Ok((lock, file, state))
}

/// What the tools say about the approved calls among `open` (in its order; `Unknown` for the
/// others). The listener binds only after recovery, so the tools are asked concurrently, at most
/// [`RECOVERY_CONCURRENCY`] at once, and for at most `deadline` in all: a hanging backend must not
/// hold the start for a tool timeout per call (and past the startup probe, into a restart loop).
/// A call still unanswered at the deadline is `Unknown`, like one whose tool cannot tell.
async fn ask(recovery: &dyn Recovery, open: &[OpenCall], deadline: Duration) -> Vec<Recovered> {
    let mut found = vec![Recovered::Unknown; open.len()];
    let approved: Vec<(usize, &Line)> =
        open.iter().enumerate().filter(|(_, call)| call.approved).map(|(i, call)| (i, &call.start)).collect();
    if approved.is_empty() {
        return found;
    }
    let total = approved.len();
    tracing::info!(calls = total, deadline_s = deadline.as_secs(), "audit: asking the tools what became of approved calls a crash interrupted");
    let mut answers = futures::stream::iter(approved)
        .map(|(i, start)| async move { (i, recovery.recover(&start.tool, &start.session_id, &start.call_id).await) })
        .buffer_unordered(RECOVERY_CONCURRENCY);
    let end = tokio::time::sleep(deadline);
    tokio::pin!(end);
    let mut progress = tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    let mut answered = 0usize;
    loop {
        tokio::select! {
            next = answers.next() => {
                let Some((i, answer)) = next else { break };
                found[i] = answer;
                answered += 1;
            }
            _ = &mut end => {
                tracing::warn!(
                    answered, unknown = total - answered, deadline_s = deadline.as_secs(),
                    "audit: the tools did not answer for every interrupted call in time; those calls are recorded as abandoned"
                );
                break;
            }
            _ = progress.tick() => tracing::info!(answered, calls = total, "audit: still asking the tools about interrupted calls"),
        }
    }
    found
}

/// Append a finish for every call the crash left open: `completed` when an approved call's
/// result is found in its backend within [`RECOVERY_DEADLINE`], `abandoned` otherwise.
pub(super) async fn close_open_calls(
    file: std::fs::File,
    state: ChainState,
    chain: &Chain,
    instance: &str,
    recovery: Option<&dyn Recovery>,
) -> Result<(std::fs::File, ChainState), AuditError> {
    close_open_calls_within(file, state, chain, instance, recovery, RECOVERY_DEADLINE).await
}

/// [`close_open_calls`], asking the tools for at most `deadline` in all.
async fn close_open_calls_within(
    mut file: std::fs::File,
    mut state: ChainState,
    chain: &Chain,
    instance: &str,
    recovery: Option<&dyn Recovery>,
    deadline: Duration,
) -> Result<(std::fs::File, ChainState), AuditError> {
    if state.open.is_empty() {
        return Ok((file, state));
    }
    let mut open: Vec<OpenCall> = state.open.drain().map(|(_, call)| call).collect();
    open.sort_by_key(|c| c.start.seq);
    let answers = match recovery {
        Some(recovery) => ask(recovery, &open, deadline).await,
        None => vec![Recovered::Unknown; open.len()],
    };
    let mut buffer = Vec::new();
    let mut completed = 0usize;
    for (call, found) in open.iter().zip(answers) {
        let start = &call.start;
        let (status, resource) = match found {
            Recovered::Completed { resource } => {
                completed += 1;
                (AuditStatus::Completed, resource)
            }
            Recovered::Unknown => (AuditStatus::Abandoned, None),
        };
        let record = AuditRecord {
            event: AuditEvent::CallFinished,
            session_id: start.session_id.clone(),
            call_id: start.call_id.clone(),
            tool: start.tool.clone(),
            user: start.user.clone(),
            roles: start.roles.clone(),
            status: Some(status),
            error_code: None,
            confirmation: Some(if start.admin {
                Confirmation::NotRequired
            } else if call.approved {
                Confirmation::Approved
            } else if recovery.and_then(|r| r.requires_confirmation(&start.tool)) == Some(false) {
                Confirmation::NotRequired
            } else {
                // It was, or may have been, parked waiting for the user.
                Confirmation::SessionClosed
            }),
            duration_ms: None,
            phi: start.phi,
            args_sha256: start.args_sha256.clone(),
            arguments: None,
            origin: std::sync::Arc::new(Origin {
                client_addr: start.client_addr.clone(),
                user_agent: start.user_agent.clone(),
                admin: start.admin,
            }),
            resource,
        };
        state.seq += 1;
        let line = serde_json::to_vec(&Line::new(record, state.seq, instance, state.prev.clone()))
            .map_err(|_| AuditError::Io("serialising a record".into()))?;
        state.prev = chain.link(&line);
        buffer.extend_from_slice(&line);
        buffer.push(b'\n');
    }
    file.write_all(&buffer).map_err(io)?;
    file.sync_data().map_err(io)?;
    tracing::warn!(
        calls = open.len(),
        completed,
        "audit: calls left open by a crash were closed (completed when their backend holds the result, else abandoned)"
    );
    Ok((file, state))
}

#[cfg(test)]
#[path = "recovery_tests.rs"]
mod tests;
