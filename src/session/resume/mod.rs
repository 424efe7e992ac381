//! Sessions that outlive their upstream (CONTRACT §9): when the upstream socket closes or fails
//! unexpectedly, or the upstream session reaches `upstream.max_session_age_s` and the
//! conversation is quiet, voxgate opens a new upstream session and restores it, and the client
//! carries on.
//!
//! The pieces, each small enough to test alone:
//! - [`log`]: the conversation so far, as text, bounded; built from what the upstream reports.
//! - [`plan`]: the pure restore plan, (effective session configuration, log) → frames.
//! - [`hold`]: what would have gone upstream during the gap, released in order after the restore.
//! - [`client_turn`]: what the client has under way (a request not started, push-to-talk audio
//!   or commit, a transcript of its audio the upstream still owes).
//! - [`driver`]: the session loop's side: starting a gap, the connection attempts (a future the
//!   loop polls in its `select!`, so confirmations, tool completions and pings go on meanwhile),
//!   restoring, giving up.
//!
//! A resume counts as done only once its new upstream has stayed up [`timing::SETTLED_AFTER`]: one lost
//! sooner continues that resume's attempts and back-off, so an upstream that accepts and closes at
//! once ends the session after `upstream.resume_attempts` connections instead of looping.
//!
//! A recycle for age is planned, and its old upstream still works: it makes one connection
//! attempt, and if that fails the session goes back to the old upstream and tries again
//! [`timing::RECYCLE_RETRY`] later. It waits for the user's turn, for a while only (see [`client_turn`]). The age itself is jittered ([`timing::recycle_age`]), so sessions that began
//! together do not all recycle together.
//!
//! This file holds the state the session task owns ([`Resume`]): settings, log, the effective
//! session configuration, the current gap if any, and which upstream echoes of a restore must not
//! reach the client (on a pure OpenAI stream a resume shows nothing but a pause).
//!
//! What cannot be carried: the model's audio of past turns (only transcripts are), server-side
//! VAD state and a response that was being generated when the upstream went away.

mod client_turn;
pub(super) mod driver;
pub(crate) mod hold;
pub(crate) mod log;
pub(crate) mod plan;
mod timing;
mod updates;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use self::timing::{RECYCLE_RETRY, Restored, delay_before, first_attempt, recycle_age};
use crate::tools::http;
use crate::upstream::{UpstreamConn, UpstreamError};

/// Opens a new upstream connection like the session's first one (same URL, auth, subprotocol,
/// model), bounded by `upstream.connect_timeout_ms`.
pub type Connect = Arc<dyn Fn() -> BoxFuture<'static, Result<UpstreamConn, UpstreamError>> + Send + Sync>;

type Connecting = BoxFuture<'static, Result<UpstreamConn, UpstreamError>>;

/// `upstream.resume*` and `upstream.max_session_age_s`, read once.
#[derive(Debug, Clone)]
pub struct ResumeSettings {
    /// `None`: never recycled for age.
    pub max_age: Option<Duration>,
    pub attempts: u32,
    pub max_items: usize,
    pub max_bytes: usize,
    pub audio_window: Duration,
}

impl ResumeSettings {
    pub fn from_config(upstream: &crate::config::UpstreamConfig) -> Option<Self> {
        upstream.resume.then(|| Self {
            max_age: (upstream.max_session_age_s > 0).then(|| Duration::from_secs(upstream.max_session_age_s)),
            attempts: upstream.resume_attempts.max(1),
            max_items: upstream.resume_max_items,
            max_bytes: upstream.resume_max_bytes,
            audio_window: Duration::from_millis(upstream.resume_audio_ms),
        })
    }
}

/// Why a resume began (the `reason` of the client events and the metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    UpstreamClosed,
    UpstreamError,
    MaxAge,
}

impl Reason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::UpstreamClosed => "upstream_closed",
            Reason::UpstreamError => "upstream_error",
            Reason::MaxAge => "max_age",
        }
    }
}

/// How a resume ended (the `outcome` of the metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Resumed,
    Failed,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Resumed => "resumed",
            Outcome::Failed => "failed",
        }
    }
}

/// What to do with an upstream event the resume state looked at.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    Forward,
    /// An echo of a restore: the client must not see it.
    Swallow,
    /// The upstream refused a frame of the restore (`configuration`: its `session.update`) with
    /// an `error` (`code`, when it is an identifier). The client does not see that error.
    RestoreRefused { configuration: bool, code: Option<String> },
}

/// The time without an upstream.
pub(super) struct Gap {
    reason: Reason,
    /// 1-based number of the attempt under way (or last failed).
    attempt: u32,
    connecting: Option<Connecting>,
    held: hold::Held,
    /// Output frames sent to the old upstream that it never acknowledged: sent again after the
    /// restore (they are not in the log, which holds only what the upstream reported).
    lost_outputs: Vec<String>,
    overflowed: bool,
    /// The old upstream's ping no pong had answered when the gap began: a recycle that goes back
    /// to that upstream keeps waiting for it, or an upstream that died meanwhile would never be
    /// found (each postponed recycle would start its pong clock afresh).
    ping_since: Option<Instant>,
    span: tracing::Span,
}

/// Upstream echoes of the last restore, kept from the client.
#[derive(Default)]
struct Echoes {
    session_created: bool,
    /// The restore's `session.update`, until its answer (either kind) comes.
    session_update: Option<RestoreUpdate>,
    items: HashSet<String>,
}

struct RestoreUpdate {
    event_id: String,
    /// Its `session.updated` is an echo, kept from the client; not when it answers an update the
    /// old upstream never answered ([`Resume::restore`]).
    echo: bool,
}

pub(super) struct Resume {
    settings: Option<ResumeSettings>,
    connect: Option<Connect>,
    log: log::ConversationLog,
    /// The session configuration a restore sends (see [`updates`]).
    configuration: updates::Configuration,
    /// When the live upstream is due to be recycled for age (`None`: never).
    recycle_at: Option<Instant>,
    gap: Option<Gap>,
    /// The last restore, so that a loss soon after it continues its back-off ([`timing::SETTLED_AFTER`]).
    restored: Option<Restored>,
    echoes: Echoes,
    /// A `session.created` reached the client: a new upstream's is an echo from then on (before,
    /// it is the client's first, and the server tools are injected on it).
    created_forwarded: bool,
    /// The client's last `response.create` not started yet (if the upstream went away without
    /// starting it, it is sent again after the restore) and its push-to-talk audio.
    client: client_turn::ClientTurn,
    /// `session.update`s sent to the live upstream that no `session.updated` has answered yet. If
    /// the upstream went away owing one, the new upstream's answer to the restore is the client's
    /// answer and is forwarded, not kept back as an echo: a client waiting for its update to be
    /// acknowledged must not wait forever.
    unanswered_updates: u32,
}

impl Resume {
    pub(super) fn new(settings: Option<ResumeSettings>, connect: Option<Connect>) -> Self {
        let settings = settings.filter(|_| connect.is_some());
        let (items, bytes) = settings.as_ref().map_or((0, 0), |s| (s.max_items, s.max_bytes));
        let recycle_at = settings.as_ref().and_then(|s| s.max_age).map(|age| Instant::now() + recycle_age(age));
        Self {
            log: log::ConversationLog::new(items, bytes),
            settings,
            connect,
            configuration: updates::Configuration::default(),
            recycle_at,
            gap: None,
            restored: None,
            echoes: Echoes::default(),
            created_forwarded: false,
            client: client_turn::ClientTurn::default(),
            unanswered_updates: 0,
        }
    }

    pub(super) fn enabled(&self) -> bool {
        self.settings.is_some()
    }

    pub(super) fn in_gap(&self) -> bool {
        self.gap.is_some()
    }

    /// A connection attempt is under way (or waiting out its back-off).
    pub(super) fn connecting(&self) -> bool {
        self.gap.as_ref().is_some_and(|g| g.connecting.is_some())
    }

    /// The held frames overflowed: the resume must give up.
    pub(super) fn overflowed(&self) -> bool {
        self.gap.as_ref().is_some_and(|g| g.overflowed)
    }

    /// Does the resume state read upstream events of this type?
    pub(super) fn watches(&self, kind: &str) -> bool {
        self.enabled() && (log::records(kind) || matches!(kind, "session.created" | "session.updated" | "error" | "response.created"))
    }

    /// Log the event, or recognise it as an echo of the restore.
    pub(super) fn on_upstream_event(&mut self, kind: &str, bytes: &[u8]) -> Seen {
        match kind {
            "session.created" => {
                if swallow_once(&mut self.echoes.session_created) == Seen::Swallow {
                    return Seen::Swallow;
                }
                self.created_forwarded = true;
                return Seen::Forward;
            }
            "session.updated" => {
                // Answers come in order: the first after a restore is the restore's (the updates
                // it answers were merged into the restored configuration).
                match self.echoes.session_update.take() {
                    Some(update) if update.echo => return Seen::Swallow,
                    Some(_) => {}
                    None => self.configuration.accepted(),
                }
                self.unanswered_updates = self.unanswered_updates.saturating_sub(1);
                return Seen::Forward;
            }
            "response.created" => {
                self.client.started();
                return Seen::Forward;
            }
            "error" => {
                let error = serde_json::from_slice::<Value>(bytes).ok();
                let Some(event_id) = error.as_ref().and_then(|e| e["error"]["event_id"].as_str()) else { return Seen::Forward };
                if event_id.starts_with(plan::RESTORE_EVENT_PREFIX) {
                    return self.on_restore_refused(event_id, error.as_ref().and_then(|e| e["error"]["code"].as_str()));
                }
                self.client.refused(event_id);
                // A refused update is answered (by the error) and is not part of the session.
                if self.configuration.refused(event_id) == Some(true) {
                    self.unanswered_updates = self.unanswered_updates.saturating_sub(1);
                }
                return Seen::Forward;
            }
            _ => {}
        }
        if kind == "conversation.item.deleted" && !self.echoes.items.is_empty() {
            // A client may re-create a deleted item under its id: that one is no echo.
            let id = serde_json::from_slice::<Value>(bytes).ok().and_then(|e| e["item_id"].as_str().map(str::to_string));
            if let Some(id) = id {
                self.echoes.items.remove(&id);
            }
        } else if kind.starts_with("conversation.item.") && !self.echoes.items.is_empty() {
            let id = serde_json::from_slice::<Value>(bytes).ok().and_then(|e| e["item"]["id"].as_str().map(str::to_string));
            if id.is_some_and(|id| self.echoes.items.contains(&id)) {
                return Seen::Swallow;
            }
        }
        match self.log.observe(kind, bytes) {
            Some(log::Transcript::Owed(item_id)) => self.client.transcript_owed(item_id),
            Some(log::Transcript::Settled(item_id)) => self.client.transcript_settled(&item_id),
            None => {}
        }
        Seen::Forward
    }

    /// The new upstream refused a frame of the restore (`event_id`) with an `error` (`code`). A
    /// refused `session.update` gets no `session.updated`: the next one answers the client's own
    /// update and is not kept back as an echo. If the restore's answer was owed to an update the
    /// old upstream never answered, that update is answered now (by the bridge's error).
    fn on_restore_refused(&mut self, event_id: &str, code: Option<&str>) -> Seen {
        // An error code is an identifier; anything else from the upstream is not logged.
        let code = code.filter(|c| c.len() <= 64 && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')).map(str::to_string);
        let update = self.echoes.session_update.take_if(|update| update.event_id == event_id);
        let configuration = update.is_some();
        // Not an echo: the restore's answer was owed to an update (restore()).
        if update.is_some_and(|update| !update.echo) {
            self.unanswered_updates = self.unanswered_updates.saturating_sub(1);
        }
        Seen::RestoreRefused { configuration, code }
    }

    /// The new upstream refused the restored configuration (see [`updates::Configuration::reset`]):
    /// kept, it would carry the refused setting into every later restore, refused each time.
    pub(super) fn configuration_refused(&mut self) {
        self.configuration.reset();
    }

    /// voxgate sent this `session.update` upstream.
    pub(super) fn note_session_update(&mut self, frame: &[u8], is_server_tool: impl Fn(&str) -> bool) {
        if self.enabled() {
            let held = self.in_gap();
            self.configuration.sent(frame, is_server_tool, held);
            // Audio held after an update held in the gap is in the format it sets.
            if let Some(gap) = &mut self.gap {
                gap.held.set_audio_rate(self.configuration.input_audio_bytes_per_ms());
            }
            self.client.session_update(frame);
            // One held in a gap goes to the new upstream after the restore and is answered there.
            if !self.in_gap() {
                self.unanswered_updates = self.unanswered_updates.saturating_add(1);
            }
        }
    }

    /// The client's `response.create` went to the live upstream (held ones are sent anyway).
    pub(super) fn note_client_request(&mut self, frame: &str, event_id: Option<&str>) {
        if self.enabled() && !self.in_gap() {
            self.client.requested(frame, event_id);
        }
    }

    /// The client's request the old upstream never started, if any.
    fn take_client_request(&mut self) -> Option<String> {
        self.client.take_request()
    }

    /// The client appended audio (`appended`), or cleared its buffer.
    pub(super) fn note_client_audio(&mut self, appended: bool) {
        self.client.audio(appended);
    }

    /// The client committed its audio buffer (`input_audio_buffer.commit`, `event_id`).
    pub(super) fn note_client_commit(&mut self, event_id: Option<&str>) {
        self.client.committed(event_id);
    }

    /// The client may be in the middle of a turn a recycle (due at the upstream's age) would cut
    /// (see [`client_turn`]).
    pub(super) fn client_turn_open(&self, now: Instant) -> bool {
        self.recycle_at.is_some_and(|due| self.client.open(now, due))
    }

    /// When the client's turn stops holding a recycle off: its pending request's (or push-to-talk
    /// commit's) answer time, the end of the hold for push-to-talk audio not yet committed, or of
    /// the wait for the transcripts owed, whichever is latest.
    pub(super) fn client_turn_expires(&self) -> Option<Instant> {
        let audio = self.recycle_at.and_then(|due| self.client.audio_hold_ends(due));
        let transcripts = self.recycle_at.and_then(|due| self.client.transcripts_expire(due));
        self.client.request_expires().max(audio).max(transcripts)
    }

    /// When the upstream session should be recycled: armed only while connected.
    pub(super) fn age_deadline(&self) -> Option<Instant> {
        self.recycle_at.filter(|_| !self.in_gap())
    }

    /// Why the current gap began.
    fn gap_reason(&self) -> Option<Reason> {
        self.gap.as_ref().map(|g| g.reason)
    }

    /// Open a gap and schedule its first connection attempt. `untaken`: the frames the old
    /// upstream never took, held first, in order, as sent at `untaken_at` (at the latest: their
    /// audio is dropped once older than the window, like audio held in the gap); a restore sends
    /// only the client's of them, the old upstream gets them all back if the recycle is postponed.
    /// `ping_since`: the old upstream's unanswered ping. False when there is no attempt to make:
    /// the upstream went away soon after a restore that had used up the attempts, and the caller
    /// gives up (the gap is open so that giving up is reported like any failed resume).
    fn begin_gap(&mut self, reason: Reason, lost_outputs: Vec<String>, untaken: (Vec<Message>, Instant), ping_since: Option<Instant>, span: tracing::Span) -> bool {
        let (untaken, untaken_at) = untaken;
        let Some(settings) = &self.settings else { return false };
        let mut held = hold::Held::new(settings.audio_window, self.configuration.input_audio_bytes_per_ms());
        let now = Instant::now();
        let mut overflowed = false;
        for message in untaken {
            // The client's request is among them: it goes in its place, after what came before it.
            if matches!(&message, Message::Text(t) if self.client.is_request(t.as_str())) {
                self.client.take_request();
            }
            overflowed |= held.push_untaken(message, untaken_at, now).is_err();
        }
        let attempt = first_attempt(self.restored, reason, now);
        let (attempt, connecting) = if attempt > settings.attempts {
            (attempt - 1, None)
        } else {
            (attempt, self.attempt(delay_before(attempt, settings.attempts)))
        };
        let started = connecting.is_some();
        self.gap = Some(Gap { reason, attempt, connecting, held, lost_outputs, overflowed, ping_since, span });
        started
    }

    /// A recycle for age could not connect: its gap ends with the old upstream still the
    /// session's, and the recycle is due again after [`timing::RECYCLE_RETRY`].
    fn postpone_recycle(&mut self) -> Option<Gap> {
        let gap = self.gap.take()?;
        self.recycle_at = Some(Instant::now() + http::jittered(RECYCLE_RETRY));
        Some(gap)
    }

    /// A frame held in a gap went to the live upstream after all (the old one, a recycle being
    /// postponed, or the new one after its restore): it counts as sent there. One from the old
    /// queue (`untaken`) was counted when first sent, but for the client's request, which the gap
    /// took out of the pending state.
    fn note_released(&mut self, message: &Message, untaken: bool) {
        let Message::Text(text) = message else { return };
        let Ok((kind, event_id)) = crate::protocol::peek_client(text.as_str()) else { return };
        let voxgate = event_id.as_deref().is_some_and(crate::protocol::voxgate::is_own_event_id);
        match kind.as_ref() {
            "session.update" if !untaken => {
                self.unanswered_updates = self.unanswered_updates.saturating_add(1);
                self.configuration.released();
            }
            "response.create" if !voxgate => self.client.requested(text.as_str(), event_id.as_deref()),
            _ => {}
        }
    }

    /// Hold a frame meant for the upstream until the restore.
    pub(super) fn hold(&mut self, message: Message) {
        if let Some(gap) = &mut self.gap
            && gap.held.push(message, Instant::now()).is_err()
        {
            gap.overflowed = true;
        }
    }

    /// The pending connection attempt's result; never ready without one.
    pub(super) async fn next_connection(&mut self) -> Result<UpstreamConn, UpstreamError> {
        let attempt = self.gap.as_mut().and_then(|g| g.connecting.as_mut());
        let result = match attempt {
            Some(attempt) => attempt.await,
            None => std::future::pending().await,
        };
        if let Some(gap) = &mut self.gap {
            gap.connecting = None;
        }
        result
    }

    /// Schedule the next attempt after a back-off; false when the attempts are used up.
    fn retry(&mut self) -> bool {
        let attempts = self.settings.as_ref().map_or(0, |s| s.attempts);
        let Some(attempt) = self.gap.as_ref().map(|g| g.attempt + 1) else { return false };
        if attempt > attempts {
            return false;
        }
        let connecting = self.attempt(delay_before(attempt, attempts));
        if let Some(gap) = &mut self.gap {
            gap.attempt = attempt;
            gap.connecting = connecting;
        }
        true
    }

    fn attempt(&self, after: Duration) -> Option<Connecting> {
        let connect = self.connect.clone()?;
        Some(
            async move {
                tokio::time::sleep(after).await;
                connect().await
            }
            .boxed(),
        )
    }

    /// The gap is over (restored or given up).
    fn end_gap(&mut self) -> Option<Gap> {
        self.gap.take()
    }

    /// The frames that restore the conversation on a new upstream (the gap's, ended after
    /// `attempts` connection attempts); from now on that upstream's echoes of them are kept from
    /// the client.
    fn restore(&mut self, attempts: u32, protocol: crate::config::UpstreamProtocol, server_tools: &[Value]) -> plan::Restore {
        let restore = plan::plan(self.configuration.for_restore(), &self.log, protocol, server_tools);
        // The restore's `session.updated` answers an update the old upstream never answered; it
        // stays owed until it comes, or a loss before it would swallow it at the next restore.
        let owed = self.unanswered_updates > 0;
        self.unanswered_updates = u32::from(owed && restore.session_event_id.is_some());
        self.echoes = Echoes {
            session_created: self.created_forwarded,
            session_update: restore.session_event_id.clone().map(|event_id| RestoreUpdate { event_id, echo: !owed }),
            items: restore.item_ids.clone(),
        };
        self.client.upstream_replaced();
        let now = Instant::now();
        self.recycle_at = self.settings.as_ref().and_then(|s| s.max_age).map(|age| now + recycle_age(age));
        self.restored = Some(Restored { at: now, attempts });
        restore
    }
}

fn swallow_once(flag: &mut bool) -> Seen {
    if std::mem::take(flag) { Seen::Swallow } else { Seen::Forward }
}
