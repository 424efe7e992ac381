//! `bench`: voxgate's load generator and the two reference servers it measures voxgate against.
//!
//! - `bench run [--quick] [--python PY]` — the measurement (see docs/performance.md): an echo upstream, then N
//!   concurrent real-time audio sessions directly to the echo, through a bare relay, and through
//!   voxgate, with round-trip percentiles, CPU per frame, memory per session, tool dispatch time
//!   and the largest N that keeps real time. Prints Markdown; `--json FILE` keeps the raw figures.
//! - `bench echo` — the echo upstream alone (`listening on ADDR` on stdout).
//! - `bench relay --upstream URL [--threads N]` — the bare relay alone, on N threads (default: one
//!   per CPU, voxgate's default).
//!
//! Each server is its own process so that the kernel's per-process accounting measures all of them
//! the same way.

mod children;
mod client;
mod clock;
mod echo;
mod frames;
mod load;
mod placement;
mod procfs;
mod relay;
mod report;
mod run;
mod stats;
mod tools;

#[cfg(test)]
mod smoke;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "bench", about = "voxgate load generator")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure direct vs bare relay vs voxgate.
    Run(RunArgs),
    /// Serve the echo upstream.
    Echo {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
    },
    /// Serve the bare relay in front of an upstream.
    Relay {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        #[arg(long)]
        upstream: String,
        /// Threads the connections are spread over (least-loaded placement, each connection on
        /// one thread for its whole life); default one per CPU, as voxgate's session threads.
        #[arg(long)]
        threads: Option<usize>,
    },
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// CI smoke: N = 1 and 100, short phases, no memory or capacity search (about 30 s). Like
    /// every run, exits non-zero on broken behaviour only (lost frames, failed sessions, error
    /// outputs, a process that did not start), never on timings; works with debug binaries.
    #[arg(long)]
    quick: bool,
    /// Session counts to measure (default 1,100,1000; quick: 1,100).
    #[arg(long, value_delimiter = ',')]
    sessions: Option<Vec<usize>>,
    /// Seconds measured per phase and round.
    #[arg(long)]
    measure: Option<f64>,
    /// Seconds of warm-up before each measure window.
    #[arg(long)]
    warmup: Option<f64>,
    /// Rounds per (N, path), in rotating path order.
    #[arg(long)]
    rounds: Option<usize>,
    /// PCM bytes per audio frame. 1920 gives the ≈2.6 KB JSON frame of the issue; true 20 ms of
    /// 24 kHz mono PCM16 is 960.
    #[arg(long, default_value_t = 1920)]
    audio_bytes: usize,
    /// Sequential tool calls per path.
    #[arg(long)]
    tool_calls: Option<usize>,
    /// Sessions for the idle-memory measurement (0 = skip). voxgate holds two sockets per session,
    /// so the fd limit caps this.
    #[arg(long)]
    idle_sessions: Option<usize>,
    /// Skip the capacity search.
    #[arg(long)]
    no_capacity: bool,
    /// p99 limit (ms) for "real time held".
    #[arg(long, default_value_t = 50.0)]
    capacity_p99_ms: f64,
    /// voxgate binary (default: `voxgate` next to this binary: target/production/voxgate, or
    /// target/release/ or target/debug/ for a bench built with that profile).
    #[arg(long)]
    voxgate: Option<PathBuf>,
    /// voxgate's `server.session_threads` and the bare relay's thread count (default: voxgate's
    /// own, one per CPU, for both). 1 runs every session on one thread, as a pod limited to one
    /// CPU does.
    #[arg(long)]
    session_threads: Option<usize>,
    /// How the generator times its sends: `wheel` (each session's tokio interval; its 1 ms
    /// resolution sends the frames of one millisecond together) or `spread` (one thread sleeping
    /// to each frame's own instant, as independent clients send). See docs/performance.md.
    #[arg(long, value_enum, default_value_t = clock::Clock::Wheel)]
    clock: clock::Clock,
    /// Also measure the Python relay (websockets + `json.loads` per event, the VoiceRAG/LiteLLM
    /// pattern) with this interpreter, which needs the `websockets` package.
    #[arg(long)]
    python: Option<PathBuf>,
    /// Write the raw figures as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Run(args) => run(args),
        Command::Echo { listen } => serve_current_thread(listen, None),
        Command::Relay { listen, upstream, threads } => {
            let threads = threads.filter(|&n| n > 0).unwrap_or_else(relay::default_threads);
            serve_current_thread(listen, Some((upstream, threads)))
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("bench: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The echo runs on one thread: on two cores that is the cheaper runtime, and its work is the same
/// on every path. The relay accepts on this thread and relays on its own `threads`.
fn serve_current_thread(listen: String, upstream: Option<(String, usize)>) -> anyhow::Result<()> {
    raise_fd_limit();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("runtime")?;
    runtime.block_on(async move {
        // Before the address is announced: the bench may stop a server as soon as it has it.
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).context("SIGTERM handler")?;
        let listener = tokio::net::TcpListener::bind(&listen).await.with_context(|| format!("binding {listen}"))?;
        println!("listening on {}", listener.local_addr().context("local addr")?);
        let serve = async move {
            match upstream {
                None => echo::serve(listener).await,
                Some((upstream, threads)) => relay::serve(listener, upstream, threads).await,
            }
        };
        // SIGTERM ends the server by returning from `main`: exit handlers run, which is when a
        // profile-instrumented build (scripts/build-pgo) writes its profile.
        tokio::select! {
            served = serve => served,
            _ = term.recv() => Ok(()),
        }
    })
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let limit = raise_fd_limit();
    let quick = args.quick;
    let secs = |v: Option<f64>, quick_default: f64, full_default: f64| Duration::from_secs_f64(v.unwrap_or(if quick { quick_default } else { full_default }));
    // voxgate needs two descriptors per session, the generator one: keep clear of the limit.
    let idle_cap = (limit.saturating_sub(200) / 2) as usize;
    let idle_default = if quick { 0 } else { 10_000usize.min(idle_cap / 100 * 100) };
    let options = run::Options {
        sessions: args.sessions.unwrap_or_else(|| if quick { vec![1, 100] } else { vec![1, 100, 1000] }),
        warmup: secs(args.warmup, 1.0, 2.0),
        measure: secs(args.measure, 3.0, 6.0),
        rounds: args.rounds.unwrap_or(if quick { 1 } else { 2 }).max(1),
        audio_bytes: args.audio_bytes,
        tool_calls: args.tool_calls.unwrap_or(if quick { 100 } else { 500 }),
        tools_under_load: !quick,
        idle_sessions: args.idle_sessions.unwrap_or(idle_default).min(idle_cap),
        capacity: !quick && !args.no_capacity,
        capacity_p99_ms: args.capacity_p99_ms,
        voxgate: args.voxgate,
        session_threads: args.session_threads,
        clock: args.clock,
        python: args.python,
        setup_parallelism: 64,
    };
    // The generator gets both cores' worth of workers: it must never be what limits a run.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("runtime")?;
    let report = runtime.block_on(run::run(options))?;
    println!("{}", report.markdown());
    if let Some(path) = args.json {
        let text = serde_json::to_string_pretty(&report.json()).context("encoding the report")?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    let broken = report.broken();
    if !broken.is_empty() {
        anyhow::bail!("broken behaviour (timings are never judged):\n  {}", broken.join("\n  "));
    }
    eprintln!("bench: no broken behaviour (no lost frames, failed sessions, error outputs or run errors)");
    Ok(())
}

/// Raise the soft descriptor limit to the hard one (children inherit it); returns the new limit.
fn raise_fd_limit() -> u64 {
    rlimit::increase_nofile_limit(u64::MAX).unwrap_or(1024)
}
