//! Hints from failure output: which missing file a service was looking for.
//!
//! When a service exits and its last output names a missing absolute path, the supervisor
//! watches that path and retries as soon as it appears instead of waiting out the backoff.
//! This heals the founding case (a webhook started before its certificates were pushed) for
//! clients that cannot declare `requires-paths`. The patterns are the usual ways programs
//! report ENOENT: Go's `*PathError` (`open /p: no such file or directory`), C tools
//! (`cat: /p: No such file or directory`), Python (`[Errno 2] No such file or directory:
//! '/p'`) and Node (`ENOENT: no such file or directory, open '/p'`).

const ENOENT: &str = "no such file or directory";

/// Absolute paths reported missing in `lines`, in order of appearance, without duplicates.
pub(crate) fn missing_paths(lines: &[String]) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for line in lines {
        let lower = line.to_ascii_lowercase();
        let mut from = 0;
        while let Some(at) = lower[from..].find(ENOENT) {
            let at = from + at;
            let before = &line[..at];
            let after = &line[at + ENOENT.len()..];
            for path in [path_before(before), path_after(after)]
                .into_iter()
                .flatten()
            {
                if !found.contains(&path) {
                    found.push(path);
                }
            }
            from = at + ENOENT.len();
        }
    }
    found
}

/// `... /p: ` (Go, C tools): the absolute path ending right before `: `.
fn path_before(before: &str) -> Option<String> {
    let head = before.strip_suffix(": ")?;
    let head = head.trim_end_matches(['"', '\'']);
    let start = head
        .rfind(|c: char| c.is_whitespace() || c == '"' || c == '\'')
        .map_or(0, |i| i + 1);
    absolute(&head[start..])
}

/// `...: '/p'` (Python) or `..., open '/p'` (Node): the first quoted absolute path after.
fn path_after(after: &str) -> Option<String> {
    let quote_at = after.find(['\'', '"'])?;
    let quote = after[quote_at..].chars().next()?;
    let rest = &after[quote_at + 1..];
    let end = rest.find(quote)?;
    absolute(&rest[..end])
}

fn absolute(candidate: &str) -> Option<String> {
    let candidate = candidate.trim_end_matches([':', ',']);
    (candidate.starts_with('/') && candidate.len() > 1).then(|| candidate.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(lines: &[&str]) -> Vec<String> {
        missing_paths(&lines.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn recognises_the_usual_enoent_reports() {
        let cases: &[(&str, &[&str])] = &[
            (
                "Error: open /etc/webhook/certs/cert.pem: no such file or directory",
                &["/etc/webhook/certs/cert.pem"],
            ),
            (
                "2024/01/01 12:00:00 stat /data/db: no such file or directory",
                &["/data/db"],
            ),
            (
                "cat: /tmp/config: No such file or directory",
                &["/tmp/config"],
            ),
            (
                "FileNotFoundError: [Errno 2] No such file or directory: '/etc/app.toml'",
                &["/etc/app.toml"],
            ),
            (
                "Error: ENOENT: no such file or directory, open '/srv/key.pem'",
                &["/srv/key.pem"],
            ),
            (
                r#"failed to load "/etc/x.conf": no such file or directory"#,
                &["/etc/x.conf"],
            ),
            ("open certs/cert.pem: no such file or directory", &[]),
            ("everything is fine", &[]),
            ("no such file or directory", &[]),
        ];
        for (line, want) in cases {
            assert_eq!(paths(&[line]), *want, "{line}");
        }
    }

    #[test]
    fn several_paths_in_order_without_duplicates() {
        assert_eq!(
            paths(&[
                "open /a/cert.pem: no such file or directory",
                "open /a/key.pem: no such file or directory",
                "retrying: open /a/cert.pem: no such file or directory",
            ]),
            ["/a/cert.pem", "/a/key.pem"]
        );
    }
}
