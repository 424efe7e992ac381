//! Mirrors flushed audit lines to a Redis stream (`audit.redis_stream`, by default
//! `voxgate:audit:{instance_id}`: one stream per instance, so ids never collide). Each line is
//! added with its own deterministic id (`<seq>-1`), so a retry can never add it twice: Redis
//! refuses an id not above the stream's top with one exact error, and only that error counts as
//! "already mirrored". Nothing in a session waits on this: when Redis is down the mirror retries
//! with back-off and, once it is back, catches up from the file — the source of truth — reading
//! on from the byte offset it reached instead of the whole log.
//!
//! The stream is capped (`audit.redis_stream_maxlen`, trimmed with `MAXLEN ~`): the Redis that
//! holds it also holds tickets and rate limits, and a stream that grew until Redis reached its
//! memory limit would make every ticket refused. Readers of the stream have that many lines of
//! slack; the file keeps them all.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;

use super::record::{Line, record_id};

const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// The error Redis gives an XADD whose id is not above the stream's top: the line is there.
const ALREADY_ADDED: &str = "The ID specified in XADD is equal or smaller than the target stream top item";

/// How far the stream has caught up.
#[derive(Default)]
struct Position {
    /// The last sequence number known to be in the stream (`None` until asked).
    seq: Option<u64>,
    /// Byte offset in the current file just after that line, when known.
    offset: Option<u64>,
    /// The sequence number `offset` is just after: kept across a reconnect, so that a stream
    /// found where it was is read on from there, not from the start of every file.
    reached: Option<u64>,
}

/// Where the mirror writes: the stream's name and the length it is trimmed to (0 = untrimmed).
pub(super) struct Target {
    pub(super) stream: String,
    pub(super) maxlen: u64,
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
    stream: &Target,
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
        // asked again below, and the offset reached is kept only if the stream is where it was.
        at.seq = None;
    }
    let Some(c) = conn.as_mut() else { return Ok(()) };
    if at.seq.is_none() {
        let top: Vec<(String, Vec<(String, String)>)> =
            redis::cmd("XREVRANGE").arg(&stream.stream).arg("+").arg("-").arg("COUNT").arg(1).query_async(c).await?;
        let seq = top.first().and_then(|(id, _)| id.split('-').next()?.parse().ok()).unwrap_or(0);
        if at.reached != Some(seq) {
            at.offset = None;
        }
        at.seq = Some(seq);
    }
    let from = at.seq.unwrap_or(0);
    if from >= target {
        return Ok(());
    }
    // The log may be large after a long outage: read it off the runtime's threads.
    let (file, offset) = (path.to_path_buf(), at.offset);
    let (lines, end) = tokio::task::spawn_blocking(move || lines_after(&file, from, target, offset))
        .await
        .map_err(|_| redis::RedisError::from((redis::ErrorKind::Io, "reading the audit log failed")))?;
    for (seq, line) in lines {
        let mut xadd = redis::cmd("XADD");
        xadd.arg(&stream.stream);
        if stream.maxlen > 0 {
            xadd.arg("MAXLEN").arg("~").arg(stream.maxlen);
        }
        let added: redis::RedisResult<String> = xadd.arg(record_id(seq)).arg("record").arg(&line).query_async(c).await;
        match added {
            Ok(_) => {}
            Err(err) if is_already_added(&err) => {}
            Err(err) => return Err(err),
        }
        at.seq = Some(seq);
    }
    at.offset = end;
    at.reached = at.seq;
    Ok(())
}

fn is_already_added(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError)
        && err.detail().is_some_and(|detail| detail.contains(ALREADY_ADDED))
}

/// Lines with a sequence number above `after` and up to `upto` (the last durable one: lines past
/// it may still be cut back), and the offset in the current file after the last of them. From `offset` in the current file when its first line there continues the
/// sequence; from the rotated files and the whole current file otherwise (after a rotation or a
/// reconnect).
fn lines_after(path: &Path, after: u64, upto: u64, offset: Option<u64>) -> (Vec<(u64, String)>, Option<u64>) {
    if let Some(offset) = offset
        && let Some((lines, end)) = read_from(path, offset, upto)
        && lines.first().is_none_or(|(seq, _)| *seq == after + 1)
    {
        return (lines, Some(end));
    }
    let mut out = Vec::new();
    for file in super::verify::rotated_files(path).unwrap_or_default() {
        if let Some((lines, _)) = read_from(&file, 0, upto) {
            out.extend(lines.into_iter().filter(|(seq, _)| *seq > after));
        }
    }
    let end = read_from(path, 0, upto).map(|(lines, end)| {
        out.extend(lines.into_iter().filter(|(seq, _)| *seq > after));
        end
    });
    (out, end)
}

/// Complete lines of `path` from byte `offset` up to sequence `upto`, and the offset after the
/// last of them.
fn read_from(path: &Path, offset: u64, upto: u64) -> Option<(Vec<(u64, String)>, u64)> {
    let mut file = std::fs::File::open(path).ok()?;
    if file.metadata().ok()?.len() < offset {
        return None;
    }
    file.seek(SeekFrom::Start(offset)).ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    let mut out = Vec::new();
    let mut end = offset;
    let mut rest = bytes.as_slice();
    while let Some(newline) = rest.iter().position(|b| *b == b'\n') {
        let raw = &rest[..newline];
        if let Ok(line) = serde_json::from_slice::<Line>(raw) {
            if line.seq > upto {
                break;
            }
            out.push((line.seq, String::from_utf8_lossy(raw).into_owned()));
        }
        end += newline as u64 + 1;
        rest = &rest[newline + 1..];
    }
    Some((out, end))
}
