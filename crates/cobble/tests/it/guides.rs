//! The guides' examples against what cobble does with them: the layer a guide shows is run,
//! and the output it shows is compared with what the binary prints, times aside. The
//! examples are read from the pages themselves, so that neither can change alone.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::fixture::{Daemon, Test, wait_for};

/// The repository's top directory.
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The fenced blocks of a Markdown page whose opening fence is exactly `fence` (say
/// "```yaml", or "```" for blocks without a language), each with its final newline.
fn blocks(page: &str, fence: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut open: Option<(&str, String)> = None;
    for line in page.lines() {
        match &mut open {
            None if line.starts_with("```") => open = Some((line, String::new())),
            None => {}
            Some((opening, body)) if line == "```" => {
                if *opening == fence {
                    found.push(std::mem::take(body));
                }
                open = None;
            }
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    assert!(open.is_none(), "an unclosed block");
    found
}

/// Whether `text` at `at` has the shape of `shape`, where `9` stands for any digit.
fn has_shape(text: &[u8], at: usize, shape: &str) -> bool {
    text.len() >= at + shape.len()
        && shape.bytes().zip(&text[at..]).all(|(s, t)| {
            if s == b'9' {
                t.is_ascii_digit()
            } else {
                s == *t
            }
        })
}

/// `cobble why` or `cobble services` output as a glob pattern for
/// [`crate::fixture::glob_matches`]: the times it shows (`today at 20:35 UTC`,
/// `2026-11-30T20:35:42Z`) and the CPU time on `Uses:` match any value; everything else
/// must be as shown.
fn why_pattern(shown: &str) -> String {
    let mut lines = Vec::new();
    for line in shown.lines() {
        let mut out = String::new();
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if line[i..].starts_with("today at ") && has_shape(bytes, i + 9, "99:99 UTC") {
                out.push_str("*day at ??:?? UTC");
                i += "today at 99:99 UTC".len();
            } else if has_shape(bytes, i, "9999-99-99T99:99:99Z") {
                out.push_str("????-??-??T??:??:??Z");
                i += "9999-99-99T99:99:99Z".len();
            } else {
                out.push(char::from(bytes[i]));
                i += 1;
            }
        }
        if out.starts_with("Uses:") {
            let cpu = out.find(" CPU,").expect("a CPU figure on Uses:");
            let start = out[..cpu].rfind(' ').unwrap() + 1;
            out.replace_range(start..cpu, "*");
        }
        lines.push(out);
    }
    lines.join("\n") + "\n"
}

#[test]
fn why_pattern_matches_times_and_cpu_only() {
    let shown = "Current:     backoff since today at 20:35 UTC\n\
                 Why:         backing off until 2026-11-30T20:35:42Z after exit code 3\n\
                 Uses:        0 B memory, 5ms CPU, 0 processes, 0 open files\n";
    let pattern = why_pattern(shown);
    let other = "Current:     backoff since today at 09:01 UTC\n\
                 Why:         backing off until 2027-01-02T09:01:59Z after exit code 3\n\
                 Uses:        0 B memory, 1.25s CPU, 0 processes, 0 open files\n";
    assert!(crate::fixture::glob_matches(&pattern, other), "{pattern}");
    let wrong_code = other.replace("exit code 3", "exit code 4");
    assert!(!crate::fixture::glob_matches(&pattern, &wrong_code));
    let wrong_memory = other.replace("0 B memory", "4.0 MiB memory");
    assert!(!crate::fixture::glob_matches(&pattern, &wrong_memory));
}

/// read-why.md's layer, run: after its third start `cobble why` prints what the guide shows,
/// and what docs/extensions.md shows under `cobble why`.
#[test]
fn the_why_output_in_the_guides_is_what_cobble_prints_for_the_guides_layer() {
    let guide = read("docs/how-to/read-why.md");
    let layer = &blocks(&guide, "```yaml")[0];
    assert!(layer.contains("flaky"), "{layer}");
    let first = &blocks(&guide, "```")[0];
    let shown = first
        .strip_prefix("$ cobble why flaky\n")
        .expect("the guide's first block is `cobble why flaky`");
    let extensions = read("docs/extensions.md");
    assert!(
        extensions.contains(&format!("\n```\n{shown}```\n")),
        "docs/extensions.md's `cobble why` example differs from read-why.md's:\n{shown}"
    );
    // The file the service reads must not exist here, as in the guide.
    assert!(!std::path::Path::new("/etc/flaky.conf").exists());

    let pattern = why_pattern(shown);
    let daemon = Daemon::start(&[("001-flaky", layer)], &[]);
    // Three starts take 500 ms + 1 s of backoff; the third backoff lasts 2 s, in which the
    // output must match. Outside it the count of starts differs.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let last = Test::daemon(&daemon)
            .args(&["why", "flaky"])
            .any_stdout()
            .run()
            .stdout;
        if crate::fixture::glob_matches(&pattern, &last) {
            break;
        }
        let past = last.contains("Starts:         4") || last.contains("Starts:         5");
        assert!(
            !past && Instant::now() < deadline,
            "`cobble why flaky` never printed what docs/how-to/read-why.md shows.\n\
             shown (as a pattern):\n{pattern}\nlast printed:\n{last}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The image example's layer (`examples/image/layers/`) boots to an autostart change that
/// is `Done`, with its service up: an example whose every boot reads `Error` would teach
/// the wrong thing.
#[test]
fn the_image_examples_layer_autostarts_done() {
    let layer = read("examples/image/layers/001-example.yaml");
    // The image carries a static busybox as /usr/bin/busybox; so must the machine that runs
    // this test (Debian's busybox-static, which scripts/test-all installs for the runc test).
    let busybox = ["/usr/bin/busybox", "/bin/busybox"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect(
            "busybox is needed to run the image example's layer: apt-get install busybox-static",
        );
    assert!(layer.contains("/usr/bin/busybox "), "{layer}");
    let layer = layer.replace("/usr/bin/busybox ", &format!("{busybox} "));
    let daemon = Daemon::start(&[("001-example", &layer)], &[]);
    let mut changes = String::new();
    wait_for(
        "the autostart change to end",
        Duration::from_secs(20),
        || {
            changes = Test::daemon(&daemon)
                .args(&["changes"])
                .any_stdout()
                .run()
                .stdout;
            !changes.contains("Doing")
        },
    );
    let rows: Vec<&str> = changes.lines().skip(1).filter(|l| !l.is_empty()).collect();
    assert!(
        rows.len() == 1 && rows[0].starts_with("1 ") && rows[0].contains(" Done "),
        "{changes}"
    );
    Test::daemon(&daemon)
        .args(&["services"])
        .stdout_glob("Service  Startup  Current  Since\nexample  enabled  active   *\n")
        .run();
}

/// Services of the four kinds the example of the Notes column in docs/extensions.md lists.
const NOTES_LAYER: &str = "\
services:
  flaky:
    override: replace
    command: /bin/sh -c 'cat /etc/flaky.conf || exit 3'
    startup: enabled
  once:
    override: replace
    command: /bin/sh -c 'sleep 1.5; exit 4'
    startup: enabled
    on-failure: ignore
  reloader:
    override: replace
    command: /bin/sleep 1000
    startup: enabled
  webhook:
    override: replace
    command: /bin/sleep 1000
    startup: enabled
    requires-paths: [/etc/webhook/certs/cert.pem]
";

/// The Notes column docs/extensions.md shows is what `cobble services` prints for such
/// services, times aside.
#[test]
fn the_notes_column_in_extensions_is_what_cobble_services_prints() {
    let page = read("docs/extensions.md");
    let shown = blocks(&page, "```")
        .into_iter()
        .find(|b| b.starts_with("Service   Startup  Current  Since               Notes\n"))
        .expect("the Notes column's example in docs/extensions.md");
    for path in ["/etc/flaky.conf", "/etc/webhook/certs/cert.pem"] {
        assert!(!std::path::Path::new(path).exists(), "{path} exists here");
    }
    let pattern = why_pattern(&shown);
    let daemon = Daemon::start(&[("001-notes", NOTES_LAYER)], &[]);
    let mut last = String::new();
    // flaky is between two runs most of the time, and once has exited after 1.5 s.
    let matched = (0..1500).any(|_| {
        last = Test::daemon(&daemon)
            .args(&["services"])
            .any_stdout()
            .run()
            .stdout;
        let matched = crate::fixture::glob_matches(&pattern, &last);
        if !matched {
            std::thread::sleep(Duration::from_millis(20));
        }
        matched
    });
    assert!(
        matched,
        "`cobble services` never printed what docs/extensions.md shows.\n\
         shown (as a pattern):\n{pattern}\nlast printed:\n{last}"
    );
}
