//! `LocalCalendar`: the embedded calendar backend, one RFC 5545 `.ics` file on local disk.
//!
//! Writes are read-modify-write under an in-process mutex and land atomically (temp file in the same
//! directory, fsync, rename, fsync of the directory), so a crash leaves the old or the new file and
//! concurrent creates from many sessions never lose one another. One process owns the file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::Utc;
use chrono_tz::Tz;

use super::backend::{CalendarBackend, CalendarEvent, CreateOutcome, EventPage, EventQuery};
use super::{CalendarError, ics};

/// Larger files are refused rather than loaded: a clinic calendar is far smaller.
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Distinguishes temp files of concurrent writers in one process (the pid covers other processes).
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The local `.ics` backend.
#[derive(Debug)]
pub struct LocalCalendar {
    /// Shared with the blocking workers that do the file I/O.
    path: Arc<PathBuf>,
    tz: Tz,
    /// Serialises read-modify-write cycles; readers need no lock because writes are atomic renames.
    write_lock: tokio::sync::Mutex<()>,
}

impl LocalCalendar {
    /// Open the calendar at `path`, creating it (and its parent directories) as an empty VCALENDAR
    /// when missing. An existing file is not parsed here: a bad file fails the calls, not startup.
    pub fn open(path: impl Into<PathBuf>, tz: Tz) -> Result<Self, CalendarError> {
        let path: PathBuf = path.into();
        remove_stale_temp_files(&path);
        if !path.exists() {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs::create_dir_all(parent).map_err(CalendarError::Unavailable)?;
            }
            write_atomically(&path, ics::empty_calendar().as_bytes()).map_err(CalendarError::Unavailable)?;
        }
        Ok(Self { path: Arc::new(path), tz, write_lock: tokio::sync::Mutex::new(()) })
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
        let _writer = self.write_lock.lock().await;
        let (path, tz) = (Arc::clone(&self.path), self.tz);
        run_blocking(move || {
            let text = read_store(&path)?;
            let parsed = ics::parse(&text, tz)?;
            if let Some(existing) = parsed.find(&event.id) {
                return Ok(CreateOutcome { event: existing, created: false });
            }
            let vevent = ics::event_to_ics(&event, Utc::now())?;
            let updated = ics::insert_event(&text, &vevent)?;
            write_atomically(&path, updated.as_bytes()).map_err(CalendarError::Unavailable)?;
            let stored = CalendarEvent {
                id: event.id,
                title: ics::clean_text(&event.title),
                timing: event.timing,
                location: event.location.as_deref().map(ics::clean_text),
                description: event.description.as_deref().map(ics::clean_text),
                calendar: ics::clean_text(&event.calendar),
            };
            Ok(CreateOutcome { event: stored, created: true })
        })
        .await
    }
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
/// data nobody will read. At start nothing else writes them (one process owns the file).
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

/// Replace `path` with `bytes` so that readers and crashes see the old or the new file, never a mix.
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
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
    let result = write_then_rename(&temp, path, bytes);
    if result.is_err() {
        // Best effort: a leftover temp file is harmless but untidy.
        let _ = fs::remove_file(&temp);
        return result;
    }
    sync_dir(&dir)
}

fn write_then_rename(temp: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
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
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(temp, path)
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
