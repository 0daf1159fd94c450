//! The reference documentation against the code it describes, so that neither can change
//! without the other: the CLI reference is the binary's own output, and every layer field,
//! every API route and every command is found in its reference page. After adding a
//! command or an option, `scripts/gen-docs` regenerates the CLI reference; a new layer field
//! or route needs a row in `docs/reference/layer.md` or `docs/reference/api.md`. The list of
//! cobble's own layer fields is generated from the parser into the pages that have its
//! markers, also by `scripts/gen-docs`, and each of those fields needs its section in
//! `docs/extensions.md`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use crate::fixture::COBBLE;

/// The repository's top directory.
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The part of a Markdown page under the heading `heading` (up to the next heading of the
/// same or a higher level).
fn part<'a>(page: &'a str, heading: &str) -> Option<&'a str> {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start = page.find(&format!("\n{heading}\n"))? + 1;
    let rest = &page[start + heading.len()..];
    let end = rest
        .match_indices("\n#")
        .find(|(i, _)| {
            let hashes = rest[i + 1..].chars().take_while(|c| *c == '#').count();
            hashes <= level && rest[i + 1 + hashes..].starts_with(' ')
        })
        .map_or(rest.len(), |(i, _)| i);
    Some(&rest[..end])
}

#[test]
fn the_cli_reference_is_what_the_binary_generates() {
    let output = Command::new(COBBLE)
        .args(["help", "--markdown"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let generated = String::from_utf8(output.stdout).unwrap();
    let committed = read("docs/reference/cli.md");
    assert!(
        generated == committed,
        "docs/reference/cli.md is not what the binary generates; run scripts/gen-docs"
    );
}

#[test]
fn every_command_has_a_section_in_the_cli_reference_and_a_man_page() {
    let output = Command::new(COBBLE)
        .args(["help", "--all"])
        .output()
        .unwrap();
    let all = String::from_utf8(output.stdout).unwrap();
    let reference = read("docs/reference/cli.md");
    let commands: Vec<&str> = all
        .lines()
        .filter(|l| l.starts_with("    "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(commands.len() > 30, "{all}");
    for command in commands {
        assert!(
            reference.contains(&format!("\n## cobble {command}\n")),
            "{command} is not in docs/reference/cli.md"
        );
        let page = Command::new(COBBLE)
            .args(["help", "--man", command])
            .output()
            .unwrap();
        assert!(page.status.success(), "help --man {command}");
        let title = format!(".TH cobble\\-{} 8 ", command.replace('-', "\\-"));
        let page = String::from_utf8_lossy(&page.stdout);
        assert!(page.starts_with(&title), "{title:?}: {page:.60}");
    }
}

/// The probe that no real field is called.
const PROBE: &str = "zz-not-a-field";

/// The fields the parser knows where `yaml` puts [`PROBE`], read from its refusal
/// (`unknown field ..., expected one of a, b, c`); `None` when the place is not a mapping
/// of fields.
fn fields_at(yaml: &str) -> Option<Vec<String>> {
    let err = cobble_plan::Layer::own_refusal(yaml)?;
    let (_, list) = err.split_once(&format!("unknown field `{PROBE}`, expected one of "))?;
    Some(list.split(", ").map(|f| f.trim().to_owned()).collect())
}

/// Top-level sections: every name the layer parser's source spells that it accepts as a
/// section, so a section added there is found without naming it here.
fn sections() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    // Every source file, those of a module's own folder (its tests) too.
    let mut dirs = vec![repo().join("crates/cobble-plan/src")];
    let mut files = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    for path in files {
        let source = std::fs::read_to_string(path).unwrap();
        for literal in source.split('"').skip(1).step_by(2) {
            let plausible = !literal.is_empty()
                && literal.starts_with(|c: char| c.is_ascii_lowercase())
                && literal.chars().all(|c| c.is_ascii_lowercase() || c == '-');
            if !plausible {
                continue;
            }
            // Quoted, so that `null` or `true` is a name and not YAML's value.
            let yaml = format!("\"{literal}\": null\n");
            let accepted = match cobble_plan::Layer::parse(1, "probe", &yaml) {
                Ok(_) => true,
                Err(e) => !e.to_string().contains("unknown section"),
            };
            if accepted {
                names.insert(literal.to_owned());
            }
        }
    }
    names
}

#[test]
fn every_layer_section_and_field_is_in_the_layer_reference() {
    let reference = read("docs/reference/layer.md");
    let top = part(&reference, "## Top level").expect("a Top level table");
    let sections = sections();
    for expected in [
        "summary",
        "description",
        "services",
        "checks",
        "log-targets",
    ] {
        assert!(
            sections.contains(expected),
            "the probe missed {expected}: {sections:?}"
        );
    }
    let mut checked = 0;
    for section in &sections {
        assert!(
            top.contains(&format!("| `{section}` |")),
            "section {section} is not in the Top level table of docs/reference/layer.md"
        );
        // A map of named entries (services, checks, ...) or a mapping of fields itself.
        let shapes = [
            (format!("{section}:\n  x:\n    {PROBE}: null\n"), true),
            (format!("{section}:\n  {PROBE}: null\n"), false),
        ];
        for (yaml, named) in shapes {
            let Some(fields) = fields_at(&yaml) else {
                continue;
            };
            let table = part(&reference, &format!("## {section}"))
                .unwrap_or_else(|| panic!("no \"## {section}\" in docs/reference/layer.md"));
            for field in fields {
                assert!(
                    table.contains(&format!("| `{field}` |")),
                    "{section}.{field} is not in docs/reference/layer.md"
                );
                checked += 1;
                let nested = if named {
                    format!("{section}:\n  x:\n    {field}:\n      {PROBE}: null\n")
                } else {
                    format!("{section}:\n  {field}:\n    {PROBE}: null\n")
                };
                for inner in fields_at(&nested).unwrap_or_default() {
                    assert!(
                        table.contains(&format!("| `{field}.{inner}` |")),
                        "{section}.{field}.{inner} is not in docs/reference/layer.md"
                    );
                    checked += 1;
                }
            }
            break;
        }
    }
    assert!(checked > 40, "only {checked} fields were found to check");
}

#[test]
fn every_api_route_and_method_is_in_the_api_reference() {
    let reference = read("docs/reference/api.md");
    let routes = cobble_daemon::api_routes();
    for (method, path) in &routes {
        let entry = format!("| `{method} {path}` |");
        assert!(
            reference.contains(&entry),
            "{entry} is not in docs/reference/api.md"
        );
        let section = reference
            .lines()
            .any(|l| l.starts_with("## ") && l.contains(&format!(" {path}`")));
        assert!(section, "no section for {path} in docs/reference/api.md");
    }
    assert!(
        routes.len() >= 25,
        "only {} routes were found",
        routes.len()
    );
}

#[test]
fn the_readme_reaches_every_reference_in_two_clicks() {
    let readme = read("README.md");
    assert!(
        readme.contains("(docs/README.md)"),
        "README.md links the docs index"
    );
    let index = read("docs/README.md");
    for page in [
        "reference/cli.md",
        "reference/layer.md",
        "reference/api.md",
        "extensions.md",
    ] {
        assert!(
            index.contains(&format!("({page})")),
            "docs/README.md links {page}"
        );
        assert!(
            repo().join("docs").join(page).exists(),
            "docs/{page} exists"
        );
    }
}

/// The Markdown pages of the repository's documentation: the README and `docs/`, as paths
/// from the repository's top.
fn markdown_pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_owned()];
    let mut dirs = vec!["docs".to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(repo().join(&dir)).unwrap() {
            let entry = entry.unwrap();
            let path = format!("{dir}/{}", entry.file_name().to_string_lossy());
            if entry.file_type().unwrap().is_dir() {
                dirs.push(path);
            } else if path.ends_with(".md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}

/// The list of cobble's own layer fields is generated from the parser (`scripts/gen-docs`)
/// into every page that has its markers, and is current in each; the extensions page and
/// the guide to moving back to Pebble have it.
#[test]
fn the_lists_of_cobbles_own_fields_are_what_the_parser_generates() {
    let mut with_list = Vec::new();
    for page in markdown_pages() {
        let text = read(&page);
        let Some(fresh) = cobble_plan::fields::refresh_own_fields(&page, &text) else {
            continue;
        };
        assert!(
            fresh == text,
            "the list of cobble's own fields in {page} is not current; run scripts/gen-docs"
        );
        with_list.push(page);
    }
    for page in ["docs/extensions.md", "docs/how-to/pebble-to-cobble.md"] {
        assert!(
            with_list.iter().any(|p| p == page),
            "{page} has no generated list of cobble's own fields: {with_list:?}"
        );
    }
}

/// GitHub's anchor for a Markdown heading's text.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Each of cobble's own fields has its section in the extensions page (where the generated
/// list links), and in the layer reference exactly those fields are marked **cobble**.
#[test]
fn every_own_field_has_its_section_and_its_mark() {
    let own = cobble_plan::fields::own_fields();
    assert!(own.len() >= 10, "{own:?}");
    let extensions = read("docs/extensions.md");
    let anchors: BTreeSet<String> = extensions
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(anchor)
        .collect();
    let reference = read("docs/reference/layer.md");
    for section in cobble_plan::fields::ENTRY_SECTIONS {
        let table = part(&reference, &format!("## {section}")).unwrap();
        for field in cobble_plan::fields::parser_fields(section) {
            let is_own = own.iter().any(|f| f.section == section && f.name == *field);
            if is_own {
                assert!(
                    anchors.contains(*field),
                    "docs/extensions.md has no \"## `{field}`\" section"
                );
            }
            let row = table
                .lines()
                .find(|l| l.starts_with(&format!("| `{field}` |")))
                .unwrap_or_else(|| panic!("{section}.{field} has no row in the layer reference"));
            assert_eq!(
                row.contains("**cobble**"),
                is_own,
                "the layer reference's row for {section}.{field} is marked **cobble** exactly \
                 when it is cobble's own field: {row}"
            );
        }
    }
}
