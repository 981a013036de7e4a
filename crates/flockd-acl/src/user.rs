//! One user and Redis's ACL rules that shape it: `on`/`off`, passwords (`>p`, `<p`, `#hash`,
//! `!hash`, `nopass`, `resetpass`), key patterns (`~p`, `allkeys`, `resetkeys`),
//! channel patterns (`&p`, `allchannels`, `resetchannels`), commands (`+cmd`, `-cmd`,
//! `+cmd|sub`, `+@cat`, `-@cat`, `allcommands`, `nocommands`) and `reset`. Command rules are
//! kept in order and the last one that matches a command decides, which is what Redis's
//! bitmap of applied rules amounts to.

use sha2::{Digest, Sha256};

use crate::glob::glob_match;

/// What a command is, for the rules: its name (`flock.acquire`, or `client|kill` for a
/// subcommand) and its categories (without `@`).
#[derive(Clone, Copy, Debug)]
pub struct CommandInfo<'a> {
    pub name: &'a str,
    pub categories: &'a [&'static str],
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    All,
    Category(String),
    /// A command, or `command|subcommand`.
    Command(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct CommandRule {
    allow: bool,
    target: Target,
}

/// A SHA-256 digest of a password.
pub type PasswordHash = [u8; 32];

pub fn hash_password(password: &[u8]) -> PasswordHash {
    Sha256::digest(password).into()
}

fn hex(hash: &PasswordHash) -> String {
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex(text: &str) -> Option<PasswordHash> {
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub enabled: bool,
    pub nopass: bool,
    passwords: Vec<PasswordHash>,
    commands: Vec<CommandRule>,
    keys: Vec<String>,
    channels: Vec<String>,
}

/// Why a rule was refused; the text follows Redis's `ACL SETUSER` errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("Syntax error")]
    Syntax,
    #[error("Unknown command or category name in ACL")]
    UnknownCommand,
    #[error(
        "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters"
    )]
    BadHash,
    #[error(
        "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns"
    )]
    KeyAfterAll,
    #[error(
        "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels"
    )]
    ChannelAfterAll,
}

impl User {
    /// A new user as `ACL SETUSER name` makes it: off, no passwords, no commands, no keys, no
    /// channels.
    pub fn new(name: &str) -> User {
        User {
            name: name.to_string(),
            enabled: false,
            nopass: false,
            passwords: Vec::new(),
            commands: Vec::new(),
            keys: Vec::new(),
            channels: Vec::new(),
        }
    }

    /// Redis's `default` user: on, every command, key and channel, with `requirepass` as its
    /// password or `nopass` without one.
    pub fn default_user(requirepass: Option<&str>) -> User {
        let mut user = User::new("default");
        user.enabled = true;
        user.commands.push(CommandRule {
            allow: true,
            target: Target::All,
        });
        user.keys.push("*".into());
        user.channels.push("*".into());
        user.set_only_password(requirepass);
        user
    }

    /// Makes `password` the one password (requirepass), or `nopass` without one.
    pub fn set_only_password(&mut self, password: Option<&str>) {
        self.passwords.clear();
        match password {
            Some(p) => {
                self.nopass = false;
                self.passwords.push(hash_password(p.as_bytes()));
            }
            None => self.nopass = true,
        }
    }

    /// Applies one rule; `known` says whether a command (or `command|sub`) or category exists.
    pub fn apply(&mut self, rule: &str, known: &dyn Fn(&str) -> bool) -> Result<(), RuleError> {
        let lower = rule.to_ascii_lowercase();
        match lower.as_str() {
            "on" => self.enabled = true,
            "off" => self.enabled = false,
            "nopass" => {
                self.nopass = true;
                self.passwords.clear();
            }
            "resetpass" => {
                self.nopass = false;
                self.passwords.clear();
            }
            "allkeys" => self.keys = vec!["*".into()],
            "resetkeys" => self.keys.clear(),
            "allchannels" => self.channels = vec!["*".into()],
            "resetchannels" => self.channels.clear(),
            "allcommands" => self.command_rule(true, Target::All),
            "nocommands" => self.command_rule(false, Target::All),
            "reset" => {
                *self = User::new(&self.name);
            }
            _ => return self.apply_prefixed(rule, known),
        }
        Ok(())
    }

    fn apply_prefixed(
        &mut self,
        rule: &str,
        known: &dyn Fn(&str) -> bool,
    ) -> Result<(), RuleError> {
        let (prefix, rest) = rule.split_at(rule.chars().next().map_or(0, char::len_utf8));
        match prefix {
            ">" => {
                let hash = hash_password(rest.as_bytes());
                if !self.passwords.contains(&hash) {
                    self.passwords.push(hash);
                }
                self.nopass = false;
            }
            "<" => {
                let hash = hash_password(rest.as_bytes());
                self.passwords.retain(|h| *h != hash);
            }
            "#" => {
                let hash = parse_hex(rest)
                    .filter(|_| rest == rest.to_ascii_lowercase())
                    .ok_or(RuleError::BadHash)?;
                if !self.passwords.contains(&hash) {
                    self.passwords.push(hash);
                }
                self.nopass = false;
            }
            "!" => {
                let hash = parse_hex(rest).ok_or(RuleError::BadHash)?;
                self.passwords.retain(|h| *h != hash);
            }
            "~" => {
                if self.keys.iter().any(|k| k == "*") && rest != "*" {
                    return Err(RuleError::KeyAfterAll);
                }
                if rest == "*" {
                    self.keys = vec!["*".into()];
                } else if !self.keys.iter().any(|k| k == rest) {
                    self.keys.push(rest.to_string());
                }
            }
            "&" => {
                if self.channels.iter().any(|k| k == "*") && rest != "*" {
                    return Err(RuleError::ChannelAfterAll);
                }
                if rest == "*" {
                    self.channels = vec!["*".into()];
                } else if !self.channels.iter().any(|k| k == rest) {
                    self.channels.push(rest.to_string());
                }
            }
            "+" | "-" => {
                let allow = prefix == "+";
                let name = rest.to_ascii_lowercase();
                let target = match name.strip_prefix('@') {
                    Some("all") => Target::All,
                    Some(category) if known(&format!("@{category}")) => {
                        Target::Category(category.to_string())
                    }
                    Some(_) => return Err(RuleError::UnknownCommand),
                    None if known(&name) => Target::Command(name),
                    None => return Err(RuleError::UnknownCommand),
                };
                self.command_rule(allow, target);
            }
            _ => return Err(RuleError::Syntax),
        }
        Ok(())
    }

    fn command_rule(&mut self, allow: bool, target: Target) {
        if target == Target::All {
            // +@all / -@all decide everything: what came before no longer matters.
            self.commands.clear();
        } else {
            self.commands.retain(|r| r.target != target);
        }
        self.commands.push(CommandRule { allow, target });
    }

    pub fn check_password(&self, password: &[u8]) -> bool {
        if self.nopass {
            return true;
        }
        let hash = hash_password(password);
        // Compare every stored digest in full, so the time says nothing about which matched.
        self.passwords
            .iter()
            .fold(false, |found, h| found | constant_time_eq(h, &hash))
    }

    /// Whether this user may run every command on every key: its last command rule allows all
    /// commands (no later rule can take one back) and a `*` key pattern matches every key. The
    /// admission step then skips the per-command checks (the `default` user, as shipped).
    pub fn may_run_everything(&self) -> bool {
        self.commands
            .last()
            .is_some_and(|rule| rule.allow && matches!(rule.target, Target::All))
            && self.keys.iter().any(|p| p == "*")
    }

    pub fn can_run(&self, command: CommandInfo<'_>) -> bool {
        let container = command.name.split('|').next().unwrap_or(command.name);
        let mut allowed = false;
        for rule in &self.commands {
            let matches = match &rule.target {
                Target::All => true,
                Target::Category(c) => command.categories.contains(&c.as_str()),
                Target::Command(n) => n == command.name || n == container,
            };
            if matches {
                allowed = rule.allow;
            }
        }
        allowed
    }

    pub fn can_access_key(&self, key: &[u8]) -> bool {
        self.keys.iter().any(|p| glob_match(p.as_bytes(), key))
    }

    pub fn can_access_channel(&self, channel: &[u8]) -> bool {
        self.channels
            .iter()
            .any(|p| glob_match(p.as_bytes(), channel))
    }

    /// Whether PSUBSCRIBE may take `pattern`: as in Redis, only a pattern the user's channel
    /// patterns name literally (or any, with `allchannels`), since a pattern cannot be checked
    /// against every channel it might match.
    pub fn can_subscribe_pattern(&self, pattern: &[u8]) -> bool {
        self.channels
            .iter()
            .any(|p| p == "*" || p.as_bytes() == pattern)
    }

    /// The flags of ACL GETUSER.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut flags = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            flags.push("nopass");
        }
        flags
    }

    pub fn password_hashes(&self) -> Vec<String> {
        self.passwords.iter().map(hex).collect()
    }

    /// The command rules as ACL GETUSER and ACL LIST show them (`-@all` when there are none).
    pub fn command_rules(&self) -> String {
        if self.commands.is_empty() {
            return "-@all".into();
        }
        let mut out: Vec<String> = Vec::new();
        if self
            .commands
            .first()
            .is_none_or(|r| r.target != Target::All)
        {
            out.push("-@all".into());
        }
        for rule in &self.commands {
            let sign = if rule.allow { '+' } else { '-' };
            out.push(match &rule.target {
                Target::All => format!("{sign}@all"),
                Target::Category(c) => format!("{sign}@{c}"),
                Target::Command(n) => format!("{sign}{n}"),
            });
        }
        out.join(" ")
    }

    pub fn key_rules(&self) -> String {
        self.keys
            .iter()
            .map(|k| format!("~{k}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    pub fn channel_rules(&self) -> String {
        self.channels
            .iter()
            .map(|c| format!("&{c}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The user as one ACL LIST / aclfile line: `user NAME on #hash ~keys &channels +@cmds`.
    /// Passwords appear only as digests.
    pub fn describe(&self) -> String {
        let mut words = vec!["user".to_string(), self.name.clone()];
        words.extend(self.flags().into_iter().map(String::from));
        words.extend(self.passwords.iter().map(|h| format!("#{}", hex(h))));
        words.extend(self.keys.iter().map(|k| format!("~{k}")));
        words.extend(self.channels.iter().map(|c| format!("&{c}")));
        if self.channels.is_empty() {
            words.push("resetchannels".into());
        }
        words.push(self.command_rules());
        words.join(" ")
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
