//! Requests to real realtime servers: OpenAI (GA, or beta with `OpenAI-Beta: realtime=v1`), Azure
//! OpenAI (the preview `openai/realtime?api-version=…&deployment=…` form with an `api-key` header,
//! or the GA `openai/v1/realtime?model=…` form), or any `ws://`/`wss://` URL speaking the protocol.

use http::HeaderValue;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request;

use super::UpstreamError;
use crate::config::{UpstreamConfig, UpstreamKind, UpstreamProtocol};

/// The upgrade request for one session: URL with its query, and the auth and protocol headers.
pub fn build_request(config: &UpstreamConfig, model: &str) -> Result<Request, UpstreamError> {
    let mut url = url::Url::parse(&config.url)
        .map_err(|_| UpstreamError::BadRequest("upstream.url is not a URL".into()))?;
    let has = |url: &url::Url, key: &str| url.query_pairs().any(|(k, _)| k == key);
    let kind = config.effective_kind();
    match (&config.deployment, &config.api_version) {
        // Azure preview form: the deployment names the model.
        (Some(deployment), Some(version)) if kind == UpstreamKind::Azure => {
            if !has(&url, "api-version") {
                url.query_pairs_mut().append_pair("api-version", version);
            }
            if !has(&url, "deployment") {
                url.query_pairs_mut().append_pair("deployment", deployment);
            }
        }
        _ => {
            if !has(&url, "model") {
                url.query_pairs_mut().append_pair("model", model);
            }
        }
    }
    let mut request = url
        .as_str()
        .into_client_request()
        .map_err(|_| UpstreamError::BadRequest("upstream.url cannot be used for a WebSocket".into()))?;
    let headers = request.headers_mut();
    if let Some(key) = &config.api_key {
        let (name, value) = match kind {
            UpstreamKind::Azure => ("api-key", key.expose().to_string()),
            _ => ("authorization", format!("Bearer {}", key.expose())),
        };
        let mut value = HeaderValue::from_str(&value)
            .map_err(|_| UpstreamError::BadRequest("upstream.api_key holds characters a header cannot".into()))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    if config.protocol == UpstreamProtocol::Beta {
        headers.insert("openai-beta", HeaderValue::from_static("realtime=v1"));
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    fn config(kind: UpstreamKind, url: &str) -> UpstreamConfig {
        UpstreamConfig {
            kind: Some(kind),
            url: url.into(),
            api_key: Some(Secret::new("sk-secret")),
            ..UpstreamConfig::default()
        }
    }

    #[test]
    fn openai_ga_sends_bearer_and_model() {
        let req = build_request(&config(UpstreamKind::Openai, "wss://api.openai.com/v1/realtime"), "gpt-realtime").unwrap();
        assert_eq!(req.uri().to_string(), "wss://api.openai.com/v1/realtime?model=gpt-realtime");
        assert_eq!(req.headers()["authorization"], "Bearer sk-secret");
        assert!(req.headers().get("openai-beta").is_none());
        assert!(req.headers().get("api-key").is_none());
    }

    #[test]
    fn beta_adds_the_beta_header() {
        let mut cfg = config(UpstreamKind::Openai, "ws://127.0.0.1:1/v1/realtime");
        cfg.protocol = UpstreamProtocol::Beta;
        let req = build_request(&cfg, "m").unwrap();
        assert_eq!(req.headers()["openai-beta"], "realtime=v1");
    }

    #[test]
    fn azure_preview_form_uses_deployment_and_api_key() {
        let mut cfg = config(UpstreamKind::Azure, "wss://res.openai.azure.com/openai/realtime");
        cfg.deployment = Some("gpt-4o-rt".into());
        cfg.api_version = Some("2025-04-01-preview".into());
        let req = build_request(&cfg, "ignored").unwrap();
        assert_eq!(
            req.uri().to_string(),
            "wss://res.openai.azure.com/openai/realtime?api-version=2025-04-01-preview&deployment=gpt-4o-rt"
        );
        assert_eq!(req.headers()["api-key"], "sk-secret");
        assert!(req.headers().get("authorization").is_none());
    }

    #[test]
    fn azure_ga_form_uses_model() {
        let cfg = config(UpstreamKind::Azure, "wss://res.openai.azure.com/openai/v1/realtime");
        let req = build_request(&cfg, "my-deployment").unwrap();
        assert_eq!(req.uri().to_string(), "wss://res.openai.azure.com/openai/v1/realtime?model=my-deployment");
        assert_eq!(req.headers()["api-key"], "sk-secret");
    }

    #[test]
    fn an_explicit_query_is_kept() {
        let cfg = config(UpstreamKind::Openai, "ws://127.0.0.1:1/v1/realtime?model=pinned");
        let req = build_request(&cfg, "other").unwrap();
        assert_eq!(req.uri().query(), Some("model=pinned"));
    }
}
