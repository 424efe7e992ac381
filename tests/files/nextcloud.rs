//! Nextcloud's server-side search (WebDAV `SEARCH`, DASL) is used when the server offers it: by
//! file name, by folder name (the files below a matching folder), and below a root whose name needs
//! percent-encoding; many matching folders do not push matching files out of the server's limit.

use super::*;

/// What a fake Nextcloud saw: `(method, path, body)` of every request.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, String, String)>>>;

/// The account of the fake Nextcloud: hrefs as sabre/dav writes them (lower-case escapes, `&` as
/// `%26`, `(` `)` kept); a folder's ends with `/`.
const ACCOUNT: &[&str] = &[
    "/remote.php/dav/files/alice/Protocols/",
    "/remote.php/dav/files/alice/Protocols/diabetes-management-protocol.pdf",
    "/remote.php/dav/files/alice/Diabetes/",
    "/remote.php/dav/files/alice/Diabetes/Insulin%20pens.pdf",
    "/remote.php/dav/files/alice/Diabetes/.draft-diabetes.txt",
    "/remote.php/dav/files/alice/Cardiology/",
    "/remote.php/dav/files/alice/Cardiology/Protocol%202024.pdf",
    "/remote.php/dav/files/alice/Cardiology/Cardiology%20Echo/",
    "/remote.php/dav/files/alice/Cardiology/Cardiology%20Echo/echo-checklist.txt",
    "/remote.php/dav/files/alice/%c3%84rzte%20%26%20Co%20(Team)/",
    "/remote.php/dav/files/alice/%c3%84rzte%20%26%20Co%20(Team)/Leitlinien/",
    "/remote.php/dav/files/alice/%c3%84rzte%20%26%20Co%20(Team)/Leitlinien/sepsis-leitfaden.pdf",
];

fn decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .unwrap()
        .into_owned()
}

/// The texts between every `open` and the following `close` in `body`.
fn between<'b>(body: &'b str, open: &str, close: &str) -> Vec<&'b str> {
    body.split(open)
        .skip(1)
        .filter_map(|part| part.split_once(close).map(|(inside, _)| inside))
        .collect()
}

/// A basicsearch answered as Nextcloud does over `account`: the entries below the scope (depth
/// infinity) whose name contains one of the `like` literals (case-insensitive), files only when the
/// request says `not is-collection`, folders only when it says `is-collection` otherwise, at most
/// `nresults` of them in the account's order; plus one result outside the user's files that
/// voxgate must drop.
fn basicsearch(body: &str, account: &[String]) -> String {
    let scope = between(body, "<d:href>", "</d:href>")[0].replace("&amp;", "&");
    let scope = format!("/remote.php/dav{}", decode(&scope));
    let literals: Vec<String> = between(body, "<d:literal>", "</d:literal>")
        .iter()
        .map(|l| l.trim_matches('%').to_lowercase())
        .collect();
    let files_only = body.contains("<d:not><d:is-collection/></d:not>");
    let folders_only = !files_only && body.contains("<d:is-collection/>");
    let limit: usize = between(body, "<d:nresults>", "</d:nresults>")
        .first()
        .map_or(usize::MAX, |n| n.parse().unwrap());
    let mut results = 0;
    let mut answer = String::from(
        r#"<?xml version="1.0"?>
<d:multistatus xmlns:d="DAV:" xmlns:s="http://sabredav.org/ns" xmlns:oc="http://owncloud.org/ns" xmlns:nc="http://nextcloud.org/ns">"#,
    );
    for href in account {
        if results == limit {
            break;
        }
        let path = decode(href);
        let Some(below) = path.strip_prefix(&scope).filter(|b| !b.is_empty()) else {
            continue;
        };
        let folder = below.ends_with('/');
        let name = below.trim_end_matches('/').rsplit('/').next().unwrap().to_lowercase();
        if (files_only && folder)
            || (folders_only && !folder)
            || !(literals.is_empty() || literals.iter().any(|l| name.contains(l)))
        {
            continue;
        }
        results += 1;
        answer.push_str(&if folder {
            format!("<d:response><d:href>{href}</d:href><d:propstat><d:prop><d:resourcetype><d:collection/></d:resourcetype></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>")
        } else {
            format!("<d:response><d:href>{href}</d:href><d:propstat><d:prop><d:getcontentlength>1844</d:getcontentlength><d:getlastmodified>Mon, 23 Nov 2026 18:25:54 GMT</d:getlastmodified><d:getcontenttype>application/pdf</d:getcontenttype><d:resourcetype/></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>")
        });
    }
    answer.push_str(
        "<d:response><d:href>/remote.php/dav/files/bob/diabetes-cardiology-sepsis-private.pdf</d:href><d:propstat><d:prop><d:getcontentlength>10</d:getcontentlength><d:resourcetype/></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response></d:multistatus>",
    );
    answer
}

/// A Nextcloud-shaped WebDAV server: it advertises SEARCH (`DASL`) at `/remote.php/dav/` and
/// answers it over [`ACCOUNT`] as Nextcloud does. Any other method fails, so a folder walk shows.
/// `root` is the files root below `/remote.php/dav/files/alice/`, as written in the configuration.
async fn fake_nextcloud(root: &str) -> (String, Seen) {
    fake_nextcloud_with(root, ACCOUNT.iter().map(|href| href.to_string()).collect()).await
}

/// [`fake_nextcloud`] over `account` (hrefs as in [`ACCOUNT`]).
async fn fake_nextcloud_with(root: &str, account: Vec<String>) -> (String, Seen) {
    let account = std::sync::Arc::new(account);
    let seen: Seen = Default::default();
    let record = seen.clone();
    let app = axum::Router::new().fallback(
        move |method: axum::http::Method,
              uri: axum::http::Uri,
              headers: axum::http::HeaderMap,
              body: String| {
            let record = record.clone();
            let account = account.clone();
            async move {
                record
                    .lock()
                    .unwrap()
                    .push((method.to_string(), uri.path().to_string(), body.clone()));
                let authorized = headers
                    .get("authorization")
                    .is_some_and(|v| v.to_str().unwrap_or_default().starts_with("Basic "));
                let response = |status: u16, extra: Option<(&'static str, &'static str)>, text: String| {
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
                        String::new(),
                    ),
                    ("OPTIONS", "/remote.php/dav/") => {
                        response(200, Some(("DASL", "<DAV:basicsearch>")), String::new())
                    }
                    ("OPTIONS", _) => response(200, None, String::new()),
                    ("SEARCH", "/remote.php/dav/") => response(
                        207,
                        Some(("Content-Type", "application/xml; charset=utf-8")),
                        basicsearch(&body, &account),
                    ),
                    _ => response(500, None, "no walking here".into()),
                }
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/remote.php/dav/files/{USER}/{root}"), seen)
}

async fn nextcloud_proxy(url: &str) -> TestProxy {
    let toml = format!(
        "[backends.files]\nkind = \"webdav\"\nurl = \"{url}\"\nusername = \"{USER}\"\npassword = \"{PASSWORD}\"\n{}",
        common_toml()
    );
    TestProxy::start(&toml).await
}

/// The bodies of the SEARCH requests the fake saw; no PROPFIND (no folder walk) among them.
fn searches(seen: &Seen) -> Vec<String> {
    let requests = seen.lock().unwrap().clone();
    assert!(
        !requests.iter().any(|(m, _, _)| m == "PROPFIND"),
        "no folder walk: {requests:?}"
    );
    requests
        .into_iter()
        .filter(|(m, _, _)| m == "SEARCH")
        .map(|(_, _, body)| body)
        .collect()
}

#[tokio::test]
async fn nextcloud_search_is_used_when_the_server_offers_it() {
    let (url, seen) = fake_nextcloud("").await;
    let proxy = nextcloud_proxy(&url).await;
    let files = search(&proxy, json!({"query": "diabetes protocol"})).await;
    assert_eq!(
        paths(&files),
        [
            "/Protocols/diabetes-management-protocol.pdf",
            "/Cardiology/Protocol 2024.pdf",
            "/Diabetes/Insulin pens.pdf",
        ],
        "by name, and in the folders named so; dotfiles and other users' files dropped"
    );
    assert_eq!(
        files[0]["url"],
        format!("{url}Protocols/diabetes-management-protocol.pdf")
    );
    assert_eq!(files[0]["size"], 1844);
    let bodies = searches(&seen);
    assert_eq!(
        bodies.len(),
        4,
        "files and folders by name, one per matching folder: {bodies:?}"
    );
    for body in &bodies[..2] {
        assert!(
            body.contains("<d:href>/files/alice/</d:href>"),
            "scoped to the user's files: {body}"
        );
        assert!(
            body.contains("%diabetes%") && body.contains("%protocol%"),
            "{body}"
        );
    }
    for folder in ["/files/alice/Protocols/", "/files/alice/Diabetes/"] {
        assert!(
            bodies[2..].iter().any(|b| b.contains(&format!("<d:href>{folder}</d:href>"))),
            "{folder} searched: {bodies:?}"
        );
    }
    proxy.stop().await;
}

/// `/Cardiology/Protocol 2024.pdf` is found by "cardiology" as the folder walk finds it: a file
/// below a folder whose name matches, at any depth, once.
#[tokio::test]
async fn nextcloud_search_finds_files_by_folder_name() {
    let (url, seen) = fake_nextcloud("").await;
    let proxy = nextcloud_proxy(&url).await;
    let files = search(&proxy, json!({"query": "cardiology"})).await;
    let mut found = paths(&files);
    found.sort();
    assert_eq!(
        found,
        ["/Cardiology/Cardiology Echo/echo-checklist.txt", "/Cardiology/Protocol 2024.pdf"]
    );
    // `Cardiology Echo` matches too but lies inside `Cardiology`: no search of its own.
    assert_eq!(searches(&seen).len(), 3);
    proxy.stop().await;
}

/// A root named with non-ASCII and reserved characters (written raw in the configuration, sent
/// back by sabre/dav as `%c3%84rzte%20%26%20Co%20(Team)`) still matches the server's hrefs.
#[tokio::test]
async fn nextcloud_search_below_a_root_named_with_non_ascii_characters() {
    let (url, seen) = fake_nextcloud("Ärzte & Co (Team)/").await;
    let proxy = nextcloud_proxy(&url).await;
    let files = search(&proxy, json!({"query": "sepsis"})).await;
    assert_eq!(paths(&files), ["/Leitlinien/sepsis-leitfaden.pdf"]);
    let files = search(&proxy, json!({"query": "leitlinien"})).await;
    assert_eq!(paths(&files), ["/Leitlinien/sepsis-leitfaden.pdf"]);
    let bodies = searches(&seen);
    assert!(
        bodies[0].contains("<d:href>/files/alice/%C3%84rzte%20&amp;%20Co%20(Team)/</d:href>"),
        "{}",
        bodies[0]
    );
    proxy.stop().await;
}

/// Folders whose name matches do not take the places of matching files in the server's 500
/// results: "2024" names 500 report folders, listed before the one file named so, and that file is
/// still found, as are the files below the first matching folders.
#[tokio::test]
async fn nextcloud_matching_folders_do_not_push_matching_files_out() {
    let mut account: Vec<String> = (0..500)
        .map(|i| format!("/remote.php/dav/files/alice/Reports%202024-{i:03}/"))
        .collect();
    account.push("/remote.php/dav/files/alice/Reports%202024-000/q1.pdf".into());
    account.push("/remote.php/dav/files/alice/Budget/".into());
    account.push("/remote.php/dav/files/alice/Budget/Budget%202024.pdf".into());
    let (url, seen) = fake_nextcloud_with("", account).await;
    let proxy = nextcloud_proxy(&url).await;
    let files = search(&proxy, json!({"query": "2024"})).await;
    let mut found = paths(&files);
    found.sort();
    // Before the fix the one name SEARCH answered 500 folders and no file: only q1.pdf was found.
    assert_eq!(found, ["/Budget/Budget 2024.pdf", "/Reports 2024-000/q1.pdf"]);
    // Files and folders by name, then the first 10 matching folders.
    assert_eq!(searches(&seen).len(), 2 + 10);
    proxy.stop().await;
}

/// The server answers at most 500 entries per SEARCH and voxgate searches at most 10 matching
/// folders: past either bound files are left out, and the answer says so (`truncated`) instead of
/// presenting the list as complete. A search within the bounds does not.
#[tokio::test]
async fn nextcloud_search_cut_at_its_bounds_says_it_was_truncated() {
    let mut account: Vec<String> = (0..501)
        .map(|i| format!("/remote.php/dav/files/alice/Scans/scan-{i:03}.pdf"))
        .collect();
    for i in 0..11 {
        account.push(format!("/remote.php/dav/files/alice/Ward%20{i:02}/"));
        account.push(format!("/remote.php/dav/files/alice/Ward%20{i:02}/rota.pdf"));
    }
    account.push("/remote.php/dav/files/alice/Budget%202024.pdf".into());
    let (url, seen) = fake_nextcloud_with("", account).await;
    let proxy = nextcloud_proxy(&url).await;

    let (status, result) = invoke(&proxy, "search_nextcloud_files", json!({"query": "scan", "max_results": 5})).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["files"].as_array().unwrap().len(), 5);
    assert_eq!(result["truncated"], true, "500 of 501 files named so: {}", result["total_count"]);

    let (status, result) = invoke(&proxy, "search_nextcloud_files", json!({"query": "ward"})).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["total_count"], 10, "{result}");
    assert_eq!(result["truncated"], true, "11 matching folders, 10 searched: {result}");

    let (status, result) = invoke(&proxy, "search_nextcloud_files", json!({"query": "budget"})).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(paths(result["files"].as_array().unwrap()), ["/Budget 2024.pdf"]);
    assert!(result.get("truncated").is_none(), "{result}");
    searches(&seen);
    proxy.stop().await;
}
