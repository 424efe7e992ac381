//! The WebDAV walk: every file below the root, breadth first, one `PROPFIND Depth: 1` per folder,
//! bounded in depth, folders, entries and time.
//!
//! Only the root decides whether the walk fails: once it is listed, a folder below it that fails
//! (an offline external storage answering 503, a 403, a redirect, a listing over the size cap, a
//! request cut off at the walk's time) is left out, the answer is marked `truncated`, and `/readyz`
//! is left alone. The walk's time is a share of what is left of the call (`walk_deadline`), so it
//! stops in time to answer what it found (and, for a content search, leaves time to read files)
//! instead of being cut off with the call and losing every file already listed.

use std::collections::VecDeque;

use super::WebdavFiles;
use super::client::Reach;
use crate::tools::files::FilesError;
use crate::tools::files::backend::{Candidates, MAX_WALK_DEPTH, MAX_WALK_ENTRIES, MAX_WALK_FOLDERS, walk_deadline};
use crate::tools::files::file_id::RelPath;

impl WebdavFiles {
    /// Every file below the root, breadth first, within the walk's bounds, and whether they (or a
    /// folder that could not be listed) left files out.
    pub(super) async fn walk(&self, by_content: bool) -> Result<Candidates, FilesError> {
        let deadline = walk_deadline(by_content);
        let mut files = Vec::new();
        let mut folders = Pending::new();
        while let Some((folder, depth)) = folders.next() {
            if files.len() >= MAX_WALK_ENTRIES {
                folders.cut = true;
                break;
            }
            let resources = match &folder {
                // 403 on the root: these credentials may not read the user's files.
                None => match self.propfind(&self.root, Reach::Server).await {
                    Err(FilesError::Forbidden) => return Err(FilesError::CredentialsRefused),
                    listing => listing?,
                },
                Some(path) => {
                    let listing = async {
                        let url = self.url_of(path)?;
                        self.propfind(&url, Reach::OneFolder).await
                    };
                    let listing = match deadline {
                        Some(at) => tokio::time::timeout_at(at, listing).await,
                        None => Ok(listing.await),
                    };
                    match listing {
                        Ok(Ok(resources)) => resources,
                        // The credentials are refused everywhere, not in this folder alone.
                        Ok(Err(err @ FilesError::CredentialsRefused)) => return Err(err),
                        Ok(Err(err)) => {
                            tracing::debug!(error = %err, "a WebDAV folder could not be listed; left out");
                            folders.cut = true;
                            continue;
                        }
                        Err(_) => {
                            tracing::debug!("the WebDAV walk ran out of time; answering what it found");
                            folders.cut = true;
                            break;
                        }
                    }
                }
            };
            folders.listed += 1;
            for resource in resources {
                let Ok(Some(path)) = self.path_of(&resource.href) else {
                    continue;
                };
                if folder.as_ref() == Some(&path) || path.name().starts_with('.') {
                    continue;
                }
                if resource.is_collection {
                    if depth + 1 < MAX_WALK_DEPTH {
                        folders.push(path, depth + 1);
                    } else {
                        folders.cut = true;
                    }
                } else if files.len() < MAX_WALK_ENTRIES {
                    files.push(self.entry(path, &resource)?);
                } else {
                    folders.cut = true;
                }
            }
        }
        let truncated = folders.cut || !folders.queue.is_empty();
        if truncated {
            tracing::debug!("WebDAV listing cut at its bounds");
        }
        Ok(Candidates { files, truncated })
    }
}

/// The folders a walk has still to list, breadth first, and how many it has listed.
struct Pending {
    queue: VecDeque<(Option<RelPath>, usize)>,
    listed: usize,
    /// Whether a folder or file was left out for the walk's bounds, or a folder could not be listed.
    cut: bool,
}

impl Pending {
    /// The root, to be listed first.
    fn new() -> Self {
        Self {
            queue: VecDeque::from([(None, 0)]),
            listed: 0,
            cut: false,
        }
    }

    /// The next folder to list, while the walk may list more.
    fn next(&mut self) -> Option<(Option<RelPath>, usize)> {
        if self.listed >= MAX_WALK_FOLDERS {
            return None;
        }
        self.queue.pop_front()
    }

    /// Queue `folder`, unless the walk could not list it anyway: one listing may name thousands of
    /// subfolders, and only [`MAX_WALK_FOLDERS`] are ever listed.
    fn push(&mut self, folder: RelPath, depth: usize) {
        if self.listed + self.queue.len() >= MAX_WALK_FOLDERS {
            self.cut = true;
            return;
        }
        self.queue.push_back((Some(folder), depth));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that lists thousands of subfolders: only as many are queued as the walk may still
    /// list, and the walk knows it was cut.
    #[test]
    fn the_walk_queues_no_more_folders_than_it_may_list() {
        let mut folders = Pending::new();
        assert!(
            folders
                .next()
                .is_some_and(|(root, depth)| root.is_none() && depth == 0)
        );
        folders.listed += 1;
        for i in 0..10_000 {
            folders.push(RelPath::parse(&format!("/Folder {i}")).unwrap(), 1);
        }
        assert_eq!(folders.queue.len(), MAX_WALK_FOLDERS - 1);
        assert!(folders.cut);
        let mut listed = 0;
        while let Some((folder, _)) = folders.next() {
            assert!(folder.is_some());
            folders.listed += 1;
            listed += 1;
        }
        assert_eq!(listed, MAX_WALK_FOLDERS - 1);
    }

}
