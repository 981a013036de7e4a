//! Users and permissions, as Redis 7's ACL has them (a subset: no selectors, no read/write key
//! permissions), over flockd's keys: lock names and fence keys for `~patterns`, pub/sub
//! channels for `&patterns`. Pure data: the daemon asks [`Acl`] whether a user may run a
//! command on some keys, and keeps the log of refusals ([`AclLog`]) with the time it passes in.

mod glob;
mod log;
mod user;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

pub use glob::glob_match;
pub use log::{AclLog, Denial, LogEntry};
pub use user::{CommandInfo, PasswordHash, RuleError, User, hash_password};

/// The users. `default` always exists.
#[derive(Clone, Debug)]
pub struct Acl {
    users: BTreeMap<String, Arc<User>>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    #[error("Error in ACL SETUSER modifier '{rule}': {reason}")]
    Rule { rule: String, reason: RuleError },
    #[error("The 'default' user cannot be removed")]
    DeleteDefault,
    #[error("Usernames can't contain spaces or null characters")]
    BadName,
    /// A line of an aclfile that cannot be applied. (ACL LOAD adds Redis's warning that the
    /// rules in force stay; at the start there are none to keep.)
    #[error("{path}:{line}: {reason}")]
    File {
        path: String,
        line: usize,
        reason: String,
    },
    #[error("cannot read aclfile {path}: {reason}")]
    Read { path: String, reason: String },
}

impl Acl {
    pub fn new(requirepass: Option<&str>) -> Acl {
        let mut users = BTreeMap::new();
        users.insert(
            "default".to_string(),
            Arc::new(User::default_user(requirepass)),
        );
        Acl { users }
    }

    pub fn user(&self, name: &str) -> Option<Arc<User>> {
        self.users.get(name).cloned()
    }

    pub fn names(&self) -> Vec<String> {
        self.users.keys().cloned().collect()
    }

    pub fn users(&self) -> impl Iterator<Item = &Arc<User>> {
        self.users.values()
    }

    /// ACL SETUSER: every rule applied to a copy, which replaces the user only if all apply.
    pub fn set_user(
        &mut self,
        name: &str,
        rules: &[String],
        known: &dyn Fn(&str) -> bool,
    ) -> Result<(), AclError> {
        if name.is_empty() || name.contains([' ', '\0']) {
            return Err(AclError::BadName);
        }
        let mut user = match self.users.get(name) {
            Some(u) => (**u).clone(),
            None => User::new(name),
        };
        for rule in rules {
            user.apply(rule, known).map_err(|reason| AclError::Rule {
                rule: rule.clone(),
                reason,
            })?;
        }
        self.users.insert(name.to_string(), Arc::new(user));
        Ok(())
    }

    /// ACL DELUSER: how many of `names` existed and are gone.
    pub fn delete(&mut self, names: &[String]) -> Result<usize, AclError> {
        if names.iter().any(|n| n == "default") {
            return Err(AclError::DeleteDefault);
        }
        Ok(names
            .iter()
            .filter(|n| self.users.remove(*n).is_some())
            .count())
    }

    /// The user `name` if it is on and `password` is one of its passwords.
    pub fn authenticate(&self, name: &str, password: &[u8]) -> Option<Arc<User>> {
        self.users
            .get(name)
            .filter(|u| u.enabled && u.check_password(password))
            .cloned()
    }

    /// `requirepass` is the default user's password, as in Redis.
    pub fn set_default_password(&mut self, requirepass: Option<&str>) {
        if let Some(user) = self.users.get_mut("default") {
            Arc::make_mut(user).set_only_password(requirepass);
        }
    }

    /// ACL LIST and ACL SAVE's lines.
    pub fn describe(&self) -> Vec<String> {
        self.users.values().map(|u| u.describe()).collect()
    }

    /// The users an aclfile holds (`user NAME rules...` lines; `#` comments and blank lines
    /// allowed). All or nothing: the first bad line is the error. A file without `default`
    /// keeps the default user as `requirepass` makes it.
    pub fn parse_file(
        text: &str,
        path: &Path,
        requirepass: Option<&str>,
        known: &dyn Fn(&str) -> bool,
    ) -> Result<Acl, AclError> {
        let mut acl = Acl::new(requirepass);
        let mut seen = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let error = |reason: String| AclError::File {
                path: path.display().to_string(),
                line: i + 1,
                reason,
            };
            let mut words = line.split_whitespace();
            if words.next() != Some("user") {
                return Err(error("line should start with user keyword".into()));
            }
            let Some(name) = words.next() else {
                return Err(error("user name missing".into()));
            };
            if seen.iter().any(|n| n == name) {
                return Err(error(format!("Duplicate user '{name}' found")));
            }
            seen.push(name.to_string());
            // A user in the file starts from nothing, even `default`.
            acl.users
                .insert(name.to_string(), Arc::new(User::new(name)));
            let rules: Vec<String> = words.map(String::from).collect();
            acl.set_user(name, &rules, known).map_err(|e| match e {
                AclError::Rule { rule, reason } => {
                    error(format!("Error in applying operation '{rule}': {reason}"))
                }
                other => error(other.to_string()),
            })?;
        }
        Ok(acl)
    }
}

#[cfg(test)]
mod tests;
