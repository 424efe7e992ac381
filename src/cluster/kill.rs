//! The admin-kill listener: each instance subscribes to its own channel (`voxgate:kill:{instance}`)
//! and ends the sessions whose ids arrive there, so `DELETE /admin/sessions/{id}` works on any
//! instance. The subscription is re-made after any Redis outage.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::session::live::LiveSessions;

/// Pause between subscription attempts while Redis is down.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Opening the pub/sub connection may take this long.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs until `stop`: subscribe, end the sessions named, re-subscribe when the connection drops.
pub(super) async fn listen(
    client: redis::Client,
    channel: String,
    live: Arc<LiveSessions>,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            ended = subscribe_and_serve(&client, &channel, &live) => {
                if let Err(err) = ended {
                    tracing::debug!(error = ?err.kind(), "admin-kill subscription lost; retrying");
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(RETRY_AFTER) => {}
        }
    }
}

async fn subscribe_and_serve(
    client: &redis::Client,
    channel: &str,
    live: &LiveSessions,
) -> redis::RedisResult<()> {
    let mut pubsub = tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_pubsub())
        .await
        .map_err(|_| {
            redis::RedisError::from((redis::ErrorKind::Io, "pub/sub connect timed out"))
        })??;
    pubsub.subscribe(channel).await?;
    let mut messages = pubsub.into_on_message();
    while let Some(message) = messages.next().await {
        let Ok(id) = message.get_payload::<String>() else {
            continue;
        };
        if live.kill(&id) {
            tracing::info!(session.id = %id, "session ended by an administrator (forwarded)");
        }
    }
    Ok(())
}
