//! Configuration documents and their environment overlays.
//!
//! Every part of the pipeline reads one TOML document at start-up; any key in it can
//! be overridden from the environment, so a deployment changes an address or a limit
//! without editing the file: `{PREFIX}SECTION__KEY=value` sets `[section] key`
//! (matched case-insensitively; new keys in lower case). Services that embed the SDK
//! also take [`SDK_PREFIX`] overrides inside their `[sdk]` section. Values parse as
//! TOML scalars where they can (`80` an integer, `true` a boolean), else strings;
//! inside a `settings` table (a client library's own settings, every one text) a value
//! stays the text it was given, so `0123` or `1.0` reach the client unchanged.
//! The same dotted-path setter builds the dynamic document from a Redis hash.

use std::path::{Path, PathBuf};

/// The prefix of overrides that reach an SDK's configuration (`REWARD_SDK__STORE__TTL_SECS`).
pub const SDK_PREFIX: &str = "REWARD_SDK__";

/// Why a document could not be had.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// The file could not be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not TOML, or an override that does not fit the document.
    #[error("{0}")]
    Parse(String),
}

/// Reads the file at `path` and the process environment (for overrides and secrets).
pub fn read_file(path: &Path) -> Result<(String, Vec<(String, String)>), DocumentError> {
    let text = std::fs::read_to_string(path).map_err(|source| DocumentError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((text, std::env::vars().collect()))
}

/// How every service loads its configuration: reads `path` and the process
/// environment, then hands both to `parse` (the service's own `from_toml_str`, which
/// tests call with an environment of their own).
pub fn load<T, E: From<DocumentError>>(
    path: &Path,
    parse: impl FnOnce(&str, &[(String, String)]) -> Result<T, E>,
) -> Result<T, E> {
    let (text, env) = read_file(path)?;
    parse(&text, &env)
}

/// [`service_document`], then deserialized into `R`, the service's raw shape (unknown
/// keys and wrong types are refused there, with serde's message).
pub fn service_raw<R: serde::de::DeserializeOwned>(
    text: &str,
    env: &[(String, String)],
    prefix: &str,
) -> Result<R, DocumentError> {
    let doc = service_document(text, env, prefix)?;
    toml::Value::Table(doc)
        .try_into()
        .map_err(|e: toml::de::Error| DocumentError::Parse(e.to_string()))
}

/// Parses `text` and applies `env`'s overrides: `{prefix}SECTION__KEY=value` anywhere
/// in the document, then [`SDK_PREFIX`] ones inside its `[sdk]` section (when it has
/// one).
///
/// ```
/// let env = vec![
///     ("REWARD_SERVICE__SERVER__PORT".to_string(), "9000".to_string()),
///     ("REWARD_SDK__STORE__TTL_SECS".to_string(), "60".to_string()),
/// ];
/// let doc = reward_runtime::env::service_document(
///     "[server]\nport = 1\n[sdk.store]\nttl_secs = 5\n", &env, "REWARD_SERVICE__",
/// ).unwrap();
/// assert_eq!(doc["server"]["port"].as_integer(), Some(9000));
/// assert_eq!(doc["sdk"]["store"]["ttl_secs"].as_integer(), Some(60));
/// ```
pub fn service_document(
    text: &str,
    env: &[(String, String)],
    prefix: &str,
) -> Result<toml::Table, DocumentError> {
    let mut doc: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| DocumentError::Parse(e.to_string()))?;
    overlay(&mut doc, env, prefix)?;
    if let Some(toml::Value::Table(sdk_doc)) = doc.get_mut("sdk") {
        overlay(sdk_doc, env, SDK_PREFIX)?;
    }
    Ok(doc)
}

/// Applies every `{prefix}A__B=value` of `env` to `doc`; other variables are ignored.
pub fn overlay(
    doc: &mut toml::Table,
    env: &[(String, String)],
    prefix: &str,
) -> Result<(), DocumentError> {
    for (name, value) in env {
        if let Some(path) = name.strip_prefix(prefix) {
            let parts: Vec<&str> = path.split("__").collect();
            set_path(doc, &parts, value)
                .map_err(|e| DocumentError::Parse(format!("override {name}: {e}")))?;
        }
    }
    Ok(())
}

/// Sets the key at `parts` (matched case-insensitively against existing keys; new
/// keys in lower case) to `value`, parsed as a TOML scalar when it can be.
pub fn set_path(doc: &mut toml::Table, parts: &[&str], value: &str) -> Result<(), String> {
    if parts.is_empty() || parts.iter().any(|p| p.is_empty()) {
        return Err("empty path segment".into());
    }
    let mut table = doc;
    for (i, part) in parts.iter().enumerate() {
        let key = table
            .keys()
            .find(|k| k.eq_ignore_ascii_case(part))
            .cloned()
            .unwrap_or_else(|| part.to_ascii_lowercase());
        if i + 1 == parts.len() {
            let text = parts[..i]
                .iter()
                .any(|p| p.eq_ignore_ascii_case("settings"));
            let value = if text {
                toml::Value::String(value.to_string())
            } else {
                scalar(value)
            };
            table.insert(key, value);
            break;
        }
        let entry = table
            .entry(key.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = entry
            .as_table_mut()
            .ok_or_else(|| format!("{key} is not a table"))?;
    }
    Ok(())
}

fn scalar(s: &str) -> toml::Value {
    if let Ok(i) = s.parse::<i64>() {
        return toml::Value::Integer(i);
    }
    if let Ok(b) = s.parse::<bool>() {
        return toml::Value::Boolean(b);
    }
    if let Ok(f) = s.parse::<f64>() {
        return toml::Value::Float(f);
    }
    toml::Value::String(s.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn overrides_reach_nested_keys_and_bad_paths_are_refused() {
        let mut doc: toml::Table = "[queues.massive]\nratio = 70\n".parse().unwrap();
        let env = vec![
            ("P__QUEUES__MASSIVE__RATIO".to_string(), "5".to_string()),
            ("P__STORE__STRICT".to_string(), "true".to_string()),
            ("P__STORE__URL".to_string(), "redis://x:1".to_string()),
            ("OTHER".to_string(), "ignored".to_string()),
        ];
        overlay(&mut doc, &env, "P__").unwrap();
        assert_eq!(doc["queues"]["massive"]["ratio"].as_integer(), Some(5));
        assert_eq!(doc["store"]["strict"].as_bool(), Some(true));
        assert_eq!(doc["store"]["url"].as_str(), Some("redis://x:1"));
        assert!(!doc.contains_key("other"));
        let bad = vec![("P__QUEUES__MASSIVE__RATIO__X".to_string(), "1".to_string())];
        assert!(overlay(&mut doc, &bad, "P__").is_err());
        assert!(set_path(&mut doc, &["a", ""], "1").is_err());
    }

    #[test]
    fn a_value_inside_a_settings_table_stays_the_text_it_was_given() {
        let mut doc = toml::Table::new();
        let env = vec![
            (
                "P__SOURCE__SETTINGS__SASL.PASSWORD".to_string(),
                "0123".to_string(),
            ),
            ("P__SOURCE__SETTINGS__X".to_string(), "1.0".to_string()),
            ("P__SOURCE__RATE".to_string(), "1.0".to_string()),
        ];
        overlay(&mut doc, &env, "P__").unwrap();
        assert_eq!(
            doc["source"]["settings"]["sasl.password"].as_str(),
            Some("0123")
        );
        assert_eq!(doc["source"]["settings"]["x"].as_str(), Some("1.0"));
        assert_eq!(doc["source"]["rate"].as_float(), Some(1.0));
    }
}
