//! Mirrors flushed audit lines to a Redis stream (`audit.redis_stream`, by default
//! `voxgate:audit:{instance_id}`: one stream per instance, so ids never collide). Each line is
//! added with its own deterministic id (`<seq>-1`), so a retry can never add it twice: Redis
//! refuses an id not above the stream's top with one exact error, and only that error counts as
//! "already mirrored". Nothing in a session waits on this: when Redis is down the mirror retries
//! with back-off and, once it is back, catches up from the file — the source of truth — reading
//! on from the byte offset it reached instead of the whole log.
//!
//! A stream holds one epoch of the log, one unbroken sequence. A stream whose top is above the
//! log's last durable line, or whose top line is not the log's line of that number, holds another
//! epoch: a new file after enabling `chain_key`, a restore from backup, a recreated volume, rotated
//! files moved away before a restart. Its lines are never taken for this log's (every new line up
//! to the old top would be skipped as "already mirrored"), and never deleted or trimmed (they may
//! be the only copy off the host of lines the file no longer has). The mirror logs an error and
//! sends this epoch to the next key instead, `<stream>:epoch2`, `:epoch3`…: the first that is
//! empty or whose top line is this log's, so a restart finds the same one again.
//!
//! The stream is capped (`audit.redis_stream_maxlen`, trimmed with `MAXLEN ~`): the Redis that
//! holds it also holds tickets and rate limits, and a stream that grew until Redis reached its
//! memory limit would make every ticket refused. Readers of the stream have that many lines of
//! slack; the file keeps them all. A catch-up therefore starts at most that many lines below the
//! last durable one (older lines would be trimmed at once), skips rotated files by the sequence
//! range in their names, and reads a bounded batch of lines at a time: its memory does not grow
//! with the log, even after Redis comes back empty.

use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;

use super::record::record_id;

const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// The error Redis gives an XADD whose id is not above the stream's top: the line is there.
const ALREADY_ADDED: &str = "The ID specified in XADD is equal or smaller than the target stream top item";
/// Lines read from the log and sent per batch, at most: what a catch-up holds at once.
const BATCH_LINES: usize = 256;
/// Bytes of lines per batch, at most (lines are well under 1 KiB; this bounds odd ones).
const BATCH_BYTES: usize = 1 << 20;
/// Stream keys tried for this log's epoch (one `XREVRANGE` each) before giving up.
const MAX_EPOCHS: u32 = 64;

/// How far the stream has caught up.
#[derive(Default)]
struct Position {
    /// The stream this log's epoch goes to, found at each connect.
    stream: Option<String>,
    /// The last sequence number known to be in the stream (`None` until asked).
    seq: Option<u64>,
    /// Where reading stopped, just after line `reached`: kept across a reconnect, so that a
    /// stream found where it was is read on from there, not searched for again.
    cursor: Option<Cursor>,
    reached: Option<u64>,
    /// Streams found holding another epoch of the log, in this process.
    foreign: u64,
}

/// A place in one file of the log: the byte offset just after the last line read from it.
#[derive(Debug, Clone, PartialEq)]
struct Cursor {
    file: PathBuf,
    offset: u64,
}

/// The one field of a line that reading needs: skipping a line allocates nothing.
#[derive(serde::Deserialize)]
struct Seq {
    seq: u64,
}

/// Where the mirror writes: the stream's name and the length it is trimmed to (0 = untrimmed).
pub(super) struct Target {
    pub(super) stream: String,
    pub(super) maxlen: u64,
    /// Counts the streams found holding another epoch (`voxgate_audit_stream_epochs_total`).
    pub(super) metrics: Option<crate::telemetry::metrics::Metrics>,
}

pub(super) fn spawn(
    url: String,
    sink: Target,
    path: PathBuf,
    mut flushed: watch::Receiver<u64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut at = Position::default();
        let mut backoff = Duration::from_millis(200);
        let mut conn: Option<redis::aio::MultiplexedConnection> = None;
        let mut down = false;
        loop {
            let target = *flushed.borrow_and_update();
            if at.seq.is_none_or(|m| m < target) {
                match catch_up(&url, &sink, &path, &mut conn, &mut at, target).await {
                    Ok(()) => {
                        if down {
                            tracing::info!("audit mirror: Redis is back; the stream has caught up");
                            down = false;
                        }
                        backoff = Duration::from_millis(200);
                    }
                    Err(err) => {
                        conn = None;
                        if !down {
                            tracing::warn!(error.kind = ?err.kind(), "audit mirror: Redis unavailable; records stay in the file and will be re-sent");
                            down = true;
                        }
                        // The whole back-off, even as new lines are flushed: each attempt
                        // reconnects and may re-read the log, so a busy instance must not retry
                        // once per flush. Lines flushed meanwhile are in the next attempt. Only
                        // the writer's end cuts it short (shutdown must not wait on Redis).
                        let pause = tokio::time::sleep(backoff);
                        tokio::pin!(pause);
                        loop {
                            tokio::select! {
                                _ = &mut pause => break,
                                changed = flushed.changed() => if changed.is_err() { return },
                            }
                        }
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        continue;
                    }
                }
            }
            if flushed.changed().await.is_err() {
                // The writer is gone: one last catch-up of what is on disk, then stop.
                let target = *flushed.borrow();
                let _ = catch_up(&url, &sink, &path, &mut conn, &mut at, target).await;
                return;
            }
        }
    })
}

async fn catch_up(
    url: &str,
    sink: &Target,
    path: &Path,
    conn: &mut Option<redis::aio::MultiplexedConnection>,
    at: &mut Position,
    target: u64,
) -> redis::RedisResult<()> {
    if conn.is_none() {
        let client = redis::Client::open(url)?;
        let connecting = client.get_multiplexed_async_connection();
        *conn = Some(
            tokio::time::timeout(Duration::from_secs(3), connecting)
                .await
                .map_err(|_| redis::RedisError::from((redis::ErrorKind::Io, "connect timed out")))??,
        );
        // Where the stream stands (it may be empty after a Redis restart without persistence):
        // asked again below, and the place reached is kept only if the stream is where it was.
        at.seq = None;
    }
    let Some(c) = conn.as_mut() else { return Ok(()) };
    if at.seq.is_none() {
        let (stream, top) = find_stream(c, sink, path, at, target).await?;
        if at.stream.as_deref() != Some(stream.as_str()) || at.reached != Some(top) {
            at.cursor = None;
        }
        at.stream = Some(stream);
        at.seq = Some(top);
    }
    let (Some(stream), Some(from)) = (at.stream.clone(), at.seq) else { return Ok(()) };
    // Lines more than `maxlen` below the last durable one would be trimmed as soon as added.
    let mut after = if sink.maxlen > 0 { from.max(target.saturating_sub(sink.maxlen)) } else { from };
    let mut cursor = at.cursor.clone().filter(|_| at.reached == Some(after));
    while after < target {
        // Off the runtime's threads: after a long outage this reads a whole file.
        let (file, hint) = (path.to_path_buf(), cursor.take());
        let (lines, next) = tokio::task::spawn_blocking(move || next_batch(&file, after, target, hint))
            .await
            .map_err(|_| redis::RedisError::from((redis::ErrorKind::Io, "reading the audit log failed")))?;
        let Some(&(last, _)) = lines.last() else {
            // Nothing more on disk up to `target`: the next flush tries again.
            at.cursor = next;
            at.reached = Some(after);
            break;
        };
        for (seq, line) in lines {
            let mut xadd = redis::cmd("XADD");
            xadd.arg(&stream);
            if sink.maxlen > 0 {
                xadd.arg("MAXLEN").arg("~").arg(sink.maxlen);
            }
            let added: redis::RedisResult<String> = xadd.arg(record_id(seq)).arg("record").arg(&line).query_async(c).await;
            match added {
                Ok(_) => {}
                Err(err) if is_already_added(&err) => {}
                Err(err) => return Err(err),
            }
            at.seq = Some(seq);
        }
        after = last;
        cursor = next.clone();
        at.cursor = next;
        at.reached = Some(last);
    }
    Ok(())
}

/// `<stream>` for the first epoch, `<stream>:epoch<n>` after it.
fn epoch_stream(base: &str, epoch: u32) -> String {
    if epoch <= 1 { base.to_string() } else { format!("{base}:epoch{epoch}") }
}

/// The stream this log's epoch goes to, and its top sequence number (0 when empty): the first of
/// `<stream>`, `<stream>:epoch2`, … that is empty or whose top line is this log's line of that
/// number. A top above `target` (the last durable line) or a different line is another epoch's.
async fn find_stream(
    c: &mut redis::aio::MultiplexedConnection,
    sink: &Target,
    path: &Path,
    at: &mut Position,
    target: u64,
) -> redis::RedisResult<(String, u64)> {
    // The first stream found holding another epoch, and its top.
    let mut foreign: Option<(String, u64)> = None;
    for epoch in 1..=MAX_EPOCHS {
        let stream = epoch_stream(&sink.stream, epoch);
        let top: Vec<(String, Vec<(String, String)>)> =
            redis::cmd("XREVRANGE").arg(&stream).arg("+").arg("-").arg("COUNT").arg(1).query_async(c).await?;
        let (seq, ours) = match top.into_iter().next() {
            None => (0, true),
            Some((id, fields)) => {
                let seq = id.split('-').next().and_then(|s| s.parse::<u64>().ok()).unwrap_or(u64::MAX);
                let mirrored = fields.into_iter().find(|(field, _)| field == "record").map(|(_, line)| line);
                let ours = if seq > target {
                    false
                } else if at.stream.as_deref() == Some(stream.as_str()) && at.reached == Some(seq) {
                    // Where this process left it.
                    true
                } else {
                    let file = path.to_path_buf();
                    let line = tokio::task::spawn_blocking(move || line_at(&file, seq))
                        .await
                        .map_err(|_| redis::RedisError::from((redis::ErrorKind::Io, "reading the audit log failed")))?;
                    // A line no longer on this host (rotated files moved away) cannot be told
                    // apart: the stream is taken as this log's, as it always was.
                    line.is_none_or(|line| Some(line) == mirrored)
                };
                (seq, ours)
            }
        };
        if ours {
            // Once per change of stream, not at every reconnect to the same one.
            if let Some((other, other_top)) = foreign
                && at.stream.as_deref() != Some(stream.as_str())
            {
                at.foreign += 1;
                if let Some(metrics) = &sink.metrics {
                    metrics.audit_stream_epoch();
                }
                tracing::error!(
                    stream = %other, stream_top = other_top, log_seq = target, mirror_to = %stream, times = at.foreign,
                    "audit mirror: the stream holds another epoch of the log (its top is above this log's sequence, or a different line); it is left as it is and this log is mirrored to a new stream"
                );
            }
            return Ok((stream, seq));
        }
        foreign.get_or_insert((stream, seq));
    }
    tracing::error!(log_seq = target, "audit mirror: every stream key for this log holds another epoch; nothing is mirrored");
    Err(redis::RedisError::from((redis::ErrorKind::Client, "no stream key left for this log's epoch")))
}

fn is_already_added(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError)
        && err.detail().is_some_and(|detail| detail.contains(ALREADY_ADDED))
}

/// The log's files in order, rotated ones with the sequence range their name gives
/// (`<path>.<first>-<last>`), the current one last with none.
fn log_files(path: &Path) -> Vec<(PathBuf, Option<(u64, u64)>)> {
    let range = |file: &Path| {
        let (_, range) = file.file_name()?.to_str()?.rsplit_once('.')?;
        let (first, last) = range.split_once('-')?;
        Some((first.parse().ok()?, last.parse().ok()?))
    };
    let mut files: Vec<_> = super::verify::rotated_files(path)
        .unwrap_or_default()
        .into_iter()
        .map(|file| {
            let seqs = range(&file);
            (file, seqs)
        })
        .collect();
    files.push((path.to_path_buf(), None));
    files
}

/// The log's line numbered `seq`, looked for only in the files whose range holds it.
fn line_at(path: &Path, seq: u64) -> Option<String> {
    for (file, range) in log_files(path) {
        if range.is_some_and(|(first, last)| seq < first || seq > last) {
            continue;
        }
        if let Some((lines, _)) = read_lines(&file, 0, seq.saturating_sub(1), seq, 1)
            && let Some((found, line)) = lines.into_iter().next()
            && found == seq
        {
            return Some(line);
        }
    }
    None
}

/// The next batch of lines above `after` and up to `upto` (the last durable one: lines past it may
/// still be cut back), and the place after the last of them. Rotated files wholly at or below
/// `after` are skipped by name; `hint` (where the last batch stopped) is read on from when its
/// first line continues the sequence, else its file is read from the start.
fn next_batch(path: &Path, after: u64, upto: u64, hint: Option<Cursor>) -> (Vec<(u64, String)>, Option<Cursor>) {
    for (file, range) in log_files(path) {
        if range.is_some_and(|(_, last)| last <= after) {
            continue;
        }
        let start = hint.as_ref().filter(|hint| hint.file == file).map_or(0, |hint| hint.offset);
        let mut read = read_lines(&file, start, after, upto, BATCH_LINES);
        let continues = |read: &Option<(Vec<(u64, String)>, u64)>| {
            read.as_ref().is_some_and(|(lines, _)| lines.first().is_none_or(|(seq, _)| *seq == after + 1))
        };
        if start > 0 && !continues(&read) {
            // Not the file the offset was in (it was rotated meanwhile).
            read = read_lines(&file, 0, after, upto, BATCH_LINES);
        }
        let Some((lines, end)) = read else { continue };
        if !lines.is_empty() || range.is_none() {
            return (lines, Some(Cursor { file, offset: end }));
        }
    }
    (Vec::new(), None)
}

/// Up to `max` complete lines of `file` from byte `offset` with a sequence number above `after`
/// and up to `upto`, read one at a time, and the offset just after the last line read. `None`
/// when the file is gone or shorter than `offset`.
fn read_lines(file: &Path, offset: u64, after: u64, upto: u64, max: usize) -> Option<(Vec<(u64, String)>, u64)> {
    let mut handle = std::fs::File::open(file).ok()?;
    if handle.metadata().ok()?.len() < offset {
        return None;
    }
    handle.seek(SeekFrom::Start(offset)).ok()?;
    let mut reader = BufReader::new(handle);
    let (mut out, mut bytes, mut end) = (Vec::new(), 0usize, offset);
    let mut raw = Vec::new();
    while out.len() < max && bytes < BATCH_BYTES {
        raw.clear();
        // A line without its newline is still being written (or was cut short by a crash).
        let Ok(read) = reader.read_until(b'\n', &mut raw) else { break };
        let Some(body) = raw.strip_suffix(b"\n") else { break };
        if let Ok(line) = serde_json::from_slice::<Seq>(body) {
            if line.seq > upto {
                break;
            }
            if line.seq > after {
                out.push((line.seq, String::from_utf8_lossy(body).into_owned()));
                bytes += body.len();
            }
        }
        end += read as u64;
    }
    Some((out, end))
}

#[cfg(test)]
#[path = "mirror_tests.rs"]
mod tests;
