//! One measured phase: N ready sessions each send a 20 ms audio frame every 20 ms and time the
//! echo of every frame.
//!
//! Timeline: all sessions are opened first (setup cost is not measured), then they start together,
//! spread evenly over one 20 ms period so the load is smooth rather than 50 bursts a second. A
//! warm-up lets buffers and allocators settle; only frames *sent* inside the measure window count,
//! and the process probes (CPU, RSS) are read exactly at the window's edges.
//!
//! The send clock (`clock.rs`: tokio's millisecond wheel or a sub-millisecond metronome) is a
//! real-time source: a late tick is sent at once (burst), like a microphone whose audio piled up.
//! How late the load generator itself was is recorded as "send lag", so a saturated generator shows
//! up as such instead of as relay latency.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use anyhow::Context;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use crate::client::Ws;
use crate::clock::{self, Clock, Ticks};
use crate::frames::{AppendTemplate, delta_stamp, fast_type};
use crate::procfs;

pub const FRAME_INTERVAL: Duration = Duration::from_millis(20);
/// How long after the window an echo may come back and still count as delivered (every echo is
/// timed, a late one too: dropping them flattered the percentiles of a path that falls behind).
const GRACE: Duration = Duration::from_secs(3);
/// An echo later than the grace is counted as late, not lost, as long as it comes back within
/// this: on a saturated machine the backlog drains slowly, and a late frame is a timing, not the
/// broken behaviour a lost one is.
const LOST_AFTER: Duration = Duration::from_secs(30);
/// The round trip a lost frame counts as in percentiles: infinite (see `stats::Summary`).
pub const LOST_US: u32 = u32::MAX;

/// A process whose cost is read at the window's edges.
#[derive(Debug, Clone)]
pub struct Probe {
    pub name: String,
    pub pid: u32,
}

#[derive(Debug, Clone, Default)]
pub struct ProbeReading {
    pub name: String,
    pub cpu_s: f64,
    pub rss_end: u64,
}

/// What one phase measured.
#[derive(Debug, Default)]
pub struct PhaseResult {
    /// Round trips of frames sent in the window, µs, late echoes' included (lost frames have none:
    /// the report counts them as infinite).
    pub rtt_us: Vec<u32>,
    /// How late each in-window frame left the generator, µs.
    pub lag_us: Vec<u32>,
    pub sent: u64,
    pub received: u64,
    /// In-window frames whose echo came back after the grace (not in `received`, but timed).
    pub late: u64,
    /// In-window frames whose echo came back after the window's end: counted in CPU per frame,
    /// though the CPU they cost after the window is not (a backlog makes a path look cheap).
    pub after_window: u64,
    pub failed_sessions: usize,
    pub window: Duration,
    pub probes: Vec<ProbeReading>,
    /// Busy time of the whole machine over the window, in cores.
    pub machine_busy_cores: f64,
}

pub struct PhasePlan {
    pub warmup: Duration,
    pub measure: Duration,
    pub template: Arc<AppendTemplate>,
    /// The run's clock zero: stamps are microseconds since it.
    pub epoch: std::time::Instant,
    pub clock: Clock,
}

/// Drive already-open sessions through one phase; the sessions are consumed and closed.
pub async fn run(sessions: Vec<Ws>, plan: &PhasePlan, probes: &[Probe]) -> anyhow::Result<PhaseResult> {
    let n = sessions.len().max(1);
    let start = Instant::now() + Duration::from_millis(200);
    let window_start = start + plan.warmup;
    let window_end = window_start + plan.measure;
    let firsts: Vec<Instant> = (0..sessions.len()).map(|i| start + FRAME_INTERVAL.mul_f64(i as f64 / n as f64)).collect();
    let mut schedule = clock::schedule(plan.clock, &firsts, FRAME_INTERVAL, window_end).context("starting the send clock")?;
    let mut tasks = Vec::with_capacity(sessions.len());
    for ((ws, ticks), first) in sessions.into_iter().zip(schedule.ticks.drain(..)).zip(firsts) {
        let window = Window { first, window_start, window_end, epoch: plan.epoch };
        tasks.push(tokio::spawn(drive(ws, window, ticks, plan.template.clone())));
    }

    tokio::time::sleep_until(window_start).await;
    let before: Vec<_> = probes.iter().map(|p| procfs::cpu_time(p.pid)).collect();
    let machine_before = procfs::machine_idle();
    tokio::time::sleep_until(window_end).await;
    let machine_after = procfs::machine_idle();
    let mut result = PhaseResult { window: plan.measure, ..PhaseResult::default() };
    for (probe, cpu0) in probes.iter().zip(before) {
        let cpu = match (cpu0, procfs::cpu_time(probe.pid)) {
            (Some(a), Some(b)) => b.saturating_sub(a).as_secs_f64(),
            _ => f64::NAN,
        };
        result.probes.push(ProbeReading {
            name: probe.name.clone(),
            cpu_s: cpu,
            rss_end: procfs::rss_bytes(probe.pid).unwrap_or(0),
        });
    }
    if let (Some(before), Some(after)) = (machine_before, machine_after) {
        result.machine_busy_cores = before.busy_cores_until(&after);
    }

    let mut finished = Vec::with_capacity(tasks.len());
    for task in tasks {
        match task.await {
            Ok(Ok(session)) => finished.push(session),
            _ => result.failed_sessions += 1,
        }
    }
    let mut open = Vec::with_capacity(finished.len());
    for session in finished {
        result.rtt_us.extend_from_slice(&session.rtt_us);
        result.lag_us.extend_from_slice(&session.lag_us);
        result.sent += session.sent;
        result.received += session.received;
        result.late += session.late;
        result.after_window += session.after_window;
        if session.failed {
            result.failed_sessions += 1;
        }
        if let Some(ws) = session.ws {
            open.push(ws);
        }
    }
    crate::client::close_all(open).await;
    if let Some(metronome) = schedule.metronome {
        // It has sent every tick due before the window's end, so it has ended or is about to.
        tokio::task::spawn_blocking(move || metronome.join()).await.ok();
    }
    Ok(result)
}

#[derive(Clone, Copy)]
struct Window {
    first: Instant,
    window_start: Instant,
    window_end: Instant,
    epoch: std::time::Instant,
}

struct SessionOutcome {
    rtt_us: Vec<u32>,
    lag_us: Vec<u32>,
    sent: u64,
    received: u64,
    late: u64,
    after_window: u64,
    failed: bool,
    ws: Option<Ws>,
}

async fn drive(ws: Ws, s: Window, mut ticks: Ticks, template: Arc<AppendTemplate>) -> anyhow::Result<SessionOutcome> {
    let (mut sink, mut stream) = ws.split();
    let epoch_us = |t: Instant| t.into_std().saturating_duration_since(s.epoch).as_micros() as u64;
    let window = (epoch_us(s.window_start), epoch_us(s.window_end));
    // The last sequence number is known up front: ticks are on a fixed grid that stops at the window's end.
    let total = clock::frames_due(s.first, FRAME_INTERVAL, s.window_end);
    let sent_in_window = AtomicU64::new(0);

    let writer = async {
        let mut lag_us = Vec::new();
        let mut seq = 0u64;
        while let Some(scheduled) = ticks.next().await {
            let now = Instant::now();
            let t_us = epoch_us(now);
            let frame = template.stamped(seq as u32, t_us);
            if sink.send(Message::text(frame)).await.is_err() {
                return (lag_us, true);
            }
            if (window.0..window.1).contains(&t_us) {
                sent_in_window.fetch_add(1, Ordering::Relaxed);
                lag_us.push(now.saturating_duration_since(scheduled).as_micros() as u32);
            }
            seq += 1;
        }
        (lag_us, false)
    };

    let reader = async {
        let mut rtt_us = Vec::new();
        let (mut received, mut late, mut after_window) = (0u64, 0u64, 0u64);
        let grace_end = s.window_end + GRACE;
        let lost_after = s.window_end + LOST_AFTER;
        loop {
            let frame = match tokio::time::timeout_at(lost_after, stream.next()).await {
                Ok(Some(Ok(frame))) => frame,
                Ok(_) => return (rtt_us, received, late, after_window, true),
                Err(_) => return (rtt_us, received, late, after_window, false),
            };
            let Message::Text(text) = frame else { continue };
            let bytes = text.as_bytes();
            if fast_type(bytes) != Some("response.output_audio.delta") {
                continue;
            }
            let Some((seq, t_us)) = delta_stamp(bytes) else { continue };
            let now_us = epoch_us(Instant::now());
            if (window.0..window.1).contains(&t_us) {
                rtt_us.push(u32::try_from(now_us.saturating_sub(t_us)).unwrap_or(LOST_US - 1));
                if now_us >= window.1 {
                    after_window += 1;
                }
                if Instant::now() <= grace_end {
                    received += 1;
                } else {
                    late += 1;
                }
            }
            if u64::from(seq) + 1 >= total {
                return (rtt_us, received, late, after_window, false);
            }
        }
    };

    let ((lag_us, write_failed), (rtt_us, received, late, after_window, read_failed)) = tokio::join!(writer, reader);
    let failed = write_failed || read_failed;
    let ws = if failed { None } else { sink.reunite(stream).ok() };
    Ok(SessionOutcome { rtt_us, lag_us, sent: sent_in_window.into_inner(), received, late, after_window, failed, ws })
}
