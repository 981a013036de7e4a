//! CONFIG REWRITE: writes the running configuration back to the `--config` file, as Redis does
//! with redis.conf. The file's comments, order and layout stay; a key already in the file gets
//! its running value; a key that is not there is appended only when it differs from its default.
//! Values set by flags or FLOCKD_* variables are running values too, so they are written (Redis
//! writes its command-line options the same way). The new file replaces the old one atomically:
//! written beside it, synced, renamed over it, and the directory synced.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item, value};

use super::Config;
use super::change::{FileType, is_file_key, typed_setting};

/// Why CONFIG REWRITE failed. An I/O error is kept as its text: the reply shows it, and command
/// errors compare equal by content.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RewriteError {
    #[error("The server is running without a config file")]
    NoConfigFile,
    #[error("Rewriting config file: {path}: {reason}")]
    Io { path: PathBuf, reason: String },
    #[error("Rewriting config file: {path} is not valid TOML: {message}")]
    Parse { path: PathBuf, message: String },
}

/// Rewrites `config.config_file` with the running values of `config`.
pub fn rewrite(config: &Config) -> Result<(), RewriteError> {
    let path = config
        .config_file
        .as_deref()
        .ok_or(RewriteError::NoConfigFile)?;
    let io_error = |e: io::Error| RewriteError::Io {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    // A file deleted since the start is written afresh, as Redis does.
    let old = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(io_error(e)),
    };
    let text = rewritten(&old, config).map_err(|message| RewriteError::Parse {
        path: path.to_owned(),
        message,
    })?;
    replace_file(path, text.as_bytes()).map_err(io_error)
}

/// The file `old` with the running values of `config` written into it.
pub fn rewritten(old: &str, config: &Config) -> Result<String, String> {
    let mut doc: DocumentMut = old
        .parse()
        .map_err(|e: toml_edit::TomlError| e.to_string())?;
    let defaults: Vec<(&'static str, String)> = Config::default().entries();
    for (key, running) in config.entries() {
        if !is_file_key(key) {
            continue;
        }
        let is_default = defaults
            .iter()
            .any(|(k, default)| *k == key && *default == running);
        let in_file = doc.get(key).and_then(Item::as_value).map(|v| match v {
            toml_edit::Value::Integer(n) => n.value().to_string(),
            toml_edit::Value::String(s) => s.value().clone(),
            other => other.to_string(),
        });
        match in_file {
            // Unchanged lines are left exactly as they were written.
            Some(text) if text == running => continue,
            None if is_default => continue,
            _ => {}
        }
        // The typing CONFIG SET uses: the key's own field says integer or string.
        let item = match typed_setting(key, &running) {
            Ok((_, FileType::Integer)) => match running.parse::<i64>() {
                Ok(n) => value(n),
                Err(_) => value(running),
            },
            _ => value(running),
        };
        match doc.get_mut(key) {
            // Replacing the value keeps the line's comment and spacing around it.
            Some(Item::Value(old_value)) => {
                let decor = old_value.decor().clone();
                if let Item::Value(mut new_value) = item {
                    *new_value.decor_mut() = decor;
                    *old_value = new_value;
                }
            }
            _ => {
                doc.insert(key, item);
            }
        }
    }
    Ok(doc.to_string())
}

/// Replaces `path` atomically: written beside it, synced, renamed over it, the directory synced.
pub fn replace_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.rewrite-{}", std::process::id()));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        // The file may hold requirepass: keep the old file's permissions, not the umask's.
        if let Ok(meta) = fs::metadata(path) {
            file.set_permissions(meta.permissions())?;
        }
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(&dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_replaced_in_place_and_new_ones_appended() {
        let old = "# the port\nport = 7000 # inline\n\n# clients\nmaxclients = 100\nlog-level = \"info\"\n";
        let config = Config {
            port: 7000,
            maxclients: 50,
            max_wait_ms: 1234,
            requirepass: Some("007".into()),
            ..Config::default()
        };
        let text = rewritten(old, &config).unwrap();
        assert_eq!(
            text,
            "# the port\nport = 7000 # inline\n\n# clients\nmaxclients = 50\nlog-level = \"info\"\n\
             requirepass = \"007\"\nmax-wait-ms = 1234\n"
        );
        // What was rewritten reads back as the running configuration.
        let settings: super::super::Settings = toml::from_str(&text).unwrap();
        let back = settings.validate().unwrap();
        assert_eq!((back.maxclients, back.max_wait_ms), (50, 1234));
        assert_eq!(back.requirepass.as_deref(), Some("007"));
    }

    #[test]
    fn the_shipped_file_keeps_its_comments() {
        let shipped = include_str!("../../config/flockd.toml");
        let config = Config {
            maxclients: 77,
            ..Config::default()
        };
        let text = rewritten(shipped, &config).unwrap();
        let changed: Vec<_> = shipped
            .lines()
            .zip(text.lines())
            .filter(|(a, b)| a != b)
            .collect();
        assert_eq!(changed, vec![("maxclients = 10000", "maxclients = 77")]);
        assert_eq!(shipped.lines().count(), text.lines().count());
    }

    #[test]
    fn every_file_key_is_rewritten_as_the_file_types_it() {
        // A file holding every key at its running value is left as it is, and reads back as the
        // same configuration: REWRITE knows each key and writes it with the file's type.
        let config = Config {
            requirepass: Some("007".into()),
            metrics_port: Some(9390),
            ..Config::default()
        };
        let mut full = String::new();
        for (key, running) in config.entries() {
            // An unset key (no metrics port, no cluster) has no line to write.
            if !is_file_key(key) || running.is_empty() {
                continue;
            }
            let item = match typed_setting(key, &running) {
                Ok((_, FileType::Integer)) => running.clone(),
                Ok((_, FileType::String)) => format!("{running:?}"),
                Err(e) => panic!("{key} = {running:?}: {e}"),
            };
            full.push_str(&format!("{key} = {item}\n"));
        }
        assert_eq!(rewritten(&full, &config).unwrap(), full);
        let settings: super::super::Settings = toml::from_str(&full).unwrap();
        assert_eq!(settings.validate().unwrap(), config);
        // And from an empty file, only what differs from the defaults is written.
        assert_eq!(
            rewritten("", &config).unwrap(),
            "requirepass = \"007\"\nmetrics-port = 9390\n"
        );
    }

    #[test]
    fn no_file_no_rewrite() {
        assert!(matches!(
            rewrite(&Config::default()),
            Err(RewriteError::NoConfigFile)
        ));
    }
}
