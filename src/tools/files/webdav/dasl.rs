//! WebDAV SEARCH (RFC 5323 `DAV:basicsearch`), as Nextcloud implements it: one request that asks
//! the server for the files whose name contains a query word, instead of walking every folder.
//!
//! Nextcloud's search arbiter is the DAV root (`/remote.php/dav/`) and the scope is the user's
//! files path below it (`/files/USER/…`); the arbiter advertises itself with the response header
//! `DASL: <DAV:basicsearch>` on `OPTIONS`. Other servers are asked at the root itself.

use url::Url;

/// Most entries asked of the server in one search.
pub const MAX_SEARCH_RESULTS: usize = 500;

/// Where to send a SEARCH and what scope to give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dasl {
    /// The URL the SEARCH (and the OPTIONS that discovers it) goes to.
    pub arbiter: Url,
    /// The scope `href`, as the server expects it (an absolute path below the arbiter).
    pub scope: String,
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
            };
        }
        Dasl {
            arbiter: root.clone(),
            scope: root.path().to_string(),
        }
    }

    /// Does an `OPTIONS` answer's `DASL` header offer basicsearch?
    pub fn advertised(headers: &reqwest::header::HeaderMap) -> bool {
        headers
            .get_all("DASL")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.to_ascii_lowercase().contains("dav:basicsearch"))
    }

    /// A basicsearch for files (not folders) whose display name contains any of `words`.
    /// `words` are letters and digits only (see `search::query_words`), so they need no escaping
    /// and hold no `LIKE` wildcards.
    pub fn body(&self, words: &[String]) -> String {
        let likes: String = words
            .iter()
            .filter(|w| w.chars().all(char::is_alphanumeric))
            .map(|w| {
                format!(
                    "<d:like><d:prop><d:displayname/></d:prop><d:literal>%{w}%</d:literal></d:like>"
                )
            })
            .collect();
        let scope = quick_xml::escape::escape(&self.scope);
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<d:searchrequest xmlns:d="DAV:"><d:basicsearch>
<d:select><d:prop><d:resourcetype/><d:getcontentlength/><d:getlastmodified/><d:getcontenttype/></d:prop></d:select>
<d:from><d:scope><d:href>{scope}</d:href><d:depth>infinity</d:depth></d:scope></d:from>
<d:where><d:and><d:not><d:is-collection/></d:not><d:or>{likes}</d:or></d:and></d:where>
<d:orderby/><d:limit><d:nresults>{MAX_SEARCH_RESULTS}</d:nresults></d:limit>
</d:basicsearch></d:searchrequest>"#
        )
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
        assert_eq!(
            Dasl::for_root(&other),
            Dasl {
                arbiter: other.clone(),
                scope: "/dav/".into()
            }
        );
    }

    #[test]
    fn the_body_asks_for_name_matches_in_scope() {
        let dasl = Dasl::for_root(&Url::parse("https://h/remote.php/dav/files/alice/").unwrap());
        let body = dasl.body(&["diabetes".into(), "protocol".into(), "<x>".into()]);
        assert!(body.contains("<d:href>/files/alice/</d:href>"), "{body}");
        assert!(
            body.contains("<d:literal>%diabetes%</d:literal>") && body.contains("%protocol%"),
            "{body}"
        );
        assert!(!body.contains("<x>"), "{body}");
    }

    #[test]
    fn the_header_is_recognised() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert!(!Dasl::advertised(&headers));
        headers.insert("DASL", "<DAV:basicsearch>".parse().unwrap());
        assert!(Dasl::advertised(&headers));
    }
}
