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
//! be the only copy off the host of lines the file no longer has). The mirror logs an error, counts
//! it, and sends this epoch to a new key instead, `<stream>:epoch2`, `:epoch3`…, the one above the
//! newest key in use. At each connect it reads the top of every key (one round trip) and goes on
//! with the newest whose top line is this log's: a restart finds the same key again (logged at
//! info, not counted). A top line no longer on this host counts as this log's only on the newest
//! key in use, never on an older one, whose epoch this log would then be mixed into. A fresh log
//! takes up a key only once it has a line to send. Keys are never reused and at most
//! [`MAX_EPOCHS`] exist; the operator archives and deletes the older ones (docs/audit.md).
//!
//! The stream is capped (`audit.redis_stream_maxlen`, trimmed with `MAXLEN ~`): the Redis that
//! holds it also holds tickets and rate limits, and a stream that grew until Redis reached its
//! memory limit would make every ticket refused. Readers of the stream have that many lines of
//! slack; the file keeps them all. A catch-up therefore starts at most that many lines below the
//! last durable one (older lines would be trimmed at once; the gap is logged with its range and
//! counted), skips rotated files by the sequence range in their names (up to the next file's first
//! line: a file left by the old rotation bug holds more than its name says), and reads a bounded
//! batch of lines at a time: its memory does not grow with the log, even after Redis comes back
//! empty.

mod reader;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;

use self::reader::{Cursor, line_at, next_batch};
use super::record::record_id;

const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How soon durable lines that were not found on disk are looked for again (then backed off).
const MISSING_RETRY: Duration = Duration::from_millis(100);
/// The error Redis gives an XADD whose id is not above the stream's top: the line is there.
const ALREADY_ADDED: &str = "The ID specified in XADD is equal or smaller than the target stream top item";
/// Stream keys for this log's epochs, all read at each connect (one `XREVRANGE` each, pipelined):
/// the most that can pile up, each holding up to `maxlen` lines, before nothing is mirrored.
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
    /// The last line a catch-up left out of `stream` (see [`catch_up`]): a retry does not count
    /// the same gap twice.
    skipped_to: u64,
    /// Streams found holding another epoch of the log, in this process.
    foreign: u64,
}

/// Where the mirror writes: the stream's name and the length it is trimmed to (0 = untrimmed).
pub(super) struct Target {
    pub(super) stream: String,
    pub(super) maxlen: u64,
    /// Counts the new keys taken up (`voxgate_audit_stream_epochs_total`) and the lines a catch-up
    /// skipped (`voxgate_audit_stream_skipped_lines_total`).
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
        let mut missing = MISSING_RETRY;
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
            // Durable lines not found on disk (a rotation renamed their file while it was being
            // read): looked for again soon, not only at the next flush, which may never come on a
            // quiet instance. Backed off while they stay missing (rotated files moved away).
            let target = *flushed.borrow();
            let next = if target > 0 && at.seq.is_none_or(|m| m < target) {
                tokio::select! {
                    () = tokio::time::sleep(missing) => {
                        missing = (missing * 2).min(MAX_BACKOFF);
                        continue;
                    }
                    changed = flushed.changed() => changed,
                }
            } else {
                missing = MISSING_RETRY;
                flushed.changed().await
            };
            if next.is_err() {
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
        if target == 0 {
            // Nothing durable yet: a fresh log (an emptyDir pod's, at each reschedule) takes up a
            // key, and counts a move, only once it has a line to send.
            return Ok(());
        }
        let (stream, top) = find_stream(c, sink, path, at, target).await?;
        if at.stream.as_deref() != Some(stream.as_str()) {
            (at.reached, at.skipped_to) = (None, 0);
        }
        if at.reached != Some(top) {
            at.cursor = None;
        }
        at.stream = Some(stream);
        at.seq = Some(top);
    }
    let (Some(stream), Some(from)) = (at.stream.clone(), at.seq) else { return Ok(()) };
    // Lines more than `maxlen` below the last durable one would be trimmed as soon as added.
    let mut after = if sink.maxlen > 0 { from.max(target.saturating_sub(sink.maxlen)) } else { from };
    match gap(from, at.reached, at.skipped_to, after) {
        Gap::None => {}
        Gap::Start { first } => {
            tracing::info!(stream = %stream, first, maxlen = sink.maxlen, "audit mirror: the stream starts with the last maxlen lines; the earlier ones are in the file only");
            at.skipped_to = after;
        }
        Gap::Missed { first, last } => {
            tracing::warn!(
                stream = %stream, first_skipped = first, last_skipped = last, maxlen = sink.maxlen,
                "audit mirror: more lines were missed than the stream keeps; the catch-up starts maxlen lines below the last, and the lines skipped are in the file only"
            );
            if let Some(metrics) = &sink.metrics {
                metrics.audit_stream_skipped_lines(last + 1 - first);
            }
            at.skipped_to = after;
        }
    }
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

/// What a catch-up that starts after line `after` leaves out of the stream.
#[derive(Debug, PartialEq, Eq)]
enum Gap {
    None,
    /// An empty stream this process never sent to (a first start with Redis, or Redis and voxgate
    /// restarted together): the stream begins at `first`; no reader saw lines then missing from
    /// it, so this is said, not counted as a gap.
    Start { first: u64 },
    /// Lines `first..=last` were sent nowhere although the stream had lines before them: a reader
    /// sees the ids jump. Said once, with the range, so that it is not taken for tampering (the
    /// file has them all), and counted.
    Missed { first: u64, last: u64 },
}

/// `top`: the stream's top (0: empty); `reached`: the last line this process sent to it;
/// `skipped_to`: the end of a gap already reported.
fn gap(top: u64, reached: Option<u64>, skipped_to: u64, after: u64) -> Gap {
    let sent = top.max(reached.unwrap_or(0)).max(skipped_to);
    if after <= sent {
        Gap::None
    } else if top == 0 && reached.is_none() && skipped_to == 0 {
        Gap::Start { first: after + 1 }
    } else {
        Gap::Missed { first: sent + 1, last: after }
    }
}

/// `<stream>` for the first epoch, `<stream>:epoch<n>` after it.
fn epoch_stream(base: &str, epoch: u32) -> String {
    if epoch <= 1 { base.to_string() } else { format!("{base}:epoch{epoch}") }
}

/// A stream key's top entry: its sequence number and the line it holds (`None`: the key is empty).
type Top = Option<(u64, Option<String>)>;

/// The top entry of every epoch key, `<stream>` first.
async fn tops(c: &mut redis::aio::MultiplexedConnection, base: &str) -> redis::RedisResult<Vec<Top>> {
    type Entries = Vec<(String, Vec<(String, String)>)>;
    let top = |entries: Entries| {
        entries.into_iter().next().map(|(id, fields)| {
            let seq = id.split('-').next().and_then(|s| s.parse::<u64>().ok()).unwrap_or(u64::MAX);
            (seq, fields.into_iter().find(|(field, _)| field == "record").map(|(_, line)| line))
        })
    };
    // The first key alone: a Redis that refuses (the key is not a stream) costs one command per
    // attempt, not one per key. The others in one round trip.
    let first: Entries = redis::cmd("XREVRANGE").arg(base).arg("+").arg("-").arg("COUNT").arg(1).query_async(c).await?;
    let mut pipe = redis::pipe();
    for epoch in 2..=MAX_EPOCHS {
        pipe.cmd("XREVRANGE").arg(epoch_stream(base, epoch)).arg("+").arg("-").arg("COUNT").arg(1);
    }
    let rest: Vec<Entries> = pipe.query_async(c).await?;
    Ok(std::iter::once(first).chain(rest).map(top).collect())
}

/// The stream this log's epoch goes to, and its top sequence number (0 when empty).
///
/// Keys are taken up in order, so the highest one in use holds the newest epoch begun. The keys in
/// use are tried newest first: the first whose top line is this log's line of that number is this
/// log's. A top above `target` (the last durable line) or a different line is another epoch's. A
/// top line no longer on this host (its rotated file moved away, or rotated between listing and
/// reading) cannot be told apart: it is taken as this log's only on the newest key, never on an
/// older one — that would send this log's lines back into an earlier epoch's stream. When no key
/// holds this log's epoch it takes up a new one, the one above the newest in use (an emptied
/// lower key is not reused: it would then be older than a key holding another epoch).
async fn find_stream(
    c: &mut redis::aio::MultiplexedConnection,
    sink: &Target,
    path: &Path,
    at: &mut Position,
    target: u64,
) -> redis::RedisResult<(String, u64)> {
    let tops = tops(c, &sink.stream).await?;
    let newest = tops.iter().rposition(Option::is_some).map_or(0, |i| i as u32 + 1);
    // The newest stream found holding another epoch, and its top.
    let mut foreign: Option<(String, u64)> = None;
    for (i, top) in tops.into_iter().enumerate().take(newest as usize).rev() {
        let Some((seq, mirrored)) = top else { continue };
        let epoch = i as u32 + 1;
        let stream = epoch_stream(&sink.stream, epoch);
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
            match line {
                Some(line) => Some(line) == mirrored,
                None => epoch == newest,
            }
        };
        if ours {
            if epoch > 1 && at.stream.as_deref() != Some(stream.as_str()) {
                // Found again (at start, or after Redis came back): no move, nothing to alert on.
                tracing::info!(mirror_to = %stream, stream_top = seq, log_seq = target, "audit mirror: this log is mirrored to the stream of its epoch found again");
            }
            return Ok((stream, seq));
        }
        foreign.get_or_insert((stream, seq));
    }
    // The key this process mirrors to, if it is above every key in use (emptied: Redis lost it),
    // so that the stream a reader follows does not change; else the one above the newest.
    let own = (newest + 1..=MAX_EPOCHS).find(|&epoch| at.stream.as_deref() == Some(epoch_stream(&sink.stream, epoch).as_str()));
    let epoch = own.unwrap_or(newest + 1);
    if epoch > MAX_EPOCHS {
        tracing::error!(log_seq = target, "audit mirror: every stream key for this log holds another epoch; nothing is mirrored");
        return Err(redis::RedisError::from((redis::ErrorKind::Client, "no stream key left for this log's epoch")));
    }
    let stream = epoch_stream(&sink.stream, epoch);
    // Only taking up a new key is a move: once per key, not at every reconnect or restart.
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
    Ok((stream, 0))
}

fn is_already_added(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError)
        && err.detail().is_some_and(|detail| detail.contains(ALREADY_ADDED))
}

#[cfg(test)]
#[path = "mirror_tests.rs"]
mod tests;
