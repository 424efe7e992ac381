//! Placeholder for the simulated realtime model (being written; this stub only fixes the API).

/// Options of a simulated session.
#[derive(Debug, Clone, Default)]
pub struct SimulatedOptions {
    pub model: String,
}

/// Start a simulated session and return the client end of a WebSocket connected to it.
pub async fn connect(
    _options: SimulatedOptions,
) -> Result<tokio_tungstenite::WebSocketStream<tokio::io::DuplexStream>, tokio_tungstenite::tungstenite::Error> {
    Err(tokio_tungstenite::tungstenite::Error::ConnectionClosed)
}
