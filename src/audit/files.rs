//! The audit log's files as the writer, recovery and the mirror open and name them, and the faults
//! a test can put on the writer's file operations (a disk that fails or hangs on demand).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::AuditError;
use super::record::Line;

/// A file operation of the writer, as a test's [`Faults`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FileOp {
    /// A group commit's write and fdatasync.
    Write,
    /// Opening the new file after a rotation.
    Open,
    /// The fsync of the log's directory that makes a new file's name durable.
    SyncDir,
    /// Making one line's bytes (a record or a checkpoint serialised): not a file operation, but
    /// counted through the same hook, so a test sees how often held records are serialised.
    Serialise,
}

/// Called before each [`FileOp`]: an error fails the operation, blocking stalls it. Only tests
/// set one (a disk that fails or hangs on demand, see `writer::open_with`).
pub(super) type Faults = Arc<dyn Fn(FileOp) -> std::io::Result<()> + Send + Sync>;

/// `<path>.<first seq>-<last seq>`: sorts by sequence, and `verify` finds the predecessors by it.
pub fn rotated_name(path: &Path, first: u64, last: u64) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".{first:012}-{last:012}"));
    PathBuf::from(name)
}

pub(super) fn io(err: std::io::Error) -> AuditError {
    AuditError::Io(err.kind().to_string())
}

pub(super) fn open_append(path: &Path) -> Result<std::fs::File, AuditError> {
    std::fs::OpenOptions::new().create(true).append(true).read(true).open(path).map_err(io)
}

/// The log's lock, held for the writer's life: `<path>.lock`, locked exclusively (`flock`).
///
/// A writer takes every byte of the file past its own durable length for a torn tail of its own
/// and cuts it, and recovery closes every open call as abandoned: a second process on the same
/// `audit.path` (two replicas on one volume, two starts from one directory) would cut the first's
/// acknowledged records. The lock is a file of its own, not the log: a rotation renames the log
/// and creates a new one, which a lock on the old file would not cover. The kernel releases it
/// when the process ends, however it ends.
pub(super) struct LogLock {
    _held: std::fs::File,
}

pub(super) fn lock(path: &Path) -> Result<LogLock, AuditError> {
    let mut name = path.as_os_str().to_os_string();
    name.push(".lock");
    let lock_path = PathBuf::from(name);
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(io)?;
    match file.try_lock() {
        Ok(()) => Ok(LogLock { _held: file }),
        Err(std::fs::TryLockError::WouldBlock) => Err(AuditError::InUse(lock_path.display().to_string())),
        Err(std::fs::TryLockError::Error(err)) => Err(io(err)),
    }
}

/// Make the entries of `path`'s directory durable (a file just created there, or renamed):
/// `fsync` on a file covers its data, not its name, and a power loss could drop a name never
/// synced, with every acknowledged record in it.
pub(super) fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::File::open(dir)?.sync_all()
}

pub(super) fn first_seq(path: &Path) -> Result<Option<u64>, AuditError> {
    let file = std::fs::File::open(path).map_err(io)?;
    let mut first = String::new();
    BufReader::new(file).read_line(&mut first).map_err(io)?;
    Ok(serde_json::from_str::<Line>(first.trim_end()).ok().map(|l| l.seq))
}
