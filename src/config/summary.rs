//! The effective settings as `check-config` prints them: every secret shown only as set or unset,
//! and every URL without the credentials it may carry (user info, query string, fragment).

use std::fmt::Write;

use super::{Config, Secret};

fn secret(value: &Option<Secret>) -> &'static str {
    if value.is_some() { "(set)" } else { "(unset)" }
}

/// `raw` as written, or with its user info, query and fragment each replaced by `***` when it has
/// any: a collector's `user:token@` or an upstream's `?api-key=` is a credential.
fn url(raw: &str) -> String {
    const HIDDEN: &str = "***";
    let Ok(mut parsed) = url::Url::parse(raw) else {
        // Only an unused setting (the URL of the simulated upstream) reaches here unparsed.
        return "(not a URL, hidden)".into();
    };
    let has_userinfo = !parsed.username().is_empty() || parsed.password().is_some();
    if !has_userinfo && parsed.query().is_none() && parsed.fragment().is_none() {
        return raw.to_string();
    }
    if has_userinfo {
        // Cannot fail: a URL with user info has a host.
        let _ = parsed.set_password(None);
        let _ = parsed.set_username(HIDDEN);
    }
    if parsed.query().is_some() {
        parsed.set_query(Some(HIDDEN));
    }
    if parsed.fragment().is_some() {
        parsed.set_fragment(Some(HIDDEN));
    }
    parsed.to_string()
}

/// One `key = value` line per setting worth checking.
pub fn summary(config: &Config) -> String {
    let mut out = String::new();
    let s = &config.server;
    let u = &config.upstream;
    let a = &config.auth;
    let lines: Vec<(&str, String)> = vec![
        ("server.listen", s.listen.to_string()),
        ("server.allowed_origins", format!("{:?}", s.allowed_origins)),
        ("server.max_frame_bytes", s.max_frame_bytes.to_string()),
        ("server.max_sessions", s.max_sessions.to_string()),
        ("server.max_sessions_per_user", s.max_sessions_per_user.to_string()),
        ("server.drain_timeout_ms", s.drain_timeout_ms.to_string()),
        ("server.handshake_timeout_ms", s.handshake_timeout_ms.to_string()),
        ("server.idle_timeout_ms", s.idle_timeout_ms.to_string()),
        ("server.client_send_timeout_ms", s.client_send_timeout_ms.to_string()),
        ("server.instance_id", s.instance_id()),
        ("server.trusted_proxies", format!("{:?}", s.trusted_proxies)),
        ("upstream.kind", format!("{:?}", u.effective_kind()).to_lowercase()),
        ("upstream.url", url(&u.url)),
        ("upstream.api_key", secret(&u.api_key).into()),
        ("upstream.model", u.model.clone()),
        ("upstream.protocol", format!("{:?}", u.protocol).to_lowercase()),
        ("auth.mode", format!("{:?}", a.mode).to_lowercase()),
        ("auth.jwt_secret", secret(&a.jwt_secret).into()),
        ("auth.jwt_public_key_pem", if a.jwt_public_key_pem.is_some() { "(set)" } else { "(unset)" }.into()),
        ("auth.admin_token", secret(&a.admin_token).into()),
        ("auth.user_hash_key", secret(&a.user_hash_key).into()),
        ("audit.path", config.audit.path.display().to_string()),
        ("audit.on_error", config.audit.on_error.as_str().into()),
        ("audit.chain_key", secret(&config.audit.chain_key).into()),
        ("redis.url", secret(&config.redis.url).into()),
        ("redis.session_ttl_ms", config.redis.session_ttl_ms.to_string()),
        ("telemetry.otlp_endpoint", config.telemetry.otlp_endpoint.as_deref().map_or("(unset)".into(), url)),
        ("tools.confirmation_timeout_ms", config.tools.confirmation_timeout_ms.to_string()),
        ("backends.calendar.kind", format!("{:?}", config.backends.calendar.kind).to_lowercase()),
        ("backends.calendar.password", secret(&config.backends.calendar.password).into()),
        ("backends.files.kind", format!("{:?}", config.backends.files.kind).to_lowercase()),
        ("backends.files.max_file_bytes", config.backends.files.max_file_bytes.to_string()),
        ("backends.files.password", secret(&config.backends.files.password).into()),
        ("backends.pubmed.api_key", secret(&config.backends.pubmed.api_key).into()),
        ("server.max_client_frames_per_s", s.max_client_frames_per_s.to_string()),
        ("server.session_threads", s.session_threads.to_string()),
        ("upstream.send_timeout_ms", u.send_timeout_ms.to_string()),
        ("upstream.allowed_models", format!("{:?}", u.allowed_models)),
        ("upstream.allow_hosted_mcp", u.allow_hosted_mcp.to_string()),
        ("upstream.resume", u.resume.to_string()),
        ("upstream.max_session_age_s", u.max_session_age_s.to_string()),
        ("upstream.resume_attempts", u.resume_attempts.to_string()),
        ("upstream.resume_max_items", u.resume_max_items.to_string()),
        ("upstream.resume_max_bytes", u.resume_max_bytes.to_string()),
        ("upstream.resume_audio_ms", u.resume_audio_ms.to_string()),
        ("auth.max_token_lifetime_s", a.max_token_lifetime_s.to_string()),
        (
            "backends.guidelines.corpus_path",
            config.backends.guidelines.corpus_path.as_ref().map_or("(shipped)".into(), |p| p.display().to_string()),
        ),
        ("backends.ddx.llm_api_key", secret(&config.backends.ddx.llm_api_key).into()),
        ("backends.web_search.provider", format!("{:?}", config.backends.web_search.provider).to_lowercase()),
        ("backends.web_search.api_key", secret(&config.backends.web_search.api_key).into()),
        ("backends.evidence.base_url", config.backends.evidence.base_url.as_deref().map_or("(unset)".into(), url)),
        ("backends.evidence.api_key", secret(&config.backends.evidence.api_key).into()),
    ];
    for (key, value) in lines {
        let _ = writeln!(out, "{key} = {value}");
    }
    for (name, over) in &config.tools.per_tool {
        let _ = writeln!(out, "tools.{name} = {over:?}");
    }
    for (name, server) in &config.mcp.servers {
        let transport = if server.url.is_some() { "http" } else { "stdio" };
        let _ = writeln!(out, "mcp.servers.{name} = {transport}, allow {:?}", server.allow);
    }
    out
}
