//! The WebDAV backend (`backends.files.kind = "webdav"`): a Nextcloud user's files at
//! `https://HOST/remote.php/dav/files/USER/`, or any RFC 4918 server (tests use wsgidav).
//!
//! A name search uses the server's WebDAV SEARCH when it advertises one ([`dasl`]: files and
//! folders by name, then the files below each matching folder); otherwise, and for content
//! searches, listing is a breadth-first walk of `PROPFIND Depth: 1` requests ([`walk`]; servers
//! such as Nextcloud refuse `Depth: infinity`), bounded in depth, folders, entries and time (a
//! listing cut at a bound, or missing a folder that could not be listed, says so, and so does the
//! search's answer). Every `href` a server returns is
//! resolved against the root and kept only when it stays on the root's origin and below its path;
//! every URL voxgate builds from a [`RelPath`] is checked the same way before it is requested.

mod client;
mod dasl;
mod multistatus;
mod walk;

use reqwest::Method;
use url::Url;

use self::client::{DavClient, Reach};
use self::dasl::Dasl;
use self::multistatus::DavResource;
use super::FilesError;
use super::backend::{Candidates, FileEntry, FilesBackend, Health, mime_for};
use super::file_id::RelPath;
use crate::config::FilesBackendConfig;

/// Largest multistatus answer read (a folder of a few thousand entries is well below this).
const MAX_MULTISTATUS_BYTES: u64 = 8 * 1024 * 1024;
/// Largest body of an answer to `OPTIONS` read (only its headers are used; it is usually empty).
const MAX_OPTIONS_BYTES: u64 = 64 * 1024;

const PROPFIND_BODY: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<d:propfind xmlns:d="DAV:"><d:prop><d:resourcetype/><d:getcontentlength/><d:getlastmodified/><d:getcontenttype/></d:prop></d:propfind>"#;

/// A WebDAV collection and everything below it.
#[derive(Debug)]
pub struct WebdavFiles {
    /// The root collection, with a trailing slash.
    root: Url,
    client: DavClient,
    /// Where a WebDAV SEARCH would go (Nextcloud: the DAV root).
    dasl: Dasl,
    /// Whether the server offers SEARCH: asked once (OPTIONS), remembered after an answer.
    dasl_offered: tokio::sync::OnceCell<bool>,
}

impl WebdavFiles {
    pub fn new(config: &FilesBackendConfig) -> Result<Self, FilesError> {
        let url = config.url.as_deref().ok_or_else(|| {
            FilesError::Config("backends.files.url: required for kind = \"webdav\"".into())
        })?;
        let mut root = Url::parse(url)
            .map_err(|_| FilesError::Config("backends.files.url: not a URL".into()))?;
        if !matches!(root.scheme(), "http" | "https") || root.host().is_none() {
            return Err(FilesError::Config(
                "backends.files.url: must be an http(s) URL".into(),
            ));
        }
        if !root.username().is_empty() || root.password().is_some() {
            return Err(FilesError::Config(
                "backends.files.url: put credentials in backends.files.username / .password, not in the URL".into(),
            ));
        }
        root.set_query(None);
        root.set_fragment(None);
        if !root.path().ends_with('/') {
            let path = format!("{}/", root.path());
            root.set_path(&path);
        }
        let client = DavClient::new(config.username.clone(), config.password.clone())?;
        let dasl = Dasl::for_root(&root);
        Ok(Self {
            root,
            client,
            dasl,
            dasl_offered: tokio::sync::OnceCell::new(),
        })
    }

    /// Ask the server once (OPTIONS on the root) so `/readyz` can tell whether it is reachable.
    pub async fn probe(&self) {
        match self
            .client
            .send(Reach::Server, Method::OPTIONS, &self.root, None, None, MAX_OPTIONS_BYTES)
            .await
        {
            Ok(_) => tracing::info!("the WebDAV file server is reachable"),
            Err(err) => {
                tracing::warn!(error = %err, "the WebDAV file server is not usable at start; file tools will fail until it is")
            }
        }
    }

    /// The URL of `path` (segments percent-encoded), checked to lie below the root.
    fn url_of(&self, path: &RelPath) -> Result<Url, FilesError> {
        let mut url = self.root.clone();
        url.path_segments_mut()
            .map_err(|_| FilesError::BadFileId)?
            .pop_if_empty()
            .extend(path.segments());
        if url.origin() != self.root.origin() || !url.path().starts_with(self.root.path()) {
            return Err(FilesError::BadFileId);
        }
        Ok(url)
    }

    /// The path under the root that a server `href` names; `Ok(None)` for the root itself, `Err`
    /// for anything that is not below the root.
    ///
    /// Paths are compared segment by segment once decoded, not as strings: servers encode the
    /// same name differently (sabre/dav writes `%c3%84` and `%26`, wsgidav `%28`, the url crate
    /// `%C3%84` and a raw `&`).
    fn path_of(&self, href: &str) -> Result<Option<RelPath>, FilesError> {
        let url = self.root.join(href).map_err(|_| FilesError::BadFileId)?;
        if url.origin() != self.root.origin() {
            return Err(FilesError::BadFileId);
        }
        let mut segments = decoded_segments(&url).ok_or(FilesError::BadFileId)?;
        let root = decoded_segments(&self.root).ok_or(FilesError::BadFileId)?;
        // The root ends with a slash: its last segment is empty.
        let root = root.split_last().map_or(&[][..], |(_, parent)| parent);
        if !segments.starts_with(root) {
            return Err(FilesError::BadFileId);
        }
        segments.drain(..root.len());
        while segments.last().is_some_and(Vec::is_empty) {
            segments.pop();
        }
        if segments.is_empty() {
            return Ok(None);
        }
        let segments = segments
            .into_iter()
            .map(String::from_utf8)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| FilesError::BadFileId)?;
        RelPath::from_segments(segments).map(Some)
    }

    /// Send a request whose answer is a multistatus (PROPFIND, SEARCH) and parse it.
    async fn multistatus(
        &self,
        reach: Reach,
        method: &[u8],
        url: &Url,
        depth: Option<&'static str>,
        body: &str,
    ) -> Result<Vec<DavResource>, FilesError> {
        let method = Method::from_bytes(method).map_err(|_| FilesError::Malformed)?;
        // A listing larger than the cap is not a file that is too large: the answer is unusable.
        let answer = self
            .client
            .send(reach, method, url, depth, Some(body), MAX_MULTISTATUS_BYTES)
            .await
            .map_err(|e| match e {
                FilesError::TooLarge { .. } => FilesError::Malformed,
                other => other,
            })?;
        multistatus::parse(&answer.body)
    }

    async fn propfind(&self, url: &Url, reach: Reach) -> Result<Vec<DavResource>, FilesError> {
        self.multistatus(reach, b"PROPFIND", url, Some("1"), PROPFIND_BODY)
            .await
    }

    fn entry(&self, path: RelPath, resource: &DavResource) -> Result<FileEntry, FilesError> {
        let url = self.url_of(&path)?.to_string();
        let mime_type = resource
            .content_type
            .clone()
            .unwrap_or_else(|| mime_for(&path.extension()).to_string());
        Ok(FileEntry {
            path,
            size: resource.length.unwrap_or(0),
            modified: resource.modified,
            mime_type,
            url,
        })
    }

    /// Does the server advertise `DAV:basicsearch` at the arbiter? A failed OPTIONS is not
    /// remembered, so a server that was down is asked again next time.
    async fn search_offered(&self) -> bool {
        let ask = || async {
            let answer = self
                .client
                .send(Reach::Server, Method::OPTIONS, &self.dasl.arbiter, None, None, MAX_OPTIONS_BYTES)
                .await?;
            Ok::<bool, FilesError>(Dasl::advertised(&answer.headers))
        };
        self.dasl_offered
            .get_or_try_init(ask)
            .await
            .copied()
            .unwrap_or(false)
    }
}

/// The path segments of `url`, percent-decoded to bytes (the root's need not be UTF-8).
fn decoded_segments(url: &Url) -> Option<Vec<Vec<u8>>> {
    let segments = url.path_segments()?;
    Some(
        segments
            .map(|s| percent_encoding::percent_decode_str(s).collect())
            .collect(),
    )
}

#[async_trait::async_trait]
impl FilesBackend for WebdavFiles {
    async fn candidates(
        &self,
        words: &[String],
        by_content: bool,
    ) -> Result<Candidates, FilesError> {
        // A name search can use the server's index; a content search needs every file anyway.
        if !words.is_empty() && !by_content && self.search_offered().await {
            match self.search(words).await {
                Ok(found) => return Ok(found),
                Err(err @ FilesError::CredentialsRefused) => return Err(err),
                Err(err) => {
                    tracing::debug!(error = %err, "WebDAV SEARCH failed; walking the folders instead")
                }
            }
        }
        self.walk(by_content).await
    }

    async fn read(
        &self,
        path: &RelPath,
        max_bytes: u64,
    ) -> Result<(FileEntry, Vec<u8>), FilesError> {
        let url = self.url_of(path)?;
        // Metadata first: a folder is not a file, and an advertised size over the limit is refused
        // before any download starts.
        let resources = self.propfind(&url, Reach::Server).await?;
        let own = resources
            .into_iter()
            .find(|r| self.path_of(&r.href).ok().flatten().as_ref() == Some(path))
            .ok_or(FilesError::NotFound)?;
        if own.is_collection {
            return Err(FilesError::NotFound);
        }
        if own.length.is_some_and(|len| len > max_bytes) {
            return Err(FilesError::TooLarge { limit: max_bytes });
        }
        let bytes = self.client.send(Reach::Server, Method::GET, &url, None, None, max_bytes).await?.body;
        let mut entry = self.entry(path.clone(), &own)?;
        entry.size = bytes.len() as u64;
        Ok((entry, bytes))
    }

    fn health(&self) -> Health {
        self.client.health()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(url: &str) -> WebdavFiles {
        let config = FilesBackendConfig {
            url: Some(url.into()),
            ..FilesBackendConfig::default()
        };
        WebdavFiles::new(&config).unwrap()
    }

    #[test]
    fn hrefs_outside_the_root_are_refused() {
        let dav = backend("https://cloud.example.org/remote.php/dav/files/alice");
        assert_eq!(
            dav.root.as_str(),
            "https://cloud.example.org/remote.php/dav/files/alice/"
        );
        let path = |href: &str| dav.path_of(href).map(|p| p.map(|p| p.display()));
        assert_eq!(path("/remote.php/dav/files/alice/").unwrap(), None);
        assert_eq!(
            path("/remote.php/dav/files/alice/A%20b/c.pdf")
                .unwrap()
                .as_deref(),
            Some("/A b/c.pdf")
        );
        assert_eq!(
            path("https://cloud.example.org/remote.php/dav/files/alice/x.txt")
                .unwrap()
                .as_deref(),
            Some("/x.txt")
        );
        for bad in [
            "/remote.php/dav/files/bob/x.txt",
            "https://evil.example.org/remote.php/dav/files/alice/x.txt",
            "/remote.php/dav/files/alice/../bob/x.txt",
            "/remote.php/dav/files/alice/a/%2e%2e/%2e%2e/bob/x.txt",
            "/remote.php/dav/files/alice/a%2Fb",
        ] {
            assert!(dav.path_of(bad).is_err(), "{bad} accepted");
        }
    }

    /// Servers encode a path each their own way: sabre/dav (Nextcloud) writes `%c3%84` and `%26`,
    /// wsgidav `%C3%84`, `%26`, `%28`, the url crate `%C3%84` and a raw `&`. They name the same
    /// folder, so a root named with such characters must match every one of them.
    #[test]
    fn hrefs_match_a_root_with_non_ascii_and_reserved_characters() {
        for root in [
            "https://cloud.example.org/remote.php/dav/files/alice/Ärzte & Co (Team)",
            "https://cloud.example.org/remote.php/dav/files/alice/%C3%84rzte%20%26%20Co%20%28Team%29/",
        ] {
            let dav = backend(root);
            let path = |href: &str| dav.path_of(href).map(|p| p.map(|p| p.display()));
            for href in [
                "/remote.php/dav/files/alice/%c3%84rzte%20%26%20Co%20(Team)/A%20b/x.txt",
                "/remote.php/dav/files/alice/%C3%84rzte%20%26%20Co%20%28Team%29/A%20b/x.txt",
                "https://cloud.example.org/remote.php/dav/files/alice/%C3%84rzte%20&%20Co%20(Team)/A%20b/x.txt",
            ] {
                assert_eq!(
                    path(href).unwrap().as_deref(),
                    Some("/A b/x.txt"),
                    "{root}: {href}"
                );
            }
            assert_eq!(
                path("/remote.php/dav/files/alice/%c3%84rzte%20%26%20Co%20(Team)/").unwrap(),
                None
            );
            for bad in [
                "/remote.php/dav/files/alice/%c3%84rzte%20%26%20Co/x.txt",
                "/remote.php/dav/files/alice/%c3%84rzte%20%26%20Co%20(Team)x/x.txt",
                "/remote.php/dav/files/alice/x.txt",
                "/remote.php/dav/files/alice/%c3%84rzte%20%26%20Co%20(Team)/%2e%2e/x.txt",
            ] {
                assert!(dav.path_of(bad).is_err(), "{root}: {bad} accepted");
            }
        }
    }

    #[test]
    fn urls_are_built_below_the_root_with_encoded_segments() {
        let dav = backend("http://127.0.0.1:9/dav/");
        let url = dav
            .url_of(&RelPath::parse("/Protocols/Diabetes & insulin #2.pdf").unwrap())
            .unwrap();
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:9/dav/Protocols/Diabetes%20&%20insulin%20%232.pdf"
        );
    }

    #[test]
    fn credentials_in_the_url_and_other_schemes_are_refused() {
        for url in ["ftp://host/dav/", "https://user:pw@host/dav/", "not a url"] {
            let config = FilesBackendConfig {
                url: Some(url.into()),
                ..FilesBackendConfig::default()
            };
            assert!(WebdavFiles::new(&config).is_err(), "{url}");
        }
    }
}
