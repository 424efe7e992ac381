//! A wrong password and an unreachable server: clear errors for the model, readiness degraded,
//! retries bounded.

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
