//! `[upstream]`: which realtime service sessions are bridged to, how it is reached, and how a
//! session outlives one upstream connection (resume, CONTRACT §9).

use serde::Deserialize;

use super::Secret;

/// `[upstream]` `kind`: a real service, or the embedded simulated model.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamKind {
    Openai,
    Azure,
    Simulated,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamProtocol {
    #[default]
    Ga,
    Beta,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamConfig {
    /// `openai`, `azure` or `simulated`; unset = `openai` when an API key is set, else `simulated`.
    pub kind: Option<UpstreamKind>,
    pub url: String,
    pub api_key: Option<Secret>,
    pub model: String,
    pub protocol: UpstreamProtocol,
    /// Azure preview form only: `api-version` query parameter (with `deployment`).
    pub api_version: Option<String>,
    /// Azure preview form only: the deployment name.
    pub deployment: Option<String>,
    pub connect_timeout_ms: u64,
    /// Largest frame accepted from the upstream.
    pub max_frame_bytes: usize,
    /// A frame the upstream has not taken within this time ends the session (a stalled upstream).
    pub send_timeout_ms: u64,
    /// Models a client may ask for with `?model=` besides `upstream.model`; others get HTTP 400.
    pub allowed_models: Vec<String>,
    /// Let clients give the model provider-hosted `mcp` tools (they bypass screening and audit).
    pub allow_hosted_mcp: bool,
    /// Restore the session on a new upstream connection after an unexpected close or error, and
    /// before the provider's session cap (CONTRACT §9).
    pub resume: bool,
    /// Recycle the upstream session at the next quiet moment after this age (0 = never).
    pub max_session_age_s: u64,
    /// Connection attempts per resume, with back-off and jitter.
    pub resume_attempts: u32,
    /// Bounds of the conversation log carried into a new upstream session.
    pub resume_max_items: usize,
    pub resume_max_bytes: usize,
    /// Client audio held during a resume older than this is dropped (and counted).
    pub resume_audio_ms: u64,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            kind: None,
            url: "wss://api.openai.com/v1/realtime".into(),
            api_key: None,
            model: "gpt-realtime".into(),
            protocol: UpstreamProtocol::Ga,
            api_version: None,
            deployment: None,
            connect_timeout_ms: 10_000,
            max_frame_bytes: 64 * 1024 * 1024,
            send_timeout_ms: 5_000,
            allowed_models: Vec::new(),
            allow_hosted_mcp: false,
            resume: true,
            max_session_age_s: 3300,
            resume_attempts: 3,
            resume_max_items: 200,
            resume_max_bytes: 256 * 1024,
            resume_audio_ms: 5000,
        }
    }
}

impl UpstreamConfig {
    /// The effective kind once defaults are resolved.
    pub fn effective_kind(&self) -> UpstreamKind {
        match self.kind {
            Some(kind) => kind,
            None if self.api_key.is_some() => UpstreamKind::Openai,
            None => UpstreamKind::Simulated,
        }
    }
}
