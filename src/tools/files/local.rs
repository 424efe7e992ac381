//! The embedded default backend: a folder on this machine (`backends.files.root`, default
//! `./data/files`, which ships a few sample documents).
//!
//! Every access resolves the path, follows symlinks (`canonicalize`) and checks that the result is
//! still under the canonical root, so a link pointing out of the root (or a `..` that slipped past
//! [`RelPath`]) is refused as if the file did not exist. Listings skip such links too. Only regular
//! files are listed or opened: a FIFO or device under the root is "not found", never opened.
//! The check and the open are two steps, and whoever can write under the root could swap a
//! checked folder for a link in between: so the file opened is checked again, by where the kernel
//! says the open descriptor leads ([`LocalFiles::open_inside`]).
//!
//! A walk has the same bounds as the WebDAV one (depth, folders, entries) and a time budget
//! inside the call's timeout (a slow or huge disk answers what was found in time, `truncated`).

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use super::FilesError;
use super::backend::{Candidates, FileEntry, FilesBackend, MAX_WALK_DEPTH, MAX_WALK_ENTRIES, MAX_WALK_FOLDERS, mime_for, walk_deadline};
use super::file_id::RelPath;

/// A folder of documents.
#[derive(Debug)]
pub struct LocalFiles {
    /// Canonical (absolute, symlink-free) root: the prefix every file must have.
    root: PathBuf,
}

impl LocalFiles {
    /// Open `root`, creating it (and its parents) when it does not exist yet.
    pub fn open(root: &Path) -> Result<Self, FilesError> {
        if !root.exists() {
            std::fs::create_dir_all(root).map_err(FilesError::Io)?;
            tracing::info!("created the empty local files root (backends.files.root)");
        }
        let root = root.canonicalize().map_err(FilesError::Io)?;
        if !root.is_dir() {
            return Err(FilesError::Config(
                "backends.files.root: is not a directory".into(),
            ));
        }
        Ok(Self { root })
    }

    /// The on-disk path of `path` after following links, if it is a regular file under the root.
    fn resolve(&self, path: &RelPath) -> Result<PathBuf, FilesError> {
        let joined = path
            .segments()
            .iter()
            .fold(self.root.clone(), |p, s| p.join(s));
        let real = match joined.canonicalize() {
            Ok(real) => real,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(FilesError::NotFound),
            // A path through a file (`a.txt/x`) or a link loop names nothing: not an outage.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => {
                return Err(FilesError::NotFound);
            }
            Err(e) => return Err(FilesError::Io(e)),
        };
        if !real.starts_with(&self.root) {
            tracing::warn!("refused a file that resolves outside backends.files.root");
            return Err(FilesError::BadFileId);
        }
        Ok(real)
    }

    fn entry(&self, path: RelPath, meta: &std::fs::Metadata) -> FileEntry {
        let modified = meta.modified().ok().map(DateTime::<Utc>::from);
        let mime_type = mime_for(&path.extension()).to_string();
        FileEntry {
            url: path.display(),
            path,
            size: meta.len(),
            modified,
            mime_type,
        }
    }

    /// Every regular file under the root (bounded in depth, folders, count and time: `deadline`),
    /// links out of it skipped, and whether a bound or a folder that could not be read left files
    /// out. A root that cannot be read (gone, unmounted) fails: an empty answer would read as
    /// "nothing there".
    fn walk(&self, deadline: Option<std::time::Instant>) -> Result<Candidates, FilesError> {
        let mut files = Vec::new();
        let mut truncated = false;
        // The root counts as one, as in the WebDAV walk.
        let mut folders = 1;
        let mut walker = walkdir::WalkDir::new(&self.root)
            .min_depth(1)
            .max_depth(MAX_WALK_DEPTH)
            .follow_links(false)
            .into_iter()
            .filter_entry(|e| !is_hidden(e.file_name()));
        while let Some(item) = walker.next() {
            // Looked at after the root's error (below) would be: a root that cannot be read is an
            // outage, however little time is left.
            let out_of_time = deadline.is_some_and(|at| std::time::Instant::now() >= at);
            let item = match item {
                Ok(item) => item,
                Err(err) if err.depth() == 0 => {
                    // The io::Error alone: walkdir's own error text names the path.
                    let err = err.into_io_error().unwrap_or_else(|| std::io::Error::other("the root could not be walked"));
                    return Err(FilesError::Io(err));
                }
                Err(_) => {
                    truncated = true;
                    continue;
                }
            };
            if out_of_time {
                tracing::debug!("the local walk ran out of time; answering what it found");
                truncated = true;
                break;
            }
            let file_type = item.file_type();
            if file_type.is_dir() {
                if item.depth() >= MAX_WALK_DEPTH {
                    // A folder at the depth bound is not looked into: it may hold files.
                    truncated = true;
                } else if folders >= MAX_WALK_FOLDERS {
                    truncated = true;
                    walker.skip_current_dir();
                } else {
                    folders += 1;
                }
                continue;
            }
            let Ok(rel) = item.path().strip_prefix(&self.root) else {
                continue;
            };
            let segments: Option<Vec<String>> = rel
                .components()
                .map(|c| c.as_os_str().to_str().map(str::to_string))
                .collect();
            let Some(path) = segments.and_then(|s| RelPath::from_segments(s).ok()) else {
                continue;
            };
            // A link is listed only when it lands on a regular file inside the root.
            let real = if file_type.is_symlink() {
                self.resolve(&path).ok()
            } else {
                Some(item.path().to_path_buf())
            };
            let Some(meta) = real
                .and_then(|r| std::fs::metadata(r).ok())
                .filter(|m| m.is_file())
            else {
                continue;
            };
            if files.len() >= MAX_WALK_ENTRIES {
                tracing::debug!("local file listing cut at {MAX_WALK_ENTRIES} entries");
                truncated = true;
                break;
            }
            files.push(self.entry(path, &meta));
        }
        Ok(Candidates { files, truncated })
    }

    fn read_now(&self, path: &RelPath, max_bytes: u64) -> Result<(FileEntry, Vec<u8>), FilesError> {
        let real = self.resolve(path)?;
        // Only a regular file is opened for reading: opening a FIFO waits for a writer, for good,
        // and a device may act on being opened. `open_inside` checks that on what it opens, as
        // `real` may have changed since it was resolved (the open is non-blocking all the same).
        let file = self.open_inside(&real)?;
        let meta = file.metadata().map_err(FilesError::Io)?;
        if !meta.is_file() {
            return Err(FilesError::NotFound);
        }
        if meta.len() > max_bytes {
            return Err(FilesError::TooLarge { limit: max_bytes });
        }
        let mut bytes = Vec::new();
        // The file may grow between the check and the read: read one byte past the limit to see.
        file.take(max_bytes + 1)
            .read_to_end(&mut bytes)
            .map_err(FilesError::Io)?;
        if bytes.len() as u64 > max_bytes {
            return Err(FilesError::TooLarge { limit: max_bytes });
        }
        Ok((self.entry(path.clone(), &meta), bytes))
    }
}

impl LocalFiles {
    /// Open `real` (a path [`Self::resolve`] checked) for reading, and check that what was opened
    /// is still under the root and a regular file: a folder on the way may have been swapped for
    /// a link since the check. The path is opened first as a bare reference (`O_PATH`, which opens
    /// no device and waits on no FIFO; `O_NOFOLLOW`: a link swapped in as the file itself is not
    /// followed), checked by where the kernel says that descriptor leads (`/proc/self/fd`) and by
    /// its type, and only then opened for reading, through the descriptor: the very file checked.
    pub(super) fn open_inside(&self, real: &Path) -> Result<std::fs::File, FilesError> {
        let reference = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
            .open(real)
            .map_err(not_found_or_io)?;
        let opened = opened_path(&reference).map_err(FilesError::Io)?;
        if !opened.starts_with(&self.root) {
            tracing::warn!("refused a file swapped for a link out of backends.files.root after its check");
            return Err(FilesError::BadFileId);
        }
        // A link (O_NOFOLLOW with O_PATH opens the link itself), a FIFO or a device: not a document.
        if !reference.metadata().map_err(FilesError::Io)?.is_file() {
            return Err(FilesError::NotFound);
        }
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(fd_path(&reference))
            .map_err(not_found_or_io)
    }
}

/// A file or folder gone, or swapped for a file (`ENOTDIR`) or a link (`ELOOP`), since the check
/// names nothing: not an outage of the store.
fn not_found_or_io(e: std::io::Error) -> FilesError {
    if e.kind() == std::io::ErrorKind::NotFound || matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) {
        FilesError::NotFound
    } else {
        FilesError::Io(e)
    }
}

/// The `/proc` name of an open descriptor (a link to what it refers to).
fn fd_path(file: &std::fs::File) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// Where an open file is, as the kernel resolved it when opening. Linux with `/proc` mounted, as
/// the whole server (`sandbox.rs` sets Linux resource limits too): without it no local file is
/// read ("unavailable", logged).
fn opened_path(file: &std::fs::File) -> std::io::Result<PathBuf> {
    std::fs::read_link(fd_path(file))
}

/// Dotfiles and dot-folders (`.git`, editor swap files) are not documents.
fn is_hidden(name: &std::ffi::OsStr) -> bool {
    name.to_str().is_none_or(|n| n.starts_with('.'))
}

#[async_trait::async_trait]
impl FilesBackend for LocalFiles {
    async fn candidates(&self, _words: &[String], by_content: bool) -> Result<Candidates, FilesError> {
        let this = Self {
            root: self.root.clone(),
        };
        let deadline = walk_deadline(by_content).map(tokio::time::Instant::into_std);
        tokio::task::spawn_blocking(move || this.walk(deadline))
            .await
            .map_err(|_| FilesError::Worker)?
    }

    async fn read(
        &self,
        path: &RelPath,
        max_bytes: u64,
    ) -> Result<(FileEntry, Vec<u8>), FilesError> {
        let this = Self {
            root: self.root.clone(),
        };
        let path = path.clone();
        tokio::task::spawn_blocking(move || this.read_now(&path, max_bytes))
            .await
            .map_err(|_| FilesError::Worker)?
    }
}
