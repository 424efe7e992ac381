//! The figures of one run and how they are printed: Markdown tables for docs/performance.md and a
//! JSON document for anything that wants to compare runs. Every voxgate figure sits next to the
//! same figure for the bare relay and the direct connection *of the same run*, and ratios are
//! taken only within a run.

use std::time::Instant;

use serde_json::{Value, json};

use crate::load::PhaseResult;
use crate::run::{Options, Path};
use crate::stats::Summary;
use crate::tools::ToolTimes;

mod markdown;
#[cfg(test)]
mod tests;

/// One (path, N) cell, pooled over rounds.
#[derive(Debug)]
pub struct PathPhase {
    pub path: &'static str,
    pub sessions: usize,
    pub rtt: Summary,
    pub lag: Summary,
    pub sent: u64,
    pub received: u64,
    /// Echoes that came back after the grace: counted neither as delivered nor as lost.
    pub late: u64,
    /// Echoes (of frames sent in the window) that came back after the window's end, when the
    /// CPU was no longer read.
    pub after_window: u64,
    pub expected: u64,
    pub failed_sessions: usize,
    pub window_s: f64,
    /// CPU seconds over the window: the relay or voxgate (absent for direct), echo, load generator.
    pub target_cpu_s: Option<f64>,
    pub echo_cpu_s: f64,
    pub generator_cpu_s: f64,
    pub machine_busy_cores: f64,
    /// Target RSS growth per session at the window's end over the freshly started process, bytes.
    pub rss_per_active: Option<f64>,
    pub tools_under_load: Option<ToolRun>,
    /// The target's CPU seconds per 10k relayed frames in each round, in round order: the pooled
    /// figure hides how far rounds run apart, and the relay's and voxgate's phases of one round
    /// ran back to back (ABBA: relay first in even rounds, voxgate first in odd ones), so their
    /// ratio is the least disturbed by the machine's drift.
    rounds_cpu_per_10k: Vec<f64>,
    /// The echo's CPU seconds per 10k frames in the same rounds. The echo does the same work on
    /// every path, so its ratio between two phases is the machine's (or the path's effect on its
    /// neighbours), not the path's own cost: the control for `rounds_cpu_per_10k`.
    rounds_echo_per_10k: Vec<f64>,
    /// The target's sessions on each of its threads once they were open, one list per round
    /// (relay and voxgate only; empty where they could not be read).
    pub rounds_thread_sessions: Vec<Vec<i64>>,
    rtt_samples: Vec<u32>,
    lag_samples: Vec<u32>,
}

impl PathPhase {
    pub fn from_result(path: Path, n: usize, expected: u64, fresh_rss: u64, mut r: PhaseResult, tools: Option<ToolTimes>) -> Self {
        let cpu = |name: &str| r.probes.iter().find(|p| p.name == name).map(|p| p.cpu_s);
        // The process serving the path (none for direct): every probe but the two always there.
        let target = r.probes.iter().find(|p| p.name != "echo" && p.name != "load generator");
        let rss_per_active = target.map(|t| (t.rss_end.saturating_sub(fresh_rss)) as f64 / n.max(1) as f64);
        // Percentiles over every frame sent: a lost frame's round trip is infinite.
        let lost = r.sent.saturating_sub(r.received + r.late);
        r.rtt_us.extend(std::iter::repeat_n(crate::load::LOST_US, lost as usize));
        let mut phase = Self {
            path: path.name(),
            sessions: n,
            rtt: Summary::of(&mut r.rtt_us),
            lag: Summary::of(&mut r.lag_us),
            sent: r.sent,
            received: r.received,
            late: r.late,
            after_window: r.after_window,
            expected,
            failed_sessions: r.failed_sessions,
            window_s: r.window.as_secs_f64(),
            target_cpu_s: target.map(|t| t.cpu_s),
            echo_cpu_s: cpu("echo").unwrap_or(f64::NAN),
            generator_cpu_s: cpu("load generator").unwrap_or(f64::NAN),
            machine_busy_cores: r.machine_busy_cores,
            rss_per_active,
            tools_under_load: tools.map(|t| ToolRun::new(path, "under N=100 audio load", t)),
            rounds_cpu_per_10k: Vec::new(),
            rounds_echo_per_10k: Vec::new(),
            rounds_thread_sessions: Vec::new(),
            rtt_samples: r.rtt_us,
            lag_samples: r.lag_us,
        };
        // This phase is one round: its own CPU figure, the same one the table gives when pooled.
        phase.rounds_cpu_per_10k = phase.target_cpu_s.map(|cpu| phase.per_10k(cpu)).into_iter().collect();
        phase.rounds_echo_per_10k = vec![phase.per_10k(phase.echo_cpu_s)];
        phase
    }

    /// Pool another round of the same cell into this one.
    fn merge(&mut self, mut other: PathPhase) {
        self.rounds_cpu_per_10k.append(&mut other.rounds_cpu_per_10k);
        self.rounds_echo_per_10k.append(&mut other.rounds_echo_per_10k);
        self.rounds_thread_sessions.append(&mut other.rounds_thread_sessions);
        self.rtt_samples.append(&mut other.rtt_samples);
        self.lag_samples.append(&mut other.lag_samples);
        self.rtt = Summary::of(&mut self.rtt_samples);
        self.lag = Summary::of(&mut self.lag_samples);
        self.sent += other.sent;
        self.received += other.received;
        self.late += other.late;
        self.after_window += other.after_window;
        self.expected += other.expected;
        self.failed_sessions += other.failed_sessions;
        let w = self.window_s + other.window_s;
        self.machine_busy_cores = (self.machine_busy_cores * self.window_s + other.machine_busy_cores * other.window_s) / w;
        self.window_s = w;
        self.target_cpu_s = match (self.target_cpu_s, other.target_cpu_s) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.echo_cpu_s += other.echo_cpu_s;
        self.generator_cpu_s += other.generator_cpu_s;
        self.rss_per_active = match (self.rss_per_active, other.rss_per_active) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    /// Share of the real-time frame count that came back.
    pub fn delivered(&self) -> f64 {
        self.received as f64 / self.expected.max(1) as f64
    }

    /// Real time held: no session failed, ≥ 99 % of the frames back, p99 under the limit.
    pub fn holds(&self, p99_limit_ms: f64) -> bool {
        self.failed_sessions == 0 && self.delivered() >= 0.99 && self.rtt.p99 < p99_limit_ms
    }

    /// Frames relayed in the window, both directions counted (one round trip = 2 frames).
    fn relayed_frames(&self) -> f64 {
        (self.sent + self.received) as f64
    }

    /// Did more than 1 % of the frames counted in CPU per frame come back after the CPU window
    /// (a backlog: their CPU was spent after it, uncounted)? An echo of the window's last
    /// frames always comes back a round trip late; 1 % of a 6 s window is 60 ms of them.
    pub fn backlogged(&self) -> bool {
        self.after_window as f64 > 0.01 * self.relayed_frames()
    }

    fn per_10k(&self, cpu_s: f64) -> f64 {
        cpu_s / self.relayed_frames().max(1.0) * 10_000.0
    }
}

#[derive(Debug)]
pub struct ToolRun {
    pub path: &'static str,
    pub condition: &'static str,
    pub times: Summary,
    pub not_ok: usize,
}

impl ToolRun {
    pub fn new(path: Path, condition: &'static str, mut t: ToolTimes) -> Self {
        Self { path: path.name(), condition, times: Summary::of(&mut t.us), not_ok: t.not_ok }
    }
}

#[derive(Debug)]
pub struct IdleMemory {
    pub path: &'static str,
    pub sessions: usize,
    pub before: u64,
    pub after: u64,
    pub setup_s: f64,
}

impl IdleMemory {
    fn per_session(&self) -> f64 {
        self.after.saturating_sub(self.before) as f64 / self.sessions.max(1) as f64
    }
}

#[derive(Debug)]
pub struct CapacityStep {
    pub path: &'static str,
    pub sessions: usize,
    pub held: bool,
    pub p99: f64,
    pub delivered: f64,
    pub busy_cores: f64,
}

#[derive(Debug)]
pub struct Report {
    started: Instant,
    pub machine: String,
    pub frame_bytes: usize,
    pub options: String,
    /// Threads the bare relay ran on, and voxgate's sessions unless `--session-threads` said otherwise.
    pub threads: usize,
    /// `--session-threads` as given (`None`: voxgate's own default, one per CPU).
    pub session_threads: Option<usize>,
    pub phases: Vec<PathPhase>,
    pub tools: Vec<ToolRun>,
    pub idle: Vec<IdleMemory>,
    pub capacity: Vec<CapacityStep>,
    pub capacity_limit_ms: f64,
    /// Per path, the largest N that held real time.
    pub capacity_found: Vec<(&'static str, usize)>,
    /// write + fsync of one audit-sized line in the run's temp dir, back to back, ms.
    pub fsync: Option<Summary>,
    /// The same, one every `IDLE_TOOL_GAP` as the idle tool calls come, ms.
    pub fsync_spaced: Option<Summary>,
    pub errors: Vec<String>,
    /// What looks wrong but is no broken behaviour (an uneven spread of sessions over threads):
    /// printed, never an exit failure.
    pub warnings: Vec<String>,
    pub elapsed_s: f64,
}

impl Report {
    pub fn new(opts: &Options, frame_bytes: usize) -> Self {
        let session_threads = opts.session_threads.filter(|&n| n > 0);
        let t = opts.threads();
        let threads = match session_threads {
            Some(_) => format!("bare relay on {t} thread(s), voxgate on {t} session thread(s) (`--session-threads`)"),
            None => format!("bare relay on {t} thread(s), voxgate on its default session threads (one per CPU: {t})"),
        };
        let options = format!(
            "N = {:?}, {} round(s) × {:.0} s measured after {:.0} s warm-up, {} audio bytes per frame, send clock `{}`, {threads}",
            opts.sessions,
            opts.rounds,
            opts.measure.as_secs_f64(),
            opts.warmup.as_secs_f64(),
            opts.audio_bytes,
            opts.clock.name()
        );
        Self {
            started: Instant::now(),
            machine: crate::procfs::machine(),
            frame_bytes,
            options,
            threads: t,
            session_threads,
            phases: Vec::new(),
            tools: Vec::new(),
            idle: Vec::new(),
            capacity: Vec::new(),
            capacity_limit_ms: opts.capacity_p99_ms,
            capacity_found: Vec::new(),
            fsync: None,
            fsync_spaced: None,
            errors: Vec::new(),
            warnings: Vec::new(),
            elapsed_s: 0.0,
        }
    }

    pub fn clock(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    pub fn add_phase(&mut self, phase: PathPhase) {
        match self.phases.iter_mut().find(|p| p.path == phase.path && p.sessions == phase.sessions) {
            Some(existing) => existing.merge(phase),
            None => self.phases.push(phase),
        }
    }

    fn find(&self, path: Path, n: usize) -> Option<&PathPhase> {
        self.find_named(path.name(), n)
    }

    fn find_named(&self, path: &str, n: usize) -> Option<&PathPhase> {
        self.phases.iter().find(|p| p.path == path && p.sessions == n)
    }

    /// voxgate's CPU per frame over the relay's, round by round (round i of each path ran in the
    /// same round, back to back): one ratio per round, for runs of two rounds or more.
    fn cpu_round_ratios(&self, n: usize) -> Vec<f64> {
        self.round_ratios(n, |p| &p.rounds_cpu_per_10k)
    }

    /// The echo's CPU per frame in voxgate's phases over the relay's, round by round: the control.
    fn echo_round_ratios(&self, n: usize) -> Vec<f64> {
        self.round_ratios(n, |p| &p.rounds_echo_per_10k)
    }

    fn round_ratios(&self, n: usize, rounds: fn(&PathPhase) -> &Vec<f64>) -> Vec<f64> {
        let (Some(r), Some(v)) = (self.find(Path::Relay, n), self.find(Path::Voxgate, n)) else { return Vec::new() };
        if rounds(r).len() < 2 {
            return Vec::new();
        }
        rounds(r).iter().zip(rounds(v)).filter(|(r, _)| **r > 0.0).map(|(r, v)| v / r).collect()
    }

    /// RSS each session beyond the first adds, in bytes: the growth at `n` less the growth at
    /// N = 1, over n − 1 (needs an N = 1 phase of the same path in the run). What the first
    /// session brings is the process's, not a session's: mostly the pages of the executable that
    /// serve a session, read in when first run (`RssFile`, ≈ 1 MiB for voxgate), plus one-time
    /// set-up such as the upstream TLS configuration. In the plain growth ÷ N it weighs 1/N on
    /// every session, ≈ 10 KiB per session at N = 100 (docs/performance-history.md, ninth pass).
    fn rss_beyond_first(&self, path: &str, n: usize) -> Option<f64> {
        if n <= 1 {
            return None;
        }
        let growth = |n: usize| self.find_named(path, n)?.rss_per_active.map(|per| per * n as f64);
        Some((growth(n)? - growth(1)?) / (n - 1) as f64)
    }

    fn sessions(&self) -> Vec<usize> {
        let mut ns: Vec<usize> = self.phases.iter().map(|p| p.sessions).collect();
        ns.sort_unstable();
        ns.dedup();
        ns
    }

    /// What shows broken behaviour rather than a slow machine: a run error (a process that did
    /// not start, a phase that failed), and on the voxgate path a session that failed, a frame sent
    /// in the window whose echo never came back (within 30 s: a late echo is a timing), or a tool
    /// call answered with an error output.
    /// Timings never count: the CI smoke (`bench run --quick`) fails on these alone.
    pub fn broken(&self) -> Vec<String> {
        let mut broken = self.errors.clone();
        let voxgate = Path::Voxgate.name();
        for p in self.phases.iter().filter(|p| p.path == voxgate) {
            if p.failed_sessions > 0 {
                broken.push(format!("voxgate N={}: {} session(s) failed", p.sessions, p.failed_sessions));
            }
            let back = p.received + p.late;
            if back < p.sent {
                broken.push(format!("voxgate N={}: {} of {} frames sent in the window never came back", p.sessions, p.sent - back, p.sent));
            }
            if p.sent == 0 {
                broken.push(format!("voxgate N={}: no frame was sent", p.sessions));
            }
        }
        for t in self.tools.iter().filter(|t| t.path == voxgate) {
            if t.not_ok > 0 {
                broken.push(format!("voxgate tool dispatch ({}): {} error output(s)", t.condition, t.not_ok));
            }
        }
        broken
    }

    pub fn json(&self) -> Value {
        let summary = |x: &Summary| json!({"count": x.count, "p50_ms": x.p50, "p99_ms": x.p99, "p999_ms": x.p999, "max_ms": x.max});
        json!({
            "machine": self.machine,
            "options": self.options,
            "frame_bytes": self.frame_bytes,
            "relay_threads": self.threads,
            "voxgate_session_threads": self.session_threads,
            "elapsed_s": self.elapsed_s,
            "phases": self.phases.iter().map(|p| json!({
                "path": p.path, "sessions": p.sessions, "rtt": summary(&p.rtt), "send_lag": summary(&p.lag),
                "sent": p.sent, "received": p.received, "late": p.late, "echoes_after_window": p.after_window, "cpu_window_backlogged": p.backlogged(), "expected": p.expected, "failed_sessions": p.failed_sessions,
                "window_s": p.window_s, "target_cpu_s": p.target_cpu_s, "echo_cpu_s": p.echo_cpu_s,
                "generator_cpu_s": p.generator_cpu_s, "machine_busy_cores": p.machine_busy_cores,
                "rss_per_active_bytes": p.rss_per_active,
                "rss_beyond_first_bytes": self.rss_beyond_first(p.path, p.sessions),
                "rounds_cpu_per_10k": p.rounds_cpu_per_10k,
                "rounds_echo_cpu_per_10k": p.rounds_echo_per_10k,
                "rounds_thread_sessions": p.rounds_thread_sessions,
            })).collect::<Vec<_>>(),
            "tools": self.tools.iter().map(|t| json!({"path": t.path, "condition": t.condition, "times": summary(&t.times), "error_outputs": t.not_ok})).collect::<Vec<_>>(),
            "idle": self.idle.iter().map(|m| json!({"path": m.path, "sessions": m.sessions, "rss_before": m.before, "rss_after": m.after, "per_session_bytes": m.per_session()})).collect::<Vec<_>>(),
            "capacity": self.capacity.iter().map(|c| json!({"path": c.path, "sessions": c.sessions, "held": c.held, "p99_ms": c.p99, "delivered": c.delivered})).collect::<Vec<_>>(),
            "capacity_found": self.capacity_found.iter().map(|(p, n)| json!({"path": p, "sessions": n})).collect::<Vec<_>>(),
            "fsync": self.fsync.as_ref().map(summary),
            "fsync_spaced": self.fsync_spaced.as_ref().map(summary),
            "errors": self.errors,
            "warnings": self.warnings,
        })
    }
}
