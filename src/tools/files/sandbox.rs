//! PDF text extraction in a child process with its own memory and CPU limits.
//!
//! `pdf-extract` (over lopdf) is the one extractor whose work the process cannot bound from the
//! inside: lopdf inflates every stream it meets whole, may inflate one stream once for every page
//! that refers to it, decrypts before it decodes, and can loop on a malformed document. An
//! allocation that fails aborts a Rust process — no `catch_unwind` helps — and a blocking task
//! cannot be cancelled. So the server runs the extraction in a child: its own executable started
//! as `voxgate extract-pdf` ([`worker_main`]), the document on its stdin and the text on its
//! stdout, with an address-space limit ([`WORKER_MEMORY`]) and a CPU-time limit, killed when
//! [`WORKER_TIMEOUT`] passes or the call is dropped. A document that exhausts either fails the
//! child, not the sessions: reported as too slow ([`FilesError::TooSlow`], a `timeout`) when it
//! ran out of time, else as unreadable.
//!
//! PDFs read at once are bounded across the process ([`readers`]): each worker may take a core and
//! up to [`WORKER_MEMORY`] for its whole run, so a burst of PDF retrievals across sessions waits
//! for a reader (at most [`READER_WAIT`], within the call's time, then answered busy) instead of
//! starting a worker each.
//!
//! The server names the worker once at start ([`set_worker`]); without one (the library used on its
//! own, unit tests) extraction runs in this process, behind [`super::pdf_guard`]'s budget only. A
//! server that cannot name its worker ([`refuse_in_process`]) reads no PDF at all: the guard is a
//! budget, not a proof, and a document it misjudges would abort the whole server, not a worker.

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

use super::FilesError;

/// The subcommand that runs the worker.
pub const WORKER_COMMAND: &str = "extract-pdf";
/// Address space the worker may map: the binary, its allocator and the document's decoded streams.
const WORKER_MEMORY: u64 = 1024 * 1024 * 1024;
/// CPU seconds the worker may use before the kernel stops it.
const WORKER_CPU_S: u64 = 20;
/// Wall time the server waits for the worker, then kills it.
const WORKER_TIMEOUT: Duration = Duration::from_secs(25);
/// The most text read back (a document's text is cut far shorter before it reaches the model).
const MAX_TEXT_BYTES: u64 = 16 * 1024 * 1024;
/// The most document bytes the worker reads (above `backends.files.max_file_bytes`' ceiling).
const MAX_INPUT_BYTES: u64 = 128 * 1024 * 1024;

/// How long a PDF waits for a free reader (see [`readers`]) before it is answered busy, at most:
/// never past a second before the call's own timeout, so the call hears "busy", not `timeout`.
const READER_WAIT: Duration = Duration::from_secs(10);
/// Kept of the call's time when waiting for a reader.
const READER_WAIT_RESERVE: Duration = Duration::from_secs(1);
/// PDF readers at once at most, whatever the cores: two workers at [`WORKER_MEMORY`] each fit
/// the 2 GiB memory limit of the shipped production pod.
const MAX_READERS: usize = 2;

/// Exit status of a worker that read the document and found no text it could extract.
const EXIT_UNREADABLE: u8 = 3;

static WORKER: OnceLock<PathBuf> = OnceLock::new();
/// Set by a server that has no worker: PDFs are then refused, never read in this process.
static NO_IN_PROCESS: OnceLock<()> = OnceLock::new();

/// Name the executable to run as the worker (the server's own). Later calls change nothing.
pub fn set_worker(executable: PathBuf) {
    let _ = WORKER.set(executable);
}

/// For a server that cannot name its worker: refuse PDFs rather than read them in this process.
pub fn refuse_in_process() {
    let _ = NO_IN_PROCESS.set(());
}

/// Where a PDF is read.
#[derive(Debug, PartialEq, Eq)]
enum Extractor<'a> {
    Worker(&'a std::path::Path),
    InProcess,
    Refused,
}

fn extractor<'a>(worker: Option<&'a PathBuf>, in_process_refused: bool) -> Extractor<'a> {
    match (worker, in_process_refused) {
        (Some(worker), _) => Extractor::Worker(worker),
        (None, false) => Extractor::InProcess,
        (None, true) => Extractor::Refused,
    }
}

/// The PDF readers of this process ([`reader_count`]).
fn readers() -> &'static Semaphore {
    static READERS: OnceLock<Semaphore> = OnceLock::new();
    READERS.get_or_init(|| Semaphore::new(reader_count(std::thread::available_parallelism().map_or(1, usize::from))))
}

/// Half the cores the process may use, one at least and [`MAX_READERS`] at most. A worker is
/// CPU-bound for up to [`WORKER_CPU_S`]: more of them than half the cores would take the session
/// threads' CPU. And each may map [`WORKER_MEMORY`]: a pod without a CPU limit sees the node's
/// cores, which say nothing about its memory limit.
fn reader_count(cores: usize) -> usize {
    (cores / 2).clamp(1, MAX_READERS)
}

/// The text of a PDF: in the worker when one is set, else here (unless that is refused), once one
/// of the process's readers is free.
pub async fn extract_pdf(bytes: Vec<u8>) -> Result<String, FilesError> {
    let extractor = extractor(WORKER.get(), NO_IN_PROCESS.get().is_some());
    if extractor == Extractor::Refused {
        return Err(FilesError::Worker);
    }
    let wait = crate::tools::http::time_left().map_or(READER_WAIT, |left| left.saturating_sub(READER_WAIT_RESERVE).min(READER_WAIT));
    with_reader(readers(), wait, async move {
        match extractor {
            Extractor::Worker(worker) => run_worker(worker, &bytes, WORKER_TIMEOUT).await,
            _ => in_process(bytes).await,
        }
    })
    .await
}

/// Run `read` holding one of `readers`, waiting at most `wait` for it ([`FilesError::Busy`]).
async fn with_reader<T>(readers: &Semaphore, wait: Duration, read: impl Future<Output = Result<T, FilesError>>) -> Result<T, FilesError> {
    let Ok(Ok(_reader)) = tokio::time::timeout(wait, readers.acquire()).await else {
        tracing::debug!("every PDF reader stayed busy; the document was not read");
        return Err(FilesError::Busy);
    };
    read.await
}

async fn in_process(bytes: Vec<u8>) -> Result<String, FilesError> {
    let work = move || std::panic::catch_unwind(|| super::extract::pdf_text(&bytes));
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(result)) => result,
        Ok(Err(_panic)) => Err(FilesError::Corrupt),
        Err(_) => Err(FilesError::Worker),
    }
}

/// Run the worker on `bytes` for at most `timeout`. Its environment is emptied: it needs none of
/// the server's settings, and must hold none of its secrets.
async fn run_worker(worker: &std::path::Path, bytes: &[u8], timeout: Duration) -> Result<String, FilesError> {
    let mut child = tokio::process::Command::new(worker)
        .arg(WORKER_COMMAND)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|_| FilesError::Worker)?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(FilesError::Worker);
    };
    let exchange = async {
        // Written while the output is read, so a worker that writes before it has read all
        // cannot stall on a full pipe; dropping stdin tells it the document has ended.
        let write = async move {
            let _ = stdin.write_all(bytes).await;
        };
        let mut text = Vec::new();
        let mut stdout = stdout.take(MAX_TEXT_BYTES + 1);
        let read = stdout.read_to_end(&mut text);
        let (_, read) = tokio::join!(write, read);
        drop(stdout);
        // More text than is ever used: the worker is stopped rather than left blocked on writing
        // the rest into a pipe nobody reads (which would end as `TooSlow`), and the text kept.
        let cut = text.len() as u64 > MAX_TEXT_BYTES;
        if cut {
            let _ = child.start_kill();
        }
        let status = child.wait().await;
        (read.map(|_| (text, cut)), status)
    };
    let Ok((text, status)) = tokio::time::timeout(timeout, exchange).await else {
        // A long or convoluted document, not necessarily a damaged one: said as it is.
        tracing::debug!("PDF extraction took too long; the worker was killed");
        return Err(FilesError::TooSlow);
    };
    match (text, status) {
        (Ok((mut text, true)), _) => {
            tracing::debug!("the PDF's text was cut at its size bound");
            text.truncate(usize::try_from(MAX_TEXT_BYTES).unwrap_or(usize::MAX));
            Ok(String::from_utf8_lossy(&text).into_owned())
        }
        (Ok((text, false)), Ok(status)) if status.success() => Ok(String::from_utf8_lossy(&text).into_owned()),
        (_, Ok(status)) if status.code() == Some(i32::from(EXIT_UNREADABLE)) => Err(FilesError::Corrupt),
        // Its CPU-time limit ([`WORKER_CPU_S`]): too slow, as the wall-time limit above.
        (_, Ok(status)) if status.signal() == Some(libc::SIGXCPU) => {
            tracing::debug!("PDF extraction used up its CPU time");
            Err(FilesError::TooSlow)
        }
        (_, Ok(status)) => {
            // Killed by a signal (its memory limit) or failed otherwise: the document.
            tracing::debug!(?status, "the PDF worker failed on a document");
            Err(FilesError::Corrupt)
        }
        (_, Err(_)) => Err(FilesError::Worker),
    }
}

/// `voxgate extract-pdf`: read a PDF on stdin, write its text on stdout, under the limits above.
/// Exit 0 with the text, [`EXIT_UNREADABLE`] when the document cannot be read; a limit reached
/// ends the process by signal.
pub fn worker_main() -> ExitCode {
    limit(libc::RLIMIT_AS, WORKER_MEMORY, WORKER_MEMORY);
    // The kernel sends SIGXCPU at the soft limit (reported as too slow) and SIGKILL at the hard
    // one; were they equal, it would send SIGKILL only, which reads as any other crash.
    limit(libc::RLIMIT_CPU, WORKER_CPU_S, WORKER_CPU_S + 1);
    // SIGXCPU would otherwise dump up to [`WORKER_MEMORY`] of core.
    limit(libc::RLIMIT_CORE, 0, 0);
    // In a container whose memory limit is below the worker's own (512 MiB in the dev overlay), the
    // kernel's OOM killer must choose the worker, not the server: the most likely victim it can be.
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    let mut bytes = Vec::new();
    if std::io::stdin().take(MAX_INPUT_BYTES).read_to_end(&mut bytes).is_err() {
        return ExitCode::from(EXIT_UNREADABLE);
    }
    match std::panic::catch_unwind(|| super::extract::pdf_text(&bytes)) {
        Ok(Ok(text)) => match std::io::stdout().lock().write_all(text.as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::from(EXIT_UNREADABLE),
        },
        _ => ExitCode::from(EXIT_UNREADABLE),
    }
}

/// Lower one of this process's resource limits, the hard one too: the worker never raises it.
fn limit(resource: libc::__rlimit_resource_t, soft: u64, hard: u64) {
    let limit = libc::rlimit { rlim_cur: soft, rlim_max: hard };
    // SAFETY: setrlimit reads one rlimit through a pointer to a local; it only affects this
    // process, which runs nothing but the extraction.
    unsafe {
        libc::setrlimit(resource, &limit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_without_its_worker_reads_no_pdf_in_process() {
        let worker = PathBuf::from("/usr/bin/voxgate");
        assert_eq!(extractor(Some(&worker), true), Extractor::Worker(&worker));
        assert_eq!(extractor(None, false), Extractor::InProcess);
        assert_eq!(extractor(None, true), Extractor::Refused);
    }

    /// A PDF waits for a free reader, then is answered busy; a reader freed in time is used.
    #[tokio::test(start_paused = true)]
    async fn pdfs_beyond_the_readers_wait_for_one_then_are_answered_busy() {
        let pool = Semaphore::new(1);
        let held = pool.acquire().await.unwrap();
        let started = tokio::time::Instant::now();
        let busy = with_reader(&pool, READER_WAIT, async { Ok(()) }).await;
        assert!(matches!(busy, Err(FilesError::Busy)), "{busy:?}");
        assert_eq!(started.elapsed(), READER_WAIT);
        assert_eq!(crate::tools::ToolError::from(FilesError::Busy).code().as_str(), "backend_error");
        let waiting = with_reader(&pool, READER_WAIT, async { Ok(7) });
        let release = async {
            tokio::time::sleep(READER_WAIT / 2).await;
            drop(held);
        };
        let (read, ()) = tokio::join!(waiting, release);
        assert_eq!(read.unwrap(), 7);
    }

    #[test]
    fn half_the_cores_read_pdfs_one_at_least_two_at_most() {
        assert_eq!([1, 2, 3, 4, 64].map(reader_count), [1, 1, 1, 2, 2]);
    }

    /// A stand-in worker: a shell script doing what a worker might.
    fn script(dir: &tempfile::TempDir, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[tokio::test]
    async fn the_workers_answer_is_the_text_and_its_failures_are_the_documents() {
        let dir = tempfile::tempdir().unwrap();
        // The document arrives on stdin; the text leaves on stdout.
        let echo = script(&dir, "echo", "cat > /dev/null; printf 'Diabetes protocol'");
        assert_eq!(run_worker(&echo, b"%PDF-1.7", WORKER_TIMEOUT).await.unwrap(), "Diabetes protocol");
        let unreadable = script(&dir, "unreadable", "cat > /dev/null; exit 3");
        assert!(matches!(run_worker(&unreadable, b"x", WORKER_TIMEOUT).await, Err(FilesError::Corrupt)));
        // Ended by its limits (a signal), as a memory bomb ends it.
        let aborted = script(&dir, "aborted", "cat > /dev/null; kill -ABRT $$");
        assert!(matches!(run_worker(&aborted, b"x", WORKER_TIMEOUT).await, Err(FilesError::Corrupt)));
        // Stopped by its CPU-time limit: too slow, as the wall-time limit.
        let spun = script(&dir, "spun", "cat > /dev/null; kill -XCPU $$");
        assert!(matches!(run_worker(&spun, b"x", WORKER_TIMEOUT).await, Err(FilesError::TooSlow)));
        // None of the server's environment (its secrets) reaches the worker.
        assert!(std::env::var_os("PATH").is_some());
        let env = script(&dir, "env", "cat > /dev/null; /usr/bin/env");
        assert!(!run_worker(&env, b"x", WORKER_TIMEOUT).await.unwrap().contains("PATH="));
        let missing = dir.path().join("missing");
        assert!(matches!(run_worker(&missing, b"x", WORKER_TIMEOUT).await, Err(FilesError::Worker)));
    }

    /// Text over the 16 MiB bound is answered cut there, whether the rest fits in the pipe (the
    /// worker ends by itself) or not (it would wait on its write for good): neither is a damaged
    /// document nor a slow one.
    #[tokio::test]
    async fn text_over_the_bound_is_answered_cut_short() {
        let dir = tempfile::tempdir().unwrap();
        for (name, extra) in [("fits", 10 * 1024), ("blocks", 200 * 1024)] {
            let bytes = MAX_TEXT_BYTES + extra;
            let long = script(&dir, name, &format!("cat > /dev/null; /usr/bin/head -c {bytes} /dev/zero | /usr/bin/tr '\\0' a"));
            let text = run_worker(&long, b"x", Duration::from_secs(10)).await;
            let text = text.unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!(text.len() as u64, MAX_TEXT_BYTES, "{name}");
            assert!(text.bytes().all(|b| b == b'a'), "{name}");
        }
    }

    #[tokio::test]
    async fn a_worker_that_hangs_is_killed_after_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let hang = script(&dir, "hang", "exec sleep 600");
        let pid_file = dir.path().join("pid");
        let hang_recording = script(&dir, "hang2", &format!("echo $$ > {}; exec sleep 600", pid_file.display()));
        let started = std::time::Instant::now();
        let timeout = Duration::from_secs(1);
        // Too slow is not damaged: the model is told the reading timed out.
        let err = run_worker(&hang, b"%PDF", timeout).await.unwrap_err();
        assert!(matches!(err, FilesError::TooSlow), "{err:?}");
        assert_eq!(crate::tools::ToolError::from(err).code().as_str(), "timeout");
        assert!(started.elapsed() < timeout + Duration::from_secs(10), "{:?}", started.elapsed());
        // And it is gone, not left running.
        assert!(run_worker(&hang_recording, b"%PDF", timeout).await.is_err());
        let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_string();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::path::Path::new(&format!("/proc/{pid}")).exists() && std::time::Instant::now() < deadline {
            // A killed child is reaped by tokio's orphan reaper shortly after.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(state.is_empty() || state.contains(") Z "), "worker still running: {state}");
    }
}
