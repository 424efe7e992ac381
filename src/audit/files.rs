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
    /// A group commit's write and fdatasync (one per piece of at most `COMMIT_PIECE_BYTES`).
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

/// The most bytes one write puts into the log before its `fdatasync` (a group commit larger than
/// this, a backlog written once the disk is back, is written and synced in pieces that end at a
/// line's end). A power loss therefore leaves at most this much written and unsynced at the end of
/// the log (a single longer line excepted), which is how recovery tells what it may set aside from
/// corruption of acknowledged records ([`UNSYNCED_TAIL_BYTES`]).
pub(super) const COMMIT_PIECE_BYTES: usize = 512 * 1024;

/// How far from the end of the log a line that does not parse may start and still be taken for
/// what a power loss left unsynced: one piece, with room for a long line where it was cut.
pub(super) const UNSYNCED_TAIL_BYTES: u64 = 2 * COMMIT_PIECE_BYTES as u64;

/// Where the piece of `bytes` that starts at `from` ends: at most [`COMMIT_PIECE_BYTES`] on, at a
/// line's end (past it only when one line is longer).
pub(super) fn piece_end(bytes: &[u8], from: usize) -> usize {
    let limit = from.saturating_add(COMMIT_PIECE_BYTES).min(bytes.len());
    if limit == bytes.len() {
        return limit;
    }
    match memchr::memrchr(b'\n', &bytes[from..limit]) {
        Some(at) => from + at + 1,
        None => memchr::memchr(b'\n', &bytes[limit..]).map_or(bytes.len(), |at| limit + at + 1),
    }
}

/// The length of `file`'s first `len` bytes up to and with their last newline (0 when there is
/// none): where a log cut in the middle of a line ends its last whole line.
pub(super) fn last_line_end(file: &std::fs::File, len: u64) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let mut block = vec![0u8; 64 * 1024];
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(block.len() as u64);
        let piece = &mut block[..(end - start) as usize];
        file.read_exact_at(piece, start)?;
        if let Some(at) = memchr::memrchr(b'\n', piece) {
            return Ok(start + at as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// What follows the log's name in the name of a file of lines a start set aside:
/// `<path>.torn-<seq>-<unix ms>` (`recovery::set_aside`; `verify` reports each).
pub(super) const SET_ASIDE_INFIX: &str = ".torn-";

/// `<path>.torn-<seq>-<unix ms>`: where a start sets aside the lines from `seq` on.
pub(super) fn set_aside_name(path: &Path, seq: u64, unix_ms: i64) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(format!("{SET_ASIDE_INFIX}{seq}-{unix_ms}"));
    PathBuf::from(name)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_end_at_a_line_end_within_the_bound_or_after_one_long_line() {
        let line = |n: usize| [vec![b'a'; n - 1], vec![b'\n']].concat();
        let small: Vec<u8> = (0..10).flat_map(|_| line(100)).collect();
        assert_eq!(piece_end(&small, 0), small.len(), "a small commit is one piece");
        let big: Vec<u8> = (0..3).flat_map(|_| line(COMMIT_PIECE_BYTES / 2 + 10)).collect();
        let first = piece_end(&big, 0);
        assert_eq!(first, COMMIT_PIECE_BYTES / 2 + 10, "one line fits, two do not");
        assert_eq!(piece_end(&big, first), 2 * first);
        assert_eq!(piece_end(&big, 2 * first), big.len());
        let long = line(COMMIT_PIECE_BYTES * 2);
        assert_eq!(piece_end(&[long.clone(), line(10)].concat(), 0), long.len(), "a longer line is one piece of its own");
    }

    #[test]
    fn the_last_line_end_is_found_across_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut text = b"first\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', 200_000));
        std::fs::write(&path, &text).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        assert_eq!(last_line_end(&file, text.len() as u64).unwrap(), 6);
        assert_eq!(last_line_end(&file, 6).unwrap(), 6);
        assert_eq!(last_line_end(&file, 5).unwrap(), 0);
    }
}
