//! CONFIG SET's rules: which keys may change while the server runs, and the new configuration
//! a set of changes gives. Values go through the same parsing and range checks as the config
//! file's, so a value CONFIG SET accepts is one the file would accept, and the reverse.
//! All changes of one call are checked before any takes effect (Redis 7's atomic CONFIG SET).

use serde::Deserialize;

use super::parameters::{self, Change};
use super::{Config, ConfigError, Settings};

/// Why a CONFIG SET was refused, in Redis 7's words.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChangeError {
    #[error("Unknown option or number of arguments for CONFIG SET - '{0}'")]
    Unknown(String),
    #[error("CONFIG SET failed (possibly related to argument '{0}') - can't set immutable config")]
    Immutable(String),
    #[error("CONFIG SET failed (possibly related to argument '{0}') - duplicate parameter")]
    Duplicate(String),
    #[error("CONFIG SET failed (possibly related to argument '{key}') - {reason}")]
    Invalid { key: String, reason: String },
}

impl Config {
    /// The configuration with `changes` (key, value) made, or why not; `self` is left as it is.
    /// Keys are case-insensitive, as in Redis.
    pub fn with_changes(&self, changes: &[(String, String)]) -> Result<Config, ChangeError> {
        let mut seen: Vec<String> = Vec::with_capacity(changes.len());
        let mut changed = Settings::default();
        for (key, value) in changes {
            let key = key.to_ascii_lowercase();
            match parameters::parameter(&key) {
                None => return Err(ChangeError::Unknown(key)),
                Some(k) if k.change == Change::Restart => return Err(ChangeError::Immutable(key)),
                Some(_) => {}
            }
            if seen.contains(&key) {
                return Err(ChangeError::Duplicate(key));
            }
            changed = changed.or(setting_from_text(&key, value)?);
            seen.push(key);
        }
        let mut next = changed
            .or(self.as_settings())
            .validate()
            .map_err(|e| match e {
                ConfigError::Invalid {
                    key,
                    value,
                    allowed,
                } => ChangeError::Invalid {
                    key: key.to_string(),
                    reason: format!("bad value '{value}' (allowed: {allowed})"),
                },
                other => ChangeError::Invalid {
                    key: seen.first().cloned().unwrap_or_default(),
                    reason: other.to_string(),
                },
            })?;
        // What cannot change is carried over as it is, not as its text (a path need not be
        // UTF-8).
        next.bind = self.bind;
        next.port = self.port;
        next.dir = self.dir.clone();
        next.appendfilename = self.appendfilename.clone();
        next.log_format = self.log_format;
        next.worker_threads = self.worker_threads;
        next.config_file = self.config_file.clone();
        next.metrics_port = self.metrics_port;
        next.metrics_bind = self.metrics_bind;
        next.hot_locks_capacity = self.hot_locks_capacity;
        next.tls_port = self.tls_port;
        next.tls_only = self.tls_only;
        next.aclfile = self.aclfile.clone();
        next.cluster = self.cluster.clone();
        Ok(next)
    }

    /// This configuration as file settings (every key given), the base CONFIG SET layers on.
    fn as_settings(&self) -> Settings {
        self.entries()
            .into_iter()
            .filter(|(key, _)| is_file_key(key))
            .filter_map(|(key, value)| setting_from_text(key, &value).ok())
            .fold(Settings::default(), Settings::or)
    }
}

/// Whether `key` is one the config file can hold (CONFIG GET also shows a few fixed Redis keys).
pub fn is_file_key(key: &str) -> bool {
    parameters::parameter(key).is_some_and(|k| k.in_file())
}

/// How a key's value is spelled in the config file: an integer or a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    Integer,
    String,
}

/// One key's textual value (as CONFIG SET and CONFIG GET spell it) as file settings, with the
/// type the file uses for it. The key's own field decides: an integer where the field is a
/// number, a string otherwise; a number where a string is wanted (`requirepass 1234`) stays text.
pub fn typed_setting(key: &str, value: &str) -> Result<(Settings, FileType), ChangeError> {
    let one = |v: toml::Value| {
        let mut table = toml::Table::new();
        table.insert(key.to_string(), v);
        Settings::deserialize(table)
    };
    let as_integer = value.trim().parse::<i64>().ok();
    if let Some(n) = as_integer
        && let Ok(settings) = one(toml::Value::Integer(n))
    {
        return Ok((settings, FileType::Integer));
    }
    match one(toml::Value::String(value.to_string())) {
        Ok(settings) => Ok((settings, FileType::String)),
        Err(_) => Err(ChangeError::Invalid {
            key: key.to_string(),
            reason: match as_integer {
                Some(_) => format!("bad value '{value}' (allowed: a non-negative integer)"),
                None => "argument couldn't be parsed into an integer".to_string(),
            },
        }),
    }
}

fn setting_from_text(key: &str, value: &str) -> Result<Settings, ChangeError> {
    typed_setting(key, value).map(|(settings, _)| settings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flockd_aof::FsyncPolicy;

    fn set(config: &Config, pairs: &[(&str, &str)]) -> Result<Config, ChangeError> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        config.with_changes(&pairs)
    }

    #[test]
    fn changes_take_the_file_values_rules() {
        let config = Config::default();
        let next = set(
            &config,
            &[
                ("MaxClients", "50"),
                ("appendfsync", "everysec"),
                ("requirepass", "1234"),
                ("slowlog-log-slower-than", "-1"),
                ("log-level", "flockd=debug"),
            ],
        )
        .unwrap();
        assert_eq!(next.maxclients, 50);
        assert_eq!(next.appendfsync, FsyncPolicy::EverySec);
        assert_eq!(next.requirepass.as_deref(), Some("1234"));
        assert_eq!(next.slowlog_log_slower_than, -1);
        assert_eq!(next.log_level, "flockd=debug");
        // Everything else is as it was.
        assert_eq!(
            Config {
                maxclients: config.maxclients,
                appendfsync: config.appendfsync,
                requirepass: None,
                slowlog_log_slower_than: config.slowlog_log_slower_than,
                log_level: config.log_level.clone(),
                ..next.clone()
            },
            config
        );
        // An empty password turns AUTH off again, as in the file.
        assert_eq!(
            set(&next, &[("requirepass", "")]).unwrap().requirepass,
            None
        );
    }

    #[test]
    fn refusals_name_the_argument_and_change_nothing() {
        let config = Config::default();
        let invalid = |pairs: &[(&str, &str)]| match set(&config, pairs) {
            Err(ChangeError::Invalid { key, reason }) => (key, reason),
            other => panic!("{pairs:?}: {other:?}"),
        };
        assert_eq!(
            set(&config, &[("nosuch", "1")]),
            Err(ChangeError::Unknown("nosuch".into()))
        );
        assert_eq!(
            set(&config, &[("maxclients", "5"), ("PORT", "1")]),
            Err(ChangeError::Immutable("port".into()))
        );
        assert_eq!(
            set(&config, &[("maxclients", "5"), ("maxclients", "6")]),
            Err(ChangeError::Duplicate("maxclients".into()))
        );
        assert_eq!(
            invalid(&[("maxclients", "abc")]),
            (
                "maxclients".into(),
                "argument couldn't be parsed into an integer".into()
            )
        );
        assert_eq!(
            invalid(&[("maxclients", "0")]).1,
            "bad value '0' (allowed: 1..=1000000)"
        );
        assert_eq!(invalid(&[("max-lease-ms", "-5")]).0, "max-lease-ms");
        assert_eq!(invalid(&[("appendfsync", "sometimes")]).0, "appendfsync");
        assert_eq!(
            invalid(&[("maxclients", "7"), ("slowlog-log-slower-than", "-2")]).0,
            "slowlog-log-slower-than"
        );
    }

    #[test]
    fn immutable_keys_survive_a_change_untouched() {
        let config = Config {
            dir: std::path::PathBuf::from("/some/dir"),
            port: 0,
            config_file: Some("/etc/flockd.toml".into()),
            ..Config::default()
        };
        let next = set(&config, &[("max-wait-ms", "5")]).unwrap();
        assert_eq!(next.max_wait_ms, 5);
        assert_eq!(
            Config {
                max_wait_ms: config.max_wait_ms,
                ..next
            },
            config
        );
    }

    #[test]
    fn every_key_is_either_settable_or_immutable() {
        // A key added to CONFIG GET must also be one the file (and so CONFIG SET) can read; SET
        // refuses exactly the keys the table declares immutable, in Redis's words.
        let config = Config::default();
        for (key, value) in config.entries() {
            let declared =
                parameters::parameter(key).unwrap_or_else(|| panic!("{key} is not in the table"));
            let result = set(&config, &[(key, &value)]);
            match declared.change {
                Change::Restart => {
                    let refused = result.expect_err(key);
                    assert_eq!(refused, ChangeError::Immutable(key.to_string()));
                    assert_eq!(
                        refused.to_string(),
                        format!(
                            "CONFIG SET failed (possibly related to argument '{key}') - can't \
                             set immutable config"
                        )
                    );
                }
                Change::Runtime => {
                    let next = result.unwrap_or_else(|e| panic!("{key} = {value:?}: {e}"));
                    assert_eq!(next, config, "{key}");
                }
            }
        }
    }
}
