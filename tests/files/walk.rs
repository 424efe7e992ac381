//! A WebDAV walk that meets a failing subfolder or runs short of time (a fake server, since wsgidav
//! cannot answer 503 for one folder or list slowly): the files found so far are answered, marked
//! `truncated`, and `/readyz` stays ready, as long as the root itself could be listed.

use std::time::Duration;

use super::*;

/// What one folder of the fake answers to `PROPFIND`.
#[derive(Clone, Copy)]
enum Folder {
    /// Lists one file, `protocol-N.txt`, after `delay`.
    Listed(Duration),
    Status(u16),
    /// A multistatus over the backend's 8 MiB cap.
    Huge,
}

fn response(href: &str, collection: bool) -> String {
    let kind = if collection { "<d:collection/>" } else { "" };
    format!(
        "<d:response><d:href>{href}</d:href><d:propstat><d:prop><d:resourcetype>{kind}</d:resourcetype>\
         <d:getcontentlength>10</d:getcontentlength></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>"
    )
}

fn multistatus(responses: &[String]) -> String {
    format!("<?xml version=\"1.0\"?><d:multistatus xmlns:d=\"DAV:\">{}</d:multistatus>", responses.concat())
}

/// A server with the folders `/dav/f0/` … below its root, each answering as `folders` says; no
/// WebDAV SEARCH, so every search walks. Returns its root URL.
async fn fake_server(folders: Vec<Folder>) -> String {
    let folders = std::sync::Arc::new(folders);
    let app = axum::Router::new().fallback(move |method: axum::http::Method, uri: axum::http::Uri| {
        let folders = folders.clone();
        async move {
            let reply = |status: u16, body: String| axum::http::Response::builder().status(status).body(axum::body::Body::from(body)).unwrap();
            if method == "OPTIONS" {
                return reply(200, String::new());
            }
            let path = uri.path();
            if path == "/dav/" {
                let mut listing = vec![response("/dav/", true)];
                listing.extend((0..folders.len()).map(|i| response(&format!("/dav/f{i}/"), true)));
                return reply(207, multistatus(&listing));
            }
            let index = path.strip_prefix("/dav/f").and_then(|rest| rest.trim_end_matches('/').parse::<usize>().ok());
            match index.and_then(|i| Some((i, *folders.get(i)?))) {
                Some((i, Folder::Listed(delay))) => {
                    tokio::time::sleep(delay).await;
                    let own = format!("/dav/f{i}/");
                    reply(207, multistatus(&[response(&own, true), response(&format!("{own}protocol-{i}.txt"), false)]))
                }
                Some((_, Folder::Status(code))) => reply(code, String::new()),
                Some((i, Folder::Huge)) => {
                    let file = response(&format!("/dav/f{i}/scan.txt"), false);
                    let count = 9 * 1024 * 1024 / file.len() + 1;
                    reply(207, multistatus(&vec![file; count]))
                }
                None => reply(404, String::new()),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/dav/")
}

fn toml_for(url: &str, timeout: Duration) -> String {
    format!(
        "[backends.files]\nkind = \"webdav\"\nurl = \"{url}\"\nusername = \"{USER}\"\npassword = \"{PASSWORD}\"\n\
         [auth]\nadmin_token = \"{ADMIN}\"\n[tools.search_nextcloud_files]\ntimeout_ms = {}\nrate_limit_per_minute = 1000\n",
        timeout.as_millis()
    )
}

/// One folder answering 503 (an offline external storage), one 403, one 301 and one whose listing is
/// over 8 MiB: the other folders' files are answered, `truncated`, and readiness is untouched.
#[tokio::test]
async fn failing_subfolders_leave_the_rest_answered_and_truncated() {
    let listed = Folder::Listed(Duration::ZERO);
    let url = fake_server(vec![
        listed,
        Folder::Status(503),
        listed,
        Folder::Status(403),
        Folder::Status(301),
        Folder::Huge,
        listed,
    ])
    .await;
    let proxy = TestProxy::start(&toml_for(&url, Duration::from_secs(30))).await;
    for include_content in [false, true] {
        let (status, result) = invoke(
            &proxy,
            "search_nextcloud_files",
            json!({"query": "protocol", "include_content": include_content}),
        )
        .await;
        assert_eq!(status, 200, "{result}");
        let mut found = paths(result["files"].as_array().unwrap()).into_iter().map(str::to_string).collect::<Vec<_>>();
        found.sort();
        assert_eq!(found, ["/f0/protocol-0.txt", "/f2/protocol-2.txt", "/f6/protocol-6.txt"], "{result}");
        assert_eq!(result["truncated"], true, "{result}");
    }
    let (_, readyz) = proxy.http_get("/readyz").await;
    assert!(!readyz.contains("degraded"), "{readyz}");
    proxy.stop().await;
}

/// A walk longer than the call's timeout (each folder takes 150 ms, 40 of them, 2 s to answer):
/// the folders listed in time are answered, `truncated`, before the deadline; readiness untouched.
#[tokio::test]
async fn a_walk_out_of_time_answers_what_it_found_in_time() {
    let url = fake_server(vec![Folder::Listed(Duration::from_millis(150)); 40]).await;
    let timeout = Duration::from_secs(2);
    let proxy = TestProxy::start(&toml_for(&url, timeout)).await;
    let started = std::time::Instant::now();
    let (status, result) = invoke(&proxy, "search_nextcloud_files", json!({"query": "protocol"})).await;
    assert_eq!(status, 200, "{result}");
    assert!(started.elapsed() < timeout, "{:?}", started.elapsed());
    assert!(!result["files"].as_array().unwrap().is_empty(), "{result}");
    assert_eq!(result["truncated"], true, "{result}");
    let (_, readyz) = proxy.http_get("/readyz").await;
    assert!(!readyz.contains("degraded"), "{readyz}");
    proxy.stop().await;
}
