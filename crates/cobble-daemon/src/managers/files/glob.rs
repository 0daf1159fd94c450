//! Go's `path.Match`: shell patterns over one slash-separated name (`*`, `?`, `[a-z]`, `[^x]`,
//! `\` escapes). A malformed pattern is an error even when the name already failed to match,
//! as in Go 1.16 and later.

/// Go's `path.ErrBadPattern`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("syntax error in pattern")]
pub(crate) struct BadPattern;

/// Reports whether `name` matches the whole of `pattern`.
pub(crate) fn matches(pattern: &str, name: &str) -> Result<bool, BadPattern> {
    let mut pattern: Vec<char> = pattern.chars().collect();
    let mut name: Vec<char> = name.chars().collect();
    'chunks: while !pattern.is_empty() {
        let (star, chunk, rest) = scan_chunk(&pattern);
        let (chunk, rest) = (chunk.to_vec(), rest.to_vec());
        pattern = rest;
        if star && chunk.is_empty() {
            // A trailing star matches the rest of the name, unless it holds a slash.
            return Ok(!name.contains(&'/'));
        }
        // Try the chunk right here first.
        let (rest_of_name, ok) = match_chunk(&chunk, &name)?;
        if ok && (rest_of_name.is_empty() || !pattern.is_empty()) {
            name = rest_of_name;
            continue;
        }
        if star {
            // Let the star eat characters (not slashes) and try again.
            let mut i = 0;
            while i < name.len() && name[i] != '/' {
                let (rest_of_name, ok) = match_chunk(&chunk, &name[i + 1..])?;
                if ok {
                    // A final chunk must consume all of the name.
                    if pattern.is_empty() && !rest_of_name.is_empty() {
                        i += 1;
                        continue;
                    }
                    name = rest_of_name;
                    continue 'chunks;
                }
                i += 1;
            }
        }
        // No match; the rest of the pattern must still be well formed.
        while !pattern.is_empty() {
            let (_, chunk, rest) = scan_chunk(&pattern);
            match_chunk(chunk, &[])?;
            pattern = rest.to_vec();
        }
        return Ok(false);
    }
    Ok(name.is_empty())
}

/// Splits off the next chunk: leading stars, then everything up to the next unbracketed star.
fn scan_chunk(pattern: &[char]) -> (bool, &[char], &[char]) {
    let mut pattern = pattern;
    let mut star = false;
    while pattern.first() == Some(&'*') {
        pattern = &pattern[1..];
        star = true;
    }
    let mut in_range = false;
    let mut i = 0;
    while i < pattern.len() {
        match pattern[i] {
            // Skip the escaped character (if any).
            '\\' if i + 1 < pattern.len() => i += 1,
            '[' => in_range = true,
            ']' => in_range = false,
            '*' if !in_range => break,
            _ => {}
        }
        i += 1;
    }
    (star, &pattern[..i], &pattern[i..])
}

/// Matches `chunk` (no stars) at the start of `name`; returns what is left of the name and
/// whether it matched. Errors only for a malformed chunk, which is checked to the end.
fn match_chunk(chunk: &[char], name: &[char]) -> Result<(Vec<char>, bool), BadPattern> {
    let mut chunk = chunk;
    let mut s = name;
    let mut failed = false;
    while let Some(&c) = chunk.first() {
        if !failed && s.is_empty() {
            failed = true;
        }
        match c {
            '[' => {
                let r = if failed {
                    None
                } else {
                    let r = s[0];
                    s = &s[1..];
                    Some(r)
                };
                chunk = &chunk[1..];
                let negated = chunk.first() == Some(&'^');
                if negated {
                    chunk = &chunk[1..];
                }
                let mut matched = false;
                let mut ranges = 0;
                loop {
                    if chunk.first() == Some(&']') && ranges > 0 {
                        chunk = &chunk[1..];
                        break;
                    }
                    let (lo, rest) = get_escaped(chunk)?;
                    chunk = rest;
                    let mut hi = lo;
                    if chunk[0] == '-' {
                        let (h, rest) = get_escaped(&chunk[1..])?;
                        hi = h;
                        chunk = rest;
                    }
                    if r.is_some_and(|r| lo <= r && r <= hi) {
                        matched = true;
                    }
                    ranges += 1;
                }
                if matched == negated {
                    failed = true;
                }
            }
            '?' => {
                if !failed {
                    if s[0] == '/' {
                        failed = true;
                    }
                    s = &s[1..];
                }
                chunk = &chunk[1..];
            }
            _ => {
                let literal = if c == '\\' {
                    chunk = &chunk[1..];
                    *chunk.first().ok_or(BadPattern)?
                } else {
                    c
                };
                if !failed {
                    if s[0] != literal {
                        failed = true;
                    }
                    s = &s[1..];
                }
                chunk = &chunk[1..];
            }
        }
    }
    if failed {
        return Ok((Vec::new(), false));
    }
    Ok((s.to_vec(), true))
}

/// One possibly escaped character of a bracket expression; a range end may not be `-` or `]`,
/// and the expression must go on after it.
fn get_escaped(chunk: &[char]) -> Result<(char, &[char]), BadPattern> {
    let mut chunk = chunk;
    match chunk.first() {
        None | Some('-') | Some(']') => return Err(BadPattern),
        Some('\\') => {
            chunk = &chunk[1..];
            if chunk.is_empty() {
                return Err(BadPattern);
            }
        }
        Some(_) => {}
    }
    let r = chunk[0];
    let rest = &chunk[1..];
    if rest.is_empty() {
        return Err(BadPattern);
    }
    Ok((r, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cases re-expressed from the behaviour of Go's `path.Match`.
    #[test]
    fn matches_like_go() {
        let cases: &[(&str, &str, Result<bool, BadPattern>)] = &[
            ("abc", "abc", Ok(true)),
            ("*", "abc", Ok(true)),
            ("*c", "abc", Ok(true)),
            ("a*", "a", Ok(true)),
            ("a*", "abc", Ok(true)),
            ("a*", "ab/c", Ok(false)),
            ("a*/b", "abc/b", Ok(true)),
            ("a*/b", "a/c/b", Ok(false)),
            ("a*b*c*d*e*/f", "axbxcxdxe/f", Ok(true)),
            ("a*b*c*d*e*/f", "axbxcxdxexxx/f", Ok(true)),
            ("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", Ok(false)),
            ("a*b*c*d*e*/f", "axbxcxdxexxx/fff", Ok(false)),
            ("a*b?c*x", "abxbbxdbxebxczzx", Ok(true)),
            ("a*b?c*x", "abxbbxdbxebxczzy", Ok(false)),
            ("ab[c]", "abc", Ok(true)),
            ("ab[b-d]", "abc", Ok(true)),
            ("ab[e-g]", "abc", Ok(false)),
            ("ab[^c]", "abc", Ok(false)),
            ("ab[^b-d]", "abc", Ok(false)),
            ("ab[^e-g]", "abc", Ok(true)),
            ("a\\*b", "a*b", Ok(true)),
            ("a\\*b", "ab", Ok(false)),
            ("a?b", "a☺b", Ok(true)),
            ("a[^a]b", "a☺b", Ok(true)),
            ("a???b", "a☺b", Ok(false)),
            ("a[!a]b", "a☺b", Ok(false)),
            ("*x", "xxx", Ok(true)),
            ("[\\]a]", "]", Ok(true)),
            ("[\\-]", "-", Ok(true)),
            ("[x\\-]", "x", Ok(true)),
            ("[x\\-]", "-", Ok(true)),
            ("[x\\-]", "z", Ok(false)),
            ("[\\-x]", "x", Ok(true)),
            ("[\\-x]", "a", Ok(false)),
            ("[]a]", "]", Err(BadPattern)),
            ("[-]", "-", Err(BadPattern)),
            ("[x-]", "x", Err(BadPattern)),
            ("[-x]", "x", Err(BadPattern)),
            ("\\", "a", Err(BadPattern)),
            ("[a-b-c]", "a", Err(BadPattern)),
            ("[", "a", Err(BadPattern)),
            ("[^", "a", Err(BadPattern)),
            ("[^bc", "a", Err(BadPattern)),
            ("a[", "a", Err(BadPattern)),
            ("a[", "ab", Err(BadPattern)),
            ("a[", "x", Err(BadPattern)),
            ("a/b[", "x", Err(BadPattern)),
            ("*x", "xxx", Ok(true)),
            ("file*.gz", "file1.gz", Ok(true)),
            ("file*.gz", "file2.tar.gz", Ok(true)),
            ("file*.gz", "file3.tar.bz2", Ok(false)),
            ("file*.gz", "backup_file.gz", Ok(false)),
        ];
        for (pattern, name, want) in cases {
            assert_eq!(
                &matches(pattern, name),
                want,
                "match({pattern:?}, {name:?})"
            );
        }
    }
}
