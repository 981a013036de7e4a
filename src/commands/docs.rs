//! Redis 7 `COMMAND DOCS` argument lists, derived from each command's one `Meta.syntax` string,
//! so every command (and every command added later) gets redis-cli hints with no second source.
//!
//! The syntax language is the one of Redis's docs:
//! - the first word is the command name; the rest are its arguments;
//! - a word without lower-case letters (`WAIT`, `NOSAVE`, `LIB-NAME`) is a keyword (a token), any
//!   other word an argument named by it (`<name>` is the same as `name`);
//! - `[ ... ]` is optional, `< ... >`, `{ ... }` and `( ... )` group, `a | b` is a choice (it
//!   binds loosest: `[NOSAVE | SAVE]`, `<LIB-NAME libname | LIB-VER libver>`);
//! - `x ...`, `x [x ...]` and `a b [a b ...]` repeat.
//!
//! Arguments get Redis's types: `pure-token` for a lone keyword, `oneof` for a choice, `block` for
//! a group of several, `key` for the argument at `Meta.keys`' first key position, `integer` for
//! the names in [`INTEGER_NAMES`] (or ending in `-ms`), `string` otherwise. A keyword followed by
//! one argument is that argument with a `token` (`[WAIT ms]`: `ms`, token `WAIT`, optional).
//!
//! A container command (one with `Meta.subcommands`) lists its subcommands as a choice whose
//! alternatives start with the subcommand's keyword (`CONFIG GET parameter [parameter ...] |
//! HELP`); each subcommand's arguments are the rest of its alternative.

use flockd_proto::Reply;

use super::meta::Meta;

/// Argument names documented as integers.
pub const INTEGER_NAMES: &[&str] = &[
    "ms",
    "token",
    "protover",
    "index",
    "count",
    "client-id",
    "timeout",
    "cursor",
    "numkeys",
    "numnames",
    "n",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgType {
    Key,
    String,
    Integer,
    PureToken,
    Oneof,
    Block,
}

impl ArgType {
    pub fn as_str(self) -> &'static str {
        match self {
            ArgType::Key => "key",
            ArgType::String => "string",
            ArgType::Integer => "integer",
            ArgType::PureToken => "pure-token",
            ArgType::Oneof => "oneof",
            ArgType::Block => "block",
        }
    }
}

/// One entry of a Redis 7 `arguments` list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arg {
    pub name: String,
    pub kind: ArgType,
    pub key_spec_index: Option<i64>,
    pub token: Option<String>,
    pub optional: bool,
    pub multiple: bool,
    /// The members of a `oneof` or `block`.
    pub arguments: Vec<Arg>,
}

impl Arg {
    fn new(name: impl Into<String>, kind: ArgType) -> Arg {
        Arg {
            name: name.into(),
            kind,
            key_spec_index: None,
            token: None,
            optional: false,
            multiple: false,
            arguments: vec![],
        }
    }

    fn named(word: &str) -> Arg {
        let integer = INTEGER_NAMES.contains(&word) || word.ends_with("-ms");
        Arg::new(
            word,
            if integer {
                ArgType::Integer
            } else {
                ArgType::String
            },
        )
    }

    fn pure_token(keyword: &str) -> Arg {
        Arg {
            token: Some(keyword.into()),
            ..Arg::new(keyword.to_ascii_lowercase(), ArgType::PureToken)
        }
    }

    /// A `oneof` or `block` of `members`, named after them as Redis names such groups
    /// (`nosave_save`, `username_password`).
    fn group(kind: ArgType, members: Vec<Arg>) -> Arg {
        let name = members
            .iter()
            .map(|a| a.name.as_str())
            .collect::<Vec<_>>()
            .join("_");
        Arg {
            arguments: members,
            ..Arg::new(name, kind)
        }
    }

    /// The reply Redis 7 gives for this argument (field order as Redis: name, type,
    /// key_spec_index, token, flags, arguments).
    pub fn reply(&self) -> Reply {
        let mut fields = vec![
            (Reply::bulk("name"), Reply::bulk(self.name.clone())),
            (Reply::bulk("type"), Reply::bulk(self.kind.as_str())),
        ];
        if let Some(index) = self.key_spec_index {
            fields.push((Reply::bulk("key_spec_index"), Reply::Integer(index)));
        }
        if let Some(token) = &self.token {
            fields.push((Reply::bulk("token"), Reply::bulk(token.clone())));
        }
        let flags: Vec<Reply> = [("optional", self.optional), ("multiple", self.multiple)]
            .into_iter()
            .filter(|(_, on)| *on)
            .map(|(flag, _)| Reply::Simple(flag.into()))
            .collect();
        if !flags.is_empty() {
            fields.push((Reply::bulk("flags"), Reply::Set(flags)));
        }
        if !self.arguments.is_empty() {
            fields.push((Reply::bulk("arguments"), args_reply(&self.arguments)));
        }
        Reply::Map(fields)
    }
}

/// The `arguments` array of a command or subcommand.
pub fn args_reply(args: &[Arg]) -> Reply {
    Reply::Array(args.iter().map(Arg::reply).collect())
}

/// The arguments of a command that has no subcommands. A syntax string that does not parse
/// gives none (a unit test keeps every table entry parsing).
pub fn command_args(meta: &Meta) -> Vec<Arg> {
    let Ok(syntax) = Syntax::parse(meta.syntax) else {
        return vec![];
    };
    let mut args = if syntax.alts.len() == 1 {
        seq_args(&syntax.alts[0])
    } else {
        vec![group_arg(false, &syntax.alts)]
    };
    let first_key = meta.keys.0;
    if first_key > 0
        && let Some(arg) = args.get_mut(first_key as usize - 1)
        && arg.token.is_none()
        && matches!(arg.kind, ArgType::String | ArgType::Integer)
    {
        arg.kind = ArgType::Key;
        arg.key_spec_index = Some(0);
    }
    args
}

/// The arguments of subcommand `sub` (`config|get` or `get`) of a container command: the rest
/// of the syntax's alternative that starts with its keyword, none if there is no such one.
pub fn subcommand_args(meta: &Meta, sub: &str) -> Vec<Arg> {
    subcommand_alternative(meta, sub).unwrap_or_default()
}

/// The arguments of subcommand `sub`, or None if the syntax has no alternative for it.
fn subcommand_alternative(meta: &Meta, sub: &str) -> Option<Vec<Arg>> {
    let syntax = Syntax::parse(meta.syntax).ok()?;
    let sub = sub.rsplit('|').next().unwrap_or(sub);
    // `COMMAND [COUNT | INFO ...]`: the choice is the one group of the syntax.
    let alts = match syntax.alts.as_slice() {
        [only] => match only.as_slice() {
            [Node::Group { alts, .. }] => alts,
            _ => &syntax.alts,
        },
        _ => &syntax.alts,
    };
    alts.iter()
        .find(|alt| {
            matches!(alt.first(), Some(Node::Word(w)) if is_keyword(w) && w.eq_ignore_ascii_case(sub))
        })
        .map(|alt| seq_args(&alt[1..]))
}

/// A parsed syntax string: the command's name and its arguments, one sequence per top-level
/// alternative.
#[derive(Debug, PartialEq)]
pub struct Syntax {
    pub command: String,
    alts: Vec<Vec<Node>>,
}

#[derive(Clone, Debug, PartialEq)]
enum Node {
    Word(String),
    Group {
        optional: bool,
        alts: Vec<Vec<Node>>,
    },
    Repeat(Vec<Node>),
    /// Only while parsing: folded into `Repeat` by [`normalize`].
    Ellipsis,
}

#[derive(Debug, PartialEq)]
enum Tok<'a> {
    Open(char),
    Close(char),
    Pipe,
    Ellipsis,
    Word(&'a str),
}

/// A word, and `...` glued to its end (`arg...`) as its own token.
fn push_word<'a>(toks: &mut Vec<Tok<'a>>, word: &'a str) {
    let stem = word.strip_suffix("...").unwrap_or(word);
    if !stem.is_empty() {
        toks.push(Tok::Word(stem));
    }
    if stem.len() != word.len() {
        toks.push(Tok::Ellipsis);
    }
}

fn tokenize(text: &str) -> Vec<Tok<'_>> {
    let mut toks = vec![];
    let mut start = None;
    for (i, c) in text.char_indices() {
        let special = matches!(c, '[' | ']' | '<' | '>' | '{' | '}' | '(' | ')' | '|');
        if special || c.is_whitespace() {
            if let Some(s) = start.take() {
                push_word(&mut toks, &text[s..i]);
            }
            match c {
                '[' | '<' | '{' | '(' => toks.push(Tok::Open(c)),
                ']' | '>' | '}' | ')' => toks.push(Tok::Close(c)),
                '|' => toks.push(Tok::Pipe),
                _ => {}
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        push_word(&mut toks, &text[s..]);
    }
    toks
}

/// A keyword: a word with no lower-case letters and at least one letter or digit.
fn is_keyword(word: &str) -> bool {
    !word.chars().any(|c| c.is_lowercase()) && word.chars().any(|c| c.is_alphanumeric())
}

impl Syntax {
    pub fn parse(text: &str) -> Result<Syntax, String> {
        let toks = tokenize(text);
        let Some(Tok::Word(command)) = toks.first() else {
            return Err(format!("{text:?} does not start with the command name"));
        };
        let mut pos = 1;
        let alts = if toks.len() == 1 {
            vec![vec![]]
        } else {
            parse_alts(&toks, &mut pos, None)?
        };
        Ok(Syntax {
            command: command.to_string(),
            alts,
        })
    }
}

fn close_of(open: char) -> char {
    match open {
        '[' => ']',
        '<' => '>',
        '{' => '}',
        _ => ')',
    }
}

/// Alternatives up to the closing `close` (consumed), or to the end if `close` is None.
fn parse_alts(
    toks: &[Tok<'_>],
    pos: &mut usize,
    close: Option<char>,
) -> Result<Vec<Vec<Node>>, String> {
    let mut alts = vec![];
    let mut seq = vec![];
    loop {
        match toks.get(*pos) {
            None if close.is_none() => break,
            None => return Err(format!("missing '{}'", close.unwrap_or(' '))),
            Some(Tok::Close(c)) if Some(*c) == close => {
                *pos += 1;
                break;
            }
            Some(Tok::Close(c)) => return Err(format!("unexpected '{c}'")),
            Some(Tok::Pipe) => {
                *pos += 1;
                alts.push(finish_seq(std::mem::take(&mut seq))?);
            }
            Some(Tok::Ellipsis) => {
                *pos += 1;
                seq.push(Node::Ellipsis);
            }
            Some(Tok::Word(w)) => {
                *pos += 1;
                seq.push(Node::Word(w.to_string()));
            }
            Some(Tok::Open(c)) => {
                *pos += 1;
                let inner = parse_alts(toks, pos, Some(close_of(*c)))?;
                seq.push(Node::Group {
                    optional: *c == '[',
                    alts: inner,
                });
            }
        }
    }
    alts.push(finish_seq(seq)?);
    Ok(alts)
}

fn finish_seq(seq: Vec<Node>) -> Result<Vec<Node>, String> {
    if seq.is_empty() {
        return Err("empty alternative".into());
    }
    normalize(seq)
}

/// Folds repetition into [`Node::Repeat`]: `x ...`, `x [x ...]`, `a b [a b ...]`, `[x ...]`.
fn normalize(seq: Vec<Node>) -> Result<Vec<Node>, String> {
    let mut out: Vec<Node> = vec![];
    for node in seq {
        match node {
            Node::Ellipsis => {
                let last = out.pop().ok_or("'...' repeats nothing")?;
                out.push(Node::Repeat(vec![last]));
            }
            Node::Group { optional, alts } => {
                // Alternatives were normalized when their group closed; a trailing `...` in a
                // one-alternative optional group became a Repeat of what precedes it there.
                if let (true, [alt]) = (optional, alts.as_slice())
                    && let [Node::Repeat(body)] = repeat_tail(alt).as_slice()
                    && out.len() >= body.len()
                    && out[out.len() - body.len()..] == body[..]
                {
                    let body = body.clone();
                    out.truncate(out.len() - body.len());
                    out.push(Node::Repeat(body));
                } else {
                    out.push(Node::Group { optional, alts });
                }
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

/// `[a b ...]` means the whole of `a b` repeats: the alternative as one Repeat, if it ends in
/// one.
fn repeat_tail(alt: &[Node]) -> Vec<Node> {
    match alt.split_last() {
        Some((Node::Repeat(last), rest)) => {
            let mut body = rest.to_vec();
            body.extend(last.iter().cloned());
            vec![Node::Repeat(body)]
        }
        _ => alt.to_vec(),
    }
}

/// A sequence's arguments; a keyword followed by one plain argument is that argument with a
/// token.
fn seq_args(seq: &[Node]) -> Vec<Arg> {
    let mut out = vec![];
    let mut i = 0;
    while i < seq.len() {
        match &seq[i] {
            Node::Word(w) if is_keyword(w) => {
                if let Some(mut arg) = seq.get(i + 1).and_then(plain_arg) {
                    arg.token = Some(w.clone());
                    out.push(arg);
                    i += 1;
                } else {
                    out.push(Arg::pure_token(w));
                }
            }
            Node::Word(w) => out.push(Arg::named(w)),
            Node::Group { optional, alts } if !optional && alts.len() == 1 => {
                out.extend(seq_args(&alts[0]));
            }
            Node::Group { optional, alts } => out.push(group_arg(*optional, alts)),
            Node::Repeat(body) => out.push(repeat_arg(body)),
            Node::Ellipsis => {}
        }
        i += 1;
    }
    out
}

/// An argument that can carry the keyword before it: a name, or a repeated name.
fn plain_arg(node: &Node) -> Option<Arg> {
    match node {
        Node::Word(w) if !is_keyword(w) => Some(Arg::named(w)),
        Node::Repeat(body) => match body.as_slice() {
            [Node::Word(w)] if !is_keyword(w) => Some(Arg {
                multiple: true,
                ..Arg::named(w)
            }),
            _ => None,
        },
        _ => None,
    }
}

fn repeat_arg(body: &[Node]) -> Arg {
    let mut args = seq_args(body);
    let mut arg = if args.len() == 1 {
        args.remove(0)
    } else {
        Arg::group(ArgType::Block, args)
    };
    arg.multiple = true;
    arg
}

/// A group: one alternative is one argument (optional if the group is), several a `oneof`.
fn group_arg(optional: bool, alts: &[Vec<Node>]) -> Arg {
    let mut arg = if alts.len() == 1 {
        alt_arg(&alts[0])
    } else {
        Arg::group(
            ArgType::Oneof,
            alts.iter().map(|alt| alt_arg(alt)).collect(),
        )
    };
    arg.optional |= optional;
    arg
}

/// One alternative as one argument: a keyword and what follows it become a token on that, or a
/// `block` with the token; several arguments without a keyword a `block`.
fn alt_arg(alt: &[Node]) -> Arg {
    if let Some((Node::Word(keyword), rest)) = alt.split_first()
        && is_keyword(keyword)
    {
        let mut rest = seq_args(rest);
        return match rest.len() {
            0 => Arg::pure_token(keyword),
            1 if rest[0].token.is_none() => {
                let mut arg = rest.remove(0);
                arg.token = Some(keyword.clone());
                arg
            }
            _ => Arg {
                token: Some(keyword.clone()),
                ..Arg::group(ArgType::Block, rest)
            },
        };
    }
    let mut args = seq_args(alt);
    if args.len() == 1 {
        args.remove(0)
    } else {
        Arg::group(ArgType::Block, args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::TABLE;

    /// What redis-cli 7 prints as the hint for these arguments (`cliAddArgument` in
    /// redis-cli.c), so the tests check what a user sees.
    fn hint(args: &[Arg]) -> String {
        args.iter().map(hint_one).collect::<Vec<_>>().join(" ")
    }

    fn hint_one(arg: &Arg) -> String {
        let repeat = match arg.kind {
            ArgType::Oneof => arg
                .arguments
                .iter()
                .map(hint_one)
                .collect::<Vec<_>>()
                .join("|"),
            ArgType::Block => hint(&arg.arguments),
            ArgType::PureToken => String::new(),
            _ => arg.name.clone(),
        };
        let mut token = arg.token.clone().unwrap_or_default();
        if !token.is_empty() && arg.kind != ArgType::PureToken {
            token.push(' ');
        }
        let mut out = String::new();
        if arg.optional {
            out.push('[');
        }
        out.push_str(&token);
        out.push_str(&repeat);
        if arg.multiple {
            out.push_str(&format!(" [{repeat} ...]"));
        }
        if arg.optional {
            out.push(']');
        }
        out
    }

    fn meta(syntax: &'static str, keys: (i32, i32, i32)) -> Meta {
        Meta {
            syntax,
            keys,
            ..Meta::new("x", -1, crate::commands::CommandFlags::READ, "")
        }
    }

    fn args_of(syntax: &'static str) -> Vec<Arg> {
        command_args(&meta(syntax, (0, 0, 0)))
    }

    #[test]
    fn flock_acquire_is_a_key_two_integers_and_tokens() {
        let args = command_args(&meta(
            "FLOCK.ACQUIRE name lease-ms [WAIT ms] [OWNER id]",
            (1, 1, 1),
        ));
        assert_eq!(hint(&args), "name lease-ms [WAIT ms] [OWNER id]");
        assert_eq!(
            args,
            vec![
                Arg {
                    key_spec_index: Some(0),
                    ..Arg::new("name", ArgType::Key)
                },
                Arg::new("lease-ms", ArgType::Integer),
                Arg {
                    token: Some("WAIT".into()),
                    optional: true,
                    ..Arg::new("ms", ArgType::Integer)
                },
                Arg {
                    token: Some("OWNER".into()),
                    optional: true,
                    ..Arg::new("id", ArgType::String)
                },
            ]
        );
    }

    #[test]
    fn shapes_match_redis() {
        // SHUTDOWN as Redis 7 documents it: a oneof of pure tokens, then optional pure tokens.
        let args = args_of("SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]");
        assert_eq!(args[0].kind, ArgType::Oneof);
        assert_eq!(args[0].name, "nosave_save");
        assert!(args[0].optional);
        assert_eq!(
            args[0].arguments,
            vec![Arg::pure_token("NOSAVE"), Arg::pure_token("SAVE")]
        );
        assert_eq!(
            args[1],
            Arg {
                optional: true,
                ..Arg::pure_token("NOW")
            }
        );
        assert_eq!(hint(&args), "[NOSAVE|SAVE] [NOW] [FORCE] [ABORT]");

        // HELLO: an optional block holding an integer, a block with a token and a token arg.
        let args = args_of("HELLO [protover [AUTH username password] [SETNAME clientname]]");
        assert_eq!(args.len(), 1);
        assert_eq!((args[0].kind, args[0].optional), (ArgType::Block, true));
        let inner = &args[0].arguments;
        assert_eq!(inner[0], Arg::new("protover", ArgType::Integer));
        assert_eq!(inner[1].kind, ArgType::Block);
        assert_eq!(inner[1].name, "username_password");
        assert_eq!(inner[1].token.as_deref(), Some("AUTH"));
        assert_eq!(inner[2].token.as_deref(), Some("SETNAME"));
        assert_eq!(
            hint(&args),
            "[protover [AUTH username password] [SETNAME clientname]]"
        );

        // Repetition in its three spellings.
        for syntax in [
            "INFO [section [section ...]]",
            "INFO [section ...]",
            "INFO [section...]",
        ] {
            let args = args_of(syntax);
            assert_eq!(
                args,
                vec![Arg {
                    optional: true,
                    multiple: true,
                    ..Arg::new("section", ArgType::String)
                }],
                "{syntax}"
            );
            assert_eq!(hint(&args), "[section [section ...]]");
        }
        let args = command_args(&meta("WATCH key [key ...]", (1, -1, 1)));
        assert_eq!(hint(&args), "key [key ...]");
        assert_eq!((args[0].kind, args[0].multiple), (ArgType::Key, true));
        let args = args_of("CONFIG SET parameter value [parameter value ...]");
        assert_eq!(args[0], Arg::pure_token("SET"));
        assert_eq!((args[1].kind, args[1].multiple), (ArgType::Block, true));
        assert_eq!(hint(&args), "SET parameter value [parameter value ...]");

        // Placeholders, required choices, choices with a token.
        assert_eq!(
            hint(&args_of("CLIENT <subcommand> [arg ...]")),
            "subcommand [arg [arg ...]]"
        );
        let args = args_of("X <LIB-NAME libname | LIB-VER libver> [TYPE <NORMAL | PUBSUB>]");
        assert_eq!(args[0].kind, ArgType::Oneof);
        assert!(!args[0].optional);
        assert_eq!(args[0].arguments[1].token.as_deref(), Some("LIB-VER"));
        assert_eq!(
            (args[1].kind, args[1].token.as_deref()),
            (ArgType::Oneof, Some("TYPE"))
        );
        assert_eq!(
            hint(&args),
            "LIB-NAME libname|LIB-VER libver [TYPE NORMAL|PUBSUB]"
        );
        assert_eq!(
            hint(&args_of("AUTH [username] password")),
            "[username] password"
        );
        assert!(args_of("TIME").is_empty());
    }

    #[test]
    fn bad_syntax_is_an_error_not_a_panic() {
        for bad in [
            "", "[X", "X [a", "X a]", "X [a | ]", "X ...", "X []", "X <a>]",
        ] {
            assert!(Syntax::parse(bad).is_err(), "{bad:?} parsed");
        }
        assert!(command_args(&meta("X [a", (1, 1, 1))).is_empty());
    }

    #[test]
    fn subcommands_take_their_alternative() {
        let command = meta(
            "COMMAND [COUNT | INFO [command-name ...] | GETKEYS command [arg ...]]",
            (0, 0, 0),
        );
        assert!(subcommand_args(&command, "command|count").is_empty());
        assert_eq!(
            hint(&subcommand_args(&command, "command|info")),
            "[command-name [command-name ...]]"
        );
        assert_eq!(
            hint(&subcommand_args(&command, "getkeys")),
            "command [arg [arg ...]]"
        );
        assert!(subcommand_args(&command, "command|nosuch").is_empty());
        let config = meta("CONFIG GET parameter [parameter ...] | HELP", (0, 0, 0));
        assert_eq!(
            hint(&subcommand_args(&config, "config|get")),
            "parameter [parameter ...]"
        );
        assert!(subcommand_args(&config, "config|help").is_empty());
    }

    /// Every command in the table: its syntax parses, names the command, and its required
    /// arguments agree with its arity (a syntax string that lies fails here).
    #[test]
    fn every_command_syntax_parses_and_matches_its_arity() {
        fn min_words(arg: &Arg) -> i32 {
            if arg.optional {
                return 0;
            }
            let token = i32::from(arg.token.is_some());
            token
                + match arg.kind {
                    ArgType::PureToken => 0,
                    ArgType::Oneof => arg.arguments.iter().map(min_words).min().unwrap_or(0),
                    ArgType::Block => arg.arguments.iter().map(min_words).sum(),
                    _ => 1,
                }
        }
        fn variable(args: &[Arg]) -> bool {
            args.iter()
                .any(|a| a.optional || a.multiple || variable(&a.arguments))
        }
        fn check(what: &str, arity: i32, words_before: i32, args: &[Arg]) {
            let min = words_before + args.iter().map(min_words).sum::<i32>();
            if arity >= 0 {
                assert_eq!(min, arity, "{what}: required words vs arity");
                assert!(
                    !variable(args),
                    "{what}: fixed arity but optional arguments"
                );
            } else {
                assert_eq!(min, -arity, "{what}: required words vs arity");
            }
        }
        for meta in TABLE {
            let syntax = Syntax::parse(meta.syntax)
                .unwrap_or_else(|e| panic!("{}: syntax {:?}: {e}", meta.name, meta.syntax));
            assert!(
                syntax.command.eq_ignore_ascii_case(meta.name),
                "{}: {:?}",
                meta.name,
                meta.syntax
            );
            if meta.subcommands.is_empty() {
                check(meta.name, meta.arity, 1, &command_args(meta));
                if meta.keys.0 > 0 {
                    let args = command_args(meta);
                    assert_eq!(
                        args[meta.keys.0 as usize - 1].kind,
                        ArgType::Key,
                        "{}",
                        meta.name
                    );
                }
            } else {
                for sub in meta.subcommands {
                    match subcommand_alternative(meta, sub.name) {
                        Some(args) => check(sub.name, sub.arity, 2, &args),
                        // Only a subcommand without arguments may be left out of the syntax.
                        None => assert_eq!(
                            sub.arity, 2,
                            "{}: list it in {:?} (`NAME SUB args | SUB2 args`) for its hints",
                            sub.name, meta.syntax
                        ),
                    }
                }
            }
        }
    }
}
