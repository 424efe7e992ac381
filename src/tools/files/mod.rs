//! File tools (`search_nextcloud_files`, `retrieve_nextcloud_file`) and their backends.
//!
//! The tools ([`tools`](self::tools) module) talk to one shared [`FilesBackend`]: the embedded
//! [`LocalFiles`] (a folder, default `./data/files` with sample documents) or [`WebdavFiles`] (a
//! Nextcloud account or any WebDAV server). Files are named to the model only by an opaque
//! `file_id` ([`file_id`]) that can only ever resolve below the configured root; their text is
//! extracted by [`extract`]. Nothing in this folder logs or returns file names, paths, text or URLs
//! in an error: results are PHI and taint the session (see `ToolSpec::results_identify_people`).

mod backend;
mod error;
mod extract;
mod pdf_dict;
mod pdf_guard;
pub mod sandbox;
mod file_id;
mod local;
mod search;
#[cfg(test)]
mod tests;
mod tools;
mod webdav;

use std::sync::Arc;

use crate::config::{FilesBackendConfig, FilesKind};

pub use self::backend::{FileEntry, FilesBackend, Health};
pub use self::error::FilesError;
pub use self::file_id::RelPath;
pub use self::local::LocalFiles;
pub use self::tools::{RetrieveNextcloudFile, SearchNextcloudFiles};
pub use self::webdav::WebdavFiles;

/// Both file tools over one backend built from `[backends.files]`.
///
/// `kind = "local"` opens (or creates) the folder at `root`. `kind = "webdav"` checks the URL and,
/// when a runtime is running, probes the server once in the background: a server that cannot be
/// reached at start makes `/readyz` report the tools as degraded, and the process serves on.
pub fn tools(config: &FilesBackendConfig) -> Result<Vec<Arc<dyn crate::tools::Tool>>, FilesError> {
    let backend: Arc<dyn FilesBackend> = match config.kind {
        FilesKind::Local => Arc::new(LocalFiles::open(&config.root)?),
        FilesKind::Webdav => {
            let webdav = Arc::new(WebdavFiles::new(config)?);
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let probe = Arc::clone(&webdav);
                runtime.spawn(async move { probe.probe().await });
            }
            webdav
        }
    };
    Ok(tools_with_backend(backend, config.max_file_bytes))
}

/// Both file tools over the given backend (one `Arc`, shared by the two tools).
pub fn tools_with_backend(
    backend: Arc<dyn FilesBackend>,
    max_file_bytes: u64,
) -> Vec<Arc<dyn crate::tools::Tool>> {
    vec![
        Arc::new(SearchNextcloudFiles::new(
            Arc::clone(&backend),
            max_file_bytes,
        )),
        Arc::new(RetrieveNextcloudFile::new(backend, max_file_bytes)),
    ]
}
