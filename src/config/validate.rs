//! Cross-field checks run after parsing. Every error names the dotted key and the reason.

use super::{AuthMode, CalendarKind, Config, ConfigError, OtlpProtocol, UpstreamKind, UpstreamProtocol};
use crate::cluster::MIN_SESSION_TTL_MS;
use crate::tools::KNOWN_TOOLS;
use crate::tools::calendar::MIN_CREATE_TIMEOUT;

/// More session threads than this is a typo, not a machine (each is an OS thread and a runtime).
const MAX_SESSION_THREADS: usize = 256;
/// More sessions than this is an "unlimited" guess, not a capacity: each holds a client and an
/// upstream socket. It also keeps the count within what the semaphore of places can hold
/// (`usize::MAX >> 3`), which panics rather than refuses.
const MAX_SESSIONS: usize = 1_000_000;
/// The shortest `auth.user_hash_key` accepted, as for `audit.chain_key`: with a guessable key,
/// anyone holding a list of staff ids can reverse every user hash in logs, audit and Redis.
const MIN_USER_HASH_KEY_BYTES: usize = 16;
/// The longest a parked call may wait for the user: an hour is past any spoken confirmation, and
/// far below what the session's timer queue (tokio-util's `DelayQueue`, 2^36 ms) accepts, whose
/// insert panics, ending the session with its call unanswered.
const MAX_CONFIRMATION_TIMEOUT_MS: u64 = 3_600_000;

/// Reject a configuration that cannot work, before anything starts serving.
pub fn validate(config: &Config) -> Result<(), ConfigError> {
    let server = &config.server;
    if server.max_frame_bytes < 1024 || server.max_frame_bytes > 256 * 1024 * 1024 {
        return Err(ConfigError::new("server.max_frame_bytes", "must be between 1 KiB and 256 MiB"));
    }
    if server.max_sessions == 0 || server.max_sessions > MAX_SESSIONS {
        return Err(ConfigError::new("server.max_sessions", "must be between 1 and 1000000"));
    }
    if server.handshake_timeout_ms == 0 {
        return Err(ConfigError::new("server.handshake_timeout_ms", "must be at least 1"));
    }
    if server.client_send_timeout_ms == 0 {
        return Err(ConfigError::new("server.client_send_timeout_ms", "must be at least 1"));
    }
    if server.max_sessions_per_user == 0 {
        return Err(ConfigError::new("server.max_sessions_per_user", "must be at least 1"));
    }
    if server.session_threads > MAX_SESSION_THREADS {
        return Err(ConfigError::new("server.session_threads", "must be at most 256 (0 = one per CPU)"));
    }
    if let Some(id) = &server.instance_id {
        let ok = !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !ok {
            return Err(ConfigError::new("server.instance_id", "must be 1–64 characters of A-Z a-z 0-9 . _ -"));
        }
    }
    if config.redis.session_ttl_ms < MIN_SESSION_TTL_MS {
        return Err(ConfigError::new("redis.session_ttl_ms", format!("must be at least {MIN_SESSION_TTL_MS}")));
    }
    for (i, origin) in server.allowed_origins.iter().enumerate() {
        let ok = origin == "null" || url::Url::parse(origin).is_ok_and(|u| u.host().is_some());
        if !ok {
            return Err(ConfigError::new(
                format!("server.allowed_origins[{i}]"),
                "must be an origin such as https://app.example.org",
            ));
        }
    }

    let upstream = &config.upstream;
    if upstream.max_frame_bytes < 64 * 1024 || upstream.max_frame_bytes > 1024 * 1024 * 1024 {
        // A realtime server's `session.updated` alone is ≈ 14 KB; below that no session starts.
        return Err(ConfigError::new("upstream.max_frame_bytes", "must be between 64 KiB and 1 GiB"));
    }
    // The client hears silence while a resume tries: ten attempts at the 30 s back-off ceiling
    // are already five minutes of it.
    if upstream.resume && !(1..=10).contains(&upstream.resume_attempts) {
        return Err(ConfigError::new("upstream.resume_attempts", "must be between 1 and 10 while upstream.resume is on"));
    }
    if upstream.resume && upstream.resume_max_items == 0 {
        return Err(ConfigError::new("upstream.resume_max_items", "must be at least 1 while upstream.resume is on"));
    }
    let kind = upstream.effective_kind();
    if kind != UpstreamKind::Simulated {
        let parsed = url::Url::parse(&upstream.url)
            .map_err(|e| ConfigError::new("upstream.url", format!("not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "ws" | "wss") {
            return Err(ConfigError::new("upstream.url", "scheme must be ws:// or wss://"));
        }
        // `Config::load` already drops an empty key; this covers a config built another way.
        if upstream.api_key.as_ref().is_none_or(|key| key.expose().is_empty()) {
            return Err(ConfigError::new(
                "upstream.api_key",
                format!("required for upstream.kind = \"{}\" (or set OPENAI_API_KEY)", kind_name(kind)),
            ));
        }
        if upstream.deployment.is_some() != upstream.api_version.is_some() {
            return Err(ConfigError::new(
                "upstream.deployment",
                "the Azure preview form needs both upstream.deployment and upstream.api_version",
            ));
        }
        // Azure's preview endpoint speaks the beta protocol: with `ga` it refuses voxgate's own
        // tool injection (`session.type`) and the session runs without server tools. Unset, the
        // protocol is beta for this form already (`Config::from_table`); only a `ga` written out
        // reaches here. Azure has no GA form with a deployment and an api-version (its GA URL is
        // `/openai/v1/realtime?model=…`, without one), so `ga` is never right with them. Other
        // kinds ignore both keys (`upstream::openai`).
        if kind == UpstreamKind::Azure && upstream.deployment.is_some() && upstream.protocol != UpstreamProtocol::Beta {
            return Err(ConfigError::new(
                "upstream.protocol",
                "the Azure preview form (upstream.deployment, upstream.api_version) speaks the beta protocol: \
                 set upstream.protocol = \"beta\" or leave it unset (or use the GA form: upstream.model, no deployment)",
            ));
        }
    }
    if upstream.model.is_empty() && upstream.deployment.is_none() {
        return Err(ConfigError::new("upstream.model", "must not be empty"));
    }
    if upstream.connect_timeout_ms == 0 {
        return Err(ConfigError::new("upstream.connect_timeout_ms", "must be at least 1"));
    }
    // 0 would end every session whose upstream send queue is momentarily full.
    if upstream.send_timeout_ms == 0 {
        return Err(ConfigError::new("upstream.send_timeout_ms", "must be at least 1"));
    }

    let auth = &config.auth;
    if auth.mode != AuthMode::None
        && auth.jwt_secret.is_none()
        && auth.jwt_public_key_pem.is_none()
        && auth.admin_token.is_none()
    {
        return Err(ConfigError::new(
            "auth.mode",
            "needs auth.jwt_secret, auth.jwt_public_key_pem or (for tickets) auth.admin_token",
        ));
    }
    // In `jwt` mode only JWTs open sessions: an admin token alone would refuse every one.
    if auth.mode == AuthMode::Jwt && auth.jwt_secret.is_none() && auth.jwt_public_key_pem.is_none() {
        return Err(ConfigError::new("auth.mode", "\"jwt\" needs auth.jwt_secret or auth.jwt_public_key_pem"));
    }
    if auth.mode == AuthMode::Ticket && auth.admin_token.is_none() {
        return Err(ConfigError::new("auth.admin_token", "required for auth.mode = \"ticket\""));
    }
    if auth.jwt_secret.is_some() && auth.jwt_public_key_pem.is_some() {
        return Err(ConfigError::new(
            "auth.jwt_public_key_pem",
            "set either auth.jwt_secret or auth.jwt_public_key_pem, not both",
        ));
    }
    if auth.jwt_public_key_pem.is_some() {
        // Parsed here as the verifier will parse it, so a bad key is refused like any bad setting.
        crate::policy::auth::JwtVerifier::from_config(auth)
            .map_err(|reason| ConfigError::new("auth.jwt_public_key_pem", reason))?;
    }
    if let Some(secret) = &auth.jwt_secret
        && secret.expose().len() < 32
    {
        return Err(ConfigError::new("auth.jwt_secret", "must be at least 32 bytes"));
    }
    if let Some(token) = &auth.admin_token
        && token.expose().len() < 16
    {
        return Err(ConfigError::new("auth.admin_token", "must be at least 16 characters"));
    }
    if let Some(key) = &auth.user_hash_key
        && key.expose().len() < MIN_USER_HASH_KEY_BYTES
    {
        return Err(ConfigError::new(
            "auth.user_hash_key",
            format!("must be at least {MIN_USER_HASH_KEY_BYTES} bytes"),
        ));
    }
    if auth.mode == AuthMode::None
        && !server.listen.ip().is_loopback()
        && !server.allow_unauthenticated_public
    {
        return Err(ConfigError::new(
            "auth.mode",
            "\"none\" on a non-loopback address needs server.allow_unauthenticated_public = true",
        ));
    }

    if config.audit.path.as_os_str().is_empty() {
        return Err(ConfigError::new("audit.path", "must not be empty"));
    }
    super::audit::validate(&config.audit, &config.server)?;
    if let Some(url) = &config.redis.url {
        let ok = url::Url::parse(url.expose())
            .is_ok_and(|u| matches!(u.scheme(), "redis" | "rediss" | "redis+unix" | "unix"));
        if !ok {
            return Err(ConfigError::new("redis.url", "must be a redis:// or rediss:// URL"));
        }
    }
    if let Some(endpoint) = &config.telemetry.otlp_endpoint {
        let scheme = url::Url::parse(endpoint).ok().map(|u| u.scheme().to_string());
        if !matches!(scheme.as_deref(), Some("http" | "https")) {
            return Err(ConfigError::new("telemetry.otlp_endpoint", "must be an http(s) URL"));
        }
        // This build's gRPC exporter has no TLS: `run` would fail to build it. OTLP/HTTP goes
        // through reqwest, which has (rustls, the system's roots).
        if scheme.as_deref() == Some("https") && config.telemetry.otlp_protocol == OtlpProtocol::Grpc {
            return Err(ConfigError::new(
                "telemetry.otlp_endpoint",
                "https:// needs telemetry.otlp_protocol = \"http/protobuf\" (the collector's OTLP/HTTP port, \
                 usually 4318): gRPC is only supported over http://",
            ));
        }
    }

    if !(1_000..=MAX_CONFIRMATION_TIMEOUT_MS).contains(&config.tools.confirmation_timeout_ms) {
        return Err(ConfigError::new(
            "tools.confirmation_timeout_ms",
            format!("must be at least 1000 and at most {MAX_CONFIRMATION_TIMEOUT_MS} (an hour)"),
        ));
    }
    for (name, over) in &config.tools.per_tool {
        if !KNOWN_TOOLS.contains(&name.as_str()) {
            return Err(ConfigError::new(
                format!("tools.{name}"),
                format!("unknown tool; known tools: {}", KNOWN_TOOLS.join(", ")),
            ));
        }
        if over.timeout_ms == Some(0) {
            return Err(ConfigError::new(format!("tools.{name}.timeout_ms"), "must be at least 1"));
        }
        if over.rate_limit_per_minute == Some(0) {
            return Err(ConfigError::new(
                format!("tools.{name}.rate_limit_per_minute"),
                "must be at least 1 (disable the tool with enabled = false)",
            ));
        }
        if over.requires_confirmation == Some(false) && crate::tools::changes_data(name) {
            return Err(ConfigError::new(
                format!("tools.{name}.requires_confirmation"),
                "cannot be turned off for a tool that changes data",
            ));
        }
    }

    let calendar = &config.backends.calendar;
    if calendar.kind == CalendarKind::Caldav && calendar.url.is_none() {
        return Err(ConfigError::new("backends.calendar.url", "required for kind = \"caldav\""));
    }
    // A CalDAV create sends no PUT with under 2.5 s of the call left: with a shorter timeout every
    // create would fail and the model would keep retrying.
    let create_timeout = config.tools.per_tool.get("create_calendar_event").and_then(|over| over.timeout_ms);
    let least = MIN_CREATE_TIMEOUT.as_millis();
    if calendar.kind == CalendarKind::Caldav && create_timeout.is_some_and(|ms| u128::from(ms) < least) {
        return Err(ConfigError::new(
            "tools.create_calendar_event.timeout_ms",
            format!(
                "must be at least {least} with backends.calendar.kind = \"caldav\" (no event is sent with under 2.5 s left)"
            ),
        ));
    }
    if calendar.timezone.parse::<chrono_tz::Tz>().is_err() {
        return Err(ConfigError::new("backends.calendar.timezone", "not an IANA time zone name"));
    }
    super::files::validate(&config.backends.files)?;
    let pubmed = url::Url::parse(&config.backends.pubmed.base_url);
    if !pubmed.is_ok_and(|u| matches!(u.scheme(), "http" | "https")) {
        return Err(ConfigError::new("backends.pubmed.base_url", "must be an http(s) URL"));
    }
    if let Some(path) = &config.backends.guidelines.corpus_path {
        crate::tools::guidelines::check_corpus(path)
            .map_err(|err| ConfigError::new("backends.guidelines.corpus_path", err.to_string()))?;
    }
    let b = &config.backends;
    super::knowledge::validate(&b.ddx, &b.web_search, &b.evidence)?;
    super::mcp::validate(&config.mcp)?;
    Ok(())
}

fn kind_name(kind: UpstreamKind) -> &'static str {
    match kind {
        UpstreamKind::Openai => "openai",
        UpstreamKind::Azure => "azure",
        UpstreamKind::Simulated => "simulated",
    }
}
