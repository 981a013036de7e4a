//! Command metadata: what `COMMAND`, arity checks and authentication gating read.

/// Behaviour flags the server acts on (the `COMMAND` output lists them Redis-style).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandFlags {
    /// Changes state: refused with -MISCONF while the AOF cannot be written.
    pub write: bool,
    /// Allowed before AUTH.
    pub no_auth: bool,
    /// May block the connection (WAIT).
    pub blocking: bool,
    pub admin: bool,
    pub fast: bool,
}

impl CommandFlags {
    pub const READ: CommandFlags = CommandFlags {
        write: false,
        no_auth: false,
        blocking: false,
        admin: false,
        fast: true,
    };
    pub const WRITE: CommandFlags = CommandFlags {
        write: true,
        ..CommandFlags::READ
    };

    pub fn names(&self) -> Vec<&'static str> {
        let mut names = vec![];
        if self.write {
            names.push("write");
        } else {
            names.push("readonly");
        }
        if self.admin {
            names.push("admin");
        }
        if self.no_auth {
            names.push("no_auth");
        }
        if self.blocking {
            names.push("blocking");
        }
        if self.fast {
            names.push("fast");
        }
        names
    }
}

#[derive(Debug)]
pub struct SubMeta {
    pub name: &'static str,
    pub arity: i32,
    pub summary: &'static str,
}

/// Finds key positions in a command's arguments (the name is argument 0).
pub type KeyFinder = fn(&[bytes::Bytes]) -> Vec<usize>;

#[derive(Debug)]
pub struct Meta {
    /// Lower-case name, as Redis lists it.
    pub name: &'static str,
    /// Redis convention: N means exactly N arguments including the name, -N at least N.
    pub arity: i32,
    pub flags: CommandFlags,
    /// Position of the first key (lock name / fence key), 0 if none; last key; step.
    pub keys: (i32, i32, i32),
    /// Positions of keys that `keys` cannot describe, found in the arguments (the lock of
    /// `FENCE.SET ... LOCK name`, the names of `FLOCK.ACQUIREALL`): ACL checks them too.
    pub more_keys: Option<KeyFinder>,
    /// Its arguments are shard channels (SSUBSCRIBE, SUNSUBSCRIBE): routed by their slot as keys
    /// are, but checked by ACL as channels, not keys.
    pub shard_channels: bool,
    pub group: &'static str,
    pub since: &'static str,
    pub summary: &'static str,
    pub complexity: &'static str,
    /// `NAME arg [OPTION value] [A | B] [x ...]` as shown in docs, in Redis's notation. It is the
    /// one source of `COMMAND DOCS` `arguments` (redis-cli's hints): see `docs.rs` for the
    /// notation. A container command lists each subcommand that takes arguments as an
    /// alternative, `CONFIG GET parameter [parameter ...] | SET parameter value | HELP`.
    pub syntax: &'static str,
    pub subcommands: &'static [SubMeta],
}

impl Meta {
    pub const fn new(
        name: &'static str,
        arity: i32,
        flags: CommandFlags,
        summary: &'static str,
    ) -> Meta {
        Meta {
            name,
            arity,
            flags,
            keys: (0, 0, 0),
            more_keys: None,
            shard_channels: false,
            group: "connection",
            since: "0.1.0",
            summary,
            complexity: "O(1)",
            syntax: "",
            subcommands: &[],
        }
    }

    pub fn arity_ok(&self, argc: usize) -> bool {
        arity_ok(self.arity, argc)
    }

    /// Where the keys are in `args` (the command's name is argument 0): those `keys` describes,
    /// then those `more_keys` finds. ACL key checks, COMMAND GETKEYS and slot routing all read
    /// keys through it.
    pub fn key_positions<'a>(
        &self,
        args: &'a [bytes::Bytes],
    ) -> impl Iterator<Item = usize> + use<'a> {
        let argc = args.len() as i64;
        let (first, last, step) = self.keys;
        let (first, step) = (i64::from(first), i64::from(step.max(1)));
        let last = if last < 0 {
            argc + i64::from(last)
        } else {
            i64::from(last)
        };
        let fixed = (first.max(1)..=last.min(argc - 1))
            .step_by(step as usize)
            .filter(move |_| first > 0)
            .map(|i| i as usize);
        let found = self.more_keys.map_or_else(Vec::new, |find| find(args));
        fixed.chain(found).filter(move |&i| i < args.len())
    }

    /// The subcommand `argv[1]` names, if this command has subcommands and it is one of them.
    pub fn subcommand(&self, argv: &[bytes::Bytes]) -> Option<&'static SubMeta> {
        let sub = argv.get(1)?;
        self.subcommands.iter().find(|s| {
            s.name
                .split_once('|')
                .is_some_and(|(_, name)| name.as_bytes().eq_ignore_ascii_case(sub))
        })
    }
}

/// Redis's convention: N means exactly N arguments including the name, -N at least N.
/// The index in `table` of the command named `name`, case-insensitively (a scan: for COMMAND
/// and LATENCY, not the request path, which has `commands::lookup`).
pub fn find(table: &[Meta], name: &[u8]) -> Option<usize> {
    table
        .iter()
        .position(|m| m.name.as_bytes().eq_ignore_ascii_case(name))
}

pub fn arity_ok(arity: i32, argc: usize) -> bool {
    let argc = argc as i64;
    let arity = arity as i64;
    if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
    }
}
