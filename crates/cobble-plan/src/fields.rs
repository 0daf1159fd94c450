//! The fields of a layer's entries, and which of them are cobble's own.
//!
//! A field of an entry is in several lists that must agree: the struct and its merge
//! (`service.rs`, `check.rs`, `log_target.rs`), the parser's `*Doc` struct (`layer.rs`), the
//! table of Pebble's Go types (`pebble_errors.rs`), the emitter (`emit.rs`) and the fuzzer's
//! generator (`cobble-fuzz`). The parser's list is read here from the parser itself, and the
//! tests compare every other list with it. Which fields are cobble's own (fields Pebble's
//! plan does not have, so Pebble refuses a layer with any of them) is said once, in the Go
//! types' table; the documentation's list of them is generated from it
//! ([`own_fields_markdown`], written by `scripts/gen-docs`).

use crate::layer::entry_fields;
use crate::pebble_errors::go_fields;

/// The sections whose entries are made of fields: services, checks and log targets.
pub const ENTRY_SECTIONS: [&str; 3] = ["services", "checks", "log-targets"];

/// The fields the layer parser accepts in an entry of `section` (one of
/// [`ENTRY_SECTIONS`]), in the order it declares them; empty for any other section.
pub fn parser_fields(section: &str) -> &'static [&'static str] {
    entry_fields(section)
}

/// A field of cobble's own: Pebble's plan does not have it, and Pebble's strict parser
/// refuses a layer that uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnField {
    /// The section whose entries have it (`services`).
    pub section: &'static str,
    /// The field's name, as a layer spells it.
    pub name: &'static str,
    /// What it is for, in a line, for the generated list.
    pub summary: &'static str,
}

/// What each of cobble's own fields is for, in a line. Which fields are cobble's own is
/// decided by the Go types' table (`GoType::Cobble` in `pebble_errors.rs`); a test fails
/// until every one of them has its line here.
const SUMMARIES: &[(&str, &str)] = &[
    (
        "requires-paths",
        "files that must exist before the service is started; until then it waits",
    ),
    (
        "on-file-change",
        "restart the service, signal it or do nothing when a watched file changes",
    ),
    (
        "persist-logs",
        "also keep the service's output in rotated files under `$PEBBLE/logs/`",
    ),
    (
        "requires-checks",
        "checks that must be up before the service is started; until then it waits",
    ),
    (
        "start-grace",
        "after a start, how long a failing check's `on-check-failure` waits for its first success",
    ),
    (
        "type",
        "`oneshot`: the service's start runs its command to completion; `after:` it means after it completed",
    ),
    (
        "readiness",
        "`notify`: the service says when it is ready (`READY=1`); it is `starting` until then",
    ),
    (
        "rlimits",
        "the kernel's per-process limits (`nofile`, `nproc`, `core`, ...) set on the service",
    ),
    (
        "resources",
        "memory, process and CPU limits enforced through a cgroup of the service's own",
    ),
    (
        "sockets",
        "listening sockets held across restarts and passed with systemd's socket activation",
    ),
    (
        "watchdog",
        "with `readiness: notify`, how long the service may go without `WATCHDOG=1`",
    ),
    (
        "schedule",
        "when the daemon starts the service by itself, in snapd's timer format (`mon-fri,9:00`)",
    ),
];

/// cobble's own fields, in the order the parser declares them.
pub fn own_fields() -> Vec<OwnField> {
    let mut own = Vec::new();
    for section in ENTRY_SECTIONS {
        for (name, cobble) in go_fields(section) {
            if !cobble {
                continue;
            }
            let summary = SUMMARIES
                .iter()
                .find(|(field, _)| *field == name)
                .map_or("", |(_, summary)| summary);
            own.push(OwnField {
                section,
                name,
                summary,
            });
        }
    }
    own
}

/// Where the generated list starts in a Markdown page; `scripts/gen-docs` rewrites what is
/// between this line and [`GENERATED_END`].
pub const GENERATED_BEGIN: &str =
    "<!-- cobble's own layer fields: generated from the parser by scripts/gen-docs -->";
/// Where the generated list ends.
pub const GENERATED_END: &str = "<!-- end of cobble's own layer fields -->";

/// cobble's own fields as a Markdown table, each linked to its section of
/// `docs/extensions.md` at `extensions` (`""` on that page itself, `../extensions.md` from
/// a page one directory down).
pub fn own_fields_markdown(extensions: &str) -> String {
    let mut out = String::from("| Field | Section | What it is for |\n|---|---|---|\n");
    for field in own_fields() {
        out.push_str(&format!(
            "| [`{name}`]({extensions}#{name}) | `{section}` | {summary} |\n",
            name = field.name,
            section = field.section,
            summary = field.summary,
        ));
    }
    out
}

/// `text`, the Markdown page at `path` (from the repository's top, such as
/// `docs/how-to/pebble-to-cobble.md`), with the generated list between its markers made
/// current; `None` when the page has no markers.
pub fn refresh_own_fields(path: &str, text: &str) -> Option<String> {
    let begin = text.find(GENERATED_BEGIN)? + GENERATED_BEGIN.len();
    let end = begin + text[begin..].find(GENERATED_END)?;
    Some(format!(
        "{}\n{}{}",
        &text[..begin],
        own_fields_markdown(&extensions_link_from(path)),
        &text[end..]
    ))
}

/// The link from the page at `path` to `docs/extensions.md` (`""` on that page itself).
fn extensions_link_from(path: &str) -> String {
    if path == "docs/extensions.md" {
        return String::new();
    }
    let dirs: Vec<&str> = path.split('/').collect();
    let dirs = &dirs[..dirs.len() - 1];
    match dirs.split_first() {
        Some((&"docs", below)) => format!("{}extensions.md", "../".repeat(below.len())),
        _ => format!("{}docs/extensions.md", "../".repeat(dirs.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Go types' table, which reports a broken layer in Pebble's words, knows every
    /// field the parser accepts, in the parser's order, and no other.
    #[test]
    fn the_go_types_table_has_every_field_of_the_parser() {
        for section in ENTRY_SECTIONS {
            let parser = parser_fields(section);
            assert!(parser.len() >= 5, "{section}: {parser:?}");
            let table: Vec<&str> = go_fields(section).iter().map(|(n, _)| *n).collect();
            assert_eq!(
                table, parser,
                "{section}: the parser's fields (right) are not those of the Go types' \
                 table in pebble_errors.rs (left)"
            );
        }
    }

    /// Every field of cobble's own has its line in the generated list, and only those do.
    #[test]
    fn every_own_field_has_a_summary() {
        let own = own_fields();
        assert!(own.len() >= 10, "{own:?}");
        for field in &own {
            assert!(
                !field.summary.is_empty(),
                "{} has no line in SUMMARIES",
                field.name
            );
        }
        let names: Vec<&str> = own.iter().map(|f| f.name).collect();
        for (name, _) in SUMMARIES {
            assert!(
                names.contains(name),
                "{name} has a line in SUMMARIES but is not one of cobble's own fields"
            );
        }
    }

    #[test]
    fn the_generated_list_is_spliced_between_its_markers() {
        let page = format!("intro\n{GENERATED_BEGIN}\nstale\n{GENERATED_END}\nafter\n");
        let path = "docs/how-to/page.md";
        let fresh = refresh_own_fields(path, &page).unwrap();
        assert!(fresh.starts_with(&format!("intro\n{GENERATED_BEGIN}\n| Field |")));
        assert!(fresh.contains("| [`watchdog`](../extensions.md#watchdog) | `services` |"));
        assert!(fresh.ends_with(&format!(" |\n{GENERATED_END}\nafter\n")));
        assert!(!fresh.contains("stale"));
        assert_eq!(refresh_own_fields(path, &fresh), Some(fresh));
        assert_eq!(refresh_own_fields(path, "no markers"), None);
    }

    #[test]
    fn links_to_the_extensions_page_are_relative_to_the_page() {
        for (path, link) in [
            ("docs/extensions.md", ""),
            ("docs/state.md", "extensions.md"),
            ("docs/how-to/juju.md", "../extensions.md"),
            ("README.md", "docs/extensions.md"),
            ("examples/image/README.md", "../../docs/extensions.md"),
        ] {
            assert_eq!(extensions_link_from(path), link, "{path}");
        }
    }
}
