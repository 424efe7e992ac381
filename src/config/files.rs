//! Checks of `[backends.files]`: a WebDAV backend needs an http(s) URL without credentials in it,
//! and the size bound must be sensible.

use super::{ConfigError, FilesBackendConfig, FilesKind};

/// Smallest and largest `backends.files.max_file_bytes` accepted.
const MIN_FILE_BYTES: u64 = 1024;
const MAX_FILE_BYTES: u64 = 1024 * 1024 * 1024;

pub(super) fn validate(files: &FilesBackendConfig) -> Result<(), ConfigError> {
    if !(MIN_FILE_BYTES..=MAX_FILE_BYTES).contains(&files.max_file_bytes) {
        return Err(ConfigError::new(
            "backends.files.max_file_bytes",
            "must be between 1 KiB and 1 GiB",
        ));
    }
    match files.kind {
        FilesKind::Local if files.root.as_os_str().is_empty() => {
            Err(ConfigError::new("backends.files.root", "must not be empty"))
        }
        FilesKind::Local => Ok(()),
        FilesKind::Webdav => {
            let url = files.url.as_deref().ok_or_else(|| {
                ConfigError::new("backends.files.url", "required for kind = \"webdav\"")
            })?;
            let parsed = url::Url::parse(url)
                .map_err(|_| ConfigError::new("backends.files.url", "not a URL"))?;
            if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
                return Err(ConfigError::new(
                    "backends.files.url",
                    "must be an http(s) URL",
                ));
            }
            if !parsed.username().is_empty() || parsed.password().is_some() {
                return Err(ConfigError::new(
                    "backends.files.url",
                    "must not carry credentials; use backends.files.username and .password",
                ));
            }
            if files.password.is_some() && files.username.is_none() {
                return Err(ConfigError::new(
                    "backends.files.username",
                    "required when backends.files.password is set",
                ));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    fn webdav(url: &str) -> FilesBackendConfig {
        FilesBackendConfig {
            kind: FilesKind::Webdav,
            url: Some(url.into()),
            ..FilesBackendConfig::default()
        }
    }

    #[test]
    fn webdav_needs_a_clean_http_url() {
        assert!(validate(&FilesBackendConfig::default()).is_ok());
        assert!(
            validate(&webdav(
                "https://cloud.example.org/remote.php/dav/files/alice/"
            ))
            .is_ok()
        );
        let missing = FilesBackendConfig {
            kind: FilesKind::Webdav,
            ..FilesBackendConfig::default()
        };
        assert_eq!(validate(&missing).unwrap_err().key, "backends.files.url");
        for bad in ["ftp://host/", "https://alice:pw@host/dav/", "nope"] {
            assert_eq!(
                validate(&webdav(bad)).unwrap_err().key,
                "backends.files.url",
                "{bad}"
            );
        }
        let no_user = FilesBackendConfig {
            password: Some(Secret::new("pw")),
            ..webdav("http://127.0.0.1/dav/")
        };
        assert_eq!(
            validate(&no_user).unwrap_err().key,
            "backends.files.username"
        );
    }

    #[test]
    fn the_size_bound_is_checked() {
        let tiny = FilesBackendConfig {
            max_file_bytes: 10,
            ..FilesBackendConfig::default()
        };
        assert_eq!(
            validate(&tiny).unwrap_err().key,
            "backends.files.max_file_bytes"
        );
        assert_eq!(
            FilesBackendConfig::default().max_file_bytes,
            20 * 1024 * 1024
        );
    }
}
