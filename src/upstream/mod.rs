//! The upstream side of a session: a WebSocket to an OpenAI Realtime-compatible server, or to the
//! built-in simulated model. Either way the session sees the same thing, a [`UpstreamConn`].
//!
//! - [`openai`]: URL, headers and GA/beta/Azure differences of real servers.
//! - [`simulated`]: the in-process model used when no API key is configured.

pub mod openai;
pub mod simulated;

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use tokio_tungstenite::Connector;
use tokio_tungstenite::tungstenite::{self, protocol::WebSocketConfig};

use crate::config::{UpstreamConfig, UpstreamKind};
use crate::session::outbox::{BoxSocket, Socket};

/// An open upstream WebSocket, whole: the session reads and writes it from its one task.
pub struct UpstreamConn {
    /// The same boxed socket the session's outbox holds, so it is taken as it is.
    pub socket: BoxSocket,
    /// How long the connection took.
    pub connect_time: Duration,
}

impl UpstreamConn {
    pub fn new(socket: impl Socket + 'static, connect_time: Duration) -> Self {
        Self { socket: Box::pin(socket), connect_time }
    }
}

/// Why the upstream could not be reached. `Display` is public text: it never holds the key, the
/// upstream's body or its address.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("the realtime service refused the connection (HTTP {status})")]
    Refused { status: u16 },
    #[error("the realtime service did not answer in time")]
    Timeout,
    #[error("the realtime service could not be reached")]
    Unreachable(#[source] tungstenite::Error),
    #[error("the upstream configuration is not usable")]
    BadRequest(String),
}

impl UpstreamError {
    /// A short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            UpstreamError::Refused { status } if *status == 401 || *status == 403 => "unauthorized",
            UpstreamError::Refused { status } if *status == 404 => "not_found",
            UpstreamError::Refused { status } if *status == 429 => "rate_limited",
            UpstreamError::Refused { status } if *status >= 500 => "server_error",
            UpstreamError::Refused { .. } => "refused",
            UpstreamError::Timeout => "timeout",
            UpstreamError::Unreachable(_) => "unreachable",
            UpstreamError::BadRequest(_) => "bad_request",
        }
    }

    /// What lies under the public text, for the operator's log: the transport's own error (refused
    /// TCP, a failed DNS lookup, a TLS certificate) or which setting is unusable. Neither holds the
    /// key, a body nor patient data; a TLS name mismatch names the upstream's host and the
    /// certificate's names, which are the operator's configuration.
    pub fn detail(&self) -> Option<String> {
        match self {
            UpstreamError::Unreachable(err) => Some(err.to_string()),
            UpstreamError::BadRequest(what) => Some(what.clone()),
            UpstreamError::Refused { .. } | UpstreamError::Timeout => None,
        }
    }
}

/// One TLS client configuration for every upstream connection. Left to tokio-tungstenite, each
/// `wss://` connect would parse the ~150 web-PKI root certificates again and keep its own copy for
/// the session's life.
static TLS: LazyLock<Connector> = LazyLock::new(|| {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    Connector::Rustls(Arc::new(config))
});

/// WebSocket settings for upstream sockets: large frames allowed (`session.updated` and
/// `conversation.item.retrieved` can be big) but small buffers, so idle sessions stay cheap.
///
/// tungstenite zero-fills its read buffer and never shrinks it; a frame larger than the buffer
/// grows it by doubling, so a 16 KiB buffer that meets a 13 KiB `session.updated` ends at 32 KiB
/// for the rest of the session. 4 KiB still holds a whole 2.6 KB audio delta, and a big frame
/// grows it only to about its own size.
pub fn ws_config(max_frame_bytes: usize) -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4 * 1024)
        .write_buffer_size(crate::session::outbox::SOCKET_WRITE_BUFFER)
        .max_write_buffer_size(max_frame_bytes.saturating_mul(2))
        .max_message_size(Some(max_frame_bytes))
        .max_frame_size(Some(max_frame_bytes))
}

/// Open the upstream for one session. `model` is the client's `model` query parameter, if any.
pub async fn connect(config: &UpstreamConfig, model: Option<&str>) -> Result<UpstreamConn, UpstreamError> {
    let started = Instant::now();
    let timeout = Duration::from_millis(config.connect_timeout_ms);
    let model = model.filter(|m| !m.is_empty()).unwrap_or(&config.model);
    match config.effective_kind() {
        UpstreamKind::Simulated => {
            let options = simulated::SimulatedOptions {
                model: model.to_string(),
                max_frame_bytes: Some(config.max_frame_bytes),
                ..Default::default()
            };
            let socket = tokio::time::timeout(timeout, simulated::connect(options))
                .await
                .map_err(|_| UpstreamError::Timeout)?
                .map_err(UpstreamError::Unreachable)?;
            Ok(UpstreamConn::new(socket, started.elapsed()))
        }
        UpstreamKind::Openai | UpstreamKind::Azure => {
            let request = openai::build_request(config, model)?;
            let connecting = tokio_tungstenite::connect_async_tls_with_config(
                request,
                Some(ws_config(config.max_frame_bytes)),
                true,
                Some(TLS.clone()),
            );
            let (socket, _response) = match tokio::time::timeout(timeout, connecting).await {
                Err(_) => return Err(UpstreamError::Timeout),
                Ok(Err(tungstenite::Error::Http(response))) => {
                    return Err(UpstreamError::Refused { status: response.status().as_u16() });
                }
                Ok(Err(err)) => return Err(UpstreamError::Unreachable(err)),
                Ok(Ok(ok)) => ok,
            };
            Ok(UpstreamConn::new(socket, started.elapsed()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_tls_configuration_with_the_web_pki_roots_is_shared() {
        let Connector::Rustls(first) = TLS.clone() else { panic!("not rustls") };
        let Connector::Rustls(second) = TLS.clone() else { panic!("not rustls") };
        assert!(Arc::ptr_eq(&first, &second));
        assert!(first.alpn_protocols.is_empty(), "WebSocket upgrades need HTTP/1.1, no ALPN");
    }

    /// The log says why a connect failed (refused TCP here), the public text and metric label stay
    /// generic, and neither names the address or the key.
    #[tokio::test]
    async fn a_failed_connect_says_why_in_its_detail_only() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let mut config = UpstreamConfig::default();
        config.kind = Some(crate::config::UpstreamKind::Openai);
        config.url = format!("ws://{closed}/v1/realtime");
        config.api_key = Some(crate::config::Secret::new("sk-never-logged"));
        let Err(err) = connect(&config, None).await else { panic!("nothing listens there") };
        assert_eq!(err.reason(), "unreachable");
        let detail = err.detail().unwrap();
        assert!(detail.contains("Connection refused"), "{detail}");
        for text in [detail, err.to_string()] {
            assert!(!text.contains("sk-never") && !text.contains(&closed.port().to_string()), "{text}");
        }
        assert_eq!(UpstreamError::Timeout.detail(), None);
    }
}
