//! File identities: [`RelPath`], a path checked to stay under the configured root, and the opaque
//! `file_id` the model gets for it.
//!
//! A `file_id` is `f1.` followed by the base64url of the file's path under the root. It carries no
//! authority of its own: every use decodes it and validates the path again (no `..`, no `.`, no
//! empty or absolute segments, no backslashes or NULs, bounded length), and each backend then
//! checks the resolved location (local: the canonical path, symlinks followed, lies under the
//! canonical root; WebDAV: the URL stays on the root's origin and below its path). So an id made
//! up by a model, or copied from another deployment, can at worst name another file under the root
//! the user may read anyway. Ids survive restarts because nothing about them is per-process.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::FilesError;

const PREFIX: &str = "f1.";
/// Longest path accepted, in bytes (PATH_MAX on Linux is 4096; real document trees stay far below).
pub const MAX_PATH_BYTES: usize = 1024;
/// Deepest path accepted, in segments.
const MAX_SEGMENTS: usize = 32;
/// Longest `file_id` the schema admits: the prefix plus base64 of the longest path.
pub const MAX_FILE_ID_CHARS: u64 = (PREFIX.len() + MAX_PATH_BYTES.div_ceil(3) * 4) as u64;

/// A file's path under the root, as segments that are each a plain name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RelPath(Vec<String>);

impl RelPath {
    /// Validate `/a/b.pdf` or `a/b.pdf`. Only a single leading `/` is allowed (it means "the root").
    pub fn parse(path: &str) -> Result<RelPath, FilesError> {
        let inner = path.strip_prefix('/').unwrap_or(path);
        if inner.is_empty() || inner.len() > MAX_PATH_BYTES {
            return Err(FilesError::BadFileId);
        }
        let segments: Vec<String> = inner.split('/').map(str::to_string).collect();
        if segments.len() > MAX_SEGMENTS || !segments.iter().all(|s| is_plain_name(s)) {
            return Err(FilesError::BadFileId);
        }
        Ok(RelPath(segments))
    }

    /// A path from segments already split (a directory walk or a WebDAV href).
    pub fn from_segments(segments: Vec<String>) -> Result<RelPath, FilesError> {
        if segments.is_empty()
            || segments.len() > MAX_SEGMENTS
            || !segments.iter().all(|s| is_plain_name(s))
        {
            return Err(FilesError::BadFileId);
        }
        let path = RelPath(segments);
        if path.display().len() > MAX_PATH_BYTES + 1 {
            return Err(FilesError::BadFileId);
        }
        Ok(path)
    }

    /// Decode a `file_id` given by the model.
    pub fn from_file_id(file_id: &str) -> Result<RelPath, FilesError> {
        let encoded = file_id
            .trim()
            .strip_prefix(PREFIX)
            .ok_or(FilesError::BadFileId)?;
        let bytes = URL_SAFE_NO_PAD
            .decode(encoded)
            .map_err(|_| FilesError::BadFileId)?;
        let text = String::from_utf8(bytes).map_err(|_| FilesError::BadFileId)?;
        // Ids are always made from a path without the leading slash; anything else was not ours.
        if text.starts_with('/') {
            return Err(FilesError::BadFileId);
        }
        RelPath::parse(&text)
    }

    /// The opaque id of this path.
    pub fn file_id(&self) -> String {
        format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(self.0.join("/")))
    }

    /// `/a/b.pdf`: the `path` shown in results.
    pub fn display(&self) -> String {
        format!("/{}", self.0.join("/"))
    }

    pub fn segments(&self) -> &[String] {
        &self.0
    }

    /// The last segment: the file's name.
    pub fn name(&self) -> &str {
        self.0.last().map(String::as_str).unwrap_or_default()
    }

    /// The extension of the name, lower-case, without the dot (`""` when there is none).
    pub fn extension(&self) -> String {
        match self.name().rsplit_once('.') {
            Some((stem, ext)) if !stem.is_empty() => ext.to_ascii_lowercase(),
            _ => String::new(),
        }
    }

    /// This path with one more segment.
    pub fn child(&self, name: &str) -> Result<RelPath, FilesError> {
        let mut segments = self.0.clone();
        segments.push(name.to_string());
        RelPath::from_segments(segments)
    }
}

/// A name that is a single plain path segment on every platform voxgate talks to.
fn is_plain_name(segment: &str) -> bool {
    !segment.is_empty()
        && segment != "."
        && segment != ".."
        && segment.len() <= 255
        && !segment.contains(['/', '\\', '\0'])
        && !segment.chars().any(char::is_control)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_are_not_plain_paths() {
        let path = RelPath::parse("/Protocols/Diabetes management (2024).pdf").unwrap();
        let id = path.file_id();
        assert!(
            id.starts_with("f1.") && !id.contains('/') && !id.contains("Protocols"),
            "{id}"
        );
        assert_eq!(RelPath::from_file_id(&id).unwrap(), path);
        assert_eq!(path.display(), "/Protocols/Diabetes management (2024).pdf");
        assert_eq!(path.name(), "Diabetes management (2024).pdf");
        assert_eq!(path.extension(), "pdf");
        assert!(id.len() as u64 <= MAX_FILE_ID_CHARS);
    }

    #[test]
    fn traversal_and_odd_paths_are_refused() {
        for bad in [
            "",
            "/",
            "..",
            "../etc/passwd",
            "a/../../b",
            "a/./b",
            "a//b",
            "//host/share",
            "a\\..\\b",
            "a/\0b",
            "a/b/",
            "a/\nb",
        ] {
            assert!(RelPath::parse(bad).is_err(), "{bad:?} accepted");
            let forged = format!("f1.{}", URL_SAFE_NO_PAD.encode(bad));
            assert!(
                RelPath::from_file_id(&forged).is_err(),
                "{bad:?} accepted as an id"
            );
        }
        let absolute = format!("f1.{}", URL_SAFE_NO_PAD.encode("/etc/passwd"));
        assert!(RelPath::from_file_id(&absolute).is_err());
        for junk in [
            "",
            "f1.",
            "f1.!!!",
            "x1.YQ",
            "../etc/passwd",
            "http://other.host/a.pdf",
        ] {
            assert!(RelPath::from_file_id(junk).is_err(), "{junk:?} accepted");
        }
        assert!(RelPath::parse(&"a/".repeat(40)).is_err());
        assert!(RelPath::parse(&"x".repeat(MAX_PATH_BYTES + 1)).is_err());
    }

    #[test]
    fn extensions_ignore_dotfiles() {
        assert_eq!(RelPath::parse(".profile").unwrap().extension(), "");
        assert_eq!(RelPath::parse("README").unwrap().extension(), "");
        assert_eq!(RelPath::parse("a/Letter.DOCX").unwrap().extension(), "docx");
    }
}
