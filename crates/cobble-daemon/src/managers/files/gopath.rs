//! Go's `path` package (slash-separated, purely lexical), where its results are visible to
//! clients: listed paths are built with `path.Join`, names with `path.Base`.

/// `path.IsAbs`.
pub(crate) fn is_abs(path: &str) -> bool {
    path.starts_with('/')
}

/// `path.Clean`: the shortest equivalent path, processing `.`, `..` and repeated slashes.
pub(crate) fn clean(path: &str) -> String {
    if path.is_empty() {
        return ".".into();
    }
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for element in path.split('/') {
        match element {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

/// `path.Split`: everything up to and including the last slash, and the rest.
pub(crate) fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(at) => (&path[..=at], &path[at + 1..]),
        None => ("", path),
    }
}

/// `path.Dir`: all but the last element, cleaned.
pub(crate) fn dir(path: &str) -> String {
    clean(split(path).0)
}

/// `path.Base`: the last element, trailing slashes ignored; `/` for the root, `.` for empty.
pub(crate) fn base(path: &str) -> String {
    if path.is_empty() {
        return ".".into();
    }
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return "/".into();
    }
    match trimmed.rfind('/') {
        Some(at) => trimmed[at + 1..].into(),
        None => trimmed.into(),
    }
}

/// `path.Join` of two elements: joined with a slash and cleaned; empty elements are skipped.
pub(crate) fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => String::new(),
        (true, false) => clean(b),
        (false, true) => clean(a),
        (false, false) => clean(&format!("{a}/{b}")),
    }
}

/// The name `os.Stat` gives an entry: the last element with trailing slashes removed, and
/// `/` for the root.
pub(crate) fn stat_name(path: &str) -> String {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return if path.is_empty() {
            String::new()
        } else {
            "/".into()
        };
    }
    match trimmed.rfind('/') {
        Some(at) => trimmed[at + 1..].into(),
        None => trimmed.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_matches_go() {
        let cases = [
            ("", "."),
            ("/", "/"),
            ("//a//b/", "/a/b"),
            ("/a/./b/../c", "/a/c"),
            ("/../a", "/a"),
            ("a/../..", ".."),
            ("a/b/..", "a"),
        ];
        for (input, want) in cases {
            assert_eq!(clean(input), want, "clean({input:?})");
        }
    }

    #[test]
    fn dir_base_join_match_go() {
        assert_eq!(dir("/a/b"), "/a");
        assert_eq!(dir("/a/b/"), "/a/b");
        assert_eq!(dir("/"), "/");
        assert_eq!(dir("/a"), "/");
        assert_eq!(base("/a/b/"), "b");
        assert_eq!(base("/"), "/");
        assert_eq!(base("//"), "/");
        assert_eq!(join("/a/", "b"), "/a/b");
        assert_eq!(join("/", "/"), "/");
        assert_eq!(join("/a/b", "x"), "/a/b/x");
        assert_eq!(stat_name("/a/b/"), "b");
        assert_eq!(stat_name("/"), "/");
    }
}
