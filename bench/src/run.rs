//! `bench run`: one complete measurement, every path in the same run so that the ratios compare
//! like with like on a shared, noisy machine.
//!
//! Order: for each N, rounds of {direct, bare relay, voxgate} in ABBA order (direct, relay, voxgate,
//! then voxgate, relay, direct: neither server always runs first, and the two run back to back in
//! every round); then inline-tool dispatch (idle, and under N = 100 audio load in full mode), memory
//! per idle session and the capacity search, each path after the other in the base order (relay
//! before voxgate); then every path again at the bare relay's capacity, in ABBA rounds (the latency
//! goal is judged there too). The relay and voxgate are started fresh for every phase so each one's
//! memory baseline is its own; the echo lives for the whole run. The relay runs on as many threads
//! as voxgate's sessions (`--session-threads`, else one per CPU), and after each phase's sessions
//! are open both servers' per-thread counts are read (`placement.rs`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::children::{self, Running};
use crate::client;
use crate::clock::Clock;
use crate::frames::AppendTemplate;
use crate::load::{self, PhasePlan, PhaseResult, Probe};
use crate::placement;
use crate::procfs;
use crate::report::{CapacityStep, IdleMemory, PathPhase, Report, ToolRun};
use crate::tools;

/// The pause between one idle tool call's answer and the next call (and between the spaced fsync
/// probes, which stand for those calls' audit commits).
pub const IDLE_TOOL_GAP: Duration = Duration::from_millis(5);
/// The capacity search stops once the smallest N that missed real time is within this factor of
/// the largest that held: ±2 %, so that a ratio of two capacities near 0.95 can be told from
/// 0.87 (with 10 %, a voxgate capacity of 820 against the relay's 940 could be anything from
/// 0.80× to 0.96×). Each step more is one phase of a few seconds per path.
const CAPACITY_RESOLUTION: f64 = 1.04;
/// Appends per fsync probe.
const FSYNC_PROBES: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    Direct,
    Relay,
    Voxgate,
    /// The Python relay (`--python`): websockets + `json.loads` per event.
    Python,
}

impl Path {
    pub fn name(self) -> &'static str {
        match self {
            Path::Direct => "direct",
            Path::Relay => "bare relay",
            Path::Voxgate => "voxgate",
            Path::Python => "python relay",
        }
    }

    /// Is the client the one that answers tool calls on this path (everything but voxgate)?
    pub fn client_answers_tools(self) -> bool {
        self != Path::Voxgate
    }

    /// The series its per-thread session counts are served under, for a path that has threads.
    fn thread_series(self) -> Option<&'static str> {
        match self {
            Path::Relay => Some(crate::relay::THREAD_SERIES),
            Path::Voxgate => Some(placement::VOXGATE_SERIES),
            Path::Direct | Path::Python => None,
        }
    }
}

/// The order of the paths in round `round` (from 0): the base order, then reversed (ABBA), so
/// neither the relay nor voxgate always runs first, and adjacent paths stay adjacent.
pub fn round_order(paths: &[Path], round: usize) -> Vec<Path> {
    let mut order = paths.to_vec();
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

#[derive(Debug, Clone)]
pub struct Options {
    pub sessions: Vec<usize>,
    pub warmup: Duration,
    pub measure: Duration,
    pub rounds: usize,
    pub audio_bytes: usize,
    pub tool_calls: usize,
    pub tools_under_load: bool,
    pub idle_sessions: usize,
    pub capacity: bool,
    pub capacity_p99_ms: f64,
    pub voxgate: Option<PathBuf>,
    /// voxgate's `server.session_threads`, when set; the relay's thread count either way.
    pub session_threads: Option<usize>,
    /// How the generator times its sends.
    pub clock: Clock,
    /// Python interpreter with `websockets`: adds the Python relay as a fourth path.
    pub python: Option<PathBuf>,
    pub setup_parallelism: usize,
}

impl Options {
    /// The threads the relay and (by its own default when not set) voxgate run sessions on:
    /// `--session-threads`, else one per CPU, as voxgate's `session_threads = 0`.
    pub fn threads(&self) -> usize {
        self.session_threads.filter(|&n| n > 0).unwrap_or_else(crate::relay::default_threads)
    }
}

struct Ctx {
    opts: Options,
    tmp: PathBuf,
    echo: Running,
    voxgate: Option<PathBuf>,
    plan: PhasePlan,
    report: Report,
}

pub async fn run(opts: Options) -> anyhow::Result<Report> {
    let started = Instant::now();
    let tmp = std::env::temp_dir().join(format!("voxgate-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).context("creating the temp dir")?;
    let echo = children::echo(&tmp).await?;
    let voxgate = children::voxgate_binary(opts.voxgate.clone());
    let template = Arc::new(AppendTemplate::new(opts.audio_bytes));
    let mut report = Report::new(&opts, template.len());
    if voxgate.is_none() {
        report.errors.push("voxgate binary not found next to bench (cargo build --release --bin voxgate, or --voxgate PATH); voxgate path skipped".into());
    }
    let plan = PhasePlan { warmup: opts.warmup, measure: opts.measure, template, epoch: std::time::Instant::now(), clock: opts.clock };
    let mut ctx = Ctx { opts, tmp, echo, voxgate, plan, report };

    let sessions = ctx.opts.sessions.clone();
    for &n in &sessions {
        ctx.rounds_at(n).await;
    }
    for path in ctx.paths() {
        ctx.tool_dispatch(path).await;
    }
    if ctx.opts.tool_calls > 0 {
        ctx.fsync_floor().await;
    }
    if ctx.opts.idle_sessions > 0 {
        let servers: Vec<Path> = ctx.paths().into_iter().filter(|&p| p != Path::Direct).collect();
        for path in servers {
            ctx.idle_memory(path).await;
        }
    }
    if ctx.opts.capacity {
        for path in [Path::Relay, Path::Voxgate] {
            ctx.capacity(path).await;
        }
        // Added latency is also judged at the relay's own capacity: every path there, in rounds
        // like the main phases, so the round-trip and ratio tables get a row for that N.
        let relay_capacity = ctx.report.capacity_found.iter().find(|(p, _)| *p == Path::Relay.name()).map(|&(_, n)| n);
        if let Some(n) = relay_capacity.filter(|n| *n > 0 && !sessions.contains(n)) {
            eprintln!("[{:>5.0}s] every path at the bare relay's capacity, N={n} …", ctx.report.clock());
            ctx.rounds_at(n).await;
        }
    }
    ctx.report.elapsed_s = started.elapsed().as_secs_f64();
    if let Err(err) = ctx.echo.stop().await {
        ctx.report.errors.push(format!("stopping: {err:#}"));
    }
    let _ = std::fs::remove_dir_all(&ctx.tmp);
    Ok(ctx.report)
}

impl Ctx {
    /// Stop a server a phase started; how it ended is an error of the run unless it exited
    /// cleanly on SIGTERM (children.rs says why that matters).
    async fn stopped(&mut self, process: Running) {
        if let Err(err) = process.stop().await {
            self.report.errors.push(format!("stopping: {err:#}"));
        }
    }

    /// The paths measured, in their base order.
    fn paths(&self) -> Vec<Path> {
        let mut paths = vec![Path::Direct, Path::Relay, Path::Voxgate];
        if self.opts.python.is_some() {
            paths.push(Path::Python);
        }
        paths
    }

    /// Start what serves `path` (nothing for direct) and return it with the URL to dial.
    async fn target(&self, path: Path) -> anyhow::Result<(Option<Running>, String)> {
        match path {
            Path::Direct => Ok((None, self.echo.url())),
            Path::Relay => {
                let relay = children::relay(&self.tmp, &self.echo.url(), self.opts.threads()).await?;
                let url = relay.url();
                Ok((Some(relay), url))
            }
            Path::Voxgate => {
                let binary = self.voxgate.as_ref().context("no voxgate binary")?;
                let voxgate = children::voxgate(binary, &self.tmp, &self.echo.url(), self.opts.session_threads).await?;
                let url = voxgate.url();
                Ok((Some(voxgate), url))
            }
            Path::Python => {
                let python = self.opts.python.as_ref().context("no --python interpreter")?;
                let relay = children::python_relay(python, &self.tmp, &self.echo.url()).await?;
                let url = relay.url();
                Ok((Some(relay), url))
            }
        }
    }

    fn skip(&self, path: Path) -> bool {
        path == Path::Voxgate && self.voxgate.is_none()
    }

    /// One measured phase of `n` sessions on `path`; failures are recorded, not fatal.
    async fn phase(&mut self, path: Path, n: usize) -> Option<PathPhase> {
        if self.skip(path) {
            return None;
        }
        eprintln!("[{:>5.0}s] {} N={n} …", self.report.clock(), path.name());
        match self.phase_inner(path, n, false).await {
            Ok(phase) => {
                eprintln!(
                    "         p50 {:.2} ms  p99 {:.2} ms  delivered {}/{}  busy {:.2} cores",
                    phase.rtt.p50, phase.rtt.p99, phase.received, phase.expected, phase.machine_busy_cores
                );
                Some(phase)
            }
            Err(err) => {
                let message = format!("{} N={n}: {err:#}", path.name());
                eprintln!("         FAILED: {message}");
                self.report.errors.push(message);
                None
            }
        }
    }

    async fn phase_inner(&mut self, path: Path, n: usize, with_tools: bool) -> anyhow::Result<PathPhase> {
        let (process, url) = self.target(path).await?;
        let result = self.measure(path, n, with_tools, process.as_ref(), &url).await;
        if let Some(process) = process {
            self.stopped(process).await;
        }
        result
    }

    async fn measure(&mut self, path: Path, n: usize, with_tools: bool, process: Option<&Running>, url: &str) -> anyhow::Result<PathPhase> {
        let fresh_rss = process.and_then(|p| procfs::rss_bytes(p.pid)).unwrap_or(0);
        let sessions = client::open_many(url, n, self.opts.setup_parallelism).await?;
        let thread_sessions = self.thread_sessions(path, n, process).await;
        let mut probes = vec![Probe { name: "echo".into(), pid: self.echo.pid }, Probe { name: "load generator".into(), pid: std::process::id() }];
        if let Some(process) = process {
            probes.insert(0, Probe { name: process.name.clone(), pid: process.pid });
        }
        let tool_task = if with_tools {
            let ws = client::open(url, Duration::from_secs(30)).await?;
            let calls = (self.opts.warmup + self.opts.measure).as_millis() as usize / 50;
            Some(tokio::spawn(tools::run(ws, calls.max(1), path.client_answers_tools(), Duration::from_millis(40))))
        } else {
            None
        };
        let result: PhaseResult = load::run(sessions, &self.plan, &probes).await?;
        let tools = match tool_task {
            Some(task) => Some(task.await.context("tool task panicked")??),
            None => None,
        };
        let expected = (n as f64 * self.opts.measure.as_secs_f64() / load::FRAME_INTERVAL.as_secs_f64()).round() as u64;
        let mut phase = PathPhase::from_result(path, n, expected, fresh_rss, result, tools);
        phase.rounds_thread_sessions.extend(thread_sessions);
        Ok(phase)
    }

    /// The server's sessions per thread, read once `n` sessions are open (the scrape's own
    /// connection taken off); an uneven spread or a failed read is a warning.
    async fn thread_sessions(&mut self, path: Path, n: usize, process: Option<&Running>) -> Option<Vec<i64>> {
        let (series, process) = (path.thread_series()?, process?);
        match placement::scrape(process.addr, series).await {
            Ok(scraped) => {
                let counts = placement::without_scrape(&scraped);
                eprintln!("         sessions per thread {counts:?}");
                if let Some(warning) = placement::imbalance(&counts, n) {
                    self.report.warnings.push(format!("{} N={n}: {warning}", path.name()));
                }
                Some(counts)
            }
            Err(err) => {
                self.report.warnings.push(format!("{} N={n}: sessions per thread not read: {err:#}", path.name()));
                None
            }
        }
    }

    async fn tool_dispatch(&mut self, path: Path) {
        if self.skip(path) || self.opts.tool_calls == 0 {
            return;
        }
        eprintln!("[{:>5.0}s] tool dispatch, {} …", self.report.clock(), path.name());
        let outcome: anyhow::Result<ToolRun> = async {
            let (process, url) = self.target(path).await?;
            let ws = client::open(&url, Duration::from_secs(30)).await?;
            let times = tools::run(ws, self.opts.tool_calls, path.client_answers_tools(), IDLE_TOOL_GAP).await;
            if let Some(process) = process {
                self.stopped(process).await;
            }
            Ok(ToolRun::new(path, "idle", times?))
        }
        .await;
        match outcome {
            Ok(run) => self.report.tools.push(run),
            Err(err) => self.report.errors.push(format!("tool dispatch {}: {err:#}", path.name())),
        }
        if self.opts.tools_under_load {
            eprintln!("[{:>5.0}s] tool dispatch under N=100 audio load, {} …", self.report.clock(), path.name());
            match self.phase_inner(path, 100, true).await {
                Ok(phase) => {
                    if let Some(run) = phase.tools_under_load {
                        self.report.tools.push(run);
                    }
                }
                Err(err) => self.report.errors.push(format!("tool dispatch under load {}: {err:#}", path.name())),
            }
        }
    }

    async fn idle_memory(&mut self, path: Path) {
        if self.skip(path) {
            return;
        }
        let n = self.opts.idle_sessions;
        eprintln!("[{:>5.0}s] idle memory, {} × {n} …", self.report.clock(), path.name());
        let outcome: anyhow::Result<IdleMemory> = async {
            let (process, url) = self.target(path).await?;
            let process = process.context("idle memory needs a process")?;
            // One session first, so lazily built state (tool catalogue, pools) is in the baseline.
            let warm = client::open(&url, Duration::from_secs(30)).await?;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let before = procfs::rss_bytes(process.pid).unwrap_or(0);
            let setup = Instant::now();
            let sessions = client::open_many(&url, n, self.opts.setup_parallelism).await;
            let setup_s = setup.elapsed().as_secs_f64();
            tokio::time::sleep(Duration::from_secs(2)).await;
            let after = procfs::rss_bytes(process.pid).unwrap_or(0);
            if let Ok(sessions) = sessions.as_ref().map(Vec::len) {
                eprintln!("         {sessions} sessions in {setup_s:.1} s");
            }
            let sessions = sessions?;
            client::close_all(sessions).await;
            client::close_all(vec![warm]).await;
            self.stopped(process).await;
            Ok(IdleMemory { path: path.name(), sessions: n, before, after, setup_s })
        }
        .await;
        match outcome {
            Ok(idle) => self.report.idle.push(idle),
            Err(err) => self.report.errors.push(format!("idle memory {}: {err:#}", path.name())),
        }
    }

    /// Rounds of every path at `n` sessions, in ABBA order ([`round_order`]).
    async fn rounds_at(&mut self, n: usize) {
        for round in 0..self.opts.rounds {
            for path in round_order(&self.paths(), round) {
                if let Some(phase) = self.phase(path, n).await {
                    self.report.add_phase(phase);
                }
            }
        }
    }

    /// Largest N that keeps real time: every session alive, ≥ 99 % of frames back, p99 under the
    /// limit. Starts from the main phases' verdicts (the largest N that held, the smallest that did
    /// not), doubles until a miss, then bisects until the smallest miss is within
    /// [`CAPACITY_RESOLUTION`] of the largest hold.
    async fn capacity(&mut self, path: Path) {
        if self.skip(path) {
            return;
        }
        let limit = self.opts.capacity_p99_ms;
        let mine = || self.report.phases.iter().filter(move |p| p.path == path.name());
        let mut held = mine().filter(|p| p.holds(limit)).map(|p| p.sessions).max().unwrap_or(0);
        let mut missed = mine().filter(|p| !p.holds(limit)).map(|p| p.sessions).min();
        const CEILING: usize = 8000;
        loop {
            let n = match missed {
                None if held >= CEILING => break,
                None => (held.max(50) * 2).min(CEILING),
                Some(miss) if held > 0 && miss as f64 / held as f64 <= CAPACITY_RESOLUTION => break,
                Some(miss) if miss <= 1 => break,
                Some(miss) => (held + miss) / 2 / 10 * 10,
            };
            if n <= held {
                break;
            }
            eprintln!("[{:>5.0}s] capacity, {} N={n} …", self.report.clock(), path.name());
            let step = match self.phase_inner(path, n, false).await {
                Ok(phase) => {
                    eprintln!("         p99 {:.2} ms  delivered {}/{}", phase.rtt.p99, phase.received, phase.expected);
                    CapacityStep { path: path.name(), sessions: n, held: phase.holds(limit), p99: phase.rtt.p99, delivered: phase.delivered(), busy_cores: phase.machine_busy_cores }
                }
                Err(err) => {
                    eprintln!("         FAILED: {err:#}");
                    CapacityStep { path: path.name(), sessions: n, held: false, p99: f64::NAN, delivered: 0.0, busy_cores: f64::NAN }
                }
            };
            if step.held {
                held = n;
            } else {
                missed = Some(missed.map_or(n, |m| m.min(n)));
            }
            self.report.capacity.push(step);
        }
        self.report.capacity_found.push((path.name(), held));
    }

    /// What one durable append costs on the disk the audit log is on: voxgate answers a tool call
    /// only after its `call_finished` record is fsynced, so this is the floor of inline dispatch.
    /// Measured twice: back to back, and spaced like the idle tool calls ([`IDLE_TOOL_GAP`]). On a
    /// VM an fsync issued after the machine went idle costs more than one issued while it is busy
    /// syncing (0.15 against 0.46 ms p50 on the machine of docs/performance.md), and a lone tool
    /// call meets the second.
    async fn fsync_floor(&mut self) {
        self.report.fsync = self.fsync_probe(None).await;
        self.report.fsync_spaced = self.fsync_probe(Some(IDLE_TOOL_GAP)).await;
    }

    async fn fsync_probe(&mut self, gap: Option<Duration>) -> Option<crate::stats::Summary> {
        use std::io::Write as _;
        let outcome: std::io::Result<Vec<u32>> = async {
            let path = self.tmp.join("fsync-probe.jsonl");
            let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
            let line = format!("{}\n", "x".repeat(400));
            let mut times = Vec::with_capacity(FSYNC_PROBES);
            for _ in 0..FSYNC_PROBES {
                if let Some(gap) = gap {
                    tokio::time::sleep(gap).await;
                }
                let t = Instant::now();
                file.write_all(line.as_bytes())?;
                file.sync_data()?;
                times.push(t.elapsed().as_micros() as u32);
            }
            let _ = std::fs::remove_file(&path);
            Ok(times)
        }
        .await;
        match outcome {
            Ok(mut times) => Some(crate::stats::Summary::of(&mut times)),
            Err(err) => {
                self.report.errors.push(format!("fsync probe: {err}"));
                None
            }
        }
    }
}
