//! Where settings come from (the environment, then the optional `TOKENOPS_CONFIG` file), the
//! `Reader` every area reads its variables through, and `ConfigError`, which names each bad one.

use std::collections::BTreeMap;
use std::time::Duration;

/// Where settings come from: the environment, then the optional file.
pub struct Sources {
    values: BTreeMap<String, String>,
}

impl Sources {
    /// Reads `TOKENOPS_CONFIG` (if set) and the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        let env: BTreeMap<String, String> =
            std::env::vars().filter(|(k, _)| k.starts_with("TOKENOPS_") || k == "RUST_LOG").collect();
        Self::from_parts(env)
    }

    /// For tests and embedding: the given variables stand for the environment.
    pub fn from_parts(env: BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let mut values = BTreeMap::new();
        if let Some(path) = env.get("TOKENOPS_CONFIG") {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError(vec![format!("TOKENOPS_CONFIG={path}: cannot read the file: {e}")]))?;
            let table: toml::Table =
                text.parse().map_err(|e| ConfigError(vec![format!("TOKENOPS_CONFIG={path}: not valid TOML: {e}")]))?;
            for (key, value) in table {
                let text = match value {
                    toml::Value::String(s) => s,
                    toml::Value::Array(items) => items
                        .iter()
                        .map(|v| v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()))
                        .collect::<Vec<_>>()
                        .join(","),
                    other => other.to_string(),
                };
                values.insert(format!("TOKENOPS_{}", key.to_ascii_uppercase()), text);
            }
        }
        values.extend(env);
        Ok(Self { values })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str).filter(|v| !v.trim().is_empty())
    }
}

#[derive(Debug)]
pub struct ConfigError(pub Vec<String>);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "invalid configuration:")?;
        for problem in &self.0 {
            writeln!(f, "  - {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Reads settings by name, noting every bad one instead of stopping at the first.
pub(super) struct Reader<'a> {
    sources: &'a Sources,
    pub(super) problems: Vec<String>,
}

impl<'a> Reader<'a> {
    pub(super) fn new(sources: &'a Sources) -> Self {
        Self { sources, problems: Vec::new() }
    }

    pub(super) fn text(&self, name: &str) -> Option<String> {
        self.sources.get(name).map(str::to_owned)
    }

    pub(super) fn parse<T>(&mut self, name: &str, default: T, what: &str, parse: impl Fn(&str) -> Option<T>) -> T {
        match self.sources.get(name) {
            None => default,
            Some(raw) => parse(raw.trim()).unwrap_or_else(|| {
                self.problems.push(format!("{name}={raw}: {what}"));
                default
            }),
        }
    }

    pub(super) fn integer(&mut self, name: &str, default: i64, min: i64, max: i64) -> i64 {
        let what = format!("must be a whole number from {min} to {max}");
        self.parse(name, default, &what, |v| v.parse::<i64>().ok().filter(|n| (min..=max).contains(n)))
    }

    /// A count (`usize`) from `min` to `max`.
    pub(super) fn count(&mut self, name: &str, default: usize, min: i64, max: i64) -> usize {
        usize::try_from(self.integer(name, i64::try_from(default).unwrap_or(max), min, max)).unwrap_or(default)
    }

    /// A duration given in milliseconds (`…_MS`).
    pub(super) fn millis(&mut self, name: &str, default: i64, min: i64, max: i64) -> Duration {
        Duration::from_millis(self.integer(name, default, min, max).unsigned_abs())
    }

    /// A duration given in seconds (`…_SECS`).
    pub(super) fn seconds(&mut self, name: &str, default: i64, min: i64, max: i64) -> Duration {
        Duration::from_secs(self.integer(name, default, min, max).unsigned_abs())
    }
}
