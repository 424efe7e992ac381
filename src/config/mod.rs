//! The typed configuration: embedded defaults, then a TOML file, then the `VOXGATE_<SECTION>__<KEY>`
//! environment overlay, then validation. `voxgate check-config` runs exactly this path.
//!
//! Every field has a default so that `cargo run` with no file and no environment starts a working
//! proxy (simulated model, local backends). Secrets are [`Secret`]s: their `Debug` hides the value
//! and they are never serialised back out.

mod audit;
mod env;
mod files;
mod guidelines;
mod knowledge;
pub mod mcp;
mod server;
mod summary;
mod upstream;
mod validate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use audit::AuditOnError;
pub use env::{EnvSource, ProcessEnv};
pub use guidelines::GuidelinesBackendConfig;
pub use knowledge::{
    DdxBackendConfig, EvidenceBackendConfig, WebSearchBackendConfig, WebSearchProvider, is_domain,
};
pub use server::ServerConfig;
pub use summary::summary;
pub use upstream::{UpstreamConfig, UpstreamKind, UpstreamProtocol};
pub use validate::validate;

/// A secret string (API key, password, token). Debug and Display print a placeholder.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    /// The secret value. Call only where it is used (a header, a signature), never to log.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Why a configuration was refused: the dotted key and the reason, both safe to print.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid configuration: {key}: {reason}")]
pub struct ConfigError {
    pub key: String,
    pub reason: String,
}

impl ConfigError {
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { key: key.into(), reason: reason.into() }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub upstream: UpstreamConfig,
    pub auth: AuthConfig,
    pub audit: AuditConfig,
    pub redis: RedisConfig,
    pub telemetry: TelemetryConfig,
    /// Read separately (see [`Config::from_table`]) so errors name `tools.<name>.<key>`.
    #[serde(skip)]
    pub tools: ToolsConfig,
    pub backends: BackendsConfig,
    pub mcp: mcp::McpConfig,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum AuthMode {
    #[default]
    None,
    Jwt,
    Ticket,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    pub mode: AuthMode,
    /// HS256 shared secret.
    pub jwt_secret: Option<Secret>,
    /// RS256/ES256 public key (PEM text).
    pub jwt_public_key_pem: Option<String>,
    pub jwt_issuer: Option<String>,
    pub jwt_audience: Option<String>,
    /// Bearer token for `/admin/*` and `POST /v1/sessions`; unset = those endpoints are off.
    pub admin_token: Option<Secret>,
    /// Longest ticket lifetime `POST /v1/sessions` grants.
    pub max_ticket_ttl_s: u64,
    /// Roles given to every session when `mode = "none"`.
    pub anonymous_roles: Vec<String>,
    /// Key for the keyed hash of `sub` in logs and audit; unset = derived per process (not stable
    /// across restarts — set it in production).
    pub user_hash_key: Option<Secret>,
    /// Longest lifetime a JWT may have (`exp - iat`, and `exp - now`); longer ones are refused.
    pub max_token_lifetime_s: u64,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            mode: AuthMode::None,
            jwt_secret: None,
            jwt_public_key_pem: None,
            jwt_issuer: None,
            jwt_audience: None,
            admin_token: None,
            max_ticket_ttl_s: 300,
            anonymous_roles: vec!["clinician".into()],
            user_hash_key: None,
            max_token_lifetime_s: 24 * 3600,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    pub path: PathBuf,
    /// Rotate the file when it grows past this many bytes (0 = never).
    pub rotate_bytes: u64,
    /// What a call does when its record cannot be made durable.
    pub on_error: AuditOnError,
    /// The Redis stream records are mirrored to; unset = `voxgate:audit:{instance_id}`.
    pub redis_stream: Option<String>,
    /// The stream is trimmed to about this many lines (`XADD MAXLEN ~`); 0 = never trimmed.
    pub redis_stream_maxlen: u64,
    /// Key of the HMAC-SHA256 chain; unset = plain SHA-256 (which only proves accidents).
    pub chain_key: Option<Secret>,
    /// A `checkpoint` record with the chain head after this many records (0 = never)...
    pub checkpoint_records: u64,
    /// ...or after this many seconds with new records (0 = never).
    pub checkpoint_interval_s: u64,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            path: PathBuf::from("./voxgate-audit.jsonl"),
            rotate_bytes: 64 * 1024 * 1024,
            on_error: AuditOnError::FailClosed,
            redis_stream: None,
            redis_stream_maxlen: 100_000,
            chain_key: None,
            checkpoint_records: 1000,
            checkpoint_interval_s: 60,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    pub url: Option<Secret>,
    /// When Redis is unreachable, refuse rate-limited calls instead of falling back to the local
    /// limiter.
    pub rate_limit_fail_closed: bool,
    /// How long a live session's registry entry (and its place in the cross-instance per-user
    /// cap) outlives the last refresh by its instance; each instance refreshes every third of it.
    pub session_ttl_ms: u64,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self { url: None, rate_limit_fail_closed: false, session_ttl_ms: 30_000 }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
pub enum OtlpProtocol {
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    #[serde(rename = "grpc")]
    Grpc,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    pub otlp_endpoint: Option<String>,
    pub otlp_protocol: OtlpProtocol,
    pub log_format: LogFormat,
    /// `tracing` filter directive, overridden by `RUST_LOG`.
    pub log_level: String,
    pub service_name: String,
    /// `server.instance_id`, copied here at start (not a key of its own) so every log line and
    /// the span resource carry it; empty = not tagged.
    #[serde(skip)]
    pub instance_id: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            otlp_protocol: OtlpProtocol::HttpProtobuf,
            log_format: LogFormat::Text,
            log_level: "info".into(),
            service_name: "voxgate".into(),
            instance_id: String::new(),
        }
    }
}

/// `[tools]`: global tool settings plus one optional `[tools.<name>]` table per tool.
#[derive(Debug, Clone)]
pub struct ToolsConfig {
    /// How long a parked call waits for the user's decision before it is declined as expired.
    pub confirmation_timeout_ms: u64,
    pub per_tool: BTreeMap<String, ToolOverride>,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self { confirmation_timeout_ms: 60_000, per_tool: BTreeMap::new() }
    }
}

/// Per-tool policy overrides; unset fields keep the tool's defaults from `TOOLS.md`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolOverride {
    pub enabled: Option<bool>,
    pub rate_limit_per_minute: Option<u32>,
    pub timeout_ms: Option<u64>,
    pub requires_confirmation: Option<bool>,
    /// Roles allowed to call the tool; empty = every authenticated user.
    pub roles: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackendsConfig {
    pub calendar: CalendarBackendConfig,
    pub files: FilesBackendConfig,
    pub pubmed: PubmedBackendConfig,
    pub guidelines: GuidelinesBackendConfig,
    pub ddx: DdxBackendConfig,
    pub web_search: WebSearchBackendConfig,
    pub evidence: EvidenceBackendConfig,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum CalendarKind {
    #[default]
    Local,
    Caldav,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CalendarBackendConfig {
    pub kind: CalendarKind,
    /// `local`: the iCalendar file.
    pub path: PathBuf,
    /// `caldav`: a server root, principal or calendar collection URL (Nextcloud:
    /// `https://HOST/remote.php/dav`).
    pub url: Option<String>,
    pub username: Option<String>,
    pub password: Option<Secret>,
    /// `caldav`: the default calendar, by path or display name (unset: the first that holds events).
    pub calendar: Option<String>,
    /// Time zone used to read and write local times (IANA name).
    pub timezone: String,
}

impl Default for CalendarBackendConfig {
    fn default() -> Self {
        Self {
            kind: CalendarKind::Local,
            path: PathBuf::from("./data/calendar.ics"),
            url: None,
            username: None,
            password: None,
            calendar: None,
            timezone: "UTC".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum FilesKind {
    #[default]
    Local,
    Webdav,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilesBackendConfig {
    pub kind: FilesKind,
    /// `local`: the folder of documents.
    pub root: PathBuf,
    /// `webdav`: the root collection of the user's files (Nextcloud:
    /// `https://HOST/remote.php/dav/files/USER/`).
    pub url: Option<String>,
    pub username: Option<String>,
    pub password: Option<Secret>,
    /// Larger files are refused before their download completes.
    pub max_file_bytes: u64,
}

impl Default for FilesBackendConfig {
    fn default() -> Self {
        Self {
            kind: FilesKind::Local,
            root: PathBuf::from("./data/files"),
            url: None,
            username: None,
            password: None,
            max_file_bytes: 20 * 1024 * 1024,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PubmedBackendConfig {
    pub base_url: String,
    pub api_key: Option<Secret>,
    pub email: Option<String>,
    pub tool: String,
    /// Requests per second across every session of this process; unset = NCBI's 3/s, 10/s with a key.
    pub requests_per_second: Option<u32>,
}

impl Default for PubmedBackendConfig {
    fn default() -> Self {
        Self {
            base_url: "https://eutils.ncbi.nlm.nih.gov/entrez/eutils".into(),
            api_key: None,
            email: None,
            tool: "voxgate".into(),
            requests_per_second: None,
        }
    }
}

impl Config {
    /// Load from an optional TOML file and an environment source, then validate.
    pub fn load(path: Option<&Path>, env: &dyn EnvSource) -> Result<Config, ConfigError> {
        let mut table = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    ConfigError::new("--config", format!("cannot read {}: {e}", path.display()))
                })?;
                toml::from_str::<toml::Table>(&text)
                    .map_err(|e| ConfigError::new("--config", format!("not valid TOML: {}", e.message())))?
            }
            None => toml::Table::new(),
        };
        env::overlay(&mut table, env)?;
        let mut config = Self::from_table(table)?;
        // An empty key (an empty k8s Secret or compose variable) is no key, like an empty
        // `OPENAI_API_KEY`: otherwise it would pick `openai` and send `Bearer ` on every session.
        if config.upstream.api_key.as_ref().is_some_and(|key| key.expose().is_empty()) {
            config.upstream.api_key = None;
        }
        if config.upstream.api_key.is_none()
            && let Some(key) = env.get("OPENAI_API_KEY").filter(|k| !k.is_empty())
        {
            config.upstream.api_key = Some(Secret::new(key));
        }
        validate(&config)?;
        Ok(config)
    }

    /// Deserialise a TOML table, naming the dotted key of the first problem.
    pub fn from_table(mut table: toml::Table) -> Result<Config, ConfigError> {
        // Azure's preview form (`deployment` + `api_version`) speaks the beta protocol: there an
        // unset `protocol` means beta, not the GA default (`validate` refuses a `ga` written out).
        // Only for `kind = "azure"` (the effective kind is Azure only when written so): any other
        // kind ignores those keys, and api.openai.com has retired beta.
        if let Some(toml::Value::Table(upstream)) = table.get_mut("upstream")
            && upstream.get("kind").and_then(toml::Value::as_str) == Some("azure")
            && (upstream.contains_key("deployment") || upstream.contains_key("api_version"))
            && !upstream.contains_key("protocol")
        {
            upstream.insert("protocol".into(), toml::Value::String("beta".into()));
        }
        let tools = table.remove("tools");
        let mut config: Config = deserialize_at("", toml::Value::Table(table))?;
        match tools {
            None => {}
            Some(toml::Value::Table(tools)) => {
                for (name, value) in tools {
                    if name == "confirmation_timeout_ms" {
                        config.tools.confirmation_timeout_ms = deserialize_at("tools.", toml::Value::Table(
                            toml::Table::from_iter([(name, value)]),
                        ))
                        .map(|t: ConfirmationOnly| t.confirmation_timeout_ms)?;
                    } else {
                        let over = deserialize_at(&format!("tools.{name}."), value)?;
                        config.tools.per_tool.insert(name, over);
                    }
                }
            }
            Some(_) => return Err(ConfigError::new("tools", "must be a table")),
        }
        Ok(config)
    }
}

#[derive(Deserialize)]
struct ConfirmationOnly {
    confirmation_timeout_ms: u64,
}

/// Deserialise with `serde_path_to_error`, prefixing the failing path so the key is complete.
fn deserialize_at<T: serde::de::DeserializeOwned>(prefix: &str, value: toml::Value) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        let key = match (prefix, path.as_str()) {
            ("", ".") => "config".to_string(),
            (prefix, ".") => prefix.trim_end_matches('.').to_string(),
            (prefix, path) => format!("{prefix}{path}"),
        };
        ConfigError::new(key, without_value(&err.into_inner().to_string()))
    })
}

/// A serde type or value error without the value it quotes: "invalid type: integer `4242…`,
/// expected a string" for a secret given as digits (an env value is parsed as TOML) would print
/// the secret. What kind of value it was, and what was expected, stay.
fn without_value(reason: &str) -> String {
    for prefix in ["invalid type: ", "invalid value: "] {
        let Some(rest) = reason.strip_prefix(prefix) else { continue };
        let Some((unexpected, expected)) = rest.rsplit_once(", expected ") else { continue };
        // `integer `4242``, `string "x"`, `floating point `1.5``: the kind is what precedes the value.
        let kind = unexpected.split([' ', '`', '"']).take_while(|w| !w.is_empty()).collect::<Vec<_>>().join(" ");
        let kind = kind.trim_end_matches(|c: char| !c.is_alphabetic());
        return format!("{prefix}{kind}, expected {expected}");
    }
    reason.to_string()
}

#[cfg(test)]
mod tests;
