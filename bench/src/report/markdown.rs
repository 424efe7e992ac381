//! The run's figures as Markdown tables, the form docs/performance.md quotes: latency and its
//! ratio to the bare relay, CPU per frame (pooled and round by round), sessions per thread, the
//! Python relay, tool dispatch, the fsync floor, idle memory and capacity.

use std::fmt::Write as _;

use super::{PathPhase, Report};
use crate::run::Path;
use crate::stats::Summary;

impl Report {
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "Machine: {}. Frames: {} bytes of JSON. {}. Run took {:.0} s.\n", self.machine, self.frame_bytes, self.options, self.elapsed_s);
        let _ = writeln!(s, "Round trip per frame (ms); added = path − direct at the same percentile:\n");
        let _ = writeln!(s, "| N | path | p50 | p99 | p99.9 | added p50 | added p99 | added p99.9 | delivered | generator send lag p99 |");
        let _ = writeln!(s, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for n in self.sessions() {
            let direct = self.find(Path::Direct, n);
            for path in [Path::Direct, Path::Relay, Path::Voxgate, Path::Python] {
                let Some(p) = self.find(path, n) else { continue };
                let added = |f: fn(&Summary) -> f64| match direct {
                    Some(d) if path != Path::Direct => format!("{:+.2}", f(&p.rtt) - f(&d.rtt)),
                    _ => "—".into(),
                };
                let _ = writeln!(
                    s,
                    "| {n} | {} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {:.2} % | {:.2} |",
                    p.path, p.rtt.p50, p.rtt.p99, p.rtt.p999, added(|r| r.p50), added(|r| r.p99), added(|r| r.p999),
                    p.delivered() * 100.0, p.lag.p99
                );
            }
        }
        let _ = writeln!(s, "\nvoxgate's added latency as a multiple of the bare relay's (— where the relay added under {RATIO_FLOOR_MS} ms: no ratio to take):\n");
        let _ = writeln!(s, "| N | p50 | p99 | p99.9 |");
        let _ = writeln!(s, "|---:|---:|---:|---:|");
        for n in self.sessions() {
            let (Some(d), Some(r), Some(v)) = (self.find(Path::Direct, n), self.find(Path::Relay, n), self.find(Path::Voxgate, n)) else { continue };
            let ratio = |f: fn(&Summary) -> f64| added_ratio(f(&v.rtt) - f(&d.rtt), f(&r.rtt) - f(&d.rtt));
            let _ = writeln!(s, "| {n} | {} | {} | {} |", ratio(|x| x.p50), ratio(|x| x.p99), ratio(|x| x.p999));
        }
        let _ = writeln!(s, "\nCPU seconds per 10k relayed frames (both directions counted) and machine load:\n");
        let t = self.threads;
        let _ = writeln!(s, "| N | bare relay ({t} thr.) | voxgate ({t} thr.) | voxgate ÷ relay | echo | load generator | machine busy (cores) relay / voxgate run | RSS growth ÷ N relay / voxgate | RSS per session beyond the first relay / voxgate |");
        let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for n in self.sessions() {
            let r = self.find(Path::Relay, n);
            let v = self.find(Path::Voxgate, n);
            let cpu = |p: Option<&PathPhase>| p.and_then(|p| p.target_cpu_s.map(|c| p.per_10k(c)));
            let flag = |p: Option<&PathPhase>| if p.is_some_and(PathPhase::backlogged) { " †" } else { "" };
            let any = v.or(r);
            let _ = writeln!(
                s,
                "| {n} | {}{} | {}{} | {} | {} | {} | {} / {} | {} / {} | {} / {} |",
                fmt3(cpu(r)),
                flag(r),
                fmt3(cpu(v)),
                flag(v),
                match (cpu(v), cpu(r)) { (Some(a), Some(b)) => ratio(a, b), _ => "—".into() },
                fmt3(any.map(|p| p.per_10k(p.echo_cpu_s))),
                fmt3(any.map(|p| p.per_10k(p.generator_cpu_s))),
                fmt2(r.map(|p| p.machine_busy_cores)),
                fmt2(v.map(|p| p.machine_busy_cores)),
                kib(r.and_then(|p| p.rss_per_active)),
                kib(v.and_then(|p| p.rss_per_active)),
                kib(self.rss_beyond_first(Path::Relay.name(), n)),
                kib(self.rss_beyond_first(Path::Voxgate.name(), n)),
            );
        }
        let backlogged = [Path::Relay, Path::Voxgate].iter().any(|&path| self.sessions().into_iter().any(|n| self.find(path, n).is_some_and(PathPhase::backlogged)));
        if backlogged {
            let _ = writeln!(s, "\n† More than 1 % of the frames counted came back after the CPU window: the path fell behind, and the CPU it spent on them after the window is not counted, so the figure is too low.");
        }
        self.cpu_rounds_markdown(&mut s);
        self.thread_sessions_markdown(&mut s);
        if self.phases.iter().any(|p| p.path == Path::Python.name()) {
            let _ = writeln!(s, "\nAgainst the Python relay (websockets, `json.loads` per event), same run:\n");
            let _ = writeln!(s, "| N | path | added p99 (ms) | CPU s per 10k frames | CPU ÷ bare relay | RSS per active session | delivered |");
            let _ = writeln!(s, "|---:|---|---:|---:|---:|---:|---:|");
            for n in self.sessions() {
                let direct = self.find(Path::Direct, n);
                let relay_cpu = self.find(Path::Relay, n).and_then(|p| p.target_cpu_s.map(|c| p.per_10k(c)));
                for path in [Path::Relay, Path::Voxgate, Path::Python] {
                    let Some(p) = self.find(path, n) else { continue };
                    let cpu = p.target_cpu_s.map(|c| p.per_10k(c));
                    let _ = writeln!(
                        s,
                        "| {n} | {} | {} | {} | {} | {} | {:.2} % |",
                        p.path,
                        direct.map_or("—".into(), |d| format!("{:+.2}", p.rtt.p99 - d.rtt.p99)),
                        fmt3(cpu),
                        match (cpu, relay_cpu) { (Some(a), Some(b)) => ratio(a, b), _ => "—".into() },
                        kib(p.rss_per_active),
                        p.delivered() * 100.0,
                    );
                }
            }
        }
        if !self.tools.is_empty() {
            let _ = writeln!(s, "\nTool dispatch, `arguments.done` sent → `function_call_output` received by the upstream (ms). Direct and bare relay: the client answers with a canned output; voxgate: voxgate runs `calculate_medical_score` (BMI):\n");
            let _ = writeln!(s, "| path | condition | calls | p50 | p99 | p99.9 | max | error outputs |");
            let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|");
            for t in &self.tools {
                let _ = writeln!(s, "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {} |", t.path, t.condition, t.times.count, t.times.p50, t.times.p99, t.times.p999, t.times.max, t.not_ok);
            }
        }
        let spaced = format!("one every {} ms, as the idle tool calls come", crate::run::IDLE_TOOL_GAP.as_millis());
        for (f, how) in [(&self.fsync, "back to back"), (&self.fsync_spaced, spaced.as_str())] {
            if let Some(f) = f {
                let _ = writeln!(s, "\nfsync floor, {how} (write + fdatasync of one 400-byte line next to the audit log, ms): p50 {:.3}, p99 {:.3}, p99.9 {:.3}, max {:.3}.", f.p50, f.p99, f.p999, f.max);
            }
        }
        if !self.idle.is_empty() {
            let _ = writeln!(s, "\nMemory per idle session (VmRSS growth after opening the sessions, then 2 s quiet):\n");
            let _ = writeln!(s, "| path | sessions | RSS before | RSS after | per session | setup time |");
            let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|");
            for m in &self.idle {
                let _ = writeln!(s, "| {} | {} | {:.1} MiB | {:.1} MiB | {:.1} KiB | {:.1} s |", m.path, m.sessions, mib(m.before), mib(m.after), m.per_session() / 1024.0, m.setup_s);
            }
        }
        if !self.capacity.is_empty() {
            let _ = writeln!(s, "\nCapacity (real time held = every session alive, ≥ 99 % of frames back, p99 < {} ms):\n", self.capacity_limit_ms);
            let _ = writeln!(s, "| path | N | held | p99 (ms) | delivered | machine busy (cores) |");
            let _ = writeln!(s, "|---|---:|---|---:|---:|---:|");
            for c in &self.capacity {
                let _ = writeln!(s, "| {} | {} | {} | {:.2} | {:.2} % | {:.2} |", c.path, c.sessions, if c.held { "yes" } else { "no" }, c.p99, c.delivered * 100.0, c.busy_cores);
            }
            for (path, n) in &self.capacity_found {
                let _ = writeln!(s, "\nLargest N that held real time, {path}: {n}.");
            }
        }
        for w in &self.warnings {
            let _ = writeln!(s, "\nWARNING: {w}");
        }
        for e in &self.errors {
            let _ = writeln!(s, "\nERROR: {e}");
        }
        s
    }

    /// The per-round ratios under the CPU table: their spread says whether a pooled ratio near a
    /// goal is above or below it beyond the machine's drift, and the echo's ratio over the same
    /// rounds (the same work in both phases) shows how much of it the machine moved.
    fn cpu_rounds_markdown(&self, s: &mut String) {
        let rows: Vec<(usize, Vec<f64>, Vec<f64>)> = self
            .sessions()
            .into_iter()
            .map(|n| (n, self.cpu_round_ratios(n), self.echo_round_ratios(n)))
            .filter(|(_, r, _)| !r.is_empty())
            .collect();
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(s, "\nvoxgate ÷ relay CPU per 10k frames, round by round (each round's two phases ran back to back, relay first in odd-numbered rounds and voxgate first in even-numbered ones), and the echo's own ratio in the same phases (its work is the same on both paths):\n");
        let _ = writeln!(s, "| N | per round | median | lowest – highest | echo: median | echo: lowest – highest |");
        let _ = writeln!(s, "|---:|---|---:|---:|---:|---:|");
        for (n, ratios, echo) in rows {
            let listed = ratios.iter().map(|r| format!("{r:.2}×")).collect::<Vec<_>>().join(", ");
            let (median, low, high) = spread(ratios);
            let (echo_median, echo_low, echo_high) = spread(echo);
            let _ = writeln!(s, "| {n} | {listed} | {median:.2}× | {low:.2}× – {high:.2}× | {echo_median:.2}× | {echo_low:.2}× – {echo_high:.2}× |");
        }
    }

    /// How the relay's and voxgate's sessions were spread over their threads once open, round by
    /// round: an even spread is what makes their thread counts (in the CPU table) comparable.
    fn thread_sessions_markdown(&self, s: &mut String) {
        let rows: Vec<&PathPhase> = self.phases.iter().filter(|p| !p.rounds_thread_sessions.is_empty()).collect();
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(s, "\nSessions per thread once the phase's sessions were open (from the server's own counts, the reading's connection taken off), round by round:\n");
        let _ = writeln!(s, "| N | path | threads | sessions per thread |");
        let _ = writeln!(s, "|---:|---|---:|---|");
        for p in rows {
            let threads = p.rounds_thread_sessions.iter().map(Vec::len).max().unwrap_or(0);
            let listed = p.rounds_thread_sessions.iter().map(|c| c.iter().map(i64::to_string).collect::<Vec<_>>().join(" / ")).collect::<Vec<_>>().join("; ");
            let _ = writeln!(s, "| {} | {} | {threads} | {listed} |", p.sessions, p.path);
        }
    }
}

/// Below this added latency (ms) the relay's figure is noise around zero (its p99 can fall under
/// direct's): a ratio to it would read as anything from negative to huge.
const RATIO_FLOOR_MS: f64 = 0.02;

/// voxgate's added latency over the relay's, or "—" when the relay's is under [`RATIO_FLOOR_MS`].
fn added_ratio(voxgate_ms: f64, relay_ms: f64) -> String {
    if relay_ms < RATIO_FLOOR_MS { "—".into() } else { ratio(voxgate_ms, relay_ms) }
}

/// Median, lowest and highest (NaN for none).
fn spread(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let (Some(&low), Some(&high)) = (values.first(), values.last()) else { return (f64::NAN, f64::NAN, f64::NAN) };
    let mid = values.len() / 2;
    let median = if values.len().is_multiple_of(2) { (values[mid - 1] + values[mid]) / 2.0 } else { values[mid] };
    (median, low, high)
}

fn ratio(a: f64, b: f64) -> String {
    if b.abs() < 1e-9 || !a.is_finite() || !b.is_finite() { "—".into() } else { format!("{:.2}×", a / b) }
}

fn fmt3(v: Option<f64>) -> String {
    v.map_or("—".into(), |v| format!("{v:.3}"))
}

fn fmt2(v: Option<f64>) -> String {
    v.map_or("—".into(), |v| format!("{v:.2}"))
}

fn kib(v: Option<f64>) -> String {
    v.map_or("—".into(), |v| format!("{:.1} KiB", v / 1024.0))
}

fn mib(v: u64) -> f64 {
    v as f64 / (1024.0 * 1024.0)
}
