//! `LocalCalendar`: the embedded calendar backend, one RFC 5545 `.ics` file on local disk.
//!
//! Writes are read-modify-write under an in-process mutex and land atomically (temp file in the same
//! directory, fsync, rename, fsync of the directory), so a crash leaves the old or the new file and
//! concurrent creates from many sessions never lose one another. The mutex is held by the blocking
//! write itself, so a create whose call gave up still keeps the next one waiting until its worker is
//! done.
//!
//! A create says what became of its event ([`CommitGate`]): the call gives up on a write that has
//! not committed (the rename) shortly before its timeout, and the write then commits nothing (nor
//! writes its temp copy); once the write has committed, or the worker has any other answer, the call
//! waits for it, so the model is never told `timeout` or "not created" about an event that is in the
//! file because of a worker that had already decided.
//!
//! One process owns the file: `open` takes an exclusive advisory lock (`flock`) on a lock file next
//! to it (`.calendar.ics.lock`) and fails if another process still holds it after a short wait.
//! Every `LocalCalendar` of the same file within one process shares that lock and the write mutex.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use chrono::Utc;
use tokio::time::Instant;
use chrono_tz::Tz;

use super::backend::{CalendarBackend, CalendarEvent, CreateOutcome, EventPage, EventQuery};
use super::{CalendarError, ics};
use crate::tools::http::time_left;

/// Larger files are refused rather than loaded: a clinic calendar is far smaller.
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Distinguishes temp files of concurrent writers in one process (the pid covers other processes).
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Most of the call's time left when a create gives up a write that has not committed: the rename,
/// the directory's fsync and the answer take milliseconds on a disk that is not failing. A quarter
/// of what is left when that is less (a short `timeout_ms`).
const COMMIT_RESERVE: Duration = Duration::from_millis(250);
/// Most of the call's time a create that has committed keeps for its answer, which must reach the
/// session before the call's timeout cuts it off (a twentieth of what is left when that is less).
const ANSWER_RESERVE: Duration = Duration::from_millis(50);

/// How long `open` waits for another owner of the file to let go before refusing to start (short
/// in unit tests, which test the refusal).
const OWNER_WAIT: Duration = if cfg!(test) { Duration::from_millis(200) } else { Duration::from_secs(5) };

/// The write locks of the calendars this process has open, by their lock file's canonical path. A
/// second `open` of the same file in this process (a registry built again) shares the first one's
/// `flock` and write mutex: it must neither lock itself out nor write past the first one's mutex.
type Owned = Vec<(PathBuf, Weak<WriteLock>)>;
static OWNED: Mutex<Owned> = Mutex::new(Vec::new());

/// The write mutex; it holds the lock file, whose `flock` lasts as long as the file is open, so the
/// lock is released only when no calendar and no write in flight uses the file any more.
type WriteLock = tokio::sync::Mutex<File>;

/// The local `.ics` backend.
#[derive(Debug)]
pub struct LocalCalendar {
    /// Shared with the blocking workers that do the file I/O.
    path: Arc<PathBuf>,
    tz: Tz,
    /// Serialises read-modify-write cycles; readers need no lock because writes are atomic renames.
    write_lock: Arc<WriteLock>,
}

impl LocalCalendar {
    /// Open the calendar at `path`, creating it (and its parent directories) as an empty VCALENDAR
    /// when missing. An existing file is not parsed here: a bad file fails the calls, not startup.
    /// Fails with [`CalendarError::InUse`] when another process owns the file.
    pub fn open(path: impl Into<PathBuf>, tz: Tz) -> Result<Self, CalendarError> {
        let path: PathBuf = path.into();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(CalendarError::Unavailable)?;
        }
        let write_lock = take_ownership(&path)?;
        if !path.exists() {
            match write_atomically(&path, ics::empty_calendar().as_bytes(), || true) {
                Ok(Replace::Replaced | Replace::Kept) => {}
                Ok(Replace::ReplacedUnsynced(e)) | Err(e) => return Err(CalendarError::Unavailable(e)),
            }
        }
        Ok(Self { path: Arc::new(path), tz, write_lock })
    }

    /// Where the file lives (for operators and tests; never put it in a public message).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[async_trait::async_trait]
impl CalendarBackend for LocalCalendar {
    fn timezone(&self) -> Tz {
        self.tz
    }

    async fn list_events(&self, query: &EventQuery) -> Result<EventPage, CalendarError> {
        let (path, tz, query) = (Arc::clone(&self.path), self.tz, query.clone());
        // Expanding repeating events is bounded CPU work too: off the async workers with the read.
        run_blocking(move || Ok(ics::parse(&read_store(&path)?, tz)?.page(&query, tz))).await
    }

    async fn find_event(&self, uid: &str) -> Result<Option<CalendarEvent>, CalendarError> {
        let (path, tz) = (Arc::clone(&self.path), self.tz);
        let parsed = run_blocking(move || ics::parse(&read_store(&path)?, tz)).await?;
        Ok(parsed.find(uid))
    }

    async fn create_event(&self, event: CalendarEvent) -> Result<CreateOutcome, CalendarError> {
        // Within a tool call (`tools::http::within_deadline`): when to give up a write that has not
        // committed, and when a committed one must have answered.
        let times = time_left().map(|left| {
            let now = Instant::now();
            (now + left - COMMIT_RESERVE.min(left / 4), now + left - ANSWER_RESERVE.min(left / 20))
        });
        let lock = Arc::clone(&self.write_lock).lock_owned();
        let writer = match times {
            Some((give_up, _)) => tokio::time::timeout_at(give_up, lock).await.map_err(|_| CalendarError::WriteTooSlow)?,
            None => lock.await,
        };
        let (path, tz) = (Arc::clone(&self.path), self.tz);
        let gate = Arc::new(CommitGate::default());
        // Dropped with this future (the call cut off some other way): no commit after that either.
        let _abandon = AbandonOnDrop(Arc::clone(&gate));
        let worker_gate = Arc::clone(&gate);
        let mut worker = tokio::task::spawn_blocking(move || {
            // Held until the worker is done, not by this future: when the call gives up, this work
            // still runs (to commit nothing), and the next create must wait for it.
            let _writer = writer;
            let answer = write_event(&path, tz, event, &worker_gate);
            #[cfg(test)]
            faults::hold_answer(&path, &worker_gate);
            // The answer is final on every path (written, found from an earlier attempt, refused,
            // failed): a call reaching its give-up instant now waits for it instead of saying "not
            // created" about what may be an event in the file.
            worker_gate.settle(Commit::Committing);
            answer
        });
        let joined = |done: Result<_, tokio::task::JoinError>| done.unwrap_or(Err(CalendarError::Worker));
        let Some((give_up, answer_by)) = times else {
            return joined(worker.await);
        };
        if let Ok(done) = tokio::time::timeout_at(give_up, &mut worker).await {
            return joined(done);
        }
        let abandoned = gate.settle(Commit::Abandoned) == Commit::Pending;
        // Committing: the event is (about to be) in the file, so its answer is worth waiting for.
        // Abandoned: the worker commits nothing now, so whatever it still answers in time is true
        // (the event an earlier attempt stored, a refusal), and it answers at once once it has read
        // the file, skipping the write.
        match tokio::time::timeout_at(answer_by, &mut worker).await {
            Ok(done) => joined(done),
            Err(_) if abandoned => Err(CalendarError::WriteTooSlow),
            Err(_) => Err(CalendarError::WriteUnconfirmed),
        }
    }
}

/// Whether a create's write may still commit (the rename over the calendar), settled once by
/// whichever comes first: the worker about to commit, or the call giving up on it.
#[derive(Debug, Default)]
struct CommitGate(Mutex<Commit>);

/// Where a create's write stands with its commit.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Commit {
    /// Not settled: the worker has not reached the rename and the call still waits.
    #[default]
    Pending,
    /// The worker renames (or has renamed) the new file over the calendar, or has its answer
    /// without a write: the call waits for it.
    Committing,
    /// The call gave up (or was dropped): the worker commits nothing.
    Abandoned,
}

impl CommitGate {
    /// Settle on `to` unless already settled; what was found.
    fn settle(&self, to: Commit) -> Commit {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let found = *state;
        if found == Commit::Pending {
            *state = to;
        }
        found
    }

    /// Where it stands, without settling it.
    fn state(&self) -> Commit {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Abandons the write when the create's future is dropped before it has committed.
struct AbandonOnDrop(Arc<CommitGate>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.settle(Commit::Abandoned);
    }
}

/// The blocking part of a create: read, insert, write; committed only if `gate` still allows it.
fn write_event(path: &Path, tz: Tz, event: CalendarEvent, gate: &CommitGate) -> Result<CreateOutcome, CalendarError> {
    let text = read_store(path)?;
    let parsed = ics::parse(&text, tz)?;
    if let Some(existing) = parsed.find(&event.id) {
        // An earlier attempt of this call, unless it has other details (as for CalDAV).
        return if ics::same_details(&existing, &event) {
            Ok(CreateOutcome { event: existing, created: false })
        } else {
            Err(CalendarError::Conflict)
        };
    }
    let vevent = ics::event_to_ics(&event, Utc::now())?;
    let updated = ics::insert_event(&text, &vevent)?;
    // Looked at (not settled) before writing the copy too: writing and syncing a whole calendar
    // for a call that gave up would only keep the next create waiting on the write lock.
    if gate.state() == Commit::Abandoned {
        return Err(CalendarError::WriteTooSlow);
    }
    let commit = || gate.settle(Commit::Committing) != Commit::Abandoned;
    match write_atomically(path, updated.as_bytes(), commit).map_err(CalendarError::Unavailable)? {
        Replace::Replaced => {}
        // The call gave up first: it reports that nothing was written, which is true.
        Replace::Kept => return Err(CalendarError::WriteTooSlow),
        // Readers see the event, but a crash might lose it: "try again" could book it twice.
        Replace::ReplacedUnsynced(e) => {
            tracing::warn!(error = %e, "the calendar was replaced but its directory could not be synced");
            return Err(CalendarError::WriteUnconfirmed);
        }
    }
    let stored = CalendarEvent {
        id: event.id,
        title: ics::clean_text(&event.title),
        timing: event.timing,
        location: event.location.as_deref().map(ics::clean_text),
        description: event.description.as_deref().map(ics::clean_text),
        calendar: ics::clean_text(&event.calendar),
    };
    Ok(CreateOutcome { event: stored, created: true })
}

/// Take ownership of the calendar at `path` for this process: the first `open` takes an exclusive
/// `flock` on its lock file (refused with [`CalendarError::InUse`] when another process still holds
/// it after [`OWNER_WAIT`]), and only then, with no other writer possible, removes stale temp files.
/// Later opens in this process share the same lock.
fn take_ownership(path: &Path) -> Result<Arc<WriteLock>, CalendarError> {
    let lock_path = lock_path(path);
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let file = options.open(&lock_path).map_err(CalendarError::Unavailable)?;
    let key = fs::canonicalize(&lock_path).map_err(CalendarError::Unavailable)?;
    let mut owned = OWNED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(shared) = owned.iter().find(|(k, _)| *k == key).and_then(|(_, weak)| weak.upgrade()) {
        return Ok(shared);
    }
    owned.retain(|(_, weak)| weak.strong_count() > 0);
    let asked = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => break,
            // An owner that is just going away (a restart, a calendar of this process being
            // dropped) releases the lock when it closes the file: wait a little for it.
            Err(fs::TryLockError::WouldBlock) if asked.elapsed() < OWNER_WAIT => {
                std::thread::sleep(Duration::from_millis(25));
            }
            Err(fs::TryLockError::WouldBlock) => return Err(CalendarError::InUse),
            Err(fs::TryLockError::Error(e)) => return Err(CalendarError::Unavailable(e)),
        }
    }
    remove_stale_temp_files(path);
    let shared = Arc::new(tokio::sync::Mutex::new(file));
    owned.push((key, Arc::downgrade(&shared)));
    Ok(shared)
}

/// The lock file next to the calendar (`.calendar.ics.lock`) that marks which process owns it.
pub(super) fn lock_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.lock"))
}

/// Run file work off the async threads; a panic inside (a parser bug on odd input) becomes an error.
async fn run_blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, CalendarError> + Send + 'static,
) -> Result<T, CalendarError> {
    tokio::task::spawn_blocking(work).await.map_err(|_| CalendarError::Worker)?
}

/// The file's text; a missing file (deleted after start) reads as an empty calendar.
fn read_store(path: &Path) -> Result<String, CalendarError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(CalendarError::Unavailable(e)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(CalendarError::Unavailable)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(CalendarError::TooLarge);
    }
    String::from_utf8(bytes).map_err(|_| CalendarError::Malformed)
}

/// Delete temp copies of the calendar a crash left between write and rename: they hold patient
/// data nobody will read. Called only right after taking the file's `flock`, so no other process
/// (and no other calendar in this one) can be writing them.
fn remove_stale_temp_files(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let prefix = format!(".{}.", name.to_string_lossy());
    let Ok(entries) = fs::read_dir(dir) else { return };
    let mut removed = 0usize;
    for entry in entries.filter_map(Result::ok) {
        let file = entry.file_name();
        let file = file.to_string_lossy();
        if file.starts_with(&prefix) && file.ends_with(".tmp") && fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    if removed > 0 {
        tracing::warn!(files = removed, "removed temporary calendar copies left by a crash");
    }
}

/// What [`write_atomically`] did to the file (an error means it was not replaced).
#[derive(Debug)]
enum Replace {
    /// `commit` said no: the file is as it was.
    Kept,
    /// Renamed over the file and durable.
    Replaced,
    /// Renamed over the file (readers see it) but the directory's fsync failed: a crash may still
    /// bring back the old file.
    ReplacedUnsynced(io::Error),
}

/// Replace `path` with `bytes` so that readers and crashes see the old or the new file, never a mix.
/// `commit` is asked right before the rename, after which readers see the new file: when it says no,
/// the file is left as it was.
fn write_atomically(path: &Path, bytes: &[u8], commit: impl FnOnce() -> bool) -> io::Result<Replace> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let temp = dir.join(format!(
        ".{}.{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let renamed =
        write_temp(&temp, path, bytes).and_then(|()| if commit() { fs::rename(&temp, path).map(|()| true) } else { Ok(false) });
    if !matches!(renamed, Ok(true)) {
        // Best effort: a leftover temp file is harmless but untidy.
        let _ = fs::remove_file(&temp);
        return renamed.map(|_| Replace::Kept);
    }
    #[cfg(test)]
    let synced = faults::dir_sync(path).and_then(|()| sync_dir(&dir));
    #[cfg(not(test))]
    let synced = sync_dir(&dir);
    Ok(synced.map_or_else(Replace::ReplacedUnsynced, |()| Replace::Replaced))
}

/// The new text in `temp`, synced, with the permissions of the file it is to replace.
fn write_temp(temp: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        // The calendar holds patient data: new files are private to the service user.
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(temp)?;
    if let Ok(meta) = fs::metadata(path) {
        // Keep the permissions an operator gave the existing file.
        file.set_permissions(meta.permissions())?;
    }
    #[cfg(test)]
    faults::count_temp_write(path);
    file.write_all(bytes)?;
    file.sync_all()
}

/// Make the rename durable (on Unix a rename is only durable once its directory is synced).
fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Faults and holds tests put into a calendar's writes, keyed by the calendar's path (tests run in
/// parallel, each on its own file).
#[cfg(test)]
pub(super) mod faults {
    use std::path::{Path, PathBuf};
    use std::sync::{Mutex, PoisonError};
    use std::time::{Duration, Instant};

    use super::{Commit, CommitGate};

    /// What a test asked for on one calendar file, and what its writes did.
    #[derive(Debug, Default, Clone)]
    pub(in crate::tools::calendar) struct Faults {
        /// The directory's fsync after the rename fails.
        pub(in crate::tools::calendar) fail_dir_sync: bool,
        /// A create's worker keeps its answer until the call has settled its gate (given up).
        pub(in crate::tools::calendar) answer_after_give_up: bool,
        /// How many temp files writes have started.
        pub(in crate::tools::calendar) temp_writes: usize,
    }

    static FAULTS: Mutex<Vec<(PathBuf, Faults)>> = Mutex::new(Vec::new());

    /// Change what the writes to the calendar at `path` meet.
    pub(in crate::tools::calendar) fn set(path: &Path, change: impl FnOnce(&mut Faults)) {
        let mut all = FAULTS.lock().unwrap_or_else(PoisonError::into_inner);
        match all.iter_mut().find(|(p, _)| p == path) {
            Some((_, faults)) => change(faults),
            None => {
                let mut faults = Faults::default();
                change(&mut faults);
                all.push((path.to_path_buf(), faults));
            }
        }
    }

    /// What was set for (and counted on) the calendar at `path`.
    pub(in crate::tools::calendar) fn get(path: &Path) -> Faults {
        let all = FAULTS.lock().unwrap_or_else(PoisonError::into_inner);
        all.iter().find(|(p, _)| p == path).map(|(_, f)| f.clone()).unwrap_or_default()
    }

    pub(super) fn count_temp_write(path: &Path) {
        set(path, |f| f.temp_writes += 1);
    }

    pub(super) fn dir_sync(path: &Path) -> std::io::Result<()> {
        if get(path).fail_dir_sync {
            return Err(std::io::Error::other("injected directory fsync failure"));
        }
        Ok(())
    }

    /// Polls: the gate has no waiters to wake, and this runs only in tests (bounded at 5 s).
    pub(super) fn hold_answer(path: &Path, gate: &CommitGate) {
        let asked = Instant::now();
        while get(path).answer_after_give_up && gate.state() == Commit::Pending && asked.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
