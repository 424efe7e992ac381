//! `[mcp]`: the Model Context Protocol servers whose tools voxgate offers to the model (CONTRACT §10).
//!
//! Each `[mcp.servers.NAME]` is either a stdio server voxgate starts (`command`, `env`) or a
//! Streamable HTTP server (`url`, `headers`). Nothing is offered unless it is on the server's
//! `allow` list: an operator opts tools in one by one. `[mcp.servers.NAME.policy.TOOL]` sets the
//! policy of one allowed tool; unset keys take the defaults documented in docs/tools-mcp.md.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{ConfigError, Secret};

/// The longest tool name the realtime API accepts (`^[a-zA-Z0-9_-]{1,64}$`).
const MAX_TOOL_NAME: usize = 64;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// How long start-up waits for all servers to connect before serving without the late ones
    /// (they keep connecting in the background).
    pub connect_timeout_ms: u64,
    pub servers: BTreeMap<String, McpServerConfig>,
}

impl Default for McpConfig {
    fn default() -> Self {
        Self { connect_timeout_ms: 5_000, servers: BTreeMap::new() }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerConfig {
    /// stdio server: program and arguments, started (and restarted) by voxgate.
    pub command: Vec<String>,
    /// Extra environment for the stdio server (values may be secrets; never logged).
    pub env: BTreeMap<String, Secret>,
    /// Streamable HTTP server: its MCP endpoint.
    pub url: Option<String>,
    /// HTTP headers sent with every request (e.g. `Authorization`); never logged.
    pub headers: BTreeMap<String, Secret>,
    /// The server's tools that are offered to the model; default none.
    pub allow: Vec<String>,
    /// Per-tool policy, keyed by the server's tool name (must be on `allow`).
    pub policy: BTreeMap<String, McpToolPolicy>,
}

/// Policy of one MCP tool; unset keys take the defaults.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct McpToolPolicy {
    /// Roles allowed to call the tool; unset or empty = every authenticated user.
    pub roles: Option<Vec<String>>,
    /// Ask the user first. Default: on, unless the server annotates the tool `readOnlyHint: true`.
    pub confirm: Option<bool>,
    /// The tool handles patient data: arguments stay out of the audit log, results taint the session.
    pub phi: Option<bool>,
    /// The tool sends its arguments to a third party: they are screened for PHI first.
    pub third_party: Option<bool>,
    pub rate_per_min: Option<u32>,
    pub timeout_ms: Option<u64>,
}

/// Is `name` usable as a server or tool name inside a model-facing `SERVER__TOOL` name?
fn is_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Cross-field checks of `[mcp]`, naming the dotted key of the first problem.
pub fn validate(mcp: &McpConfig) -> Result<(), ConfigError> {
    if mcp.connect_timeout_ms == 0 {
        return Err(ConfigError::new("mcp.connect_timeout_ms", "must be at least 1"));
    }
    for (name, server) in &mcp.servers {
        let key = format!("mcp.servers.{name}");
        // No `__` in it and no `_` at its end: the first `__` of a `SERVER__TOOL` name is then
        // always the separator, so two servers' tools can never share a name (`a_` + `_b` and
        // `a` + `__b` would both be `a____b`).
        if !is_name(name) || name.contains("__") || name.ends_with('_') {
            return Err(ConfigError::new(
                key,
                "the server name may hold only letters, digits, '_' and '-', with no '__' and no '_' at its end",
            ));
        }
        match (server.command.is_empty(), &server.url) {
            (false, Some(_)) => {
                return Err(ConfigError::new(key, "set either command (stdio) or url (HTTP), not both"));
            }
            (true, None) => return Err(ConfigError::new(key, "set command (stdio) or url (Streamable HTTP)")),
            (true, Some(url)) => {
                let ok =
                    url::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
                if !ok {
                    return Err(ConfigError::new(format!("{key}.url"), "must be an http:// or https:// URL"));
                }
                if !server.env.is_empty() {
                    return Err(ConfigError::new(format!("{key}.env"), "only applies to a stdio server (command)"));
                }
            }
            (false, None) => {
                if server.command[0].is_empty() {
                    return Err(ConfigError::new(format!("{key}.command"), "the program must not be empty"));
                }
                if !server.headers.is_empty() {
                    return Err(ConfigError::new(format!("{key}.headers"), "only apply to an HTTP server (url)"));
                }
            }
        }
        for header in server.headers.keys() {
            if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                return Err(ConfigError::new(format!("{key}.headers.{header}"), "not a valid HTTP header name"));
            }
        }
        for (header, value) in &server.headers {
            if http::HeaderValue::from_str(value.expose()).is_err() {
                return Err(ConfigError::new(format!("{key}.headers.{header}"), "not a valid HTTP header value"));
            }
        }
        for (i, tool) in server.allow.iter().enumerate() {
            if !is_name(tool) || name.len() + 2 + tool.len() > MAX_TOOL_NAME {
                return Err(ConfigError::new(
                    format!("{key}.allow[{i}]"),
                    format!("{name}__TOOL must be at most {MAX_TOOL_NAME} letters, digits, '_' or '-'"),
                ));
            }
        }
        for (tool, policy) in &server.policy {
            let key = format!("{key}.policy.{tool}");
            if !server.allow.contains(tool) {
                return Err(ConfigError::new(key, "the tool is not on the server's allow list"));
            }
            if policy.rate_per_min == Some(0) {
                return Err(ConfigError::new(format!("{key}.rate_per_min"), "must be at least 1"));
            }
            if policy.timeout_ms == Some(0) {
                return Err(ConfigError::new(format!("{key}.timeout_ms"), "must be at least 1"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Config;

    fn load(toml: &str) -> Result<Config, super::ConfigError> {
        let config = Config::from_table(toml::from_str(toml).unwrap())?;
        super::super::validate(&config)?;
        Ok(config)
    }

    #[test]
    fn a_stdio_and_an_http_server_load() {
        let config = load(
            "[mcp.servers.lab]\ncommand = [\"python\", \"lab.py\"]\nenv = { LAB_URL = \"x\" }\nallow = [\"lookup\"]\n\
             [mcp.servers.lab.policy.lookup]\nconfirm = false\nrate_per_min = 5\n\
             [mcp.servers.paging]\nurl = \"https://paging.example/mcp\"\nheaders = { Authorization = \"Bearer s3cret\" }\n",
        )
        .unwrap();
        let lab = &config.mcp.servers["lab"];
        assert_eq!(lab.policy["lookup"].confirm, Some(false));
        assert!(config.mcp.servers["paging"].allow.is_empty(), "default: nothing allowed");
        assert!(!format!("{config:?}").contains("s3cret"), "header values are secrets");
    }

    #[test]
    fn bad_servers_are_refused_naming_the_key() {
        let cases = [
            ("[mcp.servers.lab]\nallow = []\n", "mcp.servers.lab"),
            ("[mcp.servers.lab]\ncommand = [\"x\"]\nurl = \"http://h/mcp\"\n", "mcp.servers.lab"),
            ("[mcp.servers.lab]\nurl = \"ftp://h/mcp\"\n", "mcp.servers.lab.url"),
            ("[mcp.servers.a__b]\ncommand = [\"x\"]\n", "mcp.servers.a__b"),
            // `a_` + `__` + `_b` would be `a____b`, as `a` + `__` + `__b` is.
            ("[mcp.servers.a_]\ncommand = [\"x\"]\nallow = [\"_b\"]\n", "mcp.servers.a_"),
            (
                "[mcp.servers.lab]\ncommand = [\"x\"]\nallow = [\"a\"]\n[mcp.servers.lab.policy.b]\nconfirm = true\n",
                "mcp.servers.lab.policy.b",
            ),
            ("[mcp.servers.lab]\ncommand = [\"x\"]\nallow = [\"a b\"]\n", "mcp.servers.lab.allow[0]"),
            (
                "[mcp.servers.lab]\ncommand = [\"x\"]\nallow = [\"a\"]\n[mcp.servers.lab.policy.a]\ntimeout_ms = 0\n",
                "mcp.servers.lab.policy.a.timeout_ms",
            ),
            (
                "[mcp.servers.lab]\ncommand = [\"x\"]\nallow = [\"a\"]\n[mcp.servers.lab.policy.a]\nconfirmm = true\n",
                "mcp.servers.lab.policy.a.confirmm",
            ),
        ];
        for (toml, key) in cases {
            let err = load(toml).unwrap_err();
            assert_eq!(err.key, key, "{toml}: {err}");
        }
    }
}
