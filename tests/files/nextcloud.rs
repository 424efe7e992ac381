//! Nextcloud's server-side search (WebDAV `SEARCH`, DASL) is used when the server offers it.

use super::*;

/// What a fake Nextcloud saw: `(method, path, body)` of every request.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, String, String)>>>;

/// A Nextcloud-shaped WebDAV server: it advertises SEARCH (`DASL`) at `/remote.php/dav/` and
/// answers it as Nextcloud does (hrefs under `/remote.php/dav/files/USER/`), including one result
/// outside the user's root that voxgate must drop. Any other method fails, so a folder walk shows.
async fn fake_nextcloud() -> (String, Seen) {
    let seen: Seen = Default::default();
    let answer = r#"<?xml version="1.0"?>
<d:multistatus xmlns:d="DAV:" xmlns:s="http://sabredav.org/ns" xmlns:oc="http://owncloud.org/ns" xmlns:nc="http://nextcloud.org/ns">
 <d:response><d:href>/remote.php/dav/files/alice/Protocols/diabetes-management-protocol.pdf</d:href>
  <d:propstat><d:prop><d:getcontentlength>1844</d:getcontentlength><d:getlastmodified>Mon, 23 Nov 2026 18:25:54 GMT</d:getlastmodified><d:getcontenttype>application/pdf</d:getcontenttype><d:resourcetype/></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
 <d:response><d:href>/remote.php/dav/files/alice/Diabetes/</d:href>
  <d:propstat><d:prop><d:resourcetype><d:collection/></d:resourcetype></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
 <d:response><d:href>/remote.php/dav/files/bob/diabetes-private.pdf</d:href>
  <d:propstat><d:prop><d:getcontentlength>10</d:getcontentlength><d:resourcetype/></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
</d:multistatus>"#;
    let record = seen.clone();
    let app = axum::Router::new().fallback(
        move |method: axum::http::Method,
              uri: axum::http::Uri,
              headers: axum::http::HeaderMap,
              body: String| {
            let record = record.clone();
            async move {
                record
                    .lock()
                    .unwrap()
                    .push((method.to_string(), uri.path().to_string(), body));
                let authorized = headers
                    .get("authorization")
                    .is_some_and(|v| v.to_str().unwrap_or_default().starts_with("Basic "));
                let response = |status: u16,
                                extra: Option<(&'static str, &'static str)>,
                                text: &'static str| {
                    let mut builder = axum::http::Response::builder().status(status);
                    if let Some((name, value)) = extra {
                        builder = builder.header(name, value);
                    }
                    builder.body(axum::body::Body::from(text)).unwrap()
                };
                match (method.as_str(), uri.path()) {
                    _ if !authorized => response(
                        401,
                        Some(("WWW-Authenticate", "Basic realm=\"Nextcloud\"")),
                        "",
                    ),
                    ("OPTIONS", "/remote.php/dav/") => {
                        response(200, Some(("DASL", "<DAV:basicsearch>")), "")
                    }
                    ("OPTIONS", _) => response(200, None, ""),
                    ("SEARCH", "/remote.php/dav/") => response(
                        207,
                        Some(("Content-Type", "application/xml; charset=utf-8")),
                        answer,
                    ),
                    _ => response(500, None, "no walking here"),
                }
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/remote.php/dav/files/{USER}/"), seen)
}

#[tokio::test]
async fn nextcloud_search_is_used_when_the_server_offers_it() {
    let (url, seen) = fake_nextcloud().await;
    let toml = format!(
        "[backends.files]\nkind = \"webdav\"\nurl = \"{url}\"\nusername = \"{USER}\"\npassword = \"{PASSWORD}\"\n{}",
        common_toml()
    );
    let proxy = TestProxy::start(&toml).await;
    let files = search(&proxy, json!({"query": "diabetes protocol"})).await;
    assert_eq!(
        paths(&files),
        ["/Protocols/diabetes-management-protocol.pdf"],
        "folders and other users' files dropped"
    );
    assert_eq!(
        files[0]["url"],
        format!("{url}Protocols/diabetes-management-protocol.pdf")
    );
    assert_eq!(files[0]["size"], 1844);
    let requests = seen.lock().unwrap().clone();
    let searches: Vec<&(String, String, String)> =
        requests.iter().filter(|(m, _, _)| m == "SEARCH").collect();
    assert_eq!(searches.len(), 1, "{requests:?}");
    let body = &searches[0].2;
    assert!(
        body.contains("<d:href>/files/alice/</d:href>"),
        "scoped to the user's files: {body}"
    );
    assert!(
        body.contains("%diabetes%") && body.contains("%protocol%"),
        "{body}"
    );
    assert!(
        !requests.iter().any(|(m, _, _)| m == "PROPFIND"),
        "no folder walk: {requests:?}"
    );
    proxy.stop().await;
}
