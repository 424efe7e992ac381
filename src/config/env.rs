//! The `VOXGATE_<SECTION>__<KEY>` environment overlay, read from an injected source so tests pass a
//! map instead of mutating the process environment.
//!
//! `VOXGATE_SERVER__LISTEN=0.0.0.0:8080` sets `server.listen`; levels are separated by a double
//! underscore and names are lower-cased (`VOXGATE_TOOLS__SEARCH_PUBMED__RATE_LIMIT_PER_MINUTE=5`).
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
        let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        let key = path.join(".");
        if path.iter().any(String::is_empty) {
            return Err(ConfigError::new(key, format!("{name} has an empty level")));
        }
        set_path(table, &path, parse_value(&raw), &key)?;
    }
    Ok(())
}

fn parse_value(raw: &str) -> toml::Value {
    let looks_structured = raw.starts_with('[') || raw.starts_with('{') || raw.starts_with('"');
    let looks_scalar = raw == "true"
        || raw == "false"
        || (!raw.is_empty() && raw.chars().all(|c| c.is_ascii_digit() || "+-._eE".contains(c)));
    if looks_structured || looks_scalar {
        if let Ok(mut doc) = toml::from_str::<toml::Table>(&format!("v = {raw}")) {
            if let Some(value) = doc.remove("v") {
                return value;
            }
        }
    }
    toml::Value::String(raw.to_string())
}

fn set_path(
    table: &mut toml::Table,
    path: &[String],
    value: toml::Value,
    key: &str,
) -> Result<(), ConfigError> {
    let (last, parents) = path.split_last().ok_or_else(|| ConfigError::new(key, "empty key"))?;
    let mut current = table;
    for part in parents {
        let entry = current
            .entry(part.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        current = entry
            .as_table_mut()
            .ok_or_else(|| ConfigError::new(key, format!("`{part}` is not a table")))?;
    }
    current.insert(last.clone(), value);
    Ok(())
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
