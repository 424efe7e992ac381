//! A wrong password, an unreachable server and one that stalls: clear errors for the model,
//! readiness degraded, retries bounded and within the call's timeout.

use super::*;

#[tokio::test]
async fn a_wrong_password_is_a_clear_error_and_readiness_is_degraded() {
    let wrong = "not-the-password-42";
    let proxy = TestProxy::start(&webdav_toml(wrong)).await;
    let (status, body) = invoke(
        &proxy,
        "search_nextcloud_files",
        json!({"query": "protocol"}),
    )
    .await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "backend_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("credentials"), "{message}");
    assert!(
        !message.contains(wrong) && !message.contains(USER) && !message.contains("127.0.0.1"),
        "{message}"
    );
    let (status, readyz) = proxy.http_get("/readyz").await;
    assert_eq!(status, 200, "degraded, not failing");
    assert!(
        readyz.contains("degraded") && readyz.contains("search_nextcloud_files"),
        "{readyz}"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn an_unreachable_server_is_retried_then_reported() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let toml = format!(
        "[backends.files]\nkind = \"webdav\"\nurl = \"http://127.0.0.1:{port}/remote.php/dav/files/{USER}/\"\nusername = \"{USER}\"\npassword = \"{PASSWORD}\"\n{}",
        common_toml()
    );
    let proxy = TestProxy::start(&toml).await;
    let started = std::time::Instant::now();
    let (status, body) = invoke(
        &proxy,
        "search_nextcloud_files",
        json!({"query": "protocol"}),
    )
    .await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unavailable"),
        "{body}"
    );
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(500),
        "retried with back-off"
    );
    let (status, readyz) = proxy.http_get("/readyz").await;
    assert_eq!(status, 200);
    assert!(readyz.contains("degraded"), "{readyz}");
    proxy.stop().await;
}

/// A WebDAV server that answers `OPTIONS` (no SEARCH offered, so the folders are walked) and
/// stalls every `PROPFIND`: the first before its headers, the later ones in the middle of the body.
/// Returns its files root and the methods it saw.
async fn stalling_server() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |method: axum::http::Method| {
        let record = record.clone();
        async move {
            let propfinds = {
                let mut seen = record.lock().unwrap();
                seen.push(method.to_string());
                seen.iter().filter(|m| *m == "PROPFIND").count()
            };
            let stall = || tokio::time::sleep(std::time::Duration::from_secs(60));
            let body = match method.as_str() {
                "OPTIONS" => axum::body::Body::empty(),
                _ if propfinds == 1 => {
                    stall().await;
                    axum::body::Body::empty()
                }
                _ => {
                    let start = "<?xml version=\"1.0\"?>\n<d:multistatus xmlns:d=\"DAV:\">";
                    let head = futures::stream::once(async move { Ok::<_, std::io::Error>(start) });
                    let never = futures::stream::once(async move {
                        stall().await;
                        Ok("</d:multistatus>")
                    });
                    axum::body::Body::from_stream(futures::StreamExt::chain(head, never))
                }
            };
            let status = if method == "OPTIONS" { 200 } else { 207 };
            axum::http::Response::builder().status(status).body(body).unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/dav/"), seen)
}

/// A server that does not answer in time is a failing backend, not a tool cut off by its own
/// timeout: each request gets what is left of the call (not the client's 20 s), the model hears
/// "unavailable" before the call's deadline, and no retry starts that could not end before it.
#[tokio::test]
async fn a_stalling_server_is_reported_unavailable_before_the_calls_timeout() {
    let (url, seen) = stalling_server().await;
    let timeout = std::time::Duration::from_secs(2);
    let toml = format!(
        "[backends.files]\nkind = \"webdav\"\nurl = \"{url}\"\nusername = \"{USER}\"\npassword = \"{PASSWORD}\"\n\
         [auth]\nadmin_token = \"{ADMIN}\"\n[tools.search_nextcloud_files]\ntimeout_ms = {}\n",
        timeout.as_millis()
    );
    let proxy = TestProxy::start(&toml).await;
    // Headers that never come, then a body that stops halfway.
    for stall in ["headers", "body"] {
        let propfinds = |seen: &std::sync::Mutex<Vec<String>>| {
            seen.lock().unwrap().iter().filter(|m| *m == "PROPFIND").count()
        };
        let before = propfinds(&seen);
        let started = std::time::Instant::now();
        let (status, body) = invoke(&proxy, "search_nextcloud_files", json!({"query": "protocol"})).await;
        assert_eq!(status, 502, "{stall}: {body}");
        assert_eq!(body["error"]["code"], "backend_error", "{stall}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("unavailable"), "{stall}: {message}");
        assert!(started.elapsed() < timeout, "{stall}: {:?}", started.elapsed());
        assert_eq!(propfinds(&seen) - before, 1, "{stall}: a retry that could not end in time");
    }
    let (_, readyz) = proxy.http_get("/readyz").await;
    assert!(readyz.contains("degraded"), "{readyz}");
    proxy.stop().await;
}
