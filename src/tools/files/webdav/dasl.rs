//! WebDAV SEARCH (RFC 5323 `DAV:basicsearch`), as Nextcloud implements it: a request that asks
//! the server for the files and folders whose name contains a query word, instead of walking every
//! folder.
//!
//! Nextcloud's search arbiter is the DAV root (`/remote.php/dav/`) and the scope is the user's
//! files path below it (`/files/USER/…`); the arbiter advertises itself with the response header
//! `DASL: <DAV:basicsearch>` on `OPTIONS`. Other servers are asked at the root itself.
//!
//! A name search matches folders as well as files: a file is found by the words of its whole path,
//! so the files below a folder whose name matches are asked for too, one SEARCH per folder
//! (Nextcloud takes one scope per request), as [`Dasl::files_below`] builds it. Files and folders
//! are asked for by name in two SEARCHes, each with its own limit, so that many matching folders
//! cannot take the places of matching files in one answer's [`MAX_SEARCH_RESULTS`]. An answer that
//! long, more matching folders than are searched, or more files than a walk lists marks the
//! listing as cut, and the search's answer says so.

use std::collections::HashSet;

use futures::StreamExt;
use url::Url;

use super::WebdavFiles;
use super::client::Reach;
use super::multistatus::DavResource;
use crate::tools::files::FilesError;
use crate::tools::files::backend::{Candidates, FileEntry, MAX_WALK_ENTRIES};
use crate::tools::files::file_id::RelPath;

/// Most entries asked of the server in one search.
pub const MAX_SEARCH_RESULTS: usize = 500;
/// Folders whose files a name search asks for, when their name matched (each SEARCH returns at
/// most [`MAX_SEARCH_RESULTS`] files, so this bounds the search as the walk is bounded).
const MAX_MATCHED_FOLDERS: usize = 10;
/// Folder searches in flight at a time.
const FOLDER_SEARCHES_AT_ONCE: usize = 4;

/// Where to send a SEARCH and what scope to give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dasl {
    /// The URL the SEARCH (and the OPTIONS that discovers it) goes to.
    pub arbiter: Url,
    /// The scope `href`, as the server expects it (an absolute path below the arbiter).
    pub scope: String,
    /// Where a scope starts in a URL's path: after `/remote.php/dav` for Nextcloud, else at 0.
    scope_from: usize,
}

impl Dasl {
    /// The arbiter and scope for a files root: Nextcloud's `…/remote.php/dav/` + `/files/USER/…`,
    /// or the root itself.
    pub fn for_root(root: &Url) -> Dasl {
        const NEXTCLOUD_DAV: &str = "/remote.php/dav/";
        if let Some(at) = root.path().find(NEXTCLOUD_DAV) {
            let split = at + NEXTCLOUD_DAV.len() - 1;
            let mut arbiter = root.clone();
            arbiter.set_path(&root.path()[..=split]);
            return Dasl {
                arbiter,
                scope: root.path()[split..].to_string(),
                scope_from: split,
            };
        }
        Dasl {
            arbiter: root.clone(),
            scope: root.path().to_string(),
            scope_from: 0,
        }
    }

    /// The scope `href` of a folder below the root (`url` as `WebdavFiles::url_of` builds it).
    pub fn scope_of(&self, url: &Url) -> Option<String> {
        let scope = url.path().get(self.scope_from..)?;
        Some(format!("{}/", scope.trim_end_matches('/')))
    }

    /// Does an `OPTIONS` answer's `DASL` header offer basicsearch?
    pub fn advertised(headers: &reqwest::header::HeaderMap) -> bool {
        headers
            .get_all("DASL")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.to_ascii_lowercase().contains("dav:basicsearch"))
    }

    /// A basicsearch for files (not folders) below the root whose display name contains any of
    /// `words`.
    pub fn files_named(&self, words: &[String]) -> String {
        let condition = format!("<d:and><d:not><d:is-collection/></d:not>{}</d:and>", named(words));
        request(&self.scope, &condition)
    }

    /// A basicsearch for folders below the root whose display name contains any of `words`.
    pub fn folders_named(&self, words: &[String]) -> String {
        request(&self.scope, &format!("<d:and><d:is-collection/>{}</d:and>", named(words)))
    }

    /// A basicsearch for every file (not folder) below the folder whose scope is `scope`.
    pub fn files_below(&self, scope: &str) -> String {
        request(scope, "<d:not><d:is-collection/></d:not>")
    }
}

/// A `DAV:where` operator: the display name contains any of `words`. `words` are letters and digits
/// only (see `search::query_words`), so they need no escaping and hold no `LIKE` wildcards.
fn named(words: &[String]) -> String {
    let likes: String = words
        .iter()
        .filter(|w| w.chars().all(char::is_alphanumeric))
        .map(|w| {
            format!(
                "<d:like><d:prop><d:displayname/></d:prop><d:literal>%{w}%</d:literal></d:like>"
            )
        })
        .collect();
    format!("<d:or>{likes}</d:or>")
}

/// A basicsearch of `scope`, at any depth, for what `condition` (a `DAV:where` operator) allows.
fn request(scope: &str, condition: &str) -> String {
    let scope = quick_xml::escape::escape(scope);
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<d:searchrequest xmlns:d="DAV:"><d:basicsearch>
<d:select><d:prop><d:resourcetype/><d:getcontentlength/><d:getlastmodified/><d:getcontenttype/></d:prop></d:select>
<d:from><d:scope><d:href>{scope}</d:href><d:depth>infinity</d:depth></d:scope></d:from>
<d:where>{condition}</d:where>
<d:orderby/><d:limit><d:nresults>{MAX_SEARCH_RESULTS}</d:nresults></d:limit>
</d:basicsearch></d:searchrequest>"#
    )
}

impl WebdavFiles {
    /// Files below the root whose path contains one of `words`, by the server's SEARCH, as the
    /// walk would find them: the files whose name matches and the folders whose name matches (two
    /// SEARCHes, so neither takes the other's places), then every file below each matching folder
    /// (one SEARCH per folder, at most [`MAX_MATCHED_FOLDERS`]); and whether a bound left files
    /// out (an answer of [`MAX_SEARCH_RESULTS`], more matching folders, more files than
    /// [`MAX_WALK_ENTRIES`]).
    pub(super) async fn search(&self, words: &[String]) -> Result<Candidates, FilesError> {
        let mut found = Found::default();
        let (files_named, folders_named) = (self.dasl.files_named(words), self.dasl.folders_named(words));
        let ((files, files_full), (folders, folders_full)) = futures::try_join!(
            self.search_request(&files_named),
            self.search_request(&folders_named),
        )?;
        found.truncated = files_full || folders_full;
        for (path, resource) in files {
            // Trust no server to have applied the condition.
            if !resource.is_collection {
                found.add(self.entry(path, &resource)?);
            }
        }
        let mut folders: Vec<RelPath> = folders
            .into_iter()
            .filter(|(_, resource)| resource.is_collection)
            .map(|(path, _)| path)
            .collect();
        // Outer folders first; a folder inside one already kept adds nothing, its files come along.
        folders.sort_by_key(|f| f.segments().len());
        let mut kept: Vec<RelPath> = Vec::new();
        for folder in folders {
            if !kept.iter().any(|k| folder.segments().starts_with(k.segments())) {
                kept.push(folder);
            }
        }
        if kept.len() > MAX_MATCHED_FOLDERS {
            tracing::debug!("WebDAV SEARCH: only the first matching folders are listed");
            kept.truncate(MAX_MATCHED_FOLDERS);
            found.truncated = true;
        }
        let listings = futures::stream::iter(kept)
            .map(|folder| async move {
                let scope = self
                    .dasl
                    .scope_of(&self.url_of(&folder)?)
                    .ok_or(FilesError::BadFileId)?;
                self.search_request(&self.dasl.files_below(&scope)).await
            })
            .buffered(FOLDER_SEARCHES_AT_ONCE)
            .collect::<Vec<_>>()
            .await;
        for listing in listings {
            let resources = match listing {
                Ok((resources, full)) => {
                    found.truncated |= full;
                    resources
                }
                // As in the walk: a folder that vanished or that the server will not search is
                // skipped, and its files are missing from the answer.
                Err(FilesError::NotFound | FilesError::Forbidden | FilesError::Status(_)) => {
                    found.truncated = true;
                    continue;
                }
                Err(err) => return Err(err),
            };
            for (path, resource) in resources {
                if !resource.is_collection {
                    found.add(self.entry(path, &resource)?);
                }
            }
        }
        Ok(Candidates { files: found.files, truncated: found.truncated })
    }

    /// One SEARCH at the arbiter: what it names below the root, dotfiles and dot-folders left out;
    /// and whether the answer is as long as the request's limit (the server may have left more out).
    async fn search_request(&self, body: &str) -> Result<(Vec<(RelPath, DavResource)>, bool), FilesError> {
        let found = self
            .multistatus(Reach::Server, b"SEARCH", &self.dasl.arbiter, None, body)
            .await?;
        let full = found.len() >= MAX_SEARCH_RESULTS;
        let kept = found
            .into_iter()
            .filter_map(|resource| {
                // The scope is below the root, but trust no server: anything not below it is dropped.
                let path = self.path_of(&resource.href).ok().flatten()?;
                let hidden = path.segments().iter().any(|s| s.starts_with('.'));
                (!hidden).then_some((path, resource))
            })
            .collect();
        Ok((kept, full))
    }
}

/// The files a name search found so far: each once, at most [`MAX_WALK_ENTRIES`]; and whether a
/// bound left any out.
#[derive(Default)]
struct Found {
    files: Vec<FileEntry>,
    seen: HashSet<RelPath>,
    truncated: bool,
}

impl Found {
    fn add(&mut self, file: FileEntry) {
        if self.seen.contains(&file.path) {
            return;
        }
        if self.files.len() >= MAX_WALK_ENTRIES {
            self.truncated = true;
            return;
        }
        self.seen.insert(file.path.clone());
        self.files.push(file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nextcloud_roots_search_at_the_dav_root() {
        let root =
            Url::parse("https://cloud.example.org/remote.php/dav/files/alice/Clinic%20Docs/")
                .unwrap();
        let dasl = Dasl::for_root(&root);
        assert_eq!(
            dasl.arbiter.as_str(),
            "https://cloud.example.org/remote.php/dav/"
        );
        assert_eq!(dasl.scope, "/files/alice/Clinic%20Docs/");
        let other = Url::parse("http://127.0.0.1:9/dav/").unwrap();
        let dasl = Dasl::for_root(&other);
        assert_eq!((&dasl.arbiter, dasl.scope.as_str()), (&other, "/dav/"));
    }

    /// The files of a folder whose name matched: the folder's scope, files only, no name condition.
    #[test]
    fn a_folder_search_asks_for_every_file_below_it() {
        let dasl = Dasl::for_root(&Url::parse("https://h/remote.php/dav/files/alice/").unwrap());
        let folder = Url::parse("https://h/remote.php/dav/files/alice/Cardiology%20%26%20Co").unwrap();
        let scope = dasl.scope_of(&folder);
        assert_eq!(scope.as_deref(), Some("/files/alice/Cardiology%20%26%20Co/"));
        let body = dasl.files_below(&scope.unwrap());
        assert!(
            body.contains("<d:href>/files/alice/Cardiology%20%26%20Co/</d:href>")
                && body.contains("<d:not><d:is-collection/></d:not>")
                && !body.contains("<d:like>"),
            "{body}"
        );
        let other = Dasl::for_root(&Url::parse("http://127.0.0.1:9/dav/").unwrap());
        let folder = Url::parse("http://127.0.0.1:9/dav/A%20b").unwrap();
        assert_eq!(other.scope_of(&folder).as_deref(), Some("/dav/A%20b/"));
    }

    #[test]
    fn the_bodies_ask_for_name_matches_in_scope() {
        let dasl = Dasl::for_root(&Url::parse("https://h/remote.php/dav/files/alice/").unwrap());
        let words = ["diabetes".into(), "protocol".into(), "<x>".into()];
        let files = dasl.files_named(&words);
        // Folders too, in a SEARCH of their own: a folder's name is part of the path of every file
        // in it, and matching folders must not take the places of matching files.
        let folders = dasl.folders_named(&words);
        for body in [&files, &folders] {
            assert!(body.contains("<d:href>/files/alice/</d:href>"), "{body}");
            assert!(
                body.contains("<d:literal>%diabetes%</d:literal>") && body.contains("%protocol%"),
                "{body}"
            );
            assert!(!body.contains("<x>"), "{body}");
        }
        assert!(files.contains("<d:and><d:not><d:is-collection/></d:not><d:or>"), "{files}");
        assert!(folders.contains("<d:and><d:is-collection/><d:or>"), "{folders}");
    }

    #[test]
    fn the_header_is_recognised() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert!(!Dasl::advertised(&headers));
        headers.insert("DASL", "<DAV:basicsearch>".parse().unwrap());
        assert!(Dasl::advertised(&headers));
    }
}
