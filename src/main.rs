//! The `voxgate` binary: parse the command line, load and validate the config, run the server until
//! SIGTERM/SIGINT, drain. This is the only place `anyhow` is used.
//!
//! Exit codes: 0 after a clean drain, 1 on a runtime failure, 2 on a bad config or command line,
//! 3 when `audit verify` finds a broken log.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use voxgate::config::{Config, ProcessEnv};

#[derive(Debug, Parser)]
#[command(name = "voxgate", version, about = "Realtime voice-session proxy that owns the tools")]
struct Cli {
    /// TOML config file; `VOXGATE_<SECTION>__<KEY>` variables override it. Without one, the
    /// embedded defaults run the simulated model on 127.0.0.1:8080.
    #[arg(long, global = true, env = "VOXGATE_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the proxy (the default).
    Run,
    /// Load and validate a config file, print the effective settings (secrets hidden), and exit.
    CheckConfig {
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Audit log tools.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Internal: the PDF text worker the server starts for each document (stdin → stdout).
    #[command(name = "extract-pdf", hide = true)]
    ExtractPdf,
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Check the hash chain and that every started call finished exactly once.
    Verify {
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::CheckConfig { file }) => match load(Some(&file)) {
            Ok(config) => {
                print!("{}", voxgate::config::summary(&config));
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Some(Command::Audit { command: AuditCommand::Verify { file } }) => match load(cli.config.as_deref()) {
            // The chain key comes from the config or `VOXGATE_AUDIT__CHAIN_KEY`.
            Ok(config) => verify(&file, &voxgate::audit::Chain::new(config.audit.chain_key.as_ref())),
            Err(code) => code,
        },
        Some(Command::ExtractPdf) => voxgate::tools::files::sandbox::worker_main(),
        Some(Command::Run) | None => {
            let config = match load(cli.config.as_deref()) {
                Ok(config) => config,
                Err(code) => return code,
            };
            match run(config) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("voxgate: {err:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// glibc's allocator, tuned for many sessions' frames (docs/operations.md, Capacity planning).
/// An operator's own `MALLOC_MMAP_THRESHOLD_` or `MALLOC_ARENA_MAX` is left alone.
///
/// - Allocations of 1 MiB and more (only ever a large frame: an audio append is 2–40 KB) get their
///   own mapping, returned to the system when freed. glibc's default raises that threshold to the
///   largest block freed so far, so after one 30 MiB frame the next ones came from the heap and an
///   idle session's large frame stayed resident (docs/reliability.md, Memory).
/// - One arena for every thread. glibc gives each thread that meets a locked arena one of its own
///   (up to 8 per CPU), and each keeps the memory it once held: with two session threads an active
///   session cost 62 KiB of RSS, with one arena 49–51 KiB, for no more CPU per frame (N = 100,
///   docs/performance-history.md, eighth pass). A session's frames are read, written and freed by its
///   own thread, and small blocks come from glibc's per-thread cache without the arena's lock.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    for (env, param, value) in [
        ("MALLOC_MMAP_THRESHOLD_", libc::M_MMAP_THRESHOLD, 1024 * 1024),
        ("MALLOC_ARENA_MAX", libc::M_ARENA_MAX, 1),
    ] {
        if std::env::var_os(env).is_none() {
            // SAFETY: mallopt only changes allocator parameters; it is called before any other
            // thread exists.
            unsafe {
                libc::mallopt(param, value);
            }
        }
    }
}

/// A bad config is reported with its key and reason, exit 2.
fn load(path: Option<&Path>) -> Result<Config, ExitCode> {
    Config::load(path, &ProcessEnv).map_err(|err| {
        // The error's own text starts "invalid configuration:".
        eprintln!("voxgate: {err}");
        ExitCode::from(2)
    })
}

fn verify(file: &Path, chain: &voxgate::audit::Chain) -> ExitCode {
    match voxgate::audit::verify(file, chain) {
        Ok(report) => {
            println!("{report}");
            if report.is_ok() { ExitCode::SUCCESS } else { ExitCode::from(3) }
        }
        Err(err) => {
            eprintln!("voxgate: {err}");
            ExitCode::from(3)
        }
    }
}

fn run(mut config: Config) -> anyhow::Result<()> {
    tune_allocator();
    // PDFs are read by this executable started as a worker with its own limits.
    match std::env::current_exe() {
        Ok(exe) => voxgate::tools::files::sandbox::set_worker(exe),
        Err(err) => {
            eprintln!("voxgate: cannot find its own executable ({err}); PDFs will not be read");
            voxgate::tools::files::sandbox::refuse_in_process();
        }
    }
    config.telemetry.instance_id = config.server.instance_id();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?;
    let result = runtime.block_on(async move {
        let telemetry = voxgate::telemetry::init(&config.telemetry).context("starting telemetry")?;
        let stop = voxgate::shutdown::signal();
        let server = voxgate::server::start(config).await.context("starting the server")?;
        stop.await;
        let audit = server.shutdown().await;
        telemetry.shutdown().await;
        audit.context("flushing the audit log")
    });
    // Every step above is bounded, but dropping a runtime waits for its blocking threads without
    // limit: an audit writer stuck in `fdatasync` on a hung disk would keep the process until the
    // orchestrator's SIGKILL. What still runs after the bounded shutdown is abandoned instead.
    runtime.shutdown_timeout(EXIT_GRACE);
    result
}

/// How long the runtime's leftover blocking work may take once the bounded shutdown has run.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);
