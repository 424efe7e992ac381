//! The `VOXGATE_<SECTION>__<KEY>` environment overlay, read from an injected source so tests pass a
//! map instead of mutating the process environment.
//!
//! `VOXGATE_SERVER__LISTEN=0.0.0.0:8080` sets `server.listen`; levels are separated by a double
//! underscore and names are lower-cased (`VOXGATE_TOOLS__SEARCH_PUBMED__RATE_LIMIT_PER_MINUTE=5`).
//! Not every level is a schema key, though ([`key_case`]): the names of an operator's own entries
//! (an MCP server, a tool) match an entry of the file whatever its case, and the keys of free-form
//! maps are data that must arrive as written — `VOXGATE_MCP__SERVERS__LAB__ENV__LAB_TOKEN` sets the
//! child's `LAB_TOKEN`, not `lab_token` (environment names are case-sensitive).
//! A value that reads as a TOML number, boolean, array or inline table is taken as one; anything
//! else is a string (quote it, `'"123"'`, to force a string that looks like a number).

use std::collections::HashMap;

use super::ConfigError;

/// Prefix of every overlay variable.
pub const ENV_PREFIX: &str = "VOXGATE_";
/// Names the config file, like `--config`.
pub const ENV_CONFIG_FILE: &str = "VOXGATE_CONFIG";

/// Where environment variables come from.
pub trait EnvSource {
    fn get(&self, key: &str) -> Option<String>;
    fn vars(&self) -> Vec<(String, String)>;
}

/// The real process environment.
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn get(&self, key: &str) -> Option<String> {
        std::env::var(key).ok()
    }
    fn vars(&self) -> Vec<(String, String)> {
        std::env::vars().collect()
    }
}

impl EnvSource for HashMap<String, String> {
    fn get(&self, key: &str) -> Option<String> {
        HashMap::get(self, key).cloned()
    }
    fn vars(&self) -> Vec<(String, String)> {
        self.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

/// Apply every `VOXGATE_*__*` variable onto the table parsed from the file.
pub(super) fn overlay(table: &mut toml::Table, env: &dyn EnvSource) -> Result<(), ConfigError> {
    let mut vars = env.vars();
    vars.sort();
    for (name, raw) in vars {
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else { continue };
        if name == ENV_CONFIG_FILE || !rest.contains("__") {
            continue;
        }
        let path: Vec<&str> = rest.split("__").collect();
        if path.iter().any(|level| level.is_empty()) {
            let key = rest.split("__").map(str::to_ascii_lowercase).collect::<Vec<_>>().join(".");
            return Err(ConfigError::new(key, format!("{name} has an empty level")));
        }
        set_path(table, &path, parse_value(&raw))?;
    }
    Ok(())
}

/// How one level of an overlay path becomes a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyCase {
    /// A key of the schema. Every schema key is lower case, so lower-casing matches it whatever
    /// the case of the variable.
    Schema,
    /// The name of an entry the operator chose (an MCP server, a tool): an entry of the file is
    /// matched whatever its case (`[mcp.servers.Lab]` is overridden by `…__SERVERS__LAB__…`); a
    /// new one is lower case, as every level was before data keys were told apart.
    Name,
    /// A key of a free-form map whose values are scalars: the rest of the variable name, `__`
    /// included, kept exactly as written. `case_sensitive: false` (HTTP headers) first matches a
    /// key of the file that differs only in case, so an override replaces it rather than sending
    /// the header twice.
    Data { case_sensitive: bool },
}

/// What the level below `parents` (keys as resolved so far) is. Mirrors the maps of the schema:
/// `tools.<tool>`, `mcp.servers.<server>` with its `env`, `headers` and `policy.<tool>`; every
/// other level is a fixed key.
fn key_case(parents: &[String]) -> KeyCase {
    let parents: Vec<&str> = parents.iter().map(String::as_str).collect();
    match parents.as_slice() {
        ["tools"] | ["mcp", "servers"] | ["mcp", "servers", _, "policy"] => KeyCase::Name,
        ["mcp", "servers", _, "env"] => KeyCase::Data { case_sensitive: true },
        ["mcp", "servers", _, "headers"] => KeyCase::Data { case_sensitive: false },
        _ => KeyCase::Schema,
    }
}

/// The key of `table` a variable's `written` level names: the exact key, else its lower-case form
/// (what every earlier release resolved it to), else the one key equal to it ignoring ASCII case.
/// Two keys that differ only in case, neither exact nor lower-case (`Lab` and `LAB` for `lAb`),
/// are ambiguous: the variable could carry one server's credential to the other, so it is refused.
fn existing_key(table: &toml::Table, written: &str) -> Result<Option<String>, AmbiguousKey> {
    let lower = written.to_ascii_lowercase();
    for candidate in [written, lower.as_str()] {
        if table.contains_key(candidate) {
            return Ok(Some(candidate.to_string()));
        }
    }
    let mut matching = table.keys().filter(|k| k.eq_ignore_ascii_case(written));
    match (matching.next(), matching.next()) {
        (Some(only), None) => Ok(Some(only.clone())),
        (None, _) => Ok(None),
        (Some(_), Some(_)) => Err(AmbiguousKey),
    }
}

/// A variable's level matches more than one entry of the file, differing only in case.
struct AmbiguousKey;

impl AmbiguousKey {
    const REASON: &'static str = "names more than one entry of the file (they differ only in case); rename one";
}

/// Set `value` at the variable's `path` (its levels as written), creating tables on the way.
/// Errors name the dotted key as resolved.
fn set_path(table: &mut toml::Table, path: &[&str], value: toml::Value) -> Result<(), ConfigError> {
    let dotted = |resolved: &[String], rest: &[&str]| {
        let rest = rest.iter().map(|level| level.to_ascii_lowercase());
        resolved.iter().cloned().chain(rest).collect::<Vec<_>>().join(".")
    };
    let ambiguous = |resolved: &[String], rest: &[&str]| ConfigError::new(dotted(resolved, rest), AmbiguousKey::REASON);
    let mut resolved: Vec<String> = Vec::with_capacity(path.len());
    let mut current = table;
    let mut rest = path;
    loop {
        let Some((level, below)) = rest.split_first() else {
            return Err(ConfigError::new(dotted(&resolved, &[]), "empty key"));
        };
        let (key, below) = match key_case(&resolved) {
            KeyCase::Schema => (level.to_ascii_lowercase(), below),
            KeyCase::Name => {
                let existing = existing_key(current, level).map_err(|AmbiguousKey| ambiguous(&resolved, rest))?;
                (existing.unwrap_or_else(|| level.to_ascii_lowercase()), below)
            }
            KeyCase::Data { case_sensitive } => {
                let written = rest.join("__");
                let key = match case_sensitive {
                    true => written,
                    false => existing_key(current, &written).map_err(|AmbiguousKey| ambiguous(&resolved, rest))?.unwrap_or(written),
                };
                (key, &[][..])
            }
        };
        if below.is_empty() {
            current.insert(key, value);
            return Ok(());
        }
        let entry = current
            .entry(key.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        resolved.push(key);
        let Some(next) = entry.as_table_mut() else {
            let part = resolved.last().cloned().unwrap_or_default();
            return Err(ConfigError::new(dotted(&resolved, below), format!("`{part}` is not a table")));
        };
        current = next;
        rest = below;
    }
}

fn parse_value(raw: &str) -> toml::Value {
    let looks_structured = raw.starts_with('[') || raw.starts_with('{') || raw.starts_with('"');
    let looks_scalar = raw == "true"
        || raw == "false"
        || (!raw.is_empty() && raw.chars().all(|c| c.is_ascii_digit() || "+-._eE".contains(c)));
    if (looks_structured || looks_scalar)
        && let Ok(mut doc) = toml::from_str::<toml::Table>(&format!("v = {raw}"))
        && let Some(value) = doc.remove("v")
    {
        return value;
    }
    toml::Value::String(raw.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn values_are_typed_only_when_they_look_typed() {
        assert_eq!(parse_value("42"), toml::Value::Integer(42));
        assert_eq!(parse_value("true"), toml::Value::Boolean(true));
        assert_eq!(parse_value("0.0.0.0:80"), toml::Value::String("0.0.0.0:80".into()));
        assert_eq!(parse_value("sk-abc"), toml::Value::String("sk-abc".into()));
        assert_eq!(parse_value("\"123\""), toml::Value::String("123".into()));
        assert_eq!(
            parse_value(r#"["a", "b"]"#),
            toml::Value::Array(vec!["a".into(), "b".into()])
        );
    }

    #[test]
    fn nested_keys_overlay_the_file() {
        let mut table: toml::Table = toml::from_str("[server]\nlisten = \"127.0.0.1:1\"").unwrap();
        overlay(
            &mut table,
            &env(&[
                ("VOXGATE_SERVER__LISTEN", "127.0.0.1:2"),
                ("VOXGATE_TOOLS__SEARCH_PUBMED__ROLES", r#"["x"]"#),
                ("VOXGATE_CONFIG", "ignored.toml"),
                ("HOME", "/root"),
            ]),
        )
        .unwrap();
        assert_eq!(table["server"]["listen"].as_str(), Some("127.0.0.1:2"));
        assert_eq!(table["tools"]["search_pubmed"]["roles"][0].as_str(), Some("x"));
        assert!(!table.contains_key("config"));
    }

    #[test]
    fn a_scalar_in_the_way_names_the_key() {
        let mut table: toml::Table = toml::from_str("server = 1").unwrap();
        let err = overlay(&mut table, &env(&[("VOXGATE_SERVER__LISTEN", "x")])).unwrap_err();
        assert_eq!(err.key, "server.listen");
    }
}
