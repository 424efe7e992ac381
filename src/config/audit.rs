//! Audit settings that decide what happens on a bad day (CONTRACT §11): whether a call whose
//! record cannot be made durable still releases its result. Kept apart from `mod.rs` so the
//! failure policy and its documentation live in one place.

use serde::Deserialize;

use super::{AuditConfig, ConfigError, ServerConfig};

/// `audit.on_error`: what a call does when its audit record cannot be made durable (disk full,
/// fsync error, unwritable directory).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum AuditOnError {
    /// The call fails `audit_unavailable`, nothing it produced is released, `/readyz` is 503
    /// until records are durable again: no unaudited access to patient data.
    #[default]
    FailClosed,
    /// The result is released anyway and the failure is counted
    /// (`voxgate_audit_errors_total`): availability over the audit trail.
    FailOpen,
}

impl AuditOnError {
    pub fn as_str(self) -> &'static str {
        match self {
            AuditOnError::FailClosed => "fail_closed",
            AuditOnError::FailOpen => "fail_open",
        }
    }
}

/// The shortest `audit.chain_key` accepted: a guessable key would let anyone recompute the chain.
const MIN_CHAIN_KEY_BYTES: usize = 16;

/// Checks of the audit keys that `serde` cannot express.
pub(super) fn validate(audit: &AuditConfig, server: &ServerConfig) -> Result<(), ConfigError> {
    if audit
        .chain_key
        .as_ref()
        .is_some_and(|k| k.expose().len() < MIN_CHAIN_KEY_BYTES)
    {
        return Err(ConfigError::new(
            "audit.chain_key",
            format!("must be at least {MIN_CHAIN_KEY_BYTES} bytes"),
        ));
    }
    if audit
        .redis_stream
        .as_ref()
        .is_some_and(|s| s.trim().is_empty())
    {
        return Err(ConfigError::new("audit.redis_stream", "must not be empty"));
    }
    if server
        .instance_id
        .as_ref()
        .is_some_and(|id| id.trim().is_empty() || id.len() > 128)
    {
        return Err(ConfigError::new(
            "server.instance_id",
            "must be 1-128 characters",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{Config, validate};
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        let config = Config::from_table(
            toml::from_str(text).map_err(|e| ConfigError::new("toml", e.to_string()))?,
        )?;
        validate(&config).map(|()| config)
    }

    #[test]
    fn audit_failure_policy_chain_key_and_instance() {
        let config = parse("").unwrap();
        assert_eq!(
            config.audit.on_error,
            AuditOnError::FailClosed,
            "fail closed unless told otherwise"
        );
        assert!(!config.server.instance_id().is_empty(), "the hostname");
        let config = parse(
            "[server]\ninstance_id = \"vg-2\"\ntrusted_proxies = [\"10.0.0.1\", \"10.42.7.0/16\", \"::1\", \"::ffff:10.0.0.2\"]\n[audit]\non_error = \"fail_open\"\nchain_key = \"0123456789abcdef\"",
        )
        .unwrap();
        assert_eq!(config.audit.on_error, AuditOnError::FailOpen);
        assert_eq!(config.server.instance_id(), "vg-2");
        let proxies: Vec<String> = config.server.trusted_proxies.iter().map(ToString::to_string).collect();
        assert_eq!(proxies, ["10.0.0.1/32", "10.42.0.0/16", "::1/128", "10.0.0.2/32"]);
        assert_eq!(parse("[server]\ntrusted_proxies = [\"ingress\"]").unwrap_err().key, "server.trusted_proxies");
        assert_eq!(
            parse("[audit]\nchain_key = \"short\"").unwrap_err().key,
            "audit.chain_key"
        );
        assert!(
            parse("[audit]\non_error = \"ignore\"")
                .unwrap_err()
                .key
                .starts_with("audit")
        );
        assert_eq!(
            parse("[server]\ninstance_id = \"\"").unwrap_err().key,
            "server.instance_id"
        );
    }
}
