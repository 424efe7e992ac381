//! Mirrors flushed audit lines to the Redis stream `voxgate:audit`. Each line is added with its
//! own deterministic id (`<seq>-1`), so a retry can never add it twice (Redis refuses an id not
//! above the stream's top). Nothing in a session waits on this: when Redis is down the mirror
//! retries with back-off and, once it is back, catches up from the file — the source of truth.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::watch;

use super::record::{Line, record_id};

pub const STREAM: &str = "voxgate:audit";
const MAX_BACKOFF: Duration = Duration::from_secs(10);

pub(super) fn spawn(url: String, path: PathBuf, mut flushed: watch::Receiver<u64>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut mirrored: Option<u64> = None;
        let mut backoff = Duration::from_millis(200);
        let mut conn: Option<redis::aio::MultiplexedConnection> = None;
        let mut down = false;
        loop {
            let target = *flushed.borrow_and_update();
            if mirrored.is_none_or(|m| m < target) {
                match catch_up(&url, &path, &mut conn, &mut mirrored, target).await {
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
                        let closed = tokio::select! {
                            _ = tokio::time::sleep(backoff) => false,
                            changed = flushed.changed() => changed.is_err(),
                        };
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        if closed {
                            return;
                        }
                        continue;
                    }
                }
            }
            if flushed.changed().await.is_err() {
                // The writer is gone: one last catch-up of what is on disk, then stop.
                let target = *flushed.borrow();
                let _ = catch_up(&url, &path, &mut conn, &mut mirrored, target).await;
                return;
            }
        }
    })
}

async fn catch_up(
    url: &str,
    path: &std::path::Path,
    conn: &mut Option<redis::aio::MultiplexedConnection>,
    mirrored: &mut Option<u64>,
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
        // Where the stream stands (it may be empty after a Redis restart without persistence).
        *mirrored = None;
    }
    let Some(c) = conn.as_mut() else { return Ok(()) };
    if mirrored.is_none() {
        let top: Vec<(String, Vec<(String, String)>)> =
            redis::cmd("XREVRANGE").arg(STREAM).arg("+").arg("-").arg("COUNT").arg(1).query_async(c).await?;
        *mirrored = Some(top.first().and_then(|(id, _)| id.split('-').next()?.parse().ok()).unwrap_or(0));
    }
    let from = mirrored.unwrap_or(0);
    if from >= target {
        return Ok(());
    }
    for (seq, line) in lines_after(path, from) {
        let added: redis::RedisResult<String> =
            redis::cmd("XADD").arg(STREAM).arg(record_id(seq)).arg("record").arg(&line).query_async(c).await;
        match added {
            Ok(_) => {}
            // "equal or smaller than the target stream top item": already there.
            Err(err) if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) || err.to_string().contains("smaller") => {}
            Err(err) => return Err(err),
        }
        *mirrored = Some(seq);
    }
    Ok(())
}

/// Lines with a sequence number above `after`, from the rotated files and the current one.
fn lines_after(path: &std::path::Path, after: u64) -> Vec<(u64, String)> {
    let mut files = super::verify::rotated_files(path).unwrap_or_default();
    files.push(path.to_path_buf());
    let mut out = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        for raw in text.lines() {
            if let Ok(line) = serde_json::from_str::<Line>(raw) {
                if line.seq > after {
                    out.push((line.seq, raw.to_string()));
                }
            }
        }
    }
    out
}
