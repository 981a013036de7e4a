//! Redis's glob patterns (`*`, `?`, `[abc]`, `[a-z]`, `[^a]`, `\x`), as CONFIG GET and ACL key
//! and channel patterns use them.

/// Glob matching as Redis's CONFIG GET does it: `*`, `?`, `[abc]`, `[a-z]`, `[^a]`, `\x`.
/// Iterative with one backtrack point, so no pattern can make it recurse or blow up.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p, t));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    t += 1;
                    continue;
                }
                b'[' if class_match(pattern, p, text[t]).is_some_and(|(matched, _)| matched) => {
                    p = class_match(pattern, p, text[t]).map_or(p + 1, |(_, next)| next);
                    t += 1;
                    continue;
                }
                b'\\' if p + 1 < pattern.len() && pattern[p + 1] == text[t] => {
                    p += 2;
                    t += 1;
                    continue;
                }
                c if c == text[t] => {
                    p += 1;
                    t += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, st)) => {
                p = sp + 1;
                t = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class starting at `pattern[start] == b'['`: (matched, index after).
fn class_match(pattern: &[u8], start: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    while i < pattern.len() && pattern[i] != b']' {
        if pattern[i] == b'\\' && i + 1 < pattern.len() {
            matched |= pattern[i + 1] == c;
            i += 2;
        } else if i + 2 < pattern.len() && pattern[i + 1] == b'-' && pattern[i + 2] != b']' {
            let (lo, hi) = (
                pattern[i].min(pattern[i + 2]),
                pattern[i].max(pattern[i + 2]),
            );
            matched |= (lo..=hi).contains(&c);
            i += 3;
        } else {
            matched |= pattern[i] == c;
            i += 1;
        }
    }
    if i >= pattern.len() {
        return None;
    }
    Some((matched != negate, i + 1))
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs_match_like_redis() {
        assert!(glob_match(b"*", b"maxclients"));
        assert!(glob_match(b"max*", b"maxclients"));
        assert!(glob_match(b"*fsync", b"appendfsync"));
        assert!(glob_match(b"p?rt", b"port"));
        assert!(glob_match(b"[mp]*", b"port"));
        assert!(!glob_match(b"[^p]*", b"port"));
        assert!(glob_match(b"max-[a-z]*-ms", b"max-lease-ms"));
        assert!(!glob_match(b"port", b"ports"));
        assert!(glob_match(b"orders:*", b"orders:1042"));
        assert!(!glob_match(b"orders:*", b"invoices:1"));
        assert!(!glob_match(
            b"a*b*c*d*e*f*g*h*x",
            b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        ));
    }
}
